#pragma once
// Parameters and launch shape of the split-KV merge of the GQA decode kernels
// (attention/decode_merge.cu, family "attention.decode_merge"). Compiled by both g++ (the host op
// fills DecodeMergeParams and sizes the launch) and NVRTC (the kernel), so it holds only PODs and
// constants. Kept apart from decode_params.h so that neither program's text (and cache key)
// holds the other's header.
#include "kjit/types.h"

namespace kjit::attention {

/// Rows (query heads) the merge kernel combines per CTA: one warp per row.
constexpr int kDecodeMergeRowsPerCta = 4;
constexpr int kDecodeMergeThreads = 32 * kDecodeMergeRowsPerCta;

/// Parameters of decode_merge_kernel: combines the num_splits partials of every (b, q head) that
/// decode_kernel (attention/decode.cu, contiguous or paged KV) wrote with num_splits > 1.
/// Grid: ceil(batch · q_heads / kDecodeMergeRowsPerCta) CTAs of kDecodeMergeThreads.
struct DecodeMergeParams {
  /// [batch · q_heads][num_splits][head_dim] f32, each split's output normalized by its own l
  /// (DecodeParams::o_part).
  const float* o_part;
  /// [batch · q_heads][num_splits] f32, each split's LSE in the log2 domain (DecodeParams::lse_part).
  const float* lse_part;
  void* out;              ///< bf16 [batch, 1, q_heads, head_dim]
  float* lse;             ///< f32 [batch, q_heads] natural-log LSE, or null
  int64_t out_stride_b, out_stride_h;
  int64_t lse_stride_b, lse_stride_h;
  int32_t batch;
  int32_t q_heads;
  int32_t num_splits;
  int32_t pad_;
};

}  // namespace kjit::attention
