// What exports take and imports give, for bundles and OCI images alike (shipping.hpp).

#include "cache/shipping.hpp"

#include "cache/file_util.hpp"
#include "cache/store.hpp"
#include "cache/tune_table.hpp"
#include "cache/warn.hpp"

#include <kjit/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <map>

namespace kjit::cache {
namespace {

/// As tune_table.cc refuses larger table files.
constexpr uint64_t kMaxTableBytes = uint64_t{64} << 20;
/// As the store refuses larger entry files.
constexpr uint64_t kMaxEntryBytes = uint64_t{1} << 30;

/// The cache's root as the user named it: DiskCache::root() is its versioned folder (<root>/v1),
/// and tuning tables live beside that, in <root>/tuning.
std::string cache_root_of(const DiskCache& cache) {
  const std::string& versioned = cache.root();
  const size_t slash = versioned.rfind('/');
  return slash == std::string::npos ? std::string(".") : versioned.substr(0, slash);
}

bool wanted(const std::vector<std::string>& list, const std::string& value) {
  return list.empty() || std::find(list.begin(), list.end(), value) != list.end();
}

}  // namespace

bool ExportFilter::takes(const Key& key, const EntryMeta& meta) const {
  if (!wanted(families, meta.family) || !wanted(targets, meta.target)) return false;
  if (!manifest) return true;
  const std::string hex = key.hex();
  std::optional<std::map<std::string, std::string>> params;
  bool parsed = false;
  for (const ManifestEntry& line : *manifest) {
    if (line.user) {
      if (line.key == hex) return true;
      continue;
    }
    if (line.family != meta.family || line.target != meta.target) continue;
    if (!parsed) {
      params = params_of_template_args(meta.template_args);
      parsed = true;
    }
    if (params && *params == line.params) return true;
  }
  return false;
}

ExportSet collect_export(const DiskCache& cache, const ExportFilter& filter) {
  ExportSet out;
  for (const EntryInfo& e : cache.list()) {
    if (!e.meta) {
      ++out.skipped_bad;
      continue;
    }
    if (!filter.takes(e.key, *e.meta)) continue;
    std::string bytes;
    // Not found: evicted since the listing, so not part of the cache any more.
    if (detail::read_file(e.path, kMaxEntryBytes, detail::kReadNoFollow, &bytes) != 0) continue;
    out.entries.push_back({e.key, *e.meta, std::move(bytes)});
  }
  std::sort(out.entries.begin(), out.entries.end(),
            [](const ShippedEntry& a, const ShippedEntry& b) { return a.key.hex() < b.key.hex(); });
  if (cache.root().empty()) return out;
  const std::string root = cache_root_of(cache);
  for (const std::string& name : list_tables(root)) {  // sorted by name: <fingerprint id>.json
    std::string bytes;
    const std::string table = tuning_dir(root) + "/" + name;
    if (detail::read_file(table, kMaxTableBytes, detail::kReadNoFollow, &bytes) != 0) continue;
    try {
      std::string id = decode_table(bytes).fingerprint_id;
      if (name != id + ".json") {
        ++out.skipped_tables;
        warn(fmt::format("tuning table {} left out of the export: it holds the table of fingerprint {}, which "
                         "belongs in {}.json (the runtime does not read it under this name)",
                         table, id, id));
        continue;
      }
      out.tables.push_back({std::move(id), std::move(bytes)});
    } catch (const CacheError& e) {
      ++out.skipped_tables;
      warn(fmt::format("tuning table {} left out of the export: {}", table, e.what()));
    }
  }
  return out;
}

void publish_shipped(DiskCache& cache, const std::vector<Entry>& entries, const std::vector<std::string>& table_files,
                     const std::string& source, ImportReport& report) {
  // Everything that can refuse the import is checked first, so that it either refuses with
  // nothing published or publishes all it reports.
  std::map<std::string, TuneTable> tables;  // by fingerprint id; two of one id merge
  for (size_t i = 0; i < table_files.size(); ++i) {
    TuneTable table;
    try {
      table = decode_table(table_files[i]);
    } catch (const CacheError& e) {
      report.problems.push_back(fmt::format("tuning table {} of {}: {}", i + 1, table_files.size(), e.what()));
      continue;
    }
    const auto [it, fresh] = tables.emplace(table.fingerprint_id, table);
    if (!fresh) merge_tables(it->second, table);
  }
  const std::string root = cache.root().empty() ? std::string() : cache_root_of(cache);
  if (!tables.empty()) {
    int err = cache.root().empty() || !cache.writable() ? EROFS : detail::make_dirs(tuning_dir(root));
    if (err == 0) err = detail::probe_writable(tuning_dir(root));
    if (err != 0) {
      throw CacheError(fmt::format("{}: cannot merge its {} tuning table{} into {}: {}; nothing was imported", source,
                                   tables.size(), tables.size() == 1 ? "" : "s",
                                   cache.root().empty() ? std::string("a memory-only cache") : tuning_dir(root),
                                   detail::errno_text(err)));
    }
  }

  for (const Entry& e : entries) {
    if (cache.lookup(e.key, /*count_hit=*/false)) {
      ++report.present;
      continue;
    }
    cache.publish(e);  // atomic; a failure is warned by the store
    if (cache.lookup(e.key, /*count_hit=*/false)) {
      ++report.imported;
    } else {
      ++report.not_stored;
    }
  }
  // A table already there that does not decode or records another fingerprint is moved aside
  // by publish_table; what is left to fail is the disk, and one table's failure stops no other.
  for (const auto& [id, table] : tables) {
    try {
      publish_table(root, table);
      ++report.tables;
    } catch (const CacheError& e) {
      report.problems.push_back(fmt::format("tuning table {}: {}", id, e.what()));
    }
  }
}

}  // namespace kjit::cache
