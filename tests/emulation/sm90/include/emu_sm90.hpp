#pragma once
// Host emulation of the Hopper (sm_90a) machinery the warp-specialized kernels use
// (tests/emulation/sm90 only): a CTA's dynamic shared memory, its mbarriers (arrival count,
// transaction bytes, phase), its named barriers (bar.sync / bar.arrive with a thread count),
// TMA loads and stores through the stand-in driver's tensor maps, and each thread's wgmma
// groups, and the CTA's register pool that setmaxnreg moves registers within. Thread-block
// clusters: the CTAs of one cluster run at once (each thread's t_my_cta), with shared::cluster
// addresses (mapa), remote mbarrier arrivals, multicast TMA loads landing in every masked CTA and
// completing bytes on each one's barrier, and the cluster barrier; a remote access to a CTA of
// the cluster whose threads have all exited aborts (its shared memory is gone on the device).
// Written from the PTX ISA's definitions; the kjit/*.cuh headers beside this one wrap it
// under the kernel headers' names. Every wait gives up after kWaitSeconds and aborts naming the
// barrier (a protocol deadlock) and what every thread of the cluster waits on; every
// shared-memory access is checked against the launch's dynamic shared memory; with g_late_wgmma
// a wgmma reads its operands at the wait that retires it, and a write (st.shared, a copy or a TMA
// box landing, a peer's multicast included) to shared memory an unretired wgmma reads aborts as
// a hazard (a stage released before the wait). Not emulated: memory ordering (every access is
// sequentially consistent, so a missing fence or a relaxed-where-release-is-needed barrier
// passes), TMA's asynchrony (a load lands at issue, a store completes at issue), L2 and the
// cache hints, interleaved maps and swizzles other than 128B.
#include "emu_cp_async.hpp"
#include "emu_runtime.hpp"

#include "tests/support/simulated_tensor_map.hpp"

#include <atomic>
#include <chrono>
#include <thread>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace emu {

/// threadIdx's companion: the launch's grid (the kernels read gridDim).
inline thread_local Dim3 t_grid;

namespace sm90 {

constexpr int kWaitSeconds = 20;

struct Cluster;

/// One emulated CTA's shared state: the one CTA running (g_cta), or one of the CTAs of the
/// cluster running (each thread's t_my_cta).
struct Cta {
  uint8_t* smem = nullptr;  ///< the kernel's dynamic shared memory (1024-byte aligned)
  const uint8_t* symbol = nullptr;  ///< the kernel's extern __shared__ array on the host (null: smem)
  uint32_t smem_bytes = 0;  ///< the launch's dynamic shared memory
  std::mutex mutex;
  std::condition_variable changed;
  struct Mbarrier {
    uint32_t count = 0;    ///< arrivals a phase expects
    uint32_t pending = 0;  ///< arrivals still missing in the current phase
    int64_t tx = 0;        ///< transaction bytes announced and not yet completed
    uint32_t phase = 0;    ///< completed phases
  };
  std::map<uint32_t, Mbarrier> mbarriers;  ///< by shared address
  struct Named {
    int expected = 0;  ///< the thread count of the phase in progress
    int arrived = 0;
    uint64_t generation = 0;
  };
  Named named[16];
  /// What each thread is waiting on (null: running), for the deadlock report.
  struct Waiting {
    const char* what = nullptr;
    uint32_t a = 0, b = 0;
  };
  Waiting waiting[1024];
  /// Per 1024-byte atom of shared memory, the wgmma operations in flight that read it (late
  /// wgmma only): a write there is a hazard.
  std::atomic<int> reads_in_flight[256] = {};
  /// The CTA's register pool (setmaxnreg): each warp's registers per thread, and the registers
  /// released by setmaxnreg.dec and not yet taken by an .inc (start_register_pool).
  int warp_regs[32] = {};
  int free_regs = 0;
  /// Clusters: the CTA's rank, its cluster (null: a lone CTA), and its threads not yet exited
  /// (at 0 its shared memory is gone: a peer's later access to it fails).
  uint32_t rank = 0;
  Cluster* cluster = nullptr;
  std::atomic<int> running{0};
};

/// The CTAs of one thread-block cluster, all running at once (each CUDA thread's t_my_cta is its
/// own), and the cluster barrier (barrier.cluster: every thread of every CTA).
struct Cluster {
  uint32_t size = 1;
  Cta* ctas[8] = {};
  std::mutex mutex;
  std::condition_variable changed;
  int expected = 0;  ///< threads per phase: size × threads per CTA
  int arrived = 0;
  uint64_t generation = 0;
};

inline Cta* g_cta = nullptr;
/// This thread's CTA when the CTAs of a cluster run at once (null: g_cta, the one running).
inline thread_local Cta* t_my_cta = nullptr;
inline Cta& cta() { return t_my_cta != nullptr ? *t_my_cta : *g_cta; }

/// The kernel's name of the mbarrier at a shared address (say "empty[2]"), when the emulator knows
/// its layout (null: the address alone): deadlock reports and failures name it.
inline std::string (*g_mbarrier_name)(uint32_t bar) = nullptr;
/// " = name" for a message about the mbarrier at `a` ("mbarrier ..." messages), else "".
inline std::string mbarrier_suffix(const char* what, uint32_t a) {
  if (g_mbarrier_name == nullptr || std::strncmp(what, "mbarrier", 8) != 0) return "";
  return " = " + g_mbarrier_name(a);
}

[[noreturn]] inline void fail(const char* what, uint32_t a = 0, uint32_t b = 0) {
  std::fprintf(stderr, "sm90 emulator: thread %u of CTA (%u, %u) (cluster rank %u): %s (%u, %u)%s\n", t_thread.x,
               t_block.x, t_block.y, t_my_cta != nullptr ? t_my_cta->rank : 0u, what, a, b,
               mbarrier_suffix(what, a).c_str());
  std::abort();
}

inline uint8_t* smem_at_in(Cta& c, uint32_t addr, uint32_t bytes) {
  if (uint64_t{addr} + bytes > c.smem_bytes) fail("shared access past the dynamic shared memory", addr, bytes);
  return c.smem + addr;
}
inline uint8_t* smem_at(uint32_t addr, uint32_t bytes) { return smem_at_in(cta(), addr, bytes); }

/// smem_at for a write (st.shared, a copy landing) into CTA `c`'s shared memory: fails if a wgmma
/// in flight reads that atom.
inline uint8_t* smem_write_in(Cta& c, uint32_t addr, uint32_t bytes) {
  uint8_t* at = smem_at_in(c, addr, bytes);
  for (uint32_t a = addr / 1024; a <= (addr + bytes - 1) / 1024; ++a) {
    if (c.reads_in_flight[a].load() > 0) {
      fail(&c == &cta() ? "shared memory written while a wgmma that reads it is in flight (a stage released or "
                          "refilled before the wgmma's wait)"
                        : "a peer CTA's shared memory written (multicast) while a wgmma of that CTA that reads it is "
                          "in flight (a stage released or refilled before the wgmma's wait)",
           addr, bytes);
    }
  }
  return at;
}
inline uint8_t* smem_write(uint32_t addr, uint32_t bytes) { return smem_write_in(cta(), addr, bytes); }

/// Prints what every waiting thread of `c` waits on (runs of alike threads once).
inline void print_waiting(const Cta& c) {
  for (int t = 0; t < 1024; ++t) {
    const Cta::Waiting& w = c.waiting[t];
    if (w.what != nullptr && (t == 0 || w.what != c.waiting[t - 1].what || w.a != c.waiting[t - 1].a)) {
      std::fprintf(stderr, "  rank %u thread %d (and those after it alike): %s (%u, %u)%s\n", c.rank, t, w.what, w.a, w.b,
                   mbarrier_suffix(w.what, w.a).c_str());
    }
  }
}

/// Waits on the CTA's condition until `done()`; after kWaitSeconds prints what every waiting
/// thread of the CTA waits on and aborts naming `what`.
/// In a cluster, every CTA's waiting threads are printed (a peer's missing arrival shows there).
template <class Done>
void wait_until(std::unique_lock<std::mutex>& lock, const char* what, uint32_t a, uint32_t b, const Done& done,
                std::condition_variable* changed = nullptr) {
  Cta::Waiting& me = cta().waiting[t_thread.x % 1024];
  me = {what, a, b};
  const bool ok = (changed != nullptr ? *changed : cta().changed).wait_for(lock, std::chrono::seconds(kWaitSeconds), done);
  me = {};
  if (!ok) {
    if (cta().cluster != nullptr) {
      for (uint32_t r = 0; r < cta().cluster->size; ++r) print_waiting(*cta().cluster->ctas[r]);
    } else {
      print_waiting(cta());
    }
    lock.unlock();
    fail(what, a, b);
  }
}

// ---- setmaxnreg -----------------------------------------------------------------------------------

/// A CTA of `threads` threads launched under __launch_bounds__(threads, 1) holds what ptxas gives
/// each thread of such a kernel, the most the 64K register file allows in steps of 8, and no
/// more: setmaxnreg only moves registers between the CTA's warps (PTX ISA, setmaxnreg).
inline void start_register_pool(unsigned threads) {
  const int launch = static_cast<int>(65536 / threads / 8 * 8);
  for (int& w : cta().warp_regs) w = launch;
  cta().free_regs = 0;
}

/// setmaxnreg.dec / .inc to `regs` per thread for the calling warp (one lane calls it): .dec
/// releases the difference into the pool, .inc waits until the pool holds what it asks for (on
/// the device it waits forever: a split that asks for more than the CTA holds hangs).
inline void setmaxnreg(int regs, bool inc) {
  if (regs < 24 || regs > 256 || regs % 8 != 0) fail("setmaxnreg: registers outside 24..256 or not a multiple of 8", regs);
  std::unique_lock<std::mutex> lock(cta().mutex);
  int& mine = cta().warp_regs[(t_thread.x / 32) % 32];
  if (inc ? regs < mine : regs > mine) fail(inc ? "setmaxnreg.inc below the warp's count" : "setmaxnreg.dec above the warp's count", regs, mine);
  if (!inc) {
    cta().free_regs += (mine - regs) * 32;
    mine = regs;
    cta().changed.notify_all();
    return;
  }
  const int need = (regs - mine) * 32;
  wait_until(lock, "setmaxnreg.inc: registers the CTA's pool does not hold", static_cast<uint32_t>(regs),
             static_cast<uint32_t>(mine), [&] { return cta().free_regs >= need; });
  cta().free_regs -= need;
  mine = regs;
}

// ---- mbarriers ----------------------------------------------------------------------------------

inline Cta::Mbarrier& mbarrier(uint32_t bar, Cta& c = cta()) {
  auto it = c.mbarriers.find(bar);
  if (it == c.mbarriers.end()) fail("mbarrier used before mbarrier.init", bar);
  return it->second;
}

/// Completes the phase once every arrival and every announced byte is in (caller holds c's lock).
inline void maybe_complete(Cta::Mbarrier& m, Cta& c = cta()) {
  if (m.pending == 0 && m.tx == 0) {
    ++m.phase;
    m.pending = m.count;
    c.changed.notify_all();
  }
}

inline void mbarrier_init(uint32_t bar, uint32_t count) {
  smem_at(bar, 8);
  if (bar % 8 != 0 || count == 0) fail("mbarrier.init: misaligned or count 0", bar, count);
  std::lock_guard<std::mutex> lock(cta().mutex);
  cta().mbarriers[bar] = Cta::Mbarrier{count, count, 0, 0};
}

/// An arrival (with `expect_tx` bytes announced) on the barrier at `bar` of CTA `c` (this one, or
/// a peer of its cluster: mbarrier.arrive.shared::cluster).
inline void mbarrier_arrive(uint32_t bar, uint32_t expect_tx = 0, Cta& c = cta()) {
  std::lock_guard<std::mutex> lock(c.mutex);
  Cta::Mbarrier& m = mbarrier(bar, c);
  if (m.pending == 0) fail("mbarrier arrival past the expected count", bar, m.count);
  m.tx += expect_tx;
  --m.pending;
  maybe_complete(m, c);
}

/// TMA's complete_tx on CTA `c`'s barrier: `bytes` of the phase's transactions landed (the count
/// may go below zero until the phase's expect_tx arrives, as on the device).
inline void mbarrier_complete_tx(uint32_t bar, uint32_t bytes, Cta& c = cta()) {
  std::lock_guard<std::mutex> lock(c.mutex);
  Cta::Mbarrier& m = mbarrier(bar, c);
  m.tx -= bytes;
  maybe_complete(m, c);
}

// ---- clusters -----------------------------------------------------------------------------------

/// CTA `rank` of this thread's cluster, for a remote access: fails outside a cluster, past its
/// size, or once that CTA has exited (its shared memory and barriers are gone: a protocol must
/// keep a CTA alive until its peers' last access to it).
inline Cta& peer(uint32_t rank, const char* access) {
  Cluster* cl = cta().cluster;
  if (cl == nullptr) {
    if (rank == 0) return cta();
    fail("a cluster access (rank) outside a cluster launch", rank);
  }
  if (rank >= cl->size) fail("a cluster access past the cluster's size (rank, size)", rank, cl->size);
  Cta& c = *cl->ctas[rank];
  if (&c != &cta() && c.running.load() == 0) {
    const std::string what = std::string(access) + ": CTA (rank, own rank) of the cluster has exited (its shared "
                             "memory and barriers are gone: the protocol let it exit before this peer's last access)";
    fail(what.c_str(), rank, cta().rank);
  }
  return c;
}

/// shared::cluster addresses (mapa): CTA rank r's shared::cta address a is a | (r + 1) << 24; a
/// plain shared::cta address is this CTA's.
inline uint32_t cluster_address(uint32_t addr, uint32_t rank) {
  if (addr >> 24 != 0) fail("mapa of an address that is not a shared::cta address", addr, rank);
  peer(rank, "mapa");
  return addr | ((rank + 1) << 24);
}
inline Cta& cluster_owner(uint32_t& addr, const char* access) {
  const uint32_t r = addr >> 24;
  addr &= 0xffffffu;
  return r == 0 ? cta() : peer(r - 1, access);
}

/// barrier.cluster.arrive + wait: every thread of every CTA of the cluster (kWaitSeconds, then
/// the deadlock report).
inline void cluster_barrier() {
  Cluster* cl = cta().cluster;
  if (cl == nullptr) fail("barrier.cluster outside a cluster launch");
  std::unique_lock<std::mutex> lock(cl->mutex);
  const uint64_t generation = cl->generation;
  if (++cl->arrived == cl->expected) {
    cl->arrived = 0;
    ++cl->generation;
    cl->changed.notify_all();
    return;
  }
  wait_until(lock, "barrier.cluster never completed (arrived, expected)", static_cast<uint32_t>(cl->arrived),
             static_cast<uint32_t>(cl->expected), [&] { return cl->generation != generation; }, &cl->changed);
}

/// The phases of each mbarrier this thread has seen complete (see mbarrier_wait).
inline thread_local std::map<uint32_t, uint32_t> t_phases_seen;

/// try_wait.parity in a loop. On the device it returns once the current (incomplete) phase's
/// parity differs from `parity`, and the lanes of a warp test the barrier together. Here each
/// lane is a thread the host may deschedule while the barrier moves on twice (its warp-mates
/// released the next phase without it), so a lane waits for the first phase of parity `parity`
/// from the one before the last it saw complete: on time that is the device's test, and a late
/// lane does not miss the phase its warp passed. (Phase −1, parity 1, counts as complete, as the
/// device's test says of a fresh barrier.)
inline void mbarrier_wait(uint32_t bar, uint32_t parity) {
  std::unique_lock<std::mutex> lock(cta().mutex);
  Cta::Mbarrier& m = mbarrier(bar);
  uint32_t& seen = t_phases_seen[bar];
  int64_t phase = int64_t{seen} - 1;
  if (static_cast<uint32_t>(phase & 1) != (parity & 1u)) ++phase;
  wait_until(lock, "mbarrier wait (bar, parity) never completed", bar, parity,
             [&] { return int64_t{m.phase} > phase; });
  if (phase + 1 > int64_t{seen}) seen = static_cast<uint32_t>(phase + 1);
}

// ---- named barriers -----------------------------------------------------------------------------

/// bar.sync (wait) or bar.arrive (no wait) on barrier `id` of `threads` threads.
inline void named_barrier(int id, int threads, bool wait) {
  if (id < 0 || id > 15 || threads <= 0 || threads % 32 != 0) fail("bar: bad id or thread count", id, threads);
  std::unique_lock<std::mutex> lock(cta().mutex);
  Cta::Named& b = cta().named[id];
  if (b.arrived == 0) {
    b.expected = threads;
  } else if (b.expected != threads) {
    fail("bar: thread counts differ within one phase", id, threads);
  }
  const uint64_t generation = b.generation;
  if (++b.arrived == b.expected) {
    b.arrived = 0;
    ++b.generation;
    cta().changed.notify_all();
    return;
  }
  if (wait) {
    wait_until(lock, "bar.sync (id, threads) never completed", id, threads, [&] { return b.generation != generation; });
  }
}

// ---- TMA ----------------------------------------------------------------------------------------

/// The 128-byte swizzle of a shared address (Swizzle<3,4,3>: bits 4-6 ^= bits 7-9), as TMA writes
/// and wgmma reads 128B-swizzled tiles.
inline uint32_t swizzle128(uint32_t addr) { return addr ^ (((addr >> 7) & 7u) << 4); }

/// Visits each box row of a TMA box at `coords` (5 entries, those past the rank 0): its global
/// address (or null where any outer coordinate, or the whole row, is out of range), its shared
/// byte offset in the box, and how many of its leading bytes lie inside the innermost dimension
/// (a row straddling the end: the rest is out of bounds, zero-filled by loads, not stored).
template <class Row>
void for_each_box_row(const kjit::testing::SimTensorMap& m, const int32_t (&coords)[5], int rank, const Row& row) {
  if (m.rank != rank) fail("TMA: the map's rank differs from the instruction's", m.rank, rank);
  if (m.interleave != CU_TENSOR_MAP_INTERLEAVE_NONE) fail("TMA: interleaved maps are not emulated");
  for (int i = 0; i < rank; ++i) {
    if (m.elem_strides[i] != 1) fail("TMA: element strides other than 1 are not emulated", i, m.elem_strides[i]);
  }
  const uint32_t elem = static_cast<uint32_t>(kjit::testing::kSimTensorMapElemBytes[m.dtype]);
  const uint32_t row_bytes = m.box[0] * elem;
  if (m.swizzle == CU_TENSOR_MAP_SWIZZLE_128B && row_bytes != 128) {
    fail("TMA: 128B swizzle with a box row other than 128 bytes is not emulated", row_bytes);
  }
  if (m.swizzle != CU_TENSOR_MAP_SWIZZLE_128B && m.swizzle != CU_TENSOR_MAP_SWIZZLE_NONE) {
    fail("TMA: only 128B swizzle or none are emulated", m.swizzle);
  }
  if (m.oob != CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) fail("TMA: only zero OOB fill is emulated", m.oob);
  if (coords[0] < 0 && coords[0] + static_cast<int64_t>(m.box[0]) > 0) {
    fail("TMA: a box row straddling the innermost dimension's start is not emulated");
  }
  const bool in0 = coords[0] >= 0 && uint64_t(coords[0]) < m.dims[0];
  const uint64_t left = in0 ? m.dims[0] - uint64_t(coords[0]) : 0;
  const uint32_t valid = static_cast<uint32_t>(left < m.box[0] ? left : m.box[0]) * elem;
  uint32_t offset = 0;
  int32_t c[5] = {0, 0, 0, 0, 0};
  const uint32_t rows = m.box[1] * m.box[2] * m.box[3] * m.box[4];
  for (uint32_t r = 0; r < rows; ++r, offset += row_bytes) {
    uint32_t rest = r;
    for (int i = 1; i < 5; ++i) {
      c[i] = coords[i] + static_cast<int32_t>(rest % m.box[i]);
      rest /= m.box[i];
    }
    bool inside = in0;
    uint64_t at = m.base + uint64_t(coords[0]) * elem;
    for (int i = 1; i < rank; ++i) {
      inside = inside && c[i] >= 0 && uint64_t(c[i]) < m.dims[i];
      at += uint64_t(c[i]) * m.strides[i - 1];
    }
    row(inside ? reinterpret_cast<const uint8_t*>(at) : nullptr, offset, row_bytes, inside ? valid : 0u);
  }
}

/// cp.async.bulk.tensor global → shared: the box at `coords` lands at `dst` (zeros out of range)
/// and completes its bytes, out-of-range ones included, on the mbarrier at `bar`.
/// With a `multicast` CTA mask (cp.async.bulk.tensor ... .multicast::cluster), the box lands at
/// `dst` in each masked CTA of the cluster and completes its bytes on each one's barrier at `bar`.
inline void tma_load(uint32_t dst, const void* map, const int32_t (&coords)[5], int rank, uint32_t bar,
                     uint16_t multicast = 0) {
  const kjit::testing::SimTensorMap m = kjit::testing::unpack_sim_tensor_map(map);
  const bool swizzled = m.swizzle == CU_TENSOR_MAP_SWIZZLE_128B;
  if (dst % (swizzled ? 1024 : 128) != 0) fail("TMA load: destination misaligned for its swizzle", dst);
  if (multicast == 0) multicast = static_cast<uint16_t>(1u << cta().rank);
  for (uint32_t r = 0; r < 16; ++r) {
    if ((multicast >> r & 1u) == 0) continue;
    Cta& c = peer(r, "a TMA multicast into it");
    uint32_t bytes = 0;
    for_each_box_row(m, coords, rank, [&](const uint8_t* src, uint32_t offset, uint32_t row_bytes, uint32_t valid) {
      for (uint32_t chunk = 0; chunk < row_bytes; chunk += 16) {
        const uint32_t to = swizzled ? swizzle128(dst + offset + chunk) : dst + offset + chunk;
        uint8_t* out = smem_write_in(c, to, 16);
        std::memset(out, 0, 16);
        if (src != nullptr && chunk < valid) std::memcpy(out, src + chunk, valid - chunk < 16 ? valid - chunk : 16);
      }
      bytes += row_bytes;
    });
    mbarrier_complete_tx(bar, bytes, c);
  }
}

/// cp.async.bulk.tensor shared → global: the box at `coords` from `src`, rows out of range not
/// written. Performed at once (the bulk groups' waits then have nothing to wait for).
inline void tma_store(const void* map, const int32_t (&coords)[5], int rank, uint32_t src) {
  const kjit::testing::SimTensorMap m = kjit::testing::unpack_sim_tensor_map(map);
  const bool swizzled = m.swizzle == CU_TENSOR_MAP_SWIZZLE_128B;
  if (src % (swizzled ? 1024 : 128) != 0) fail("TMA store: source misaligned for its swizzle", src);
  for_each_box_row(m, coords, rank, [&](const uint8_t* dst, uint32_t offset, uint32_t row_bytes, uint32_t valid) {
    if (dst == nullptr) return;
    for (uint32_t chunk = 0; chunk < row_bytes && chunk < valid; chunk += 16) {
      const uint32_t from = swizzled ? swizzle128(src + offset + chunk) : src + offset + chunk;
      std::memcpy(const_cast<uint8_t*>(dst) + chunk, smem_at(from, 16), valid - chunk < 16 ? valid - chunk : 16);
    }
  });
}

// ---- wgmma --------------------------------------------------------------------------------------

/// A decoded shared-memory matrix descriptor (128B swizzle only).
struct Desc {
  uint32_t start, lbo, sbo;
};
inline Desc decode(uint64_t d) {
  if ((d >> 62) != 1) fail("wgmma: only 128B-swizzled descriptors are emulated", static_cast<uint32_t>(d >> 62));
  return {static_cast<uint32_t>(d & 0x3fff) << 4, static_cast<uint32_t>((d >> 16) & 0x3fff) << 4,
          static_cast<uint32_t>((d >> 32) & 0x3fff) << 4};
}
/// Byte `kbyte` of row `mn` of a K-major operand (rows of 128 bytes, 8-row groups SBO apart).
inline uint32_t k_major(const Desc& d, int mn, int kbyte) {
  return swizzle128(d.start + static_cast<uint32_t>(mn / 8) * d.sbo + static_cast<uint32_t>(mn % 8) * 128 + kbyte);
}
/// Element (mn, k) of an MN-major operand of `elem`-byte values: 128-byte rows along MN, one
/// per k, 8-row groups along k SBO apart, blocks of 128 bytes along MN LBO apart.
inline uint32_t mn_major(const Desc& d, int mn, int k, int elem) {
  const int per_row = 128 / elem;
  return swizzle128(d.start + static_cast<uint32_t>(mn / per_row) * d.lbo + static_cast<uint32_t>(k / 8) * d.sbo +
                    static_cast<uint32_t>(k % 8) * 128 + static_cast<uint32_t>(mn % per_row) * elem);
}

/// The value of an fp8 byte (format 0: E4M3 "fn", 1: E5M2), exactly (wgmma's inputs).
inline float fp8_value(uint8_t v, int format) {
  const bool neg = (v & 0x80) != 0;
  const int mbits = format == 0 ? 3 : 2, bias = format == 0 ? 7 : 15;
  const int e = (v & 0x7f) >> mbits, man = v & ((1 << mbits) - 1);
  float x;
  if (format == 0 && (v & 0x7f) == 0x7f) {
    x = NAN;
  } else if (format == 1 && e == 31) {
    x = man != 0 ? NAN : INFINITY;
  } else if (e == 0) {
    x = std::ldexp(static_cast<float>(man), 1 - bias - mbits);
  } else {
    x = std::ldexp(static_cast<float>(man + (1 << mbits)), e - bias - mbits);
  }
  return neg ? -x : x;
}
inline float fp8_at(uint32_t addr, int format) {
  static const auto table = [] {
    std::vector<float> t(512);
    for (int f = 0; f < 2; ++f) {
      for (int v = 0; v < 256; ++v) t[f * 256 + v] = fp8_value(static_cast<uint8_t>(v), f);
    }
    return t;
  }();
  return table[format * 256 + *smem_at(addr, 1)];
}

inline float bf16_at(uint32_t addr) {
  uint16_t bits;
  std::memcpy(&bits, smem_at(addr, 2), 2);
  return __uint_as_float(static_cast<uint32_t>(bits) << 16);
}

/// This thread's wgmma operations: issued into the open group, committed groups in order. With
/// g_late_wgmma a group runs at the wait that retires it (reading shared memory as late as the
/// wait allows: a stage released or refilled before its wgmma's wait shows up); otherwise an
/// operation runs at issue.
struct WgmmaState {
  std::vector<std::function<void()>> open;
  std::deque<std::vector<std::function<void()>>> committed;
};
inline bool g_late_wgmma = false;
inline thread_local WgmmaState t_wgmma;

/// The 1024-byte atoms an operand of `rows` rows (K-major: 8-row groups SBO apart) or of `rows`
/// MN elements (MN-major, 16 k: 128-byte blocks LBO apart, 8-k groups SBO apart) spans.
template <class Atom>
void operand_atoms(const Desc& d, bool k_major_operand, int rows, int elem, const Atom& atom) {
  if (k_major_operand) {
    for (int g = 0; g < rows / 8; ++g) atom((d.start + static_cast<uint32_t>(g) * d.sbo) / 1024);
  } else {
    for (int b = 0; b < rows * elem / 128; ++b) {
      for (int kg = 0; kg < 2; ++kg) atom((d.start + static_cast<uint32_t>(b) * d.lbo + kg * d.sbo) / 1024);
    }
  }
}

/// Issues one wgmma operation reading the operands `reads` (descriptor, K-major, rows, element
/// bytes): with g_late_wgmma it runs at the wait that retires its group, and until then a write
/// to what it reads fails (smem_write); otherwise it runs now.
struct Operand {
  Desc desc;
  bool k_major;
  int rows, elem;
};
inline void wgmma_issue(std::function<void()> op, std::vector<Operand> reads) {
  if (!g_late_wgmma) {
    op();
    return;
  }
  auto count = [reads](int delta) {
    for (const Operand& o : reads) {
      operand_atoms(o.desc, o.k_major, o.rows, o.elem, [&](uint32_t a) { cta().reads_in_flight[a] += delta; });
    }
  };
  count(1);
  t_wgmma.open.push_back([op = std::move(op), count] {
    op();
    count(-1);
  });
}
inline void wgmma_commit() {
  t_wgmma.committed.push_back(std::move(t_wgmma.open));
  t_wgmma.open.clear();
}
inline void wgmma_wait(int pending) {
  // Late: let the other threads run first (a producer refilling a stage released too early).
  if (static_cast<int>(t_wgmma.committed.size()) > pending) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  while (static_cast<int>(t_wgmma.committed.size()) > pending) {
    for (auto& op : t_wgmma.committed.front()) op();
    t_wgmma.committed.pop_front();
  }
}

/// The warpgroup-relative rows and columns of accumulator d[i] of an m64nN step (the PTX ISA's
/// D fragment: d[4j + r] = D[16w + l/4 + 8(r/2)][8j + 2(l%4) + r%2]).
inline int acc_row(int i) {
  const int t = static_cast<int>(t_thread.x % 128);
  return 16 * (t / 32) + (t % 32) / 4 + 8 * ((i % 4) / 2);
}
inline int acc_col(int i) {
  const int t = static_cast<int>(t_thread.x % 128);
  return 8 * (i / 4) + 2 * (t % 4) + (i % 2);
}

}  // namespace sm90
}  // namespace emu

#define gridDim (::emu::t_grid)
