#pragma once
/// \file runtime/ops/fp8/quantize.hpp
/// kjit::fp8::quantize (include/kjit/ops/fp8.hpp) as an op of the pipeline
/// (runtime/ops/pipeline.hpp): the pure validate and plan steps (quantize_plan.cc) and the launch
/// value (quantize.cc), exposed so tests check every rejection and plan without a GPU; plus the
/// delayed-scaling update step that fp8::Linear launches from the same program.

#include <kjit/device.hpp>
#include <kjit/ops/fp8.hpp>

#include "fp8/quantize_params.h"
#include "runtime/families/fp8.hpp"
#include "runtime/ops/pipeline.hpp"

#include <cuda.h>

#include <cstddef>
#include <cstdint>

namespace kjit::fp8::detail {

/// A validated QuantizeArgs, in kernel terms.
struct QuantizeDims {
  int device = 0;
  int64_t rows = 0;
  int64_t cols = 0;
  int in = kInBF16;       ///< kInBF16 / kInF16 / kInF32
  int fmt = kFormatE4M3;  ///< kFormatE4M3 / kFormatE5M2
  int granularity = kGranTensor;
  bool dynamic = false;
  bool pow2 = false;
  bool collapse = false;    ///< kTensor with x and y both compact: quantize as one long row
  QuantizeParams params{};  ///< the kernels' Params: every quantize kernel takes the same struct
};

/// One kernel launch of a plan.
struct QuantizeStep {
  int kernel = 0;  ///< index into the program's kernels (runtime/families/fp8.hpp)
  uint32_t grid[2] = {1, 1};
  uint32_t block = 1;
};

/// What a quantize runs: optionally a reset of the [1] amax, then one or two kernels.
struct QuantizePlan {
  kjit::detail::Choice choice;  ///< the fp8.quantize point; no family when there is nothing to launch
  bool zero_amax = false;       ///< per tensor with amax: the kernels reduce into it with atomicMax
  int steps = 0;
  QuantizeStep step[2];  ///< dynamic per tensor: [0] the amax pass, [1] the conversion
};

/// The launch value of a quantize: the amax reset (a stream-ordered memset, not a kernel), then
/// the kernels in order.
struct QuantizeLaunch {
  float* zero_amax = nullptr;
  kjit::detail::Launches<QuantizeParams, QuantizeParams> kernels;
  size_t workspace_bytes = 0;

  void launch(CUstream stream) const;
};

/// kjit::fp8::quantize in the op pipeline.
struct QuantizeOp {
  static constexpr kjit::detail::OpInfo kInfo{"kjit::fp8::quantize", kMinSm, kMinSmNeeds, {&quantize_family}};
  using Args = QuantizeArgs;
  using Dims = QuantizeDims;
  using Plan = QuantizePlan;
  using Launch = QuantizeLaunch;
  /// Every field of Args, for the call memo (runtime/ops/call_memo.hpp).
  static void call_key(const Args& a, kjit::detail::CallKeyWriter& k) {
    k.put_all(a.x, a.y, a.granularity, a.dynamic, a.multiplier, a.multiplier_value, a.amax, a.scale_inv, a.pow2_scale);
  }

  /// Checks `args` against the contract in include/kjit/ops/fp8.hpp and fills the kernels'
  /// Params. Pure host code: no driver call, no allocation unless it throws. Throws
  /// InvalidArgument "kjit::fp8::quantize: <tensor> <rule>, got <shape dtype>".
  static Dims validate(const Args& args);
  /// The launches for a validated quantize; pure. Throws Unsupported below sm_89.
  ///   tensor:  grid = ceil(vectors / (256 · 4)) CTAs of 256 threads, 4 vectors each (dynamic:
  ///            the amax pass, then the conversion, same grid)
  ///   row:     one CTA per row, threads = vectors per row / kRowCache (8) rounded up to a warp, ≤ 512
  ///   1×128:   256 threads = 16 groups of 16 (32-bit inputs: 8 of 32), 4 blocks per group
  ///   128×128: one 256-thread CTA per block, grid (col blocks, row blocks)
  static Plan plan(const Dims& dims, const DeviceInfo& info);
  static Launch build(const Args& args, const Dims& dims, const Plan& plan, const LoadedProgram* program,
                      kjit::detail::Workspace workspace, const DeviceInfo& info);
};

/// The delayed-scaling update, delayed_scaling_kernel<fmt> (kernel [3] of the per-tensor program
/// for input type `in`; one warp, one thread working), loaded in `context`. fp8::Linear launches
/// it after its GEMM, on `stream` (a miss during its capture is CaptureMiss).
kjit::detail::Step<DelayedScalingParams> delayed_scaling_step(const DelayedScalingParams& params, int in, int fmt,
                                                              CUcontext context, Runtime& runtime,
                                                              const CUstream* stream = nullptr);

}  // namespace kjit::fp8::detail
