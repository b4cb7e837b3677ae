#pragma once
// Host emulation of kernel_sources/kjit/cp_async.cuh on the emulated CTA's shared memory
// (emu_cp_async.hpp: copies land at issue, or with g_late_copies at the last moment a wait or an
// mbarrier arrival allows).
#include "kjit/config.cuh"

namespace kjit {

/// Lands this thread's copies until at most `pending` groups are in flight, each destination
/// checked as a write (emu_sm90.hpp: no wgmma in flight reads it).
inline void land_copies(int pending) {
  const auto& groups = ::emu::t_async.committed;
  for (size_t g = 0; g + pending < groups.size(); ++g) {
    for (const ::emu::Copy& c : groups[g]) {
      ::emu::sm90::smem_write(static_cast<uint32_t>(c.dst - ::emu::sm90::cta().smem), 16);
    }
  }
  ::emu::cp_async_wait(pending);
}

inline void cp_async_16(uint32_t dst, const void* src, bool valid) {
  if (::emu::g_late_copies) {
    ::emu::sm90::smem_at(dst, 16);
  } else {
    ::emu::sm90::smem_write(dst, 16);
  }
  ::emu::cp_async_16(::emu::sm90::cta().smem, dst, src, valid);
}
inline void cp_async_commit() { ::emu::cp_async_commit(); }
template <int kPending>
inline void cp_async_wait() {
  land_copies(kPending);
}
/// cp.async.mbarrier.arrive.noinc: an arrival once this thread's earlier copies have landed.
inline void cp_async_mbarrier_arrive_noinc(uint32_t bar) {
  ::emu::cp_async_commit();
  land_copies(0);
  ::emu::sm90::mbarrier_arrive(bar);
}
/// cp.async.mbarrier.arrive (no .noinc): the pending count is raised by one and the arrival
/// lowers it once the copies land, so the phase waits for them and expects no other arrival.
inline void cp_async_mbarrier_arrive(uint32_t /*bar*/) {
  ::emu::cp_async_commit();
  land_copies(0);
}

}  // namespace kjit
