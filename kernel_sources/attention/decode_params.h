#pragma once
// Parameters and static tile shapes of the GQA decode kernels (attention/decode.cu). Compiled by
// both g++ (the host op fills DecodeParams and sizes launches from the constexpr shapes below)
// and NVRTC (the kernels), so it holds only PODs and constexpr functions.
#include "kjit/fast_div.h"
#include "kjit/types.h"

namespace kjit::attention {

/// Static shape of one decode CTA for a head_dim. A CTA owns one (batch, kv head, KV split,
/// M tile) and streams KV tiles of kTileTokens tokens through a kStages-deep cp.async ring.
/// Warps are laid out as kTokenGroups × kDSplit: each token group takes kTokensPerWarp
/// consecutive tokens of every tile (Q·Kᵀ over the whole head_dim); within a group, kDSplit
/// warps each own head_dim / kDSplit output columns of P·V. Every shape keeps one K + V stage at
/// 32 KiB, so three stages fit twice into an SM's 228 KiB (two CTAs resident per SM):
///  hd64 : 4 groups × 32 tokens = 128-token tiles (16 KiB of K + 16 KiB of V per stage)
///  hd128: 4 groups × 16 tokens =  64-token tiles
///  hd256: 2 groups × 16 tokens =  32-token tiles, head_dim split over 2 warps in P·V, so the
///         output accumulators stay at 64 (8 rows: 32) floats a thread.
/// (A class template with static members rather than constexpr functions, so device code can use
/// it without __host__ __device__ annotations in a header g++ also compiles.)
template <int kHeadDim>
struct DecodeShape {
  static constexpr int kTokenGroups = kHeadDim == 256 ? 2 : 4;
  static constexpr int kDSplit = kHeadDim == 256 ? 2 : 1;
  static constexpr int kTokensPerWarp = kHeadDim == 64 ? 32 : 16;  ///< multiple of P·V's k16
  static constexpr int kStages = 3;
  static constexpr int kWarps = kTokenGroups * kDSplit;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kTileTokens = kTokenGroups * kTokensPerWarp;
  /// Dynamic shared memory: the K and V stage ring. The end-of-CTA merge of the token groups'
  /// (m, l, o) reuses it.
  static constexpr int kSmemBytes = kStages * kTileTokens * kHeadDim * 2 * 2;
};

/// The most KV splits the cluster merge (decode_kernel<..., true>) reduces: one thread-block
/// cluster holds a (batch, kv head, M tile)'s splits, and 8 CTAs is the portable cluster size.
constexpr int kDecodeMaxClusterSplits = 8;

/// What the host needs of DecodeShape<head_dim> for a run-time head_dim (64, 128 or 256).
struct DecodeLaunchShape {
  int threads = 0;
  int tile_tokens = 0;
  int smem_bytes = 0;
};

/// DecodeShape<head_dim> as values; all zero for an unsupported head_dim.
constexpr DecodeLaunchShape decode_launch_shape(int head_dim) {
  return head_dim == 64    ? DecodeLaunchShape{DecodeShape<64>::kThreads, DecodeShape<64>::kTileTokens,
                                               DecodeShape<64>::kSmemBytes}
         : head_dim == 128 ? DecodeLaunchShape{DecodeShape<128>::kThreads, DecodeShape<128>::kTileTokens,
                                               DecodeShape<128>::kSmemBytes}
         : head_dim == 256 ? DecodeLaunchShape{DecodeShape<256>::kThreads, DecodeShape<256>::kTileTokens,
                                               DecodeShape<256>::kSmemBytes}
                           : DecodeLaunchShape{};
}

/// Parameters of decode_kernel. Strides are in elements. The grid is one-dimensional:
///   blockIdx.x = ((b · kv_heads + kv_head) · num_splits + split) · m_tiles + m_tile
/// (M tiles innermost so CTAs re-reading one KV head run side by side and share L2), except under
/// the cluster merge (decode_kernel<..., true>), whose clusters of num_splits consecutive CTAs
/// are the splits of one (b, kv_head, m_tile):
///   blockIdx.x = ((b · kv_heads + kv_head) · m_tiles + m_tile) · num_splits + split.
/// The KV fields are read by the kernel's KV-source policy (attention/kv_source.cuh): ContigKV
/// uses k/v as [batch, max_kv_len, kv_heads, head_dim] and kv_lens; PagedKV uses k/v as page
/// pools [num_pages, page_size, kv_heads, head_dim] (k_stride_b = page stride, k_stride_l = slot
/// stride) and the kv_indptr / kv_page_indices / kv_last_page_len page table.
struct DecodeParams {
  const void* q;          ///< bf16 [batch, 1, q_heads, head_dim]
  const void* k;          ///< bf16 [batch, max_kv_len, kv_heads, head_dim], or the paged K pool
  const void* v;          ///< bf16, as k
  const int32_t* kv_lens; ///< ContigKV: [batch], or null: every sequence has max_kv_len tokens
  const int32_t* kv_indptr;         ///< PagedKV: [batch + 1] ranges of kv_page_indices
  const int32_t* kv_page_indices;   ///< PagedKV: [nnz] page ids, each sequence's in token order
  const int32_t* kv_last_page_len;  ///< PagedKV: [batch] tokens in each sequence's last page
  const uint8_t* mask;    ///< bool [batch, max_kv_len] (nonzero = attend), or null
  /// bf16 [batch, 1, q_heads, head_dim]; written when num_splits == 1 or the kernel merges its
  /// splits in a cluster
  void* out;
  float* lse;             ///< f32 [batch, q_heads] natural-log LSE, or null; written as out
  /// Split partials, when num_splits > 1 and the merge kernel combines them (null under the
  /// cluster merge): o_part [batch · q_heads][num_splits][head_dim] f32 (normalized by its own
  /// l) and lse_part [batch · q_heads][num_splits] f32 (log2 domain).
  float* o_part;
  float* lse_part;

  int64_t q_stride_b, q_stride_h;
  int64_t k_stride_b, k_stride_l, k_stride_h;
  int64_t v_stride_b, v_stride_l, v_stride_h;
  int64_t mask_stride_b, mask_stride_l;
  int64_t out_stride_b, out_stride_h;
  int64_t lse_stride_b, lse_stride_h;

  int32_t batch;
  int32_t q_heads;
  int32_t kv_heads;
  int32_t group;         ///< q_heads / kv_heads
  int32_t max_kv_len;
  int32_t num_splits;
  /// Tokens per split (the last split may be shorter or empty). 0: each sequence splits its own
  /// kv_len into num_splits ranges of whole KV tiles (what the paged op passes: the host does not
  /// know the paged lengths).
  int32_t split_tokens;
  int32_t m_tiles;       ///< ceil(group / rows)
  float scale_log2;      ///< softmax scale · log2(e)
  int32_t page_size;     ///< PagedKV: tokens per page (≥ 1)
  FastDiv page_div;      ///< PagedKV: page_size as a FastDiv (token → page without a division)
  int32_t page_rows;     ///< PagedKV: page stride / slot stride (pool rows per page)
  /// m_tiles, num_splits and kv_heads as FastDivs: the kernel splits blockIdx.x (and a paged
  /// sequence's length into its splits) without integer divisions.
  FastDiv m_tiles_div;
  FastDiv num_splits_div;
  FastDiv kv_heads_div;
};

}  // namespace kjit::attention
