#pragma once
/// \file runtime/ops/fp8/gemm.hpp
/// kjit::fp8::gemm (include/kjit/ops/fp8.hpp) as an op of the pipeline (runtime/ops/pipeline.hpp):
/// validation with the column-major-D operand swap (gemm_validate.cc), the planner (gemm_plan.cc)
/// and the launch value (gemm.cc), exposed so tests check every rejection and every plan
/// without a GPU.
///
/// Two-phase planning. The plan is a pure function of the validated arguments, the device's
/// DeviceInfo and a GemmClusterCapacity. The last is what the occupancy calculator says about
/// clusters of wgmma CTAs, a fact that needs a loaded kernel to ask. So the op's call plans
/// once with the capacities unknown (taken as sm_count / size). When that plan relied on the
/// assumption (gemm_assumed_cluster_size > 0), the op loads the plan's kernel, reads the real
/// capacities (cuOccupancyMaxActiveClusters, queried once per device, kernel and size and
/// cached outside the planner), and plans again with them. The second plan keeps the kernel
/// (capacities only move split-K's split count and the grid of CTA pairs), so nothing new is
/// compiled. GemmOp::refine is that second step; plan → load → refine → build is
/// GemmOp::launch_value.

#include <kjit/device.hpp>
#include <kjit/launch.hpp>
#include <kjit/ops/fp8.hpp>

#include "fp8/gemm_params.h"
#include "fp8/gemm_sm90_params.h"
#include "fp8/quantize_params.h"  // kFormat*, kScaleBlock
#include "runtime/families/fp8.hpp"
#include "runtime/ops/pipeline.hpp"
#include "runtime/ops/tma_map.hpp"

#include <cuda.h>

#include <cstdint>
#include <vector>

namespace kjit::fp8::detail {

/// GemmArgs' planner overrides, as the caller gave them (check_gemm_force checks what needs no
/// device; plan_gemm what the device decides).
struct GemmForce {
  GemmKernel kernel = GemmKernel::kAuto;
  GemmTile tile = GemmTile::kAuto;
  int stages = 0;
  int splits = 0;
  int multicast = 0;
};

/// A validated GemmArgs in kernel terms: after the operand swap for a column-major D, `params`
/// describes D' = A' · B'ᵀ with D' row-major.
struct GemmDims {
  int device = 0;
  int64_t m = 0, n = 0, k = 0;  ///< of the kernel's problem (swapped when `swapped`)
  int fmt_a = 0, fmt_b = 0;     ///< kFormatE4M3 / kFormatE5M2
  bool a_trans = false;         ///< A' stored [K, M] (M contiguous)
  bool b_trans = false;         ///< B' stored [K, N]
  bool out_f32 = false;
  bool block = false;           ///< ScaleMode::kBlockwise
  bool swapped = false;         ///< D was column-major: A' = B, B' = A, scales swapped
  bool a_const = false;         ///< A' is constant: GemmArgs::b_constant with `swapped` (A' = B)
  bool b_const = false;         ///< B' is constant: GemmArgs::b_constant without `swapped`
  GemmParams params{};          ///< everything but tiles_m / tiles_n
  GemmForce force;
};

/// Checks `args` against the contract in include/kjit/ops/fp8.hpp (tensors, layouts, scales,
/// bias, and the overrides' device-free rules: check_gemm_force). Pure host code: no driver
/// call. Throws InvalidArgument "kjit::fp8::gemm: <tensor or argument> <rule>, got <value>".
GemmDims validate_gemm(const GemmArgs& args);

/// The mma.sync kernel's tiles (k64x64, k128x64, k128x128; the wgmma kernel has them too).
inline bool is_mma_tile(GemmTile t) noexcept {
  return t == GemmTile::k64x64 || t == GemmTile::k128x64 || t == GemmTile::k128x128;
}
/// Tiles only the wgmma kernel has: every tile but kAuto and the mma.sync kernel's.
inline bool is_wgmma_only_tile(GemmTile t) noexcept { return t != GemmTile::kAuto && !is_mma_tile(t); }
/// Whether `g` is a problem the wgmma kernel takes: tensorwise scales, A' and B' both K-major.
inline bool is_wgmma_layout(const GemmDims& g) noexcept { return !g.block && !g.a_trans && !g.b_trans; }
/// The override that asks for the wgmma kernel, which alone has it ("the forced tile",
/// "splits > 1", "multicast = 2", "multicast = 3"; for messages), or nullptr when none does.
inline const char* wgmma_only_override(const GemmForce& f) noexcept {
  return is_wgmma_only_tile(f.tile) ? "the forced tile"
         : f.splits > 1             ? "splits > 1"
         : f.multicast == 2         ? "multicast = 2"
         : f.multicast == 3         ? "multicast = 3"
                                    : nullptr;
}
/// Whether the overrides ask for CTA pairs (multicast 2: sharing B; 3: sharing A).
inline bool forces_pairs(const GemmForce& f) noexcept { return f.multicast == 2 || f.multicast == 3; }

/// The rules of the overrides `f` that need no device, for the validated problem `g` (its K and
/// layout): each value in range (kernel, tile, stages 0 or 2..kSm90MaxStages, splits 0..
/// kSm90MaxSplits and at most one per 128-k tile, multicast 0..3) and no pair that excludes each
/// other (split-K with multicast, what only the wgmma kernel has with kMmaSync or a layout it
/// does not take, multicast with a small tile). Throws InvalidArgument "kjit::fp8::gemm:
/// <argument> <rule>". validate_gemm applies it to the caller's overrides and apply_tuned to a
/// stored choice's; plan_gemm then checks only what the device decides (wgmma there, shared
/// memory, the chosen tile's own stage limit).
void check_gemm_force(const GemmForce& f, const GemmDims& g);

/// clusters[s]: how many clusters of s wgmma-kernel CTAs (one CTA per SM) the device holds at
/// once. A GPC whose SM count s does not divide strands SMs, so this can be below sm_count / s
/// (H200: 29 clusters of 4 on 132 SMs). 0 = unknown, taken as sm_count / s.
struct GemmClusterCapacity {
  int clusters[kSm90MaxSplits + 1] = {};
};

/// How a GEMM runs.
struct GemmPlan {
  kjit::detail::Choice choice;  ///< the fp8.gemm point; no family for an empty output
  bool wgmma = false;  ///< the Hopper kernel (gemm_sm90_kernel) instead of gemm_kernel
  /// wgmma small tile with M the smaller side: the kernel runs D'ᵀ = B' · A'ᵀ (A and B, their
  /// formats, scales and M, N exchanged; the bias applies per row) and stores D transposed
  /// (GemmSm90Params::d_trans), so the weight fills the tile's 128- or 64-row side. bm, bn, tiles_m,
  /// tiles_n and the point describe the swapped problem.
  bool swap_ab = false;
  int bm = 128, bn = 128, stages = 3;
  int threads = 0;
  int smem_bytes = 0;  ///< dynamic shared memory, bytes
  int64_t tiles_m = 0, tiles_n = 0;
  int splits = 1;     ///< wgmma: CTAs (one cluster) per output tile, each over a k-slice
  /// wgmma persistent, the cluster's shape in tiles (GemmSm90Params::cluster_m / cluster_n):
  /// 1 × 1, or a CTA pair: cluster_m = 2 on adjacent tile rows multicasting B (multicast 2),
  /// cluster_n = 2 on adjacent tile columns multicasting A (multicast 3, forced only).
  int cluster_m = 1;
  int cluster_n = 1;
  /// CTAs launched: wgmma persistent min(tiles, SMs) (pairs: 2 · min(tile pairs, resident
  /// clusters of 2)), split-K tiles · splits; mma.sync tiles.
  int64_t grid = 0;
  /// The overrides this plan was made under (the caller's, or a tuned choice's): refine plans
  /// again under the same ones.
  GemmForce force;
};

/// Plans a validated GEMM under its overrides (dims.force, which passed check_gemm_force); pure.
/// An empty output (M or N 0) plans nothing. Steps, in order:
///   kernel: wgmma where the target has it (Target::has_wgmma) and the scales are tensorwise,
///     A and B K-major and no mma tile is forced (a forced 128x256 tile, splits > 1 or
///     multicast 2 or 3 asks for it); mma.sync otherwise. Unsupported for a forced wgmma off
///     sm_90a.
///   candidates: the forced tile, else the kernel's tiles: wgmma 128x256 and 128x128 (only
///     128x128 when split-K applies, see below; only 64x128 for CTA pairs at M ≤ 128, see
///     below), and for M or N ≤ 64 (no CTA pairs) the small
///     tile of N side 16, 32 or 64 that covers the smaller side, with the operands swapped
///     when that is M (GemmPlan::swap_ab; the steps below see the swapped problem), of 64 rows
///     when 128-row tiles would fill at most half the SMs (ceil(M/128) · tiles_n · 2 ≤ SMs),
///     else 128; mma.sync
///     64x64, 128x64 and, with tensorwise scales, 128x128 (blockwise 128x128 needs two
///     accumulator sets: no register fit).
///   choice: the cheapest by ceil(tiles / sm_count) waves of BM·BN MACs over the relative
///     throughput (wgmma 128x256 2.5, 128x128 2.1; mma 128x128 1, 128x64 0.9, 64x64 0.75); the
///     first listed wins a tie. Split-K (wgmma, splits 0): when the tiles do not fill half the
///     SMs (M ≤ 128 with N ≲ 8k) and K has ≥ 2 128-k tiles, BN = 128 (or the small tile) and
///     splits = the largest s ≤ min(4, sm_count / tiles, K / (128 · 16)) whose clusters all
///     fit at once (tiles ≤ capacity.clusters[s]; else 1), e.g. M = 128, N = 7168, K = 2048:
///     56 tiles × 1; M = 1 there: 112 tiles (64 × 16) × 1; M = 128, N = 4096, K = 7168: 32
///     tiles × 3; M = 1 there: 64 tiles (64 × 16) × 2. A forced split count is taken as
///     it is. CTA pairs sharing B (multicast): forced, or for 64 < M ≤ 128 when
///     2 · ceil(N / 128) CTAs fill more than half and at most all the SMs and K has at most 64
///     128-k tiles (no split-K then): 64x128 tiles, the pair on the two 64-row halves of M (e.g.
///     M = 128, N = 8192, K = 8192: 128 CTAs; N = 7168, K = 2048: 112). Measured where pairs
///     win and lose: choose_pairs in gemm_plan.cc, docs/perf-notes.md R78a. CTA pairs sharing A
///     (multicast 3, GemmPlan::cluster_n = 2): forced only, over the tile the steps above choose
///     among the large and wave-fitting ones (no split-K, no small tile); the grid is
///     2 · min(ceil(tiles_n / 2) · tiles_m, resident clusters of 2).
///   fit: the forced stage count (2..4 mma, 2..8 wgmma, 2..12 wgmma small tiles; InvalidArgument above the tile's or beyond
///     max_smem_per_block_optin), else the deepest that fits, at most 6 for the wgmma staged and wave-fitting tiles and 8
///     for the small ones (Unsupported when two do not).
/// Throws Unsupported below sm_89 (naming the arch).
GemmPlan plan_gemm(const GemmDims& dims, const DeviceInfo& info, const GemmClusterCapacity& capacity = {});

/// The largest cluster size whose capacity `plan` took as sm_count / size instead of knowing it
/// (auto split-K, CTA pairs), or 0: the sizes 2..that to query before planning again.
int gemm_assumed_cluster_size(const GemmPlan& plan, const GemmForce& force);

/// A CTA tile's M × N.
struct GemmTileShape {
  int bm = 0, bn = 0;
};
/// The M × N of `tile` (0 × 0 for kAuto or a value outside the enum) and the GemmTile of an
/// M × N (kAuto for none), read from the fp8.gemm family's `tile` values (names.cc).
GemmTileShape gemm_tile_shape(GemmTile tile);
GemmTile gemm_tile_of(int bm, int bn);

/// Whether a small wgmma tile (BN 16/32/64) runs `dims` with the operands swapped: when M is the
/// smaller side, so that it lands on the tile's small side (GemmPlan::swap_ab). The one rule the
/// planner and the tuner's point matching share.
inline bool small_tile_swaps(const GemmDims& dims) { return dims.m < dims.n; }

/// The launch shape of `plan` on `info`'s device, all but the stream: grid, CTA, dynamic shared
/// memory, the cluster (split-K's S CTAs, or the CTA pairs) and, for the wgmma kernel on a target
/// with programmatic dependent launch (Target::has_pdl), overlap_previous (the kernel waits for
/// the previous grid before it reads A or the scales or writes D). The mma.sync kernel does not
/// wait, so it never overlaps. Pure.
LaunchConfig gemm_launch_config(const GemmPlan& plan, const DeviceInfo& info);

/// The mma.sync kernel's Params for a validated problem under `plan`; pure.
GemmParams mma_params(const GemmDims& dims, const GemmPlan& plan);
/// The wgmma kernel's Params for a validated problem under a wgmma plan, all but the TMA
/// descriptors (which need the driver: GemmOp::build takes them from tma_map); pure.
GemmSm90Params sm90_params(const GemmDims& dims, const GemmPlan& plan);
/// sm90_params written into zero-initialized `*p` (a fresh Step's): build's way, which writes
/// the Params once instead of building them and copying them over.
void fill_sm90_params(const GemmDims& dims, const GemmPlan& plan, GemmSm90Params* p);

/// The arguments of the TMA map of a K-major fp8 operand [rows, k] at `base` (row stride `ld`
/// bytes) for boxes of 128 k × `box_rows` rows with the 128-byte swizzle the wgmma kernel's
/// descriptors expect; out-of-bounds elements read as zero. Pure: the key of tma_map.
kjit::detail::TmaMapKey operand_tma_map_key(const void* base, int64_t k, int64_t rows, int64_t ld, int box_rows);
/// The arguments of the TMA map of D [rows, cols] at `base` (bf16, or f32 when `f32`; row stride
/// `ld` elements) for boxes of 128 bytes of columns × 64 rows with the 128-byte swizzle of the
/// wgmma kernel's staging tile. Pure: the key of tma_map.
kjit::detail::TmaMapKey output_tma_map_key(const void* base, bool f32, int64_t cols, int64_t rows, int64_t ld);

/// kjit::fp8::gemm in the op pipeline (see the file comment for its two planning phases).
struct GemmOp {
  static constexpr kjit::detail::OpInfo kInfo{"kjit::fp8::gemm", kMinSm, kMinSmNeeds, {&gemm_family}};
  using Args = GemmArgs;
  using Dims = GemmDims;
  using Plan = GemmPlan;
  /// One of the two steps has a kernel: [0] mma.sync, [1] wgmma.
  using Launch = kjit::detail::Launches<GemmParams, GemmSm90Params>;
  /// Every field of Args, for the call memo (runtime/ops/call_memo.hpp).
  static void call_key(const Args& a, kjit::detail::CallKeyWriter& k) {
    k.put_all(a.a, a.b, a.d, a.scale_a, a.scale_b, a.scale_mode, a.bias, a.kernel, a.tile, a.stages, a.splits, a.multicast,
              a.b_constant);
  }

  static Dims validate(const Args& args) { return validate_gemm(args); }
  /// The first phase: plan_gemm with the cluster capacities unknown.
  static Plan plan(const Dims& dims, const DeviceInfo& info) { return plan_gemm(dims, info); }
  /// The second phase: `plan` again with the capacities of `program`'s kernel on the device
  /// (queried on first use, then cached), when `plan` assumed any; else `plan`. Same kernel.
  static Plan refine(const Dims& dims, const Plan& plan, const LoadedProgram& program, const DeviceInfo& info);
  /// The launch value; on the wgmma path it takes the TMA maps of A, B and (TMA stores) D from
  /// the thread's memo (tma_map), encoding them on a miss (host-only driver calls, no allocation).
  static Launch build(const Args& args, const Dims& dims, const Plan& plan, const LoadedProgram* program,
                      kjit::detail::Workspace workspace, const DeviceInfo& info);
  /// plan, load, refine, build: what gemm() launches. `forced` replaces the first plan (checked
  /// as the pipeline checks a forced plan) and is not refined.
  /// `stream`: the launch stream when known (a miss during its capture is CaptureMiss).
  static Launch launch_value(const Args& args, Runtime& runtime, const Plan* forced = nullptr,
                             const CUstream* stream = nullptr);
  /// The unforced launch value as the call memo stores it: validate, open the device, read its
  /// tuning table (before planning: a table installed meanwhile makes the next call plan again),
  /// plan through the per-thread plan memo, build. What gemm() runs on a call-memo miss.
  static kjit::detail::CallEntry<Launch> call(const Args& args, Runtime& runtime, const CUstream* stream = nullptr);

  // Tuning (runtime/ops/tuned.hpp; gemm_tune.cc). The choice's point fixes the kernel, tile and
  // stages; knobs: splits (wgmma split-K CTAs per tile, 1..4) and multicast (1, 2 = CTA pairs
  // sharing B, 3 = sharing A: a stored 3 is applied, but tune_candidates does not offer it yet).
  // Bucket: M rounded up to a power of two, N and K exact, the formats and layouts (after the
  // column-major-D swap). A call with any override set is not tuned.
  static const kjit::detail::TuneOpSpec& tune_spec();
  static bool tune_key(const Dims& dims, kjit::detail::TunedKey* key);
  static bool apply_tuned(const Dims& dims, const DeviceInfo& info, const kjit::detail::TunedChoice& choice, Plan* plan);
  static kjit::detail::TunedChoice tuned_choice(const Dims& dims, const Plan& plan);
  static std::vector<kjit::detail::TunedChoice> tune_candidates(const Dims& dims, const DeviceInfo& info);
  /// The overrides (GemmArgs::kernel, tile, stages, splits, multicast) that make the planner take
  /// `choice`: how the tuner runs a candidate through the public op.
  static GemmForce force_of(const kjit::detail::TunedChoice& choice);
};

}  // namespace kjit::fp8::detail
