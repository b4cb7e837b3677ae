#pragma once
// Warp-level tensor-core and async-copy building blocks shared by the attention kernels
// (decode now, prefill later): mma.sync m16n8k16 bf16 with f32 accumulators, ldmatrix
// (plain and transposed), cp.async 16-byte copies with zero fill, an XOR swizzle for
// row-major bf16 tiles in shared memory, and the ex2/lg2 approximations. Every inline PTX of the
// attention kernels lives in this header.
//
// Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16", bf16): with
// g = lane / 4 and t = lane % 4,
//   A (16x16, row-major):  a0 = (g, 2t..2t+1)  a1 = (g+8, 2t..)  a2 = (g, 2t+8..)  a3 = (g+8, 2t+8..)
//   B (16x8, "col"):       b0 = (k 2t..2t+1, n g)               b1 = (k 2t+8..2t+9, n g)
//   C (16x8, f32):         c0,c1 = (g, 2t..2t+1)               c2,c3 = (g+8, 2t..2t+1)
// So a C fragment of two adjacent n8 tiles is exactly an A fragment of one k16 step once packed
// to bf16 (the FlashAttention-2 trick that keeps P in registers between Q·Kᵀ and P·V).
//
// Requires sm_80+ (mma.sync bf16, ldmatrix, cp.async). Callers guard with KJIT_HAS_SM80.
#include "kjit/config.cuh"
#include "kjit/cp_async.cuh"

namespace kjit::attention {

/// 32-bit shared-memory address of a generic pointer to shared memory (what ldmatrix/cp.async take).
KJIT_DEVICE uint32_t smem_u32(const void* ptr) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}

/// Packs two floats into a bf16x2 register, `lo` in the low half (round to nearest even).
KJIT_DEVICE uint32_t pack_bf16x2(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

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

/// ldmatrix.x4: lane i gives the row address of row i % 8 of matrix i / 8; register j receives
/// this lane's (row lane/4, cols 2(lane%4)..+1) of matrix j.
KJIT_DEVICE void ldmatrix_x4(uint32_t (&r)[4], uint32_t smem_addr) {
#if KJIT_HAS_SM80
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr));
#endif
}

/// ldmatrix.x4.trans: as ldmatrix_x4 but each matrix transposed: register j receives
/// (rows 2(lane%4)..+1, col lane/4) of matrix j, the B fragment of a row-major [k][n] tile.
KJIT_DEVICE void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t smem_addr) {
#if KJIT_HAS_SM80
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr));
#endif
}

/// Byte offset of 16-byte chunk `chunk` of row `row` in a row-major tile of `kRowBytes`-byte rows
/// (kRowBytes a multiple of 128). The chunk index is XORed with row % 8, so the eight row
/// addresses one ldmatrix phase reads (same logical chunk, eight consecutive rows) land in eight
/// different 16-byte bank groups, and a warp's cp.async stores of whole rows stay conflict-free.
template <int kRowBytes>
KJIT_DEVICE uint32_t swizzle_offset(int row, int chunk) {
  static_assert(kRowBytes % 128 == 0, "swizzled rows must span whole 128-byte bank sweeps");
  return static_cast<uint32_t>(row * kRowBytes + ((chunk ^ (row & 7)) << 4));
}

/// 2^x with the hardware approximation (ex2.approx.ftz: relative error ~2^-22; 2^-inf = +0).
KJIT_DEVICE float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

/// log2(x) with the hardware approximation (lg2.approx.ftz; lg2(0) = -inf).
KJIT_DEVICE float fast_log2(float x) {
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace kjit::attention
