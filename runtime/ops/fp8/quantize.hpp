#pragma once
/// \file runtime/ops/fp8_quantize.hpp
/// Internals of kjit::fp8::quantize (include/kjit/ops/fp8.hpp): the "fp8.quantize" kernel family,
/// the host-only validation step and the launch planner, exposed so tests can check every
/// rejection and plan without a GPU; plus the delayed-scaling update the Linear launches.

#include <kjit/families.hpp>

#include "runtime/families/fp8.hpp"
#include <kjit/ops/fp8.hpp>

#include "fp8/quantize_params.h"

#include <cuda.h>

#include <cstdint>

namespace kjit::fp8 {

namespace detail {

/// The smallest SM (10 · major + minor) the FP8 ops run on: cvt.rn.satfinite.e4m3x2 and
/// mma.sync m16n8k32 with e4m3/e5m2 operands exist from sm_89 (Ada) on.
constexpr int kFp8MinSm = 89;

/// Throws Unsupported "<op>: needs sm_89 or newer (...); device <ordinal> (<name>) is sm_XY"
/// when `sm` < kFp8MinSm. Host-only.
void check_fp8_arch(const char* op, int sm, int device, const char* device_name);

/// A validated QuantizeArgs, in kernel terms.
struct QuantizeProblem {
  int device = 0;
  int64_t rows = 0;
  int64_t cols = 0;
  int in = kInBF16;      ///< kInBF16 / kInF16 / kInF32
  int fmt = kFormatE4M3; ///< kFormatE4M3 / kFormatE5M2
  int granularity = kGranTensor;
  bool dynamic = false;
  bool pow2 = false;
  bool collapse = false;  ///< kTensor with x and y both compact: quantize as one long row
  QuantizeParams params{};  ///< everything but the launch-dependent fields
};

/// Checks `args` against the contract in include/kjit/ops/fp8.hpp. Pure host code: no driver
/// call. Throws InvalidArgument "kjit::fp8::quantize: <tensor> <rule>, got <shape dtype>".
QuantizeProblem validate_quantize(const QuantizeArgs& args);

/// One kernel launch of a plan.
struct QuantizeLaunch {
  int kernel = 0;  ///< index into the specialization's kernels
  uint32_t grid[2] = {1, 1};
  uint32_t block = 1;
};

/// What a quantize runs: optionally a memset of the [1] amax, then one or two kernels.
struct QuantizePlan {
  bool zero_amax = false;
  int launches = 0;
  QuantizeLaunch launch[2];
};

/// Plans a validated quantize for a device with `sm` (10 · major + minor).
/// Throws Unsupported below sm_89. Host-only.
///   tensor: grid = ceil(vectors / (256 · 4)) CTAs of 256 threads, 4 vectors each
///   row:    one CTA per row, threads = vectors per row / kRowCache (8) rounded up to a warp, ≤ 512
///   1×128:  256 threads = 16 groups of 16 (32-bit inputs: 8 of 32), 4 blocks per group
///   128×128: one 256-thread CTA per block, grid (col blocks, row blocks)
QuantizePlan plan_quantize(const QuantizeProblem& problem, int sm);

/// The family parameters of a problem's specialization.
ParamMap quantize_params(int in, int fmt, int granularity, bool pow2);

/// Launches delayed_scaling_kernel<fmt> (one thread) on `stream`, from the kTensor program of
/// input type `in`. Used by Linear.
void launch_delayed_scaling(const DelayedScalingParams& params, int in, int fmt, int device, CUstream stream,
                            Runtime& runtime);

}  // namespace detail
}  // namespace kjit::fp8
