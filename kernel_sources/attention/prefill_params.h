#pragma once
// Parameters and static tile shapes of the split-Q prefill kernel (attention/prefill.cu), shared
// by the dense prefill (DenseQSchedule + ContigKV, family attention.prefill) and the ragged paged
// prefill (PackedQSchedule + PagedKV, family attention.paged_prefill). Compiled by g++ and NVRTC:
// PODs and constexpr only.
#include "kjit/fast_div.h"
#include "kjit/types.h"
#include "fp8/gemm_sm90_params.h"  // TmaDescriptor: a CUtensorMap's 128 bytes, opaque to kernels

namespace kjit::attention {

/// CUDA's limit on grid dims y and z, where the prefill kernels put their heads and requests.
constexpr int kMaxGridYZ = 65535;

/// Static shape of one prefill CTA for a head_dim and a query tile of kBlockM ∈ {64, 128} rows.
/// A CTA owns kBlockM query rows of one (request, q head); each warp owns kWarpRows =
/// 16 · kMTiles consecutive rows (kMTiles m16 MMA tiles that share every K/V fragment the warp
/// loads: two halve shared-memory reads per MMA). K/V tiles of kBlockN tokens stream through a
/// kStages-deep cp.async ring behind the resident Q tile, and are consumed kSubN keys per online-
/// softmax step (which keeps the score registers, kMTiles · kSubN / 2 a thread, within budget
/// next to the output accumulators, kMTiles · kHeadDim / 2):
///   hd64 : 128 rows = 4 warps × 32, 64-token tiles, 3 stages: Q 16 KiB + 3 × 16 KiB
///   hd128: 128 rows = 4 warps × 32, 64-token tiles, 2 stages: Q 32 KiB + 2 × 32 KiB
///   hd256: 128 rows = 8 warps × 16, 64-token tiles, 2 stages: Q 64 KiB + 2 × 64 KiB
///   64-row tiles (short or ragged queries): 4 warps × 16 rows, the same K/V ring.
/// Two CTAs fit per SM for hd64/hd128, one for hd256.
template <int kHeadDim, int kBlockMRows = 128>
struct PrefillShape {
  static constexpr int kBlockM = kBlockMRows;
  static constexpr int kMTiles = (kBlockM == 64 || kHeadDim == 256) ? 1 : 2;
  static constexpr int kWarpRows = 16 * kMTiles;
  static constexpr int kWarps = kBlockM / kWarpRows;
  static constexpr int kBlockN = 64;
  static constexpr int kSubN = kHeadDim == 256 ? 64 : 32;
  static constexpr int kStages = kHeadDim == 64 ? 3 : 2;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kMinCtasPerSm = kHeadDim == 256 ? 1 : 2;  ///< __launch_bounds__
  static constexpr int kQBytes = kBlockM * kHeadDim * 2;
  static constexpr int kKvTileBytes = kBlockN * kHeadDim * 2;  ///< K (or V) bytes of one tile
  /// PagedKV: pool rows of the next two tiles (looked up one tile ahead).
  static constexpr int kRowTableBytes = 2 * kBlockN * 4;
  static constexpr int kSmemBytes = kQBytes + kStages * 2 * kKvTileBytes + kRowTableBytes;
};

/// What the host needs of PrefillShape<head_dim, block_m> at run time.
struct PrefillLaunchShape {
  int threads = 0;
  int block_m = 0;
  int block_n = 0;
  int smem_bytes = 0;
};

template <int kHeadDim, int kBlockM>
constexpr PrefillLaunchShape prefill_launch_shape_of() {
  using S = PrefillShape<kHeadDim, kBlockM>;
  return PrefillLaunchShape{S::kThreads, S::kBlockM, S::kBlockN, S::kSmemBytes};
}

/// PrefillShape<head_dim, block_m> as values; all zero for an unsupported pair.
constexpr PrefillLaunchShape prefill_launch_shape(int head_dim, int block_m) {
  return block_m == 128 ? (head_dim == 64    ? prefill_launch_shape_of<64, 128>()
                           : head_dim == 128 ? prefill_launch_shape_of<128, 128>()
                           : head_dim == 256 ? prefill_launch_shape_of<256, 128>()
                                             : PrefillLaunchShape{})
         : block_m == 64 ? (head_dim == 64    ? prefill_launch_shape_of<64, 64>()
                            : head_dim == 128 ? prefill_launch_shape_of<128, 64>()
                            : head_dim == 256 ? prefill_launch_shape_of<256, 64>()
                                              : PrefillLaunchShape{})
                         : PrefillLaunchShape{};
}

/// Parameters of prefill_kernel. Strides are in elements. Rows of a request are its query tokens
/// (request-local index i ∈ [0, q_len)); under `causal` query i attends keys j ≤ i + kv_len − q_len
/// (queries aligned to the end of the KV).
///
/// Grid: (q tiles, q_heads, batch) for DenseQSchedule, (num_work, q_heads, 1) for PackedQSchedule
/// ((num_work, kv_heads, 1) when the sm_90a paged kernel packs GQA heads: pack_group > 1).
/// The kernel walks its flat CTA index (x fastest) over the heads in groups of head_group and,
/// under `causal`, heaviest tile first (head_group_order in attention/work_order.cuh).
///
/// The KV fields are read by the KV-source policy (attention/kv_source.cuh) exactly as in
/// DecodeParams.
/// Slots of one TMA box of the sm_90a paged kernel's page loads (attention.paged_prefill_sm90,
/// page_load tma): page sizes that are multiples of it take them, each box inside one page.
constexpr int kPageBoxRows = 16;

struct PrefillParams {
  /// The sm_90a paged kernel's TMA page loads (page_load tma; PageLoad): tensor maps over the K
  /// and V pools [num_pages, page_size, kv_heads, head_dim] bf16, dims {head_dim, page_size,
  /// kv_heads, num_pages}, boxes of 64 columns × 16 slots, 128-byte swizzle. Unused (zero) by
  /// every other kernel.
  kjit::fp8::TmaDescriptor tma_k_pages;
  kjit::fp8::TmaDescriptor tma_v_pages;
  /// bf16. Dense: [batch, q_len, q_heads, head_dim]; packed: [total_q, q_heads, head_dim] with
  /// request b's tokens at rows qo_indptr[b] .. qo_indptr[b+1).
  const void* q;
  void* out;            ///< bf16, shaped (and indexed) like q
  /// f32 natural-log LSE or null. Dense: [batch, q_heads, q_len]; packed: [q_heads, total_q].
  float* lse;
  /// Optional bool keep-mask (nonzero = attend), dense only: element (b, i, j) at
  /// b · mask_stride_b + i · mask_stride_q + j · mask_stride_k (mask_stride_q = 0 for a 2-D
  /// [batch, kv_len] mask). Read only by the kMask specializations.
  const uint8_t* mask;

  const void* k;        ///< bf16 ContigKV [batch, max_kv_len, kv_heads, head_dim] or the paged pool
  const void* v;
  const int32_t* kv_lens;           ///< ContigKV: [batch] or null (= max_kv_len)
  const int32_t* kv_indptr;         ///< PagedKV
  const int32_t* kv_page_indices;   ///< PagedKV
  const int32_t* kv_last_page_len;  ///< PagedKV

  const int32_t* qo_indptr;        ///< PackedQSchedule: [batch + 1]
  const int32_t* q_tile_to_batch;  ///< PackedQSchedule: [num_work] request of each work item
  const int32_t* q_tile_to_index;  ///< PackedQSchedule: [num_work] request-local q tile
  /// The sm_90a paged kernel's persistent schedule, or both null (a CTA per grid position): CTA c
  /// runs the units cta_work[cta_work_indptr[c] .. cta_work_indptr[c + 1]) in order, unit =
  /// work item · heads + head (heads: q_heads, or kv_heads when pack_group > 1). Other kernels
  /// ignore it.
  const int32_t* cta_work_indptr;
  const int32_t* cta_work;

  int64_t q_stride_b, q_stride_l, q_stride_h;  ///< packed: q_stride_b unused, l = token stride
  int64_t k_stride_b, k_stride_l, k_stride_h;
  int64_t v_stride_b, v_stride_l, v_stride_h;
  int64_t out_stride_b, out_stride_l, out_stride_h;
  int64_t lse_stride_b, lse_stride_h, lse_stride_l;  ///< packed: lse_stride_b unused
  int64_t mask_stride_b, mask_stride_q, mask_stride_k;

  int32_t batch;
  int32_t q_len;        ///< dense: query rows per request
  int32_t max_kv_len;   ///< ContigKV: tokens per sequence
  int32_t q_heads;
  int32_t kv_heads;
  int32_t group;        ///< q_heads / kv_heads
  int32_t q_tiles;      ///< dense: ceil(q_len / kBlockM); packed: num_work (work items)
  int32_t causal;       ///< nonzero: causal, bottom-right aligned
  float scale_log2;     ///< softmax scale · log2(e), > 0
  int32_t page_size;    ///< PagedKV: tokens per page
  FastDiv page_div;     ///< PagedKV: page_size as a FastDiv (token → page without a division)
  int32_t page_rows;    ///< PagedKV: page stride / slot stride
  int32_t head_group;   ///< heads walked together, 1..q_heads (q_heads: heads fastest); packed: of kv_heads
  /// Packed GQA (the sm_90a paged kernel only; 1 everywhere else): the q heads of one KV head
  /// that share a work item's rows, 1 (a CTA per work item and q head) or `group` (a CTA per work
  /// item and KV head, its rows token-major: row r of a request is token r / group, q head
  /// kv_head · group + r % group; the plan's work items tile those q_len · group rows).
  int32_t pack_group;
  FastDiv pack_div;     ///< pack_group as a FastDiv
};

}  // namespace kjit::attention
