#pragma once
// sm_90a PTX shared by kjit's Hopper kernels (fp8/gemm_sm90.cu, attention/prefill_sm90.cu,
// mla/swa_decode_sm90.cu): mbarriers, TMA (cp.async.bulk.tensor 2-D/4-D, multicast, stores),
// cp.async, shared-memory moves, thread-block clusters, named barriers, wgmma fences and
// shared-memory matrix descriptors, setmaxnreg, and the accumulator operand lists of wgmma. The
// wgmma instructions themselves live beside their kernels (fp8/ptx_sm90.cuh,
// attention/sm90.cuh, mla/swa_ptx_sm90.cuh). Callers compile these only for sm_90a
// (__CUDA_ARCH_FEAT_SM90_ALL).
#include "kjit/config.cuh"
#include "kjit/cp_async.cuh"  // cp_async_16, cp_async_commit, cp_async_wait

namespace kjit::sm90 {

KJIT_DEVICE uint32_t smem_addr(const void* ptr) { return static_cast<uint32_t>(__cvta_generic_to_shared(ptr)); }

KJIT_DEVICE void mbarrier_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

/// Makes the barrier initializations visible to the async proxy (TMA) and the other threads.
KJIT_DEVICE void fence_barrier_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }

/// One arrival that also announces `bytes` of TMA transactions the phase must wait for.
KJIT_DEVICE void mbarrier_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}

KJIT_DEVICE void mbarrier_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// Waits until the phase of parity `parity` of the barrier at `bar` has completed. After 2^26
// failed tests (each suspends the thread for a while: seconds in all) the wait is a deadlock (a
// protocol bug, not a slow GEMM) and traps, so the launch fails with an error instead of hanging
// the process and the GPU. All in one asm block: written as a C++ loop around the test, the
// counter and the trap made ptxas spill the accumulators.
#define KJIT_MBARRIER_WAIT(SEM)                                                                     \
  asm volatile(                                                                                     \
      "{\n"                                                                                         \
      ".reg .pred done;\n"                                                                          \
      ".reg .u32 tries;\n"                                                                          \
      "mov.u32 tries, 0;\n"                                                                         \
      "KJIT_WAIT:\n" /* PTX labels are local to the { } block */                                    \
      "mbarrier.try_wait.parity" SEM ".shared::cta.b64 done, [%0], %1;\n"                           \
      "@done bra KJIT_DONE;\n"                                                                      \
      "add.u32 tries, tries, 1;\n"                                                                  \
      "setp.lt.u32 done, tries, 67108864;\n"                                                        \
      "@done bra KJIT_WAIT;\n"                                                                      \
      "trap;\n"                                                                                     \
      "KJIT_DONE:\n"                                                                                \
      "}\n" ::"r"(bar),                                                                             \
      "r"(parity)                                                                                   \
      : "memory")

/// Spins until the phase of parity `parity` of the barrier has completed (traps on a deadlock).
KJIT_DEVICE void mbarrier_wait(uint32_t bar, uint32_t parity) { KJIT_MBARRIER_WAIT(""); }

/// mbarrier_wait with cluster-scope acquire: for barriers that CTAs of the cluster arrive on
/// remotely (mbarrier_arrive_cluster), before writing what they released.
KJIT_DEVICE void mbarrier_wait_cluster(uint32_t bar, uint32_t parity) { KJIT_MBARRIER_WAIT(".acquire.cluster"); }

#undef KJIT_MBARRIER_WAIT

KJIT_DEVICE void prefetch_tensormap(const void* tmap) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(tmap) : "memory");
}

/// TMA: copies the 2-D box at (x = inner coordinate, y = outer) of `tmap` into shared memory at
/// `dst`, completing its bytes on barrier `bar`. Out-of-bounds elements are zero-filled.
KJIT_DEVICE void tma_load_2d(uint32_t dst, const void* tmap, int32_t x, int32_t y, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          dst),
      "l"(tmap), "r"(x), "r"(y), "r"(bar)
      : "memory");
}

/// TMA with multicast: the 2-D box at (x, y) lands at `dst` in the shared memory of every CTA
/// of the cluster whose bit is set in `cta_mask`, completing its bytes on the barrier at `bar` of
/// each of them.
KJIT_DEVICE void tma_load_2d_multicast(uint32_t dst, const void* tmap, int32_t x, int32_t y, uint32_t bar,
                                       uint16_t cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%2, "
      "%3}], [%4], %5;\n" ::"r"(dst),
      "l"(tmap), "r"(x), "r"(y), "r"(bar), "h"(cta_mask)
      : "memory");
}

/// TMA store of the 2-D box at (x, y) of `tmap` from shared memory at `src`; out-of-bounds
/// elements are not written. Tracked by the issuing thread's bulk-async groups.
KJIT_DEVICE void tma_store_2d(const void* tmap, int32_t x, int32_t y, uint32_t src) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n" ::"l"(tmap), "r"(x),
               "r"(y), "r"(src)
               : "memory");
}
KJIT_DEVICE void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
/// Waits until at most kPending of the issuing thread's committed bulk stores are still reading
/// shared memory (their sources may then be overwritten).
template <int kPending>
KJIT_DEVICE void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(kPending) : "memory");
}
/// Waits until every committed bulk store of the issuing thread has completed (its writes are
/// performed), e.g. before the CTA exits.
KJIT_DEVICE void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }

KJIT_DEVICE void st_shared_u32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}
KJIT_DEVICE void st_shared_f32x2(uint32_t addr, float a, float b) {
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(addr), "f"(a), "f"(b) : "memory");
}
KJIT_DEVICE void st_shared_f32x4(uint32_t addr, float a, float b, float c, float d) {
  asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "f"(a), "f"(b), "f"(c), "f"(d) : "memory");
}

// --- Thread-block clusters (split-K reduction through distributed shared memory) -------------

/// This CTA's rank in its cluster (0 without a cluster launch: a lone CTA is a 1-CTA cluster).
KJIT_DEVICE uint32_t cluster_ctarank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}

/// Every thread of every CTA of the cluster arrives (release: its earlier shared-memory writes
/// become visible cluster-wide) and waits for all the others (acquire). Not .aligned: callers
/// may come from a branch that diverged inside the warp.
KJIT_DEVICE void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}

/// The shared::cluster address of `addr` (a shared::cta address of this CTA's layout) in the
/// shared memory of the cluster's CTA `rank`.
KJIT_DEVICE uint32_t map_shared_rank(uint32_t addr, uint32_t rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(addr), "r"(rank));
  return r;
}

/// One arrival on the barrier at `bar` (this CTA's shared::cta layout) of the cluster's CTA `rank`.
KJIT_DEVICE void mbarrier_arrive_cluster(uint32_t bar, uint32_t rank) {
  asm volatile(
      "{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, %0, %1;\nmbarrier.arrive.release.cluster.shared::cluster.b64 _, "
      "[remote];\n}\n" ::"r"(bar),
      "r"(rank)
      : "memory");
}

KJIT_DEVICE float4 ld_shared_cluster_f32x4(uint32_t addr) {
  float4 v;
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];\n"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}

/// Orders this thread's generic-proxy shared-memory writes before later async-proxy (TMA) reads.
KJIT_DEVICE void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

/// Named barrier kId (1..15; 0 is __syncthreads) over kThreads threads (a multiple of 32).
/// Immediate operands, so ptxas reserves only the barriers the kernel names.
template <int kId, int kThreads>
KJIT_DEVICE void named_barrier() {
  asm volatile("bar.sync %0, %1;\n" ::"n"(kId), "n"(kThreads) : "memory");
}

KJIT_DEVICE void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
KJIT_DEVICE void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int kPending>
KJIT_DEVICE void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

/// Register budget of the producer (decrease) and consumer (increase) warpgroups.
template <int kRegs>
KJIT_DEVICE void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
KJIT_DEVICE void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

/// Shared-memory matrix descriptor of a K-major tile written by TMA with 128-byte swizzling:
/// rows of 128 bytes, 8-row (1024-byte) swizzle atoms. Start address (bits 0-13, >> 4), leading
/// byte offset (bits 16-29) unused for swizzled K-major layouts, stride byte offset (bits 32-45)
/// = 1024 between 8-row groups, swizzle mode 1 = 128B (bits 62-63). The tile base is
/// 1024-byte aligned; a k step inside the 128-byte row advances the start address by its bytes.
KJIT_DEVICE uint64_t smem_desc_k128(uint32_t addr) {
  return static_cast<uint64_t>((addr & 0x3ffff) >> 4) | (static_cast<uint64_t>(1024 >> 4) << 32) | (1ull << 62);
}


// --- From the prefill kernel: MN-major descriptors, 4-D TMA, split named barriers --------------

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

// --- cp.async and plain shared-memory moves --------------------------------------------------

/// 4-byte global → shared copy through L1 (.ca: .cg takes 16 bytes only); `valid` false
/// zero-fills without reading `src` (which must still be a mapped address).
KJIT_DEVICE void cp_async_4(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 4 : 0)
               : "memory");
}

KJIT_DEVICE void st_shared_u16(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.u16 [%0], %1;\n" ::"r"(addr), "h"(static_cast<unsigned short>(v)) : "memory");
}
/// Pulls the line of `ptr` into L2 (no register result).
KJIT_DEVICE void prefetch_l2(const void* ptr) { asm volatile("prefetch.global.L2 [%0];\n" ::"l"(ptr)); }
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

}  // namespace kjit::sm90

// wgmma accumulator operand lists: the N / 2 f32 registers d[0..] of an m64nN step, as asm
// outputs (KJIT_SM90_ACC<n>) and as the matching "{%0, ..., %<n-1>}" register vector
// (KJIT_SM90_ACC<n>_REGS); the asm's own inputs follow at %<n>.
#define KJIT_SM90_ACC32                                                                             \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),               \
  "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),           \
  "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),        \
  "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),        \
  "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define KJIT_SM90_ACC32_REGS                                                                        \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "     \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define KJIT_SM90_ACC64                                                                             \
  KJIT_SM90_ACC32,                                                                                  \
  "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]),        \
  "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]),        \
  "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]),        \
  "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]),        \
  "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define KJIT_SM90_ACC64_REGS                                                                        \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "     \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "      \
  "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "      \
  "%56, %57, %58, %59, %60, %61, %62, %63}"
#define KJIT_SM90_ACC128                                                                            \
  KJIT_SM90_ACC64,                                                                                  \
  "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]),        \
  "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]),        \
  "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]),        \
  "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]),        \
  "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]),        \
  "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]),                \
  "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]),               \
  "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]),               \
  "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]),               \
  "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
#define KJIT_SM90_ACC128_REGS                                                                       \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "     \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "      \
  "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "      \
  "%56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, "      \
  "%74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, "      \
  "%92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, "        \
  "%108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, "      \
  "%123, %124, %125, %126, %127}"
