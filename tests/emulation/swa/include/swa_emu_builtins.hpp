#pragma once
// CUDA built-ins the fp8 sliding-window decode kernels use beyond tests/emulation/include/
// emu_runtime.hpp (host emulation only): vector types, f16/bf16 rounding (for kjit/f16_bits.cuh
// here), __byte_perm, __shfl_sync. f16 conversions go through the compiler's _Float16 (IEEE binary16, round to
// nearest even, subnormals kept), as the device's cvt.rn.f16x2.f32 does.
#include "emu_runtime.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>

inline uint2 make_uint2(uint32_t x, uint32_t y) { return {x, y}; }


namespace swa_emu {
inline uint16_t f16_bits(float f) {
  const _Float16 h = static_cast<_Float16>(f);
  uint16_t u;
  std::memcpy(&u, &h, 2);
  return u;
}
inline float f16_value(uint16_t u) {
  _Float16 h;
  std::memcpy(&h, &u, 2);
  return static_cast<float>(h);
}
}  // namespace swa_emu

/// PTX prmt (default mode): byte n of the result is byte ((s >> 4n) & 7) of {y, x}.
inline uint32_t __byte_perm(uint32_t x, uint32_t y, uint32_t s) {
  const uint64_t bytes = (static_cast<uint64_t>(y) << 32) | x;
  uint32_t r = 0;
  for (int n = 0; n < 4; ++n) {
    const unsigned sel = (s >> (4 * n)) & 7u;
    r |= static_cast<uint32_t>((bytes >> (8 * sel)) & 0xffu) << (8 * n);
  }
  return r;
}

inline float __shfl_sync(unsigned, float v, int src_lane) {
  emu::WarpScratch& w = emu::my_warp();
  const int lane = emu::my_lane();
  w.f[lane][0] = v;
  w.barrier.arrive_and_wait();
  const float r = w.f[src_lane & 31][0];
  w.barrier.arrive_and_wait();
  return r;
}

inline float __log2f(float x) { return std::log2(x); }

// Round-to-nearest single-precision arithmetic that the compiler must not contract or
// reassociate (as the CUDA intrinsics guarantee).
inline float __fmul_rn(float a, float b) {
  volatile float r = a * b;
  return r;
}
inline float __fsub_rn(float a, float b) {
  volatile float r = a - b;
  return r;
}
inline float __fadd_rn(float a, float b) {
  volatile float r = a + b;
  return r;
}
