#pragma once
/// \file toolkit_memo.hpp
/// The toolkit memo: a small record under the cache root that lets a new process take the
/// include closure of a CUDA toolkit header (what the cache key hashes, kernel_sources.hpp) from
/// stat(2) calls instead of reading, scanning and digesting megabytes of headers. It plays the
/// part of ccache's manifests, for the toolkit only.
///
/// Where. `<cache root>/v<kFormatVersion>/toolkit/<32 hex>.memo`, one record per list of CUDA
/// include directories (the hex is XXH3-128 of that list). The cache lister only looks at
/// two-hex-digit shard folders, so it passes over `toolkit/`. A record is written only into a
/// writable cache, read from a read-only one too (a cache precompiled into an image), and never
/// with the disk cache disabled.
///
/// What a record holds. For each toolkit file that a compile reached from outside the toolkit
/// (its root), the closure the walk found: every file as the key names it ("<cuda>/…") with its
/// XXH3-128, every include name the scan met (what decides whether a user header can shadow a
/// name inside), and the checks that vouch for it: every file read, with its stamp (size,
/// mtime and ctime in ns, inode, device), and every candidate path the search found no regular
/// file at. A new process stats every check of a root it needs; if all agree it uses the stored
/// digests and reads nothing, else it reads and digests that closure as before and rewrites
/// the record (temp file + rename). A missing, unreadable, truncated, corrupt or foreign record
/// (another format, another library version, other include directories) is recomputed
/// silently; it is never an error and never decides a key on its own.
///
/// What a stamp can miss. A toolkit edit that keeps a file's size, mtime, ctime and inode: ctime
/// cannot be set from user space, so that takes a write within one filesystem timestamp tick of
/// the moment the stamp was taken, a filesystem that does not keep ctime, or a clock set back.
/// The first is why a file changed less than two seconds before it was read is not recorded
/// (its closure is read again by the next process). The user's own `-I`, `-include` and
/// source-directory files never go through the memo: they are read and digested on every call.
///
/// Format: the frame of memo_file.hpp with magic "KJITTKMM" and version kMemoVersion, around a
/// body of strings, u32 counts and stamps:
///
///   str  library ("kjit <version>")
///   u32  D, then D strings: the CUDA include directories, in search order
///   u32  C, then C closures:
///        str  root: the toolkit file's path as the search formed it
///        u32  F, then F × (str key path "<cuda>/…", str XXH3-128 as 32 hex digits)
///        u32  N, then N strings: the include names met
///        u32  K, then K checks: str path, stamp

#include "runtime/memo_file.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kjit::detail {

/// Bump when the record layout, the include scan or the toolkit search order changes: records
/// hold their results.
inline constexpr uint32_t kMemoVersion = 1;

/// CLOCK_REALTIME in ns: the clock file timestamps come from.
int64_t realtime_ns();
/// Whether a file (or directory) stamped `s`, read at or after `read_start_ns`, may be recorded:
/// its last change must be older than the minimum age (see the file comment), so any later change
/// gets a later timestamp.
bool stamp_is_settled(const FileStamp& s, int64_t read_start_ns);

/// One root's closure as stored.
struct MemoClosure {
  std::string root;
  std::vector<std::pair<std::string, std::string>> files;  ///< ("<cuda>/…", xxh3), sorted
  std::vector<std::string> names;                          ///< include names met, sorted
  std::vector<std::pair<std::string, FileStamp>> checks;   ///< sorted by path
};

/// A whole record: the include directories it belongs to and its closures.
struct MemoRecord {
  std::vector<std::string> toolkit_dirs;
  std::vector<MemoClosure> closures;
};

/// The record's bytes (the format above).
std::string encode_memo(const MemoRecord& record);
/// Parses encode_memo()'s bytes; nullopt for anything else (wrong magic, version or library,
/// bad checksum, truncation, trailing bytes).
std::optional<MemoRecord> decode_memo(std::string_view bytes);

/// `<memo_dir>/<XXH3-128 of dirs>.memo`.
std::string memo_record_path(const std::string& memo_dir, const std::vector<std::string>& dirs);
/// The record at `path` if it reads, decodes and belongs to `dirs`; nullopt otherwise, silently.
std::optional<MemoRecord> load_memo(const std::string& path, const std::vector<std::string>& dirs);
/// Writes `record` at `path` atomically (temp file + rename, no fsync: a record torn by a power
/// cut fails its checksum), creating the folder; removes temp files that crashed writers left
/// there. Failures are silent: the memo is an optimization. Returns whether it was written.
bool save_memo(const std::string& path, const MemoRecord& record);

/// Sets the minimum age of a file's last change for its stamp to be recorded (default 2 s);
/// returns the previous value. Tests set 0 for toolkits they have just written.
int64_t set_toolkit_memo_min_age_ns(int64_t ns);

}  // namespace kjit::detail
