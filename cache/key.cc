// The specialization key: canonical field serialization and its XXH3-128 digest.

#include "cache/key.hpp"

#include <xxhash.h>

#include <cstdio>

namespace kjit::cache {
namespace {

// Fixed little-endian widths keep the serialization identical on every host, so a key computed
// by `kjit precompile` on one machine names the same entry on another.
void append_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void append_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;  // upper case is rejected too: hex() is the only spelling, and file names use it
}

}  // namespace

std::string Key::hex() const {
  char buf[33];
  std::snprintf(buf, sizeof(buf), "%016llx%016llx", static_cast<unsigned long long>(hi),
                static_cast<unsigned long long>(lo));
  return std::string(buf, 32);
}

bool Key::from_hex(std::string_view text, Key* out) {
  if (text.size() != 32) return false;
  uint64_t words[2] = {0, 0};
  for (size_t i = 0; i < 32; ++i) {
    const int d = hex_digit(text[i]);
    if (d < 0) return false;
    words[i / 16] = (words[i / 16] << 4) | static_cast<uint64_t>(d);
  }
  if (out != nullptr) {
    out->hi = words[0];
    out->lo = words[1];
  }
  return true;
}

std::string digest_hex(std::string_view bytes) {
  const XXH128_hash_t h = XXH3_128bits(bytes.data(), bytes.size());
  return Key{h.high64, h.low64}.hex();
}

KeyBuilder::KeyBuilder() { append_u32(bytes_, kFormatVersion); }

KeyBuilder& KeyBuilder::add(std::string_view name, std::string_view value) {
  append_u32(bytes_, static_cast<uint32_t>(name.size()));
  bytes_.append(name.data(), name.size());
  append_u64(bytes_, static_cast<uint64_t>(value.size()));
  bytes_.append(value.data(), value.size());
  return *this;
}

KeyBuilder& KeyBuilder::add(std::string_view name, int64_t value) {
  // Decimal text rather than raw bytes keeps `kjit compile --explain` output readable; an
  // integer field is therefore the same as its decimal spelling added as a string.
  return add(name, std::string_view(std::to_string(value)));
}

Key KeyBuilder::finish() const {
  const XXH128_hash_t h = XXH3_128bits(bytes_.data(), bytes_.size());
  return Key{h.high64, h.low64};
}

}  // namespace kjit::cache
