#pragma once
// Online softmax in the log2 domain, for rows whose scores live in mma.sync C fragments: each
// row is spread over the four lanes of a quad (lanes 4g..4g+3), so row reductions are two
// xor-shuffles. Scores enter already multiplied by scale·log2(e), so every exponential is one
// ex2 instruction: exp(scale·s − m) = 2^(scale·log2(e)·s − m₂).
//
// State per row: m (running max, log2 domain, −inf while nothing was attended) and l (this
// lane's partial sum of 2^(s − m); the quad's lanes are summed once at the end, not per tile).
// Fully masked rows never produce NaN: a −inf max is replaced by 0 before subtracting, so
// 2^(−inf − 0) = 0 and the row ends with l = 0, which callers turn into zeros / lse = −inf.
// Reference: Milakov & Gimelshein 2018, "Online normalizer calculation for softmax".
#include "kjit/config.cuh"
#include "kjit/fast_math.cuh"
#include "kjit/float_bits.cuh"
#include "kjit/warp_reduce.cuh"

namespace kjit::attention {

/// The value to subtract from log2-domain scores given a running max: the max itself, or 0 when
/// the row has seen only masked (−inf) scores, which keeps −inf − (−inf) = NaN out.
KJIT_DEVICE float safe_max(float m) { return m == neg_inf() ? 0.f : m; }

/// Running softmax statistics of one row (see the file comment). Start from SoftmaxRow::empty().
struct SoftmaxRow {
  float m;  ///< running max (log2 domain), −inf before the first attended score
  float l;  ///< this lane's partial sum of 2^(s − m)

  KJIT_DEVICE static SoftmaxRow empty() { return SoftmaxRow{neg_inf(), 0.f}; }

  /// Folds in this lane's `N` new log2-domain scores of the row (masked ones −inf), replacing
  /// them by their unnormalized probabilities 2^(s − m_new). Returns the factor 2^(m_old − m_new)
  /// by which the caller rescales its output accumulators of this row.
  template <int N>
  KJIT_DEVICE float update(float (&s)[N]) {
    float tile_max = s[0];
#pragma unroll
    for (int i = 1; i < N; ++i) tile_max = fmaxf(tile_max, s[i]);
    const float m_new = fmaxf(m, quad_max(tile_max));
    const float base = safe_max(m_new);
    const float alpha = fast_exp2(m - base);
    float sum = 0.f;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      s[i] = fast_exp2(s[i] - base);
      sum += s[i];
    }
    l = l * alpha + sum;
    m = m_new;
    return alpha;
  }

  /// The quad-wide sum of l (call once, after the last update).
  KJIT_DEVICE float total() const { return quad_sum(l); }
};

/// Weight 2^(m_i − m_max) of a partial result with max m_i in a merge whose overall max is
/// m_max; 0 for an empty partial (m_i = −inf), including when every partial is empty.
KJIT_DEVICE float merge_weight(float m_i, float m_max) { return fast_exp2(m_i - safe_max(m_max)); }

}  // namespace kjit::attention
