#pragma once
/// \file store.hpp
/// The disk cache: one file per entry under
/// `<root>/v<kFormatVersion>/<first 2 hex digits>/<32 hex digits>.kjit`, published by temp file +
/// fsync + rename, read without locks; a per-key lock file serializes compiles across processes;
/// a byte cap evicts least-recently-used entries. This is an internal header: in-tree tools (the
/// CLI) and tests include it; host applications see only kjit/disk_cache.hpp.
///
/// Size accounting. Finding the total size by listing every entry costs O(entries) per publish
/// (tens of milliseconds at 20k entries), which would make filling a large cache quadratic.
/// Instead `<root>/v1/usage` records the total:
///
///   offset  size  field
///   0       8     magic "KJITUSG1"
///   8       8     bytes of all entries, little-endian
///   16      8     number of entries
///   24      8     publishes since the record was last recounted from a listing
///
/// Every change to the set of entries (the rename of a publish, an eviction, prune, clear) is
/// made while holding an exclusive flock on that file and updates the record in the same
/// critical section, so concurrent processes never lose an update: a publish learns the size of
/// the entry it replaces with lstat under the lock, and nobody else can rename over it
/// meanwhile. The temp file is written and fsynced before the lock is taken, so the critical
/// section is a few syscalls. The record is recounted from a full listing (under the lock) when
/// it is missing or damaged, every kReconcileEvery publishes, and whenever it says the cache is
/// over its cap; that repairs drift from writers that bypass it (a process killed between rename
/// and update, a user deleting files, an older kjit). Eviction then goes below the cap: it
/// removes at least a fifth of the entries (stopping early at cap − cap/5), so a full cache
/// lists itself once per N/5 publishes, not per publish; a cache of a few entries is evicted
/// exactly to its cap. Readers (lookup) never take the lock. Measured at 20k entries on tmpfs (where the
/// fsyncs cost nothing and the bookkeeping shows most): a publish costs the same with a cap as
/// without, and publishing into a full cache costs under 2x a publish plus one file removal
/// (tests/cache/store_scale_test.cc).
///
/// A non-file where an entry belongs (a folder, a link, a FIFO: left by a user or a broken tool)
/// is a quiet miss for lookups and is cleared by the next publish of that key: a link or an empty
/// folder is removed (a link, never what it points to), a folder with contents is renamed into
/// `<root>/v1/aside/` with one warning. Nothing outside the cache root is ever touched.

#include "cache/entry.hpp"
#include "cache/key.hpp"

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kjit::cache {

namespace detail {
struct CacheState;
}  // namespace detail

/// An exclusive per-key lock across processes (flock on `<root>/locks/<hex>.lock`), released
/// when destroyed. A lock on a memory-only cache is a no-op.
class KeyLock {
 public:
  KeyLock() = default;
  explicit KeyLock(int fd) : fd_(fd) {}
  KeyLock(KeyLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  KeyLock& operator=(KeyLock&& other) noexcept;
  KeyLock(const KeyLock&) = delete;
  KeyLock& operator=(const KeyLock&) = delete;
  ~KeyLock();

 private:
  int fd_ = -1;
};

/// How long DiskCache::lock() waits while another process holds a key's lock (it is compiling
/// that kernel): after `notice` one warning names the lock file; after `limit` the wait ends
/// with a second warning and the compile goes ahead without the lock (the publish is atomic, so
/// a duplicate compile costs time, not correctness). A stopped or stuck holder then delays a
/// compile by `limit`, never forever.
struct LockWait {
  std::chrono::milliseconds notice{10'000};
  std::chrono::milliseconds limit{300'000};
};

/// One entry as `kjit cache ls` shows it.
struct EntryInfo {
  Key key;
  std::string path;
  uint64_t bytes = 0;
  /// The newest of the mtime (a publish and every lookup hit set it: the LRU order) and the
  /// last recorded hit (cache/hits.hpp).
  int64_t last_used_unix = 0;
  /// Disk lookups that served this entry (cache/hits.hpp): 0 when never hit or not recorded.
  uint64_t hits = 0;
  std::optional<EntryMeta> meta;  ///< nullopt when the entry does not decode
  std::string problem;            ///< why it does not decode ("" when it does)
};

struct CacheStats {
  uint64_t entries = 0;
  uint64_t bytes = 0;
  uint64_t max_bytes = 0;  ///< 0 = no cap
  std::string root;
  bool enabled = false;
  bool writable = false;
};

/// Where the entry of `key` lives under a cache's root (the folder the user names, not the
/// versioned one): "v1/ab/ab…(32 hex digits).kjit".
std::string entry_relative_path(const Key& key);

/// The totals `<root>/v1/usage` records (see the header comment): what eviction decides on.
struct UsageRecord {
  uint64_t bytes = 0;
  uint64_t entries = 0;
};

/// The compiler an entry was built with, as EntryMeta records it.
struct Toolkit {
  std::string nvrtc_version;         ///< "13.0" (Runtime::nvrtc_version)
  std::string cuda_headers_version;  ///< CUDA_VERSION of the headers, "13000"
};

/// What prune() removes.
struct PruneOptions {
  /// Evict least-recently-used entries until the cache holds at most this many bytes; 0 = the
  /// cap the cache was opened with (which may itself be 0: no eviction).
  uint64_t max_bytes = 0;
  /// The toolkit compiling now. Entries built by any other NVRTC or CUDA headers version (or
  /// with no version recorded) are stale: their keys include those versions, so no lookup here
  /// can hit them. Null: keep entries of every toolkit.
  const Toolkit* current = nullptr;
  /// Remove only stale entries (needs `current`): no bad entries, temp files or eviction.
  bool stale_only = false;
};

/// What prune() removed.
struct PruneResult {
  uint64_t bad = 0;      ///< entries that do not decode, and non-files at entry paths
  uint64_t stale = 0;    ///< entries of another toolkit (PruneOptions::current)
  uint64_t evicted = 0;  ///< least-recently-used entries removed to fit the cap
  uint64_t removed() const noexcept { return bad + stale + evicted; }
};

struct VerifyResult {
  uint64_t ok = 0;
  uint64_t bad = 0;
  std::vector<std::string> bad_paths;  ///< with the reason: "<path>: checksum mismatch"
};

class DiskCache {
 public:
  /// Opens (creating when missing) the cache at `root` with a byte cap (0 = none). When the root
  /// cannot be written, warns once on stderr: an existing readable folder (a cache precompiled
  /// into a read-only image) stays enabled() for lookups but not writable() — publishes and locks
  /// do nothing; anything else becomes memory-only (enabled() false, lookups miss). `strict`
  /// turns an unwritable root into a thrown CacheError naming the path (what the CLI wants).
  DiskCache(std::string root, uint64_t max_bytes, bool strict = false);
  /// A memory-only cache (KJIT_CACHE_DISABLE=1).
  static DiskCache disabled();
  /// Opens the cache at `root` for inspection only (`kjit cache ls|stats|verify`): creates
  /// nothing, writes nothing and needs no write permission. An existing readable folder is
  /// enabled() and never writable(); a missing one is an empty, disabled cache (no warning).
  /// Throws CacheError naming the path when it exists but cannot be read, or is not a folder.
  static DiskCache open_for_reading(std::string root, uint64_t max_bytes);

  /// Lookups can hit.
  bool enabled() const noexcept { return enabled_; }
  /// Publishes, locks, prune and clear act on disk.
  bool writable() const noexcept { return writable_; }
  const std::string& root() const noexcept { return root_; }
  uint64_t max_bytes() const noexcept { return max_bytes_; }

  /// Reads the entry for `key`. A missing entry is a quiet miss; a truncated, corrupt or foreign
  /// one is a miss warned once per key (it is replaced by the next publish). A hit refreshes
  /// the entry's mtime (LRU) and, in a writable cache, appends one line to the hits log
  /// (cache/hits.hpp), unless `count_hit` is false (a lookup that checks rather than uses the
  /// entry, such as an import's). `problem`, when given, gets why an entry that is there was
  /// not used ("checksum mismatch", …), and stays empty for a hit or a quiet miss.
  std::optional<Entry> lookup(const Key& key, bool count_hit = true, std::string* problem = nullptr) const;

  /// Writes `entry` atomically (temp file in the same directory, fsync, rename), then evicts
  /// least-recently-used entries other than this one while the cache exceeds max_bytes. An
  /// entry larger than max_bytes on its own is not written (warned once): it would evict
  /// everything else.
  /// Failures are warned, never thrown: the cache is an optimization.
  void publish(const Entry& entry);

  /// Waits until this process holds the cross-process lock for `key`, or for the LockWait limit
  /// (then returns no lock, warned).
  KeyLock lock(const Key& key) const;
  /// The bounds of lock()'s wait (tests shorten them).
  void set_lock_wait(LockWait wait) noexcept { lock_wait_ = wait; }

  /// Every entry, with its hit count and last use (cache/hits.hpp).
  std::vector<EntryInfo> list() const;
  /// Folds the hits log into its totals, dropping the counts of entries no longer present,
  /// when the folder may be written (also for a cache opened for reading: the hits files are
  /// the one thing `kjit cache ls` writes); otherwise does nothing. prune() folds too.
  void fold_hits() const;
  CacheStats stats() const;
  /// Decodes every entry and reports what sits in a shard but no lookup can find (a non-file at
  /// an entry path, a `.kjit` file not named for its shard); does not change anything.
  VerifyResult verify() const;
  /// Removes entries that do not decode, non-files at entry paths (a link, FIFO or empty folder;
  /// a folder with contents is reported by verify() and left alone), `.kjit` files not named for
  /// their shard, entries of another toolkit
  /// (when `options.current` is given), temp files of dead writers and idle lock files, then
  /// least-recently-used entries until the total fits `options.max_bytes`.
  PruneResult prune(const PruneOptions& options);
  /// prune() without a toolkit: bad entries, then LRU entries until the total is ≤ max_bytes
  /// (0 = keep the cap given at construction). Returns the number of entries removed.
  uint64_t prune(uint64_t max_bytes = 0);
  /// Removes every entry (and stale temp files). Returns the number removed.
  uint64_t clear();

  /// The totals the usage record holds now (read without the lock), or nullopt when there is
  /// none yet or it is damaged (the next publish recounts it). For tests and `cache stats`.
  std::optional<UsageRecord> recorded_usage() const;

 private:
  class UsageLock;
  DiskCache() = default;
  std::string entry_path(const Key& key) const;
  /// Makes `path` free for an entry: a regular file stays (its size goes to `*old_bytes`), a
  /// non-file is removed or moved aside. Returns 0 or an errno.
  int make_room(const std::string& path, uint64_t* old_bytes, bool* had_entry);
  /// Renames a folder with contents (or any non-file that cannot be removed) at `path` into
  /// `<root>/aside/`, with one warning. Returns 0 or an errno.
  int move_aside(const std::string& path);
  /// Creates the shard folder of `path`. Returns 0 or an errno.
  int make_shard(const std::string& path);
  /// Records a publish that changed the total by `new_bytes - old_bytes` in `usage` (held), and
  /// recounts and evicts when the record says so.
  void account_publish(UsageLock& usage, uint64_t new_bytes, uint64_t old_bytes, bool had_entry,
                       const Key& keep);
  /// Lists the cache and, when the total exceeds `trigger` (0 = never), deletes
  /// least-recently-used entries other than `keep` until it is at most `trigger` and either
  /// `removals` entries went or the total is at most `target`. Returns the totals left and adds
  /// the deletions to `*removed`. The caller holds the usage lock, or could not get it.
  UsageRecord recount_and_evict(uint64_t trigger, uint64_t target, uint64_t removals, const Key* keep,
                                uint64_t* removed);
  void warn_publish_failure(const std::string& path, int err);
  enum class WaitResult { kLocked, kGaveUp, kFailed };
  /// Takes the exclusive flock on `fd` (the lock file at `path`) within lock_wait_: polls, warns
  /// once after `notice`, gives up (warned) at `limit`; kFailed leaves errno set.
  WaitResult wait_for_flock(int fd, const std::string& path) const;

  std::string root_;   ///< the versioned folder: <root>/v1
  uint64_t max_bytes_ = 0;
  bool enabled_ = false;
  bool writable_ = false;
  LockWait lock_wait_;
  /// Which warnings were already given. Shared, so copies of a DiskCache stay copyable and warn
  /// once between them; null for a memory-only cache.
  std::shared_ptr<detail::CacheState> state_;
};

}  // namespace kjit::cache
