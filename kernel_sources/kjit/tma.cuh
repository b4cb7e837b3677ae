#pragma once
// Hopper (sm_90a) asynchronous copies: mbarriers (the completion mechanism: a phase completes
// once its expected arrivals and transaction bytes are in) and TMA, the tensor-memory accelerator
// (cp.async.bulk.tensor: one thread moves a 2-D or 4-D box between global memory, described by a
// CUtensorMap the host built, and shared memory). Loads complete on an mbarrier; stores are
// tracked by the issuing thread's bulk-async groups. Callers compile these only for sm_90a
// (__CUDA_ARCH_FEAT_SM90_ALL).
#include "kjit/config.cuh"

namespace kjit::sm90 {

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
/// CTA-scope acquire (the default), also for barriers the cluster's other CTAs arrive on
/// (mbarrier_arrive_cluster): a `.acquire.cluster` wait compiles to an L1 invalidation
/// (CCTL.IVALL) after every completed wait.
KJIT_DEVICE void mbarrier_wait(uint32_t bar, uint32_t parity) { KJIT_MBARRIER_WAIT(""); }

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

/// Orders this thread's generic-proxy shared-memory writes before later async-proxy (TMA) reads.
KJIT_DEVICE void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

}  // namespace kjit::sm90
