#pragma once
// The sm_90a PTX of the Hopper prefill kernel (attention/prefill_sm90.cu) that the FP8 GEMM's
// helpers (fp8/ptx_sm90.cuh: mbarriers, TMA 2-D, wgmma fence/commit/wait, setmaxnreg, named
// barriers, the K-major 128B-swizzle descriptor) do not already provide: bf16 wgmma m64nNk16 with
// A from shared memory or from registers, the MN-major 128B-swizzle descriptor (the transposed B
// operand that reads V [kv, d] in place), and 4-D TMA loads/stores (BLHD tensors addressed as
// (d, token, head, batch)). Callers compile these only for sm_90a (__CUDA_ARCH_FEAT_SM90_ALL).
#include "kjit/config.cuh"
#include "fp8/ptx_sm90.cuh"

namespace kjit::attention::sm90 {

using namespace kjit::fp8::sm90;  // mbarrier_*, tma_load_2d, wgmma_fence/commit/wait, setmaxnreg_*

/// Shared-memory matrix descriptor of an MN-major operand written by TMA with the 128-byte
/// swizzle (PTX ISA "Matrix Descriptor Format"; CUTLASS's canonical GMMA layout
/// Swizzle<3,4,3> o ((8,n),(8,k)) : ((1,LBO),(8,SBO)) in 16-byte units): rows of 128 bytes along
/// MN (64 bf16), one row per k; 8-row (1024-byte) swizzle atoms. Stride byte offset (bits 32-45)
/// = 1024 between 8-row groups along k; leading byte offset (bits 16-29) = `mn_block_bytes`
/// between consecutive 64-element blocks along MN. The base is 1024-byte aligned.
KJIT_DEVICE uint64_t smem_desc_mn128(uint32_t addr, uint32_t mn_block_bytes) {
  return static_cast<uint64_t>((addr & 0x3ffff) >> 4) | (static_cast<uint64_t>((mn_block_bytes >> 4) & 0x3fff) << 16) |
         (static_cast<uint64_t>(1024 >> 4) << 32) | (1ull << 62);
}

/// Arrives on named barrier kId (counted over kThreads threads) without waiting: the producer
/// half of a bar.sync / bar.arrive handshake between warpgroups.
template <int kId, int kThreads>
KJIT_DEVICE void named_barrier_arrive() {
  asm volatile("bar.arrive %0, %1;\n" ::"n"(kId), "n"(kThreads) : "memory");
}

/// TMA: copies the 4-D box at (x0 innermost .. x3) of `tmap` into shared memory at `dst`,
/// completing its bytes on barrier `bar`. Out-of-bounds elements are zero-filled (and counted).
KJIT_DEVICE void tma_load_4d(uint32_t dst, const void* tmap, int32_t x0, int32_t x1, int32_t x2, int32_t x3,
                             uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
      "[%6];\n" ::"r"(dst),
      "l"(tmap), "r"(x0), "r"(x1), "r"(x2), "r"(x3), "r"(bar)
      : "memory");
}

/// TMA store of the 4-D box at (x0 .. x3) of `tmap` from shared memory at `src`; out-of-bounds
/// elements are not written. Tracked by the issuing thread's bulk-async groups.
KJIT_DEVICE void tma_store_4d(const void* tmap, int32_t x0, int32_t x1, int32_t x2, int32_t x3, uint32_t src) {
  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%1, %2, %3, %4}], [%5];\n" ::"l"(tmap),
               "r"(x0), "r"(x1), "r"(x2), "r"(x3), "r"(src)
               : "memory");
}

// Generated operand lists (64 or 32 f32 accumulators per thread).
#define KJIT_WGMMA_BF16_SS_N64                                                                  \
  asm volatile(                                                                                     \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                              \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "                                        \
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "  \
      "%32, %33, p, 1, 1, 0, 0;\n}\n"                                                              \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),  \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),  \
      "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),  \
      "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])  \
      : "l"(desc_a), "l"(desc_b), "r"(scale_d))

#define KJIT_WGMMA_BF16_RS_N64                                                                  \
  asm volatile(                                                                                     \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                              \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "                                        \
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "  \
      "{%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"                                       \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),  \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),  \
      "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),  \
      "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])  \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d))

#define KJIT_WGMMA_BF16_SS_N128                                                                  \
  asm volatile(                                                                                     \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                              \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "                                        \
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "  \
      "%64, %65, p, 1, 1, 0, 0;\n}\n"                                                              \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),  \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),  \
      "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),  \
      "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),  \
      "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),  \
      "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),  \
      "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),  \
      "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])  \
      : "l"(desc_a), "l"(desc_b), "r"(scale_d))

#define KJIT_WGMMA_BF16_RS_N128                                                                  \
  asm volatile(                                                                                     \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                              \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "                                        \
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "  \
      "{%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"                                       \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),  \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),  \
      "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),  \
      "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),  \
      "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),  \
      "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),  \
      "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),  \
      "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])  \
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
