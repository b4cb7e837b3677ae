// The split-KV merge of the GQA decode kernels (family "attention.decode_merge", one program per
// head_dim, shared by attention.decode and attention.paged_decode): when a decode plan splits the
// KV (num_splits > 1) and reduces the splits with this kernel (merge=kernel), decode_kernel
// (attention/decode.cu) writes per-split partials, o / l (f32) and lse (log2 domain), to the
// caller's workspace and this kernel combines them:
//   out = Σ_s 2^(lse_s − M) o_s / Σ_s 2^(lse_s − M),  M = max_s lse_s   (FlashDecoding),
// element by element through SplitMerge (attention/split_merge.cuh), the merge the decode
// kernel's cluster merge (merge=cluster) runs too. Its own program, so that a decode compile does
// not pay for it: the ops load it only when a plan merges with it. It includes nothing of the
// decode kernel (decode_merge_params.h holds its params).
#include "kjit/config.cuh"
#include "kjit/f16_bits.cuh"
#include "kjit/float_bits.cuh"

#include "attention/decode_merge_params.h"
#include "attention/split_merge.cuh"

namespace kjit::attention {

/// Combines the split partials of decode_kernel: one warp per (b, q head), each lane owning
/// kHeadDim / 32 consecutive columns. Writes out (bf16) and, when requested, lse (natural log).
template <int kHeadDim>
__global__ void __launch_bounds__(kDecodeMergeThreads) decode_merge_kernel(KJIT_PARAMS DecodeMergeParams p) {
  constexpr int kVec = kHeadDim / 32;  // 2, 4 or 8 columns per lane
  static_assert(kVec % 2 == 0, "head_dim must be a multiple of 64");
  // Launched with overlap_previous on sm_90+: the partials are the decode kernel's output.
  KJIT_WAIT_PREVIOUS_GRID();
  const int lane = threadIdx.x & 31;
  const int row = blockIdx.x * kDecodeMergeRowsPerCta + (threadIdx.x >> 5);
  if (row >= p.batch * p.q_heads) return;
  const int b = row / p.q_heads;
  const int head = row % p.q_heads;
  const int n = p.num_splits;
  const float* lse = p.lse_part + static_cast<int64_t>(row) * n;

  float m = neg_inf();
  for (int s = lane; s < n; s += 32) m = fmaxf(m, lse[s]);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));

  float acc[kVec];
#pragma unroll
  for (int i = 0; i < kVec; ++i) acc[i] = 0.f;
  SplitMerge merge = SplitMerge::over(m);
  const float* o = p.o_part + static_cast<int64_t>(row) * n * kHeadDim + lane * kVec;
  // Unrolled so several splits' loads are in flight at once (the loop is latency-bound).
#pragma unroll 8
  for (int s = 0; s < n; ++s) {
    merge.next(lse[s]);
    const float* src = o + static_cast<int64_t>(s) * kHeadDim;
    if constexpr (kVec % 4 == 0) {
#pragma unroll
      for (int i = 0; i < kVec; i += 4) {
        const float4 x = *reinterpret_cast<const float4*>(src + i);
        acc[i] = merge.fold(acc[i], x.x);
        acc[i + 1] = merge.fold(acc[i + 1], x.y);
        acc[i + 2] = merge.fold(acc[i + 2], x.z);
        acc[i + 3] = merge.fold(acc[i + 3], x.w);
      }
    } else {
      const float2 x = *reinterpret_cast<const float2*>(src);
      acc[0] = merge.fold(acc[0], x.x);
      acc[1] = merge.fold(acc[1], x.y);
    }
  }
  const float inv = merge.scale();
  char* dst = static_cast<char*>(p.out) +
              (static_cast<int64_t>(b) * p.out_stride_b + static_cast<int64_t>(head) * p.out_stride_h + lane * kVec) * 2;
#pragma unroll
  for (int i = 0; i < kVec; i += 2) {
    *reinterpret_cast<uint32_t*>(dst + i * 2) = pack_bf16x2(acc[i] * inv, acc[i + 1] * inv);
  }
  if (lane == 0 && p.lse != nullptr) {
    p.lse[static_cast<int64_t>(b) * p.lse_stride_b + static_cast<int64_t>(head) * p.lse_stride_h] = merge.lse();
  }
}

}  // namespace kjit::attention
