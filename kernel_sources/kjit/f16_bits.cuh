#pragma once
// 16-bit floats (bf16, f16) as bits: the bf16 storage type, conversions to and from f32, and
// pairs packed into one 32-bit register (the operand format of mma.sync / wgmma A fragments and
// of 4-byte stores). Written with the PTX cvt instructions (sm_80+) rather than through
// cuda_bf16.h / cuda_fp16.h, whose parsing was most of NVRTC's front-end time for every kernel;
// the instructions are the ones those headers emit on sm_80+.
#include "kjit/config.cuh"

namespace kjit {

/// One bf16 value: storage only, arithmetic goes through f32 (bf16_to_f32 / f32_to_bf16).
struct alignas(2) bf16 {
  uint16_t bits;
};

/// bf16 → f32, exact: the bf16 bits are the high half of the f32 (cvt.f32.bf16 on sm_90+).
KJIT_DEVICE float bf16_to_f32(bf16 v) {
  float f;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm("cvt.f32.bf16 %0, %1;" : "=f"(f) : "h"(v.bits));
#else
  asm("mov.b32 %0, {0, %1};" : "=f"(f) : "h"(v.bits));
#endif
  return f;
}

/// f32 → bf16, rounded to nearest even (NaN stays NaN).
KJIT_DEVICE bf16 f32_to_bf16(float f) {
  bf16 v;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(v.bits) : "f"(f));
  return v;
}

/// f16 bits → f32, exact.
KJIT_DEVICE float f16_to_f32(uint16_t bits) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(bits));
  return f;
}

/// (lo, hi) → bf16x2, `lo` in the low half, each rounded to nearest even.
KJIT_DEVICE uint32_t pack_bf16x2(float lo, float hi) {
  uint32_t d;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
}

/// (lo, hi) → f16x2, `lo` in the low half, each rounded to nearest even (overflow → ±inf).
KJIT_DEVICE uint32_t pack_f16x2(float lo, float hi) {
  uint32_t d;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
}

}  // namespace kjit
