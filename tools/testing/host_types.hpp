#pragma once
/// \file host_types.hpp
/// Host-side bf16 conversions for building inputs and reading outputs (round to nearest even,
/// as __float2bfloat16 does; NaN stays NaN).

#include <cmath>
#include <cstdint>
#include <cstring>

namespace kjit::testing {

inline uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fff + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}

inline float bf16_to_float(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// Rounds `f` through bf16 (what the device sees after the host uploads it as bf16).
inline float round_bf16(float f) { return bf16_to_float(float_to_bf16(f)); }

}  // namespace kjit::testing
