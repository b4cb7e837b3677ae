#pragma once
/// \file runtime/ops/rotary/rotary.hpp
/// kjit::rotary (include/kjit/ops/rotary.hpp) as an op of the pipeline (runtime/ops/pipeline.hpp):
/// its pure validate, plan and params steps are exposed so tests check every rejection and every
/// plan without a GPU, and benchmarks replay the very same launch through the raw driver.

#include <kjit/device.hpp>
#include <kjit/ops/rotary.hpp>

#include "rotary/rotary_params.h"
#include "runtime/families/rotary.hpp"
#include "runtime/ops/pipeline.hpp"

#include <cstdint>

namespace kjit::detail {

/// What kjit::rotary derives from its arguments.
struct RotaryDims {
  int device = 0;
  int64_t tokens = 0;
  int64_t q_heads = 0;
  int64_t kv_heads = 0;  ///< 0 without k
  int head_dim = 0;
  int rotary_dim = 0;    ///< args.rotary_dim, or head_dim for 0
  RotaryStyle style = RotaryStyle::kNeoX;
  bool positions_i64 = false;
  /// Every output view is its input (in place; the kernels then skip the tail copy).
  bool in_place = true;
  /// The 16-byte vector kernel can run: rotary_dim % 16 == 0 and every q/k/out pointer and
  /// non-unit stride, and the cos/sin pointers, 16-byte aligned.
  bool vector_ok = false;
};

/// How kjit::rotary runs: the specialization, the kernel and the launch shape.
struct RotaryPlan {
  Choice choice;        ///< no family when there is nothing to do (no tokens or no heads)
  bool vector = false;  ///< kernel [1] of the program (scalar) unless true ([0], vector)
  uint32_t grid = 0;    ///< CTAs
  uint32_t block = 0;   ///< threads per CTA
};

struct RotaryOp {
  static constexpr OpInfo kInfo{"kjit::rotary", kRotaryMinSm, "bf16 arithmetic", {&rotary_family}};
  using Args = RotaryArgs;
  using Dims = RotaryDims;
  using Plan = RotaryPlan;
  using Launch = Launches<rope::RotaryParams>;
  /// Every field of Args, for the call memo (runtime/ops/call_memo.hpp).
  static void call_key(const Args& a, CallKeyWriter& k) { k.put_all(a.q, a.k, a.cos, a.sin, a.positions, a.q_out, a.k_out, a.rotary_dim, a.style); }

  /// Checks `args` against the contract in include/kjit/ops/rotary.hpp. Pure host code: no
  /// driver call, no allocation unless it throws. Throws InvalidArgument
  /// "kjit::rotary: <tensor> <rule>, got <shape dtype>" for the first rule broken.
  static Dims validate(const Args& args);
  /// The vector kernel when it can run, one CTA per 16-byte unit group; pure. Throws
  /// InvalidArgument when the grid would exceed one launch.
  static Plan plan(const Dims& dims, const DeviceInfo& info);
  /// The kernel's Params for `args` under `plan`; pure.
  static rope::RotaryParams params(const Args& args, const Dims& dims, const Plan& plan);
  static Launch build(const Args& args, const Dims& dims, const Plan& plan, const LoadedProgram* program,
                      Workspace workspace, const DeviceInfo& info);
};

}  // namespace kjit::detail
