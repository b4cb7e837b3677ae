#pragma once
/// \file bundle.hpp
/// Cache bundles: a set of cache entries in one file, to ship a precompiled cache (an image
/// build runs `kjit precompile` then `kjit cache export`, a deployment runs `kjit cache import`).
///
///   offset  size  field
///   0       8     magic "KJITBNDL"
///   8       4     format version (kFormatVersion), little-endian
///   12      8     entry count N
///   20      ...   N times: an 8-byte little-endian size S, then S bytes of one entry exactly as
///                 stored on disk (entry.hpp: it carries its own key and checksum)
///   then, optionally (bundles without tuning tables end after the last entry):
///   +0      8     magic "KJITTUNE"
///   +8      8     table count T
///   +16     ...   T times: an 8-byte little-endian size S, then S bytes of one tuning table file
///                 exactly as stored (tune_table.hpp: it names its own fingerprint)
/// Nothing follows.

#include "cache/entry.hpp"
#include "cache/shipping.hpp"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kjit::cache {

/// Packs encoded entries (each one file's bytes, as encode() makes them) and tuning table files
/// (each one file's bytes, as encode_table() makes them) into a bundle.
std::string encode_bundle(const std::vector<std::string>& encoded_entries,
                          const std::vector<std::string>& tables = {});

/// What a bundle held: its intact entries, and one line per entry that did not decode
/// ("entry 3 of 7: checksum mismatch").
struct BundleContents {
  std::vector<Entry> entries;
  std::vector<std::string> problems;
  size_t count = 0;  ///< entries the bundle declared
  /// The tuning table files the bundle carries, as stored (decode_table checks each on import).
  std::vector<std::string> tables;
};

/// Parses a bundle. Throws CacheError when the bytes are not a whole bundle (bad magic or
/// version, truncated, trailing bytes); an entry that does not decode is reported in `problems`
/// and skipped, so one damaged entry does not lose the rest.
BundleContents decode_bundle(std::string_view bytes);

class DiskCache;

/// What export_bundle() wrote.
struct ExportReport {
  uint64_t entries = 0;      ///< entries in the bundle
  uint64_t bytes = 0;        ///< size of the bundle file
  uint64_t skipped_bad = 0;     ///< entries left out because they do not decode
  uint64_t skipped_tables = 0;  ///< tuning tables left out (ExportSet::skipped_tables)
  uint64_t tables = 0;          ///< tuning tables in the bundle (every one the cache holds that is good)
};

/// Writes what collect_export() takes from `cache` with `filter` (the entries that pass it, every
/// tuning table that decodes) into a bundle file at `path` (atomically: temp file + rename).
/// Throws CacheError naming `path` when the file cannot be written.
ExportReport export_bundle(const DiskCache& cache, const std::string& path, const ExportFilter& filter);

/// Adds the entries of the bundle file at `path` to `cache`: each is checked (decode verifies
/// its checksum) and published with its tuning tables by publish_shipped (entries already
/// present are kept; a table there that does not decode or records another fingerprint is moved
/// aside with a warning). Damaged entries and tables of the bundle are skipped and reported in
/// `problems`, as is a table the disk refuses; the rest still go in. Everything that would
/// refuse the whole import is checked before anything is published, with nothing imported:
/// throws InvalidArgument naming `path` and the reason when it is missing, unreadable, a folder,
/// a FIFO, socket or device, or too large (read_input_file), and CacheError naming `path` when
/// it is not a whole bundle, or when it carries tables and the cache's tuning folder cannot be
/// created or written.
ImportReport import_bundle(DiskCache& cache, const std::string& path);

}  // namespace kjit::cache
