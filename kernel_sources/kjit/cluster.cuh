#pragma once
// Thread-block clusters (sm_90+): the CTAs of a cluster run concurrently on one GPC and can read
// each other's shared memory (distributed shared memory) and arrive on each other's mbarriers;
// the fp8 GEMM reduces its split-K partials this way, the decode kernels their KV splits, the SWA
// decode its window slices. None of
// these instructions is arch-specific (no sm_90a feature set): callers compile them for sm_90+
// only (KJIT_HAS_SM90, or the fp8 GEMM's __CUDA_ARCH_FEAT_SM90_ALL). The attention decode
// emulator (tests/emulation/include/kjit/cluster.cuh) stands in for exactly this file.
#include "kjit/config.cuh"

namespace kjit::sm90 {

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

/// cluster_sync without the release: for a barrier that orders no data, only that every peer has
/// finished reading this CTA's shared memory (values it used are loaded) before the CTA exits, or
/// that every CTA's mbarriers exist (fence_barrier_init released them). The release form compiles
/// (sm_90, CUDA 13) to MEMBAR.ALL.GPU before the arrive, which waits for the thread's global
/// stores to complete; the relaxed one to the arrive alone.
KJIT_DEVICE void cluster_sync_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}

/// The first half of cluster_sync: this thread arrives without waiting. Release: its earlier
/// memory accesses, shared-memory writes for the peers to read as well as its own reads of the
/// peers' shared memory, are performed before the arrival can be observed. Not .aligned.
KJIT_DEVICE void cluster_arrive_release() { asm volatile("barrier.cluster.arrive.release;\n" ::: "memory"); }

/// cluster_arrive_release without the release, for an arrival that orders no data: "my reads of
/// the peers' shared memory are done" (the values are loaded). No MEMBAR precedes it.
KJIT_DEVICE void cluster_arrive_relaxed() { asm volatile("barrier.cluster.arrive.relaxed;\n" ::: "memory"); }

/// The second half: waits until every thread of every CTA of the cluster has arrived (acquire:
/// what they wrote before arriving is visible after). A CTA whose shared memory its peers read
/// passes this before it exits, so the memory stays theirs to read until then.
KJIT_DEVICE void cluster_wait_acquire() { asm volatile("barrier.cluster.wait.acquire;\n" ::: "memory"); }

/// The shared::cluster address of `addr` (a shared::cta address of this CTA's layout) in the
/// shared memory of the cluster's CTA `rank`.
KJIT_DEVICE uint32_t map_shared_rank(uint32_t addr, uint32_t rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(addr), "r"(rank));
  return r;
}

/// One arrival on the barrier at `bar` (this CTA's shared::cta layout) of the cluster's CTA `rank`,
/// with the default (CTA-scope release) semantics. For a consumer that frees a stage the peer's
/// TMA refills: its reads of the stage were wgmma's (async proxy), complete by wgmma.wait_group,
/// so no fence is needed before the peer's writes. A `.release.cluster` arrival compiles (sm_90,
/// CUDA 13) to MEMBAR.ALL.CTA + MEMBAR.ALL.GPU + ERRBAR before the arrive: paid per stage and
/// warp, it serialized the GEMM's CTA-pair ring (3.1–3.5× slower, docs/perf-notes.md R78a).
KJIT_DEVICE void mbarrier_arrive_cluster(uint32_t bar, uint32_t rank) {
  asm volatile(
      "{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, %0, %1;\nmbarrier.arrive.shared::cluster.b64 _, "
      "[remote];\n}\n" ::"r"(bar),
      "r"(rank)
      : "memory");
}

/// One f32 at `addr`, a shared::cluster address (map_shared_rank) of any CTA of the cluster.
KJIT_DEVICE float ld_shared_cluster_f32(uint32_t addr) {
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(v) : "r"(addr) : "memory");
  return v;
}

/// Four f32 at `addr` (16-byte aligned), a shared::cluster address of any CTA of the cluster.
KJIT_DEVICE float4 ld_shared_cluster_f32x4(uint32_t addr) {
  float4 v;
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];\n"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}

}  // namespace kjit::sm90
