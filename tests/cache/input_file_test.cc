// Files a person names (manifests, bundles, tune reports): read whole, or refused with exactly
// one message naming the role, the path and the reason, and no warning before it. A FIFO is
// refused without being opened (reading one blocks until a writer comes).
#include "cache/input_file.hpp"

#include "cache_test_util.hpp"

#include <kjit/error.hpp>

#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cstring>
#include <fstream>
#include <string>

namespace kjit::cache {
namespace {

using namespace kjit::cache::testing;

/// The message read_input_file(path, "manifest", max_bytes) refuses with, and (in *err) what it
/// wrote to stderr meanwhile; "" when it read the file.
std::string refusal(const std::string& path, uint64_t max_bytes, std::string* err) {
  ::testing::internal::CaptureStderr();
  std::string what;
  try {
    read_input_file(path, "manifest", max_bytes);
  } catch (const InvalidArgument& e) {
    what = e.what();
  }
  *err = ::testing::internal::GetCapturedStderr();
  return what;
}

TEST(ReadInputFile, ReadsARegularFileWhole) {
  TempDir dir;
  const std::string path = dir.path() + "/m.jsonl";
  std::ofstream(path, std::ios::binary) << std::string("a\0b\n", 4);
  EXPECT_EQ(read_input_file(path, "manifest", 4), std::string("a\0b\n", 4));
}

TEST(ReadInputFile, RefusesWithOneMessageNamingRolePathAndReason) {
  TempDir dir;
  const std::string fifo = dir.path() + "/fifo", big = dir.path() + "/big", missing = dir.path() + "/nope";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0) << std::strerror(errno);
  std::ofstream(big) << std::string(2u << 20, 'x');
  std::string err;
  // Refused by path, never opened: with a FIFO a read would block this test forever.
  EXPECT_EQ(refusal(fifo, 1 << 30, &err), "manifest " + fifo + " is not a regular file (a FIFO, socket or device)");
  EXPECT_EQ(err, "") << "the refusal is the only message (no 'goes on without it' warning first)";
  EXPECT_EQ(refusal(dir.path(), 1 << 30, &err), "manifest " + dir.path() + " is a folder, not a file");
  EXPECT_EQ(err, "");
  EXPECT_EQ(refusal(missing, 1 << 30, &err), "cannot read manifest " + missing + ": No such file or directory");
  EXPECT_EQ(err, "");
  EXPECT_EQ(refusal(big, 1 << 20, &err), "manifest " + big + " is larger than the 1 MiB kjit reads for a manifest");
  EXPECT_EQ(err, "");
}

}  // namespace
}  // namespace kjit::cache
