#pragma once
/// \file runtime/ops/fp8_gemm.hpp
/// Internals of kjit::fp8::gemm (include/kjit/ops/fp8.hpp): the "fp8.gemm" kernel family, the
/// host-only validation step (layouts, the column-major-D operand swap) and the tile planner,
/// exposed so tests can check every rejection and every plan without a GPU.

#include <kjit/families.hpp>
#include <kjit/ops/fp8.hpp>

#include "fp8/gemm_params.h"

#include <cstdint>

namespace kjit::fp8 {

/// The "fp8.gemm" family (kernel_sources/fp8/gemm.cu). Parameters:
///   a, b      e4m3 | e5m2       operand formats
///   out       bf16 | f32
///   scale     tensor | block    ScaleMode::kTensorwise | kBlockwise
///   tile      64x64 | 128x64 | 128x128   CTA tile (M × N); scale=block: 64x64 | 128x64
///   stages    2 | 3 | 4         cp.async pipeline depth
///   a_major   k | m             A stored [M, K] (k) or [K, M] (m)
///   b_major   k | n             B stored [N, K] (k) or [K, N] (n)
/// One kernel per specialization: gemm_kernel<...>. min_sm 89 (mma.sync m16n8k32 e4m3/e5m2).
const Family& gemm_family();

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
};

/// How a GEMM runs.
struct GemmPlan {
  int bm = 128, bn = 128, stages = 3;
  int threads = 0;
  int smem_bytes = 0;
  int64_t tiles_m = 0, tiles_n = 0;
};

/// Plans a validated GEMM. Throws Unsupported below sm_89 (naming the arch) or when not even two
/// stages of the tile fit `smem_optin`; InvalidArgument for a forced stage count outside 2..4 or
/// one that does not fit, or a forced 128×128 tile with blockwise scales. Host-only. Tile (unless
/// forced): 64×64 when M ≤ 64; else the first of 128×128 (tensorwise only), 128×64 whose CTA
/// count reaches sm_count (one full wave); else 64×64. Stages (unless forced): the deepest of
/// 4, 3, 2 that fits smem_optin.
GemmPlan plan_gemm(const GemmProblem& problem, GemmTile tile, int stages, const GemmDevice& device);

/// The family parameters of a problem's specialization under `plan`.
ParamMap gemm_params(const GemmProblem& problem, const GemmPlan& plan);

}  // namespace detail
}  // namespace kjit::fp8
