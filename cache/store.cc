// The disk cache: sharded entry files, lock-free reads, atomic publishes, per-key flock, LRU cap.

#include "cache/store.hpp"

#include "cache/file_util.hpp"
#include "cache/warn.hpp"

#include <kjit/error.hpp>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <ctime>
#include <mutex>
#include <unordered_set>

namespace kjit::cache {

namespace detail {

/// Warning bookkeeping shared by copies of one DiskCache.
struct CacheState {
  std::mutex mu;
  std::unordered_set<Key, KeyHash> warned_bad;  ///< keys whose bad entry was already reported
  bool warned_publish = false;
  bool warned_lock = false;
  bool warned_cap = false;
};

}  // namespace detail

namespace {

constexpr std::string_view kEntrySuffix = ".kjit";
constexpr std::string_view kLockSuffix = ".lock";
/// Larger files are not entries (cubins are megabytes); refusing them keeps a stray huge file
/// from being read into memory.
constexpr uint64_t kMaxEntryBytes = uint64_t{1} << 30;
/// A temp file this old belongs to a writer that died: publishes take milliseconds.
constexpr int64_t kStaleTempSeconds = 60;
/// lock() retries when the lock file was replaced under it; more than this means something
/// keeps deleting it, and compiling without the lock is better than spinning.
constexpr int kLockAttempts = 64;

struct FileRecord {
  std::string path;
  uint64_t bytes = 0;
  timespec mtime{};
};

struct EntryRecord : FileRecord {
  Key key;
};

struct Scan {
  std::vector<EntryRecord> entries;
  std::vector<FileRecord> temps;
  std::vector<std::string> shard_dirs;
  /// Entry names that are not regular files (a folder or a link where an entry belongs): every
  /// publish of that key fails, so verify reports them and prune removes what it can.
  std::vector<std::string> strays;
};

bool is_shard_name(std::string_view name) {
  auto lower_hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); };
  return name.size() == 2 && lower_hex(name[0]) && lower_hex(name[1]);
}

/// Parses "<32 hex>.kjit" inside shard `shard`; a file in the wrong shard is not an entry,
/// because lookup() would never find it.
bool parse_entry_name(std::string_view shard, std::string_view name, Key* key) {
  if (name.size() != 32 + kEntrySuffix.size()) return false;
  if (name.substr(32) != kEntrySuffix || name.substr(0, 2) != shard) return false;
  return Key::from_hex(name.substr(0, 32), key);
}

bool stat_file(const std::string& path, FileRecord* rec) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  rec->path = path;
  rec->bytes = static_cast<uint64_t>(st.st_size);
  rec->mtime = st.st_mtim;
  return true;
}

/// Everything under the versioned root. Files vanishing mid-scan (another process evicting)
/// are simply not reported.
Scan scan(const std::string& root) {
  Scan out;
  std::vector<std::string> shards;
  if (detail::list_dir(root, &shards) != 0) return out;
  std::sort(shards.begin(), shards.end());
  std::vector<std::string> names;
  for (const std::string& shard : shards) {
    if (!is_shard_name(shard)) continue;
    const std::string dir = root + "/" + shard;
    if (detail::list_dir(dir, &names) != 0) continue;
    out.shard_dirs.push_back(dir);
    std::sort(names.begin(), names.end());
    for (const std::string& name : names) {
      EntryRecord rec;
      if (parse_entry_name(shard, name, &rec.key)) {
        struct stat st;
        if (stat_file(dir + "/" + name, &rec)) {
          out.entries.push_back(std::move(rec));
        } else if (::lstat((dir + "/" + name).c_str(), &st) == 0) {
          out.strays.push_back(dir + "/" + name);
        }
      } else if (detail::is_temp_name(name)) {
        FileRecord tmp;
        if (stat_file(dir + "/" + name, &tmp)) out.temps.push_back(std::move(tmp));
      }
    }
  }
  return out;
}

bool older_than(const timespec& a, const timespec& b) {
  return a.tv_sec != b.tv_sec ? a.tv_sec < b.tv_sec : a.tv_nsec < b.tv_nsec;
}

bool is_stale(const FileRecord& f, int64_t now) {
  return now - static_cast<int64_t>(f.mtime.tv_sec) > kStaleTempSeconds;
}

/// Reads and decodes one entry without touching its mtime. Returns the reason it is bad, or
/// "" when it decodes; ENOENT (evicted meanwhile) sets *gone instead.
std::string check_entry(const EntryRecord& rec, std::optional<Entry>* decoded, bool* gone) {
  *gone = false;
  std::string bytes;
  const int err = detail::read_file(rec.path, kMaxEntryBytes, /*touch=*/false, &bytes);
  if (err == ENOENT) {
    *gone = true;
    return "";
  }
  if (err == EFBIG) return "too large to be an entry";
  if (err != 0) return detail::errno_text(err);
  std::string why;
  *decoded = decode(bytes, &rec.key, &why);
  return decoded->has_value() ? "" : why;
}

/// Takes the flock on `path` only when nobody holds it and the file is still the one at
/// `path`, then unlinks it. Deleting a held lock would let a second process lock a fresh file
/// and compile alongside the holder.
void remove_lock_if_idle(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return;
  struct stat fst;
  struct stat pst;
  if (::flock(fd, LOCK_EX | LOCK_NB) == 0 && ::fstat(fd, &fst) == 0 &&
      ::stat(path.c_str(), &pst) == 0 && fst.st_dev == pst.st_dev && fst.st_ino == pst.st_ino) {
    ::unlink(path.c_str());
  }
  ::close(fd);
}

void remove_idle_locks(const std::string& root) {
  const std::string dir = root + "/locks";
  std::vector<std::string> names;
  if (detail::list_dir(dir, &names) != 0) return;
  for (const std::string& name : names) {
    if (name.size() > kLockSuffix.size() &&
        name.compare(name.size() - kLockSuffix.size(), kLockSuffix.size(), kLockSuffix) == 0) {
      remove_lock_if_idle(dir + "/" + name);
    }
  }
}

}  // namespace

// --- KeyLock -------------------------------------------------------------------------------------

KeyLock& KeyLock::operator=(KeyLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

KeyLock::~KeyLock() {
  // Closing the last descriptor of the open file releases the flock.
  if (fd_ >= 0) ::close(fd_);
}

// --- DiskCache -----------------------------------------------------------------------------------

DiskCache::DiskCache(std::string root, uint64_t max_bytes, bool strict) : max_bytes_(max_bytes) {
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  root_ = root.empty() ? std::string() : root + "/v" + std::to_string(kFormatVersion);
  int err = root_.empty() ? ENOENT : detail::make_dirs(root_ + "/locks");
  // Only writing a file proves we can publish (the CLI wants that certainty); the library checks
  // with access(2), which costs microseconds instead of a file create on every process start,
  // and a publish that fails anyway is warned then.
  if (err == 0) err = strict ? detail::probe_writable(root_) : (::access(root_.c_str(), W_OK) == 0 ? 0 : errno);
  if (err != 0) {
    const std::string what = fmt::format("cache directory {} is not writable ({})",
                                         root_.empty() ? "\"\"" : root_, detail::errno_text(err));
    if (strict) throw CacheError(what);
    // A cache precompiled into a read-only image still serves its entries.
    struct stat st {};
    if (!root_.empty() && ::stat(root_.c_str(), &st) == 0 && S_ISDIR(st.st_mode) &&
        ::access(root_.c_str(), R_OK | X_OK) == 0) {
      detail::warn(what + "; reading its entries, new compiles stay in memory");
      enabled_ = true;
      state_ = std::make_shared<detail::CacheState>();
      return;
    }
    detail::warn(what + "; caching in memory only");
    return;
  }
  enabled_ = true;
  writable_ = true;
  state_ = std::make_shared<detail::CacheState>();
}

DiskCache DiskCache::disabled() { return DiskCache(); }

DiskCache DiskCache::open_for_reading(std::string root, uint64_t max_bytes) {
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  DiskCache cache;
  cache.max_bytes_ = max_bytes;
  cache.root_ = root.empty() ? std::string() : root + "/v" + std::to_string(kFormatVersion);
  struct stat st {};
  const int err = cache.root_.empty() ? ENOENT : (::stat(cache.root_.c_str(), &st) == 0 ? 0 : errno);
  if (err == ENOENT) return cache;  // nothing cached yet
  if (err != 0) throw CacheError(fmt::format("cache directory {} cannot be read ({})", cache.root_, detail::errno_text(err)));
  if (!S_ISDIR(st.st_mode)) throw CacheError(fmt::format("cache directory {} is not a directory", cache.root_));
  if (::access(cache.root_.c_str(), R_OK | X_OK) != 0) {
    const int access_err = errno;
    throw CacheError(fmt::format("cache directory {} cannot be read ({})", cache.root_, detail::errno_text(access_err)));
  }
  cache.enabled_ = true;
  cache.state_ = std::make_shared<detail::CacheState>();
  return cache;
}

std::string DiskCache::entry_path(const Key& key) const {
  const std::string hex = key.hex();
  return root_ + "/" + hex.substr(0, 2) + "/" + hex + std::string(kEntrySuffix);
}

std::optional<Entry> DiskCache::lookup(const Key& key) const {
  if (!enabled_) return std::nullopt;
  const std::string path = entry_path(key);
  std::string bytes;
  const int err = detail::read_file(path, kMaxEntryBytes, /*touch=*/true, &bytes);
  // ENOTDIR: the shard folder is a stray file; publish will report that, a read need not.
  if (err == ENOENT || err == ENOTDIR) return std::nullopt;
  std::string why;
  std::optional<Entry> entry;
  if (err == 0) {
    entry = decode(bytes, &key, &why);
    if (entry) return entry;
  } else {
    why = err == EFBIG ? "too large to be an entry" : detail::errno_text(err);
  }
  bool first = false;
  {
    std::lock_guard<std::mutex> guard(state_->mu);
    first = state_->warned_bad.insert(key).second;
  }
  // A compile follows every miss, so once per key is enough to explain the slowness.
  if (first) {
    detail::warn(fmt::format("cache entry {} is corrupt ({}); recompiling", path, why));
  }
  return std::nullopt;
}

void DiskCache::publish(const Entry& entry) {
  if (!writable_) return;
  const std::string path = entry_path(entry.key);
  int err = 0;
  try {
    const std::string bytes = encode(entry);
    if (max_bytes_ > 0 && bytes.size() > max_bytes_) {
      // Publishing it would evict every other entry and then still break the cap: keep the
      // cache as it is.
      bool first = false;
      {
        std::lock_guard<std::mutex> guard(state_->mu);
        first = !state_->warned_cap;
        state_->warned_cap = true;
      }
      if (first) {
        detail::warn(fmt::format("cache entry {} ({} bytes) is larger than the cache's byte cap ({} bytes, "
                                 "KJIT_CACHE_MAX_BYTES); not caching it on disk",
                                 path, bytes.size(), max_bytes_));
      }
      return;
    }
    err = detail::write_file_atomic(path, bytes);
    if (err == ENOENT) {
      // The shard folder does not exist yet, or clear() removed it meanwhile.
      const std::string shard = path.substr(0, path.rfind('/'));
      err = detail::make_dirs(shard);
      if (err == 0) err = detail::write_file_atomic(path, bytes);
    }
  } catch (const std::exception&) {
    err = ENOMEM;  // encode() only throws when allocation fails
  }
  if (err != 0) {
    bool first = false;
    {
      std::lock_guard<std::mutex> guard(state_->mu);
      first = !state_->warned_publish;
      state_->warned_publish = true;
    }
    // A full disk would fail every publish; one line says it all.
    if (first) {
      detail::warn(fmt::format("cannot write cache entry {} ({}); continuing without caching it",
                               path, detail::errno_text(err)));
    }
    return;
  }
  {
    // The entry is whole again: if it breaks later, that is news worth a new warning.
    std::lock_guard<std::mutex> guard(state_->mu);
    state_->warned_bad.erase(entry.key);
  }
  if (max_bytes_ > 0) evict_to(max_bytes_, &entry.key);
}

KeyLock DiskCache::lock(const Key& key) const {
  if (!writable_) return KeyLock();
  const std::string dir = root_ + "/locks";
  const std::string path = dir + "/" + key.hex() + std::string(kLockSuffix);
  int err = 0;
  for (int attempt = 0; attempt < kLockAttempts; ++attempt) {
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0 && errno == ENOENT && detail::make_dirs(dir) == 0) {
      fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    }
    if (fd < 0) {
      err = errno;
      break;
    }
    int rc;
    do {
      rc = ::flock(fd, LOCK_EX);
    } while (rc != 0 && errno == EINTR);
    if (rc != 0) {
      err = errno;
      ::close(fd);
      break;
    }
    // clear()/prune() may have unlinked the file while we waited; a lock on an unlinked file
    // excludes nobody, so start over on the file now at `path`.
    struct stat fst;
    struct stat pst;
    if (::fstat(fd, &fst) == 0 && ::stat(path.c_str(), &pst) == 0 && fst.st_dev == pst.st_dev &&
        fst.st_ino == pst.st_ino) {
      return KeyLock(fd);
    }
    ::close(fd);
    err = EAGAIN;
  }
  bool first = false;
  {
    std::lock_guard<std::mutex> guard(state_->mu);
    first = !state_->warned_lock;
    state_->warned_lock = true;
  }
  // Without the lock, concurrent processes may compile the same kernel twice; the publishes
  // are still atomic, so that costs time, not correctness.
  if (first) {
    detail::warn(fmt::format("cannot lock {} ({}); other processes may compile the same kernel",
                             path, detail::errno_text(err)));
  }
  return KeyLock();
}

uint64_t DiskCache::evict_to(uint64_t max_bytes, const Key* keep) {
  if (!writable_ || max_bytes == 0) return 0;
  // A full scan per publish is O(entries) stats, small next to the compile that preceded it.
  Scan s = scan(root_);
  uint64_t total = 0;
  for (const EntryRecord& e : s.entries) total += e.bytes;
  if (total <= max_bytes) return 0;
  // Oldest first; the path breaks ties so equal mtimes evict in a fixed order.
  std::sort(s.entries.begin(), s.entries.end(), [](const EntryRecord& a, const EntryRecord& b) {
    if (older_than(a.mtime, b.mtime)) return true;
    if (older_than(b.mtime, a.mtime)) return false;
    return a.path < b.path;
  });
  uint64_t removed = 0;
  for (const EntryRecord& e : s.entries) {
    if (total <= max_bytes) break;
    if (keep != nullptr && e.key == *keep) continue;
    // A reader that already opened the file keeps its bytes: unlink only drops the name.
    // ENOENT means another process evicted it first; either way it no longer counts.
    if (::unlink(e.path.c_str()) == 0) {
      ++removed;
      total -= e.bytes;
    } else if (errno == ENOENT) {
      total -= e.bytes;
    }
  }
  return removed;
}

std::vector<EntryInfo> DiskCache::list() const {
  std::vector<EntryInfo> out;
  if (!enabled_) return out;
  for (const EntryRecord& rec : scan(root_).entries) {
    std::optional<Entry> decoded;
    bool gone = false;
    std::string problem = check_entry(rec, &decoded, &gone);
    if (gone) continue;
    EntryInfo info;
    info.key = rec.key;
    info.path = rec.path;
    info.bytes = rec.bytes;
    info.last_used_unix = static_cast<int64_t>(rec.mtime.tv_sec);
    if (decoded) info.meta = std::move(decoded->meta);
    info.problem = std::move(problem);
    out.push_back(std::move(info));
  }
  return out;
}

CacheStats DiskCache::stats() const {
  CacheStats st;
  st.max_bytes = max_bytes_;
  st.root = root_;
  st.enabled = enabled_;
  st.writable = writable_;
  if (!enabled_) return st;
  for (const EntryRecord& rec : scan(root_).entries) {
    ++st.entries;
    st.bytes += rec.bytes;
  }
  return st;
}

VerifyResult DiskCache::verify() const {
  VerifyResult out;
  if (!enabled_) return out;
  const Scan s = scan(root_);
  for (const std::string& stray : s.strays) {
    ++out.bad;
    out.bad_paths.push_back(stray + ": not a regular file");
  }
  for (const EntryRecord& rec : s.entries) {
    std::optional<Entry> decoded;
    bool gone = false;
    const std::string problem = check_entry(rec, &decoded, &gone);
    if (gone) continue;
    if (problem.empty()) {
      ++out.ok;
    } else {
      ++out.bad;
      out.bad_paths.push_back(rec.path + ": " + problem);
    }
  }
  return out;
}

uint64_t DiskCache::prune(uint64_t max_bytes) {
  if (!writable_) return 0;
  const Scan s = scan(root_);
  uint64_t removed = 0;
  for (const EntryRecord& rec : s.entries) {
    std::optional<Entry> decoded;
    bool gone = false;
    const std::string problem = check_entry(rec, &decoded, &gone);
    if (!gone && !problem.empty() && ::unlink(rec.path.c_str()) == 0) ++removed;
  }
  // remove(3): a link or an empty folder goes; a folder with contents is not ours to delete.
  for (const std::string& stray : s.strays) {
    if (std::remove(stray.c_str()) == 0) ++removed;
  }
  const int64_t now = static_cast<int64_t>(::time(nullptr));
  // Young temp files may be publishes in flight in other processes; leave them be.
  for (const FileRecord& tmp : s.temps) {
    if (is_stale(tmp, now)) ::unlink(tmp.path.c_str());
  }
  remove_idle_locks(root_);
  return removed + evict_to(max_bytes != 0 ? max_bytes : max_bytes_, nullptr);
}

uint64_t DiskCache::clear() {
  if (!writable_) return 0;
  const Scan s = scan(root_);
  uint64_t removed = 0;
  for (const EntryRecord& rec : s.entries) {
    if (::unlink(rec.path.c_str()) == 0) ++removed;
  }
  const int64_t now = static_cast<int64_t>(::time(nullptr));
  for (const FileRecord& tmp : s.temps) {
    if (is_stale(tmp, now)) ::unlink(tmp.path.c_str());
  }
  remove_idle_locks(root_);
  // rmdir refuses a non-empty folder, so a publish that already made its temp file is safe;
  // one that has not yet recreates the folder (publish retries on ENOENT).
  for (const std::string& dir : s.shard_dirs) ::rmdir(dir.c_str());
  return removed;
}

}  // namespace kjit::cache
