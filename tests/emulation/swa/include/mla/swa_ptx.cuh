#pragma once
// Host emulation of kernel_sources/mla/swa_ptx.cuh (tests/emulation/swa only): the functions
// that header brings in from kjit/ (mma.cuh, fp8_cvt.cuh, cp_async.cuh, named_barrier.cuh,
// smem.cuh, prefetch.cuh, cluster.cuh; fast_math.cuh has its own emulation) and its
// dynamic_smem, written from the PTX ISA — mma.m16n8k16 .f16 and m16n8k32 fp8 fragments,
// cp.async zero fill and commit/wait groups, bar.sync with a thread count, cvt.rn.satfinite.e4m3x2
// and cvt.rn.f16x2.e4m3x2, barrier.cluster arrive/wait phases, mapa and ld.shared::cluster.
// Each emulated CTA (emu_detail::Cta) has its own shared memory; a "shared address" is a byte
// offset into the running CTA's, and a shared::cluster address (mapa) carries the target CTA's
// rank + 1 in bits 24 and up. The cluster checks (emu_detail::check_cluster, after a launch):
// a CTA exits only after a cluster-barrier phase that its peers arrived at after their last
// read of its shared memory; no read reaches a CTA that has exited; arrivals and waits pair up.
#include "kjit/config.cuh"
#include "kjit/fast_math.cuh"
#include "kjit/fp8_format.h"
#include "emu_cp_async.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

// SWA_EMU_ARCH picks the code path: 80 (f16 mma, bit conversions), 89 (fp8 mma: sm_89/sm_120),
// 90 (f16 mma, cvt for K fragments, bit conversions for V: sm_90/sm_100).
#ifndef SWA_EMU_ARCH
#define SWA_EMU_ARCH 90
#endif
#define KJIT_SWA_FP8_MMA (SWA_EMU_ARCH == 89)
#define KJIT_SWA_CVT_E4M3 (SWA_EMU_ARCH >= 89)

namespace kjit::mla {
namespace swa_detail {
namespace emu_detail {

/// Bytes of shared memory of an emulated CTA (an H200's opt-in limit).
constexpr int kSmemBytes = 232448;

/// One emulated CTA: its block barrier and warp scratch, named barriers 1..15 and the thread
/// count each was reset with, its shared memory, its rank in the cluster, and for the cluster
/// checks the fewest cluster-barrier waits any of its threads had completed when it exited, the
/// latest phase at which a peer read its shared memory, and whether it has exited.
struct Cta {
  emu::Block block;
  emu::Barrier named[16];
  int named_count[16] = {};
  unsigned char* smem = nullptr;
  int rank = 0;
  std::atomic<int64_t> exit_waits{INT64_MAX};
  std::atomic<int64_t> read_phase{-1};
  std::atomic<int> running{0};
};

/// The CTAs that run at once (a cluster; one CTA without a cluster launch) and their
/// barrier.cluster: `count` threads arrive per phase, `phase` counts the completed phases.
struct Cluster {
  int size = 1;
  Cta* ctas[8] = {};
  std::mutex mutex;
  std::condition_variable cv;
  int count = 0;
  int arrived = 0;
  int64_t phase = 0;
};

/// This thread's CTA and cluster (set by the emulator's launch).
extern thread_local Cta* t_cta;
extern thread_local Cluster* t_cluster;

/// This thread's barrier.cluster bookkeeping: the phase of its arrival not yet waited for (−1:
/// none), and how many arrivals and completed waits it has made.
struct ClusterThread {
  int64_t pending = -1;
  int64_t arrivals = 0;
  int64_t waits = 0;
};
extern thread_local ClusterThread t_cluster_thread;

[[noreturn]] inline void fail(const char* what) {
  std::fprintf(stderr, "emulator: %s\n", what);
  std::abort();
}

/// After a cluster's threads have all returned: every CTA outlived its peers' reads of its
/// shared memory (it passed a barrier.cluster phase they arrived at after reading).
inline void check_cluster(const Cluster& c) {
  for (int r = 0; r < c.size; ++r) {
    const Cta& cta = *c.ctas[r];
    const int64_t read = cta.read_phase.load();
    if (read >= 0 && cta.exit_waits.load() < read + 1) {
      std::fprintf(stderr,
                   "emulator: CTA rank %d exited after %lld cluster-barrier waits, but a peer read its shared memory "
                   "before arriving at phase %lld\n",
                   r, static_cast<long long>(cta.exit_waits.load()), static_cast<long long>(read));
      std::abort();
    }
  }
}

/// Called by each thread when its kernel returns.
inline void thread_exits() {
  if (t_cluster_thread.pending >= 0) fail("a thread exited with a barrier.cluster arrival it did not wait for");
  int64_t seen = t_cta->exit_waits.load();
  while (t_cluster_thread.waits < seen && !t_cta->exit_waits.compare_exchange_weak(seen, t_cluster_thread.waits)) {
  }
  t_cta->running.fetch_sub(1);
}

inline float f16(uint32_t reg, int which) {
  return swa_emu::f16_value(static_cast<uint16_t>(which ? reg >> 16 : reg & 0xffff));
}

inline double e4m3(uint32_t b) {
  const int e = (b >> 3) & 0xf, m = b & 7;
  if (e == 15 && m == 7) return NAN;
  const double v = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return (b & 0x80) ? -v : v;
}

inline double e5m2(uint32_t b) {
  const int e = (b >> 2) & 0x1f, m = b & 3;
  double v = e == 0 ? std::ldexp(m / 4.0, -14) : std::ldexp(1.0 + m / 4.0, e - 15);
  if (e == 31) v = m == 0 ? INFINITY : NAN;
  return (b & 0x80) ? -v : v;
}

inline double byte_of(uint32_t reg, int i) { return static_cast<double>((reg >> (8 * i)) & 0xffu); }

/// Round to the nearest E4M3 value, ties to even, saturating to ±448 (cvt.rn.satfinite).
inline uint32_t to_e4m3(float f) {
  if (std::isnan(f)) return 0x7f;
  const uint32_t sign = std::signbit(f) ? 0x80 : 0;
  const double a = std::fabs(static_cast<double>(f));
  uint32_t best = 0;
  double best_err = INFINITY;
  for (uint32_t c = 0; c <= 0x7e; ++c) {
    const double err = std::fabs(e4m3(c) - a);
    if (err < best_err || (err == best_err && (c & 1) == 0)) {
      best = c;
      best_err = err;
    }
  }
  return best | sign;
}

}  // namespace emu_detail

inline unsigned char* dynamic_smem() { return emu_detail::t_cta->smem; }

inline uint32_t smem_u32(const void* ptr) {
  const auto* p = static_cast<const unsigned char*>(ptr);
  if (p < emu_detail::t_cta->smem || p >= emu_detail::t_cta->smem + emu_detail::kSmemBytes) {
    emu_detail::fail("smem_u32 of a pointer outside the CTA's shared memory");
  }
  return static_cast<uint32_t>(p - emu_detail::t_cta->smem);
}

inline void cp_async_16(uint32_t dst, const void* src, bool valid) {
  ::emu::cp_async_16(emu_detail::t_cta->smem, dst, src, valid);
}
inline void cp_async_commit() { ::emu::cp_async_commit(); }
template <int kPending>
inline void cp_async_wait() {
  ::emu::cp_async_wait(kPending);
}

inline void named_barrier(int id, int threads) {
  emu_detail::Cta& cta = *emu_detail::t_cta;
  if (id < 1 || id > 15 || cta.named_count[id] != threads) {
    std::fprintf(stderr, "emulator: bar.sync %d, %d does not match the barrier's %d threads\n", id, threads,
                 id >= 1 && id <= 15 ? cta.named_count[id] : -1);
    std::abort();
  }
  cta.named[id].arrive_and_wait();
}

/// mma.m16n8k16.row.col.f32.f16.f16.f32: every lane deposits a[4], b[2]; each lane computes
/// its own d[4] (PTX ISA fragment layouts; products and sums in double).
inline void mma_f16_16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1) {
  ::emu::WarpScratch& w = ::emu::my_warp();
  const int lane = ::emu::my_lane();
  w.u[lane][0] = a0;
  w.u[lane][1] = a1;
  w.u[lane][2] = a2;
  w.u[lane][3] = a3;
  w.u[lane][4] = b0;
  w.u[lane][5] = b1;
  w.barrier.arrive_and_wait();
  auto A = [&](int row, int col) {  // A (16x16, row-major)
    const int l = (row % 8) * 4 + (col % 8) / 2;
    const int reg = (row >= 8 ? 1 : 0) + (col >= 8 ? 2 : 0);
    return emu_detail::f16(w.u[l][reg], col % 2);
  };
  auto B = [&](int k, int n) {  // B (16x8, "col")
    const int l = n * 4 + (k % 8) / 2;
    return emu_detail::f16(w.u[l][4 + (k >= 8 ? 1 : 0)], k % 2);
  };
  const int g = lane / 4, t = lane % 4;
  float out[4];
  for (int i = 0; i < 4; ++i) {
    const int row = g + (i >= 2 ? 8 : 0);
    const int col = 2 * t + (i % 2);
    double acc = d[i];
    for (int k = 0; k < 16; ++k) acc += static_cast<double>(A(row, k)) * B(k, col);
    out[i] = static_cast<float>(acc);
  }
  w.barrier.arrive_and_wait();
  for (int i = 0; i < 4; ++i) d[i] = out[i];
}

/// mma.m16n8k32.row.col.f32.e4m3.{e4m3|e5m2}.f32 (the kernel's A is always E4M3): A (16x32): a0 = (g, k 4t..4t+3),
/// a1 = (g+8, 4t..), a2 = (g, 16+4t..), a3 = (g+8, 16+4t..); B (32x8): b0 = (k 4t..4t+3, n g),
/// b1 = (k 16+4t.., n g); byte i of a register is element k = base + i.
template <int kFa, int kFb>
inline void mma_fp8(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1) {
  static_assert(kFa == fp8::kFormatE4M3, "the SWA kernel's A operand (q, P) is E4M3");
  constexpr bool kE5M2B = kFb == fp8::kFormatE5M2;
  ::emu::WarpScratch& w = ::emu::my_warp();
  const int lane = ::emu::my_lane();
  w.u[lane][0] = a0;
  w.u[lane][1] = a1;
  w.u[lane][2] = a2;
  w.u[lane][3] = a3;
  w.u[lane][4] = b0;
  w.u[lane][5] = b1;
  w.barrier.arrive_and_wait();
  auto A = [&](int row, int k) {
    const int l = (row % 8) * 4 + (k % 16) / 4;
    const int reg = (row >= 8 ? 1 : 0) + (k >= 16 ? 2 : 0);
    return emu_detail::e4m3((w.u[l][reg] >> (8 * (k % 4))) & 0xffu);
  };
  auto B = [&](int k, int n) {
    const int l = n * 4 + (k % 16) / 4;
    const uint32_t byte = (w.u[l][4 + (k >= 16 ? 1 : 0)] >> (8 * (k % 4))) & 0xffu;
    return kE5M2B ? emu_detail::e5m2(byte) : emu_detail::e4m3(byte);
  };
  const int g = lane / 4, t = lane % 4;
  float out[4];
  for (int i = 0; i < 4; ++i) {
    const int row = g + (i >= 2 ? 8 : 0);
    const int col = 2 * t + (i % 2);
    double acc = d[i];
    for (int k = 0; k < 32; ++k) acc += A(row, k) * B(k, col);
    out[i] = static_cast<float>(acc);
  }
  w.barrier.arrive_and_wait();
  for (int i = 0; i < 4; ++i) d[i] = out[i];
}

/// cvt.rn.satfinite.e4m3x2.f32 of (lo, hi): lo in the lower byte.
inline uint32_t e4m3x2_pack(float lo, float hi) { return emu_detail::to_e4m3(lo) | (emu_detail::to_e4m3(hi) << 8); }

/// cvt.rn.f16x2.e4m3x2 of the low / high 16 bits of w (the lower byte to the lower half).
template <bool kHigh>
inline uint32_t cvt_e4m3x2_f16x2(uint32_t w) {
  auto one = [](uint32_t b) -> uint16_t {
    const int e = (b >> 3) & 0xf, m = b & 7;
    double v = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
    if (e == 15 && m == 7) v = NAN;
    if (b & 0x80) v = -v;
    return swa_emu::f16_bits(static_cast<float>(v));
  };
  const uint32_t pair = kHigh ? w >> 16 : w & 0xffff;
  return static_cast<uint32_t>(one(pair & 0xff)) | (static_cast<uint32_t>(one((pair >> 8) & 0xff)) << 16);
}

inline void prefetch_l1(const void*) {}

}  // namespace swa_detail
}  // namespace kjit::mla

// kjit/cluster.cuh's functions, as the SWA kernel uses them.
namespace kjit::sm90 {

inline uint32_t cluster_ctarank() { return static_cast<uint32_t>(mla::swa_detail::emu_detail::t_cta->rank); }

inline void cluster_arrive_release() {
  namespace ed = mla::swa_detail::emu_detail;
  ed::ClusterThread& me = ed::t_cluster_thread;
  if (me.pending >= 0) ed::fail("barrier.cluster.arrive twice without a wait between");
  ed::Cluster& c = *ed::t_cluster;
  std::lock_guard<std::mutex> lock(c.mutex);
  me.pending = c.phase;
  ++me.arrivals;
  if (++c.arrived == c.count) {
    c.arrived = 0;
    ++c.phase;
    c.cv.notify_all();
  }
}

inline void cluster_wait_acquire() {
  namespace ed = mla::swa_detail::emu_detail;
  ed::ClusterThread& me = ed::t_cluster_thread;
  if (me.pending < 0) ed::fail("barrier.cluster.wait without an arrival");
  ed::Cluster& c = *ed::t_cluster;
  std::unique_lock<std::mutex> lock(c.mutex);
  c.cv.wait(lock, [&] { return c.phase > me.pending; });
  me.pending = -1;
  ++me.waits;
}

inline void cluster_sync() {
  cluster_arrive_release();
  cluster_wait_acquire();
}

inline void cluster_sync_relaxed() { cluster_sync(); }
inline void cluster_arrive_relaxed() { cluster_arrive_release(); }

/// The target CTA's rank + 1 in bits 24 and up, the offset below.
inline uint32_t map_shared_rank(uint32_t addr, uint32_t rank) {
  namespace ed = mla::swa_detail::emu_detail;
  if (static_cast<int>(rank) >= ed::t_cluster->size) ed::fail("mapa to a rank outside the cluster");
  if (addr >= static_cast<uint32_t>(ed::kSmemBytes)) ed::fail("mapa of an address outside shared memory");
  return addr | ((rank + 1) << 24);
}

/// Where a shared::cluster read of `bytes` lands; records the read for check_cluster. Yields
/// first, so that a CTA the protocol does not hold has time to exit.
inline const unsigned char* cluster_source(uint32_t addr, uint32_t bytes) {
  namespace ed = mla::swa_detail::emu_detail;
  std::this_thread::yield();
  const uint32_t rank1 = addr >> 24, offset = addr & 0xffffffu;
  if (rank1 == 0 || static_cast<int>(rank1) > ed::t_cluster->size) ed::fail("ld.shared::cluster of an address mapa did not make");
  if (offset % bytes != 0 || offset + bytes > static_cast<uint32_t>(ed::kSmemBytes)) {
    ed::fail("misaligned or out-of-range ld.shared::cluster");
  }
  ed::Cta& target = *ed::t_cluster->ctas[rank1 - 1];
  if (target.running.load() == 0) ed::fail("ld.shared::cluster of a CTA that has exited");
  int64_t seen = target.read_phase.load();
  const int64_t mine = ed::t_cluster_thread.arrivals;  // the phase this thread arrives at next
  while (mine > seen && !target.read_phase.compare_exchange_weak(seen, mine)) {
  }
  return target.smem + offset;
}

inline float ld_shared_cluster_f32(uint32_t addr) {
  float v;
  std::memcpy(&v, cluster_source(addr, 4), 4);
  return v;
}

inline float4 ld_shared_cluster_f32x4(uint32_t addr) {
  float4 v;
  std::memcpy(&v, cluster_source(addr, 16), 16);
  return v;
}

}  // namespace kjit::sm90
