#pragma once
/// \file disk_cache.hpp
/// What a host application (and the `kjit` CLI) may know about the disk cache a Runtime uses.
/// The cache itself (publishing, locking, eviction, bundles) is internal to libkjit; to inspect
/// or maintain a cache, run `kjit cache ls|stats|verify|prune|clear|export|import`.

#include <cstdint>
#include <string>

namespace kjit {

/// A snapshot of the disk cache a Runtime opened (Runtime::disk_cache()). It does not change
/// after the Runtime is constructed.
struct DiskCacheInfo {
  /// The folder entries live in: `<cache_dir>/v<format version>` (RuntimeConfig::cache_dir);
  /// empty for a memory-only cache that never had a folder.
  std::string root;
  /// Lookups read from disk. False when KJIT_CACHE_DISABLE is set or the folder could not be
  /// created or read (the runtime then warned once and caches in memory only).
  bool enabled = false;
  /// Compiles are published to disk. False for a read-only folder (a cache precompiled into a
  /// read-only image still serves its entries) and whenever `enabled` is false.
  bool writable = false;
  /// The byte cap (KJIT_CACHE_MAX_BYTES); 0 = none.
  uint64_t max_bytes = 0;
};

}  // namespace kjit
