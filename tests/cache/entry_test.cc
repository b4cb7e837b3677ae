// The entry format: exact round trips, and every damaged byte string rejected with a reason.

#include "cache/entry.hpp"

#include "cache_test_util.hpp"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstring>
#include <random>
#include <string>

namespace kjit::cache {
namespace {

using testing::sample_entry;

void expect_same(const Entry& a, const Entry& b) {
  EXPECT_EQ(a.key, b.key);
  EXPECT_EQ(a.payload, b.payload);
  EXPECT_EQ(a.meta.family, b.meta.family);
  EXPECT_EQ(a.meta.template_args, b.meta.template_args);
  EXPECT_EQ(a.meta.target, b.meta.target);
  EXPECT_EQ(a.meta.ptx, b.meta.ptx);
  EXPECT_EQ(a.meta.options, b.meta.options);
  EXPECT_EQ(a.meta.nvrtc_version, b.meta.nvrtc_version);
  EXPECT_EQ(a.meta.cuda_headers_version, b.meta.cuda_headers_version);
  EXPECT_EQ(a.meta.source_name, b.meta.source_name);
  EXPECT_DOUBLE_EQ(a.meta.compile_ms, b.meta.compile_ms);
  EXPECT_EQ(a.meta.created_unix, b.meta.created_unix);
  ASSERT_EQ(a.meta.inputs.size(), b.meta.inputs.size());
  for (size_t i = 0; i < a.meta.inputs.size(); ++i) {
    EXPECT_EQ(a.meta.inputs[i].kind, b.meta.inputs[i].kind);
    EXPECT_EQ(a.meta.inputs[i].name, b.meta.inputs[i].name);
    EXPECT_EQ(a.meta.inputs[i].digest, b.meta.inputs[i].digest);
  }
  ASSERT_EQ(a.meta.kernels.size(), b.meta.kernels.size());
  for (size_t i = 0; i < a.meta.kernels.size(); ++i) {
    EXPECT_EQ(a.meta.kernels[i].name_expression, b.meta.kernels[i].name_expression);
    EXPECT_EQ(a.meta.kernels[i].lowered_name, b.meta.kernels[i].lowered_name);
    EXPECT_EQ(a.meta.kernels[i].registers, b.meta.kernels[i].registers);
    EXPECT_EQ(a.meta.kernels[i].spill_bytes, b.meta.kernels[i].spill_bytes);
    EXPECT_EQ(a.meta.kernels[i].static_smem, b.meta.kernels[i].static_smem);
  }
}

void put_le(std::string& s, size_t offset, uint64_t v, int width) {
  for (int i = 0; i < width; ++i) s[offset + static_cast<size_t>(i)] = static_cast<char>((v >> (8 * i)) & 0xff);
}

/// Hand-built entry bytes with a correct checksum, to reach the checks behind it.
std::string raw_entry(const Key& key, const std::string& meta, const std::string& payload) {
  std::string s(52, '\0');
  std::memcpy(s.data(), "KJITCUBN", 8);
  put_le(s, 8, kFormatVersion, 4);
  put_le(s, 12, key.hi, 8);
  put_le(s, 20, key.lo, 8);
  put_le(s, 28, meta.size(), 8);
  put_le(s, 36, payload.size(), 8);
  s += meta;
  s += payload;
  put_le(s, 44, XXH3_64bits(s.data() + 52, s.size() - 52), 8);
  return s;
}

TEST(Entry, RoundTrip) {
  Entry e = sample_entry(1, 300);
  e.payload[7] = '\0';  // cubins are binary
  e.meta.ptx = true;
  e.meta.kernels.push_back({"other<1>", "_Z5otherILi1EEvv", 32, 8, 0});
  const std::string bytes = encode(e);
  ASSERT_EQ(bytes.substr(0, 8), "KJITCUBN");
  std::string why = "stale";
  auto back = decode(bytes, &e.key, &why);
  ASSERT_TRUE(back.has_value()) << why;
  EXPECT_EQ(why, "");
  expect_same(*back, e);
  // Without an expected key the stored one is returned.
  back = decode(bytes, nullptr, nullptr);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->key, e.key);
}

TEST(Entry, HeaderLayoutMatchesTheTable) {
  const Entry e = sample_entry(2, 10);
  const std::string bytes = encode(e);
  auto le = [&](size_t off, int width) {
    uint64_t v = 0;
    for (int i = width - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(bytes[off + static_cast<size_t>(i)]);
    return v;
  };
  EXPECT_EQ(le(8, 4), kFormatVersion);
  EXPECT_EQ(le(12, 8), e.key.hi);
  EXPECT_EQ(le(20, 8), e.key.lo);
  const uint64_t m = le(28, 8);
  EXPECT_EQ(le(36, 8), 10u);
  EXPECT_EQ(bytes.size(), 52 + m + 10);
  EXPECT_EQ(le(44, 8), XXH3_64bits(bytes.data() + 52, m + 10));
  EXPECT_EQ(bytes[52], '{');  // JSON metadata
  EXPECT_EQ(bytes.substr(52 + m), e.payload);
}

TEST(Entry, EmptyMetaAndPayloadRoundTrip) {
  Entry e;
  const std::string bytes = encode(e);
  auto back = decode(bytes, &e.key, nullptr);
  ASSERT_TRUE(back.has_value());
  EXPECT_TRUE(back->payload.empty());
  EXPECT_TRUE(back->meta.kernels.empty());
  EXPECT_EQ(back->meta.compile_ms, 0);
}

TEST(Entry, InvalidUtf8InMetadataDoesNotThrow) {
  Entry e = sample_entry(3, 4);
  e.meta.options.push_back("-DX=\xff\xfe");
  std::string bytes;
  ASSERT_NO_THROW(bytes = encode(e));
  std::string why;
  EXPECT_TRUE(decode(bytes, &e.key, &why).has_value()) << why;
}

TEST(Entry, KeyMismatchIsRejected) {
  const Entry e = sample_entry(4, 16);
  const Key other = testing::key_for(5);
  std::string why;
  EXPECT_FALSE(decode(encode(e), &other, &why).has_value());
  EXPECT_EQ(why, "key mismatch");
}

TEST(Entry, EveryTruncationIsRejected) {
  const Entry e = sample_entry(6, 24);
  const std::string bytes = encode(e);
  for (size_t n = 0; n < bytes.size(); ++n) {
    std::string why;
    // A copy of exactly n bytes, so an over-read is visible to sanitizers.
    const std::string cut = bytes.substr(0, n);
    EXPECT_FALSE(decode(cut, &e.key, &why).has_value()) << "length " << n;
    EXPECT_EQ(why, "truncated") << "length " << n;
    EXPECT_FALSE(decode(cut, nullptr, &why).has_value()) << "length " << n;
  }
}

TEST(Entry, TrailingBytesAreRejected) {
  const Entry e = sample_entry(7, 24);
  std::string why;
  EXPECT_FALSE(decode(encode(e) + "x", &e.key, &why).has_value());
  EXPECT_EQ(why, "trailing bytes");
}

TEST(Entry, EverySingleBitFlipIsRejected) {
  const Entry e = sample_entry(8, 24);
  const std::string bytes = encode(e);
  for (size_t byte = 0; byte < bytes.size(); ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string flipped = bytes;
      flipped[byte] = static_cast<char>(flipped[byte] ^ (1 << bit));
      std::string why;
      ASSERT_FALSE(decode(flipped, &e.key, &why).has_value()) << "byte " << byte << " bit " << bit;
      std::string expected;
      if (byte < 8) {
        expected = "bad magic";
      } else if (byte < 12) {
        expected = "format version";
      } else if (byte < 28) {
        expected = "key mismatch";
      } else if (byte < 44) {
        expected = "";  // a size field: "truncated" or "trailing bytes"
      } else {
        expected = "checksum mismatch";
      }
      if (expected.empty()) {
        EXPECT_TRUE(why == "truncated" || why == "trailing bytes") << "byte " << byte << ": " << why;
      } else {
        EXPECT_EQ(why.substr(0, expected.size()), expected) << "byte " << byte << " bit " << bit;
      }
    }
  }
}

TEST(Entry, VersionMismatchNamesBothVersions) {
  const Entry e = sample_entry(9, 8);
  std::string bytes = encode(e);
  put_le(bytes, 8, 0, 4);
  std::string why;
  EXPECT_FALSE(decode(bytes, &e.key, &why).has_value());
  EXPECT_EQ(why, "format version 0 != " + std::to_string(kFormatVersion));
}

TEST(Entry, HugeSizesInTheHeaderAreRejected) {
  const Entry e = sample_entry(10, 8);
  const std::string good = encode(e);
  const uint64_t huge[] = {~uint64_t{0}, ~uint64_t{0} - 51, uint64_t{1} << 63, uint64_t{1} << 40};
  for (uint64_t m : huge) {
    for (int field : {28, 36}) {
      std::string bytes = good;
      put_le(bytes, static_cast<size_t>(field), m, 8);
      std::string why;
      EXPECT_FALSE(decode(bytes, &e.key, &why).has_value());
      EXPECT_EQ(why, "truncated") << "field " << field << " value " << m;
    }
    // Both sizes huge: their sum wraps around to something small.
    std::string bytes = good;
    put_le(bytes, 28, m, 8);
    put_le(bytes, 36, (~m) + 1 + (good.size() - 52), 8);
    std::string why;
    EXPECT_FALSE(decode(bytes, &e.key, &why).has_value());
    EXPECT_FALSE(why.empty());
  }
}

TEST(Entry, BadMetadataBehindAValidChecksum) {
  const Key k = testing::key_for(11);
  struct Case {
    const char* meta;
    const char* why;
  };
  const Case cases[] = {
      {"", "bad metadata: not valid JSON"},
      {"{\"family\": ", "bad metadata: not valid JSON"},
      {"[1, 2]", "bad metadata: not a JSON object"},
      {"{\"family\": 3}", "bad metadata: 'family' is not a string"},
      {"{\"ptx\": \"yes\"}", "bad metadata: 'ptx' is not a boolean"},
      {"{\"options\": [1]}", "bad metadata: 'options' holds a non-string"},
      {"{\"kernels\": [{\"registers\": 1e3}]}", "bad metadata: 'registers' is not an integer"},
      {"{\"kernels\": [{\"registers\": 99999999999}]}", "bad metadata: 'registers' is out of range"},
      {"{\"created_unix\": 18446744073709551615}", "bad metadata: 'created_unix' is out of range"},
      {"{\"kernels\": {}}", "bad metadata: 'kernels' is not an array"},
      {"{\"inputs\": {}}", "bad metadata: 'inputs' is not an array"},
      {"{\"inputs\": [[\"file\", \"x.h\"]]}", "bad metadata: 'inputs' holds something other than [kind, name, digest]"},
      {"{\"inputs\": [[\"file\", \"x.h\", 7]]}", "bad metadata: 'inputs' holds something other than [kind, name, digest]"},
  };
  for (const Case& c : cases) {
    std::string why;
    EXPECT_FALSE(decode(raw_entry(k, c.meta, "payload"), &k, &why).has_value()) << c.meta;
    EXPECT_EQ(why, c.why) << c.meta;
  }
  // Fields this version does not know are ignored, missing ones keep their defaults.
  std::string why;
  auto e = decode(raw_entry(k, "{\"future\": [1], \"target\": \"sm_89\"}", "p"), &k, &why);
  ASSERT_TRUE(e.has_value()) << why;
  EXPECT_EQ(e->meta.target, "sm_89");
  EXPECT_EQ(e->meta.family, "");
  EXPECT_TRUE(e->meta.inputs.empty());  // an entry written before entries recorded their files
  EXPECT_EQ(e->payload, "p");
}

TEST(Entry, RandomGarbageNeverCrashes) {
  std::mt19937_64 rng(12345);
  const Entry e = sample_entry(12, 64);
  const std::string good = encode(e);
  for (int round = 0; round < 3000; ++round) {
    std::string bytes;
    switch (round % 3) {
      case 0: {  // pure noise
        bytes.resize(rng() % 300);
        for (char& c : bytes) c = static_cast<char>(rng());
        break;
      }
      case 1: {  // a plausible header followed by noise
        bytes = good.substr(0, 28);
        bytes.resize(28 + rng() % 300);
        for (size_t i = 28; i < bytes.size(); ++i) bytes[i] = static_cast<char>(rng());
        break;
      }
      default: {  // a real entry with a few random bytes overwritten
        bytes = good;
        for (int k = 0; k < 1 + static_cast<int>(rng() % 4); ++k) {
          bytes[rng() % bytes.size()] = static_cast<char>(rng());
        }
        if (bytes == good) continue;
      }
    }
    std::string why;
    const bool ok = decode(bytes, nullptr, &why).has_value();
    EXPECT_FALSE(ok && round % 3 != 2) << "noise decoded, round " << round;
    if (!ok) {
      EXPECT_FALSE(why.empty()) << "round " << round;
    }
    EXPECT_FALSE(decode(bytes, &e.key, &why).has_value()) << "round " << round;
  }
}

}  // namespace
}  // namespace kjit::cache
