// Cache bundles: round trip, one damaged entry among intact ones, and files that are not whole
// bundles.
#include "cache/bundle.hpp"

#include "cache_test_util.hpp"

#include <kjit/error.hpp>

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kjit::cache {
namespace {

using namespace kjit::cache::testing;

std::vector<std::string> encoded(std::initializer_list<int> ids) {
  std::vector<std::string> out;
  for (int i : ids) out.push_back(encode(sample_entry(i, 300 + 17 * i)));
  return out;
}

TEST(Bundle, RoundTripsEveryEntry) {
  const std::string bundle = encode_bundle(encoded({1, 2, 3}));
  const BundleContents c = decode_bundle(bundle);
  EXPECT_EQ(c.count, 3u);
  EXPECT_TRUE(c.problems.empty());
  ASSERT_EQ(c.entries.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    const Entry want = sample_entry(i + 1, 300 + 17 * (i + 1));
    EXPECT_EQ(c.entries[i].key, want.key);
    EXPECT_EQ(c.entries[i].payload, want.payload);
    EXPECT_EQ(c.entries[i].meta.family, want.meta.family);
  }
  EXPECT_EQ(decode_bundle(encode_bundle({})).entries.size(), 0u);
}

TEST(Bundle, ADamagedEntryIsReportedAndTheRestSurvive) {
  std::vector<std::string> parts = encoded({4, 5, 6});
  parts[1][parts[1].size() - 3] ^= 0x5a;  // a payload byte of the second entry
  const BundleContents c = decode_bundle(encode_bundle(parts));
  ASSERT_EQ(c.problems.size(), 1u);
  EXPECT_NE(c.problems[0].find("entry 2 of 3"), std::string::npos) << c.problems[0];
  EXPECT_NE(c.problems[0].find("checksum"), std::string::npos) << c.problems[0];
  ASSERT_EQ(c.entries.size(), 2u);
  EXPECT_EQ(c.entries[0].key, key_for(4));
  EXPECT_EQ(c.entries[1].key, key_for(6));
}

TEST(Bundle, RejectsWhatIsNotAWholeBundle) {
  const std::string bundle = encode_bundle(encoded({7, 8}));
  auto expect_error = [](std::string_view bytes, const char* needle) {
    try {
      decode_bundle(bytes);
      ADD_FAILURE() << "accepted; wanted '" << needle << "'";
    } catch (const CacheError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error("", "bad magic");
  expect_error(std::string("KJITCUBN") + bundle.substr(8), "bad magic");  // an entry, not a bundle
  std::string version = bundle;
  version[8] = 9;
  expect_error(version, "format version");
  expect_error(std::string_view(bundle).substr(0, bundle.size() - 1), "truncated in entry 2 of 2");
  expect_error(std::string_view(bundle).substr(0, 24), "truncated in entry 1 of 2");
  expect_error(bundle + "x", "trailing bytes");
  std::string huge_count = bundle;
  huge_count[19] = 0x7f;  // claims ~2^62 entries
  expect_error(huge_count, "truncated");
}

}  // namespace
}  // namespace kjit::cache
