#pragma once
// Warp-level tensor-core MMA (mma.sync) and the ldmatrix loads that feed it: m16n8k16 with bf16
// or f16 inputs and m16n8k32 with E4M3/E5M2 inputs, f32 accumulators throughout.
//
// Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16" / "mma.m16n8k32"), with
// g = lane / 4 and t = lane % 4, the lower k (or column) in the lower bits of a register:
//   m16n8k16 (16-bit types):
//     A (16x16, row-major): a0 = (g, 2t..2t+1)  a1 = (g+8, 2t..)  a2 = (g, 2t+8..)  a3 = (g+8, 2t+8..)
//     B (16x8, "col"):      b0 = (k 2t..2t+1, n g)               b1 = (k 2t+8..2t+9, n g)
//   m16n8k32 (8-bit types, byte i of a register is element k = base + i):
//     A (16x32):            a0 = (g, 4t..4t+3)  a1 = (g+8, 4t..)  a2 = (g, 16+4t..)  a3 = (g+8, 16+4t..)
//     B (32x8):             b0 = (k 4t..4t+3, n g)                b1 = (k 16+4t..16+4t+3, n g)
//   C (16x8, f32), both:    c0,c1 = (g, 2t..2t+1)                c2,c3 = (g+8, 2t..2t+1)
// So a C fragment of two adjacent n8 tiles, packed to bf16, is exactly an A fragment of one k16
// step: P stays in registers between Q·Kᵀ and P·V (the FlashAttention-2 arrangement).
//
// bf16/f16 MMA and ldmatrix need sm_80+ (compiled out below, callers guard with KJIT_HAS_SM80);
// the fp8 MMA needs sm_89+ (ptxas emulates it with conversions and f16 MMA on sm_90/sm_100).
#include "kjit/config.cuh"
#include "kjit/fp8_format.h"

namespace kjit {

/// d += a · b for one m16n8k16 tile (bf16 inputs, f32 accumulators).
KJIT_DEVICE void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if KJIT_HAS_SM80
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

/// d += a · b where only rows 0..7 of A are live (rows 8..15 are zero) and only the C rows
/// 0..7 are kept: `a0`/`a2` are the A registers of row g, `d0`/`d1` the C values of row g.
/// Used when at most 8 query heads share a KV head, which halves accumulator registers.
KJIT_DEVICE void mma_bf16_16816_upper(float& d0, float& d1, uint32_t a0, uint32_t a2, uint32_t b0,
                                      uint32_t b1) {
#if KJIT_HAS_SM80
  // C rows 8..15 go to two scratch registers that start at zero and are dropped.
  float scratch0 = 0.f, scratch1 = 0.f;
  const uint32_t zero = 0u;
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d0), "+f"(d1), "+f"(scratch0), "+f"(scratch1)
      : "r"(a0), "r"(zero), "r"(a2), "r"(zero), "r"(b0), "r"(b1));
#endif
}

/// d += a · b for one m16n8k16 tile (f16 inputs, f32 accumulators).
KJIT_DEVICE void mma_f16_16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                               uint32_t b0, uint32_t b1) {
#if KJIT_HAS_SM80
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#endif
}

/// d += a · b for one m16n8k32 tile, A in format kFa and B in kFb (fp8::kFormatE4M3 /
/// kFormatE5M2), f32 accumulators. sm_89+.
template <int kFa, int kFb>
KJIT_DEVICE void mma_fp8(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                         uint32_t b1) {
#define KJIT_MMA_FP8(TA, TB)                                                               \
  asm volatile("mma.sync.aligned.m16n8k32.row.col.f32." TA "." TB ".f32 "                  \
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"         \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                            \
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1))
  if constexpr (kFa == fp8::kFormatE4M3 && kFb == fp8::kFormatE4M3) {
    KJIT_MMA_FP8("e4m3", "e4m3");
  } else if constexpr (kFa == fp8::kFormatE4M3 && kFb == fp8::kFormatE5M2) {
    KJIT_MMA_FP8("e4m3", "e5m2");
  } else if constexpr (kFa == fp8::kFormatE5M2 && kFb == fp8::kFormatE4M3) {
    KJIT_MMA_FP8("e5m2", "e4m3");
  } else {
    KJIT_MMA_FP8("e5m2", "e5m2");
  }
#undef KJIT_MMA_FP8
}

/// ldmatrix.x4: lane i gives the shared address of row i % 8 of 8x8 matrix i / 8 (16 bytes);
/// register j receives this lane's b16 pair (row lane/4, cols 2(lane%4)..+1) of matrix j.
KJIT_DEVICE void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
#if KJIT_HAS_SM80
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
#endif
}

/// ldmatrix.x4.trans: as ldmatrix_x4 but each matrix transposed: register j receives
/// (rows 2(lane%4)..+1, col lane/4) of matrix j, the first in the low half: the B fragment of a
/// row-major [k][n] tile.
KJIT_DEVICE void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
#if KJIT_HAS_SM80
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
#endif
}

}  // namespace kjit
