#pragma once
/// \file le_bytes.hpp
/// Little-endian integers in byte strings: how the entry and bundle formats store their sizes.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kjit::cache::detail {

/// Appends the `width` low bytes of `v`, least significant first.
inline void put_le(std::string& out, uint64_t v, int width) {
  for (int i = 0; i < width; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

/// Reads `width` bytes at `offset` (the caller checked the bounds) as a little-endian integer.
inline uint64_t get_le(std::string_view bytes, size_t offset, int width) {
  uint64_t v = 0;
  for (int i = width - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(bytes[offset + static_cast<size_t>(i)]);
  return v;
}

}  // namespace kjit::cache::detail

namespace kjit::cache {

// The runtime's memo files store their sizes the same way.
using detail::get_le;
using detail::put_le;

}  // namespace kjit::cache
