#pragma once
// Hopper (sm_90a) thread-block clusters: the CTAs of a cluster run concurrently on one GPC and
// can read each other's shared memory (distributed shared memory) and arrive on each other's
// mbarriers; the fp8 GEMM reduces its split-K partials this way. Callers compile these only for
// sm_90a (__CUDA_ARCH_FEAT_SM90_ALL).
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

}  // namespace kjit::sm90
