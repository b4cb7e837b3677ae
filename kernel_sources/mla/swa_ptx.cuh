#pragma once
// Every inline PTX of the fp8 sliding-window decode kernels (mla/swa_decode.cu), so that the
// host emulator (tests/emulation/swa/) can replace exactly this header with emulations written
// from the PTX ISA: cp.async with zero fill, named barriers, mma.sync m16n8k16 f16 → f32 and
// m16n8k32 E4M3/E5M2 → f32, cvt between E4M3 and f16/f32, ex2.approx, prefetch. Requires sm_80+ (callers guard
// with KJIT_HAS_SM80).
//
// mma.m16n8k16 fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16", .f16), with
// g = lane / 4 and t = lane % 4:
//   A (16x16, row-major): a0 = (g, 2t..2t+1)  a1 = (g+8, 2t..)  a2 = (g, 2t+8..)  a3 = (g+8, 2t+8..)
//   B (16x8, "col"):      b0 = (k 2t..2t+1, n g)               b1 = (k 2t+8..2t+9, n g)
//   C (16x8, f32):        c0,c1 = (g, 2t..2t+1)               c2,c3 = (g+8, 2t..2t+1)
// (the lower k / column in the lower 16 bits of a register).
#include "kjit/config.cuh"
#include "kjit/cp_async.cuh"

// mma.sync with E4M3/E5M2 operands (m16n8k32) runs natively on sm_89 and sm_120+ (ptxas expands
// it into conversions and f16 mma on sm_90/sm_100): there the kernel multiplies the cached fp8
// bytes as they are. Elsewhere it converts them to f16 and uses the f16 mma; cvt.f16x2.e4m3x2
// exists from sm_89.
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 890 || __CUDA_ARCH__ >= 1200)
#define KJIT_SWA_FP8_MMA 1
#else
#define KJIT_SWA_FP8_MMA 0
#endif
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
#define KJIT_SWA_CVT_E4M3 1
#else
#define KJIT_SWA_CVT_E4M3 0
#endif

namespace kjit::mla::swa_detail {

/// 32-bit shared-memory address of a generic pointer into shared memory.
KJIT_DEVICE uint32_t smem_u32(const void* ptr) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}

/// bar.sync on named barrier `id` (1..15; 0 is __syncthreads) for `threads` threads (a
/// multiple of 32). Orders shared-memory accesses of the participating threads like
/// __syncthreads does.
KJIT_DEVICE void named_barrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

/// d += a · b, m16n8k16, f16 inputs, f32 accumulators (fragments: see the file comment).
KJIT_DEVICE void mma_f16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                         uint32_t b0, uint32_t b1) {
#if KJIT_HAS_SM80
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#endif
}

/// d += a · b, m16n8k32, E4M3 A and E4M3 (kE5M2B false) or E5M2 B, f32 accumulators. Fragments
/// (PTX ISA, "Matrix Fragments for mma.m16n8k32", 8-bit types; byte i of a register is the
/// element with the lower k first):
///   A (16x32): a0 = (g, k 4t..4t+3)  a1 = (g+8, 4t..)  a2 = (g, 16+4t..)  a3 = (g+8, 16+4t..)
///   B (32x8):  b0 = (k 4t..4t+3, n g)                 b1 = (k 16+4t..16+4t+3, n g)
///   C: as m16n8k16. Only where KJIT_SWA_FP8_MMA is 1.
template <bool kE5M2B>
KJIT_DEVICE void mma_fp8(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                         uint32_t b0, uint32_t b1) {
#if KJIT_SWA_FP8_MMA
  if (kE5M2B) {
    asm("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e5m2.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
#else
  (void)d, (void)a0, (void)a1, (void)a2, (void)a3, (void)b0, (void)b1;
#endif
}

/// E4M3 bytes of (lo, hi), rounded to nearest even and saturated to ±448, in the low 16 bits
/// (lo in the lower byte). Only where KJIT_SWA_FP8_MMA is 1.
KJIT_DEVICE uint32_t e4m3x2_pack(float lo, float hi) {
#if KJIT_SWA_FP8_MMA
  unsigned short d;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(d) : "f"(hi), "f"(lo));
  return d;
#else
  (void)lo, (void)hi;
  return 0;
#endif
}

/// The two E4M3 values in the low (kHigh false) or high 16 bits of `w` → f16x2, exactly (the
/// lower byte to the lower half). Only where KJIT_SWA_CVT_E4M3 is 1.
template <bool kHigh>
KJIT_DEVICE uint32_t cvt_e4m3x2_f16x2(uint32_t w) {
  uint32_t d = 0;
#if KJIT_SWA_CVT_E4M3
  if (kHigh) {
    asm("{\n .reg .b16 lo, hi;\n mov.b32 {lo, hi}, %1;\n cvt.rn.f16x2.e4m3x2 %0, hi;\n}\n"
        : "=r"(d)
        : "r"(w));
  } else {
    asm("{\n .reg .b16 lo, hi;\n mov.b32 {lo, hi}, %1;\n cvt.rn.f16x2.e4m3x2 %0, lo;\n}\n"
        : "=r"(d)
        : "r"(w));
  }
#else
  (void)w;
#endif
  return d;
}

/// 2^x (ex2.approx.ftz: ~2 ulp; 2^-inf = 0).
KJIT_DEVICE float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

/// Pulls the line of `ptr` into L1 (no register result, so it never stalls the warp).
KJIT_DEVICE void prefetch_l1(const void* ptr) {
  asm volatile("prefetch.global.L1 [%0];\n" ::"l"(ptr));
}

}  // namespace kjit::mla::swa_detail
