// Cache bundles (layout in bundle.hpp).

#include "cache/bundle.hpp"

#include "cache/key.hpp"
#include "cache/file_util.hpp"
#include "cache/input_file.hpp"
#include "cache/le_bytes.hpp"
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

constexpr std::string_view kMagic = "KJITBNDL";
constexpr std::string_view kTuneMagic = "KJITTUNE";
/// As tune_table.cc refuses larger table files.
constexpr uint64_t kMaxTableBytes = uint64_t{64} << 20;
constexpr size_t kHeaderBytes = 20;
/// A bundle larger than this is refused before it is read: the store's own per-entry cap times
/// a few hundred specializations is far below it.
constexpr uint64_t kMaxBundleBytes = uint64_t{16} << 30;
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

std::string encode_bundle(const std::vector<std::string>& encoded_entries, const std::vector<std::string>& tables) {
  std::string out(kMagic);
  detail::put_le(out, kFormatVersion, 4);
  detail::put_le(out, encoded_entries.size(), 8);
  for (const std::string& e : encoded_entries) {
    detail::put_le(out, e.size(), 8);
    out += e;
  }
  if (!tables.empty()) {
    out += kTuneMagic;
    detail::put_le(out, tables.size(), 8);
    for (const std::string& t : tables) {
      detail::put_le(out, t.size(), 8);
      out += t;
    }
  }
  return out;
}

BundleContents decode_bundle(std::string_view bytes) {
  if (bytes.size() < kHeaderBytes || bytes.substr(0, kMagic.size()) != kMagic) {
    throw CacheError("not a kjit cache bundle (bad magic)");
  }
  const uint64_t version = detail::get_le(bytes, 8, 4);
  if (version != kFormatVersion) {
    throw CacheError(fmt::format("cache bundle format version {} != {} (made by another kjit)", version, kFormatVersion));
  }
  BundleContents out;
  const uint64_t count = detail::get_le(bytes, 12, 8);
  size_t at = kHeaderBytes;
  for (uint64_t i = 0; i < count; ++i) {
    if (bytes.size() - at < 8) throw CacheError(fmt::format("cache bundle truncated in entry {} of {}", i + 1, count));
    const uint64_t size = detail::get_le(bytes, at, 8);
    at += 8;
    if (size > bytes.size() - at) throw CacheError(fmt::format("cache bundle truncated in entry {} of {}", i + 1, count));
    std::string why;
    if (std::optional<Entry> e = decode(bytes.substr(at, size), nullptr, &why)) {
      out.entries.push_back(std::move(*e));
    } else {
      out.problems.push_back(fmt::format("entry {} of {}: {}", i + 1, count, why));
    }
    at += size;
  }
  if (bytes.size() - at >= 16 && bytes.substr(at, kTuneMagic.size()) == kTuneMagic) {
    const uint64_t tables = detail::get_le(bytes, at + 8, 8);
    at += 16;
    for (uint64_t i = 0; i < tables; ++i) {
      if (bytes.size() - at < 8) throw CacheError(fmt::format("cache bundle truncated in tuning table {} of {}", i + 1, tables));
      const uint64_t size = detail::get_le(bytes, at, 8);
      at += 8;
      if (size > bytes.size() - at) {
        throw CacheError(fmt::format("cache bundle truncated in tuning table {} of {}", i + 1, tables));
      }
      out.tables.emplace_back(bytes.substr(at, size));
      at += size;
    }
  }
  if (at != bytes.size()) throw CacheError(fmt::format("cache bundle has {} trailing bytes", bytes.size() - at));
  out.count = count;
  return out;
}

ExportReport export_bundle(const DiskCache& cache, const std::string& path, const BundleFilter& filter) {
  ExportReport report;
  std::vector<std::string> encoded;
  for (const EntryInfo& e : cache.list()) {
    if (!e.meta) {
      ++report.skipped_bad;
      continue;
    }
    if (!wanted(filter.families, e.meta->family) || !wanted(filter.targets, e.meta->target)) continue;
    std::string bytes;
    // Not found: evicted since the listing, so not part of the cache any more.
    if (detail::read_file(e.path, kMaxEntryBytes, detail::kReadNoFollow, &bytes) != 0) continue;
    encoded.push_back(std::move(bytes));
  }
  std::vector<std::string> tables;
  if (!cache.root().empty()) {
    const std::string root = cache_root_of(cache);
    for (const std::string& name : list_tables(root)) {
      std::string bytes;
      const std::string table = tuning_dir(root) + "/" + name;
      if (detail::read_file(table, kMaxTableBytes, detail::kReadNoFollow, &bytes) != 0) continue;
      try {
        decode_table(bytes);
      } catch (const CacheError& e) {
        ++report.skipped_bad;
        warn(fmt::format("tuning table {} left out of the bundle: {}", table, e.what()));
        continue;
      }
      tables.push_back(std::move(bytes));
    }
  }
  const std::string bundle = encode_bundle(encoded, tables);
  report.tables = tables.size();
  if (const int err = detail::write_file_atomic(path, bundle); err != 0) {
    throw CacheError(fmt::format("cannot write bundle {}: {}", path, detail::errno_text(err)));
  }
  report.entries = encoded.size();
  report.bytes = bundle.size();
  return report;
}

ImportReport import_bundle(DiskCache& cache, const std::string& path) {
  const std::string bytes = read_input_file(path, "bundle", kMaxBundleBytes);
  BundleContents contents;
  try {
    contents = decode_bundle(bytes);
  } catch (const CacheError& e) {
    throw CacheError(fmt::format("{}: {}", path, e.what()));
  }
  ImportReport report;
  report.declared = contents.count;
  report.problems = std::move(contents.problems);

  // Everything that can refuse the import is checked first, so that it either refuses with
  // nothing published or publishes all it reports.
  std::map<std::string, TuneTable> tables;  // by fingerprint id; two of one id merge
  for (size_t i = 0; i < contents.tables.size(); ++i) {
    TuneTable table;
    try {
      table = decode_table(contents.tables[i]);
    } catch (const CacheError& e) {
      report.problems.push_back(fmt::format("tuning table {} of {}: {}", i + 1, contents.tables.size(), e.what()));
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
      throw CacheError(fmt::format("{}: cannot merge its {} tuning table{} into {}: {}; nothing was imported", path,
                                   tables.size(), tables.size() == 1 ? "" : "s",
                                   cache.root().empty() ? std::string("a memory-only cache") : tuning_dir(root),
                                   detail::errno_text(err)));
    }
  }

  for (const Entry& e : contents.entries) {
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
  return report;
}

}  // namespace kjit::cache
