// The disk cache: publish/lookup, damaged entries, unusable roots, LRU cap, cross-process
// single compile, housekeeping.

#include "cache/store.hpp"

#include "cache_test_util.hpp"

#include <kjit/error.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace kjit::cache {
namespace {

namespace fs = std::filesystem;
using testing::exists;
using testing::key_for;
using testing::mtime_of;
using testing::read_all;
using testing::sample_entry;
using testing::set_mtime;
using testing::TempDir;
using testing::write_all;

/// Every test opens its cache at <tmp>/cache, so the tree below it is all the cache's own.
std::string cache_dir(const TempDir& dir) { return dir.path() + "/cache"; }

std::string v_root(const TempDir& dir) {
  return cache_dir(dir) + "/v" + std::to_string(kFormatVersion);
}

std::string path_for(const TempDir& dir, const Key& key) {
  const std::string hex = key.hex();
  return v_root(dir) + "/" + hex.substr(0, 2) + "/" + hex + ".kjit";
}

size_t count_substr(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t pos = text.find(needle); pos != std::string::npos; pos = text.find(needle, pos + 1)) ++n;
  return n;
}

/// Every file under `root` that is neither an entry nor a lock file.
std::vector<std::string> stray_files(const std::string& root) {
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    if (e.is_directory()) continue;
    const std::string name = e.path().filename().string();
    const bool entry = name.size() == 37 && name.substr(32) == ".kjit";
    const bool lock = e.path().parent_path().filename() == "locks" && name.size() > 5 &&
                      name.substr(name.size() - 5) == ".lock";
    const bool usage = name == "usage" && e.path().parent_path() == fs::path(root) / "v1";
    // The hit counts (cache/hits.hpp): the log of disk hits and its folded totals.
    const bool hits = (name == "hits.log" || name == "hits.json") && e.path().parent_path() == fs::path(root) / "v1";
    if (!entry && !lock && !usage && !hits) out.push_back(e.path().string());
  }
  return out;
}

TEST(Store, PublishThenLookup) {
  TempDir dir;
  DiskCache cache(cache_dir(dir), 0);
  ASSERT_TRUE(cache.enabled());
  EXPECT_EQ(cache.root(), v_root(dir));

  const Entry e = sample_entry(1);
  ::testing::internal::CaptureStderr();
  EXPECT_FALSE(cache.lookup(e.key).has_value());  // a plain miss is quiet
  cache.publish(e);
  auto hit = cache.lookup(e.key);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->key, e.key);
  EXPECT_EQ(hit->payload, e.payload);
  EXPECT_EQ(hit->meta.family, e.meta.family);
  EXPECT_TRUE(exists(path_for(dir, e.key)));
  EXPECT_FALSE(cache.lookup(key_for(2)).has_value());

  // A second DiskCache on the same root (another process, say) sees it too.
  DiskCache again(cache_dir(dir) + "/", 0);
  EXPECT_EQ(again.root(), v_root(dir));
  ASSERT_TRUE(again.lookup(e.key).has_value());

  const CacheStats st = cache.stats();
  EXPECT_EQ(st.entries, 1u);
  EXPECT_EQ(st.bytes, encode(e).size());
  EXPECT_EQ(st.root, v_root(dir));
  EXPECT_TRUE(st.enabled);

  const auto infos = cache.list();
  ASSERT_EQ(infos.size(), 1u);
  EXPECT_EQ(infos[0].key, e.key);
  EXPECT_EQ(infos[0].path, path_for(dir, e.key));
  EXPECT_EQ(infos[0].bytes, encode(e).size());
  ASSERT_TRUE(infos[0].meta.has_value());
  EXPECT_EQ(infos[0].meta->target, "sm_90a");
  EXPECT_EQ(infos[0].problem, "");
}

TEST(Store, RepublishReplacesEntry) {
  TempDir dir;
  DiskCache cache(cache_dir(dir), 0);
  Entry e = sample_entry(3);
  cache.publish(e);
  e.payload = "new payload";
  cache.publish(e);
  auto hit = cache.lookup(e.key);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->payload, "new payload");
  EXPECT_EQ(cache.stats().entries, 1u);
}

TEST(Store, TruncatedEntryIsAWarnedMissThenReplaced) {
  TempDir dir;
  DiskCache cache(cache_dir(dir), 0);
  const Entry e = sample_entry(4);
  cache.publish(e);
  const std::string path = path_for(dir, e.key);
  const std::string whole = read_all(path);
  write_all(path, whole.substr(0, whole.size() / 2));

  ::testing::internal::CaptureStderr();
  EXPECT_FALSE(cache.lookup(e.key).has_value());
  EXPECT_FALSE(cache.lookup(e.key).has_value());
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(err, "kjit: warning: cache entry " + path + " is corrupt (truncated); not used (the next publish of this key replaces it)\n");

  cache.publish(e);
  auto hit = cache.lookup(e.key);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->payload, e.payload);

  // Broken again after the replacement: that is new, so it is reported again.
  write_all(path, whole.substr(0, 10));
  ::testing::internal::CaptureStderr();
  EXPECT_FALSE(cache.lookup(e.key).has_value());
  EXPECT_EQ(count_substr(::testing::internal::GetCapturedStderr(), "is corrupt (truncated)"), 1u);
}

TEST(Store, BitFlippedEntryIsAMiss) {
  TempDir dir;
  DiskCache cache(cache_dir(dir), 0);
  const Entry e = sample_entry(5);
  cache.publish(e);
  const std::string path = path_for(dir, e.key);
  std::string bytes = read_all(path);
  bytes[bytes.size() - 3] ^= 0x10;
  write_all(path, bytes);
  ::testing::internal::CaptureStderr();
  EXPECT_FALSE(cache.lookup(e.key).has_value());
  EXPECT_NE(::testing::internal::GetCapturedStderr().find("(checksum mismatch)"), std::string::npos);
  const VerifyResult v = cache.verify();
  EXPECT_EQ(v.ok, 0u);
  ASSERT_EQ(v.bad, 1u);
  EXPECT_EQ(v.bad_paths[0], path + ": checksum mismatch");
}

TEST(Store, ForeignFileNamedLikeAnEntryIsAMiss) {
  TempDir dir;
  DiskCache cache(cache_dir(dir), 0);
  cache.publish(sample_entry(6));
  const Key foreign = key_for(7);
  const std::string path = path_for(dir, foreign);
  fs::create_directories(fs::path(path).parent_path());
  std::mt19937 rng(7);
  std::string noise(500, '\0');
  for (char& c : noise) c = static_cast<char>(rng());
  write_all(path, noise);

  ::testing::internal::CaptureStderr();
  EXPECT_FALSE(cache.lookup(foreign).has_value());
  EXPECT_EQ(count_substr(::testing::internal::GetCapturedStderr(), "kjit: warning: cache entry"), 1u);
  const VerifyResult v = cache.verify();
  EXPECT_EQ(v.ok, 1u);
  EXPECT_EQ(v.bad, 1u);
  ASSERT_EQ(v.bad_paths.size(), 1u);
  EXPECT_EQ(v.bad_paths[0], path + ": bad magic");

  // list() reports it with its problem instead of metadata.
  const auto infos = cache.list();
  ASSERT_EQ(infos.size(), 2u);
  const auto it = std::find_if(infos.begin(), infos.end(), [&](const EntryInfo& i) { return i.key == foreign; });
  ASSERT_NE(it, infos.end());
  EXPECT_FALSE(it->meta.has_value());
  EXPECT_EQ(it->problem, "bad magic");

  // Another key's valid entry copied under this name is foreign too.
  write_all(path, read_all(path_for(dir, key_for(6))));
  ::testing::internal::CaptureStderr();
  EXPECT_FALSE(cache.lookup(foreign).has_value());
  ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(cache.verify().bad_paths.at(0), path + ": key mismatch");
}

TEST(Store, FilesNotNamedLikeEntriesAreIgnored) {
  TempDir dir;
  DiskCache cache(cache_dir(dir), 0);
  cache.publish(sample_entry(8));
  write_all(v_root(dir) + "/README", "hello");
  fs::create_directories(v_root(dir) + "/zz");
  write_all(v_root(dir) + "/zz/" + std::string(32, 'z') + ".kjit", "x");
  // Right name, wrong shard: lookup would never find it, so it is not an entry (verify reports it
  // as a stray of the shard and prune removes it: KjitFilesThatNoLookupFindsAreReportedAndPruned).
  const std::string hex = key_for(9).hex();
  const std::string wrong_shard = hex[0] == '0' ? "11" : "00";
  fs::create_directories(v_root(dir) + "/" + wrong_shard);
  write_all(v_root(dir) + "/" + wrong_shard + "/" + hex + ".kjit", "x");
  EXPECT_EQ(cache.stats().entries, 1u);
  EXPECT_EQ(cache.list().size(), 1u);
  EXPECT_EQ(cache.verify().ok, 1u);
}

TEST(Store, RootBelowARegularFileIsMemoryOnly) {
  TempDir dir;
  write_all(dir.path() + "/file", "not a folder");
  const std::string root = dir.path() + "/file/cache";

  ::testing::internal::CaptureStderr();
  DiskCache cache(root, 1000);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(err, "kjit: warning: cache directory " + root + "/v" + std::to_string(kFormatVersion) +
                     " cannot be created (Not a directory); caching in memory only\n");
  EXPECT_FALSE(cache.enabled());

  ::testing::internal::CaptureStderr();
  const Entry e = sample_entry(10);
  EXPECT_FALSE(cache.lookup(e.key).has_value());
  EXPECT_NO_THROW(cache.publish(e));
  EXPECT_FALSE(cache.lookup(e.key).has_value());
  { KeyLock lock = cache.lock(e.key); }
  EXPECT_TRUE(cache.list().empty());
  EXPECT_EQ(cache.verify().ok + cache.verify().bad, 0u);
  EXPECT_EQ(cache.prune(), 0u);
  EXPECT_EQ(cache.clear(), 0u);
  const CacheStats st = cache.stats();
  EXPECT_FALSE(st.enabled);
  EXPECT_EQ(st.entries, 0u);
  EXPECT_EQ(st.max_bytes, 1000u);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");  // warned once, at construction

  try {
    DiskCache strict(root, 0, /*strict=*/true);
    FAIL() << "strict cache accepted an unusable root";
  } catch (const CacheError& ex) {
    const std::string what = ex.what();
    EXPECT_NE(what.find(root), std::string::npos) << what;
    EXPECT_NE(what.find("Not a directory"), std::string::npos) << what;
  }
}

/// The read-only checks, as a user without write permission sees them: `ro` is an empty,
/// unwritable folder; `img` holds a populated, unwritable versioned folder (a cache precompiled
/// into an image) with `shipped` in it. Returns what went wrong ("" when nothing did), so it can
/// run in a child process that has dropped root.
std::string read_only_failures(const std::string& ro, const std::string& img, const Entry& shipped) {
  std::string why;
  auto check = [&](bool ok, const std::string& what) {
    if (!ok) why += what + "; ";
  };
  ::testing::internal::CaptureStderr();
  DiskCache cache(ro, 0);
  const std::string err = ::testing::internal::GetCapturedStderr();
  check(!cache.enabled(), "an unwritable empty root stayed enabled");
  check(err.find("Permission denied") != std::string::npos, "no 'Permission denied' warning: " + err);
  try {
    DiskCache strict(ro, 0, true);
    check(false, "the strict open accepted an unwritable root");
  } catch (const CacheError&) {
  }
  // The image's cache: lookups still hit, publishes and locks do nothing, strict opens refuse.
  ::testing::internal::CaptureStderr();
  DiskCache cache2(img, 0);
  const std::string err2 = ::testing::internal::GetCapturedStderr();
  check(cache2.enabled(), "a read-only populated cache was disabled");
  check(!cache2.writable(), "a read-only cache claims to be writable");
  check(err2.find("reading its entries") != std::string::npos, "no 'reading its entries' warning: " + err2);
  check(cache2.lookup(shipped.key).has_value(), "the shipped entry was not served");
  cache2.publish(sample_entry(22));
  check(!cache2.lookup(sample_entry(22).key).has_value(), "a publish landed in a read-only cache");
  { KeyLock lock = cache2.lock(shipped.key); }
  try {
    DiskCache strict(img, 0, true);
    check(false, "the strict open accepted a read-only cache");
  } catch (const CacheError&) {
  }
  return why;
}

TEST(Store, ReadOnlyRootServesLookupsOnly) {
  TempDir dir;
  const std::string ro = dir.path() + "/ro";
  const std::string img = dir.path() + "/img";
  fs::create_directories(ro);
  ::chmod(ro.c_str(), 0555);
  const Entry shipped = sample_entry(21);
  DiskCache(img, 0).publish(shipped);
  const std::string vroot = img + "/v" + std::to_string(kFormatVersion);
  ::chmod(vroot.c_str(), 0555);
  if (::geteuid() != 0) {
    EXPECT_EQ(read_only_failures(ro, img, shipped), "");
  } else {
    // Root ignores permission bits: run the checks in a child that has become `nobody`.
    ::chmod(dir.path().c_str(), 0755);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(77);
      if (::access(vroot.c_str(), R_OK | X_OK) != 0) ::_exit(78);  // a parent folder is closed
      const std::string why = read_only_failures(ro, img, shipped);
      if (!why.empty()) std::fprintf(stderr, "%s\n", why.c_str());
      ::_exit(why.empty() ? 0 : 1);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    if (WEXITSTATUS(status) == 77) GTEST_SKIP() << "cannot drop root (setuid to nobody failed)";
    if (WEXITSTATUS(status) == 78) GTEST_SKIP() << "nobody cannot reach " << dir.path();
    EXPECT_EQ(WEXITSTATUS(status), 0) << "the read-only checks failed as nobody (see stderr)";
  }
  ::chmod(vroot.c_str(), 0755);
}

TEST(Store, DisabledCacheDoesNothing) {
  DiskCache cache = DiskCache::disabled();
  EXPECT_FALSE(cache.enabled());
  const Entry e = sample_entry(11);
  cache.publish(e);
  EXPECT_FALSE(cache.lookup(e.key).has_value());
  { KeyLock lock = cache.lock(e.key); }
  EXPECT_FALSE(cache.stats().enabled);
}

TEST(Store, PublishFailureWarnsOnceAndDoesNotThrow) {
  TempDir dir;
  DiskCache cache(cache_dir(dir), 0);
  const Entry a = sample_entry(12);
  // Make a's shard folder a regular file: every publish into it fails with ENOTDIR.
  const std::string shard = v_root(dir) + "/" + a.key.hex().substr(0, 2);
  write_all(shard, "blocker");
  Entry b = a;
  b.payload = "other";
  ::testing::internal::CaptureStderr();
  EXPECT_NO_THROW(cache.publish(a));
  EXPECT_NO_THROW(cache.publish(b));
  EXPECT_FALSE(cache.lookup(a.key).has_value());
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(count_substr(err, "kjit: warning: cannot write cache entry " + path_for(dir, a.key)), 1u) << err;
  EXPECT_NE(err.find("Not a directory"), std::string::npos) << err;
  EXPECT_EQ(count_substr(err, "kjit: warning:"), 1u) << err;
}

TEST(Store, LookupRefreshesMtime) {
  TempDir dir;
  DiskCache cache(cache_dir(dir), 0);
  const Entry e = sample_entry(13);
  cache.publish(e);
  const std::string path = path_for(dir, e.key);
  set_mtime(path, 1000000);
  ASSERT_TRUE(cache.lookup(e.key).has_value());
  EXPECT_GE(mtime_of(path), static_cast<int64_t>(::time(nullptr)) - 60);
  EXPECT_GE(cache.list().at(0).last_used_unix, static_cast<int64_t>(::time(nullptr)) - 60);
}

TEST(Store, ByteCapEvictsLeastRecentlyUsed) {
  TempDir dir;
  const uint64_t entry_bytes = encode(sample_entry(0, 1000)).size();
  DiskCache cache(cache_dir(dir), 3 * entry_bytes + entry_bytes / 2);
  // Explicit, well-separated mtimes make the LRU order independent of clock resolution.
  const int64_t base = static_cast<int64_t>(::time(nullptr)) - 100000;
  for (int i = 0; i < 6; ++i) {
    cache.publish(sample_entry(i, 1000));
    set_mtime(path_for(dir, key_for(i)), base + i * 10);
  }
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(exists(path_for(dir, key_for(i))), i >= 3) << "entry " << i;
  }
  EXPECT_EQ(cache.stats().entries, 3u);
  EXPECT_LE(cache.stats().bytes, cache.max_bytes());

  // A hit makes entry 3 the most recently used, so entry 4 is the next to go.
  ASSERT_TRUE(cache.lookup(key_for(3)).has_value());
  cache.publish(sample_entry(6, 1000));
  EXPECT_TRUE(exists(path_for(dir, key_for(3))));
  EXPECT_FALSE(exists(path_for(dir, key_for(4))));
  EXPECT_TRUE(exists(path_for(dir, key_for(5))));
  EXPECT_TRUE(exists(path_for(dir, key_for(6))));
  EXPECT_FALSE(cache.lookup(key_for(0)).has_value());
}

TEST(Store, ByteCapNeverEvictsTheEntryJustPublished) {
  TempDir dir;
  const uint64_t entry_bytes = encode(sample_entry(20)).size();
  DiskCache cache(cache_dir(dir), entry_bytes + entry_bytes / 2);  // room for one entry only
  cache.publish(sample_entry(20));
  set_mtime(path_for(dir, key_for(20)), static_cast<int64_t>(::time(nullptr)) + 1000);  // "newer"
  cache.publish(sample_entry(21));
  EXPECT_FALSE(exists(path_for(dir, key_for(20))));
  EXPECT_TRUE(cache.lookup(key_for(21)).has_value());
  EXPECT_EQ(cache.stats().entries, 1u);
}

TEST(Store, AnEntryLargerThanTheCapEvictsNothing) {
  TempDir dir;
  const uint64_t small = encode(sample_entry(30, 100)).size();
  DiskCache cache(cache_dir(dir), 3 * small);
  cache.publish(sample_entry(30, 100));
  cache.publish(sample_entry(31, 100));
  cache.publish(sample_entry(32, 100000));  // alone larger than the cap: not written
  EXPECT_TRUE(cache.lookup(key_for(30)).has_value());
  EXPECT_TRUE(cache.lookup(key_for(31)).has_value());
  EXPECT_FALSE(exists(path_for(dir, key_for(32))));
  EXPECT_EQ(cache.stats().entries, 2u);
}

TEST(Store, ConcurrentColdStartCompilesOnce) {
  TempDir dir;
  const std::string root = cache_dir(dir);
  const std::string counter = dir.path() + "/compiles.txt";
  { DiskCache init(root, 0); }  // the children race on the key, not on creating the root
  constexpr int kProcesses = 8;
  int gate[2];
  ASSERT_EQ(::pipe(gate), 0);
  std::vector<pid_t> children;
  for (int p = 0; p < kProcesses; ++p) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      // Child: no gtest macros, only an exit status.
      ::close(gate[1]);
      char c;
      while (::read(gate[0], &c, 1) < 0 && errno == EINTR) {
      }
      DiskCache cache(root, 0);
      const Entry want = sample_entry(100);
      std::optional<Entry> hit = cache.lookup(want.key);
      if (!hit) {
        KeyLock lock = cache.lock(want.key);
        hit = cache.lookup(want.key);
        if (!hit) {
          const int fd = ::open(counter.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
          const std::string line = std::to_string(::getpid()) + "\n";
          if (fd < 0 || ::write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) ::_exit(3);
          ::close(fd);
          ::usleep(50 * 1000);  // the "compile"
          cache.publish(want);
          hit = cache.lookup(want.key);
        }
      }
      ::_exit(hit && hit->payload == want.payload ? 0 : 1);
    }
    children.push_back(pid);
  }
  ::close(gate[0]);
  ::close(gate[1]);  // EOF on the pipe releases every child at once
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  }
  const std::string lines = read_all(counter);
  EXPECT_EQ(std::count(lines.begin(), lines.end(), '\n'), 1) << lines;
  EXPECT_TRUE(stray_files(root).empty());
}

TEST(Store, ThreadsPublishingAndReadingOneKeyNeverSeeAPartialEntry) {
  TempDir dir;
  DiskCache cache(cache_dir(dir), 0);
  const Entry e = sample_entry(30, 64 * 1024);
  std::atomic<int> bad{0};
  ::testing::internal::CaptureStderr();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 25; ++i) {
        if (t % 2 == 0) {
          cache.publish(e);
        } else if (auto hit = cache.lookup(e.key); hit && hit->payload != e.payload) {
          ++bad;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  EXPECT_EQ(bad.load(), 0);
  EXPECT_TRUE(stray_files(cache_dir(dir)).empty());
}

TEST(Store, NoTempFilesLeftAfterPublishes) {
  TempDir dir;
  DiskCache cache(cache_dir(dir), 0);
  for (int i = 0; i < 40; ++i) cache.publish(sample_entry(i % 20));
  { KeyLock lock = cache.lock(key_for(1)); }
  EXPECT_EQ(cache.stats().entries, 20u);
  EXPECT_TRUE(stray_files(cache_dir(dir)).empty());
}

TEST(Store, LockIsExclusiveAcrossDescriptors) {
  TempDir dir;
  DiskCache cache(cache_dir(dir), 0);
  const Key k = key_for(40);
  std::atomic<bool> second_holds{false};
  KeyLock first = cache.lock(k);
  std::thread other([&] {
    KeyLock second = cache.lock(k);  // a separate open file: blocks until `first` is gone
    second_holds = true;
  });
  ::usleep(50 * 1000);
  EXPECT_FALSE(second_holds.load());
  first = KeyLock();  // move-assigning releases
  other.join();
  EXPECT_TRUE(second_holds.load());
}

TEST(Store, ALockHeldElsewhereIsAnnouncedThenGivenUp) {
  // A stopped or stuck process holding a key's lock delays a compile by the limit, with two
  // warnings naming the lock file, never forever.
  TempDir dir;
  DiskCache cache(cache_dir(dir), 0);
  cache.set_lock_wait({std::chrono::milliseconds(50), std::chrono::milliseconds(300)});
  const Key k = key_for(42);
  KeyLock holder = cache.lock(k);
  ::testing::internal::CaptureStderr();
  const auto start = std::chrono::steady_clock::now();
  { KeyLock waited = cache.lock(k); }
  const auto took = std::chrono::steady_clock::now() - start;
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_GE(took, std::chrono::milliseconds(300));
  EXPECT_LT(took, std::chrono::seconds(5));
  const std::string lock_file = k.hex() + ".lock";
  EXPECT_NE(err.find("waiting for "), std::string::npos) << err;
  EXPECT_NE(err.find("still held after"), std::string::npos) << err;
  EXPECT_NE(err.find(lock_file), std::string::npos) << err;
}

TEST(Store, ALockReleasedDuringTheWaitIsTaken) {
  TempDir dir;
  DiskCache cache(cache_dir(dir), 0);
  cache.set_lock_wait({std::chrono::milliseconds(20), std::chrono::seconds(20)});
  const Key k = key_for(43);
  KeyLock holder = cache.lock(k);
  std::thread release([&] {
    ::usleep(150 * 1000);
    holder = KeyLock();
  });
  ::testing::internal::CaptureStderr();
  KeyLock taken = cache.lock(k);
  release.join();
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("waiting for "), std::string::npos) << err;
  EXPECT_EQ(err.find("still held"), std::string::npos) << err;
  // `taken` holds it: another descriptor now waits out its (short) limit and gives up.
  cache.set_lock_wait({std::chrono::milliseconds(10), std::chrono::milliseconds(100)});
  ::testing::internal::CaptureStderr();
  { KeyLock third = cache.lock(k); }
  err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("still held after"), std::string::npos) << err;
}

TEST(Store, KjitFilesThatNoLookupFindsAreReportedAndPruned) {
  // A copy in the wrong shard and a name that is not lower-case hex: never read, yet taking disk.
  TempDir dir;
  DiskCache cache(cache_dir(dir), 0);
  cache.publish(sample_entry(44));
  const fs::path good = path_for(dir, key_for(44));
  const std::string hex = key_for(44).hex();
  const fs::path other_shard = good.parent_path().parent_path() / ((hex[0] == '0' ? "1" : "0") + hex.substr(1, 1));
  fs::create_directories(other_shard);
  const fs::path wrong_shard = other_shard / (hex + ".kjit");
  const fs::path not_hex = good.parent_path() / (hex.substr(0, 2) + "G" + hex.substr(3) + ".kjit");
  fs::copy_file(good, wrong_shard);
  fs::copy_file(good, not_hex);
  const VerifyResult v = cache.verify();
  EXPECT_EQ(v.ok, 1u);
  ASSERT_EQ(v.bad, 2u);
  for (const std::string& bad : v.bad_paths) EXPECT_NE(bad.find("not an entry name of its shard"), std::string::npos) << bad;
  EXPECT_EQ(cache.prune(), 2u);
  EXPECT_FALSE(fs::exists(wrong_shard));
  EXPECT_FALSE(fs::exists(not_hex));
  EXPECT_TRUE(cache.lookup(key_for(44)).has_value());
}

TEST(Store, AFolderWhereAnEntryBelongsIsReportedAndPruned) {
  TempDir dir;
  DiskCache cache(cache_dir(dir), 0);
  cache.publish(sample_entry(40));
  const std::string stray = path_for(dir, key_for(41));
  fs::create_directories(stray);  // an empty folder named like key 41's entry
  const VerifyResult v = cache.verify();
  EXPECT_EQ(v.ok, 1u);
  ASSERT_EQ(v.bad, 1u);
  EXPECT_NE(v.bad_paths[0].find("not a regular file"), std::string::npos) << v.bad_paths[0];
  EXPECT_EQ(cache.prune(), 1u);
  EXPECT_FALSE(exists(stray));
  EXPECT_TRUE(cache.lookup(key_for(40)).has_value());
  EXPECT_EQ(cache.verify().bad, 0u);
}

TEST(Store, PruneRemovesBadEntriesStaleTempsAndOverflow) {
  TempDir dir;
  DiskCache cache(cache_dir(dir), 0);
  const int64_t base = static_cast<int64_t>(::time(nullptr)) - 10000;
  for (int i = 0; i < 5; ++i) {
    cache.publish(sample_entry(i, 1000));
    set_mtime(path_for(dir, key_for(i)), base + i);
  }
  write_all(path_for(dir, key_for(0)), "garbage");
  const std::string shard = fs::path(path_for(dir, key_for(1))).parent_path().string();
  const std::string stale = shard + "/." + key_for(1).hex() + ".kjit.tmp-1-1-0";
  const std::string fresh = shard + "/." + key_for(1).hex() + ".kjit.tmp-1-1-1";
  write_all(stale, "half");
  write_all(fresh, "half");
  set_mtime(stale, base);
  { KeyLock lock = cache.lock(key_for(2)); }
  KeyLock held = cache.lock(key_for(3));

  EXPECT_EQ(cache.prune(), 1u);  // only the garbage entry: no cap given
  EXPECT_FALSE(exists(path_for(dir, key_for(0))));
  EXPECT_FALSE(exists(stale));
  EXPECT_TRUE(exists(fresh));  // may be a publish in flight
  EXPECT_FALSE(exists(v_root(dir) + "/locks/" + key_for(2).hex() + ".lock"));
  EXPECT_TRUE(exists(v_root(dir) + "/locks/" + key_for(3).hex() + ".lock"));  // in use
  EXPECT_EQ(cache.stats().entries, 4u);

  const uint64_t entry_bytes = encode(sample_entry(0, 1000)).size();
  EXPECT_EQ(cache.prune(2 * entry_bytes), 2u);  // the two least recently used: 1 and 2
  EXPECT_FALSE(exists(path_for(dir, key_for(1))));
  EXPECT_FALSE(exists(path_for(dir, key_for(2))));
  EXPECT_TRUE(exists(path_for(dir, key_for(3))));
  EXPECT_TRUE(exists(path_for(dir, key_for(4))));
  EXPECT_EQ(cache.verify().bad, 0u);
  EXPECT_EQ(cache.verify().ok, 2u);
}

TEST(Store, ClearRemovesEverything) {
  TempDir dir;
  DiskCache cache(cache_dir(dir), 0);
  for (int i = 0; i < 7; ++i) cache.publish(sample_entry(i));
  fs::create_directories(fs::path(path_for(dir, key_for(50))).parent_path());
  write_all(path_for(dir, key_for(50)), "corrupt entries count too");
  { KeyLock lock = cache.lock(key_for(1)); }
  EXPECT_EQ(cache.clear(), 8u);
  EXPECT_EQ(cache.stats().entries, 0u);
  EXPECT_EQ(cache.stats().bytes, 0u);
  EXPECT_TRUE(cache.list().empty());
  EXPECT_TRUE(stray_files(cache_dir(dir)).empty());
  EXPECT_FALSE(exists(v_root(dir) + "/locks/" + key_for(1).hex() + ".lock"));
  EXPECT_EQ(cache.clear(), 0u);

  // Still usable afterwards, though clear() removed the shard folders.
  const Entry e = sample_entry(2);
  cache.publish(e);
  EXPECT_TRUE(cache.lookup(e.key).has_value());
  { KeyLock lock = cache.lock(e.key); }
}

// --- a non-file where an entry belongs (issue 9, fault 7) ----------------------------------------

TEST(Store, AFolderWithContentsWhereAnEntryBelongsIsMovedAsideAtPublish) {
  TempDir dir;
  const Entry e = sample_entry(60);
  const std::string path = path_for(dir, e.key);
  fs::create_directories(path);
  write_all(path + "/notes.txt", "somebody's file");
  {
    // The first process: a quiet miss, then the publish heals the path with one warning.
    DiskCache cache(cache_dir(dir), 0);
    ::testing::internal::CaptureStderr();
    EXPECT_FALSE(cache.lookup(e.key).has_value());
    cache.publish(e);
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(count_substr(err, "kjit: warning:"), 1u) << err;
    EXPECT_NE(err.find(path), std::string::npos) << err;
    EXPECT_NE(err.find("/aside/"), std::string::npos) << err;
  }
  // Every later process hits, silently.
  DiskCache later(cache_dir(dir), 0);
  ::testing::internal::CaptureStderr();
  const std::optional<Entry> hit = later.lookup(e.key);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->payload, e.payload);
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(path)));
  // The folder and what it held are kept, inside the cache root.
  std::vector<std::string> aside;
  for (const auto& f : fs::directory_iterator(v_root(dir) + "/aside")) aside.push_back(f.path().string());
  ASSERT_EQ(aside.size(), 1u);
  EXPECT_EQ(read_all(aside[0] + "/notes.txt"), "somebody's file");
  EXPECT_EQ(later.verify().bad, 0u);
}

TEST(Store, AnEmptyFolderWhereAnEntryBelongsIsRemovedAtPublish) {
  TempDir dir;
  const Entry e = sample_entry(61);
  fs::create_directories(path_for(dir, e.key));
  DiskCache cache(cache_dir(dir), 0);
  ::testing::internal::CaptureStderr();
  EXPECT_FALSE(cache.lookup(e.key).has_value());
  cache.publish(e);
  EXPECT_TRUE(cache.lookup(e.key).has_value());
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  EXPECT_FALSE(exists(v_root(dir) + "/aside"));
}

TEST(Store, ALinkWhereAnEntryBelongsIsRemovedAndItsTargetLeftAlone) {
  TempDir dir;
  // User data outside the cache root, and a link to it (and to a folder) at two entry paths.
  const std::string outside = dir.path() + "/precious.txt";
  write_all(outside, "user data");
  set_mtime(outside, 1000000);
  fs::create_directories(dir.path() + "/precious-dir");
  const Entry a = sample_entry(62);
  const Entry b = sample_entry(63);
  fs::create_directories(fs::path(path_for(dir, a.key)).parent_path());
  fs::create_directories(fs::path(path_for(dir, b.key)).parent_path());
  fs::create_symlink(outside, path_for(dir, a.key));
  fs::create_directory_symlink(dir.path() + "/precious-dir", path_for(dir, b.key));

  DiskCache cache(cache_dir(dir), 0);
  ::testing::internal::CaptureStderr();
  EXPECT_FALSE(cache.lookup(a.key).has_value());
  EXPECT_FALSE(cache.lookup(b.key).has_value());
  cache.publish(a);
  cache.publish(b);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  EXPECT_TRUE(cache.lookup(a.key).has_value());
  EXPECT_TRUE(cache.lookup(b.key).has_value());
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(path_for(dir, a.key))));
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(path_for(dir, b.key))));
  // Never read through, touched or replaced.
  EXPECT_EQ(read_all(outside), "user data");
  EXPECT_EQ(mtime_of(outside), 1000000);
  EXPECT_TRUE(fs::is_directory(dir.path() + "/precious-dir"));
}

// --- size accounting (issue 9, fault 8) ----------------------------------------------------------

TEST(Store, UsageRecordFollowsPublishesEvictionsPruneAndClear) {
  TempDir dir;
  const uint64_t entry_bytes = encode(sample_entry(0, 1000)).size();
  DiskCache cache(cache_dir(dir), 10 * entry_bytes);
  auto expect_exact = [&](const char* when) {
    const std::optional<UsageRecord> u = cache.recorded_usage();
    ASSERT_TRUE(u.has_value()) << when;
    const CacheStats st = cache.stats();
    EXPECT_EQ(u->bytes, st.bytes) << when;
    EXPECT_EQ(u->entries, st.entries) << when;
  };
  for (int i = 0; i < 10; ++i) cache.publish(sample_entry(i, 1000));
  expect_exact("at the cap");
  EXPECT_EQ(cache.stats().entries, 10u);  // exactly the cap: nothing evicted yet
  // The publish that crosses the cap evicts a fifth of the entries (11 / 5 = 2), so the next
  // publish needs no listing.
  cache.publish(sample_entry(10, 1000));
  expect_exact("after evictions");
  EXPECT_EQ(cache.stats().entries, 9u);
  EXPECT_TRUE(exists(path_for(dir, key_for(10))));
  cache.publish(sample_entry(10, 500));  // a replacement changes the size, not the count
  expect_exact("after a replacement");
  EXPECT_GT(cache.prune(3 * entry_bytes), 0u);
  expect_exact("after prune");
  cache.clear();
  expect_exact("after clear");
  EXPECT_EQ(cache.recorded_usage()->entries, 0u);
}

TEST(Store, UsageRecordRecountsWhenFilesChangeBehindItsBack) {
  TempDir dir;
  const uint64_t entry_bytes = encode(sample_entry(0, 1000)).size();
  DiskCache cache(cache_dir(dir), 4 * entry_bytes);
  for (int i = 0; i < 3; ++i) cache.publish(sample_entry(i, 1000));
  // Someone deletes an entry and damages the record: the next publish recounts, and nothing
  // is evicted on the strength of a wrong total.
  fs::remove(path_for(dir, key_for(0)));
  write_all(v_root(dir) + "/usage", "garbage");
  cache.publish(sample_entry(3, 1000));
  EXPECT_TRUE(exists(path_for(dir, key_for(1))));
  EXPECT_TRUE(exists(path_for(dir, key_for(2))));
  const std::optional<UsageRecord> u = cache.recorded_usage();
  ASSERT_TRUE(u.has_value());
  EXPECT_EQ(u->entries, 3u);
  EXPECT_EQ(u->bytes, 3 * entry_bytes);
}

TEST(Store, ManyProcessesPublishingUnderACapKeepTheRecordExact) {
  TempDir dir;
  const std::string root = cache_dir(dir);
  const uint64_t entry_bytes = encode(sample_entry(0, 2000)).size();
  const uint64_t cap = 40 * entry_bytes;
  { DiskCache init(root, cap); }
  constexpr int kProcesses = 6;
  constexpr int kPerProcess = 60;
  std::vector<pid_t> children;
  for (int p = 0; p < kProcesses; ++p) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      DiskCache cache(root, cap);
      for (int i = 0; i < kPerProcess; ++i) {
        // Some keys are shared between processes, so replacements race too.
        const int k = (i % 5 == 0) ? i : p * 1000 + i;
        cache.publish(sample_entry(k, 2000 + static_cast<size_t>(p)));
      }
      ::_exit(0);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  }
  DiskCache cache(root, cap);
  const CacheStats st = cache.stats();
  const std::optional<UsageRecord> u = cache.recorded_usage();
  ASSERT_TRUE(u.has_value());
  EXPECT_EQ(u->bytes, st.bytes);
  EXPECT_EQ(u->entries, st.entries);
  EXPECT_LE(st.bytes, cap);
  EXPECT_GT(st.entries, 20u);
  EXPECT_EQ(cache.verify().bad, 0u);
}

// --- stale toolkits (issue 9, fault 5) -----------------------------------------------------------

TEST(Store, PruneRemovesEntriesOfOtherToolkits) {
  TempDir dir;
  DiskCache cache(cache_dir(dir), 0);
  const Toolkit now{"13.0", "13000"};
  Entry current = sample_entry(70);  // sample entries carry 13.0 / 13000
  Entry old_nvrtc = sample_entry(71);
  old_nvrtc.meta.nvrtc_version = "12.4";
  Entry old_headers = sample_entry(72);
  old_headers.meta.cuda_headers_version = "12040";
  Entry unknown = sample_entry(73);
  unknown.meta.nvrtc_version.clear();
  unknown.meta.cuda_headers_version.clear();
  for (const Entry* e : {&current, &old_nvrtc, &old_headers, &unknown}) cache.publish(*e);
  fs::create_directories(fs::path(path_for(dir, key_for(74))).parent_path());
  write_all(path_for(dir, key_for(74)), "garbage");

  PruneOptions stale_only;
  stale_only.current = &now;
  stale_only.stale_only = true;
  PruneResult r = cache.prune(stale_only);
  EXPECT_EQ(r.stale, 3u);
  EXPECT_EQ(r.bad, 0u) << "--stale leaves bad entries alone";
  EXPECT_EQ(r.evicted, 0u);
  EXPECT_TRUE(cache.lookup(current.key).has_value());
  for (const Entry* e : {&old_nvrtc, &old_headers, &unknown}) EXPECT_FALSE(exists(path_for(dir, e->key)));
  EXPECT_TRUE(exists(path_for(dir, key_for(74))));

  cache.publish(old_nvrtc);
  PruneOptions all;
  all.current = &now;
  r = cache.prune(all);
  EXPECT_EQ(r.stale, 1u);
  EXPECT_EQ(r.bad, 1u);
  EXPECT_EQ(r.removed(), 2u);
  EXPECT_EQ(cache.stats().entries, 1u);
  EXPECT_EQ(cache.recorded_usage()->entries, 1u);

  // Without a toolkit nothing is stale; stale_only then has nothing to go by.
  cache.publish(old_nvrtc);
  EXPECT_EQ(cache.prune(PruneOptions{}).stale, 0u);
  PruneOptions blind;
  blind.stale_only = true;
  EXPECT_THROW(cache.prune(blind), CacheError);
}

}  // namespace
}  // namespace kjit::cache
