#pragma once
/// \file entry.hpp
/// One cache entry on disk: a fixed header, JSON metadata and the payload (cubin or PTX).
///
///   offset  size  field
///   0       8     magic "KJITCUBN"
///   8       4     format version (kFormatVersion), little-endian
///   12      16    key (hi, lo), little-endian
///   28      8     metadata size M
///   36      8     payload size P
///   44      8     XXH3-64 of the M + P bytes that follow
///   52      M     metadata, UTF-8 JSON
///   52+M    P     payload

#include "cache/key.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kjit::cache {

/// Per-kernel metadata stored with an entry.
struct KernelMeta {
  std::string name_expression;
  std::string lowered_name;
  int registers = -1;
  int spill_bytes = -1;
  int static_smem = -1;
};

/// One file the compile read, as the key hashed it (kjit::KeyInputFile without the runtime).
struct InputDigest {
  std::string kind;    ///< "source", "header" or "file"
  std::string name;    ///< the include name or path
  std::string digest;  ///< XXH3-128 of the bytes, 32 hex digits
};

/// Everything stored with a binary besides the binary itself.
struct EntryMeta {
  std::string family;
  std::string template_args;
  std::string target;        ///< "sm_90a" / "compute_90"
  bool ptx = false;          ///< payload is PTX text rather than a cubin
  std::vector<KernelMeta> kernels;
  std::vector<std::string> options;
  std::string nvrtc_version;
  std::string cuda_headers_version;
  std::string source_name;
  double compile_ms = 0;
  int64_t created_unix = 0;  ///< seconds since the epoch when it was compiled
  /// Every file the key hashed, in key order, so `kjit cache explain` can say which one differs
  /// when a lookup misses. Stored as "inputs": [[kind, name, digest], ...]; empty in entries
  /// written before kjit recorded it (a reader of either vintage reads both).
  std::vector<InputDigest> inputs;
};

struct Entry {
  Key key;
  EntryMeta meta;
  std::string payload;
};

/// Serializes `entry` into the on-disk format above.
std::string encode(const Entry& entry);

/// Parses bytes written by encode(). Returns nullopt, with `why` set ("truncated",
/// "bad magic", "checksum mismatch", "key mismatch", "format version 0 != 1", "trailing bytes",
/// "bad metadata: …"), when the bytes are not a whole, intact entry for `expected` (when given).
/// The checksum does not cover the header's key, so pass `expected` to catch a damaged key.
/// Never reads outside `bytes`, and no content of them makes it throw.
std::optional<Entry> decode(std::string_view bytes, const Key* expected, std::string* why);

}  // namespace kjit::cache
