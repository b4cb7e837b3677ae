// kjit::fp8::gemm, the planner: overrides → kernel → tile candidates → choice (tile, split-K)
// → resource fit (pipeline stages in shared memory) → schedule (tiles, grid, clusters). Pure:
// it reads the validated problem, DeviceInfo and the cluster capacities it is given.
#include "runtime/ops/fp8/gemm.hpp"

#include <kjit/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <climits>

namespace kjit::fp8::detail {
namespace {

using kjit::detail::ceil_div;
using kjit::detail::fail;

constexpr const char* kOp = GemmOp::kInfo.name;

/// The wgmma kernel's small tiles' N side (16, 32 or 64), or 0 for another tile. k64x64 and
/// k128x64 are small tiles only on the wgmma kernel (the callers ask only there).
int small_tile_bn(GemmTile t) {
  const int bn = gemm_tile_shape(t).bn;
  return sm90_small_tile(bn) ? bn : 0;
}

/// Whether tiles of bm × bn over `g` fill at most half the SMs: what split-K and the 64-row
/// small tiles are for.
bool fills_half_the_sms(const GemmDims& g, int bm, int bn, int sm_count) {
  return ceil_div(g.m, int64_t{bm}) * ceil_div(g.n, int64_t{bn}) * 2 <= sm_count;
}

/// The small tile's N side for a problem whose smaller side is `side` (≤ 64).
int small_bn_for(int64_t side) { return side <= 16 ? 16 : side <= 32 ? 32 : 64; }

/// The N side of the wgmma tile of a problem with N ≤ 64 (after the small-M swap) under the
/// overrides: the forced small tile's, else the small tile that covers N (no CTA pairs); 0 for
/// the large tiles.
int wgmma_small_bn(const GemmDims& g) {
  if (const int forced = small_tile_bn(g.force.tile)) return forced;
  if (g.force.tile != GemmTile::kAuto || forces_pairs(g.force) || g.n > 64) return 0;
  return small_bn_for(g.n);
}

/// True for the wgmma kernel: wherever it can run (persistent for large problems, split-K for
/// small M: both beat the mma.sync tiles on Hopper) unless an mma tile is forced. The overrides
/// passed check_gemm_force (validate_gemm): only what the device decides is left to check.
bool choose_wgmma(const GemmDims& g, const DeviceInfo& info) {
  const GemmForce& f = g.force;
  const bool has_wgmma = info.target().has_wgmma();
  switch (f.kernel) {
    case GemmKernel::kWgmma:
      if (!has_wgmma) {
        throw Unsupported(fmt::format("{}: the wgmma kernel needs sm_90a (Hopper); the device is sm_{}", kOp, info.sm()));
      }
      return true;
    case GemmKernel::kMmaSync: return false;
    default: {  // kAuto
      const char* asked = wgmma_only_override(f);
      if (asked != nullptr && !has_wgmma) {
        throw Unsupported(fmt::format("{}: {} is the wgmma kernel's, which needs sm_90a; the device is sm_{}", kOp,
                                      asked, info.sm()));
      }
      return asked != nullptr || (has_wgmma && is_wgmma_layout(g) && !is_mma_tile(f.tile));
    }
  }
}

/// The fewest 128-k tiles a split-K slice keeps: a split costs a cluster launch and the
/// reduction (2–3 µs on the H200), which a slice must outweigh. Measured (bench_fp8.py, H200):
/// with K = 2048 (16 k-tiles) 128x128 tiles ran 14.6 µs unsplit and 16.7 µs over 2 splits at
/// M = 128, N = 7168, the small tiles 12.8 and 13.1 µs at M = 1; with K = 7168 (56) both gain
/// from 2 or 3 splits (small tiles at M = 1: 25.7 → 19.3 µs).
constexpr int kMinKtilesPerSplit = 16;

/// Split-K (wgmma, splits not forced, no pairs) pays when the output tiles (bm × bn: 128 × 128
/// for the large tiles) leave more than half the SMs idle (small M): the k-slices of a tile then
/// run on `splits` SMs, so all SMs stream the large operand (most of the bytes). Only where K
/// has k-tiles for two slices of kMinKtilesPerSplit: otherwise the tile is chosen as for any
/// other problem (choose_splits would keep one slice).
bool split_k_applies(const GemmDims& g, bool pairs, int bm, int bn, int sm_count) {
  const bool wave_forced = sm90_wave_tile(gemm_tile_shape(g.force.tile).bn);  // persistent only
  return g.force.splits == 0 && !pairs && !wave_forced && fills_half_the_sms(g, bm, bn, sm_count) &&
         ceil_div(g.k, 128) >= 2 * kMinKtilesPerSplit;
}

/// The most 128-k tiles for which the planner pairs 64-row tiles (choose_pairs).
constexpr int kPairMaxKtiles = 64;

/// Whether the wgmma kernel's CTAs go in pairs on adjacent tile rows that share each B (weight)
/// tile, each loading half and multicasting it to both (GemmPlan::cluster_m = 2): forced, or
/// unforced for one 128-row tile row (64 < M ≤ 128) split into the pair's two 64-row halves,
/// where that makes between half and all the SMs' worth of CTAs (2 · ceil(N / 128)) over at most
/// kPairMaxKtiles k-tiles. Measured (R78a, H100, in a graph, µs, plan before → 64x128 pairs):
/// 8192 × 8192 32.4 (split-K 2) → 30.3, 7168 × 2048 10.5 (56 CTAs) → 10.2; not paired because
/// they lost: K = 28672 90.3 → 99.8 (a pair's CTA takes in 24 KB a k-tile against split-K's 16
/// per k-slice), N = 4096 (64 CTAs) 19.7 → 22.1, N = 10240 and 57344 (more than a wave; the
/// wave-fitting tiles 36.3 → 50.5, 177 → 193). At M = 256, pairs of 128-row tiles ran level
/// (8192 × 8192: 36.5 against 36.8) or at most 3% ahead (8192 × 28672) and lost on the other
/// shapes, so the planner does not pair them.
bool choose_pairs(const GemmDims& g, const DeviceInfo& info) {
  if (g.force.multicast != 0) return g.force.multicast == 2;  // 3 pairs on A instead (forced only)
  if (g.force.splits > 1 || g.force.tile != GemmTile::kAuto || !info.target().has_clusters()) return false;
  const int64_t pair_ctas = 2 * ceil_div(g.n, int64_t{128});
  return g.m > 64 && g.m <= kSm90BM && ceil_div(g.k, int64_t{128}) <= kPairMaxKtiles && 2 * pair_ctas > info.sm_count &&
         pair_ctas <= info.sm_count;
}

/// The M side of the small wgmma tile of N side `bn` (a problem with N ≤ 64, after the swap):
/// the forced tile's, else 64 when 128-row tiles would leave more than half the SMs idle (M = 1,
/// N = 7168, K = 2048: 112 CTAs of 64 rows instead of 56 of 128, as cuBLASLt's 64 × 16 tile).
/// One SM takes in about 30 bytes a cycle through TMA (measured on the H200: an L2-resident
/// weight streamed no faster than one from DRAM), so more CTAs stream more; measured, the M ≤ 64
/// shapes of bench_fp8.py ran level (within 0.1 µs) or up to 1.2 µs faster with 64 rows.
int small_tile_rows(const GemmDims& g, int bn, int sm_count) {
  if (g.force.tile != GemmTile::kAuto) return gemm_tile_shape(g.force.tile).bm;
  return fills_half_the_sms(g, kSm90BM, bn, sm_count) ? 64 : 128;
}

using Tile = GemmTileShape;

/// How many N sides sm90_wave_tile admits (wgmma's N is a multiple of 8, at most 256).
constexpr int count_wave_tiles() {
  int n = 0;
  for (int bn = 8; bn <= 256; bn += 8) n += sm90_wave_tile(bn) ? 1 : 0;
  return n;
}
/// The fewest 128-k tiles for which the planner weighs the wave-fitting tiles. Measured (R76c,
/// H100, in a graph): with K = 8192 (64 k-tiles) 128x160 ran N = 10240, M = 256 in 43.8 µs against
/// 58.1 with 128x256 and 128x224 gate/up in 235.5 against 252.4; with K = 2048 (16 k-tiles) at
/// N = 7168 128x80 and 128x112 lost to 128x128 (11.8 / 13.7 against 10.9 / 11.7 µs at M = 128 /
/// 256): a short k-loop leaves too little mainloop to cover the tiles' direct-store epilogue.
constexpr int kWaveTileMinKtiles = 32;
/// Most tiles a plan weighs: the two staged tiles and the wave-fitting ones.
constexpr int kMaxCandidates = 2 + count_wave_tiles();

/// The tiles the plan may take, in the order that wins a cost tie. Returns their count.
int tile_candidates(const GemmDims& g, bool wgmma, bool split_k, bool pairs, int small_bm, Tile out[kMaxCandidates]) {
  if (g.force.tile != GemmTile::kAuto) {
    out[0] = gemm_tile_shape(g.force.tile);  // k64x64 and k128x64 on the wgmma kernel: small tiles
    return 1;
  }
  if (wgmma) {
    // A problem with N ≤ 64 (after the small-M swap): the small tile that covers N.
    if (const int bn = wgmma_small_bn(g)) {
      out[0] = {small_bm, bn};
      return 1;
    }
    // Split-K keeps BN = 128: more, smaller tiles leave more SMs to the k-slices.
    if (split_k) {
      out[0] = {kSm90BM, 128};
      return 1;
    }
    // CTA pairs over one 128-row tile row (M ≤ 128) take its two 64-row halves, 128 weight rows
    // a pair (the tile choose_pairs measured; the others are forced only).
    if (pairs && g.m <= kSm90BM) {
      out[0] = {64, 128};
      return 1;
    }
    out[0] = {kSm90BM, 256};
    out[1] = {kSm90BM, 128};
    int count = 2;
    // At M ≤ 256 the tiles are few (one or two rows of them) and their count against the SMs
    // decides: a weight-side height that is not a power of two can make whole waves (the
    // layer's QKV, N = 10240: 128 tiles of 80 against 80 of 128), where K is long enough.
    if (g.m <= kSm90WaveTileMaxM && ceil_div(g.k, 128) >= kWaveTileMinKtiles && g.force.splits <= 1) {
      // Widest first: the order that wins a cost tie.
      for (int bn = 256; bn >= 8; bn -= 8) {
        if (sm90_wave_tile(bn)) out[count++] = {kSm90BM, bn};
      }
    }
    return count;
  }
  out[0] = {64, 64};
  out[1] = {128, 64};
  if (g.block) return 2;
  out[2] = {128, 128};
  return 3;
}

/// Relative time of a tile: the busiest SM runs ceil(CTAs / SMs) tiles one after another (an
/// SM's tensor throughput is shared by its resident CTAs, so co-residency hides latency but adds
/// no throughput), each costing its MACs over the kernel's relative throughput. The throughputs
/// are estimates (wgmma ≈ 2.5× mma.sync per SM on Hopper; small tiles lose to shared-memory
/// traffic and per-tile overhead), to be refined from bench_fp8.py measurements.
double tile_cost(const GemmDims& g, Tile t, bool wgmma, int sm_count) {
  double rate = 1.0;
  if (wgmma) {
    // wgmma reads the 64-row A slice from shared memory once per instruction whatever its N, so
    // narrower tiles spend more shared-memory bandwidth per MAC: 256 > 192..224 > 128..160 > 80..112.
    rate = t.bn == 256 ? 2.5 : t.bn >= 192 ? 2.5 * 0.9 : t.bn >= 128 ? 2.5 * 0.85 : 2.5 * 0.85 * 0.9;
  } else {
    rate = t.bm == 128 && t.bn == 128 ? 1.0 : t.bm == 128 ? 0.9 : 0.75;
  }
  const int64_t ctas = ceil_div(g.m, t.bm) * ceil_div(g.n, t.bn);
  const int64_t waves = ceil_div(ctas, std::max(sm_count, 1));
  return static_cast<double>(waves) * t.bm * t.bn / rate;
}

int capacity_of(const GemmClusterCapacity& c, int size, int sm_count) {
  return c.clusters[size] > 0 ? c.clusters[size] : std::max(sm_count / size, 1);
}

/// CTAs per output tile: the forced count, or under split_k the largest that leaves each slice
/// kMinKtilesPerSplit k-tiles and whose clusters are all resident at once (a cluster that is not
/// runs in a second wave), else 1.
int choose_splits(const GemmDims& g, int64_t tiles, bool split_k, const DeviceInfo& info,
                  const GemmClusterCapacity& capacity) {
  const int64_t ktiles = ceil_div(g.k, 128);
  if (g.force.splits != 0) return g.force.splits;  // at most ktiles (check_gemm_force)
  if (!split_k) return 1;
  const int64_t by_k = ktiles / kMinKtilesPerSplit;
  for (int64_t s = std::min<int64_t>({kSm90MaxSplits, info.sm_count / tiles, by_k}); s >= 2; --s) {
    if (tiles <= capacity_of(capacity, static_cast<int>(s), info.sm_count)) return static_cast<int>(s);
  }
  return 1;
}

/// The small wgmma tiles' planned ring depth. Measured on the H200 (M = 1, N·K 7168·2048 and
/// 4096·7168, 2 to 12 stages, two runs): 8 never lost to 12 (0.4–1.0 µs ahead in one run, level
/// in the other) with less shared memory, and led 4 by 1–10 µs; past 8 nothing more streams.
constexpr int kSm90SmallTileStages = 8;

/// Threads, pipeline stages and dynamic shared memory of a tile: the forced stage count when it
/// is in the kernel's range and fits, else the deepest that fits the device's opt-in shared
/// memory per block (the small wgmma tiles: at most kSm90SmallTileStages).
void fit_stages(const GemmDims& g, bool wgmma, const DeviceInfo& info, GemmPlan& plan) {
  const int optin = info.max_smem_per_block_optin;
  const GemmLaunchShape shape = gemm_launch_shape(plan.bm, plan.bn, g.block);
  const int max_stages = !wgmma ? 4 : sm90_small_tile(plan.bn) ? kSm90MaxStages : kSm90LargeTileMaxStages;
  auto smem = [&](int stages) {
    return wgmma ? sm90_smem_bytes(plan.bm, plan.bn, stages) : stages * shape.stage_bytes;
  };
  const char* kind = wgmma ? " wgmma" : "";
  plan.threads = wgmma ? kSm90Threads : shape.threads;
  plan.stages = 0;
  if (g.force.stages != 0) {
    if (g.force.stages < 2 || g.force.stages > max_stages) {
      fail(kOp, fmt::format("stages must be 0 (auto) or 2..{} for the {} kernel's {}x{} tile, got {}", max_stages,
                            wgmma ? "wgmma" : "mma.sync", plan.bm, plan.bn, g.force.stages));
    }
    if (smem(g.force.stages) > optin) {
      fail(kOp, fmt::format("stages = {} of a {}x{}{} tile need {} bytes of shared memory, the device allows {}",
                            g.force.stages, plan.bm, plan.bn, kind, smem(g.force.stages), optin));
    }
    plan.stages = g.force.stages;
  } else {
    const int deepest = !wgmma ? max_stages : sm90_small_tile(plan.bn) ? kSm90SmallTileStages : kSm90LargeTileStages;
    for (int s = deepest; s >= 2 && plan.stages == 0; --s) {
      if (smem(s) <= optin) plan.stages = s;
    }
    if (plan.stages == 0) {
      throw Unsupported(fmt::format("{}: two stages of a {}x{}{} tile need {} bytes of shared memory, the device "
                                    "allows {}",
                                    kOp, plan.bm, plan.bn, kind, smem(2), optin));
    }
  }
  plan.smem_bytes = smem(plan.stages);
}

/// Whether the wgmma kernel swaps the operands (see GemmPlan::swap_ab): a small tile (forced, or
/// the planner's for M or N ≤ 64) with M the smaller side.
bool choose_swap(const GemmDims& g) {
  const bool forced_small = small_tile_bn(g.force.tile) != 0;
  if (g.force.tile != GemmTile::kAuto && !forced_small) return false;
  if (forces_pairs(g.force)) return false;  // never with a small tile (check_gemm_force)
  if (!forced_small && std::min(g.m, g.n) > 64) return false;  // (and so never with auto pairs)
  return small_tile_swaps(g);
}

}  // namespace

GemmPlan plan_gemm(const GemmDims& dims, const DeviceInfo& info, const GemmClusterCapacity& capacity) {
  kjit::detail::check_arch(kOp, info, dims.device, GemmOp::kInfo.min_sm, GemmOp::kInfo.needs);
  GemmPlan plan;
  plan.force = dims.force;
  if (dims.m == 0 || dims.n == 0) return plan;
  plan.wgmma = choose_wgmma(dims, info);
  // The kernel's problem: the swapped one when the small side is M.
  plan.swap_ab = plan.wgmma && choose_swap(dims);
  GemmDims g = dims;
  if (plan.swap_ab) {
    std::swap(g.m, g.n);
    std::swap(g.fmt_a, g.fmt_b);
  }

  const int small_bn = plan.wgmma ? wgmma_small_bn(g) : 0;
  const int small_bm = small_bn != 0 ? small_tile_rows(g, small_bn, info.sm_count) : 0;
  const Tile split_tile = small_bn != 0 ? Tile{small_bm, small_bn} : Tile{kSm90BM, 128};
  const bool pairs = plan.wgmma && small_bn == 0 && choose_pairs(g, info);
  // CTA pairs sharing A (adjacent tile columns): forced only, over the tile chosen as unpaired.
  // An experiment beside cuBLASLt's 1x2 clusters; the planner never picks it.
  const bool a_pairs = plan.wgmma && small_bn == 0 && g.force.multicast == 3;
  const bool split_k =
      plan.wgmma && split_k_applies(g, pairs || a_pairs, split_tile.bm, split_tile.bn, info.sm_count);
  Tile candidates[kMaxCandidates];
  const int count = tile_candidates(g, plan.wgmma, split_k, pairs, small_bm, candidates);
  Tile best = candidates[0];
  for (int i = 1; i < count; ++i) {
    if (tile_cost(g, candidates[i], plan.wgmma, info.sm_count) < tile_cost(g, best, plan.wgmma, info.sm_count)) {
      best = candidates[i];
    }
  }
  plan.bm = best.bm;
  plan.bn = best.bn;
  plan.tiles_m = ceil_div(g.m, plan.bm);
  plan.tiles_n = ceil_div(g.n, plan.bn);
  const int64_t tiles = plan.tiles_m * plan.tiles_n;
  if (plan.wgmma) plan.splits = choose_splits(g, tiles, split_k, info, capacity);

  fit_stages(g, plan.wgmma, info, plan);

  // Half the int32 range: the persistent kernel's tile index runs up to tiles + grid.
  if (tiles * plan.splits > INT32_MAX / 2) {
    fail(kOp, fmt::format("{} x {} tiles exceed one launch", plan.tiles_m, plan.tiles_n));
  }
  if (!plan.wgmma) {
    plan.grid = tiles;
  } else if (plan.splits > 1) {
    plan.grid = tiles * plan.splits;
  } else if (pairs || a_pairs) {
    plan.cluster_m = pairs ? 2 : 1;
    plan.cluster_n = a_pairs ? 2 : 1;
    const int64_t pair_count =
        ceil_div(plan.tiles_m, int64_t{plan.cluster_m}) * ceil_div(plan.tiles_n, int64_t{plan.cluster_n});
    plan.grid = 2 * std::min<int64_t>(pair_count, capacity_of(capacity, 2, info.sm_count));
  } else {
    plan.grid = std::min<int64_t>(tiles, std::max(info.sm_count, 1));
  }

  plan.choice.family = &gemm_family();
  plan.choice.point = gemm_family().point({plan.wgmma ? 1 : 0, g.fmt_a, g.fmt_b, g.out_f32 ? 1 : 0, g.block ? 1 : 0,
                                           gemm_tile_code(plan.bm, plan.bn), plan.stages, g.a_trans ? 1 : 0,
                                           g.b_trans ? 1 : 0});
  return plan;
}

int gemm_assumed_cluster_size(const GemmPlan& plan, const GemmForce& force) {
  if (!plan.wgmma) return 0;
  const int pair = plan.cluster_m * plan.cluster_n;
  if ((plan.splits > 1 && force.splits == 0) || pair > 1) return std::max(plan.splits, pair);
  return 0;
}

}  // namespace kjit::fp8::detail
