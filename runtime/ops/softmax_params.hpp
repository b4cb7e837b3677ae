#pragma once
/// \file runtime/ops/softmax_params.hpp
/// The Params fields every online-softmax op (the attention decodes and prefills, the MLA SWA
/// decode) fills the same way, whatever its kernel's Params struct: the base-2 softmax scale and
/// the split partials' pointers into the workspace (runtime/ops/split_partials.hpp). Each is a
/// template over the Params struct, which names the field alike in every kernel; nothing here
/// checks (the op's validate did) or allocates.

#include "runtime/ops/split_partials.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>

namespace kjit::detail {

/// The kernels' exp2 scale: `scale` (0: 1 / sqrt(head_dim)) · log2(e).
inline float softmax_scale_log2(float scale, int64_t head_dim) {
  const float s = scale != 0.f ? scale : 1.f / std::sqrt(static_cast<float>(head_dim));
  return s * 1.4426950408889634f;
}

/// p.o_part and p.lse_part inside `workspace` (the split_partials layout whose o_part has
/// `o_part_bytes`) when the plan splits (num_splits > 1); left null otherwise, where the kernel
/// writes out and lse directly.
template <class Params>
void set_split_partials(Params& p, int num_splits, size_t o_part_bytes, void* workspace) {
  if (num_splits <= 1) return;
  p.o_part = o_part(workspace);
  p.lse_part = lse_part(workspace, o_part_bytes);
}

}  // namespace kjit::detail
