#pragma once
// Parameters and static shapes of the fp8 sliding-window MLA decode kernels
// (kernel_sources/mla/swa_decode.cu). Compiled by both g++ (runtime/ops/mla/swa_decode.cc fills
// SwaDecodeParams and sizes launches from the constexpr functions below) and NVRTC, so it holds
// only PODs and constexpr functions.
#include "kjit/types.h"

namespace kjit::mla {

/// Cache formats: the `kCache` template argument of swa_decode_kernel.
constexpr int kSwaCacheE4M3 = 0;  ///< OCP E4M3 ("fn": max 448, 0x7f/0xff NaN, no inf)
constexpr int kSwaCacheE5M2 = 1;  ///< E5M2 (the high byte of an IEEE half)

/// Query heads of one m16 tile: the 4 warps that share them are a "head group".
constexpr int kSwaHeadsPerTile = 16;
/// Tokens of one mma k-step of P·V (and of one cp.async commit group).
constexpr int kSwaStepTokens = 16;
/// The only head dimension the kernel is written for (the MLA latent of DeepSeek-V3/V4).
constexpr int kSwaHeadDim = 512;

/// Static shape of swa_decode_kernel<kHeadDim, kGroup, kTile, ·, ·>. (A class template with
/// static members rather than constexpr functions, so device code can use it without
/// __host__ __device__ annotations in a header g++ also compiles.)
///
/// Shared memory, byte offsets:
///  raw   kTile rows of kHeadDim fp8 bytes, 16-byte chunks XOR-swizzled per row
///  xbuf  per m-tile: the partial Q·Kᵀ scores of the two dim halves,
///        [th 2][step kTile/32][dh 2][n-tile 2][lane 32][4 f32]
///  pbuf  per m-tile: P' as mma A fragments, [step kTile/16][lane 32][4 × f16x2]
///  stats per m-tile: row max [4 warps][16] f32, row sum [4][16] f32, scale max [4] f32
/// A CTA of a cluster split (kCluster > 1) then reuses the memory from offset 0, once P·V has read
/// the rows for the last time, as the exchange its peers read:
///  xo    [kGroup heads][kHeadDim] f32: its partial output, normalized by its own row sum;
///        16-byte chunks XOR-swizzled (swa_detail::xchg_chunk in
///        mla/swa_decode.cu)
///  xlse  [kGroup] f32: its partial's log2 LSE (−inf for a head that attended nothing)
template <int kHeadDim, int kGroup, int kTile>
struct SwaShape {
  static constexpr int kMTiles = kGroup / kSwaHeadsPerTile;
  static constexpr int kThreads = 128 * kMTiles;  ///< four warps per 16 heads
  static constexpr int kXbufBytesPerTile = 2 * (kTile / 32) * 2 * 2 * 32 * 16;
  static constexpr int kPbufBytesPerTile = (kTile / kSwaStepTokens) * 32 * 16;
  static constexpr int kStatsBytesPerTile = (4 * 16 + 4 * 16 + 4) * 4;
  static constexpr int kRawOffset = 0;
  static constexpr int kXbufOffset = kRawOffset + kTile * kHeadDim;
  static constexpr int kPbufOffset = kXbufOffset + kMTiles * kXbufBytesPerTile;
  static constexpr int kStatsOffset = kPbufOffset + kMTiles * kPbufBytesPerTile;
  static constexpr int kSmemBytes = kStatsOffset + kMTiles * kStatsBytesPerTile;
  static constexpr int kXchgOffset = 0;
  static constexpr int kXchgLseOffset = kXchgOffset + kGroup * kHeadDim * 4;
  static constexpr int kXchgBytes = kXchgLseOffset + kGroup * 4;
  /// Dynamic shared memory of a cluster-split CTA: the layout above or the exchange, the larger.
  static constexpr int kClusterSmemBytes = kSmemBytes > kXchgBytes ? kSmemBytes : kXchgBytes;
};

/// The Hopper kernel (mla/swa_decode_sm90.cu, swa_decode_wgmma_kernel; sm_90a): one CTA per
/// (token, 64 heads), two warpgroups, the whole window (≤ 128 positions) in shared memory.
/// The CTA loops over (token, 64-head) items with the next item's window rows in flight.
/// Shared memory from a 1024-byte-aligned base (the 128-byte swizzle atoms need it):
///   kv    [0, 128 KiB)      two K buffers (this item's, the next item's), each 4 k-blocks of
///                           [128 rows][128 B], later Vᵀ [512 dims][128 B] in place
///   q     [128, 192 KiB)    q · 2^e as E4M3 hi (first 32 KiB) and lo, each [4 k-blocks][64][128 B];
///                           then the bf16 output staging tile [64][1 KiB]
///   p     [192, 208 KiB)    P' as E4M3 hi and lo, each [64 heads][128 B]
///   misc  token scale words [2][128] u32, token valid [2][128] i32, q row factors [64] f32,
///         row max [2][64] f32, row sum [2][64] f32, per-warp scale max [8] f32
constexpr int kSwaWgmmaHeads = 64;
constexpr int kSwaWgmmaThreads = 256;
constexpr int kSwaWgmmaTile = 128;
constexpr int kSwaWgmmaKvOffset = 0;
constexpr int kSwaWgmmaQOffset = 128 * 1024;
constexpr int kSwaWgmmaPOffset = 192 * 1024;
constexpr int kSwaWgmmaMiscOffset = 208 * 1024;
constexpr int kSwaWgmmaMiscBytes = (256 + 256 + 64 + 128 + 128 + 8) * 4;
/// Dynamic shared memory of a launch: the layout plus the alignment slack.
constexpr int kSwaWgmmaSmemBytes = kSwaWgmmaMiscOffset + kSwaWgmmaMiscBytes + 1024;

/// What the host needs of SwaShape for run-time (group, tile, cluster_split) values of the
/// family's space (head_dim 512): threads and dynamic shared memory; {0, 0} outside the space.
/// Group 64 is the Hopper wgmma kernel (tile 128, no cluster split only).
struct SwaLaunchShape {
  int threads = 0;
  int smem_bytes = 0;
};

template <int kGroup, int kTile>
constexpr SwaLaunchShape swa_launch_shape_of(int cluster_split) {
  using S = SwaShape<512, kGroup, kTile>;
  return SwaLaunchShape{S::kThreads, cluster_split > 1 ? S::kClusterSmemBytes : S::kSmemBytes};
}

constexpr SwaLaunchShape swa_launch_shape(int group, int tile, int cluster_split = 1) {
  return group == 16 && tile == 64    ? swa_launch_shape_of<16, 64>(cluster_split)
         : group == 16 && tile == 128 ? swa_launch_shape_of<16, 128>(cluster_split)
         : group == 32 && tile == 64  ? swa_launch_shape_of<32, 64>(cluster_split)
         : group == 32 && tile == 128 ? swa_launch_shape_of<32, 128>(cluster_split)
         : group == 64 && tile == 128 && cluster_split == 1 ? SwaLaunchShape{kSwaWgmmaThreads, kSwaWgmmaSmemBytes}
                                                            : SwaLaunchShape{};
}

/// Merge kernel: one warp per (token, head) row.
constexpr int kSwaMergeRowsPerCta = 4;
constexpr int kSwaMergeThreads = 32 * kSwaMergeRowsPerCta;
/// Most splits a window may be cut into (the merge kernel reads one split LSE per lane).
constexpr int kSwaMaxSplits = 32;

/// Parameters of swa_decode_kernel and swa_merge_kernel. Strides are in elements unless named
/// *_bytes. The decode grid is one-dimensional:
///   blockIdx.x = (token · num_splits + split) · head_groups + head_group
/// (head groups innermost, so the CTAs that read one token's KV rows run side by side and the
/// rows come from L2 after the first of them); with a cluster split of c CTAs (num_splits 1):
///   blockIdx.x = (token · head_groups + head_group) · c + rank in the cluster (= window slice).
struct SwaDecodeParams {
  const void* q;              ///< bf16 [tokens, num_heads, head_dim], head_dim contiguous
  const uint8_t* kv;          ///< fp8 [num_blocks, block_size, head_dim] (rows 16-byte aligned)
  const uint8_t* fill_src;    ///< any mapped device address: the source of zero-filled copies
  const void* inv_scale;      ///< bf16 [max_slots, 1]
  const int64_t* indices;     ///< int64 [≥ tokens, window], contiguous; < 0 = no token
  const void* lens;           ///< int64 or int32 [≥ tokens]
  void* out;                  ///< bf16 [tokens, num_heads, head_dim]; written when num_splits == 1
  float* lse;                 ///< f32 [tokens, num_heads] natural-log LSE, or null
  /// Split partials when num_splits > 1: o_part [tokens · num_heads][num_splits][head_dim] f32,
  /// normalized by their own sum, and lse_part [tokens · num_heads][num_splits] f32 (log2 domain,
  /// −inf for a split that attended nothing).
  float* o_part;
  float* lse_part;

  int64_t q_stride_t, q_stride_h;
  int64_t out_stride_t, out_stride_h;
  int64_t lse_stride_t, lse_stride_h;
  int64_t kv_stride_block_bytes;  ///< bytes between cache blocks
  int64_t kv_stride_row_bytes;    ///< bytes between the rows of one block
  int64_t scale_stride;           ///< elements between inv_scale rows

  int32_t tokens;
  int32_t num_heads;
  int32_t head_groups;   ///< num_heads / group
  int32_t block_size;
  int32_t num_splits;
  int32_t split_len;     ///< window positions per split (per cluster CTA), a multiple of 16
  int32_t lens_i64;      ///< 1: lens is int64, 0: int32
  int32_t kv_compact;    ///< 1: block stride == block_size · row stride (slot · row stride)
  float scale_log2;      ///< softmax scale · log2(e)
  int32_t pad_;
};

}  // namespace kjit::mla
