#pragma once
/// \file store.hpp
/// The disk cache: one file per entry under
/// `<root>/v<kFormatVersion>/<first 2 hex digits>/<32 hex digits>.kjit`, published by temp file +
/// fsync + rename, read without locks; a per-key lock file serializes compiles across processes;
/// a byte cap evicts least-recently-used entries.

#include "cache/entry.hpp"
#include "cache/key.hpp"

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

/// One entry as `kjit cache ls` shows it.
struct EntryInfo {
  Key key;
  std::string path;
  uint64_t bytes = 0;
  int64_t last_used_unix = 0;  ///< mtime; a lookup hit refreshes it (LRU order)
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
  /// the entry's mtime (LRU).
  std::optional<Entry> lookup(const Key& key) const;

  /// Writes `entry` atomically (temp file in the same directory, fsync, rename), then evicts
  /// least-recently-used entries other than this one while the cache exceeds max_bytes. An
  /// entry larger than max_bytes on its own is not written (warned once): it would evict
  /// everything else.
  /// Failures are warned, never thrown: the cache is an optimization.
  void publish(const Entry& entry);

  /// Blocks until this process holds the cross-process lock for `key`.
  KeyLock lock(const Key& key) const;

  std::vector<EntryInfo> list() const;
  CacheStats stats() const;
  /// Decodes every entry; does not change anything.
  VerifyResult verify() const;
  /// Removes entries that do not decode, then LRU entries until the total is ≤ max_bytes
  /// (0 = keep the cap given at construction). Returns the number of entries removed.
  uint64_t prune(uint64_t max_bytes = 0);
  /// Removes every entry (and stale temp files). Returns the number removed.
  uint64_t clear();

 private:
  DiskCache() = default;
  std::string entry_path(const Key& key) const;
  /// Deletes least-recently-used entries other than `keep` until the total is <= max_bytes
  /// (0 = no cap). Returns how many it deleted.
  uint64_t evict_to(uint64_t max_bytes, const Key* keep);

  std::string root_;   ///< the versioned folder: <root>/v1
  uint64_t max_bytes_ = 0;
  bool enabled_ = false;
  bool writable_ = false;
  /// Which warnings were already given. Shared, so copies of a DiskCache stay copyable and warn
  /// once between them; null for a memory-only cache.
  std::shared_ptr<detail::CacheState> state_;
};

}  // namespace kjit::cache
