#pragma once
/// \file key.hpp
/// The specialization key: XXH3-128 over a canonical, length-prefixed serialization of every
/// input that changes the binary: source and transitive headers, name expressions, target, NVRTC
/// and CUDA headers versions, normalized options and kFormatVersion (the runtime adds the fields;
/// KeyBuilder below serializes them).

#include <cstdint>
#include <string>
#include <string_view>

namespace kjit::cache {

/// Version of the key serialization and the entry format; bump it to orphan every old entry.
inline constexpr uint32_t kFormatVersion = 1;

/// A 128-bit content key.
struct Key {
  uint64_t hi = 0;
  uint64_t lo = 0;

  /// 32 lower-case hex digits, hi first.
  std::string hex() const;
  /// Parses hex(); returns false for anything else.
  static bool from_hex(std::string_view text, Key* out);

  friend bool operator==(const Key& a, const Key& b) noexcept { return a.hi == b.hi && a.lo == b.lo; }
  friend bool operator!=(const Key& a, const Key& b) noexcept { return !(a == b); }
};

/// XXH3-128 of `bytes` as 32 lower-case hex digits, hi first (Key::hex's spelling): the digest
/// the key takes of each file a compile reads, and that entries record (EntryMeta::inputs).
std::string digest_hex(std::string_view bytes);

/// Hash functor so Key can index unordered containers.
struct KeyHash {
  size_t operator()(const Key& k) const noexcept { return static_cast<size_t>(k.lo ^ (k.hi * 0x9E3779B97F4A7C15ull)); }
};

/// Builds a Key from named fields. Each field is serialized as
/// (u32 name length, name bytes, u64 value length, value bytes), so no two different field
/// sequences serialize alike. The serialization starts with kFormatVersion.
class KeyBuilder {
 public:
  /// Starts the serialization with kFormatVersion (u32, little-endian).
  KeyBuilder();
  /// Appends one field; all lengths are little-endian.
  KeyBuilder& add(std::string_view name, std::string_view value);
  /// Appends an integer field as its decimal text: add(n, 5) is the same as add(n, "5").
  KeyBuilder& add(std::string_view name, int64_t value);
  /// XXH3-128 of bytes(); the builder can keep growing afterwards.
  Key finish() const;
  /// The canonical bytes hashed so far (for tests and `kjit compile --explain`).
  const std::string& bytes() const noexcept { return bytes_; }

 private:
  std::string bytes_;
};

}  // namespace kjit::cache
