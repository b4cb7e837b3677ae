#pragma once
// Host emulation of kernel_sources/kjit/cluster.cuh (tests/emulation only): the cluster a CTA
// belongs to runs all its CTAs at once (the decode emulator's cluster launch), each CTA owning
// the region [rank · emu::g_cluster_cta_bytes, ...) of kjit::attention::smem, so a shared::cta
// address is already a byte offset into that array and mapa moves it between regions. The
// cluster barrier is one barrier over every thread of every CTA of the cluster.
#include "kjit/config.cuh"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace emu {
/// The barrier of this CUDA thread's cluster (null outside a cluster launch).
extern thread_local Barrier* t_cluster_barrier;
extern thread_local uint32_t t_cluster_rank;
extern thread_local uint32_t t_cluster_size;
/// Bytes of kjit::attention::smem each CTA of a cluster owns.
extern uint32_t g_cluster_cta_bytes;
}  // namespace emu

namespace kjit::attention {
extern uint8_t smem[];
}  // namespace kjit::attention

namespace kjit::sm90 {

inline uint32_t cluster_ctarank() { return ::emu::t_cluster_rank; }

inline void cluster_sync() {
  if (::emu::t_cluster_barrier == nullptr) {
    std::fprintf(stderr, "emulator: cluster barrier outside a cluster launch\n");
    std::abort();
  }
  ::emu::t_cluster_barrier->arrive_and_wait();
}

inline void cluster_sync_relaxed() { cluster_sync(); }

inline uint32_t map_shared_rank(uint32_t addr, uint32_t rank) {
  const uint32_t bytes = ::emu::g_cluster_cta_bytes;
  if (rank >= ::emu::t_cluster_size || addr / bytes != ::emu::t_cluster_rank) {
    std::fprintf(stderr, "emulator: mapa of %u to rank %u from rank %u of %u\n", addr, rank, ::emu::t_cluster_rank,
                 ::emu::t_cluster_size);
    std::abort();
  }
  return addr % bytes + rank * bytes;
}

inline float ld_shared_cluster_f32(uint32_t addr) {
  float v;
  std::memcpy(&v, kjit::attention::smem + addr, 4);
  return v;
}

inline float4 ld_shared_cluster_f32x4(uint32_t addr) {
  if (addr % 16 != 0) {
    std::fprintf(stderr, "emulator: misaligned ld.shared::cluster.v4 at %u\n", addr);
    std::abort();
  }
  float4 v;
  std::memcpy(&v, kjit::attention::smem + addr, 16);
  return v;
}

}  // namespace kjit::sm90
