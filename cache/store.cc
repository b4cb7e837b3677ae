// The disk cache: sharded entry files, lock-free reads, atomic publishes, per-key flock, LRU cap.

#include "cache/store.hpp"

#include "cache/fallback_log.hpp"
#include "cache/file_util.hpp"
#include "cache/hits.hpp"
#include "cache/le_bytes.hpp"
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
#include <thread>
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
constexpr std::string_view kUsageMagic = "KJITUSG1";
constexpr size_t kUsageRecordBytes = 32;
/// Recount the usage record from a listing this often even when nothing looks wrong, to bound
/// drift from writers that bypass it. A listing of 20k entries costs ~45 ms: ~10 µs a publish.
constexpr uint64_t kReconcileEvery = 4096;
/// A publish that finds the cache over its cap evicts down to the cap, then on until it removed
/// a kEvictSlack-th of the entries (or reached cap - cap / kEvictSlack): the listing that
/// eviction needs then happens once per entries/kEvictSlack publishes instead of on every
/// publish into a full cache. A cache of few entries is evicted exactly to its cap.
constexpr uint64_t kEvictSlack = 5;

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
  /// What sits in a shard but is no entry lookup() can find, and why: a folder, link or FIFO
  /// where an entry belongs (every publish of that key fails), or a `.kjit` file whose name is not
  /// an entry name of its shard (wrong shard, upper case: never read, yet taking disk). verify
  /// reports them and prune removes what it can.
  struct Stray {
    std::string path;
    const char* why;
  };
  std::vector<Stray> strays;
};

/// "v1": the folder of this format's entries under a cache root.
std::string versioned_dir() { return "v" + std::to_string(kFormatVersion); }

/// "ab/<32 hex>.kjit": where the entry of `key` lives in the versioned folder.
std::string shard_path(const Key& key) {
  const std::string hex = key.hex();
  return hex.substr(0, 2) + "/" + hex + std::string(kEntrySuffix);
}

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
          out.strays.push_back({dir + "/" + name, "not a regular file"});
        }
      } else if (detail::is_temp_name(name)) {
        FileRecord tmp;
        if (stat_file(dir + "/" + name, &tmp)) out.temps.push_back(std::move(tmp));
      } else if (name.size() > kEntrySuffix.size() && name.substr(name.size() - kEntrySuffix.size()) == kEntrySuffix) {
        out.strays.push_back({dir + "/" + name, "not an entry name of its shard (<32 lower-case hex digits starting "
                                                "with the shard's two>.kjit): never read"});
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
  const int err = detail::read_file(rec.path, kMaxEntryBytes, detail::kReadNoFollow, &bytes);
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
  int fd = -1;
  if (detail::open_regular(path, O_RDWR, &fd) != 0) return;
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

/// Oldest first; the path breaks ties so equal mtimes evict in a fixed order.
void sort_lru(std::vector<EntryRecord>* entries) {
  std::sort(entries->begin(), entries->end(), [](const EntryRecord& a, const EntryRecord& b) {
    if (older_than(a.mtime, b.mtime)) return true;
    if (older_than(b.mtime, a.mtime)) return false;
    return a.path < b.path;
  });
}

/// Unlinks `path` only while it is still the file a scan saw (same inode): a publish may have
/// renamed a fresh entry over it since. Returns true when it removed that file.
bool unlink_if_same(const std::string& path, const FileRecord& seen, ino_t seen_ino) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_ino != seen_ino ||
      static_cast<uint64_t>(st.st_size) != seen.bytes) {
    return false;
  }
  return ::unlink(path.c_str()) == 0;
}

bool is_stale_toolkit(const EntryMeta& meta, const Toolkit& current) {
  return meta.nvrtc_version != current.nvrtc_version ||
         meta.cuda_headers_version != current.cuda_headers_version;
}

}  // namespace

// --- the usage record ---------------------------------------------------------------------------

/// The exclusive flock on `<root>/usage`, held while the set of entries changes; reads and
/// writes the record it guards. Opened per use, never kept: a descriptor inherited across fork
/// would share its lock with the parent.
class DiskCache::UsageLock {
 public:
  explicit UsageLock(const std::string& root) {
    const std::string path = root + "/usage";
    if (detail::open_regular(path, O_RDWR | O_CREAT, &fd_) != 0) return;
    int rc;
    do {
      rc = ::flock(fd_, LOCK_EX);
    } while (rc != 0 && errno == EINTR);
    if (rc != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  UsageLock(const UsageLock&) = delete;
  UsageLock& operator=(const UsageLock&) = delete;
  ~UsageLock() {
    if (fd_ >= 0) ::close(fd_);  // releases the flock
  }
  /// False when the record could not be opened or locked (a read-only file in a shared cache):
  /// callers then count by listing, as if the record were damaged.
  bool held() const noexcept { return fd_ >= 0; }

  std::optional<UsageRecord> read() const {
    if (fd_ < 0) return std::nullopt;
    return read_record(fd_, &publishes_);
  }
  uint64_t publishes() const noexcept { return publishes_; }
  void write(const UsageRecord& u, uint64_t publishes) const {
    if (fd_ < 0) return;
    std::string out(kUsageMagic);
    detail::put_le(out, u.bytes, 8);
    detail::put_le(out, u.entries, 8);
    detail::put_le(out, publishes, 8);
    // A short or failed write leaves a record the next reader finds damaged and recounts.
    (void)!::pwrite(fd_, out.data(), out.size(), 0);
  }

  static std::optional<UsageRecord> read_record(int fd, uint64_t* publishes) {
    char buf[kUsageRecordBytes];
    ssize_t n;
    do {
      n = ::pread(fd, buf, sizeof buf, 0);
    } while (n < 0 && errno == EINTR);
    if (n != static_cast<ssize_t>(sizeof buf)) return std::nullopt;
    const std::string_view bytes(buf, sizeof buf);
    if (bytes.substr(0, kUsageMagic.size()) != kUsageMagic) return std::nullopt;
    UsageRecord u;
    u.bytes = detail::get_le(bytes, 8, 8);
    u.entries = detail::get_le(bytes, 16, 8);
    *publishes = detail::get_le(bytes, 24, 8);
    return u;
  }

 private:
  int fd_ = -1;
  mutable uint64_t publishes_ = 0;
};

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
  root_ = root.empty() ? std::string() : root + "/" + versioned_dir();
  int err = root_.empty() ? ENOENT : detail::make_dirs(root_ + "/locks");
  // Only writing a file proves we can publish (the CLI wants that certainty); the library checks
  // with access(2), which costs microseconds instead of a file create on every process start,
  // and a publish that fails anyway is warned then.
  if (err == 0) err = strict ? detail::probe_writable(root_) : (::access(root_.c_str(), W_OK) == 0 ? 0 : errno);
  if (err != 0) {
    // A root that does not exist now could not be created; one that exists is not writable.
    struct stat st {};
    const bool exists = !root_.empty() && ::stat(root_.c_str(), &st) == 0;
    const std::string what = fmt::format("cache directory {} {} ({})", root_.empty() ? "\"\"" : root_,
                                         exists ? "is not writable" : "cannot be created", detail::errno_text(err));
    if (strict) throw CacheError(what);
    // A cache precompiled into a read-only image still serves its entries.
    if (exists && S_ISDIR(st.st_mode) && ::access(root_.c_str(), R_OK | X_OK) == 0) {
      warn(what + "; reading its entries, new compiles stay in memory");
      enabled_ = true;
      state_ = std::make_shared<detail::CacheState>();
      return;
    }
    warn(what + "; caching in memory only");
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
  cache.root_ = root.empty() ? std::string() : root + "/" + versioned_dir();
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

std::string entry_relative_path(const Key& key) { return versioned_dir() + "/" + shard_path(key); }

std::string DiskCache::entry_path(const Key& key) const { return root_ + "/" + shard_path(key); }

std::optional<Entry> DiskCache::lookup(const Key& key, bool count_hit, std::string* problem) const {
  if (!enabled_) return std::nullopt;
  const std::string path = entry_path(key);
  std::string bytes;
  const int err = detail::read_file(path, kMaxEntryBytes, detail::kReadTouch | detail::kReadNoFollow, &bytes);
  // ENOTDIR: the shard folder is a stray file. EISDIR, ELOOP (a link), EINVAL (a FIFO, a
  // socket): a non-file where the entry belongs. The publish that follows this miss clears
  // them; a read need not complain.
  if (err == ENOENT || err == ENOTDIR || err == EISDIR || err == ELOOP || err == EINVAL) return std::nullopt;
  std::string why;
  std::optional<Entry> entry;
  if (err == 0) {
    entry = decode(bytes, &key, &why);
    if (entry) {
      if (writable_ && count_hit) record_hit(root_, key, static_cast<int64_t>(::time(nullptr)));
      return entry;
    }
  } else {
    why = err == EFBIG ? "too large to be an entry" : detail::errno_text(err);
  }
  if (problem != nullptr) *problem = why;
  bool first = false;
  {
    std::lock_guard<std::mutex> guard(state_->mu);
    first = state_->warned_bad.insert(key).second;
  }
  // Once per key: the miss's compile (or an import's entry) replaces it at its next publish.
  if (first) {
    warn(fmt::format("cache entry {} is corrupt ({}); not used (the next publish of this key replaces it)", path, why));
  }
  return std::nullopt;
}

void DiskCache::publish(const Entry& entry) {
  if (!writable_) return;
  const std::string path = entry_path(entry.key);
  std::string bytes;
  try {
    bytes = encode(entry);
  } catch (const std::exception&) {
    warn_publish_failure(path, ENOMEM);  // encode() only throws when allocation fails
    return;
  }
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
      warn(fmt::format("cache entry {} ({} bytes) is larger than the cache's byte cap ({} bytes, "
                       "KJIT_CACHE_MAX_BYTES); not caching it on disk",
                       path, bytes.size(), max_bytes_));
    }
    return;
  }
  // The slow part (write + fsync) happens before the usage lock, so the critical section
  // below is a few syscalls.
  std::string tmp;
  int err = detail::write_temp_file(path, bytes, &tmp);
  if (err == ENOENT) {
    // The shard folder does not exist yet, or clear() removed it meanwhile.
    err = make_shard(path);
    if (err == 0) err = detail::write_temp_file(path, bytes, &tmp);
  }
  if (err != 0) {
    warn_publish_failure(path, err);
    return;
  }
  {
    UsageLock usage(root_);
    uint64_t old_bytes = 0;
    bool had_entry = false;
    err = make_room(path, &old_bytes, &had_entry);
    if (err == 0) {
      err = detail::commit_temp_file(tmp, path);
    } else {
      ::unlink(tmp.c_str());
    }
    if (err == 0) account_publish(usage, bytes.size(), old_bytes, had_entry, entry.key);
  }
  if (err != 0) {
    warn_publish_failure(path, err);
    return;
  }
  detail::sync_parent_dir(path);
  {
    // The entry is whole again: if it breaks later, that is news worth a new warning.
    std::lock_guard<std::mutex> guard(state_->mu);
    state_->warned_bad.erase(entry.key);
  }
}

void DiskCache::warn_publish_failure(const std::string& path, int err) {
  bool first = false;
  {
    std::lock_guard<std::mutex> guard(state_->mu);
    first = !state_->warned_publish;
    state_->warned_publish = true;
  }
  // A full disk would fail every publish; one line says it all.
  if (first) {
    warn(fmt::format("cannot write cache entry {} ({}); continuing without caching it", path,
                     detail::errno_text(err)));
  }
}

int DiskCache::make_room(const std::string& path, uint64_t* old_bytes, bool* had_entry) {
  *old_bytes = 0;
  *had_entry = false;
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return errno == ENOENT ? 0 : errno;
  if (S_ISREG(st.st_mode)) {
    *old_bytes = static_cast<uint64_t>(st.st_size);
    *had_entry = true;
    return 0;
  }
  if (S_ISDIR(st.st_mode)) {
    if (::rmdir(path.c_str()) == 0 || errno == ENOENT) return 0;
    if (errno != ENOTEMPTY && errno != EEXIST) return errno;
    return move_aside(path);
  }
  // A link (unlink removes the link itself, never its target), a FIFO, a socket: a name inside
  // the cache root, and no entry.
  if (::unlink(path.c_str()) == 0 || errno == ENOENT) return 0;
  return errno;
}

int DiskCache::move_aside(const std::string& path) {
  const std::string dir = root_ + "/aside";
  if (const int err = detail::make_dirs(dir); err != 0) return err;
  const std::string to = dir + "/" + path.substr(path.rfind('/') + 1) + "." + detail::unique_suffix();
  if (::rename(path.c_str(), to.c_str()) != 0) return errno;
  // Someone put it there, and it may matter to them: say where it went.
  warn(fmt::format("{} was in the place of a cache entry and is not one; moved it to {}", path, to));
  return 0;
}

int DiskCache::make_shard(const std::string& path) {
  return detail::make_dirs(path.substr(0, path.rfind('/')));
}

void DiskCache::account_publish(UsageLock& usage, uint64_t new_bytes, uint64_t old_bytes,
                                bool had_entry, const Key& keep) {
  if (!usage.held()) {
    // No record to keep (a usage file this user cannot write): count by listing, as before
    // there was one, and only when a cap needs the count.
    uint64_t evicted = 0;
    if (max_bytes_ > 0) recount_and_evict(max_bytes_, max_bytes_, 0, &keep, &evicted);
    return;
  }
  std::optional<UsageRecord> u = usage.read();
  uint64_t publishes = usage.publishes() + 1;
  if (u) {
    if (u->bytes + new_bytes < old_bytes || (had_entry && u->entries == 0)) {
      u.reset();  // would go negative: the record missed something
    } else {
      u->bytes = u->bytes + new_bytes - old_bytes;
      if (!had_entry) ++u->entries;
    }
  }
  if (!u || publishes >= kReconcileEvery || (max_bytes_ > 0 && u->bytes > max_bytes_)) {
    uint64_t evicted = 0;
    u = recount_and_evict(max_bytes_, max_bytes_ - max_bytes_ / kEvictSlack, u ? u->entries / kEvictSlack : 0, &keep, &evicted);
    publishes = 0;
  }
  usage.write(*u, publishes);
}

DiskCache::WaitResult DiskCache::wait_for_flock(int fd, const std::string& path) const {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  std::chrono::milliseconds nap{1};
  bool noticed = false;
  for (;;) {
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return WaitResult::kLocked;
    if (errno == EINTR) continue;
    if (errno != EWOULDBLOCK) return WaitResult::kFailed;
    const Clock::duration waited = Clock::now() - start;
    if (waited >= lock_wait_.limit) {
      warn(fmt::format("{} is still held after {} s; compiling without it (the other process may be "
                       "stopped or stuck; its compile of the same kernel is not waited for)",
                       path, std::chrono::duration_cast<std::chrono::seconds>(waited).count()));
      return WaitResult::kGaveUp;
    }
    if (!noticed && waited >= lock_wait_.notice) {
      noticed = true;
      warn(fmt::format("waiting for {}: another process holds it while it compiles this kernel (at most {} s more)",
                       path, std::chrono::duration_cast<std::chrono::seconds>(lock_wait_.limit - waited).count()));
    }
    std::this_thread::sleep_for(nap);
    nap = std::min(nap * 2, std::chrono::milliseconds{20});
  }
}

KeyLock DiskCache::lock(const Key& key) const {
  if (!writable_) return KeyLock();
  const std::string dir = root_ + "/locks";
  const std::string path = dir + "/" + key.hex() + std::string(kLockSuffix);
  int err = 0;
  for (int attempt = 0; attempt < kLockAttempts; ++attempt) {
    int fd = -1;
    err = detail::open_regular(path, O_RDWR | O_CREAT, &fd);
    if (err == ENOENT && detail::make_dirs(dir) == 0) err = detail::open_regular(path, O_RDWR | O_CREAT, &fd);
    if (err != 0) break;
    const WaitResult waited = wait_for_flock(fd, path);
    if (waited == WaitResult::kGaveUp) {
      ::close(fd);
      return KeyLock();
    }
    if (waited == WaitResult::kFailed) {
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
    warn(fmt::format("cannot lock {} ({}); other processes may compile the same kernel",
                             path, detail::errno_text(err)));
  }
  return KeyLock();
}

UsageRecord DiskCache::recount_and_evict(uint64_t trigger, uint64_t target, uint64_t removals,
                                         const Key* keep, uint64_t* removed) {
  Scan s = scan(root_);
  UsageRecord u;
  for (const EntryRecord& e : s.entries) u.bytes += e.bytes;
  u.entries = s.entries.size();
  if (trigger == 0 || u.bytes <= trigger) return u;
  sort_lru(&s.entries);
  uint64_t gone = 0;
  for (const EntryRecord& e : s.entries) {
    if (u.bytes <= target || (u.bytes <= trigger && gone >= removals)) break;
    if (keep != nullptr && e.key == *keep) continue;
    // A reader that already opened the file keeps its bytes: unlink only drops the name.
    // ENOENT means another process evicted it first; either way it no longer counts.
    if (::unlink(e.path.c_str()) == 0) {
      ++*removed;
    } else if (errno != ENOENT) {
      continue;
    }
    u.bytes -= e.bytes;
    --u.entries;
    ++gone;
  }
  return u;
}

std::vector<EntryInfo> DiskCache::list() const {
  std::vector<EntryInfo> out;
  if (!enabled_) return out;
  const HitTable hits = read_hits(root_, /*fold=*/false);
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
    if (auto h = hits.find(rec.key); h != hits.end()) {
      info.hits = h->second.hits;
      info.last_used_unix = std::max(info.last_used_unix, h->second.last_unix);
    }
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
  for (const Scan::Stray& stray : s.strays) {
    ++out.bad;
    out.bad_paths.push_back(stray.path + ": " + stray.why);
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

void DiskCache::fold_hits() const {
  if (!enabled_) return;
  HitTable present;
  for (const EntryRecord& rec : scan(root_).entries) present.emplace(rec.key, HitCount{});
  read_hits(root_, /*fold=*/true, &present);
}

PruneResult DiskCache::prune(const PruneOptions& options) {
  PruneResult out;
  if (!writable_) return out;
  if (options.stale_only && options.current == nullptr) {
    throw CacheError("prune of stale entries needs the current toolkit's versions");
  }
  // Decoding every entry is slow; do it before taking the usage lock, then remove each victim
  // only if it is still the file that was checked (a publish may have replaced it).
  const Scan s = scan(root_);
  struct Victim {
    const EntryRecord* rec;
    ino_t ino;
    bool stale;
  };
  std::vector<Victim> victims;
  for (const EntryRecord& rec : s.entries) {
    std::optional<Entry> decoded;
    bool gone = false;
    const std::string problem = check_entry(rec, &decoded, &gone);
    if (gone) continue;
    const bool bad = !problem.empty();
    const bool stale = !bad && options.current != nullptr && is_stale_toolkit(decoded->meta, *options.current);
    if (!(stale || (bad && !options.stale_only))) continue;
    struct stat st;
    if (::lstat(rec.path.c_str(), &st) == 0) victims.push_back({&rec, st.st_ino, stale});
  }

  UsageLock usage(root_);
  for (const Victim& v : victims) {
    if (unlink_if_same(v.rec->path, *v.rec, v.ino)) ++(v.stale ? out.stale : out.bad);
  }
  uint64_t trigger = 0;
  if (!options.stale_only) {
    // remove(3): a link or an empty folder goes; a folder with contents is not ours to delete.
    for (const Scan::Stray& stray : s.strays) {
      if (std::remove(stray.path.c_str()) == 0) ++out.bad;
    }
    const int64_t now = static_cast<int64_t>(::time(nullptr));
    // Young temp files may be publishes in flight in other processes; leave them be.
    for (const FileRecord& tmp : s.temps) {
      if (is_stale(tmp, now)) ::unlink(tmp.path.c_str());
    }
    remove_idle_locks(root_);
    trigger = options.max_bytes != 0 ? options.max_bytes : max_bytes_;
  }
  // Also the exact recount the usage record gets after the removals above.
  const UsageRecord u = recount_and_evict(trigger, trigger, 0, nullptr, &out.evicted);
  usage.write(u, 0);
  fold_hits();
  return out;
}

uint64_t DiskCache::prune(uint64_t max_bytes) {
  PruneOptions options;
  options.max_bytes = max_bytes;
  return prune(options).removed();
}

std::optional<UsageRecord> DiskCache::recorded_usage() const {
  if (!enabled_) return std::nullopt;
  int fd = -1;
  if (detail::open_regular(root_ + "/usage", O_RDONLY, &fd) != 0) return std::nullopt;
  uint64_t publishes = 0;
  std::optional<UsageRecord> u = UsageLock::read_record(fd, &publishes);
  ::close(fd);
  return u;
}

uint64_t DiskCache::clear() {
  if (!writable_) return 0;
  UsageLock usage(root_);
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
  uint64_t none = 0;
  usage.write(recount_and_evict(0, 0, 0, nullptr, &none), 0);
  clear_hits(root_);
  clear_fallbacks(root_);
  return removed;
}

}  // namespace kjit::cache
