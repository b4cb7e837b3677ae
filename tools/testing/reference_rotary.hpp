#pragma once
/// \file reference_rotary.hpp
/// Float64 reference of kjit::rotary (include/kjit/ops/rotary.hpp) and the helpers its tests,
/// `kjit selftest` and benchmarks share: RoPE tables, strided bf16 gathers and a bf16 ulp metric.

#include <kjit/ops/rotary.hpp>

#include <cstdint>
#include <vector>

namespace kjit::testing {

/// RoPE tables as models build them: cos/sin[p, i] = cos/sin(p · theta^(−2i / rotary_dim)),
/// computed in double and rounded to f32. Each is [max_position, rotary_dim / 2], row-major.
struct RopeTables {
  std::vector<float> cos;
  std::vector<float> sin;
};
RopeTables rope_tables(int64_t max_position, int rotary_dim, double theta = 10000.0);

/// A bf16 [tokens, heads, head_dim] view into `buffer` (bf16 bits), strides in elements, last dim
/// contiguous, as a compact row-major copy.
std::vector<uint16_t> gather_heads(const std::vector<uint16_t>& buffer, int64_t offset,
                                   int64_t tokens, int64_t heads, int64_t head_dim,
                                   int64_t token_stride, int64_t head_stride);

/// RoPE of compact bf16 `x` [tokens, heads, head_dim] in float64 from the exact bf16 and f32
/// inputs: for each rotated pair (x0, x1) at table column i of position p = positions[t]
///   y0 = x0·cos[p, i] − x1·sin[p, i],   y1 = x1·cos[p, i] + x0·sin[p, i],
/// NeoX pairs (i, i + rotary_dim/2), GPT-J pairs (2i, 2i + 1); dims ≥ rotary_dim pass through.
/// `cos`/`sin` are [max_position, rotary_dim / 2]; positions must lie in [0, max_position).
/// Returns compact [tokens, heads, head_dim] doubles.
std::vector<double> rotary_reference(const std::vector<uint16_t>& x, int64_t tokens,
                                     int64_t heads, int64_t head_dim, int rotary_dim,
                                     RotaryStyle style, const std::vector<float>& cos,
                                     const std::vector<float>& sin,
                                     const std::vector<int64_t>& positions);

/// Distance in bf16 steps between `out` (bf16 bits) and `ref` rounded to bf16 (nearest even):
/// 0 when `out` is the correctly rounded value, 1 when it is a neighbour. Crosses zero and
/// binade boundaries correctly (it counts representable values in between). NaN in `out` or
/// `ref` gives a huge value.
int64_t bf16_ulp_distance(uint16_t out, double ref);

/// Result of checking a bf16 output against a float64 reference element by element.
struct UlpCheck {
  int64_t max_ulp = 0;      ///< largest bf16_ulp_distance
  size_t worst_index = 0;   ///< where it occurs
  size_t over_limit = 0;    ///< elements whose distance exceeds the limit given to check_ulps
};
UlpCheck check_ulps(const std::vector<uint16_t>& out, const std::vector<double>& ref,
                    int64_t limit);

}  // namespace kjit::testing
