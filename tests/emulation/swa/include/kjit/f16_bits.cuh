#pragma once
// Host emulation of kernel_sources/kjit/f16_bits.cuh for the fp8 sliding-window decode emulator:
// the same names, with the cvt instructions' rounding (nearest even) done on the host.
#include "kjit/config.cuh"

namespace kjit {

struct bf16 {
  uint16_t bits;
};

inline float bf16_to_f32(bf16 v) { return __uint_as_float(static_cast<uint32_t>(v.bits) << 16); }
inline bf16 f32_to_bf16(float f) { return {emu::bf16_bits(f)}; }
inline float f16_to_f32(uint16_t bits) { return swa_emu::f16_value(bits); }
inline uint32_t pack_bf16x2(float lo, float hi) {
  return static_cast<uint32_t>(emu::bf16_bits(lo)) | (static_cast<uint32_t>(emu::bf16_bits(hi)) << 16);
}
inline uint32_t pack_f16x2(float lo, float hi) {
  return static_cast<uint32_t>(swa_emu::f16_bits(lo)) | (static_cast<uint32_t>(swa_emu::f16_bits(hi)) << 16);
}

}  // namespace kjit
