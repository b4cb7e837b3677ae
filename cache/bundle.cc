// Cache bundles (layout in bundle.hpp).

#include "cache/bundle.hpp"

#include "cache/file_util.hpp"
#include "cache/input_file.hpp"
#include "cache/le_bytes.hpp"

#include <kjit/error.hpp>

#include <fmt/format.h>

namespace kjit::cache {
namespace {

constexpr std::string_view kMagic = "KJITBNDL";
constexpr std::string_view kTuneMagic = "KJITTUNE";
constexpr size_t kHeaderBytes = 20;
/// A bundle larger than this is refused before it is read: the store's own per-entry cap times
/// a few hundred specializations is far below it.
constexpr uint64_t kMaxBundleBytes = uint64_t{16} << 30;

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

ExportReport export_bundle(const DiskCache& cache, const std::string& path, const ExportFilter& filter) {
  ExportSet set = collect_export(cache, filter);
  std::vector<std::string> entries, tables;
  for (ShippedEntry& e : set.entries) entries.push_back(std::move(e.bytes));
  for (ShippedTable& t : set.tables) tables.push_back(std::move(t.bytes));
  const std::string bundle = encode_bundle(entries, tables);
  if (const int err = detail::write_file_atomic(path, bundle); err != 0) {
    throw CacheError(fmt::format("cannot write bundle {}: {}", path, detail::errno_text(err)));
  }
  ExportReport report;
  report.entries = entries.size();
  report.tables = tables.size();
  report.bytes = bundle.size();
  report.skipped_bad = set.skipped_bad;
  report.skipped_tables = set.skipped_tables;
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
  publish_shipped(cache, contents.entries, contents.tables, path, report);
  return report;
}

}  // namespace kjit::cache
