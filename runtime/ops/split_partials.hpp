#pragma once
/// \file runtime/ops/split_partials.hpp
/// The workspace layout of the split-KV ops (decode, paged decode, SWA decode): each of `rows`
/// output rows (query heads × splits) keeps an f32 partial output of head_dim elements and an f32
/// log-sum-exp, which the merge kernel combines. Layout: o_part [rows, head_dim] f32 at offset 0,
/// then lse_part [rows] f32 at offset `o_bytes`; the total is rounded up to 256 bytes.

#include <cstddef>
#include <cstdint>

namespace kjit::detail {

struct SplitPartials {
  size_t o_bytes = 0;  ///< bytes of o_part, i.e. the offset of lse_part
  size_t bytes = 0;    ///< the workspace the partials need
};

/// The layout for `rows` partial rows of `head_dim` elements (none when rows is 0).
inline SplitPartials split_partials(size_t rows, int64_t head_dim) {
  SplitPartials s;
  s.o_bytes = rows * static_cast<size_t>(head_dim) * sizeof(float);
  s.bytes = s.o_bytes + (rows * sizeof(float) + 255) / 256 * 256;
  return s;
}

/// The tail every split-KV planner ends with, once it has chosen its split count: plan.num_splits
/// = `num_splits`, plan.ctas = `base_ctas` (the CTAs of one split) · num_splits, and for more
/// than one split the partials layout of `query_rows` (output rows of one split, e.g.
/// batch · q_heads) · num_splits rows of `head_dim` in plan.o_part_bytes and
/// plan.workspace_bytes (both 0 for one split). `Plan` is a split-KV op's plan (attention
/// DecodePlan, mla SwaPlan) with those four fields.
template <class Plan>
void set_split_plan(Plan& plan, int64_t num_splits, int64_t base_ctas, int64_t query_rows, int64_t head_dim) {
  plan.num_splits = static_cast<int>(num_splits);
  plan.ctas = base_ctas * plan.num_splits;
  SplitPartials s;
  if (plan.num_splits > 1) {
    s = split_partials(static_cast<size_t>(query_rows) * static_cast<size_t>(plan.num_splits), head_dim);
  }
  plan.o_part_bytes = s.o_bytes;
  plan.workspace_bytes = s.bytes;
}

/// The o_part and lse_part pointers inside `workspace` for a layout whose o_part has `o_bytes`.
inline float* o_part(void* workspace) { return static_cast<float*>(workspace); }
inline float* lse_part(void* workspace, size_t o_bytes) {
  return reinterpret_cast<float*>(static_cast<char*>(workspace) + o_bytes);
}

}  // namespace kjit::detail
