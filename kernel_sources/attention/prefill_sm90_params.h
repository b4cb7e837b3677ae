#pragma once
// Parameters and static shape of the Hopper prefill kernel (attention/prefill_sm90.cu, family
// attention.prefill_sm90). Compiled by g++ (runtime/ops/attention/prefill_sm90.cc) and NVRTC: PODs
// and constexpr only.
#include "kjit/types.h"
#include "fp8/gemm_sm90_params.h"  // TmaDescriptor: a CUtensorMap's 128 bytes, opaque to kernels

namespace kjit::attention {

using TmaDescriptor = kjit::fp8::TmaDescriptor;

/// Static shape of one Hopper prefill CTA (kHeadDim ∈ {64, 128}): warpgroup 0 the producer
/// and kConsumers = kRows / 64 consumer warpgroups of 64 query rows each, so kBlockM = kRows rows
/// of one (batch, q head). The dense kernel (kPaged false) runs two consumers at hd128 and three
/// at hd64 (where a K/V tile is little work per row, a third warpgroup shares each loaded tile and
/// hides more of the softmax; the consumers' registers then drop from 240 to 160). The ragged
/// paged kernel (kPaged true) runs the plan's work items: 128-row tiles (two consumers) at both
/// head dims, or 192-row tiles (three consumers) at hd64 (192 rows at hd128 would need 240 KiB).
/// K/V tiles of kBlockN = 128 tokens stream through a kStages-deep ring. Every tile in shared
/// memory is a column of 64-element (128-byte) "atoms" in the 128-byte swizzle (what TMA writes
/// and wgmma's descriptors read; the paged producer's cp.async gather writes the same layout):
/// the atom of columns 64a..64a+63 of an R-row tile lives at a · R · 128 bytes.
///   hd64 : Q 24 KiB + 3 stages × (K 16 KiB + V 16 KiB) = 120 KiB, 512 threads (paged 128-row
///          tiles: Q 16 KiB, 384 threads)
///   hd128: Q 32 KiB + 3 stages × (K 32 KiB + V 32 KiB) = 224 KiB (of the 227 KiB a CTA may use),
///          384 threads
/// Three stages: a K slot is refilled once S = Q·Kᵀ of its tile is done, a V slot once P·V is, so
/// a refill has about two tiles of math to land (two stages left the consumers waiting on L2).
/// The paged kernel's producer also keeps two 128-entry pool-row tables (1 KiB) after the
/// barriers: 226.25 KiB at hd128.
/// kTma (paged only): the kernel loads K/V pages with TMA (PageLoad), the tail tile and Q still
/// gathered; false: it gathers every tile.
template <int kHeadDim, bool kPaged = false, int kRows = kHeadDim == 64 && !kPaged ? 192 : 128, bool kTma = false>
struct PrefillSm90Shape {
  static_assert(kRows == 128 || (kRows == 192 && kHeadDim == 64), "128-row tiles, or 192 at hd64");
  static constexpr int kConsumers = kRows / 64;
  static constexpr int kBlockM = kRows;
  static constexpr int kBlockN = 128;
  static constexpr int kStages = 3;
  static constexpr int kAtoms = kHeadDim / 64;
  static constexpr int kThreads = 128 * (1 + kConsumers);
  static_assert(kPaged || !kTma, "TMA page loads are the paged kernel's");
  /// The paged kernel loads K/V pages with TMA boxes (the producer's warp 0), not a gather.
  static constexpr bool kTmaPages = kTma;
  /// Registers a thread holds at launch (__launch_bounds__(kThreads, 1): ptxas gives each the
  /// most the 64K register file allows, in steps of 8). setmaxnreg only moves registers between
  /// the warpgroups inside that pool: a split that asks for more waits forever.
  static constexpr int kLaunchRegs = 65536 / kThreads / 8 * 8;
  /// setmaxnreg split of the CTA's kLaunchRegs · kThreads registers: the producer's, the fewest
  /// with which ptxas spills nothing (24 for the dense kernel's TMA thread; 32 for the paged
  /// gather, which holds the next tile's page id across the copies, and for the paged producer
  /// with TMA page loads, which also gathers Q and the tail tile, 48 for that one beside two
  /// consumers at hd64), and the rest, at most 240, for the consumers.
  static constexpr int kProducerRegs = !kTma ? (kPaged ? 32 : 24) : kConsumers == 2 && kHeadDim == 64 ? 48 : 32;
  static constexpr int kConsumerShare = (kLaunchRegs * (1 + kConsumers) - kProducerRegs) / kConsumers / 8 * 8;
  static constexpr int kConsumerRegs = kConsumerShare < 240 ? kConsumerShare : 240;
  static_assert(kProducerRegs * 128 + kConsumerRegs * 128 * kConsumers <= kLaunchRegs * kThreads, "register split");
  static constexpr int kQBytes = kBlockM * kHeadDim * 2;
  static constexpr int kKvBytes = kBlockN * kHeadDim * 2;  ///< K (or V) of one stage
  /// The paged producer's two pool-row tables (one per KV tile in flight), after the barriers.
  static constexpr int kRowTableBytes = kPaged ? 2 * kBlockN * 4 : 0;
  /// The stages, 1024 bytes to align the base to the swizzle atom, the mbarriers (256 bytes) and
  /// the row tables.
  static constexpr int kSmemBytes = kQBytes + 2 * kStages * kKvBytes + 1024 + 256 + kRowTableBytes;
};

/// Launch shape of PrefillSm90Shape<head_dim, paged, rows> (all zero for an unsupported
/// head_dim or tile).
struct PrefillSm90LaunchShape {
  int threads = 0;
  int block_m = 0;
  int block_n = 0;
  int smem_bytes = 0;
};

template <int kHeadDim, bool kPaged, int kRows>
constexpr PrefillSm90LaunchShape prefill_sm90_launch_shape_of() {
  using S = PrefillSm90Shape<kHeadDim, kPaged, kRows>;
  return PrefillSm90LaunchShape{S::kThreads, S::kBlockM, S::kBlockN, S::kSmemBytes};
}

/// The dense kernel's shape at `head_dim`, or (paged) the paged kernel's for `paged_rows`-row work
/// items (128, or 192 at head_dim 64).
constexpr PrefillSm90LaunchShape prefill_sm90_launch_shape(int head_dim, bool paged = false, int paged_rows = 128) {
  if (!paged) {
    return head_dim == 64    ? prefill_sm90_launch_shape_of<64, false, 192>()
           : head_dim == 128 ? prefill_sm90_launch_shape_of<128, false, 128>()
                             : PrefillSm90LaunchShape{};
  }
  if (paged_rows == 192) {
    return head_dim == 64 ? prefill_sm90_launch_shape_of<64, true, 192>() : PrefillSm90LaunchShape{};
  }
  if (paged_rows != 128) return PrefillSm90LaunchShape{};
  return head_dim == 64    ? prefill_sm90_launch_shape_of<64, true, 128>()
         : head_dim == 128 ? prefill_sm90_launch_shape_of<128, true, 128>()
                           : PrefillSm90LaunchShape{};
}

/// Parameters of prefill_sm90_kernel. The four tensor maps address BLHD bf16 tensors as 4-D
/// (d, token, head, batch) boxes with the 128-byte swizzle:
///   tma_q   q   [batch, q_len, q_heads, D]:      box (64, kBlockM, 1, 1)
///   tma_k/v k/v [batch, kv_len, kv_heads, D]:    box (64, kBlockN, 1, 1)
///   tma_out out [batch, q_len, q_heads, D]:      box (64, 64, 1, 1) (stores clip rows ≥ q_len)
/// Tokens past kv_len (the tensor's extent) load as zeros. Under `causal` query i attends keys
/// j ≤ i + kv_len − q_len (queries aligned to the end of the KV: chunked prefill).
/// Grid: (q_tiles, q_heads, batch). Within a batch the CTAs walk the heads in groups of
/// head_group (heads fastest inside a group, heaviest q tile first under causal), so the CTAs in
/// flight share the K/V of a few heads in L2.
struct PrefillSm90Params {
  TmaDescriptor tma_q;
  TmaDescriptor tma_k;
  TmaDescriptor tma_v;
  TmaDescriptor tma_out;
  float* lse;  ///< f32 natural-log LSE [batch, q_heads, q_len] (strided) or null
  int64_t lse_stride_b, lse_stride_h, lse_stride_l;
  int32_t q_len;
  int32_t kv_len;
  int32_t q_heads;
  int32_t group;    ///< q_heads / kv_heads
  int32_t q_tiles;  ///< ceil(q_len / 128)
  int32_t causal;
  float scale_log2;  ///< softmax scale · log2(e), > 0
  int32_t pingpong;  ///< nonzero: the consumer warpgroups take turns issuing wgmmas
  int32_t head_group;  ///< q heads walked together, 1..q_heads (see Grid above)
};

}  // namespace kjit::attention
