// The fallback log (cache/fallback_log.hpp): records round-trip, are found by the missing key,
// damaged or foreign lines are skipped, a record that would break the line format is not
// written, and `clear` empties the log with the entries.
#include "cache/fallback_log.hpp"
#include "cache/store.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace fs = std::filesystem;
using namespace kjit::cache;

namespace {

Key key_of(int i) { return KeyBuilder().add("fallback-log-test", int64_t{i}).finish(); }

class FallbackLog : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kjit-fallback-log-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(FallbackLog, RecordsRoundTripByTheMissingKey) {
  const std::string root = dir_.string();
  record_fallback(root, {key_of(1), key_of(2), 1700000000, "attention.decode", "head_dim=128 rows=8"});
  record_fallback(root, {key_of(3), key_of(4), 1700000001, "fp8.gemm", "impl=mma a=e4m3"});
  record_fallback(root, {key_of(1), key_of(5), 1700000002, "attention.decode", "head_dim=128 rows=16"});
  const std::vector<FallbackRecord> got = read_fallbacks(root, key_of(1));
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].missing, key_of(1));
  EXPECT_EQ(got[0].fallback, key_of(2));
  EXPECT_EQ(got[0].unix, 1700000000);
  EXPECT_EQ(got[0].family, "attention.decode");
  EXPECT_EQ(got[0].params, "head_dim=128 rows=8");
  EXPECT_EQ(got[1].fallback, key_of(5));
  EXPECT_EQ(read_fallbacks(root, key_of(3)).size(), 1u);
  EXPECT_TRUE(read_fallbacks(root, key_of(9)).empty());
  EXPECT_TRUE(read_fallbacks((dir_ / "none").string(), key_of(1)).empty()) << "no log: no records";
}

TEST_F(FallbackLog, DamagedLinesAndUnwritableRecordsAreSkipped) {
  const std::string root = dir_.string();
  const std::string k1 = key_of(1).hex(), k2 = key_of(2).hex();
  {
    std::ofstream log(dir_ / "fallbacks.log");
    log << k1 << " nothex 1 attention.decode head_dim=128\n";   // a bad fallback key
    log << k1 << " " << k2 << " 12x attention.decode rows=8\n";  // a bad time
    log << k1 << " " << k2 << " 5\n";                            // no family
    log << k1 << " " << k2 << " 7 attention.decode head_dim=64 rows=8\n";
    log << k1 << " " << k2 << " 8 attention.decode torn";        // no newline: still being written
  }
  std::vector<FallbackRecord> got = read_fallbacks(root, key_of(1));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].unix, 7);
  EXPECT_EQ(got[0].params, "head_dim=64 rows=8");
  // A family with a blank or params with a newline would break the format: not written.
  fs::remove(dir_ / "fallbacks.log");
  record_fallback(root, {key_of(1), key_of(2), 1, "bad family", "x"});
  record_fallback(root, {key_of(1), key_of(2), 1, "f", "a\nb"});
  EXPECT_TRUE(read_fallbacks(root, key_of(1)).empty());
}

TEST_F(FallbackLog, ClearEmptiesItWithTheEntries) {
  DiskCache cache((dir_ / "cache").string(), 0);
  record_fallback(cache.root(), {key_of(1), key_of(2), 1, "attention.decode", "head_dim=128 rows=8"});
  ASSERT_EQ(read_fallbacks(cache.root(), key_of(1)).size(), 1u);
  cache.clear();
  EXPECT_TRUE(read_fallbacks(cache.root(), key_of(1)).empty());
}

}  // namespace
