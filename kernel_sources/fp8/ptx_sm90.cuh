#pragma once
// The FP8 wgmma of the Hopper GEMM (kernel_sources/fp8/gemm_sm90.cu): wgmma.mma_async m64nNk32
// with e4m3/e5m2 operands from shared-memory descriptors. The rest of the sm_90a PTX it uses
// (mbarriers, TMA, clusters, fences) is kjit/sm90.cuh. Callers compile these only for sm_90a
// (__CUDA_ARCH_FEAT_SM90_ALL).
#include "kjit/config.cuh"
#include "kjit/sm90.cuh"
#include "fp8/quantize_params.h"

namespace kjit::fp8::sm90 {

using namespace kjit::sm90;

// m64n128k32: 64 f32 accumulators per thread.
#define KJIT_WGMMA_M64N128K32(TA, TB)                                                               \
  asm volatile(                                                                                     \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                                  \
      "wgmma.mma_async.sync.aligned.m64n128k32.f32." TA "." TB " "                                  \
      KJIT_SM90_ACC64_REGS ", "                                                                     \
      "%64, %65, p, 1, 1;\n}\n"                                                                     \
      : KJIT_SM90_ACC64                                                                             \
      : "l"(desc_a), "l"(desc_b), "r"(scale_d))

// m64n256k32: 128 f32 accumulators per thread.
#define KJIT_WGMMA_M64N256K32(TA, TB)                                                               \
  asm volatile(                                                                                     \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"                                                 \
      "wgmma.mma_async.sync.aligned.m64n256k32.f32." TA "." TB " "                                  \
      KJIT_SM90_ACC128_REGS ", "                                                                    \
      "%128, %129, p, 1, 1;\n}\n"                                                                   \
      : KJIT_SM90_ACC128                                                                            \
      : "l"(desc_a), "l"(desc_b), "r"(scale_d))

/// d (+)= A · B for one m64nNk32 step of the warpgroup: A 64 × 32 and B N × 32 (both K-major)
/// from shared-memory descriptors; scale_d = 0 overwrites d. Accumulator layout (PTX ISA,
/// "wgmma m64nNk32 D fragments"): thread t of the warpgroup, warp w = t / 32, lane l:
/// d[4j + r] = D[16w + l/4 + 8(r/2)][8j + 2(l%4) + (r%2)].
template <int kN, int kFa, int kFb>
KJIT_DEVICE void wgmma_m64k32(float (&d)[kN / 2], uint64_t desc_a, uint64_t desc_b, uint32_t scale_d) {
  static_assert(kN == 128 || kN == 256, "wgmma N");
#define KJIT_WGMMA_PICK(M)                                                                          \
  if constexpr (kFa == kFormatE4M3 && kFb == kFormatE4M3) {                                         \
    M("e4m3", "e4m3");                                                                              \
  } else if constexpr (kFa == kFormatE4M3 && kFb == kFormatE5M2) {                                  \
    M("e4m3", "e5m2");                                                                              \
  } else if constexpr (kFa == kFormatE5M2 && kFb == kFormatE4M3) {                                  \
    M("e5m2", "e4m3");                                                                              \
  } else {                                                                                          \
    M("e5m2", "e5m2");                                                                              \
  }
  if constexpr (kN == 128) {
    KJIT_WGMMA_PICK(KJIT_WGMMA_M64N128K32)
  } else {
    KJIT_WGMMA_PICK(KJIT_WGMMA_M64N256K32)
  }
#undef KJIT_WGMMA_PICK
}

#undef KJIT_WGMMA_M64N128K32
#undef KJIT_WGMMA_M64N256K32

}  // namespace kjit::fp8::sm90
