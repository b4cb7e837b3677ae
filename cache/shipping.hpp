#pragma once
/// \file shipping.hpp
/// What shipping a precompiled cache takes from one cache and gives to another, shared by its two
/// packagings (bundle.hpp: one file; oci.hpp: an OCI image): which entries an export takes
/// (ExportFilter), reading them and the cache's tuning tables (collect_export), and adding
/// checked entries and tables to a cache (publish_shipped).

#include "cache/entry.hpp"
#include "cache/key.hpp"
#include "cache/manifest.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kjit::cache {

class DiskCache;

/// Which entries an export takes: those that pass every list given (an empty list takes every
/// value).
struct ExportFilter {
  std::vector<std::string> families;  ///< EntryMeta::family values
  std::vector<std::string> targets;   ///< EntryMeta::target values ("sm_90a", "compute_90")
  /// The lines of a warm-up manifest (manifest.hpp), when one is given: then only the entries a
  /// line names are taken (none when it names none). A family line names the entries of its
  /// family, parameters (EntryMeta::template_args read as "name=value" words) and target; a
  /// host-application line names the entry of its key.
  std::optional<std::vector<ManifestEntry>> manifest;

  /// Whether the entry of `key` with metadata `meta` passes.
  bool takes(const Key& key, const EntryMeta& meta) const;
};

/// One entry an export takes: its file's bytes exactly as stored, and what they decode to.
struct ShippedEntry {
  Key key;
  EntryMeta meta;
  std::string bytes;
};

/// One tuning table file (tune_table.hpp) an export takes, exactly as stored.
struct ShippedTable {
  std::string fingerprint_id;
  std::string bytes;
};

/// What collect_export() read.
struct ExportSet {
  std::vector<ShippedEntry> entries;  ///< sorted by key
  std::vector<ShippedTable> tables;   ///< every table of the cache that decodes, by fingerprint id
  uint64_t skipped_bad = 0;           ///< entries left out because they do not decode
  uint64_t skipped_tables = 0;        ///< tuning tables left out (each warned, named)
};

/// The entries of `cache` that pass `filter`, and every tuning table of the cache that decodes
/// and is named for its own fingerprint (the filter does not apply to tables: a table serves
/// whatever its device runs). An entry that does not decode is left out and counted; so is a
/// table that does not decode or whose file name is another fingerprint's (the runtime would
/// not read it there), with a warning naming it. One evicted meanwhile is simply absent.
ExportSet collect_export(const DiskCache& cache, const ExportFilter& filter);

/// What an import did with each entry it brought.
struct ImportReport {
  uint64_t declared = 0;    ///< entries the bundle or image declared
  uint64_t imported = 0;    ///< published and found on disk afterwards
  uint64_t present = 0;     ///< already in the cache: kept as they were
  uint64_t not_stored = 0;  ///< intact but not stored (the publish failed or the cap refused it)
  /// One line per damaged entry or table, skipped ("entry 3 of 7: checksum mismatch").
  std::vector<std::string> problems;
  uint64_t tables = 0;  ///< tuning tables merged into the cache's (publish_table)
};

/// Adds checked `entries` and tuning table files `tables` to `cache`, filling `report` (whose
/// `declared` and `problems` the caller set): each entry is published atomically unless it is
/// present already; each table is merged into the cache's table of its fingerprint (newer
/// measurements win per bucket; several of one fingerprint merge first). A table that does not
/// decode is a problem and skipped. Before anything is published, throws CacheError naming
/// `source` when there are tables and the cache's tuning folder cannot be created or written,
/// with nothing imported. After that nothing throws: a table the disk refuses is a problem.
void publish_shipped(DiskCache& cache, const std::vector<Entry>& entries, const std::vector<std::string>& tables,
                     const std::string& source, ImportReport& report);

}  // namespace kjit::cache
