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
/// Nothing follows the last entry.

#include "cache/entry.hpp"

#include <string>
#include <string_view>
#include <vector>

namespace kjit::cache {

/// Packs encoded entries (each one file's bytes, as encode() makes them) into a bundle.
std::string encode_bundle(const std::vector<std::string>& encoded_entries);

/// What a bundle held: its intact entries, and one line per entry that did not decode
/// ("entry 3 of 7: checksum mismatch").
struct BundleContents {
  std::vector<Entry> entries;
  std::vector<std::string> problems;
  size_t count = 0;  ///< entries the bundle declared
};

/// Parses a bundle. Throws CacheError when the bytes are not a whole bundle (bad magic or
/// version, truncated, trailing bytes); an entry that does not decode is reported in `problems`
/// and skipped, so one damaged entry does not lose the rest.
BundleContents decode_bundle(std::string_view bytes);

}  // namespace kjit::cache
