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

/// The o_part and lse_part pointers inside `workspace` for a layout whose o_part has `o_bytes`.
inline float* o_part(void* workspace) { return static_cast<float*>(workspace); }
inline float* lse_part(void* workspace, size_t o_bytes) {
  return reinterpret_cast<float*>(static_cast<char*>(workspace) + o_bytes);
}

}  // namespace kjit::detail
