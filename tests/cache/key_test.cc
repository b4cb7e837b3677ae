// The specialization key: stable bytes, sensitive to every field, unambiguous framing.

#include "cache/key.hpp"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

namespace kjit::cache {
namespace {

using Fields = std::vector<std::pair<std::string, std::string>>;

Key key_of(const Fields& fields) {
  KeyBuilder b;
  for (const auto& [name, value] : fields) b.add(name, value);
  return b.finish();
}

const Fields kSample = {
    {"source", "template <int D> __global__ void k() {}"},
    {"name_expression", "k<128>"},
    {"target", "sm_90a"},
    {"nvrtc", "13.0"},
    {"options", "-std=c++17 -DKJIT_X=1"},
};

TEST(Key, GoldenValueIsPinned) {
  // Pinned once from this implementation. If it changes, every cache on disk is orphaned: bump
  // kFormatVersion on purpose, then update this value.
  EXPECT_EQ(key_of(kSample).hex(), "2165ef4563ed7b8de793420cb72477e2");
}

TEST(Key, SameInputsSameKey) {
  EXPECT_EQ(key_of(kSample), key_of(kSample));
  EXPECT_EQ(KeyBuilder().add("n", int64_t{42}).finish(), KeyBuilder().add("n", int64_t{42}).finish());
}

TEST(Key, SerializationIsCanonical) {
  KeyBuilder b;
  b.add("ab", "xyz");
  const std::string expected = std::string("\x01\x00\x00\x00", 4) +   // kFormatVersion
                               std::string("\x02\x00\x00\x00", 4) + "ab" +
                               std::string("\x03\x00\x00\x00\x00\x00\x00\x00", 8) + "xyz";
  EXPECT_EQ(b.bytes(), expected);
  KeyBuilder i;
  i.add("n", int64_t{-7});
  EXPECT_EQ(i.bytes().substr(4 + 4 + 1 + 8), "-7");
}

TEST(Key, EveryNameValueAndOrderChangeMatters) {
  const Key base = key_of(kSample);
  std::set<std::string> seen = {base.hex()};
  for (size_t f = 0; f < kSample.size(); ++f) {
    Fields name_changed = kSample;
    name_changed[f].first += "_";
    Fields value_changed = kSample;
    value_changed[f].second += " ";
    EXPECT_TRUE(seen.insert(key_of(name_changed).hex()).second) << "name of field " << f;
    EXPECT_TRUE(seen.insert(key_of(value_changed).hex()).second) << "value of field " << f;
  }
  Fields swapped = kSample;
  std::swap(swapped[0], swapped[1]);
  EXPECT_NE(key_of(swapped), base);
  Fields dropped(kSample.begin(), kSample.end() - 1);
  EXPECT_NE(key_of(dropped), base);
  EXPECT_NE(KeyBuilder().finish(), KeyBuilder().add("", "").finish());
}

TEST(Key, LengthPrefixesSeparateFields) {
  EXPECT_NE(KeyBuilder().add("a", "bc").finish(), KeyBuilder().add("ab", "c").finish());
  EXPECT_NE(KeyBuilder().add("a", "b").add("c", "d").finish(),
            KeyBuilder().add("a", std::string("b\x01\x00\x00\x00" "c", 6)).finish());
  EXPECT_NE(KeyBuilder().add("x", "").add("", "x").finish(), KeyBuilder().add("x", "x").finish());
}

TEST(Key, HexRoundTrip) {
  const Key k = key_of(kSample);
  const std::string hex = k.hex();
  ASSERT_EQ(hex.size(), 32u);
  Key back;
  ASSERT_TRUE(Key::from_hex(hex, &back));
  EXPECT_EQ(back, k);

  const Key edge{0x0123456789abcdefull, 0xfedcba9876543210ull};
  EXPECT_EQ(edge.hex(), "0123456789abcdeffedcba9876543210");
  ASSERT_TRUE(Key::from_hex(edge.hex(), &back));
  EXPECT_EQ(back, edge);
  EXPECT_EQ(Key{}.hex(), std::string(32, '0'));
}

TEST(Key, FromHexRejectsBadText) {
  const std::string good = key_of(kSample).hex();
  const Key sentinel{1, 2};
  for (const std::string& bad :
       {std::string(), good.substr(1), good + "0", std::string(32, 'g'), std::string(32, 'F'),
        " " + good.substr(1), good.substr(0, 31) + "-", good.substr(0, 16) + std::string(1, '\0') +
                                                              good.substr(17),
        std::string("0x") + good.substr(2)}) {
    Key out = sentinel;
    EXPECT_FALSE(Key::from_hex(bad, &out)) << bad;
    EXPECT_EQ(out, sentinel) << "output written on failure for " << bad;
  }
}

TEST(Key, HashSpreadsKeys) {
  std::set<size_t> hashes;
  for (int i = 0; i < 1000; ++i) hashes.insert(KeyHash()(KeyBuilder().add("i", int64_t{i}).finish()));
  EXPECT_EQ(hashes.size(), 1000u);
}

}  // namespace
}  // namespace kjit::cache
