#pragma once
/// \file reference_rotary.hpp
/// Float64 reference of kjit::rotary (include/kjit/ops/rotary.hpp) and the helpers its tests,
/// `kjit selftest` and benchmarks share: RoPE tables, strided bf16 gathers and a bf16 ulp metric.

#include <kjit/ops/rotary.hpp>
#include <kjit/runtime.hpp>

#include "tools/testing/compare.hpp"

#include <cstdint>
#include <string>
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

/// The relative L2 error a rotary output may have against rotary_reference: bf16 rounding alone
/// gives ≈ 1.6e-3 on random data.
constexpr double kRotaryTol = 4e-3;

/// One randomized out-of-place RoPE launch of q and k (see run_rotary_case).
struct RotaryCase {
  int64_t tokens = 256;
  int64_t q_heads = 8;
  int64_t kv_heads = 2;
  int64_t head_dim = 128;
  int rotary_dim = 128;
  RotaryStyle style = RotaryStyle::kNeoX;
  bool pos_i64 = true;  ///< positions as int64 (torch's), else int32
  int64_t max_position = 1024;

  /// "T256 Hq8/Hkv2 D128 rotary_dim=128 neox i64".
  std::string describe() const;
};

/// What run_rotary_case found.
struct RotaryCaseResult {
  Comparison cmp;  ///< q's then k's outputs against the reference (poisoned = NaN is non-finite)
  UlpCheck ulps;   ///< the same outputs, limit 1 bf16 ulp
  uint64_t seed = 0;
  /// True when cmp.rel_l2 ≤ tol, nothing non-finite and every output within 1 bf16 ulp.
  bool ok(double tol = kRotaryTol) const { return cmp.ok(tol) && ulps.over_limit == 0; }
  std::string describe() const;
};

/// Builds `c` from `seed` (q and k ~ N(0, 1) in bf16, positions uniform in [0, max_position),
/// tables of theta 500000; q_out and k_out 0xFF-poisoned), runs kjit::rotary out of place on the
/// default stream of the current context's device (testing::current_device), synchronizes and
/// compares both outputs with rotary_reference. Throws what rotary throws.
RotaryCaseResult run_rotary_case(const RotaryCase& c, uint64_t seed, Runtime& runtime = Runtime::global());

}  // namespace kjit::testing
