#pragma once
// The fp8 wgmma of the Hopper sliding-window decode (mla/swa_decode_sm90.cu): m64n64k32 with an
// e4m3 A and an e4m3/e5m2 B from shared-memory descriptors, and the E4M3 pack. The rest of the
// sm_90a PTX it uses is kjit/sm90.cuh (and fp8/ptx_sm90.cuh for m64n256k32). Callers compile
// these only for sm_90a (__CUDA_ARCH_FEAT_SM90_ALL).
#include "kjit/config.cuh"
#include "kjit/sm90.cuh"
#include "fp8/ptx_sm90.cuh"

namespace kjit::mla::sm90 {

using namespace kjit::sm90;

/// E4M3 bytes of (lo, hi), round to nearest even, saturated to ±448, in the low 16 bits (lo in
/// the lower byte).
KJIT_DEVICE uint32_t e4m3x2_pack(float lo, float hi) {
  unsigned short d;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(d) : "f"(hi), "f"(lo));
  return d;
}

// m64n64k32, e4m3 A: 32 f32 accumulators per thread.
#define KJIT_SWA_WGMMA_M64N64K32(TB)                                                                \
  asm volatile(                                                                                     \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                                  \
      "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3." TB " "                                     \
      KJIT_SM90_ACC32_REGS ", "                                                                     \
      "%32, %33, p, 1, 1;\n}\n"                                                                     \
      : KJIT_SM90_ACC32                                                                             \
      : "l"(desc_a), "l"(desc_b), "r"(scale_d))

/// d (+)= A · B for one m64n64k32 step of the warpgroup: A 64 × 32 E4M3 and B 64 × 32 (E4M3, or
/// E5M2 when kE5M2B), both K-major behind 128-byte-swizzle descriptors; scale_d 0 overwrites d.
/// Accumulators (PTX ISA, wgmma D fragments): warp w of the warpgroup, lane l:
/// d[4j + r] = D[16w + l/4 + 8(r/2)][8j + 2(l%4) + r%2], j < 8.
template <bool kE5M2B>
KJIT_DEVICE void wgmma_m64n64k32(float (&d)[32], uint64_t desc_a, uint64_t desc_b, uint32_t scale_d) {
  if constexpr (kE5M2B) {
    KJIT_SWA_WGMMA_M64N64K32("e5m2");
  } else {
    KJIT_SWA_WGMMA_M64N64K32("e4m3");
  }
}
#undef KJIT_SWA_WGMMA_M64N64K32

}  // namespace kjit::mla::sm90
