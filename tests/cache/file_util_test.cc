// Special files where the cache expects regular ones (issue 26, item 4): a FIFO, socket or device
// at any path the cache reads, appends to or locks is refused at once with one warning naming
// it, and the work goes on. Each call that could block runs in a child with a watchdog.
#include "cache/file_util.hpp"

#include "cache/hits.hpp"
#include "cache/manifest.hpp"
#include "cache/store.hpp"
#include "cache/tune_table.hpp"
#include "cache_test_util.hpp"

#include <kjit/error.hpp>

#include <gtest/gtest.h>

#include <sys/socket.h>
#include <sys/un.h>

#include <cstring>
#include <string>

namespace kjit::cache {
namespace {

using namespace kjit::cache::testing;

/// How many times `needle` occurs in `hay`.
size_t count(const std::string& hay, const std::string& needle) {
  size_t n = 0;
  for (size_t at = hay.find(needle); at != std::string::npos; at = hay.find(needle, at + 1)) ++n;
  return n;
}

void make_fifo(const std::string& path) { ASSERT_EQ(::mkfifo(path.c_str(), 0644), 0) << path << ": " << std::strerror(errno); }

TEST(OpenRegular, RefusesFifosSocketsAndDevicesWithoutBlockingAndWarnsOncePerPath) {
  TempDir dir;
  const std::string fifo = dir.path() + "/fifo";
  make_fifo(fifo);
  TempDir short_dir("/tmp");  // a socket's path must fit sockaddr_un (108 bytes)
  const std::string sock = short_dir.path() + "/sock";
  const int s = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, sock.c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(::bind(s, reinterpret_cast<const sockaddr*>(&addr), sizeof addr), 0) << sock;
  const std::string err = dir.path() + "/stderr";
  const int rc = in_child(10, err, [&] {
    for (const std::string& path : {fifo, sock, std::string("/dev/null")}) {
      for (int flags : {O_RDONLY, O_RDWR, O_WRONLY | O_APPEND | O_CREAT, O_RDWR | O_CREAT}) {
        int fd = -1;
        if (detail::open_regular(path, flags, &fd) != detail::kNotRegularFile || fd != -1) return 1;
      }
      std::string text;
      if (detail::read_file(path, 1 << 20, detail::kReadPlain, &text) != detail::kNotRegularFile) return 2;
    }
    return 0;
  });
  ::close(s);
  EXPECT_EQ(rc, 0) << "142: blocked";
  const std::string warnings = read_all(err);
  EXPECT_EQ(count(warnings, fifo + " is a FIFO"), 1u) << warnings;
  EXPECT_EQ(count(warnings, sock + " is a socket"), 1u) << warnings;
  EXPECT_EQ(count(warnings, "/dev/null is a character device"), 1u) << warnings;
  EXPECT_EQ(count(warnings, "kjit: warning: "), 3u) << warnings;
  // A regular file opens as asked, and blocking again (O_NONBLOCK is only for the open).
  const std::string plain = dir.path() + "/plain";
  int fd = -1;
  ASSERT_EQ(detail::open_regular(plain, O_RDWR | O_CREAT, &fd), 0);
  EXPECT_EQ(::fcntl(fd, F_GETFL) & O_NONBLOCK, 0);
  ::close(fd);
  EXPECT_EQ(detail::open_regular(dir.path(), O_RDONLY, &fd), EISDIR);
  EXPECT_EQ(detail::open_regular(dir.path() + "/missing", O_RDONLY, &fd), ENOENT);
}

TEST(OpenRegular, AFifoAsTheHitsLogBlocksNeitherDiskHitsNorListing) {
  TempDir dir;
  const Entry e = sample_entry(1);
  {
    DiskCache cache(dir.path(), 0, true);
    cache.publish(e);
  }
  DiskCache cache(dir.path(), 0, true);
  const std::string log = cache.root() + "/hits.log";
  ::unlink(log.c_str());
  make_fifo(log);
  const std::string err = dir.path() + "/stderr";
  const int rc = in_child(10, err, [&] {
    if (!cache.lookup(e.key)) return 1;  // a disk hit appends to hits.log
    if (!cache.lookup(e.key)) return 2;
    cache.fold_hits();  // what `kjit cache ls` does first
    if (cache.list().size() != 1) return 3;
    clear_hits(cache.root());
    return 0;
  });
  EXPECT_EQ(rc, 0) << "142: blocked\n" << read_all(err);
  const std::string warnings = read_all(err);
  EXPECT_EQ(count(warnings, log + " is a FIFO"), 1u) << warnings;
  EXPECT_EQ(count(warnings, "kjit: warning: "), 1u) << warnings;
}

TEST(OpenRegular, FifosAsLocksTablesAndManifestsBlockNothing) {
  TempDir dir;
  const Entry e = sample_entry(2);
  DiskCache cache(dir.path(), 0, true);
  ASSERT_EQ(detail::make_dirs(cache.root() + "/locks"), 0);
  make_fifo(cache.root() + "/locks/" + e.key.hex() + ".lock");
  make_fifo(cache.root() + "/usage");
  ASSERT_EQ(detail::make_dirs(tuning_dir(dir.path())), 0);
  make_fifo(tuning_dir(dir.path()) + "/aaaaaaaaaaaa.lock");
  make_fifo(table_path(dir.path(), "bbbbbbbbbbbb"));
  const std::string manifest = dir.path() + "/manifest.jsonl";
  make_fifo(manifest);
  const std::string err = dir.path() + "/stderr";
  const int rc = in_child(10, err, [&] {
    { KeyLock lock = cache.lock(e.key); }  // unlocked, warned: the compile still goes on
    cache.publish(e);
    if (!cache.lookup(e.key)) return 1;
    if (cache.recorded_usage()) return 2;
    try {
      publish_table(dir.path(), TuneTable{"aaaaaaaaaaaa", "", {}, {}});
      return 3;  // the lock could not be opened: an error naming it, not a hang
    } catch (const CacheError&) {
    }
    TuneTable t;
    try {
      read_table(table_path(dir.path(), "bbbbbbbbbbbb"), &t);
      return 4;
    } catch (const CacheError&) {
    }
    ManifestEntry m;
    m.family = "rotary";
    m.target = "sm_90a";
    if (append_manifest_line(manifest, format_manifest_line(m)) != detail::kNotRegularFile) return 5;
    return 0;
  });
  EXPECT_EQ(rc, 0) << "142: blocked\n" << read_all(err);
}

// A cache folder not created yet counts as writable when the first publish could create it.
TEST(WritableOrCreatable, AnswersForTheNearestExistingFolder) {
  TempDir dir;
  EXPECT_EQ(detail::writable_or_creatable(dir.path()), 0);
  EXPECT_EQ(detail::writable_or_creatable(dir.path() + "/not/yet/made/"), 0);
  const std::string file = dir.path() + "/file";
  ASSERT_TRUE(detail::write_file_atomic(file, "x") == 0);
  EXPECT_EQ(detail::writable_or_creatable(file), ENOTDIR);
  EXPECT_EQ(detail::writable_or_creatable(file + "/below/it"), ENOTDIR);
  EXPECT_EQ(detail::writable_or_creatable(""), ENOENT);
  ASSERT_EQ(::chmod(dir.path().c_str(), 0500), 0);
  // Root writes anywhere; for anyone else a read-only ancestor makes the folder uncreatable.
  if (::geteuid() != 0) EXPECT_EQ(detail::writable_or_creatable(dir.path() + "/new"), EACCES);
  ASSERT_EQ(::chmod(dir.path().c_str(), 0700), 0);
  // Nothing was created on the way.
  struct stat st;
  EXPECT_NE(::stat((dir.path() + "/not").c_str(), &st), 0);
  // A kernel pseudo filesystem takes no new folder, whatever access(2) tells root.
  // (EPERM, or EROFS where the container mounts it read-only.)
  if (::stat("/proc/self", &st) == 0) EXPECT_NE(detail::writable_or_creatable("/proc/kjit-cache/v1"), 0);
  if (::stat("/sys/kernel", &st) == 0) EXPECT_NE(detail::writable_or_creatable("/sys/kernel/kjit-cache"), 0);
}

}  // namespace
}  // namespace kjit::cache
