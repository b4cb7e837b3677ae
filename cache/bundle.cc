// Cache bundles (layout in bundle.hpp).

#include "cache/bundle.hpp"

#include "cache/key.hpp"
#include "cache/le_bytes.hpp"

#include <kjit/error.hpp>

#include <fmt/format.h>

namespace kjit::cache {
namespace {

constexpr std::string_view kMagic = "KJITBNDL";
constexpr size_t kHeaderBytes = 20;

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

}  // namespace kjit::cache
