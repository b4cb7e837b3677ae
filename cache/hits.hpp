#pragma once
/// \file hits.hpp
/// Per-entry hit counts and last use, kept beside the entries without ever rewriting an entry
/// file. Two files in the versioned cache folder:
///
///   hits.log    one line per disk hit, "<32 hex key> <unix seconds>\n" (44 bytes), appended by
///               every process whose lookup served that entry (record_hit): open with O_APPEND,
///               a shared flock, one write(), close. About 5 µs on a local disk, next to the
///               0.3 ms a disk hit costs in all (tests/cache/hits_test.cc measures it).
///   hits.json   the totals folded from the log: {"version":1,"entries":{"<hex>":[hits,last]}}
///
/// A hit is a disk lookup that served the entry: the first use of a specialization in a process
/// (later uses are answered from memory and cost nothing here), and `kjit compile`/`precompile`
/// of a cached one. Last use is the newest of that hit's time and the entry's mtime (which a
/// publish and each hit set too).
///
/// Folding (read_hits with `fold`, run by `kjit cache ls` and `prune` where the folder is
/// writable) takes an exclusive flock on hits.log, so no append is in flight; adds the log to
/// the totals; writes hits.json atomically (temp file, rename); truncates the log; releases the
/// lock. A process killed between the rename and the truncation counts that log twice; nothing
/// is ever lost. A damaged hits.json is warned about once and starts the totals afresh; a
/// damaged log line (a torn write on a full disk) is skipped. A FIFO, socket or device at either
/// path is never opened (detail::open_regular warns once naming it): hits then go uncounted, and
/// lookups and listings go on.

#include "cache/key.hpp"

#include <cstdint>
#include <string>
#include <unordered_map>

namespace kjit::cache {

/// Hits and last use of one entry.
struct HitCount {
  uint64_t hits = 0;
  int64_t last_unix = 0;  ///< seconds since the epoch; 0 = never hit
};

using HitTable = std::unordered_map<Key, HitCount, KeyHash>;

/// Appends one hit of `key` at `now_unix` to `<dir>/hits.log` (`dir`: the versioned cache
/// folder). Best effort and silent: a hit count is statistics, and a read-only cache records none.
void record_hit(const std::string& dir, const Key& key, int64_t now_unix) noexcept;

/// The totals in `<dir>` (hits.json plus hits.log). With `fold`, also folds the log into
/// hits.json as described above, keeping only keys in `keep` when it is non-null (the entries
/// present: a removed entry's count goes with it); without write access it only reads.
HitTable read_hits(const std::string& dir, bool fold, const HitTable* keep = nullptr);

/// Removes `<dir>/hits.json` and empties `<dir>/hits.log` (for `clear`).
void clear_hits(const std::string& dir) noexcept;

}  // namespace kjit::cache
