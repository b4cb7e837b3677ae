// Split-Q GQA prefill attention (families "attention.prefill" and "attention.paged_prefill"):
//
//   out[b, i, h] = softmax_j(scale · q[b, i, h] · k[b, j, h / group] , masked) · v[b, j, h / group]
//
// over keys j < kv_len(b), and under `causal` only j ≤ i + kv_len(b) − q_len(b) (queries aligned
// to the end of the KV: chunked prefill), and under a bool mask only where mask[b, i, j] is set.
// One kernel body, templated on the Q schedule (which query rows a CTA owns) and the KV source:
//   DenseQSchedule  + ContigKV: q [batch, q_len, q_heads, D], k/v [batch, kv_len, kv_heads, D]
//   PackedQSchedule + PagedKV:  q [total_q, q_heads, D] ragged by qo_indptr, k/v a page pool
// (the Q schedule decides which rows a CTA owns; the KV source where its keys live).
//
// ── Design (FlashAttention-2 style, mma.sync m16n8k16 bf16, sm_80+) ────────────────────────────
// * A CTA owns kBlockM = 128 (or 64, for short queries) query rows of one (request, q head);
//   its warps own 16 · kMTiles consecutive rows each (PrefillShape). The Q tile is copied to
//   shared memory once; K and V tiles of 64 tokens stream through a kStages-deep cp.async ring,
//   consumed 32 keys per softmax step (64 at hd256) (16-byte copies, rows
//   XOR-swizzled in 16-byte chunks so ldmatrix and the copies are bank-conflict-free; tokens
//   past what the CTA needs are zero-filled, never read). One __syncthreads per KV tile: the
//   stage refilled at tile i is the one every warp finished at tile i − 1.
// * S = Q·Kᵀ with Q as the A operand (ldmatrix from the resident Q tile; hd64 keeps it in
//   registers) and K as B (ldmatrix of row-major K). With kMTiles = 2 every K/V fragment feeds
//   two MMAs, which halves shared-memory traffic per flop (hd64/hd128). Online softmax in f32 in
//   the log2 domain with the scale folded into one FFMA per score; P stays in registers as the A
//   operand of O += P·V (V via ldmatrix.trans), rounded to bf16 as FlashAttention does.
// * Causal: a CTA only walks the KV tiles its last row can see; per-element masks run only on
//   tiles that cross the diagonal, the kv_len tail or (kMask) always; a warp skips tiles that
//   none of its rows can see. The grid is walked heaviest-first (detail::flat_work) so the longest
//   CTAs start earliest.
// * The epilogue normalizes by the row sum l, stages O as bf16 in the warp's own rows of the Q
//   tile and writes 16-byte row chunks; LSE = (m + log2 l) · ln 2, −inf and zeros for a row that
//   attends nothing (kv_len 0, everything masked, or a causal row before the first key).
//
// ── Roofline (H200) ─────────────────────────────────────────────────────────────────────────────
// Prefill is compute-bound: 4 · q_len · kv_len · D flops per (b, head) (half of that under
// causal) against reading Q/K/V once per CTA row-block from L2. mma.sync reaches only part of
// Hopper's 989 TFLOP/s dense bf16 peak (that needs wgmma); FlashAttention-2, on the same
// mma.sync path, reaches ~320–340 TFLOP/s at hd128, which is the target.
#include "kjit/config.cuh"
#include "kjit/fast_math.cuh"
#include "kjit/float_bits.cuh"

#include "attention/kv_source.cuh"
#include "attention/mma.cuh"
#include "attention/prefill_params.h"
#include "attention/softmax.cuh"
#include "attention/work_order.cuh"

namespace kjit::attention {

/// One CTA's work item, as a Q schedule resolves it.
struct QWork {
  int b;
  int head;
  int q_tile;  ///< request-local tile: rows q_tile · kBlockM ..
  int q_len;   ///< the request's query rows
  int64_t q_base;    ///< element offset of the request's row 0 of this head in q
  int64_t out_base;  ///< ... in out
  int64_t lse_base;  ///< ... in lse (rows then step by lse_stride_l)
};

namespace detail {
/// The flat CTA index (gridDim.x · gridDim.y = q_tiles · q_heads) and the (head, work index) it
/// maps to, in head_group_order (attention/work_order.cuh).
KJIT_DEVICE void flat_work(const PrefillParams& p, int& head, int& item) {
  const int flat = static_cast<int>(blockIdx.x + blockIdx.y * gridDim.x);
  head_group_order(flat, p.q_heads, p.q_tiles, p.head_group, p.causal != 0, head, item);
}
}  // namespace detail

/// Rectangular work: grid (ceil(q_len / kBlockM), q_heads, batch), q [batch, q_len, q_heads, D].
struct DenseQSchedule {
  KJIT_DEVICE static QWork resolve(const PrefillParams& p) {
    QWork w;
    detail::flat_work(p, w.head, w.q_tile);
    w.b = static_cast<int>(blockIdx.z);
    w.q_len = p.q_len;
    w.q_base = static_cast<int64_t>(w.b) * p.q_stride_b + static_cast<int64_t>(w.head) * p.q_stride_h;
    w.out_base = static_cast<int64_t>(w.b) * p.out_stride_b + static_cast<int64_t>(w.head) * p.out_stride_h;
    w.lse_base = static_cast<int64_t>(w.b) * p.lse_stride_b + static_cast<int64_t>(w.head) * p.lse_stride_h;
    return w;
  }
};

/// Ragged work from the plan's map: grid (num_work, q_heads); work item i is request
/// q_tile_to_batch[i]'s q tile q_tile_to_index[i], and that request's rows start at qo_indptr[b]
/// of the packed [total_q, q_heads, D] q. O(1) per CTA, no scan.
struct PackedQSchedule {
  KJIT_DEVICE static QWork resolve(const PrefillParams& p) {
    QWork w;
    int item;
    detail::flat_work(p, w.head, item);
    w.b = __ldg(p.q_tile_to_batch + item);
    w.q_tile = __ldg(p.q_tile_to_index + item);
    const int first = __ldg(p.qo_indptr + w.b);
    w.q_len = __ldg(p.qo_indptr + w.b + 1) - first;
    w.q_base = static_cast<int64_t>(first) * p.q_stride_l + static_cast<int64_t>(w.head) * p.q_stride_h;
    w.out_base = static_cast<int64_t>(first) * p.out_stride_l + static_cast<int64_t>(w.head) * p.out_stride_h;
    w.lse_base = static_cast<int64_t>(first) * p.lse_stride_l + static_cast<int64_t>(w.head) * p.lse_stride_h;
    return w;
  }
};

/// See the file comment. kHeadDim ∈ {64, 128, 256}; kBlockM ∈ {64, 128} query rows per CTA;
/// kMask: read PrefillParams::mask; QSchedule ∈ {DenseQSchedule, PackedQSchedule};
/// KV ∈ {ContigKV, PagedKV}. Launch: PrefillShape<kHeadDim, kBlockM>::kThreads threads,
/// kSmemBytes of dynamic shared memory, the grid the schedule names.
template <int kHeadDim, int kBlockM, bool kMask, class QSchedule, class KV>
__global__ void __launch_bounds__(PrefillShape<kHeadDim, kBlockM>::kThreads,
                                  PrefillShape<kHeadDim, kBlockM>::kMinCtasPerSm)
    prefill_kernel(KJIT_PARAMS PrefillParams p) {
#if KJIT_HAS_SM80
  using Shape = PrefillShape<kHeadDim, kBlockM>;
  constexpr int kThreads = Shape::kThreads;
  constexpr int kBlockN = Shape::kBlockN;
  constexpr int kStages = Shape::kStages;
  constexpr int kMTiles = Shape::kMTiles;
  constexpr int kWarpRows = Shape::kWarpRows;
  constexpr int kRowBytes = kHeadDim * 2;
  constexpr int kChunks = kHeadDim / 8;                     // 16-byte chunks per row
  constexpr int kKSteps = kHeadDim / 16;                    // k16 steps of Q·Kᵀ
  constexpr int kSubN = Shape::kSubN;                       // keys per softmax step
  constexpr int kSubTiles = kSubN / 8;                      // n8 score tiles per step
  constexpr int kOTiles = kHeadDim / 8;                     // n8 output tiles
  constexpr int kRowStep = kThreads / kChunks;              // rows between one thread's copies
  constexpr int kKvCopies = kBlockN * kChunks / kThreads;   // per thread, of K (and of V) per tile
  constexpr int kQCopies = kBlockM * kChunks / kThreads;
  constexpr bool kQInRegs = kHeadDim == 64;
  static_assert(kThreads % kChunks == 0 && kBlockN % kRowStep == 0 && kBlockM % kRowStep == 0,
                "copies must divide evenly, each thread keeping one chunk column");
  static_assert(kSubTiles % 2 == 0 && kOTiles % 2 == 0 && kBlockN % kSubN == 0, "x4 ldmatrix pairs");
  static_assert(kWarpRows * kChunks % 32 == 0, "epilogue chunks divide over a warp");

  extern __shared__ __align__(128) uint8_t smem[];
  const uint32_t smem_q = smem_u32(smem);
  const uint32_t smem_k = smem_q + Shape::kQBytes;
  const uint32_t smem_v = smem_k + kStages * Shape::kKvTileBytes;

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int g = lane >> 2;
  const int t = lane & 3;
  const int lrow = lane & 7;   // ldmatrix: the row this lane addresses within its 8x8 matrix
  const int lmat = lane >> 3;  // ldmatrix: which of the four matrices

  const QWork w = QSchedule::resolve(p);
  const int kv_head = w.head / p.group;
  const KV kv(p, w.b, kv_head);
  const int kv_len = kv.length();
  const int q0 = w.q_tile * kBlockM;           // request-local row of the CTA's first query
  const int q_rows = min(kBlockM, w.q_len - q0);
  const int diag = kv_len - w.q_len;           // causal: row i sees keys j ≤ i + diag
  const bool causal = p.causal != 0;
  // Keys this CTA needs: [0, kv_end). Under causal, what its last row can see.
  const int kv_end = causal ? max(min(kv_len, q0 + q_rows + diag), 0) : kv_len;
  const int num_tiles = (kv_end + kBlockN - 1) / kBlockN;

  // ---- Q tile → shared memory (commit group 0). Rows past the request's queries are zeros. --
  const int copy_row0 = tid / kChunks;
  const int copy_chunk = tid % kChunks;
  {
    const char* q_req = static_cast<const char*>(p.q) + w.q_base * 2;
#pragma unroll
    for (int i = 0; i < kQCopies; ++i) {
      const int row = copy_row0 + i * kRowStep;
      const bool valid = row < q_rows;
      const char* src = q_req + static_cast<int64_t>(q0 + (valid ? row : 0)) * p.q_stride_l * 2 + copy_chunk * 16;
      cp_async_16(smem_q + swizzle_offset<kRowBytes>(row, copy_chunk), src, valid);
    }
    cp_async_commit();
  }

  // ---- K/V producer: kKvCopies chunks of K and of V per thread and tile, rows
  // copy_row0 + i · kRowStep, all in chunk column copy_chunk. Tokens ≥ kv_end copy nothing
  // (zero fill) from a mapped row (token 0's). ------------------------------------------------
  auto locate_tile = [&](int tile, int (&rows)[kKvCopies]) {
#pragma unroll
    for (int i = 0; i < kKvCopies; ++i) {
      const int token = tile * kBlockN + copy_row0 + i * kRowStep;
      rows[i] = kv.locate(token < kv_end ? token : 0);
    }
  };
  auto load_tile = [&](int tile, int stage, const int (&rows)[kKvCopies]) {
#pragma unroll
    for (int i = 0; i < kKvCopies; ++i) {
      const int row = copy_row0 + i * kRowStep;
      const bool valid = tile * kBlockN + row < kv_end;
      const uint32_t dst = static_cast<uint32_t>(stage * Shape::kKvTileBytes) + swizzle_offset<kRowBytes>(row, copy_chunk);
      cp_async_16(smem_k + dst, kv.k_row(rows[i]) + copy_chunk * 16, valid);
      cp_async_16(smem_v + dst, kv.v_row(rows[i]) + copy_chunk * 16, valid);
    }
  };
  // With a page table (KV::kLookup) the pool rows of a tile are looked up one tile before its
  // copies are issued, one row per thread, and parked in a two-slot table in shared memory
  // (row_table[tile % 2][row]): the table load's latency hides behind a tile of math and costs
  // one register, not one per copy.
  int* row_table = reinterpret_cast<int*>(smem + Shape::kQBytes + kStages * 2 * Shape::kKvTileBytes);

  // ---- Per-warp state. ------------------------------------------------------------------------
  const int warp_row0 = q0 + warp * kWarpRows;  // request-local row of this warp's first query
  // A warp whose rows are all past the request's queries computes nothing (its rows are not
  // written); it still takes part in the copies and barriers.
  const bool warp_active = warp * kWarpRows < q_rows;
  const float scale_log2 = p.scale_log2;

  float o[kMTiles][kOTiles][4];
#pragma unroll
  for (int mi = 0; mi < kMTiles; ++mi)
#pragma unroll
    for (int n = 0; n < kOTiles; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) o[mi][n][i] = 0.f;
  float row_m[kMTiles][2];  // running max (log2 domain) of rows g and g + 8 of each m tile
  float row_l[kMTiles][2];  // this lane's partial row sums
#pragma unroll
  for (int mi = 0; mi < kMTiles; ++mi) {
    row_m[mi][0] = row_m[mi][1] = neg_inf();
    row_l[mi][0] = row_l[mi][1] = 0.f;
  }

  // ldmatrix lane addresses, see kjit/mma.cuh for the layouts. Every operand uses matrix
  // lmat = (rows +8 if lmat & 1, 16-byte chunk +1 if lmat & 2): for Q (A) that is a0..a3, for K
  // (B of Q·Kᵀ) {b0 of n8 tile 0, b0 of tile 1, b1 of tile 0, b1 of tile 1}, for V (B of P·V,
  // transposed) {b0, b1 of n8 tile 0, b0, b1 of tile 1}. Rows r of a tile sit at r · kRowBytes;
  // the 16-byte chunk 8a + c (c < 8) of row r at ((8a + c) ^ (r & 7)) · 16 = 128a + (c ^ r) · 16,
  // and all rows a lane addresses have r & 7 = lrow, so four per-lane values cover every chunk
  // this lane reads: chunk_off[j] for c = 2j + (lmat >> 1).
  uint32_t chunk_off[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) chunk_off[j] = static_cast<uint32_t>(((2 * j + (lmat >> 1)) ^ lrow) << 4);
  // The byte offset of chunk pair index `pair` (chunks 2·pair and 2·pair + 1) for this lane.
  auto pair_off = [&](int pair) { return static_cast<uint32_t>((pair >> 2) * 128) + chunk_off[pair & 3]; };
  const uint32_t q_lane = static_cast<uint32_t>((warp * kWarpRows + (lmat & 1) * 8 + lrow) * kRowBytes);
  const uint32_t kv_lane = static_cast<uint32_t>(((lmat & 1) * 8 + lrow) * kRowBytes);

  uint32_t q_regs[kQInRegs ? kMTiles : 1][kQInRegs ? kKSteps : 1][4];  // filled before tile 0

  const uint8_t* mask_b = nullptr;
  if constexpr (kMask) mask_b = p.mask + static_cast<int64_t>(w.b) * p.mask_stride_b;

  // One softmax step over kSubN keys starting at key kv0, whose K and V rows start at the lane
  // addresses k_stage / v_stage: S = Q·Kᵀ, masks, online softmax, O += P·V.
  auto attend = [&](const int kv0, const uint32_t k_stage, const uint32_t v_stage) {
    // ---- S = Q · Kᵀ (raw scores, f32). -----------------------------------------------------
    float s[kMTiles][kSubTiles][4];
#pragma unroll
    for (int mi = 0; mi < kMTiles; ++mi)
#pragma unroll
      for (int n = 0; n < kSubTiles; ++n)
#pragma unroll
        for (int i = 0; i < 4; ++i) s[mi][n][i] = 0.f;
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) {
      uint32_t qa[kMTiles][4];
#pragma unroll
      for (int mi = 0; mi < kMTiles; ++mi) {
        if constexpr (kQInRegs) {
#pragma unroll
          for (int i = 0; i < 4; ++i) qa[mi][i] = q_regs[mi][ks][i];
        } else {
          ldmatrix_x4(qa[mi], smem_q + q_lane + static_cast<uint32_t>(mi * 16 * kRowBytes) + pair_off(ks));
        }
      }
#pragma unroll
      for (int np = 0; np < kSubTiles / 2; ++np) {
        uint32_t kb[4];
        ldmatrix_x4(kb, k_stage + static_cast<uint32_t>(np * 16 * kRowBytes) + pair_off(ks));
#pragma unroll
        for (int mi = 0; mi < kMTiles; ++mi) {
          mma_bf16_16816(s[mi][2 * np], qa[mi], kb[0], kb[2]);
          mma_bf16_16816(s[mi][2 * np + 1], qa[mi], kb[1], kb[3]);
        }
      }
    }

    // ---- Masks: only where this warp's rows cross the causal diagonal or the kv_len tail, or
    // always with a bool mask. Masked scores become −inf. ---------------------------------------
    const bool need_mask = kMask || kv0 + kSubN > kv_len || (causal && kv0 + kSubN - 1 > warp_row0 + diag);
    if (need_mask) {
#pragma unroll
      for (int mi = 0; mi < kMTiles; ++mi) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int row = warp_row0 + mi * 16 + half * 8 + g;
          const int limit = causal ? min(kv_len, row + diag + 1) : kv_len;
          const uint8_t* mask_row = nullptr;
          if constexpr (kMask) mask_row = mask_b + static_cast<int64_t>(row) * p.mask_stride_q;
          const bool row_ok = row < w.q_len;
#pragma unroll
          for (int n = 0; n < kSubTiles; ++n) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int col = kv0 + n * 8 + 2 * t + e;
              bool keep = col < limit;
              if constexpr (kMask) {
                keep = keep && row_ok && __ldg(mask_row + static_cast<int64_t>(col) * p.mask_stride_k) != 0;
              }
              if (!keep) s[mi][n][half * 2 + e] = neg_inf();
            }
          }
        }
      }
    }

    // ---- Online softmax (log2 domain; the scale folded into one FFMA per score). ------------
    float alphas[kMTiles][2];
#pragma unroll
    for (int mi = 0; mi < kMTiles; ++mi) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        float mx = neg_inf();
#pragma unroll
        for (int n = 0; n < kSubTiles; ++n) mx = fmaxf(mx, fmaxf(s[mi][n][half * 2], s[mi][n][half * 2 + 1]));
        mx = quad_max(mx);
        const float m_new = fmaxf(row_m[mi][half], mx * scale_log2);
        const float base = safe_max(m_new);
        const float alpha = fast_exp2(row_m[mi][half] - base);
        row_m[mi][half] = m_new;
        float sum = 0.f;
#pragma unroll
        for (int n = 0; n < kSubTiles; ++n) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float pr = fast_exp2(fmaf(s[mi][n][half * 2 + e], scale_log2, -base));
            s[mi][n][half * 2 + e] = pr;
            sum += pr;
          }
        }
        row_l[mi][half] = row_l[mi][half] * alpha + sum;
        alphas[mi][half] = alpha;
      }
    }
    // Once a row's running max settles (usually after a few tiles) its factor is exactly 1:
    // the warp skips rescaling its accumulators when all of its rows' factors are.
    bool rescale = false;
#pragma unroll
    for (int mi = 0; mi < kMTiles; ++mi) rescale = rescale || alphas[mi][0] != 1.f || alphas[mi][1] != 1.f;
    if (__any_sync(0xffffffffu, rescale)) {
#pragma unroll
      for (int mi = 0; mi < kMTiles; ++mi)
#pragma unroll
        for (int n = 0; n < kOTiles; ++n)
#pragma unroll
          for (int i = 0; i < 4; ++i) o[mi][n][i] *= alphas[mi][i >> 1];
    }

    // ---- O += P · V: P from the score registers (two n8 score tiles = one k16 A fragment). ---
#pragma unroll
    for (int kk = 0; kk < kSubTiles / 2; ++kk) {
      uint32_t pa[kMTiles][4];
#pragma unroll
      for (int mi = 0; mi < kMTiles; ++mi) {
        pa[mi][0] = pack_bf16x2(s[mi][2 * kk][0], s[mi][2 * kk][1]);
        pa[mi][1] = pack_bf16x2(s[mi][2 * kk][2], s[mi][2 * kk][3]);
        pa[mi][2] = pack_bf16x2(s[mi][2 * kk + 1][0], s[mi][2 * kk + 1][1]);
        pa[mi][3] = pack_bf16x2(s[mi][2 * kk + 1][2], s[mi][2 * kk + 1][3]);
      }
      const uint32_t v_rows = v_stage + static_cast<uint32_t>(kk * 16 * kRowBytes);
#pragma unroll
      for (int np = 0; np < kOTiles / 2; ++np) {
        uint32_t vb[4];
        ldmatrix_x4_trans(vb, v_rows + pair_off(np));
#pragma unroll
        for (int mi = 0; mi < kMTiles; ++mi) {
          mma_bf16_16816(o[mi][2 * np], pa[mi], vb[0], vb[1]);
          mma_bf16_16816(o[mi][2 * np + 1], pa[mi], vb[2], vb[3]);
        }
      }
    }
  };

  // The first kStages − 1 iterations (tile < 0) are the prologue: they only issue tiles
  // 0 .. kStages − 2, whose pool rows they look up directly, so the copy code is compiled once,
  // not once more for a separate prologue (issue 12, item 5).
  for (int tile = num_tiles > 0 ? 1 - kStages : 0; tile < num_tiles; ++tile) {
    if (tile >= 0) {
      if constexpr (kQInRegs) {
        if (tile == 0) {
          cp_async_wait<kStages - 1>();  // group 0 (Q) has landed
          __syncthreads();
#pragma unroll
          for (int mi = 0; mi < kMTiles; ++mi)
#pragma unroll
            for (int ks = 0; ks < kKSteps; ++ks)
              ldmatrix_x4(q_regs[mi][ks], smem_q + q_lane + static_cast<uint32_t>(mi * 16 * kRowBytes) + pair_off(ks));
        }
      }
      cp_async_wait<kStages - 2>();
      __syncthreads();
    }
    const int next = tile + kStages - 1;
    if (next < num_tiles) {
      int rows[kKvCopies];
      if (KV::kLookup && tile >= 0) {
#pragma unroll
        for (int i = 0; i < kKvCopies; ++i) rows[i] = row_table[(next % 2) * kBlockN + copy_row0 + i * kRowStep];
      } else {
        locate_tile(next, rows);
      }
      load_tile(next, next % kStages, rows);
    }
    cp_async_commit();
    // The page-table lookup for tile next + 1, stored at the end of this iteration (the first
    // one that tile 0 reads is made by the last prologue iteration).
    const bool lookup = KV::kLookup && tid < kBlockN && tile >= -1 && next + 1 < num_tiles;
    int looked_up = 0;
    if (lookup) {
      const int token = (next + 1) * kBlockN + tid;
      looked_up = kv.locate(token < kv_end ? token : 0);
    }
    if (tile < 0) {
      if (lookup) row_table[((next + 1) % 2) * kBlockN + tid] = looked_up;
      continue;
    }

    const int stage = tile % kStages;
    // Not unrolled: each softmax step is a large body (Q·Kᵀ, softmax, P·V) behind its own
    // branch, so unrolling the two steps a tile of hd64/hd128 mostly doubled what NVVM and ptxas
    // compile (~1.2–1.4× of those programs' compile time; issue 12, item 5).
#pragma unroll 1
    for (int sub = 0; sub < kBlockN / kSubN; ++sub) {
      const int kv0 = tile * kBlockN + sub * kSubN;
      // A warp computes only steps some row of it can see: not past kv_end (zero-filled keys),
      // and under causal not past its last row's limit.
      if (warp_active && kv0 < kv_end && !(causal && kv0 > warp_row0 + kWarpRows - 1 + diag)) {
        const uint32_t sub_off = static_cast<uint32_t>(stage * Shape::kKvTileBytes + sub * kSubN * kRowBytes) + kv_lane;
        attend(kv0, smem_k + sub_off, smem_v + sub_off);
      }
    }
    if (lookup) row_table[((next + 1) % 2) * kBlockN + tid] = looked_up;
  }

  // ---- Epilogue. Every copy has landed and every warp is past its last read of shared memory
  // (Q rows of other warps were copied by all threads), so each warp may reuse its own Q rows
  // to stage its bf16 output. --------------------------------------------------------------------
  cp_async_wait<0>();
  __syncthreads();
  // Resolved again rather than kept live through the main loop (registers are scarce there).
  const QWork we = QSchedule::resolve(p);
  float* lse = p.lse;
  uint8_t* stage_rows = smem;
#pragma unroll
  for (int mi = 0; mi < kMTiles; ++mi) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float l = quad_sum(row_l[mi][half]);
      const float inv = l > 0.f ? fast_rcp(l) : 0.f;
      const int local = warp * kWarpRows + mi * 16 + half * 8 + g;  // row within the CTA tile
#pragma unroll
      for (int n = 0; n < kOTiles; ++n) {
        *reinterpret_cast<uint32_t*>(stage_rows + swizzle_offset<kRowBytes>(local, n) + 4 * t) =
            pack_bf16x2(o[mi][n][half * 2] * inv, o[mi][n][half * 2 + 1] * inv);
      }
      if (lse != nullptr && t == 0 && local < q_rows) {
        lse[we.lse_base + static_cast<int64_t>(q0 + local) * p.lse_stride_l] =
            l > 0.f ? (row_m[mi][half] + fast_log2(l)) * kLn2 : neg_inf();
      }
    }
  }
  __syncwarp();
  char* out_req = static_cast<char*>(p.out) + we.out_base * 2;
  constexpr int kOutChunks = kWarpRows * kChunks / 32;  // 16-byte chunks per lane
#pragma unroll
  for (int i = 0; i < kOutChunks; ++i) {
    const int c = lane + i * 32;
    const int local = warp * kWarpRows + c / kChunks;
    const int chunk = c % kChunks;
    if (local < q_rows) {
      const uint4 v = *reinterpret_cast<const uint4*>(stage_rows + swizzle_offset<kRowBytes>(local, chunk));
      *reinterpret_cast<uint4*>(out_req + static_cast<int64_t>(q0 + local) * p.out_stride_l * 2 + chunk * 16) = v;
    }
  }
#endif
}

}  // namespace kjit::attention
