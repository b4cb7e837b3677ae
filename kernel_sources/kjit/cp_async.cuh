#pragma once
// cp.async (sm_80+; PTX ISA "cp.async"): global → shared copies that do not occupy registers,
// grouped by commit and waited on by count. Shared by every kernel that streams tiles without
// TMA. A copy whose source size is below its size zero-fills the rest, so masked rows become
// finite zeros in shared memory; the source address must still be mapped.
#include "kjit/config.cuh"

namespace kjit {

/// 16-byte copy to shared address `dst` (.cg: L2 only). With `valid` false nothing is read and
/// the 16 bytes are zero-filled (src-size 0), so masked rows become finite zeros; `src` must
/// still be a mapped address (callers pass a clamped in-range row).
KJIT_DEVICE void cp_async_16(uint32_t dst, const void* src, bool valid) {
#if KJIT_HAS_SM80
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0)
               : "memory");
#endif
}

/// 16-byte copy (.cg) that reads the first `src_bytes` (0..16) bytes of `src` and zero-fills the
/// rest: a tile row that ends inside this chunk.
KJIT_DEVICE void cp_async_16_partial(uint32_t dst, const void* src, int src_bytes) {
#if KJIT_HAS_SM80
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes)
               : "memory");
#endif
}

/// 4-byte copy through L1 (.ca: .cg takes 16 bytes only); `valid` false zero-fills without
/// reading `src`.
KJIT_DEVICE void cp_async_4(uint32_t dst, const void* src, bool valid) {
#if KJIT_HAS_SM80
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 4 : 0)
               : "memory");
#endif
}

/// Closes this thread's current cp.async group (an empty group is legal and keeps the group
/// counting uniform).
KJIT_DEVICE void cp_async_commit() {
#if KJIT_HAS_SM80
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

/// Waits until at most `kPending` of this thread's committed groups are still in flight.
template <int kPending>
KJIT_DEVICE void cp_async_wait() {
#if KJIT_HAS_SM80
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
#endif
}

/// Arrives on the mbarrier at shared address `bar` once every cp.async this thread issued before
/// completes (.noinc: the arrival is one of those the barrier was initialized to expect), so a
/// cp.async producer can hand tiles to consumers that wait on the barrier, as TMA loads do.
KJIT_DEVICE void cp_async_mbarrier_arrive_noinc(uint32_t bar) {
#if KJIT_HAS_SM80
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
#endif
}

/// Arrives on the mbarrier at shared address `bar` once every cp.async this thread issued before
/// completes, having first raised the arrivals the barrier's current phase waits for by one (no
/// .noinc): the net count is unchanged, so cp.async copies can join a phase whose expected
/// arrivals are another thread's (a TMA thread's arrive and bytes). That thread must arrive only
/// after every such instruction has executed.
KJIT_DEVICE void cp_async_mbarrier_arrive(uint32_t bar) {
#if KJIT_HAS_SM80
  asm volatile("cp.async.mbarrier.arrive.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
#endif
}

}  // namespace kjit
