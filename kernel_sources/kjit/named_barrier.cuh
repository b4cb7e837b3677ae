#pragma once
// Named barriers (bar.sync / bar.arrive on ids 1..15; 0 is __syncthreads): synchronize a subset
// of the CTA's warps, e.g. one warpgroup, or a producer and a consumer warpgroup that hand a
// buffer back and forth. Like __syncthreads they order the participants' shared-memory accesses.
// The thread count is a multiple of 32 and the same for every warp that names the barrier.
#include "kjit/config.cuh"

namespace kjit {

/// bar.sync on barrier `id` for `threads` threads, both chosen at run time.
KJIT_DEVICE void named_barrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

/// bar.sync on barrier kId for kThreads threads. Immediate operands, so ptxas reserves only the
/// barriers the kernel names.
template <int kId, int kThreads>
KJIT_DEVICE void named_barrier() {
  asm volatile("bar.sync %0, %1;\n" ::"n"(kId), "n"(kThreads) : "memory");
}

/// Arrives on barrier kId (counted over kThreads threads) without waiting: the producer half of
/// a bar.sync / bar.arrive handshake between warpgroups.
template <int kId, int kThreads>
KJIT_DEVICE void named_barrier_arrive() {
  asm volatile("bar.arrive %0, %1;\n" ::"n"(kId), "n"(kThreads) : "memory");
}

/// bar.arrive on barrier `id` counted over `threads` threads, both chosen at run time.
KJIT_DEVICE void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

/// bar.sync on barrier `id` for the 128 threads of one warpgroup.
KJIT_DEVICE void named_barrier_wg(int id) { asm volatile("bar.sync %0, 128;\n" ::"r"(id) : "memory"); }

}  // namespace kjit
