// Cache bundles (layout in bundle.hpp).

#include "cache/bundle.hpp"

#include "cache/key.hpp"
#include "cache/file_util.hpp"
#include "cache/le_bytes.hpp"
#include "cache/store.hpp"

#include <kjit/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>

namespace kjit::cache {
namespace {

constexpr std::string_view kMagic = "KJITBNDL";
constexpr size_t kHeaderBytes = 20;
/// A bundle larger than this is refused before it is read: the store's own per-entry cap times
/// a few hundred specializations is far below it.
constexpr uint64_t kMaxBundleBytes = uint64_t{16} << 30;
/// As the store refuses larger entry files.
constexpr uint64_t kMaxEntryBytes = uint64_t{1} << 30;

bool wanted(const std::vector<std::string>& list, const std::string& value) {
  return list.empty() || std::find(list.begin(), list.end(), value) != list.end();
}

}  // namespace

std::string encode_bundle(const std::vector<std::string>& encoded_entries) {
  std::string out(kMagic);
  detail::put_le(out, kFormatVersion, 4);
  detail::put_le(out, encoded_entries.size(), 8);
  for (const std::string& e : encoded_entries) {
    detail::put_le(out, e.size(), 8);
    out += e;
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
  const std::string bundle = encode_bundle(encoded);
  if (const int err = detail::write_file_atomic(path, bundle); err != 0) {
    throw CacheError(fmt::format("cannot write bundle {}: {}", path, detail::errno_text(err)));
  }
  report.entries = encoded.size();
  report.bytes = bundle.size();
  return report;
}

ImportReport import_bundle(DiskCache& cache, const std::string& path) {
  std::string bytes;
  if (const int err = detail::read_file(path, kMaxBundleBytes, detail::kReadPlain, &bytes); err != 0) {
    throw CacheError(fmt::format("cannot read bundle {}: {}", path,
                                 err == EFBIG ? std::string("larger than any bundle kjit writes") : detail::errno_text(err)));
  }
  BundleContents contents;
  try {
    contents = decode_bundle(bytes);
  } catch (const CacheError& e) {
    throw CacheError(fmt::format("{}: {}", path, e.what()));
  }
  ImportReport report;
  report.declared = contents.count;
  report.problems = std::move(contents.problems);
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
  return report;
}

}  // namespace kjit::cache
