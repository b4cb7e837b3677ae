#pragma once
// Host emulation of kernel_sources/kjit/cluster.cuh for the Hopper kernel emulator
// (tests/emulation/sm90; the decode and SWA emulators have their own,
// tests/emulation/include/kjit/cluster.cuh): the CTAs of a cluster run at once, each with its own
// shared memory (emu_sm90.hpp's Cluster); mapa gives a shared::cluster address naming the CTA,
// which ld.shared::cluster and the remote mbarrier arrival follow, and every remote access aborts
// once the CTA it names has exited. The cluster barrier counts every thread of every CTA; its
// release / relaxed forms are one barrier here (memory ordering is not emulated). The split
// arrive / wait forms are not emulated (the kernels emulated here do not use them).
#include "kjit/config.cuh"

namespace kjit::sm90 {

inline uint32_t cluster_ctarank() { return ::emu::sm90::cta().rank; }
inline void cluster_sync() { ::emu::sm90::cluster_barrier(); }
inline void cluster_sync_relaxed() { ::emu::sm90::cluster_barrier(); }

inline uint32_t map_shared_rank(uint32_t addr, uint32_t rank) { return ::emu::sm90::cluster_address(addr, rank); }

/// mbarrier.arrive.shared::cluster on the barrier at `bar` (shared::cta layout) of CTA `rank`.
inline void mbarrier_arrive_cluster(uint32_t bar, uint32_t rank) {
  ::emu::sm90::mbarrier_arrive(bar, 0, ::emu::sm90::peer(rank, "a remote mbarrier arrival on it"));
}

inline float ld_shared_cluster_f32(uint32_t addr) {
  ::emu::sm90::Cta& c = ::emu::sm90::cluster_owner(addr, "ld.shared::cluster from it");
  float v;
  std::memcpy(&v, ::emu::sm90::smem_at_in(c, addr, 4), 4);
  return v;
}

inline float4 ld_shared_cluster_f32x4(uint32_t addr) {
  if (addr % 16 != 0) ::emu::sm90::fail("ld.shared::cluster.v4 misaligned", addr);
  ::emu::sm90::Cta& c = ::emu::sm90::cluster_owner(addr, "ld.shared::cluster from it");
  float4 v;
  std::memcpy(&v, ::emu::sm90::smem_at_in(c, addr, 16), 16);
  return v;
}

}  // namespace kjit::sm90
