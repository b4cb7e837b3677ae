#pragma once
// The bf16 wgmma of the Hopper prefill kernel (attention/prefill_sm90.cu): m64nNk16 with A from
// shared memory or from registers and B K-major or MN-major (transposed: V [kv, d] read in
// place). The rest of the sm_90a PTX it uses (mbarriers, 4-D TMA, fences, descriptors) is
// kjit/sm90.cuh. Callers compile these only for sm_90a (__CUDA_ARCH_FEAT_SM90_ALL).
#include "kjit/config.cuh"
#include "kjit/sm90.cuh"

namespace kjit::attention::sm90 {

using namespace kjit::sm90;

// Generated operand lists (64 or 32 f32 accumulators per thread).
#define KJIT_WGMMA_BF16_SS_N64                                                                      \
  asm volatile(                                                                                     \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                                  \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "                                       \
      KJIT_SM90_ACC32_REGS ", "                                                                     \
      "%32, %33, p, 1, 1, 0, 0;\n}\n"                                                               \
      : KJIT_SM90_ACC32                                                                             \
      : "l"(desc_a), "l"(desc_b), "r"(scale_d))

#define KJIT_WGMMA_BF16_RS_N64                                                                      \
  asm volatile(                                                                                     \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                                  \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "                                       \
      KJIT_SM90_ACC32_REGS ", "                                                                     \
      "{%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"                                                 \
      : KJIT_SM90_ACC32                                                                             \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d))

#define KJIT_WGMMA_BF16_SS_N128                                                                     \
  asm volatile(                                                                                     \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                                  \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "                                      \
      KJIT_SM90_ACC64_REGS ", "                                                                     \
      "%64, %65, p, 1, 1, 0, 0;\n}\n"                                                               \
      : KJIT_SM90_ACC64                                                                             \
      : "l"(desc_a), "l"(desc_b), "r"(scale_d))

#define KJIT_WGMMA_BF16_RS_N128                                                                     \
  asm volatile(                                                                                     \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                                  \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "                                      \
      KJIT_SM90_ACC64_REGS ", "                                                                     \
      "{%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"                                                 \
      : KJIT_SM90_ACC64                                                                             \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d))

/// d (+)= A · B for one m64nNk16 bf16 step of the warpgroup, A (64 × 16) and B (N × 16) both
/// K-major from shared-memory descriptors; scale_d = 0 overwrites d. Accumulator layout (PTX ISA,
/// "wgmma D fragments"): thread t of the warpgroup, warp w = t / 32, lane l:
/// d[4j + r] = D[16w + l/4 + 8(r/2)][8j + 2(l%4) + (r%2)].
template <int kN>
KJIT_DEVICE void wgmma_bf16_ss(float (&d)[kN / 2], uint64_t desc_a, uint64_t desc_b, uint32_t scale_d) {
  static_assert(kN == 64 || kN == 128, "wgmma N");
  if constexpr (kN == 64) {
    KJIT_WGMMA_BF16_SS_N64;
  } else {
    KJIT_WGMMA_BF16_SS_N128;
  }
}

/// d (+)= A · B for one m64nNk16 bf16 step, A from registers and B from an MN-major
/// (transposed) shared-memory descriptor. A fragment (as mma.m16n8k16's, per warp's 16 rows):
/// a[0] = (row l/4, k 2(l%4)..+1), a[1] = (row l/4 + 8, same k), a[2] = (row l/4, k + 8),
/// a[3] = (row l/4 + 8, k + 8), bf16x2 with the lower k in the low half. So the D fragments of two
/// adjacent n8 tiles, packed to bf16, are the A fragment of one k16 step (P stays in registers).
template <int kN>
KJIT_DEVICE void wgmma_bf16_rs_tb(float (&d)[kN / 2], const uint32_t (&a)[4], uint64_t desc_b, uint32_t scale_d) {
  static_assert(kN == 64 || kN == 128, "wgmma N");
  if constexpr (kN == 64) {
    KJIT_WGMMA_BF16_RS_N64;
  } else {
    KJIT_WGMMA_BF16_RS_N128;
  }
}

#undef KJIT_WGMMA_BF16_SS_N64
#undef KJIT_WGMMA_BF16_RS_N64
#undef KJIT_WGMMA_BF16_SS_N128
#undef KJIT_WGMMA_BF16_RS_N128

}  // namespace kjit::attention::sm90
