#pragma once
// The sm_90a PTX of the Hopper fp8 sliding-window decode (mla/swa_decode_sm90.cu) that the
// fp8 GEMM's header (fp8/ptx_sm90.cuh: wgmma fences, m64n256k32, 128-byte-swizzle descriptors,
// proxy fence) does not have: wgmma m64n64k32 with e4m3 A and e4m3/e5m2 B from shared-memory
// descriptors, cp.async with zero fill, and the E4M3 pack. Callers compile these only for
// sm_90a (__CUDA_ARCH_FEAT_SM90_ALL).
#include "kjit/config.cuh"
#include "fp8/ptx_sm90.cuh"

namespace kjit::mla::sm90 {

using kjit::fp8::sm90::fence_proxy_async;
using kjit::fp8::sm90::smem_addr;
using kjit::fp8::sm90::smem_desc_k128;
using kjit::fp8::sm90::wgmma_commit;
using kjit::fp8::sm90::wgmma_fence;
using kjit::fp8::sm90::wgmma_wait;

/// 16-byte global → shared copy bypassing L1; `valid` false zero-fills without reading `src`
/// (which must still be a mapped address).
KJIT_DEVICE void cp_async_16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0)
               : "memory");
}
KJIT_DEVICE void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
KJIT_DEVICE void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }
/// Waits until at most the newest cp.async group of this thread is still in flight.
KJIT_DEVICE void cp_async_wait_1() { asm volatile("cp.async.wait_group 1;\n" ::: "memory"); }
/// 4-byte global → shared copy through L1 (.ca: .cg takes 16 bytes only); `valid` false
/// zero-fills without reading `src` (which must still be a mapped address).
KJIT_DEVICE void cp_async_4(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 4 : 0)
               : "memory");
}

/// E4M3 bytes of (lo, hi), round to nearest even, saturated to ±448, in the low 16 bits (lo in
/// the lower byte).
KJIT_DEVICE uint32_t e4m3x2_pack(float lo, float hi) {
  unsigned short d;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(d) : "f"(hi), "f"(lo));
  return d;
}

KJIT_DEVICE void st_shared_u16(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.u16 [%0], %1;\n" ::"r"(addr), "h"(static_cast<unsigned short>(v)) : "memory");
}
/// Pulls the line of `ptr` into L2 (no register result).
KJIT_DEVICE void prefetch_l2(const void* ptr) { asm volatile("prefetch.global.L2 [%0];\n" ::"l"(ptr)); }
KJIT_DEVICE void st_shared_u32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}
/// bar.sync on named barrier `id` (1..15) for the 128 threads of one warpgroup.
KJIT_DEVICE void named_barrier_wg(int id) { asm volatile("bar.sync %0, 128;\n" ::"r"(id) : "memory"); }
KJIT_DEVICE void st_shared_v2(uint32_t addr, uint32_t a, uint32_t b) {
  asm volatile("st.shared.v2.u32 [%0], {%1, %2};\n" ::"r"(addr), "r"(a), "r"(b) : "memory");
}
KJIT_DEVICE void st_shared_v4(uint32_t addr, uint4 v) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}
KJIT_DEVICE uint4 ld_shared_v4(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}

// m64n64k32, e4m3 A: 32 f32 accumulators per thread.
#define KJIT_SWA_WGMMA_M64N64K32(TB)                                                                        \
  asm volatile(                                                                                             \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                                          \
      "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3." TB " "                                            \
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, " \
      "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "                                                 \
      "%32, %33, p, 1, 1;\n}\n"                                                                             \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),     \
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),            \
        "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),          \
        "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),          \
        "+f"(d[29]), "+f"(d[30]), "+f"(d[31])                                                               \
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
