#pragma once
// Conversions between f32/f16 and the FP8 formats (E4M3, E5M2), two values per instruction
// (cvt ... e4m3x2 / e5m2x2: sm_89+). Packed pairs keep the lower-indexed element in the lower
// byte or half, the order mma.sync and wgmma read 8-bit and 16-bit operands in.
#include "kjit/config.cuh"
#include "kjit/fp8_format.h"

namespace kjit {

/// (lo, hi) → two E4M3 bytes in the low 16 bits (lo in the lower byte), rounded to nearest even
/// and saturated to ±448.
KJIT_DEVICE uint32_t e4m3x2_pack(float lo, float hi) {
  unsigned short d;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(d) : "f"(hi), "f"(lo));
  return d;
}

/// (lo, hi) → two bytes of format kFmt (fp8::kFormatE4M3 / kFormatE5M2), lo in the low byte,
/// rounded to nearest even and saturated to the format's largest finite value (±448 / ±57344);
/// NaN stays NaN.
template <int kFmt>
KJIT_DEVICE uint32_t cvt_fp8x2(float lo, float hi) {
  unsigned short d;
  if (kFmt == fp8::kFormatE4M3) {
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(d) : "f"(hi), "f"(lo));
  } else {
    asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;\n" : "=h"(d) : "f"(hi), "f"(lo));
  }
  return d;
}

/// The two E4M3 values in the low (kHigh false) or high 16 bits of `w` → f16x2, exactly (the
/// lower byte to the lower half).
template <bool kHigh>
KJIT_DEVICE uint32_t cvt_e4m3x2_f16x2(uint32_t w) {
  uint32_t d = 0;
  if (kHigh) {
    asm("{\n .reg .b16 lo, hi;\n mov.b32 {lo, hi}, %1;\n cvt.rn.f16x2.e4m3x2 %0, hi;\n}\n"
        : "=r"(d)
        : "r"(w));
  } else {
    asm("{\n .reg .b16 lo, hi;\n mov.b32 {lo, hi}, %1;\n cvt.rn.f16x2.e4m3x2 %0, lo;\n}\n"
        : "=r"(d)
        : "r"(w));
  }
  return d;
}

}  // namespace kjit
