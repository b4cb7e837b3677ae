// GQA decode attention over a contiguous BLHD KV cache (family "attention.decode").
//
//   out[b, h] = softmax(scale · q[b, h] · K[b, :kv_len[b], h / group]ᵀ, masked) · V[b, :kv_len[b], h / group]
//
// ── Memory-traffic floor ───────────────────────────────────────────────────────────────────────
// Decode reads every live K and V row exactly once and does ~2·group flops per byte read (~16
// bf16-MMA flops per byte after padding M to 16), so it is bandwidth-bound on every GPU kjit
// targets. The bytes that must cross DRAM are
//     q + out:   2 · batch · q_heads · head_dim · 2
//     K + V:     Σ_b kv_len[b] · kv_heads · head_dim · 2 · 2
//     mask:      Σ_b kv_len[b] (when given)
//     splits>1:  2 · batch · q_heads · num_splits · (head_dim + 1) · 4   (partials written + read)
// and the floor is that sum over the device's read bandwidth (H200: ~4.2–4.4 TB/s; e.g.
// B16 L4096 Hkv8 D128 moves 268 MB → ≥ 63 µs). The split partials are ≤ 1–2% of K + V for the
// shapes the planner splits, which is why split-KV is nearly free once the grid is full.
//
// ── Design ─────────────────────────────────────────────────────────────────────────────────────
// * One CTA per (batch, kv head, KV split, M tile). All query heads of one KV head ("the group")
//   are the MMA M dimension, so each K/V byte fetched feeds the whole group: rows = 8 when
//   group ≤ 8 (only rows 0..7 of the m16 tile are live and rows 8..15 keep no accumulators),
//   rows = 16 otherwise, with ceil(group / 16) M tiles (separate CTAs that share the KV stream
//   through L2) for group > 16.
// * K and V stream through a 3-stage ring of 32 KiB (K + V) stages in shared memory, filled with
//   16-byte cp.async.cg copies (zero-filled, never read, past the split end or kv_len; nothing
//   is ever read past max_kv_len). Two CTAs fit per SM, so ≥ 4 stages (128 KiB) are in flight per
//   SM — enough to cover DRAM latency at full bandwidth (Little's law: ~32 GB/s/SM × ~1 µs).
//   Rows are XOR-swizzled in 16-byte chunks so ldmatrix and the cp.async stores are
//   bank-conflict-free. One __syncthreads per tile: the stage refilled at tile i is the one every
//   warp finished at tile i − 1.
// * Warps split each tile's tokens (token_groups; see DecodeShape). Q·Kᵀ: mma.sync m16n8k16 with
//   Q as A (loaded once from global into registers), K as B via ldmatrix (row-major K is the
//   "col" B operand as is). Online softmax in fp32, log2 domain: scores are multiplied once by
//   scale·log2(e) and every exponential is one ex2. P stays in registers and becomes the A
//   operand of P·V, with V as B via ldmatrix.trans. At hd256 two warps share a token group and
//   split head_dim in P·V, keeping accumulators within budget.
// * At the end the token groups' (m, l, o) are merged through shared memory (reusing the ring).
//   With one split the CTA writes out (bf16) and lse directly. With several, each CTA has its
//   split's partial, o / l (f32) and lse (log2 domain), and the splits are combined by
//   out = Σ_s 2^(lse_s − M) o_s / Σ_s 2^(lse_s − M), M = max_s lse_s (FlashDecoding;
//   attention/split_merge.cuh) in one of two ways, the family's `merge` parameter:
//     merge=kernel  (kClusterMerge false) the partials go to the caller's workspace and
//                   decode_merge_kernel (attention/decode_merge.cu: its own program, family
//                   attention.decode_merge) combines them in a second launch;
//     merge=cluster (kClusterMerge true, sm_90+, 2..kDecodeMaxClusterSplits splits) the splits of
//                   one (b, kv head, M tile) run as one thread-block cluster and combine through
//                   distributed shared memory in the same launch: no workspace, no second kernel
//                   (the protocol is at the cluster merge below).
// * Empty rows (kv_len 0, everything masked, a split past kv_len) end with l = 0: zeros and
//   lse = −inf, never NaN (see softmax.cuh).
#include "kjit/config.cuh"
#include "kjit/fast_math.cuh"
#include "kjit/float_bits.cuh"

#include "kjit/cluster.cuh"

#include "attention/decode_params.h"
#include "attention/kv_source.cuh"
#include "attention/mma.cuh"
#include "attention/softmax.cuh"
#include "attention/split_merge.cuh"

namespace kjit::attention {

namespace detail {

KJIT_DEVICE void store_bf16x4(void* dst, float a, float b, float c, float d) {
  uint2 v;
  v.x = pack_bf16x2(a, b);
  v.y = pack_bf16x2(c, d);
  *reinterpret_cast<uint2*>(dst) = v;
}
}  // namespace detail

/// Split-KV decode: see the file comment. kHeadDim ∈ {64, 128, 256}; kRows ∈ {8, 16} query heads
/// per CTA (8 when group ≤ 8); KV = ContigKV (family attention.decode) or PagedKV
/// (attention.paged_decode), see kv_source.cuh; kClusterMerge: the splits combine in a cluster
/// (sm_90+ only) instead of through the workspace. Launch: grid as DecodeParams says,
/// DecodeShape<kHeadDim>::kThreads threads, DecodeShape<kHeadDim>::kSmemBytes bytes of dynamic
/// shared memory, and under kClusterMerge with num_splits > 1 clusters of (num_splits, 1, 1).
template <int kHeadDim, int kRows, class KV = ContigKV, bool kClusterMerge = false>
__global__ void __launch_bounds__(DecodeShape<kHeadDim>::kThreads, 2)
    decode_kernel(KJIT_PARAMS DecodeParams p) {
#if KJIT_HAS_SM80
  static_assert(KJIT_HAS_SM90 || !kClusterMerge, "the cluster merge needs sm_90+ (thread-block clusters)");
  using Shape = DecodeShape<kHeadDim>;
  constexpr int kThreads = Shape::kThreads;
  constexpr int kTile = Shape::kTileTokens;
  constexpr int kStages = Shape::kStages;
  constexpr int kTokensPerWarp = Shape::kTokensPerWarp;
  constexpr int kGroups = Shape::kTokenGroups;
  constexpr int kRowBytes = kHeadDim * 2;
  constexpr int kChunks = kHeadDim / 8;            // 16-byte chunks per K/V row
  constexpr int kStageBytes = kTile * kRowBytes;   // K (or V) bytes per stage
  constexpr int kSTiles = kTokensPerWarp / 8;      // n8 score tiles per warp and KV tile
  constexpr int kKSteps = kHeadDim / 16;           // k16 steps of Q·Kᵀ
  constexpr int kWarpCols = kHeadDim / Shape::kDSplit;
  constexpr int kOTiles = kWarpCols / 8;           // n8 output tiles per warp
  constexpr bool kFull = kRows == 16;
  constexpr int kCopies = kTile * kChunks / kThreads;
  constexpr int kRowStep = kThreads / kChunks;     // rows between one thread's copies of a tile
  constexpr int kRedStride = kHeadDim + 8;         // padded: the float2 stores below hit 2 banks
  static_assert(kRows == 8 || kRows == 16, "rows is 8 or 16");
  static_assert(kTile * kChunks % kThreads == 0 && kThreads % kChunks == 0,
                "copies must divide evenly over threads, each thread keeping one chunk column");
  static_assert(kKSteps % 2 == 0 && kSTiles % 2 == 0 && kOTiles % 2 == 0, "x4 ldmatrix pairs");
  // The end of the CTA reuses the ring: the token groups' merge scratch, then (cluster merge)
  // the split's partial, kRows rows of kHeadDim f32 and kRows LSEs.
  constexpr int kScratchFloats = kGroups * kRows * kRedStride + 2 * kGroups * kRows;
  static_assert(kScratchFloats % 4 == 0, "the partial after the scratch stays 16-byte aligned");
  static_assert((kScratchFloats + kRows * kHeadDim + kRows) * 4 <= Shape::kSmemBytes,
                "the merge scratch and the split's partial must fit in the stage ring");

  uint8_t* const smem = dynamic_smem();
  const uint32_t smem_k = smem_u32(smem);
  const uint32_t smem_v = smem_k + kStages * kStageBytes;

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int tg = warp / Shape::kDSplit;  // token group
  const int dh = warp % Shape::kDSplit;  // head_dim slice of P·V
  const int g = lane >> 2;
  const int t = lane & 3;

  // blockIdx.x → (b, kv_head, split, m_tile), innermost last (the cluster merge: split
  // innermost, see DecodeParams), by multiply-high divisions.
  uint32_t idx = blockIdx.x;
  auto next_digit = [&idx](FastDiv div, int radix) {
    const uint32_t q = fast_quotient(idx, div);
    const int digit = static_cast<int>(idx - q * static_cast<uint32_t>(radix));
    idx = q;
    return digit;
  };
  int split, m_tile;
  if constexpr (kClusterMerge) {
    split = next_digit(p.num_splits_div, p.num_splits);  // == the CTA's rank in its cluster
    m_tile = next_digit(p.m_tiles_div, p.m_tiles);
  } else {
    m_tile = next_digit(p.m_tiles_div, p.m_tiles);
    split = next_digit(p.num_splits_div, p.num_splits);
  }
  const int kv_head = next_digit(p.kv_heads_div, p.kv_heads);
  const int b = static_cast<int>(idx);

  const KV kv(p, b, kv_head);
  const int kv_len = kv.length();
  int split_tokens = p.split_tokens;
  if (KV::kLookup && split_tokens == 0) {
    // Per-sequence split: this sequence's own length in num_splits ranges of whole tiles.
    const int per_split = static_cast<int>(fast_quotient(kv_len + p.num_splits - 1, p.num_splits_div));
    split_tokens = max((per_split + kTile - 1) / kTile, 1) * kTile;
  }
  const int begin = split * split_tokens;
  const int end = min(begin + split_tokens, kv_len);
  const int num_tiles = end > begin ? (end - begin + kTile - 1) / kTile : 0;
  const int head0 = kv_head * p.group + m_tile * kRows;
  const int rows_valid = min(kRows, p.group - m_tile * kRows);

  // ---- K/V producer: every thread copies kCopies 16-byte chunks of K and of V per tile, all in
  // one chunk column: rows copy_row0 + i · kRowStep. Tokens past `end` copy nothing (zero fill)
  // from a mapped row (`begin`'s). One copy routine serves both KV sources: ContigKV's rows are
  // the tokens themselves, and its page ids (zeros) are neither loaded nor shuffled.
  // PagedKV: the page ids of a tile's copies are loaded one tile ahead (fetch_id into next_id)
  // and only turned into pool rows when the copies issue (load_tile). Nothing that consumes
  // the table load sits in the iteration that issues it, so its latency (a DRAM miss on first
  // touch, queued behind the K/V stream) hides behind a whole tile of math instead of stalling
  // the warp right after the load. The fetch is unconditional inside the tile loop (tokens past
  // `end` fetch `begin`'s page, which exists whenever there is a tile), so no branch separates
  // the load from the math either. A warp's threads copy kWarpRows0 first rows, each at kCopies
  // offsets of kRowStep: kWarpIds ≤ 32 distinct rows a tile. Lane j loads the id of the warp's
  // j-th row, one load instead of kCopies per thread beside the stream's cp.async, and each
  // thread takes its ids from those lanes with shuffles when its copies issue.
  const int copy_row0 = tid / kChunks;
  const int copy_chunk = tid % kChunks;
  constexpr int kWarpRows0 = kChunks >= 32 ? 1 : 32 / kChunks;
  constexpr int kWarpIds = kWarpRows0 * kCopies;
  static_assert(kWarpIds <= 32, "a warp's page ids fit its lanes");
  const int warp_row0 = warp * 32 / kChunks;  // the warp's first copy_row0
  auto fetch_id = [&](int tile) {
    const int j = lane < kWarpIds ? lane : 0;
    const int token = begin + tile * kTile + warp_row0 + j % kWarpRows0 + (j / kWarpRows0) * kRowStep;
    return kv.page_id(token < end ? token : begin);
  };
  // Copy i (< kCopies) of a tile: one 16-byte chunk of K and one of V.
  auto copy_chunk_i = [&](int tile, int stage, int i, int warp_id) {
    const int row = copy_row0 + i * kRowStep;
    const int token = begin + tile * kTile + row;
    const bool valid = token < end;
    int id = 0;
    if constexpr (KV::kLookup) id = __shfl_sync(0xffffffffu, warp_id, copy_row0 - warp_row0 + kWarpRows0 * i);
    const int src = kv.row_on_page(id, valid ? token : begin);
    const uint32_t dst = static_cast<uint32_t>(stage * kStageBytes) + swizzle_offset<kRowBytes>(row, copy_chunk);
    cp_async_16(smem_k + dst, kv.k_row(src) + copy_chunk * 16, valid);
    cp_async_16(smem_v + dst, kv.v_row(src) + copy_chunk * 16, valid);
  };
  auto load_tile = [&](int tile, int stage, int warp_id) {
#pragma unroll
    for (int i = 0; i < kCopies; ++i) copy_chunk_i(tile, stage, i, warp_id);
  };
  int next_id = 0;

  // The prologue's kStages − 1 tiles run once per CTA: rolled loops over the tiles and their
  // copies, so the copy code is compiled once more, not kCopies times (an unrolled load_tile
  // here was a tenth of the kernel's NVVM time; issue 12, item 5).
#pragma unroll 1
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < num_tiles) {
      const int id = fetch_id(s);
#pragma unroll 1
      for (int i = 0; i < kCopies; ++i) copy_chunk_i(s, s, i, id);
    }
    cp_async_commit();
  }
  if constexpr (KV::kLookup) {
    if (num_tiles > 0) next_id = fetch_id(kStages - 1);
  }

  // ---- Q as MMA A fragments, straight from global (once per CTA, overlapping the prologue). ---
  // qa[k] = {a0, a1, a2, a3} (kFull) or {a0, a2} (rows 8..15 are zero and not kept).
  uint32_t qa[kKSteps][kFull ? 4 : 2];
  {
    const char* q_b = static_cast<const char*>(p.q) + static_cast<int64_t>(b) * p.q_stride_b * 2;
    const bool lo_ok = g < rows_valid;
    const bool hi_ok = g + 8 < rows_valid;
    const uint32_t* q_lo = reinterpret_cast<const uint32_t*>(
        q_b + static_cast<int64_t>(lo_ok ? head0 + g : head0) * p.q_stride_h * 2);
    const uint32_t* q_hi = reinterpret_cast<const uint32_t*>(
        q_b + static_cast<int64_t>(hi_ok ? head0 + g + 8 : head0) * p.q_stride_h * 2);
#pragma unroll
    for (int k = 0; k < kKSteps; ++k) {
      // 32-bit words: d = 16k + 2t lives in word 8k + t, d + 8 in word 8k + 4 + t.
      const uint32_t lo0 = lo_ok ? __ldg(q_lo + 8 * k + t) : 0u;
      const uint32_t lo1 = lo_ok ? __ldg(q_lo + 8 * k + 4 + t) : 0u;
      if constexpr (kFull) {
        qa[k][0] = lo0;
        qa[k][1] = hi_ok ? __ldg(q_hi + 8 * k + t) : 0u;
        qa[k][2] = lo1;
        qa[k][3] = hi_ok ? __ldg(q_hi + 8 * k + 4 + t) : 0u;
      } else {
        (void)q_hi;
        qa[k][0] = lo0;
        qa[k][1] = lo1;
      }
    }
  }

  // ---- Which of this lane's score columns are attended: in range and (optionally) unmasked. ---
  // Prefetched one tile ahead into registers so mask loads never stall the softmax. One uniform
  // branch on the mask's presence, and inside it unconditional loads at tokens clamped to the
  // last in range (a column past `end` reads a byte it then ignores): no branch per column, which
  // made the loop body many basic blocks and cost 8% of the kernel's compile.
  constexpr int kCols = 2 * kSTiles;  // score columns per lane and row
  const uint8_t* mask_b = p.mask != nullptr ? p.mask + static_cast<int64_t>(b) * p.mask_stride_b : nullptr;
  auto fetch_keep = [&](int tile, uint8_t (&keep)[kCols]) {
    const int base = begin + tile * kTile + tg * kTokensPerWarp + 2 * t;
#pragma unroll
    for (int i = 0; i < kCols; ++i) keep[i] = base + 8 * (i >> 1) + (i & 1) < end;
    if (mask_b != nullptr && end > 0) {  // end > 0: the clamped token is a real column
#pragma unroll
      for (int i = 0; i < kCols; ++i) {
        const int token = min(base + 8 * (i >> 1) + (i & 1), end - 1);
        keep[i] &= __ldg(mask_b + static_cast<int64_t>(token) * p.mask_stride_l) != 0;
      }
    }
  };
  uint8_t keep_next[kCols];
  fetch_keep(0, keep_next);

  float o[kOTiles][kFull ? 4 : 2];
#pragma unroll
  for (int n = 0; n < kOTiles; ++n) {
#pragma unroll
    for (int i = 0; i < (kFull ? 4 : 2); ++i) o[n][i] = 0.f;
  }
  SoftmaxRow row_lo = SoftmaxRow::empty();
  SoftmaxRow row_hi = SoftmaxRow::empty();

  const int lrow = lane & 7;  // ldmatrix: the row this lane addresses within its 8x8 matrix
  const int lmat = lane >> 3; // ldmatrix: which of the four matrices
  const uint32_t k_lane = static_cast<uint32_t>((tg * kTokensPerWarp + lrow) * kRowBytes);
  const uint32_t v_lane = static_cast<uint32_t>((tg * kTokensPerWarp + (lmat & 1) * 8 + lrow) * kRowBytes);
  const int v_chunk0 = dh * (kWarpCols / 8) + (lmat >> 1);

  for (int tile = 0; tile < num_tiles; ++tile) {
    cp_async_wait<kStages - 2>();
    __syncthreads();
    {
      const int next = tile + kStages - 1;
      if (next < num_tiles) load_tile(next, next % kStages, next_id);
      cp_async_commit();
      // Tile next + 1's page ids (clamped to `begin` past the end: a valid, unused id).
      if constexpr (KV::kLookup) next_id = fetch_id(next + 1);
    }
    uint8_t keep[kCols];
#pragma unroll
    for (int i = 0; i < kCols; ++i) keep[i] = keep_next[i];
    fetch_keep(tile + 1, keep_next);  // past the last tile: every column out of range

    const int stage = tile % kStages;
    const uint32_t k_stage = smem_k + static_cast<uint32_t>(stage * kStageBytes) + k_lane;
    const uint32_t v_stage = smem_v + static_cast<uint32_t>(stage * kStageBytes) + v_lane;

    // S = Q · Kᵀ over this warp's tokens; even and odd k steps accumulate separately so each
    // n8 tile has two independent MMA chains.
    float s_even[kSTiles][kFull ? 4 : 2];
    float s_odd[kSTiles][kFull ? 4 : 2];
#pragma unroll
    for (int j = 0; j < kSTiles; ++j) {
#pragma unroll
      for (int i = 0; i < (kFull ? 4 : 2); ++i) s_even[j][i] = s_odd[j][i] = 0.f;
    }
#pragma unroll
    for (int kp = 0; kp < kKSteps / 2; ++kp) {
      const uint32_t chunk_off = static_cast<uint32_t>((((kp << 2) | lmat) ^ lrow) << 4);
#pragma unroll
      for (int j = 0; j < kSTiles; ++j) {
        uint32_t kb[4];
        ldmatrix_x4(kb, k_stage + static_cast<uint32_t>(j * 8 * kRowBytes) + chunk_off);
        if constexpr (kFull) {
          mma_bf16_16816(s_even[j], qa[2 * kp], kb[0], kb[1]);
          mma_bf16_16816(s_odd[j], qa[2 * kp + 1], kb[2], kb[3]);
        } else {
          mma_bf16_16816_upper(s_even[j][0], s_even[j][1], qa[2 * kp][0], qa[2 * kp][1], kb[0], kb[1]);
          mma_bf16_16816_upper(s_odd[j][0], s_odd[j][1], qa[2 * kp + 1][0], qa[2 * kp + 1][1], kb[2], kb[3]);
        }
      }
    }

    // Online softmax (log2 domain); masked columns are −inf.
    float p_lo[kCols];
    float p_hi[kCols];
#pragma unroll
    for (int j = 0; j < kSTiles; ++j) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const bool kept = keep[2 * j + e] != 0;
        p_lo[2 * j + e] = kept ? (s_even[j][e] + s_odd[j][e]) * p.scale_log2 : neg_inf();
        if constexpr (kFull) {
          p_hi[2 * j + e] = kept ? (s_even[j][2 + e] + s_odd[j][2 + e]) * p.scale_log2 : neg_inf();
        }
      }
    }
    const float alpha_lo = row_lo.update(p_lo);
    float alpha_hi = 1.f;
    if constexpr (kFull) alpha_hi = row_hi.update(p_hi);
#pragma unroll
    for (int n = 0; n < kOTiles; ++n) {
      o[n][0] *= alpha_lo;
      o[n][1] *= alpha_lo;
      if constexpr (kFull) {
        o[n][2] *= alpha_hi;
        o[n][3] *= alpha_hi;
      }
    }

    // O += P · V: P from the score registers (two n8 score tiles = one k16 A fragment).
#pragma unroll
    for (int kb = 0; kb < kSTiles / 2; ++kb) {
      const uint32_t pa0 = pack_bf16x2(p_lo[4 * kb + 0], p_lo[4 * kb + 1]);
      const uint32_t pa2 = pack_bf16x2(p_lo[4 * kb + 2], p_lo[4 * kb + 3]);
      uint32_t pa[4] = {pa0, 0u, pa2, 0u};
      if constexpr (kFull) {
        pa[1] = pack_bf16x2(p_hi[4 * kb + 0], p_hi[4 * kb + 1]);
        pa[3] = pack_bf16x2(p_hi[4 * kb + 2], p_hi[4 * kb + 3]);
      }
      const uint32_t v_rows = v_stage + static_cast<uint32_t>(kb * 16 * kRowBytes);
#pragma unroll
      for (int np = 0; np < kOTiles / 2; ++np) {
        uint32_t vb[4];
        ldmatrix_x4_trans(vb, v_rows + static_cast<uint32_t>(((v_chunk0 + 2 * np) ^ lrow) << 4));
        if constexpr (kFull) {
          mma_bf16_16816(o[2 * np], pa, vb[0], vb[1]);
          mma_bf16_16816(o[2 * np + 1], pa, vb[2], vb[3]);
        } else {
          mma_bf16_16816_upper(o[2 * np][0], o[2 * np][1], pa0, pa2, vb[0], vb[1]);
          mma_bf16_16816_upper(o[2 * np + 1][0], o[2 * np + 1][1], pa0, pa2, vb[2], vb[3]);
        }
      }
    }
  }

  // The KV stream is done: a split launch's merge kernel (launched with overlap_previous) may take
  // SM slots from here on and wait there for this grid's partials.
  KJIT_LAUNCH_DEPENDENTS();

  // ---- Merge the token groups' (m, l, o) through shared memory (the ring is free now). --------
  cp_async_wait<0>();
  __syncthreads();
  float* red_o = reinterpret_cast<float*>(smem);  // [kGroups][kRows][kRedStride]
  float* red_m = red_o + kGroups * kRows * kRedStride;
  float* red_l = red_m + kGroups * kRows;
  const float l_lo = row_lo.total();
  float l_hi = 0.f;
  if constexpr (kFull) l_hi = row_hi.total();
  if (dh == 0 && t == 0) {
    red_m[tg * kRows + g] = row_lo.m;
    red_l[tg * kRows + g] = l_lo;
    if constexpr (kFull) {
      red_m[tg * kRows + g + 8] = row_hi.m;
      red_l[tg * kRows + g + 8] = l_hi;
    }
  }
#pragma unroll
  for (int n = 0; n < kOTiles; ++n) {
    const int col = dh * kWarpCols + n * 8 + 2 * t;
    *reinterpret_cast<float2*>(red_o + (tg * kRows + g) * kRedStride + col) = make_float2(o[n][0], o[n][1]);
    if constexpr (kFull) {
      *reinterpret_cast<float2*>(red_o + (tg * kRows + g + 8) * kRedStride + col) =
          make_float2(o[n][2], o[n][3]);
    }
  }
  __syncthreads();

  const bool direct = p.num_splits == 1;
  // The cluster merge's partial of this split: [kRows][kHeadDim] f32 and [kRows] LSEs (log2).
  float* part_o = red_o + kScratchFloats;
  float* part_lse = part_o + kRows * kHeadDim;
  constexpr int kQuads = kHeadDim / 4;
  for (int item = tid; item < rows_valid * kQuads; item += kThreads) {
    const int r = item / kQuads;
    const int c = (item % kQuads) * 4;
    float m_max = neg_inf();
#pragma unroll
    for (int i = 0; i < kGroups; ++i) m_max = fmaxf(m_max, red_m[i * kRows + r]);
    float l_sum = 0.f;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int i = 0; i < kGroups; ++i) {
      const float w = merge_weight(red_m[i * kRows + r], m_max);
      const float4 x = *reinterpret_cast<const float4*>(red_o + (i * kRows + r) * kRedStride + c);
      l_sum += w * red_l[i * kRows + r];
      acc.x += w * x.x;
      acc.y += w * x.y;
      acc.z += w * x.z;
      acc.w += w * x.w;
    }
    const float inv = l_sum > 0.f ? fast_rcp(l_sum) : 0.f;
    const int head = head0 + r;
    if (direct) {
      char* dst = static_cast<char*>(p.out) +
                  (static_cast<int64_t>(b) * p.out_stride_b + static_cast<int64_t>(head) * p.out_stride_h + c) * 2;
      detail::store_bf16x4(dst, acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv);
    } else {
      float* dst = kClusterMerge ? part_o + r * kHeadDim + c
                                 : p.o_part + ((static_cast<int64_t>(b) * p.q_heads + head) * p.num_splits + split) *
                                                  kHeadDim + c;
      *reinterpret_cast<float4*>(dst) = make_float4(acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv);
    }
  }
  if (tid < rows_valid) {
    const int r = tid;
    float m_max = neg_inf();
#pragma unroll
    for (int i = 0; i < kGroups; ++i) m_max = fmaxf(m_max, red_m[i * kRows + r]);
    float l_sum = 0.f;
#pragma unroll
    for (int i = 0; i < kGroups; ++i) l_sum += merge_weight(red_m[i * kRows + r], m_max) * red_l[i * kRows + r];
    const float lse2 = l_sum > 0.f ? m_max + fast_log2(l_sum) : neg_inf();
    const int head = head0 + r;
    if (direct) {
      if (p.lse != nullptr) p.lse[static_cast<int64_t>(b) * p.lse_stride_b + static_cast<int64_t>(head) * p.lse_stride_h] = lse2 * kLn2;
    } else if constexpr (kClusterMerge) {
      part_lse[r] = lse2;
    } else {
      p.lse_part[(static_cast<int64_t>(b) * p.q_heads + head) * p.num_splits + split] = lse2;
    }
  }

#if KJIT_HAS_SM90
  if constexpr (kClusterMerge) {
    // ---- The cluster merge (merge=cluster, num_splits > 1) --------------------------------------
    // Protocol. The launch makes the num_splits CTAs of one (b, kv_head, m_tile) one cluster of
    // (num_splits, 1, 1), so a CTA's rank in its cluster is its split. Every CTA of the cluster
    // has just written its split's partial (part_o, part_lse) into its own shared memory.
    //   1. Cluster barrier (arrive.release / wait.acquire): each partial is complete and visible
    //      to the whole cluster. Every thread of every CTA passes it: nothing above returns early
    //      (an empty split ends with l = 0, its partial zeros with lse −inf).
    //   2. Each CTA merges its share of the output: the items (row r, 4 columns c..c+3) numbered
    //      split · kThreads + tid, stepping by num_splits · kThreads. For each it reads every
    //      peer's lse and o with ld.shared::cluster, in split order 0, 1, ..., and combines them
    //      through SplitMerge (the merge kernel's arithmetic: the same bits from the same
    //      partials), then writes out (bf16) and, at c = 0, lse (natural log).
    //   3. Cluster barrier (relaxed: it orders no data, and a release would wait for the stores
    //      of out and lse): no CTA exits, releasing its shared memory, while a peer may still
    //      read it.
    // Nothing touches global memory but q, K, V, the page table, out and lse.
    if (!direct) {
      sm90::cluster_sync();
      const int n = p.num_splits;
      const uint32_t lse_base = smem_u32(part_lse);
      const uint32_t o_base = smem_u32(part_o);
      for (int item = split * kThreads + tid; item < rows_valid * kQuads; item += n * kThreads) {
        const int r = item / kQuads;
        const int c = (item % kQuads) * 4;
        float lse_s[kDecodeMaxClusterSplits];
        float m_max = neg_inf();
#pragma unroll
        for (int s = 0; s < kDecodeMaxClusterSplits; ++s) {
          if (s < n) {
            lse_s[s] = sm90::ld_shared_cluster_f32(sm90::map_shared_rank(lse_base + r * 4, s));
            m_max = fmaxf(m_max, lse_s[s]);
          }
        }
        SplitMerge merge = SplitMerge::over(m_max);
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int s = 0; s < kDecodeMaxClusterSplits; ++s) {
          if (s < n) {
            merge.next(lse_s[s]);
            const float4 x =
                sm90::ld_shared_cluster_f32x4(sm90::map_shared_rank(o_base + (r * kHeadDim + c) * 4, s));
            acc.x = merge.fold(acc.x, x.x);
            acc.y = merge.fold(acc.y, x.y);
            acc.z = merge.fold(acc.z, x.z);
            acc.w = merge.fold(acc.w, x.w);
          }
        }
        const float inv = merge.scale();
        const int head = head0 + r;
        char* dst = static_cast<char*>(p.out) +
                    (static_cast<int64_t>(b) * p.out_stride_b + static_cast<int64_t>(head) * p.out_stride_h + c) * 2;
        detail::store_bf16x4(dst, acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv);
        if (c == 0 && p.lse != nullptr) {
          p.lse[static_cast<int64_t>(b) * p.lse_stride_b + static_cast<int64_t>(head) * p.lse_stride_h] = merge.lse();
        }
      }
      sm90::cluster_sync_relaxed();
    }
  }
#endif
#endif
}

}  // namespace kjit::attention
