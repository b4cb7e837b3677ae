#pragma once
// The split-KV merge of the decode kernels (FlashDecoding), per output element. Each of the n KV
// splits of one output row (a query head of one request) leaves a partial: o_s, its output
// normalized by its own softmax sum, and lse_s, its log-sum-exp in the log2 domain (−inf for a
// split that attended nothing: an empty split, a request of length 0, everything masked). The row
// is then
//   out = Σ_s w_s · o_s / Σ_s w_s,   w_s = 2^(lse_s − M),   M = max_s lse_s,
//   lse = (M + log2 Σ_s w_s) · ln 2   (natural log),
// and zeros with lse = −inf when no split attended anything (every w_s is 0: merge_weight keeps
// −inf − (−inf) out). Σ_s w_s ≥ 1 whenever one split attended something (the largest has
// weight 1), so one rcp normalizes.
//
// Both merges of the decode kernels run it: decode_merge_kernel over the partials in the caller's
// workspace (attention/decode_merge.cu, merge=kernel) and decode_kernel's cluster merge over its
// peers' shared memory (attention/decode.cu, merge=cluster). Each folds the splits in split order
// with one fma per element, so both give the same bits from the same partials.
#include "kjit/config.cuh"
#include "kjit/fast_math.cuh"
#include "kjit/float_bits.cuh"

#include "attention/softmax.cuh"

namespace kjit::attention {

/// The merge of one output row's split partials (see the file comment). Start with
/// SplitMerge::over(M), then for each split s in order: next(lse_s), and acc = fold(acc, o_s[i])
/// for each element i; the row is acc · scale() and its LSE lse().
struct SplitMerge {
  float m;  ///< M = max_s lse_s (log2 domain), −inf when every split is empty
  float l;  ///< Σ of the weights folded so far
  float w;  ///< the weight of the split being folded

  KJIT_DEVICE static SplitMerge over(float m_max) { return SplitMerge{m_max, 0.f, 0.f}; }
  /// Starts the next split, whose LSE (log2 domain) is `lse_s`: its weight 2^(lse_s − M).
  KJIT_DEVICE void next(float lse_s) {
    w = merge_weight(lse_s, m);
    l += w;
  }
  /// acc + w · x for an element x of the current split's o_s.
  KJIT_DEVICE float fold(float acc, float x) const { return fmaf(w, x, acc); }
  /// The factor turning the folded acc into the output: 1 / Σ w_s, 0 when nothing was attended.
  KJIT_DEVICE float scale() const { return l > 0.f ? fast_rcp(l) : 0.f; }
  /// The row's log-sum-exp, natural log; −inf when nothing was attended.
  KJIT_DEVICE float lse() const { return l > 0.f ? (m + fast_log2(l)) * kLn2 : neg_inf(); }
};

}  // namespace kjit::attention
