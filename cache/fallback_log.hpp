#pragma once
/// \file fallback_log.hpp
/// Which program served a key that was not built yet (KJIT_JIT=async), kept beside the entries
/// for `kjit cache explain`: one line per (missing key, fallback) pair and process, appended to
/// `fallbacks.log` in the versioned cache folder (`<root>`: DiskCache::root(), beside hits.log)
/// when the fallback first serves:
///
///   "<32 hex missing key> <32 hex fallback key> <unix seconds> <fallback family> <fallback params>\n"
///
/// (the params, last, may hold blanks: "head_dim=128 rows=8"). Appended as the hits log is
/// (cache/hits.hpp): O_APPEND, a shared flock, one write(), best effort and silent; a read-only
/// cache records none. A damaged line is skipped when read. The log is small (a line per pair a
/// process met, and fallbacks serve only until the exact program is built); `kjit cache clear`
/// empties it with the entries.

#include "cache/key.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace kjit::cache {

/// One line of the fallback log.
struct FallbackRecord {
  Key missing;   ///< the key that was not built
  Key fallback;  ///< the entry that served meanwhile
  int64_t unix = 0;
  std::string family;  ///< the fallback's family ("attention.decode")
  std::string params;  ///< the fallback's parameters ("head_dim=128 rows=8")
};

/// Appends one record to `<root>/fallbacks.log`. Never throws; a line that would hold a newline
/// is not written.
void record_fallback(const std::string& root, const FallbackRecord& record) noexcept;

/// Every record of `<root>/fallbacks.log` whose missing key is `missing`, oldest first; none
/// when the log is absent or unreadable.
std::vector<FallbackRecord> read_fallbacks(const std::string& root, const Key& missing);

/// Empties `<root>/fallbacks.log` (for `clear`).
void clear_fallbacks(const std::string& root) noexcept;

}  // namespace kjit::cache
