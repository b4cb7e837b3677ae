#pragma once
/// \file runtime/ops/rotary.hpp
/// Internals of kjit::rotary (include/kjit/ops/rotary.hpp): the "rotary" kernel family and the
/// host-only validation step, exposed so tests can check every rejection without a GPU.

#include <kjit/families.hpp>
#include <kjit/launch.hpp>
#include <kjit/ops/rotary.hpp>

#include "rotary/rotary_params.h"

#include <cstdint>

namespace kjit {

/// The "rotary" family (kernel_sources/rotary/rotary.cu). Parameters:
///   style     neox | gptj
///   head_dim  32 | 64 | 80 | 96 | 128 | 160 | 192 | 256 | 512
///   pos       i32 | i64   (dtype of the positions tensor)
/// Each specialization is one program with two kernels: [0] the 16-byte vector kernel,
/// [1] the scalar fallback. min_sm 80 (bf16x2 conversions; one floor keeps the family simple).
const Family& rotary_family();

namespace detail {

/// Head dims the family is specialized for (the `head_dim` parameter's values).
inline constexpr int kRotaryHeadDims[] = {32, 64, 80, 96, 128, 160, 192, 256, 512};

/// Everything kjit::rotary derives from its arguments before touching the driver: the
/// specialization, the kernel (vector or scalar), the launch shape and the filled Params.
struct RotaryPlan {
  rope::RotaryParams params{};
  int device = 0;
  int head_dim = 0;
  RotaryStyle style = RotaryStyle::kNeoX;
  bool positions_i64 = false;
  /// True: the 16-byte vector kernel (rotary_dim % 16 == 0 and every q/k/out pointer and
  /// non-unit stride, and the cos/sin pointers, 16-byte aligned); false: the scalar kernel.
  bool vector = false;
  bool in_place = true;
  uint32_t grid = 0;  ///< CTAs; 0 when there is nothing to do (no tokens or no heads)
  uint32_t block = 0;
};

/// Checks `args` against the contract in include/kjit/ops/rotary.hpp and plans the launch.
/// Pure host code: no driver call, no allocation unless it throws. Throws InvalidArgument
/// "kjit::rotary: <tensor> <rule>, got <shape dtype>" for the first rule broken.
RotaryPlan validate_rotary(const RotaryArgs& args);

/// One launch of kjit::rotary, ready to go: what rotary() does minus the launch itself (so a
/// benchmark can replay the very same launch through the raw driver).
struct RotaryLaunch {
  const Kernel* kernel = nullptr;  ///< nullptr when there is nothing to launch
  LaunchConfig config;             ///< grid and block; stream left null
  rope::RotaryParams params{};
};

/// validate_rotary, then the device's context and arch check (Unsupported below sm_80), then the
/// op's kernel table (compiling or loading the specialization on first use). Same errors as
/// kjit::rotary.
RotaryLaunch plan_rotary(const RotaryArgs& args, Runtime& runtime);

}  // namespace detail
}  // namespace kjit
