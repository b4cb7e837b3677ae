#pragma once
/// \file key_memo.hpp
/// The key memo: a record per program under the cache root that lets a new process take the
/// program's cache key from stat(2) calls, without walking its include closure
/// (kernel_sources.hpp) or hashing the texts it reaches. It plays the part of ccache's
/// direct-mode manifests. A process's first call of a cached op costs, without it, the walk of
/// every kernel source and toolkit header the program reaches (~0.8 ms on the H200's host);
/// with it, one small file read and a stat per check (~0.15 ms).
///
/// Which programs. Those whose closure reaches only in-memory headers (ProgramSpec::headers and
/// the kernel sources embedded in the library) and files under the CUDA include directories: no
/// `-I`, no `-include`, no KJIT_KERNEL_DIR, and no file found beside a source or by an absolute
/// name. Every shipped op's programs are such. Any other program walks its closure on every
/// call, as before; so does any program while the disk cache is off.
///
/// The id. A record is named by XXH3-128 (cache::KeyBuilder) over every input of the key except
/// the contents of toolkit files: the library version, the digest of the embedded kernel
/// sources, the spec's source name and text, its in-memory headers, its canonical name
/// expressions, the normalized options, the target, the NVRTC and CUDA headers versions and the
/// CUDA include directories.
///
/// The checks. Everything the walk learned from the file system: each toolkit file it reached,
/// with its stamp, and each path where the search found no regular file (a file that appears
/// there later would shadow one further down the search). The record keeps an empty path as the
/// stamp of the nearest directory above it that exists: nothing can appear at the path without
/// an entry being added to or replaced in that directory, which moves its mtime and ctime, so one
/// stat stands for all the empty paths below it (rotary: 52 files and 2 directories instead of
/// 64 empty paths). A process stats every check: if all hold it uses the recorded key and reads
/// nothing else; otherwise it walks the closure, and the record is rewritten. A walk that read a file whose stamp cannot vouch for it (changed less
/// than the toolkit memo's minimum age ago, toolkit_memo.hpp) writes no record. What a stamp can
/// miss is what toolkit_memo.hpp says.
///
/// Where. `<cache root>/keys/<first 2 hex of the id>/<id: 32 hex>.memo`, written only into a
/// writable cache (temp file + rename), read from a read-only one too. The cache's own listing
/// and prune look only at the two-hex-digit entry shards, so they pass over `keys/`. A missing,
/// unreadable, corrupt or foreign record (another id, another library version) is a miss,
/// silently: the key is computed as if there were none.
///
/// Format: the frame of memo_file.hpp with magic "KJITKEYM" and version kKeyMemoVersion, around
///
///   str  library ("kjit <version>")
///   16   the id (hi then lo, little-endian u64 each)
///   16   the key (likewise)
///   u32  K, then K checks sorted by path: str path, stamp (kind 0: no regular file there,
///        1: this file, 2: this directory)

#include "cache/key.hpp"
#include "runtime/memo_file.hpp"

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kjit::detail {

/// Bump when the record layout or the meaning of a check changes.
inline constexpr uint32_t kKeyMemoVersion = 1;

/// What one walk of a closure learned from the file system (see the file comment).
struct KeyChecks {
  std::map<std::string, FileStamp> stamps;  ///< path → what stat said
  /// False once the walk read something a record cannot vouch for: a file outside the toolkit
  /// directories, or one whose stamp is not settled.
  bool usable = true;

  void add(const std::string& path, const FileStamp& s) { stamps.emplace(path, s); }
};

/// A decoded record.
struct KeyMemo {
  cache::Key key;
  std::vector<std::pair<std::string, FileStamp>> checks;
};

/// `<keys_dir>/<2 hex>/<32 hex>.memo` for `id`.
std::string key_memo_path(const std::string& keys_dir, const cache::Key& id);
/// The record's bytes (the format above).
std::string encode_key_memo(const cache::Key& id, const cache::Key& key, const KeyChecks& checks);
/// Parses encode_key_memo()'s bytes; nullopt for anything else, or for a record of another id.
std::optional<KeyMemo> decode_key_memo(std::string_view bytes, const cache::Key& id);

/// The key recorded for `id` under `keys_dir`, if the record reads and every check holds now.
std::optional<cache::Key> recall_key(const std::string& keys_dir, const cache::Key& id);
/// Records `key` and `checks` for `id` (checks.usable must be true). Silent on failure; returns
/// whether the record was written.
bool remember_key(const std::string& keys_dir, const cache::Key& id, const cache::Key& key, const KeyChecks& checks);

}  // namespace kjit::detail
