#pragma once
// The PTX the FP8 kernels use, in one place (so a host emulation can stand in for exactly this
// file): global vector loads/stores, the saturating fp8 conversion, cp.async, ldmatrix and
// mma.sync m16n8k32 with e4m3/e5m2 operands (sm_89+).
#include "kjit/config.cuh"
#include "kjit/cp_async.cuh"  // cp_async_commit, cp_async_wait
#include "fp8/quantize_params.h"

namespace kjit::fp8 {

/// Two floats → two fp8 bytes (lo in the low byte): __nv_cvt_float2_to_fp8x2 with
/// __NV_SATFINITE, i.e. cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32 on sm_89+.
template <int kFmt>
KJIT_DEVICE uint32_t cvt_fp8x2(float lo, float hi) {
  return static_cast<uint32_t>(__nv_cvt_float2_to_fp8x2(make_float2(lo, hi), __NV_SATFINITE,
                                                        kFmt == kFormatE4M3 ? __NV_E4M3 : __NV_E5M2));
}

/// Streaming 16-byte load (read once: no L1 allocation).
KJIT_DEVICE uint4 load_vec(const void* ptr) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(ptr));
  return v;
}

/// Evict-first 8- and 4-byte stores (written once).
KJIT_DEVICE void store_u64(void* ptr, uint32_t lo, uint32_t hi) {
  asm volatile("st.global.cs.v2.u32 [%0], {%1, %2};" ::"l"(ptr), "r"(lo), "r"(hi) : "memory");
}
KJIT_DEVICE void store_u32(void* ptr, uint32_t v) {
  asm volatile("st.global.cs.u32 [%0], %1;" ::"l"(ptr), "r"(v) : "memory");
}

/// 32-bit shared-memory address of a generic pointer to shared memory.
KJIT_DEVICE uint32_t smem_u32(const void* ptr) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}

/// 16-byte async copy; src_bytes < 16 reads that many bytes and zero-fills the rest (0: all zero,
/// nothing read). `src` must be 16-byte aligned.
KJIT_DEVICE void cp_async16(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes)
               : "memory");
}

/// 4-byte async copy with the same zero-fill rule.
KJIT_DEVICE void cp_async4(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes)
               : "memory");
}

/// ldmatrix.x4: lane i gives the address of row i % 8 of matrix i / 8 (16 bytes); register j
/// receives this lane's b16 pair (row lane/4, cols 2(lane%4), +1) of matrix j.
KJIT_DEVICE void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

/// ldmatrix.x4.trans: register j receives (rows 2(lane%4), 2(lane%4)+1; col lane/4) of matrix j,
/// the first in the low half.
KJIT_DEVICE void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

/// d += a · b for one m16n8k32 tile, A in format kFa, B in kFb, f32 accumulators. Fragments
/// (PTX ISA, "Matrix Fragments for mma.m16n8k32", 8-bit types), g = lane/4, t = lane%4:
///   A: a0 = (row g, k 4t..4t+3)  a1 = (g+8, 4t..)  a2 = (g, 16+4t..)  a3 = (g+8, 16+4t..)
///   B: b0 = (k 4t..4t+3, col g)  b1 = (k 16+4t.., col g)
///   C: c0, c1 = (row g, cols 2t, 2t+1)  c2, c3 = (row g+8, cols 2t, 2t+1)
template <int kFa, int kFb>
KJIT_DEVICE void mma_fp8(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#define KJIT_FP8_MMA(TA, TB)                                                               \
  asm volatile("mma.sync.aligned.m16n8k32.row.col.f32." TA "." TB ".f32 "                  \
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"         \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                            \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1))
  if constexpr (kFa == kFormatE4M3 && kFb == kFormatE4M3) {
    KJIT_FP8_MMA("e4m3", "e4m3");
  } else if constexpr (kFa == kFormatE4M3 && kFb == kFormatE5M2) {
    KJIT_FP8_MMA("e4m3", "e5m2");
  } else if constexpr (kFa == kFormatE5M2 && kFb == kFormatE4M3) {
    KJIT_FP8_MMA("e5m2", "e4m3");
  } else {
    KJIT_FP8_MMA("e5m2", "e5m2");
  }
#undef KJIT_FP8_MMA
}

}  // namespace kjit::fp8
