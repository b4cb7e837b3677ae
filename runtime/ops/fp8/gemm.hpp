#pragma once
/// \file runtime/ops/fp8_gemm.hpp
/// Internals of kjit::fp8::gemm (include/kjit/ops/fp8.hpp): the "fp8.gemm" kernel family, the
/// host-only validation step (layouts, the column-major-D operand swap) and the tile planner,
/// exposed so tests can check every rejection and every plan without a GPU.

#include <kjit/families.hpp>

#include "runtime/families/fp8.hpp"
#include <kjit/ops/fp8.hpp>

#include "fp8/gemm_params.h"
#include "fp8/gemm_sm90_params.h"

#include <cstdint>

namespace kjit::fp8 {

namespace detail {

/// A validated GemmArgs in kernel terms: after the operand swap for a column-major D, `params`
/// describes D' = A' · B'ᵀ with D' row-major.
struct GemmProblem {
  int device = 0;
  int64_t m = 0, n = 0, k = 0;  ///< of the kernel's problem (swapped when `swapped`)
  int fmt_a = 0, fmt_b = 0;     ///< kFormatE4M3 / kFormatE5M2
  bool a_trans = false;         ///< A' stored [K, M] (M contiguous)
  bool b_trans = false;         ///< B' stored [K, N]
  bool out_f32 = false;
  bool block = false;           ///< ScaleMode::kBlockwise
  bool swapped = false;         ///< D was column-major: A' = B, B' = A, scales swapped
  GemmParams params{};          ///< everything but tiles_m / tiles_n
};

/// Checks `args` against the contract in include/kjit/ops/fp8.hpp. Pure host code: no driver
/// call. Throws InvalidArgument "kjit::fp8::gemm: <tensor> <rule>, got <shape dtype>".
GemmProblem validate_gemm(const GemmArgs& args);

/// The device facts the planner needs.
struct GemmDevice {
  int sm = 0;          ///< 10 · major + minor
  int sm_count = 0;
  int smem_optin = 0;  ///< bytes of shared memory a CTA may opt in to
  /// cluster_capacity[s]: how many clusters of s wgmma-kernel CTAs (one CTA per SM) can be
  /// resident at once (cuOccupancyMaxActiveClusters: a GPC whose SM count s does not divide
  /// strands SMs); 0 = unknown, taken as sm_count / s.
  int cluster_capacity[kSm90MaxSplits + 1] = {};
};

/// How a GEMM runs.
struct GemmPlan {
  bool wgmma = false;  ///< the Hopper kernel (gemm_sm90_kernel) instead of gemm_kernel
  int bm = 128, bn = 128, stages = 3;
  int threads = 0;
  int smem_bytes = 0;
  int64_t tiles_m = 0, tiles_n = 0;
  int splits = 1;     ///< wgmma: CTAs (one cluster) per output tile, each over a k-slice
  int cluster_m = 1;  ///< wgmma persistent: 2 = CTA pairs on adjacent tile rows multicast B (forced only)
  /// CTAs launched: wgmma persistent min(tiles, SMs) (pairs: 2 · min(tile pairs, resident
  /// clusters of 2)), split-K tiles · splits; mma.sync tiles.
  int64_t grid = 0;
};

/// Plans a validated GEMM. Throws Unsupported below sm_89 (naming the arch), for a forced kWgmma
/// off sm_90, or when not even two stages of the tile fit `smem_optin`; InvalidArgument for a
/// forced kernel/tile/stage count/split that does not apply (wgmma with blockwise scales or an
/// M- or N-major operand, a 128x256 mma tile, 128x128 with blockwise scales, stages outside
/// 2..4 (mma) / 2..6 (wgmma) or beyond shared memory, splits outside 0..4, above ceil(K/128),
/// or > 1 on the mma.sync kernel, multicast outside 0..2, or 2 with splits > 1 or mma.sync).
/// Host-only.
///   Kernel: wgmma on sm_90 whenever the scales are tensorwise, A and B are K-major and no mma
///   tile is forced (a forced splits > 1 also asks for it); mma.sync otherwise.
///   wgmma tile: the cheaper of 128x256 and 128x128 by ceil(tiles / sm_count) rounds of BM·BN
///   MACs over the relative throughput (2.5 and 2.1). Split-K: when the tiles do not fill half
///   the SMs (M ≤ 128 with N ≲ 8k), BN = 128 and splits = the largest s ≤ min(4, sm_count /
///   tiles, K/256) whose clusters all fit at once (tiles ≤ cluster_capacity[s]; else 1), e.g.
///   M = 64, N = 7168: 56 tiles × 2; M = 128, N = 4096: 32 tiles × 4 (× 3 where only 29
///   clusters of 4 fit, as on H200).
///   mma.sync tile: the same waves model with throughputs mma 128x128: 1, 128x64: 0.9, 64x64:
///   0.75; 128x128 is not a candidate with blockwise scales.
///   Multicast (CTA pairs sharing B): only when forced by `multicast` = 2 (measured slower than
///   unpaired persistent CTAs on the H200, see docs/perf-notes.md).
///   Stages: the deepest that fits smem_optin (wgmma 6..2, mma 4..2).
GemmPlan plan_gemm(const GemmProblem& problem, GemmTile tile, int stages, const GemmDevice& device,
                   GemmKernel kernel = GemmKernel::kAuto, int splits = 0, int multicast = 0);

/// The wgmma kernel's params for a validated problem and a wgmma plan, all but the two TMA
/// descriptors (which need the driver: gemm() encodes them). Host-only.
GemmSm90Params sm90_params(const GemmProblem& problem, const GemmPlan& plan);

/// The family parameters of a problem's specialization under `plan`.
ParamMap gemm_params(const GemmProblem& problem, const GemmPlan& plan);

}  // namespace detail
}  // namespace kjit::fp8
