// Hopper FP8 GEMM: TMA loads, an mbarrier ring, wgmma.mma_async m64nNk32 (e4m3/e5m2 → f32),
// warp-specialized, persistent, with cluster split-K for small M (sm_90a only; SASS: QGMMA).
// Contract: include/kjit/ops/fp8.hpp; host: runtime/ops/fp8/gemm.cc, which picks this kernel on
// sm_90 for tensorwise scales with A and B both K-major (the only FP8 layout wgmma reads:
// transposed operands exist for 16-bit types only) and routes everything else to the mma.sync
// kernel (fp8/gemm.cu).
//
//   D[m, n] = (Σ_k A[m, k] · B[n, k]) · sa[m] · sb[n] (+ bias[n])
//
// CTA: 384 threads = 3 warpgroups. Warpgroup 0 is the producer: it gives registers back
// (setmaxnreg.dec) and one thread issues, per 128-k tile, a TMA box of A (BM rows) and of B (BN
// rows) into the next stage of the ring after that stage's "empty" barrier says both consumers
// are done with it; the TMA completes the stage's "full" barrier (arrive + expected transaction
// bytes). Warpgroups 1 and 2 are consumers (setmaxnreg.inc): each waits on "full", issues 4
// wgmma m64nBNk32 over the tile's 128 k for its 64 rows, and releases the previous stage once
// wgmma.wait_group 1 says its wgmmas are complete, so the tensor cores always have a tile queued.
// TMA zero-fills out-of-bounds rows and k, so M, N and K need no predication in the main loop.
//
// Persistent (splits == 1): the grid is at most one CTA per SM and CTA b walks the output tiles
// b, b + gridDim.x, ... in grouped-raster order (8 tile rows per group, so the CTAs in flight
// share A and B panels in L2). The ring runs on across tiles: while the consumers run a tile's
// epilogue, the producer already loads the next tile's first stages, so the per-tile cost is the
// epilogue alone instead of a CTA launch + pipeline fill + epilogue.
// Split-K (splits == S > 1, for problems with fewer tiles than SMs: small M): the S CTAs of a
// tile form one thread-block cluster; CTA rank r multiplies the k-tiles [r·kt/S, (r+1)·kt/S),
// writes its f32 partial tile to its own shared memory, and after a cluster barrier each CTA
// sums one slice of the tile's columns over the S partials in rank order through distributed
// shared memory (ld.shared::cluster): deterministic, no workspace, no atomics.
// Small tiles (BN = 16, 32, 64, for N ≤ 64): the host turns a small-M GEMM into this form by
// swapping the operands (A' = B, the weight, fills the 128-row side; B' = A, the few activation
// rows, the BN side; D stored transposed, d_trans). A stage is then mostly weight bytes (18–24
// KiB), so 8–12 stages keep 128–192 KiB of the weight in flight per SM where a 128 × 128 tile
// holds 96 KiB beside 96 KiB of zero-filled A rows. Their epilogue stages the transposed tile in
// shared memory and writes whole rows of D, 16 bytes at a time. A small tile with BM = 64 has
// one multiplying consumer (the other only frees stages) and twice the CTAs over the weight, for
// problems whose 128-row tiles leave SMs idle: one SM takes in only about 30 bytes a cycle.
// Wave-fitting tiles (BN = 80, 96, 112, 160, 192, 224; BM = 128; persistent only): for M ≤ 256,
// where the tiles are few and the weight (B) is most of the bytes, a tile height that is not a
// power of two makes the tiles a whole number of waves (N = 10240: 128 CTAs of 80 weight rows
// against 80 of 128, which leave 52 of 132 SMs idle). wgmma takes any N that is a multiple of 8;
// B's TMA box is BN rows of 128-byte swizzle atoms like any other. BN is not a whole number of
// 128-byte D boxes, so these tiles store D directly from the accumulators, as the small tiles do
// when not swapped: at M ≤ 256 D is a few percent of the bytes.
// Pairs (persistent; clusters of 2 CTAs, the cluster's shape in tiles cluster_m × cluster_n):
// B-pairs (2 × 1; the planner's for M ≤ 128 with 64-row tiles, see runtime/ops/fp8/gemm_plan.cc):
// the two CTAs of a cluster take m-tiles 2u and 2u + 1 of one tile column; each loads its own A
// and half of the common B tile, multicast into both CTAs' stage. A-pairs (1 × 2; forced only,
// GemmArgs::multicast = 3): they take n-tiles 2v and 2v + 1 of one tile row; each loads half of
// the common A tile (BM / 2 rows), multicast into both, and its own whole B. Either way each
// stage of each CTA is written by both CTAs' TMA, so its "full" barrier expects the whole stage
// (both halves and the own operand) and each consumer warp frees a stage in both CTAs (remote
// mbarrier arrivals with the default, CTA-scope release: the stage's reads were wgmma's,
// complete at wgmma.wait_group). Both CTAs walk the same units (blockIdx.x / 2), so they fill
// and free the same sequence of stages. A unit's second tile may lie past the matrix (an odd
// tile row or column count): that CTA still loads and multicasts its half, clamped into the
// tensor, waits for and frees every stage, and stores nothing. Before exiting, the producer
// waits for every stage's last release, so no peer still arrives on this CTA's barriers; no
// cluster barrier ends the kernel.
//
// Epilogue (persistent): scale (and bias) in registers, then the 64 × BN outputs of a consumer go
// out as TMA stores of 64-row × 128-byte boxes staged in shared memory (128-byte swizzle; up to
// four boxes per warpgroup, i.e. a whole bf16 slice, written at once; the TMA unit clips rows ≥ M
// and columns ≥ N); the stores drain while the next tile's mainloop runs. When D is not TMA-able
// (not 16-byte aligned, or rows that overlap), the warpgroup copies the staged boxes out itself,
// masked to M × N, in a rolled loop.
// Split-K's epilogue stores directly (its slices are narrow and the output small).
//
// Programmatic dependent launch (sm_90): the barrier setup and tensor-map prefetch run before
// the kernel waits for the previous grid in the stream, and it lets the next kernel launch right
// after them; A, the scales, the bias and D are touched only after the wait. An operand the host
// marks constant (a weight: GemmArgs::b_constant) has its first ring of stages loaded before it.
//
// Shared memory: the TMA boxes use the 128-byte swizzle (16-byte chunk c of row r at c ^ (r % 8)
// within each 1024-byte group of 8 rows), which is the layout wgmma's "128B swizzle" K-major
// descriptor reads; stepping k by 32 inside the 128-byte rows moves the descriptor's start address
// by 32 bytes (the swizzle is a function of the address bits, and the tile base is 1024-aligned).
#include "kjit/config.cuh"
#include "kjit/cluster.cuh"
#include "kjit/named_barrier.cuh"
#include "kjit/f16_bits.cuh"
#include "kjit/smem.cuh"
#include "kjit/tma.cuh"
#include "kjit/wgmma.cuh"
#include "fp8/gemm_params.h"
#include "fp8/gemm_sm90_params.h"
#include "fp8/quantize_params.h"

namespace kjit::fp8 {

template <int kFmtA, int kFmtB, bool kOutF32, int kBM, int kBN, int kStages>
__global__ void __launch_bounds__(kSm90Threads, 1) gemm_sm90_kernel(KJIT_PARAMS GemmSm90Params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL) || defined(KJIT_EMULATE_SM90)
  using namespace sm90;
  static_assert(kStages >= 2 && kStages <= kSm90MaxStages, "stages");
  static_assert(sm90_valid_bm(kBM, kBN), "BM × BN: 128 × (16, 32, 64, 80, 96, 112, 128, 160, 192, 224, 256), 64 × (16, 32, 64)");
  constexpr bool kSmall = sm90_small_tile(kBN);    // direct or transposed stores, no TMA boxes
  constexpr bool kStaged = sm90_staged_tile(kBN);  // the TMA-box epilogue
  constexpr bool kWave = sm90_wave_tile(kBN);      // direct stores; persistent only
  constexpr int kABytes = kBM * 128;
  constexpr int kStageBytes = sm90_stage_bytes(kBM, kBN);
  constexpr int kEpilogueBytes = sm90_epilogue_bytes(kBN);
  constexpr int kConsumerWarps = 8;
  constexpr int kElem = kOutF32 ? 4 : 2;
  constexpr int kBoxCols = 128 / kElem;  // D columns per 128-byte TMA box row
  constexpr int kBoxes = kStaged ? kBN / kBoxCols : 1;  // boxes per 64-row warpgroup slice: even
  constexpr int kBoxJ = kBoxCols / 8;     // accumulator column groups (8 columns) per box
  constexpr int kStagingBoxes = kStaged ? sm90_staging_boxes(kBN) : 1;  // per consumer warpgroup
  constexpr int kRound = kBoxes < kStagingBoxes ? kBoxes : kStagingBoxes;  // boxes stored at once
  static_assert(kBoxes % kRound == 0, "whole rounds of boxes");
  // Split-K's partial tile (BM × BN f32) reuses the stages and the staging boxes. The
  // wave-fitting tiles have no split-K (the host never plans it; the kernel traps on it).
  static_assert(kWave || kBM * kBN * 4 <= kStages * kStageBytes + kEpilogueBytes, "split-K partials fit");

  extern __shared__ uint8_t smem_raw[];
  // The 128-byte swizzle atoms must start at 1024-byte boundaries.
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  const uint32_t staging = base + kStages * kStageBytes;
  const uint32_t bars = staging + kEpilogueBytes;  // full[s] at bars + 8s, empty[s] after them
  auto full_bar = [&](uint32_t s) { return bars + 8u * s; };
  auto empty_bar = [&](uint32_t s) { return bars + 8u * (kStages + s); };

  const int wg = threadIdx.x / 128;
  const int t = threadIdx.x % 128;
  const int splits = p.splits;
  // Pairs: cm = 2, the CTAs of a cluster take vertically adjacent tiles (m-tiles 2u and 2u + 1 of
  // one column): each loads its own A and half of the shared B, multicast to both. cn = 2,
  // horizontally adjacent tiles (n-tiles 2v and 2v + 1 of one row): each loads half of the
  // shared A, multicast to both, and its own B.
  const int cm = p.cluster_m, cn = p.cluster_n;
  const int cs = cm * cn;  // CTAs per unit: 1, or 2 (a pair)
  const uint32_t crank = cs > 1 ? cluster_ctarank() : 0u;
  const int tiles_mu = (p.tiles_m + cm - 1) / cm;  // rows of cluster units
  const int tiles_nu = (p.tiles_n + cn - 1) / cn;  // columns of cluster units
  const int num_units = tiles_mu * tiles_nu;
  const int ktiles = (p.k + 127) / 128;
  // The units (tiles, or tile pairs) this CTA walks and its k-tiles of each.
  int first_unit = blockIdx.x / cs, unit_step = gridDim.x / cs, kt_begin = 0, kt_end = ktiles;
  uint32_t rank = 0;
  if (splits > 1) {
    rank = cluster_ctarank();  // == blockIdx.x % splits: clusters are (splits, 1, 1)
    first_unit = blockIdx.x / splits;
    unit_step = num_units;
    kt_begin = static_cast<int>(rank) * ktiles / splits;
    kt_end = (static_cast<int>(rank) + 1) * ktiles / splits;
  }
  // Grouped raster, as the mma.sync kernel: groups of kGemmGroupM tile rows, column-major inside.
  // A pair's CTA rank picks its tile of the unit: the m-tile with cm = 2, the n-tile with cn = 2.
  const int rank_m = cm > 1 ? static_cast<int>(crank) : 0, rank_n = cn > 1 ? static_cast<int>(crank) : 0;
  auto tile_origin = [&](int unit, int& m0, int& n0) {
    const int group_rows = kGemmGroupM / cm;
    const int group_units = group_rows * tiles_nu;
    const int first_mu = (unit / group_units) * group_rows;
    const int group_m = min(tiles_mu - first_mu, group_rows);
    const int in_group = unit % group_units;
    m0 = ((first_mu + in_group % group_m) * cm + rank_m) * kBM;
    n0 = ((in_group / group_m) * cn + rank_n) * kBN;
  };

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbarrier_init(full_bar(s), 1);
      mbarrier_init(empty_bar(s), kConsumerWarps * cs);  // both CTAs' consumers free a shared stage
    }
    fence_barrier_init();
    prefetch_tensormap(&p.tma_a);
    prefetch_tensormap(&p.tma_b);
    if (p.tma_store) prefetch_tensormap(&p.tma_d);
  }
  // With multicast, the peer's TMA and consumers signal this CTA's barriers: they must exist first
  // (fence_barrier_init released them; the cluster barrier itself orders nothing else: relaxed).
  if (cs > 1) {
    cluster_sync_relaxed();
  } else {
    __syncthreads();
  }
  // Programmatic dependent launch (the host launches this kernel with it on sm_90): everything
  // above read only the parameters, so it ran while the previous kernel in the stream may still
  // be running. From here, a thread waits for that grid (KJIT_WAIT_PREVIOUS_GRID: it has completed
  // and its writes are visible) before it reads A, the scales or the bias, or writes D (the
  // previous kernel may still read D's memory); only an operand the caller declared constant
  // (const_a / const_b) is read before. The next kernel's CTAs may be scheduled from now on: every
  // CTA of this grid is resident (one per SM, the grid at most the SMs or the resident clusters),
  // so they take only SMs this grid leaves idle or frees, and they wait for this grid before
  // touching its output.
  KJIT_LAUNCH_DEPENDENTS();

  if (wg == 0) {
    // Producer.
    setmaxnreg_dec<40>();
    if (t == 0) {
      // A's box of k-tile kt for the tile row at m0 into the stage at `stage`: the whole box, or
      // with A-pairs this CTA's half (BM / 2 rows, whole 1024-byte swizzle atoms), multicast into
      // both CTAs' stage (both halves complete on each CTA's barrier). A box can start past the
      // tensor (a B-pair's second CTA on the last, odd tile row; an A-pair's second half of A in
      // the last tile row): its start is clamped into the tensor so every box has in-bounds
      // elements; what it then loads lands in rows past M, which are never stored.
      auto load_a = [&](uint32_t stage, int kt, int m0, uint32_t bar) {
        if (cn == 1) {
          tma_load_2d(stage, &p.tma_a, kt * 128, min(m0, p.m - 1), bar);
        } else {
          constexpr int kHalf = kBM / 2;
          static_assert(kHalf % 8 == 0, "whole 8-row swizzle atoms");
          tma_load_2d_multicast(stage + crank * (kHalf * 128), &p.tma_a, kt * 128,
                                min(m0 + static_cast<int>(crank) * kHalf, p.m - 1), bar, uint16_t{0x3});
        }
      };
      // B's box of k-tile kt for the tile column at n0, likewise: the whole box, or with B-pairs
      // this CTA's half (BN / 2 rows), multicast. Starts are clamped the same way (a B-pair's
      // second half of B in the last tile column; an A-pair's second CTA on the last, odd tile
      // column, whose whole box lies past N).
      auto load_b = [&](uint32_t stage, int kt, int n0, uint32_t bar) {
        if (cm == 1) {
          tma_load_2d(stage + kABytes, &p.tma_b, kt * 128, min(n0, p.n - 1), bar);
        } else {
          constexpr int kHalf = kBN / 2;
          tma_load_2d_multicast(stage + kABytes + crank * (kHalf * 128), &p.tma_b, kt * 128,
                                min(n0 + static_cast<int>(crank) * kHalf, p.n - 1), bar, uint16_t{0x3});
        }
      };
      // The first unit's first ring of a constant operand (a weight) loads before the wait: its
      // DRAM stream overlaps the previous kernel's tail. Each such stage expects all its bytes
      // now; the other operand's box completes it after the wait. Both CTAs of a pair take the
      // same first unit, so each multicasts its half of the shared operand early when that one is
      // constant, as the other expects (A-pairs share A: with D row-major, the activations,
      // never constant, so only each CTA's own B loads early).
      const bool early_a = p.const_a != 0, early_b = p.const_b != 0;
      int early = 0;  // stages 0 .. early-1 hold k-tiles kt_begin .. of the first unit
      if ((early_a || early_b) && first_unit < num_units) {
        int m0, n0;
        tile_origin(first_unit, m0, n0);
        early = min(kStages, kt_end - kt_begin);
        for (int i = 0; i < early; ++i) {
          const uint32_t a_dst = base + i * kStageBytes;
          mbarrier_arrive_expect_tx(full_bar(i), kStageBytes);
          if (early_a) load_a(a_dst, kt_begin + i, m0, full_bar(i));
          if (early_b) load_b(a_dst, kt_begin + i, n0, full_bar(i));
        }
      }
      KJIT_WAIT_PREVIOUS_GRID();
      uint32_t s = 0, phase = 0;  // the next stage to fill and the parity of its current round
      bool wrapped = false;       // the ring has been filled once: wait for "empty" from now on
      int issued = 0;             // stages issued after the wait (the first `early` are half loaded)
      for (int unit = first_unit; unit < num_units; unit += unit_step) {
        int m0, n0;
        tile_origin(unit, m0, n0);
        for (int kt = kt_begin; kt < kt_end; ++kt) {
          if (wrapped) mbarrier_wait(empty_bar(s), phase ^ 1u);
          const uint32_t a_dst = base + s * kStageBytes;
          const bool half = issued++ < early;  // its constant operand is loading already
          // With pairs, both halves of the shared operand (this CTA's and the peer's multicast)
          // complete on this barrier beside the own operand: kStageBytes in every CTA.
          if (!half) mbarrier_arrive_expect_tx(full_bar(s), kStageBytes);
          if (!(half && early_a)) load_a(a_dst, kt, m0, full_bar(s));
          if (!(half && early_b)) load_b(a_dst, kt, n0, full_bar(s));
          if (++s == kStages) s = 0, phase ^= 1u, wrapped = true;
        }
      }
      // Pairs: the peer's consumers arrive on this CTA's "empty" barriers (and its TMA writes
      // this CTA's stages, which the consumers here waited for). Before the CTA may exit, every
      // stage's last round must have been released by all 16 consumer warps: wait for it as a
      // next fill would. A stage never filled is in its first phase, whose preceding parity
      // (phase ^ 1 = 1) counts as complete, so its wait returns at once.
      if (cs > 1) {
        for (int i = 0; i < kStages; ++i) {
          mbarrier_wait(empty_bar(s), phase ^ 1u);
          if (++s == kStages) s = 0, phase ^= 1u;
        }
      }
    }
    // Split-K: the consumers' two cluster barriers count every thread of the cluster (the
    // producer releases no data: relaxed). Pairs need none at the end: see the wait above.
    __syncwarp();
    if (splits > 1) {
      cluster_sync_relaxed();
      cluster_sync_relaxed();
    }
    return;
  }

  // Consumers: warpgroup c = wg - 1 owns rows [64c, 64c + 64) of each tile. They read the scales
  // (a preceding quantize kernel may write them) and the bias, and write D: after the wait.
  setmaxnreg_inc<232>();
  KJIT_WAIT_PREVIOUS_GRID();
  const int c = wg - 1;
  const int w = t / 32, l = t % 32;
  const bool bias_bf16 = p.bias_bf16 != 0;
  auto wg_barrier = [&] {
    if (c == 0) {
      named_barrier<2, 128>();
    } else {
      named_barrier<3, 128>();
    }
  };
  // Scale and bias of one output (rows ≥ M or columns ≥ N: 0, nothing read; never stored).
  auto bias_at = [&](int i) {
    return bias_bf16 ? bf16_to_f32(static_cast<const bf16*>(p.bias)[i])
                     : __ldg(static_cast<const float*>(p.bias) + i);
  };
  auto row_scale = [&](int row) { return row < p.m ? __ldg(p.scale_a + int64_t(row) * p.sa_stride_m) : 0.f; };
  // A per-tensor scale_b (stride 0) is read once, not once per column.
  const bool sb_per_col = p.sb_stride_n != 0;
  const float sb_tensor = __ldg(p.scale_b);
  auto col_scale = [&](int col) {
    if (!sb_per_col) return sb_tensor;
    return col < p.n ? __ldg(p.scale_b + int64_t(col) * p.sb_stride_n) : 0.f;
  };
  auto finish = [&](float x, int row, int col, float sa, float sb) {
    x *= sa * sb;
    if (p.bias != nullptr && row < p.m && col < p.n) x += bias_at(p.bias_rows ? row : col);
    return x;
  };
  // Direct (non-TMA) store of D[row][col], D[row][col + 1], masked to M × N. Transposed D
  // (d_trans): the two go to d[col · ldd + row] and d[(col + 1) · ldd + row]; the 8 lanes that
  // share l % 4 hold 8 consecutive rows, so each store instruction writes 4 runs of 8 elements.
  const bool d_trans = kSmall && p.d_trans != 0;  // only the small tiles swap the operands
  auto store_pair = [&](int row, int col, float v0, float v1) {
    if (row >= p.m || col >= p.n) return;
    if (d_trans) {
      const float v[2] = {v0, v1};
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        if (col + e >= p.n) continue;
        char* out_col = static_cast<char*>(p.d) + int64_t(col + e) * p.ldd * kElem;
        if constexpr (kOutF32) {
          reinterpret_cast<float*>(out_col)[row] = v[e];
        } else {
          reinterpret_cast<bf16*>(out_col)[row] = f32_to_bf16(v[e]);
        }
      }
      return;
    }
    char* out_row = static_cast<char*>(p.d) + int64_t(row) * p.ldd * kElem;
    if (col + 1 < p.n && p.pair_store) {
      if constexpr (kOutF32) {
        *reinterpret_cast<float2*>(out_row + int64_t(col) * 4) = make_float2(v0, v1);
      } else {
        *reinterpret_cast<uint32_t*>(out_row + int64_t(col) * 2) = pack_bf16x2(v0, v1);
      }
      return;
    }
    const float v[2] = {v0, v1};
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      if (col + e >= p.n) continue;
      if constexpr (kOutF32) {
        reinterpret_cast<float*>(out_row)[col + e] = v[e];
      } else {
        reinterpret_cast<bf16*>(out_row)[col + e] = f32_to_bf16(v[e]);
      }
    }
  };

  uint32_t s = 0, phase = 0;  // the next stage to consume and the parity of its current round
  // No zero fill: the first wgmma of a tile runs with scale-d = 0 (D = A·B). Writing the
  // accumulators with ordinary instructions would make ptxas serialize the wgmmas (C7515).
  float acc[kBN / 2];
  int m0 = 0, n0 = 0;
  bool active = false;
  // Frees a stage: every consumer warp arrives on its "empty" barrier in each CTA that writes it.
  auto release = [&](uint32_t stage) {
    if (l != 0) return;
    if (cs == 1) {
      mbarrier_arrive(empty_bar(stage));
    } else {
      mbarrier_arrive_cluster(empty_bar(stage), 0);
      mbarrier_arrive_cluster(empty_bar(stage), 1);
    }
  };
  // Small tiles with D transposed: a consumer warpgroup's 64 × BN finished outputs go through
  // its staging slice (f32, tile column j = row n0 + j of D, 64 words, the 8-word blocks XOR-ed
  // with bits 1-2 of j so the fragment writes hit 32 banks), and then out as rows of D: 8 threads
  // a row, 8 consecutive outputs each (one 16-byte store for bf16, two for f32).
  const uint32_t tstage = staging + c * (64 * kBN * 4);
  auto trans_slot = [&](int r, int j) { return tstage + (j * 64 + (r ^ (((j >> 1) & 3) << 3))) * 4; };
  auto stage_trans = [&](int r, int j, float v) { st_shared_u32(trans_slot(r, j), __float_as_uint(v)); };
  // Stores tile columns [jb, je) (D rows n0 + jb ...) of the warpgroup's staged outputs.
  auto flush_trans = [&](int jb, int je) {
    const int i0 = m0 + 64 * c;  // the warpgroup's first kernel row: a column of D
    for (int q = t; q < (je - jb) * 8; q += 128) {
      const int j = jb + q / 8, r0 = (q % 8) * 8;
      const int drow = n0 + j, col = i0 + r0;
      if (drow >= p.n || col >= p.m) continue;
      const uint4 lo = ld_shared_v4(trans_slot(r0, j)), hi = ld_shared_v4(trans_slot(r0 + 4, j));
      const float v[8] = {__uint_as_float(lo.x), __uint_as_float(lo.y), __uint_as_float(lo.z), __uint_as_float(lo.w),
                          __uint_as_float(hi.x), __uint_as_float(hi.y), __uint_as_float(hi.z), __uint_as_float(hi.w)};
      char* out = static_cast<char*>(p.d) + (int64_t(drow) * p.ldd + col) * kElem;
      if (p.d_vec16 && col + 8 <= p.m) {
        if constexpr (kOutF32) {
          *reinterpret_cast<float4*>(out) = make_float4(v[0], v[1], v[2], v[3]);
          *reinterpret_cast<float4*>(out + 16) = make_float4(v[4], v[5], v[6], v[7]);
        } else {
          *reinterpret_cast<uint4*>(out) = make_uint4(pack_bf16x2(v[0], v[1]), pack_bf16x2(v[2], v[3]),
                                                      pack_bf16x2(v[4], v[5]), pack_bf16x2(v[6], v[7]));
        }
        continue;
      }
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        if (col + e >= p.m) break;
        if constexpr (kOutF32) {
          reinterpret_cast<float*>(out)[e] = v[e];
        } else {
          reinterpret_cast<bf16*>(out)[e] = f32_to_bf16(v[e]);
        }
      }
    }
  };

  // The staged tiles without TMA stores: writes kRound staged boxes (box `first_box` of the
  // warpgroup's slice onward, staged from `ring`) to D, masked to M x N, one 16-byte chunk of a box
  // row per iteration, element by element. A fallback for D that is not 16-byte aligned (or whose
  // rows overlap), so rolled and plain.
  auto copy_out = [&](uint32_t ring, int first_box) {
    constexpr int kChunkElems = 16 / kElem;
#pragma unroll 1
    for (int q = t; q < kRound * 512; q += 128) {
      const int bi = q / 512, r = (q / 8) % 64, ch = q % 8;
      const int row = m0 + 64 * c + r, col = n0 + (first_box + bi) * kBoxCols + ch * kChunkElems;
      if (row >= p.m || col >= p.n) continue;
      const uint4 v = ld_shared_v4(ring + bi * kSm90StagingBoxBytes + r * 128 + ((ch ^ (r & 7)) << 4));
      char* out = static_cast<char*>(p.d) + (int64_t(row) * p.ldd + col) * kElem;
      const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int e = 0; e < kChunkElems; ++e) {
        if (col + e >= p.n) break;
        if constexpr (kOutF32) {
          reinterpret_cast<uint32_t*>(out)[e] = w[e];
        } else {
          reinterpret_cast<uint16_t*>(out)[e] = static_cast<uint16_t>(w[e / 2] >> (16 * (e % 2)));
        }
      }
    }
  };

  // The thread's rows within the warpgroup's 64 are r_lo and r_lo + 8; row0 and the row scales
  // sa are the current tile's (split-K's reduction below reuses its one tile's).
  const int r_lo = 16 * w + l / 4;
  int row0 = 0;
  float sa[2] = {0.f, 0.f};
  for (int unit = first_unit; unit < num_units; unit += unit_step) {
    tile_origin(unit, m0, n0);
    // A warpgroup whose 64 rows all lie past M (M ≤ 64, or a B-pair's second CTA on the last, odd
    // tile row), or past the tile (BM = 64: the second warpgroup), or whose tile lies past N (an
    // A-pair's second CTA on the last, odd tile column), has nothing to multiply and nothing to
    // store: it just waits for and releases every stage (with pairs the peer's producer waits for
    // those releases too), leaving the tensor cores to the other warpgroup. The two loops are
    // separate (rather than one loop with conditional wgmmas) so that no compiler-inserted wgmma
    // wait sits on a divergent path: that makes ptxas serialize every wgmma of the kernel (C7518).
    active = 64 * c < kBM && m0 + 64 * c < p.m && n0 < p.n;
    // The row scales are read before the mainloop, so their latency (a DRAM miss, for a kernel
    // this short) hides behind it instead of opening the epilogue.
    row0 = m0 + c * 64 + r_lo;
    sa[0] = row_scale(row0);
    sa[1] = row_scale(row0 + 8);
    uint32_t prev = 0;
    if (active) {
      for (int kt = kt_begin; kt < kt_end; ++kt) {
        mbarrier_wait(full_bar(s), phase);
        const uint32_t a_tile = base + s * kStageBytes + c * 64 * 128;
        const uint32_t b_tile = base + s * kStageBytes + kABytes;
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
          wgmma_fp8<kBN, kFmtA, kFmtB>(acc, smem_desc_k128(a_tile + kk * 32), smem_desc_k128(b_tile + kk * 32),
                                          (kt != kt_begin || kk != 0) ? 1u : 0u);
        }
        wgmma_commit();
        // Keep this k-tile's wgmmas in flight; the previous k-tile's are done, so its stage is free.
        wgmma_wait<1>();
        if (kt != kt_begin) release(prev);
        prev = s;
        if (++s == kStages) s = 0, phase ^= 1u;
      }
      wgmma_wait<0>();
    } else {
      for (int kt = kt_begin; kt < kt_end; ++kt) {
        mbarrier_wait(full_bar(s), phase);
        if (kt != kt_begin) release(prev);
        prev = s;
        if (++s == kStages) s = 0, phase ^= 1u;
      }
    }
    release(prev);
    if (splits > 1) break;  // one tile per CTA: the cluster reduction below is its epilogue
    if (!active) continue;

    // The staged tiles' epilogue (compiled out of the others, which store directly): the
    // outputs are staged in shared memory as 64-row x 128-byte boxes, then go out as TMA stores
    // or, when D is not TMA-able (p.tma_store 0), through copy_out's rolled loop. One staged form
    // keeps a single unrolled copy of the 64 x BN outputs in the kernel: a second, direct-store
    // copy doubled the 128 x 256 tile's cold compile.
    if constexpr (kStaged) {
      const uint32_t ring = staging + c * (kStagingBoxes * kSm90StagingBoxBytes);
      // Bias per row (swapped operands) or per column; rows ≥ M are clipped by the TMA store.
      const bool col_bias = p.bias != nullptr && !p.bias_rows;
      float rb[2] = {0.f, 0.f};
      if (p.bias != nullptr && p.bias_rows) {
        rb[0] = bias_at(min(row0, p.m - 1));
        rb[1] = bias_at(min(row0 + 8, p.m - 1));
      }
      const float s_tensor[2] = {sa[0] * sb_tensor, sa[1] * sb_tensor};
      // The warpgroup's boxes go out in rounds of kRound (all of them for bf16, two rounds for
      // f32): before a round overwrites the staging buffers, the issuing thread waits until
      // the stores that last read them (the previous round, or the previous tile's: a whole
      // mainloop ago, so this rarely waits) are done reading; the rest wait at the barrier.
#pragma unroll
      for (int round = 0; round < kBoxes / kRound; ++round) {
        if (t == 0) bulk_wait_read<0>();
        wg_barrier();
#pragma unroll
        for (int bi = 0; bi < kRound; ++bi) {
          const uint32_t buf = ring + bi * kSm90StagingBoxBytes;
          // One multiply-add per output. The epilogue runs once per tile with the tensor cores
          // idle, so its instruction count is the per-tile overhead: per-tensor scale_b without
          // a column bias (uniform per launch) needs no per-column loads at all.
          if (!sb_per_col && !col_bias) {
#pragma unroll
            for (int jj = 0; jj < kBoxJ; ++jj) {
              const int j = (round * kRound + bi) * kBoxJ + jj;
#pragma unroll
              for (int h = 0; h < 2; ++h) {
                const int r = r_lo + 8 * h;
                const float v0 = fmaf(acc[4 * j + 2 * h], s_tensor[h], rb[h]);
                const float v1 = fmaf(acc[4 * j + 2 * h + 1], s_tensor[h], rb[h]);
                const int byte = (8 * jj + 2 * (l % 4)) * kElem;  // within the box row
                const uint32_t addr = buf + r * 128 + (((byte >> 4) ^ (r & 7)) << 4) + (byte & 15);
                if constexpr (kOutF32) {
                  st_shared_f32x2(addr, v0, v1);
                } else {
                  st_shared_u32(addr, pack_bf16x2(v0, v1));
                }
              }
            }
          } else {
            // The box's column factors first (columns ≥ N: 0, nothing read; clipped by TMA).
            float cs[kBoxJ][2], cb[kBoxJ][2];
#pragma unroll
            for (int jj = 0; jj < kBoxJ; ++jj) {
#pragma unroll
              for (int e = 0; e < 2; ++e) {
                const int col = n0 + 8 * ((round * kRound + bi) * kBoxJ + jj) + 2 * (l % 4) + e;
                const bool in = col < p.n;
                cs[jj][e] = !sb_per_col ? sb_tensor : in ? __ldg(p.scale_b + int64_t(col) * p.sb_stride_n) : 0.f;
                cb[jj][e] = col_bias && in ? bias_at(col) : 0.f;
              }
            }
#pragma unroll
            for (int jj = 0; jj < kBoxJ; ++jj) {
              const int j = (round * kRound + bi) * kBoxJ + jj;
#pragma unroll
              for (int h = 0; h < 2; ++h) {
                const int r = r_lo + 8 * h;
                const float v0 = fmaf(acc[4 * j + 2 * h], sa[h] * cs[jj][0], cb[jj][0] + rb[h]);
                const float v1 = fmaf(acc[4 * j + 2 * h + 1], sa[h] * cs[jj][1], cb[jj][1] + rb[h]);
                const int byte = (8 * jj + 2 * (l % 4)) * kElem;  // within the box row
                const uint32_t addr = buf + r * 128 + (((byte >> 4) ^ (r & 7)) << 4) + (byte & 15);
                if constexpr (kOutF32) {
                  st_shared_f32x2(addr, v0, v1);
                } else {
                  st_shared_u32(addr, pack_bf16x2(v0, v1));
                }
              }
            }
          }
        }
        if (!p.tma_store) {
          wg_barrier();  // the round's boxes are staged
          copy_out(ring, round * kRound);
          continue;  // the next round's (or tile's) first barrier: every thread is done reading
        }
        fence_proxy_async();
        wg_barrier();
        if (t == 0) {
#pragma unroll
          for (int bi = 0; bi < kRound; ++bi) {
            tma_store_2d(&p.tma_d, n0 + (round * kRound + bi) * kBoxCols, m0 + c * 64, ring + bi * kSm90StagingBoxBytes);
          }
          bulk_commit();
        }
      }
      continue;
    }
    if constexpr (kSmall) if (d_trans) {
      wg_barrier();  // the previous tile's rows are out of the staging slice
#pragma unroll
      for (int j = 0; j < kBN / 8; ++j) {
        const int jc = 8 * j + 2 * (l % 4);
        const float sb0 = col_scale(n0 + jc), sb1 = col_scale(n0 + jc + 1);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = row0 + 8 * h;
          stage_trans(r_lo + 8 * h, jc, finish(acc[4 * j + 2 * h], row, n0 + jc, sa[h], sb0));
          stage_trans(r_lo + 8 * h, jc + 1, finish(acc[4 * j + 2 * h + 1], row, n0 + jc + 1, sa[h], sb1));
        }
      }
      wg_barrier();
      flush_trans(0, kBN);
      continue;
    }
    // Small tiles with D as is (not swapped), and the wave-fitting tiles: direct stores.
    if constexpr (!kStaged) {
#pragma unroll
      for (int j = 0; j < kBN / 8; ++j) {
        const int col = n0 + 8 * j + 2 * (l % 4);
        const float sb0 = col_scale(col), sb1 = col_scale(col + 1);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = row0 + 8 * h;
          store_pair(row, col, finish(acc[4 * j + 2 * h], row, col, sa[h], sb0),
                     finish(acc[4 * j + 2 * h + 1], row, col + 1, sa[h], sb1));
        }
      }
    }
  }

  if (splits == 1) {
    if (p.tma_store && t == 0) bulk_wait_all();
    return;
  }
  if constexpr (kWave) {
    __trap();  // unreachable: the host plans the wave-fitting tiles persistent (splits = 1)
  } else {

  // Split-K reduction. Both consumer warpgroups must be done reading the stages (their wgmmas
  // completed above) before either overwrites them with its partial: 64 × BN f32 per warpgroup,
  // stored in accumulator order (float4 group j of thread t at (j · 128 + t) · 16 bytes), so the
  // writes and the reads below are consecutive 16-byte words across the warp.
  named_barrier<1, 256>();
  const uint32_t part = base + c * (64 * kBN * 4);
  if (active) {
#pragma unroll
    for (int j = 0; j < kBN / 8; ++j) {
      st_shared_f32x4(part + (j * 128 + t) * 16, acc[4 * j], acc[4 * j + 1], acc[4 * j + 2], acc[4 * j + 3]);
    }
  }
  cluster_sync();  // every partial of the cluster written and visible
  if (active) {
    // CTA `rank` finishes column groups [j0, j1) of the tile: the sum over ranks 0..S-1 in order.
    constexpr int kGroups = kBN / 8;
    const int j0 = static_cast<int>(rank) * kGroups / splits;
    const int j1 = (static_cast<int>(rank) + 1) * kGroups / splits;
    // kChunk column groups at a time, all of their S remote loads issued before the first sum,
    // so a chunk costs one distributed-shared-memory round trip instead of one per load.
    constexpr int kChunk = 4;
    for (int jb = j0; jb < j1; jb += kChunk) {
      float4 v[kChunk][kSm90MaxSplits];
#pragma unroll
      for (int u = 0; u < kChunk; ++u) {
#pragma unroll
        for (int q = 0; q < kSm90MaxSplits; ++q) {
          if (jb + u < j1 && q < splits) {
            v[u][q] = ld_shared_cluster_f32x4(map_shared_rank(part + ((jb + u) * 128 + t) * 16, static_cast<uint32_t>(q)));
          }
        }
      }
#pragma unroll
      for (int u = 0; u < kChunk; ++u) {
        if (jb + u >= j1) break;
        float4 sum = v[u][0];
#pragma unroll
        for (int q = 1; q < kSm90MaxSplits; ++q) {
          if (q < splits) sum.x += v[u][q].x, sum.y += v[u][q].y, sum.z += v[u][q].z, sum.w += v[u][q].w;
        }
        const int col = n0 + 8 * (jb + u) + 2 * (l % 4);
        const float sb0 = col_scale(col), sb1 = col_scale(col + 1);
        if (kSmall && d_trans) {
          const int jc = col - n0;
          stage_trans(r_lo, jc, finish(sum.x, row0, col, sa[0], sb0));
          stage_trans(r_lo, jc + 1, finish(sum.y, row0, col + 1, sa[0], sb1));
          stage_trans(r_lo + 8, jc, finish(sum.z, row0 + 8, col, sa[1], sb0));
          stage_trans(r_lo + 8, jc + 1, finish(sum.w, row0 + 8, col + 1, sa[1], sb1));
          continue;
        }
        store_pair(row0, col, finish(sum.x, row0, col, sa[0], sb0), finish(sum.y, row0, col + 1, sa[0], sb1));
        store_pair(row0 + 8, col, finish(sum.z, row0 + 8, col, sa[1], sb0),
                   finish(sum.w, row0 + 8, col + 1, sa[1], sb1));
      }
    }
    if (kSmall && d_trans) {
      wg_barrier();
      flush_trans(8 * j0, 8 * j1);
    }
  }
  cluster_sync_relaxed();  // no CTA leaves while another still reads its shared memory (its reads are done)
  }
#else
  // Not sm_90a: the host never launches this kernel here (it compiles so that the family's
  // defaults build for every arch).
  __trap();
#endif
}

}  // namespace kjit::fp8
