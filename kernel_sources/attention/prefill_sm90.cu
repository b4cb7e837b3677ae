// Hopper GQA prefill attention (family "attention.prefill_sm90", sm_90a only; SASS: HGMMA):
//
//   out[b, i, h] = softmax_j(scale · q[b, i, h] · k[b, j, h / group]) · v[b, j, h / group]
//
// over keys j < kv_len, and under `causal` only j ≤ i + kv_len − q_len (chunked prefill). The
// same contract as the dense mma.sync prefill (attention/prefill.cu) for head_dim 64/128 without
// a bool mask or per-request kv_lens; the host routes everything else to that kernel.
//
// ── Design (FlashAttention-3 style: warp specialization, TMA, wgmma) ────────────────────────────
// * CTA = kBlockM = 64 · kConsumers query rows of one (batch, q head): 128 rows and 384 threads
//   at hd128, 192 rows and 512 threads at hd64 (PrefillSm90Shape). Warpgroup 0 is the producer:
//   it gives registers back (setmaxnreg.dec) and one thread issues TMA loads — Q once, then per
//   KV tile a K box and a V box into stage it % kStages, each completing its own "full" mbarrier
//   (so Q·Kᵀ can start before V lands), after the stage's "empty" barrier says all consumer
//   warps are done with it. Warpgroups 1..kConsumers (setmaxnreg.inc) own 64 query rows each.
// * S = Q·Kᵀ: wgmma m64n128k16, A = the warpgroup's Q rows and B = the K tile [kv, d], both
//   K-major from 128B-swizzled shared memory (a k16 step is a 32-byte move of the descriptor's
//   start address inside the 128-byte rows, the next 64 d columns the next atom).
// * Online softmax in registers (f32, log2 domain, scale folded into one FFMA per score; a row
//   lives in the 4 lanes of a quad: two xor-shuffles per reduction). P is packed to bf16 in
//   registers: the D fragments of two n8 tiles are exactly the A fragment of one k16 step.
// * O += P·V: wgmma m64n{D}k16 with A = P from registers and B = the V tile [kv, d] read in
//   place as an MN-major ("transposed") operand: no transpose pass.
// * Intra-warpgroup overlap: iteration `it` issues S_it = Q·K_itᵀ and then O += P_{it−1}·V_{it−1}
//   back to back, waits for S only (wgmma.wait_group 1; K_it's slot is released), runs the masks
//   and the softmax of S_it while the P·V wgmmas still run, then waits for those (V_{it−1}'s
//   slot is released), rescales O and packs P_it. Optionally (p.pingpong) the consumer
//   warpgroups take turns issuing, round robin, so one's softmax overlaps the others' GEMMs.
// * KV tiles are walked from the last to the first, so the tiles that need masks (the causal
//   diagonal, the kv_len tail) come first and the rest run without any per-element test; tiles
//   past the CTA's last row's causal limit are never loaded. A consumer warpgroup whose 64 rows
//   attend fewer tiles (a shorter causal limit, or rows past q_len in a ragged last q tile) skips
//   the first ones: it only waits for their stages to fill, frees them and takes its turns.
// * Epilogue: O / l as bf16 written by each warpgroup over its own Q rows in shared memory (the
//   same swizzled layout), then TMA-stored (the TMA unit clips rows ≥ q_len and handles any
//   row/head/batch strides); LSE = (m + log2 l) · ln 2 from the quad's lane 0, −inf and zeros for
//   a row that attends nothing.
//
// ── The ragged paged variant (paged_prefill_sm90_kernel, family attention.paged_prefill_sm90) ──
// The same consumers over the work of kjit::attention::paged_prefill. A work unit is one work item
// of the plan (request b, its q tile of kBlockM rows: 128 with two consumers, or 192 with three at
// hd64; PrefillParams::q_tile_to_batch / q_tile_to_index) and one q head (or, packed, one KV head
// and its group's q heads). A CTA runs one unit (grid = units), or with the plan's persistent
// schedule (PrefillParams::cta_work) its list of units back to back: the K/V ring's stages and
// phases continue across units, each unit's Q is gathered once every consumer warp has waited for
// its last Q·Kᵀ of the unit before (the q_empty barrier), and O goes straight from registers to
// global memory, so the next unit's Q and first K/V tiles load while the CTA finishes the last
// P·V and the epilogue. The producer and each consumer warpgroup decode the units themselves (the
// work map, the request's lengths: dependent global loads, which a consumer issues while its last
// P·V of the unit before runs); no shared state passes between the roles but Q, K and V through
// their mbarriers. The producer warpgroup gathers instead of issuing TMA: per KV tile each
// of its 128 threads looks up one token's pool row through the page table (PagedKV,
// attention/kv_source.cuh; the page ids one tile ahead) into a shared row table, then all 128 copy
// the tile's rows with 16-byte cp.async straight into the swizzled layout (8 threads per 128-byte
// atom row; a row's address one wide multiply-add), zero-filling tokens past the request's kv_len,
// and arrive on the stage's full barrier when their copies land (cp.async.mbarrier.arrive.noinc:
// the barrier expects 128 arrivals). Q is gathered the same way
// from the packed [total_q, q_heads, D] rows (kBlockM / 16 passes, into the layout the dense
// kernel's TMA box writes; rows past the request's end zero-filled); a quad's four 4-byte stores of
// O fill 16 contiguous bytes of one of the request's rows. Consumers fence the generic-proxy writes
// of cp.async against their wgmma reads (fence.proxy.async) after each wait. Any page size works:
// the gather is per token. With TMA page loads (kTma, page_load tma: page sizes that are
// multiples of kPageBoxRows) lane j of the producer's warp 0 issues box j of
// each tile (kPageBoxRows slots of one page) from 4-D maps over the pools; the tile holding a
// request's last key, whose rows past it must read as zeros, is still gathered, and only gathered
// tiles need the consumers' proxy fence.
//
// ── Roofline (H200) ──────────────────────────────────────────────────────────────────────────────
// 4 · q_len · kv_len · D flops per (b, head) (half under causal) against K/V read once per CTA
// from L2: compute bound. wgmma bf16 dense peak ≈ 989 TFLOP/s (the measured GEMM ceiling here is
// 680–790); softmax adds ~1 MUFU.EX2 per score, ~1/2 of the FLOPs of a k16 step on the SFU pipe,
// which is why the softmax must overlap the tensor-core work.
#include "kjit/config.cuh"
#include "kjit/cp_async.cuh"
#include "kjit/fast_math.cuh"
#include "kjit/float_bits.cuh"
#include "kjit/named_barrier.cuh"
#include "kjit/f16_bits.cuh"
#include "kjit/smem.cuh"
#include "kjit/tma.cuh"
#include "kjit/warp_reduce.cuh"
#include "kjit/wgmma.cuh"

#include "attention/kv_source.cuh"
#include "attention/prefill_params.h"
#include "attention/prefill_sm90_params.h"
#include "attention/work_order.cuh"

namespace kjit::attention {

namespace detail {

/// Copies kRows rows into a kRows-row swizzled tile at shared address `tile` (the atom of columns
/// 64a.. at a · kRows · 128): thread t of the producer warpgroup copies the 16-byte chunk t % 8 of
/// rows t / 8 + 16 · i of every atom (kRows / 16 passes, unrolled kUnroll at a time). row_src(r,
/// src) sets row r's address and returns whether it holds data: false fills the row with zeros
/// and reads nothing, but `src` must still be mapped.
template <int kRows, int kAtoms, int kUnroll, class RowSrc>
KJIT_DEVICE void gather_rows(uint32_t tile, int t, const RowSrc& row_src) {
  static_assert(kRows % 16 == 0, "16 rows a pass");
  const int chunk = t % 8;
#pragma unroll kUnroll
  for (int i = 0; i < kRows / 16; ++i) {
    const int r = t / 8 + 16 * i;
    const char* src;
    const bool valid = row_src(r, src);
    const uint32_t dst = tile + r * 128 + ((chunk ^ (r & 7)) << 4);
#pragma unroll
    for (int a = 0; a < kAtoms; ++a) cp_async_16(dst + a * (kRows * 128), src + a * 128 + chunk * 16, valid);
  }
}

/// A KV row table entry (the 32-bit pool row of each row of a tile, at shared address table + 4r)
/// for a token past the request's keys: its tile row reads as zeros.
constexpr uint32_t kNoPoolRow = 0xffffffffu;

/// gather_rows' row source for the KV tile whose pool rows the row table at `table` holds:
/// row_addr(pool row) (PagedKV::k_row_u / v_row_u: one wide multiply-add), pool row 0 (mapped)
/// for a kNoPoolRow entry.
template <class RowAddr>
KJIT_DEVICE auto table_rows(uint32_t table, const RowAddr& row_addr) {
  return [=](int r, const char*& src) {
    const uint32_t row = ld_shared_u32(table + r * 4);
    const bool valid = row != kNoPoolRow;
    src = row_addr(valid ? row : 0u);
    return valid;
  };
}

/// The (token, q head) of each row of a paged work item (see the file comment): row r of a
/// request's `count` = q_len · pack rows is token r / pack of q head first_head + r % pack. pack 1
/// (unpacked) makes row r token r of the one q head first_head.
struct PackedRows {
  int count;       ///< rows of the request: q_len · pack
  int pack;        ///< q heads per token (PrefillParams::pack_group; 1 unpacked)
  FastDiv div;     ///< pack as a FastDiv
  int first_head;  ///< the q head of a token's first row
  KJIT_DEVICE int token(int row) const {
    return static_cast<int>(fast_quotient(static_cast<uint32_t>(row), div));
  }
  KJIT_DEVICE int head(int row, int token) const { return first_head + row - token * pack; }
};

/// One work unit of a CTA (see the file comment): a q tile of kBlockM rows of one (batch or
/// request, head) and the KV tiles its rows attend. kPaged false: a dense tile, rows = tokens.
template <bool kPaged>
struct Sm90Work {
  int head;         ///< q head, or (packed) KV head
  int kv_head;
  int b;            ///< batch index, or (paged) request
  int q_len;        ///< query tokens of the request (dense: of every batch)
  int kv_len;       ///< its keys
  int q_first;      ///< paged: the request's first row of the packed q / out
  int q0;           ///< the tile's first row
  int n_tiles;      ///< KV tiles its rows attend (from the last, see the file comment)
  PackedRows rows;  ///< paged: the (token, q head) of each row
  KJIT_DEVICE int token(int row) const {
    if constexpr (kPaged) return rows.token(row);
    return row;
  }
  /// Rows of the request: q_len, or (packed) q_len · pack_group.
  KJIT_DEVICE int row_count() const {
    if constexpr (kPaged) return rows.count;
    return q_len;
  }
  /// kv_len − q_len: under causal, token i sees keys j ≤ i + diag().
  KJIT_DEVICE int diag() const { return kv_len - q_len; }
};

/// The KV tiles that a unit's rows up to `last_row` attend: under causal those holding the keys
/// through the last row's diagonal, else all kv_len (the walk goes from the last tile, so rows
/// that attend fewer tiles skip its first ones).
template <class Shape, bool kPaged>
KJIT_DEVICE int sm90_kv_tiles(const Sm90Work<kPaged>& w, int last_row, bool causal) {
  const int kv_end = causal ? max(min(w.kv_len, w.token(last_row) + 1 + w.diag()), 0) : w.kv_len;
  return (kv_end + Shape::kBlockN - 1) / Shape::kBlockN;
}

/// Work unit `u` of this CTA: for the paged kernel with a persistent schedule the unit
/// cta_work[u] = item · heads + head (heads: q heads, or KV heads when packed), else (paged: u is
/// the CTA's flat grid position; dense: u is unused) this CTA's grid position in head_group_order
/// (attention/work_order.cuh) over the (q tile or work item, head) pairs; then the paged kernel's
/// item through the plan's work map.
template <bool kPaged, class Shape, class Params>
KJIT_DEVICE Sm90Work<kPaged> sm90_work(const Params& p, int u) {
  Sm90Work<kPaged> w{};
  const bool causal = p.causal != 0;
  int q_tile = 0;
  if constexpr (kPaged) {
    const bool packed = p.pack_group > 1;
    const int heads = packed ? p.kv_heads : p.q_heads;
    int item = 0;
    if (p.cta_work != nullptr) {
      const int unit = __ldg(p.cta_work + u);
      item = unit / heads;
      w.head = unit - item * heads;
    } else {
      head_group_order(u, heads, p.q_tiles, p.head_group, causal, w.head, item);
    }
    w.kv_head = packed ? w.head : w.head / p.group;
    w.b = __ldg(p.q_tile_to_batch + item);
    q_tile = __ldg(p.q_tile_to_index + item);
    w.q_first = __ldg(p.qo_indptr + w.b);
    w.q_len = __ldg(p.qo_indptr + w.b + 1) - w.q_first;
    w.kv_len = PagedKV(p, w.b, w.kv_head).length();
    w.rows = PackedRows{w.q_len * p.pack_group, p.pack_group, p.pack_div, packed ? w.head * p.pack_group : w.head};
  } else {
    const int flat = static_cast<int>(blockIdx.x + blockIdx.y * gridDim.x);
    head_group_order(flat, p.q_heads, p.q_tiles, p.head_group, causal, w.head, q_tile);
    w.kv_head = w.head / p.group;
    w.b = static_cast<int>(blockIdx.z);
    w.q_len = p.q_len;
    w.kv_len = p.kv_len;
  }
  w.q0 = q_tile * Shape::kBlockM;
  const int q_rows = min(Shape::kBlockM, w.row_count() - w.q0);
  w.n_tiles = sm90_kv_tiles<Shape>(w, w.q0 + q_rows - 1, causal);
  return w;
}

/// Whether a unit's first tile (its last in key order: the walk goes from the last tile) holds
/// keys past kv_len, whose rows must read as zeros: with TMA page loads the one tile gathered.
template <class Shape>
KJIT_DEVICE bool tail_past_keys(int n_tiles, int kv_len) {
  return n_tiles * Shape::kBlockN > kv_len;
}

/// Where the CTA's KV tile g (counted over all its units) sits in the stage ring: its stage and
/// its round (round r waits on the full barriers' phase of parity r & 1, and from round 1 on for
/// the empty barriers' phase of parity (r − 1) & 1).
struct RingSlot {
  int stage;
  int round;
};
template <int kStages>
KJIT_DEVICE RingSlot ring_slot(int g) {
  return {g % kStages, g / kStages};
}

/// The paged kernel's producer warpgroup (all 128 threads; see the file comment): Q, then the
/// KV tiles from the last to the first through the stage ring, each copy completing on its full
/// barrier through cp.async arrivals.
template <class Shape>
KJIT_DEVICE void paged_sm90_produce(const PrefillParams& p, int b, const PackedRows& rows, int kv_head, int q_first,
                                    int q0, int kv_len, int n_tiles, int tiles_before, uint32_t q_smem,
                                    uint32_t k_smem, uint32_t v_smem, uint32_t bars, uint32_t row_tables) {
  using namespace sm90;
  constexpr int kStages = Shape::kStages;
  constexpr int kBlockN = Shape::kBlockN;
  // One token of a KV tile per producer thread (the row table); Q takes kBlockM / 16 passes.
  static_assert(kBlockN == 128, "one KV row per producer thread");
  constexpr int kProducerBarrier = 1 + 2 * Shape::kConsumers;  // after the consumers' named barriers
  const int t = static_cast<int>(threadIdx.x);  // the producer is warpgroup 0
  const uint32_t q_full = bars;
  auto k_full = [&](int s) { return bars + 8u * (1 + s); };
  auto v_full = [&](int s) { return bars + 8u * (1 + kStages + s); };
  auto k_empty = [&](int s) { return bars + 8u * (1 + 2 * kStages + s); };
  auto v_empty = [&](int s) { return bars + 8u * (1 + 3 * kStages + s); };

  const char* q_request = static_cast<const char*>(p.q) + static_cast<int64_t>(q_first) * p.q_stride_l * 2;
  // Q once per unit, its passes not unrolled: the producer's registers (32 gathering) hold no more.
  gather_rows<Shape::kBlockM, Shape::kAtoms, 1>(q_smem, t, [&](int r, const char*& src) {
    const int row = q0 + r;
    src = q_request;  // rows past the request's: zeros
    if (row >= rows.count) return false;
    const int token = rows.token(row);
    src += (static_cast<int64_t>(token) * p.q_stride_l + static_cast<int64_t>(rows.head(row, token)) * p.q_stride_h) * 2;
    return true;
  });
  cp_async_mbarrier_arrive_noinc(q_full);

  const PagedKV kv(p, b, kv_head);
  // The page id of this thread's token of tile `it` (the tile n_tiles − 1 − it), 0 past kv_len:
  // the page-table load. A gathering producer issues tile it + 1's before it copies tile it, so
  // the load's latency hides behind the copies and the stage waits.
  auto page_of_tile = [&](int it) {
    const int token = (n_tiles - 1 - it) * kBlockN + t;
    return token < kv_len ? kv.page_id(token) : 0;
  };
  // Tile `it` gathered, its token's page id `id` looked up (page_of_tile): each thread writes its
  // token's pool row to the row table (the table of the tile two before, the same buffer, was
  // read before every thread passed a later barrier), then all copy. The copies complete the
  // stage's full barriers by their cp.async arrivals; `joined` (TMA page loads, whose full
  // barriers expect one arrival) makes them raise the count (cp_async_mbarrier_arrive), and
  // thread 0 arrives once all have.
  auto gather_tile = [&](int it, bool joined, int id) {
    const int tile = n_tiles - 1 - it;
    const int g = tiles_before + it;
    const RingSlot ring = ring_slot<kStages>(g);
    const int s = ring.stage;
    const int round = ring.round;
    const uint32_t table = row_tables + (g & 1) * (kBlockN * 4);
    const int token = tile * kBlockN + t;
    st_shared_u32(table + t * 4, token < kv_len ? static_cast<uint32_t>(kv.row_on_page(id, token)) : kNoPoolRow);
    named_barrier(kProducerBarrier, 128);
    auto copies_arrive = [&](uint32_t full) {
      if (!joined) {
        cp_async_mbarrier_arrive_noinc(full);
        return;
      }
      cp_async_mbarrier_arrive(full);
      named_barrier(kProducerBarrier, 128);
      if (t == 0) mbarrier_arrive(full);
    };
    if (round > 0) mbarrier_wait(k_empty(s), static_cast<uint32_t>((round - 1) & 1));
    gather_rows<kBlockN, Shape::kAtoms, kBlockN / 16>(k_smem + s * Shape::kKvBytes, t,
                                                      table_rows(table, [&](uint32_t row) { return kv.k_row_u(row); }));
    copies_arrive(k_full(s));
    if (round > 0) mbarrier_wait(v_empty(s), static_cast<uint32_t>((round - 1) & 1));
    gather_rows<kBlockN, Shape::kAtoms, kBlockN / 16>(v_smem + s * Shape::kKvBytes, t,
                                                      table_rows(table, [&](uint32_t row) { return kv.v_row_u(row); }));
    copies_arrive(v_full(s));
  };
  if constexpr (!Shape::kTmaPages) {
    int id = n_tiles > 0 ? page_of_tile(0) : 0;
    for (int it = 0; it < n_tiles; ++it) {
      const int next = it + 1 < n_tiles ? page_of_tile(it + 1) : 0;
      gather_tile(it, false, id);
      id = next;
    }
    return;
  }
  // TMA page loads. Lane j of warp 0 issues box j of tile `it`: its kPageBoxRows slots from
  // j · kPageBoxRows on (inside one page: page_size is a multiple of kPageBoxRows), as kAtoms
  // copies of 64 columns; lane 0 arrives with the stage's bytes first.
  auto tma_tile = [&](int it) {
    const RingSlot ring = ring_slot<kStages>(tiles_before + it);
    const int s = ring.stage;
    constexpr int kBoxes = kBlockN / kPageBoxRows;
    int page = 0, slot = 0;
    if (t < kBoxes) {
      const int token = (n_tiles - 1 - it) * kBlockN + t * kPageBoxRows;
      const int i = kv.page_of(token);
      page = __ldg(kv.pages_ + i);
      slot = token - i * kv.page_size_;
    }
    const uint32_t box = s * Shape::kKvBytes + t * (kPageBoxRows * 128);
    // K, then V: the stage's slot once released, the bytes announced, the boxes.
    auto issue = [&](uint32_t empty, uint32_t full, uint32_t dst, const TmaDescriptor* map) {
      if (ring.round > 0) mbarrier_wait(empty, static_cast<uint32_t>((ring.round - 1) & 1));
      if (t == 0) mbarrier_arrive_expect_tx(full, Shape::kKvBytes);
      __syncwarp();
      if (t < kBoxes) {
#pragma unroll
        for (int a = 0; a < Shape::kAtoms; ++a) tma_load_4d(dst + a * (kBlockN * 128), map, a * 64, slot, kv_head, page, full);
      }
    };
    issue(k_empty(s), k_full(s), k_smem + box, &p.tma_k_pages);
    issue(v_empty(s), v_full(s), v_smem + box, &p.tma_v_pages);
  };
  // Walking from the last tile, only the first can hold keys past kv_len (rows that must read as
  // zeros, which a box would fill from the page's unused slots): it is gathered by all 128
  // threads. Warp 0 alone issues the rest.
  if (n_tiles == 0) return;
  if (tail_past_keys<Shape>(n_tiles, kv_len)) {
    gather_tile(0, true, page_of_tile(0));
  } else if (t < 32) {
    tma_tile(0);
  }
  if (t >= 32) return;
  for (int it = 1; it < n_tiles; ++it) tma_tile(it);
}

/// The body of both kernels below (see the file comment): kPaged false reads PrefillSm90Params
/// (TMA over dense BLHD tensors), true PrefillParams (packed Q, PagedKV, the plan's work map of
/// kRows-row tiles, K/V pages loaded with TMA when kTma).
template <int kHeadDim, bool kPaged, int kRows, bool kTma, class Params>
KJIT_DEVICE void prefill_sm90_body(const Params& p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace sm90;
  using Shape = PrefillSm90Shape<kHeadDim, kPaged, kRows, kTma>;
  constexpr int kBlockN = Shape::kBlockN;
  constexpr int kStages = Shape::kStages;
  constexpr int kAtoms = Shape::kAtoms;
  constexpr int kConsumers = Shape::kConsumers;
  constexpr int kQAtomBytes = Shape::kBlockM * 128;  // one 64-column atom of the Q tile
  constexpr int kKSteps = kHeadDim / 16;  // k16 steps of Q·Kᵀ
  constexpr int kPSteps = kBlockN / 16;   // k16 steps of P·V
  constexpr int kSRegs = kBlockN / 2;     // score accumulators per thread
  constexpr int kORegs = kHeadDim / 2;    // output accumulators per thread
  static_assert(kHeadDim == 64 || kHeadDim == 128, "head_dim");

  extern __shared__ uint8_t smem_raw[];
  // The 128-byte swizzle atoms (8 rows × 128 bytes) must start at 1024-byte boundaries.
  const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  const uint32_t q_smem = base;                                // atom a at a · kQAtomBytes
  const uint32_t k_smem = base + Shape::kQBytes;               // stage s at s · kKvBytes
  const uint32_t v_smem = k_smem + kStages * Shape::kKvBytes;  // atom a at a · kBlockN · 128
  const uint32_t bars = v_smem + kStages * Shape::kKvBytes;
  const uint32_t q_full = bars;
  auto k_full = [&](int s) { return bars + 8u * (1 + s); };
  auto v_full = [&](int s) { return bars + 8u * (1 + kStages + s); };
  auto k_empty = [&](int s) { return bars + 8u * (1 + 2 * kStages + s); };
  auto v_empty = [&](int s) { return bars + 8u * (1 + 3 * kStages + s); };
  const uint32_t q_empty = bars + 8u * (1 + 4 * kStages);  // paged: the consumers are done with Q
  static_assert(8 * (2 + 4 * kStages) <= 256, "the barriers in 256 bytes");
  const uint32_t row_tables = bars + 256;  // paged: two kBlockN-entry int32 pool-row tables

  // The CTA's work units [u_begin, u_end): the paged kernel's persistent schedule
  // (PrefillParams::cta_work), else the one unit of its grid position (paged: its flat index).
  int u_begin = 0, u_end = 1;
  if constexpr (kPaged) {
    if (p.cta_work_indptr != nullptr) {
      u_begin = __ldg(p.cta_work_indptr + blockIdx.x);
      u_end = __ldg(p.cta_work_indptr + blockIdx.x + 1);
    } else {
      u_begin = static_cast<int>(blockIdx.x + blockIdx.y * gridDim.x);
      u_end = u_begin + 1;
    }
  }

  // A full barrier expects the TMA thread's one arrival (plus bytes), or the paged producer's 128
  // cp.async arrivals (Q always; K and V unless the pages load with TMA).
  constexpr uint32_t kFullArrivals = kPaged ? 128 : 1;
  uint32_t kv_full_arrivals = kFullArrivals;
  if constexpr (Shape::kTmaPages) kv_full_arrivals = 1;
  if (threadIdx.x == 0) {
    mbarrier_init(q_full, kFullArrivals);
    mbarrier_init(q_empty, 4 * kConsumers);  // one arrival per consumer warp
    for (int s = 0; s < kStages; ++s) {
      mbarrier_init(k_full(s), kv_full_arrivals);
      mbarrier_init(v_full(s), kv_full_arrivals);
      mbarrier_init(k_empty(s), 4 * kConsumers);  // one arrival per consumer warp
      mbarrier_init(v_empty(s), 4 * kConsumers);
    }
    fence_barrier_init();
    if constexpr (!kPaged) {
      prefetch_tensormap(&p.tma_q);
      prefetch_tensormap(&p.tma_k);
      prefetch_tensormap(&p.tma_v);
      prefetch_tensormap(&p.tma_out);
    } else if (Shape::kTmaPages) {
      prefetch_tensormap(&p.tma_k_pages);
      prefetch_tensormap(&p.tma_v_pages);
    }
  }
  __syncthreads();

  const int wg = threadIdx.x / 128;
  if (wg == 0) {
    // ---- Producer. -------------------------------------------------------------------------
    setmaxnreg_dec<Shape::kProducerRegs>();
    if constexpr (kPaged) {
      // Unit i's Q overwrites unit i − 1's once every consumer warp has issued and waited for
      // its last Q·Kᵀ; its K/V tiles continue the ring where the unit before left it.
      int tiles_before = 0;
      for (int u = u_begin; u < u_end; ++u) {
        const Sm90Work<kPaged> w = sm90_work<kPaged, Shape>(p, u);
        if (u > u_begin) mbarrier_wait(q_empty, static_cast<uint32_t>((u - u_begin - 1) & 1));
        paged_sm90_produce<Shape>(p, w.b, w.rows, w.kv_head, w.q_first, w.q0, w.kv_len, w.n_tiles, tiles_before,
                                  q_smem, k_smem, v_smem, bars, row_tables);
        tiles_before += w.n_tiles;
      }
      // Leave no copy of this thread in flight when it exits (the consumers wait on the barriers).
      cp_async_commit();
      cp_async_wait<0>();
    } else if (threadIdx.x == 0) {
      const Sm90Work<kPaged> w = sm90_work<kPaged, Shape>(p, 0);
      mbarrier_arrive_expect_tx(q_full, Shape::kQBytes);
#pragma unroll
      for (int a = 0; a < kAtoms; ++a) tma_load_4d(q_smem + a * kQAtomBytes, &p.tma_q, a * 64, w.q0, w.head, w.b, q_full);
      for (int it = 0; it < w.n_tiles; ++it) {
        const int tile = w.n_tiles - 1 - it;
        const RingSlot ring = ring_slot<kStages>(it);
        const int s = ring.stage;
        const int round = ring.round;
        const uint32_t k_dst = k_smem + s * Shape::kKvBytes;
        const uint32_t v_dst = v_smem + s * Shape::kKvBytes;
        // K and V of a stage are released separately (K once S = Q·Kᵀ is done, V once P·V is),
        // so the next K lands while the previous P·V still runs.
        if (round > 0) mbarrier_wait(k_empty(s), static_cast<uint32_t>((round - 1) & 1));
        mbarrier_arrive_expect_tx(k_full(s), Shape::kKvBytes);
#pragma unroll
        for (int a = 0; a < kAtoms; ++a) {
          tma_load_4d(k_dst + a * (kBlockN * 128), &p.tma_k, a * 64, tile * kBlockN, w.kv_head, w.b, k_full(s));
        }
        if (round > 0) mbarrier_wait(v_empty(s), static_cast<uint32_t>((round - 1) & 1));
        mbarrier_arrive_expect_tx(v_full(s), Shape::kKvBytes);
#pragma unroll
        for (int a = 0; a < kAtoms; ++a) {
          tma_load_4d(v_dst + a * (kBlockN * 128), &p.tma_v, a * 64, tile * kBlockN, w.kv_head, w.b, v_full(s));
        }
      }
    }
    return;
  }

  // ---- Consumers: warpgroup c = wg − 1 owns rows [row0, row0 + 64) of each unit. --------------
  setmaxnreg_inc<Shape::kConsumerRegs>();
  const int c = wg - 1;
  const int t = threadIdx.x % 128;
  const int warp = t / 32;
  const int lane = t % 32;
  const int g = lane / 4;
  const int tq = lane % 4;
  const float scale_log2 = p.scale_log2;
  const bool causal = p.causal != 0;
  const uint32_t q_wg = q_smem + c * (64 * 128);  // this warpgroup's rows inside each Q atom

  float s_acc[kSRegs];
  float o_acc[kORegs];
  uint32_t p_frag[kPSteps][4];

  // Pingpong (FlashAttention-3): the consumer warpgroups take turns issuing their wgmmas, round
  // robin, so one's softmax runs while the others' GEMMs own the tensor cores. Named barrier
  // kTurn + c means "warpgroup c may issue": it completes when c's 128 threads sync and warpgroup
  // c − 1's 128 arrive (after its own issue). The last warpgroup opens warpgroup 0's first turn
  // once per CTA; every unit takes the same turns in every warpgroup (a unit without KV tiles one
  // empty turn), and the last warpgroup skips its final arrival only in the CTA's last unit, so
  // every arrival is matched by a sync and warpgroup 0 starts the next unit's Q·Kᵀ while the others
  // finish this one. Barriers 1..kConsumers are the warpgroups' own (epilogue).
  constexpr int kTurn = 1 + kConsumers;
  bool pingpong = true;  // paged: always (the dense kernel's measured choice at both head dims)
  if constexpr (!kPaged) pingpong = p.pingpong != 0;
  auto wait_turn = [&]() {
    if (pingpong) named_barrier(kTurn + c, 256);
  };
  auto pass_turn = [&](bool last_in_cta) {
    if (pingpong && !(last_in_cta && c == kConsumers - 1)) {
      named_barrier_arrive(kTurn + (c + 1) % kConsumers, 256);
    }
  };
  if (pingpong && c == kConsumers - 1 && u_begin < u_end) named_barrier_arrive(kTurn, 256);
  // The paged producer's cp.async writes are generic-proxy stores and wgmma reads through the
  // async proxy, so each consumer thread orders the two after its wait on a gathered tile; TMA's
  // writes are the async proxy's already. With TMA page loads only Q and a unit's tail tile are
  // gathered.
  auto wait_full = [&](uint32_t bar, uint32_t parity, bool gathered = true) {
    mbarrier_wait(bar, parity);
    if constexpr (kPaged) {
      if (gathered) fence_proxy_async();
    }
  };
  auto release = [&](uint32_t bar) {
    if (lane == 0) mbarrier_arrive(bar);
  };

  int tiles_before = 0;
  // Each warpgroup decodes its units itself: the next one's loads are issued while the last P·V
  // of the current one runs (below).
  Sm90Work<kPaged> next = sm90_work<kPaged, Shape>(p, u_begin);
  for (int u = u_begin; u < u_end; ++u) {
    const Sm90Work<kPaged> w = next;
    const int n_tiles = w.n_tiles;
    const int row0 = w.q0 + 64 * c;
    // This warpgroup's rows attend only the unit's last n_mine tiles in walk order (none when all
    // its rows are past the request's, as in a request's last q tile): it takes part only in the
    // barriers and turns of the first n_tiles − n_mine (below), then runs its own tiles as a unit
    // of n_mine tiles whose ring positions start at `ring0`. Not the paged kernel's 192-row tile:
    // its consumers, at the 160 registers of the launch pool, spill 72–108 bytes with it (16–44
    // skipping only rows past the request's).
    int n_mine = n_tiles;
    if constexpr (!kPaged || kConsumers == 2) {
      const int my_rows = min(64, w.row_count() - row0);
      n_mine = my_rows > 0 ? sm90_kv_tiles<Shape>(w, row0 + my_rows - 1, causal) : 0;
    }
    const int my_row = row0 + 16 * warp + g;  // rows my_row and my_row + 8
    // Keys from limit[h] on are masked in row my_row + 8h, so a thread masks only the tiles that
    // reach past the smaller of its two limits.
    int limit[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) limit[h] = causal ? min(w.kv_len, w.token(my_row + 8 * h) + w.diag() + 1) : w.kv_len;
    float row_m[2] = {neg_inf(), neg_inf()};
    float row_l[2] = {0.f, 0.f};

    // S = Q · K_stageᵀ (issued, not waited for).
    auto issue_qk = [&](int s) {
      const uint32_t k_tile = k_smem + s * Shape::kKvBytes;
#pragma unroll
      for (int kk = 0; kk < kKSteps; ++kk) {
        const uint32_t a_off = (kk / 4) * kQAtomBytes + (kk % 4) * 32;
        const uint32_t b_off = (kk / 4) * (kBlockN * 128) + (kk % 4) * 32;
        wgmma_bf16_ss<kBlockN>(s_acc, smem_desc_k128(q_wg + a_off), smem_desc_k128(k_tile + b_off), kk > 0 ? 1u : 0u);
      }
    };
    // O (+)= P · V_stage (issued, not waited for); accumulate = false overwrites O.
    auto issue_pv = [&](int s, bool accumulate) {
      const uint32_t v_tile = v_smem + s * Shape::kKvBytes;
#pragma unroll
      for (int kk = 0; kk < kPSteps; ++kk) {
        wgmma_bf16_rs_tb<kHeadDim>(o_acc, p_frag[kk], smem_desc_mn128(v_tile + kk * 16 * 128, kBlockN * 128),
                                   (accumulate || kk > 0) ? 1u : 0u);
      }
    };
    // Masks (only on tiles that cross the causal diagonal or the kv_len tail of these rows), then
    // the online-softmax update of s_acc into unnormalized probabilities; returns the factors by
    // which O's rows must be rescaled.
    auto softmax = [&](int tile, float (&alpha)[2]) {
      const int col0 = tile * kBlockN;
      if (col0 + kBlockN > min(limit[0], limit[1])) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
#pragma unroll
          for (int j = 0; j < kBlockN / 8; ++j) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              if (col0 + 8 * j + 2 * tq + e >= limit[h]) s_acc[4 * j + 2 * h + e] = neg_inf();
            }
          }
        }
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float mx = neg_inf();
#pragma unroll
        for (int j = 0; j < kBlockN / 8; ++j) mx = fmaxf(mx, fmaxf(s_acc[4 * j + 2 * h], s_acc[4 * j + 2 * h + 1]));
        mx = quad_max(mx);
        const float m_new = fmaxf(row_m[h], mx * scale_log2);
        const float base_m = m_new == neg_inf() ? 0.f : m_new;  // keeps −inf − (−inf) out
        alpha[h] = fast_exp2(row_m[h] - base_m);
        row_m[h] = m_new;
        float sum = 0.f;
#pragma unroll
        for (int j = 0; j < kBlockN / 8; ++j) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float pr = fast_exp2(fmaf(s_acc[4 * j + 2 * h + e], scale_log2, -base_m));
            s_acc[4 * j + 2 * h + e] = pr;
            sum += pr;
          }
        }
        row_l[h] = row_l[h] * alpha[h] + sum;
      }
    };
    auto pack_p = [&]() {
#pragma unroll
      for (int kk = 0; kk < kPSteps; ++kk) {
        p_frag[kk][0] = pack_bf16x2(s_acc[8 * kk + 0], s_acc[8 * kk + 1]);
        p_frag[kk][1] = pack_bf16x2(s_acc[8 * kk + 2], s_acc[8 * kk + 3]);
        p_frag[kk][2] = pack_bf16x2(s_acc[8 * kk + 4], s_acc[8 * kk + 5]);
        p_frag[kk][3] = pack_bf16x2(s_acc[8 * kk + 6], s_acc[8 * kk + 7]);
      }
    };
    // Ring position, parity of the CTA's tile g (counted over all its units).
    int ring0 = tiles_before;  // ring position of the tile `it` counts from (below: of the own tiles)
    auto stage = [&](int it) { return ring_slot<kStages>(ring0 + it).stage; };
    auto parity = [&](int it) { return static_cast<uint32_t>(ring_slot<kStages>(ring0 + it).round & 1); };
    // The producer may gather the next unit's Q once every warp's last Q·Kᵀ is complete.
    auto release_q = [&]() {
      if constexpr (kPaged) release(q_empty);
    };

    const bool last_unit = u + 1 == u_end;
    // Whether tile `it` of the unit was gathered (see the producer).
    const bool tail_gathered = n_mine == n_tiles && tail_past_keys<Shape>(n_tiles, w.kv_len);
    auto gathered = [&](int it) { return !Shape::kTmaPages || (it == 0 && tail_gathered); };
    wait_full(q_full, static_cast<uint32_t>((u - u_begin) & 1));
    // Skipped tiles: the stages are released only once filled (so every consumer warp's arrivals
    // stay in the phase of the same fill: a warpgroup that ran ahead could otherwise arrive twice
    // on one stage's empty barrier before another warp's first), and each takes its turn, so
    // every warpgroup takes n_tiles + 1 turns a unit. Then tile `it` is the own tile it, the
    // unit's tile n_mine − 1 − it, at ring position ring0 + it.
#pragma unroll 1
    for (int it = 0; it < n_tiles - n_mine; ++it) {
      mbarrier_wait(k_full(stage(it)), parity(it));
      release(k_empty(stage(it)));
      mbarrier_wait(v_full(stage(it)), parity(it));
      release(v_empty(stage(it)));
      wait_turn();
      pass_turn(false);
    }
    ring0 += n_tiles - n_mine;
    if (n_mine > 0) {
      // Prologue: S_0 and its softmax (O is not yet written: the first P·V overwrites it).
      {
        wait_full(k_full(stage(0)), parity(0), gathered(0));
        wait_turn();
        wgmma_fence();
        issue_qk(stage(0));
        wgmma_commit();
        pass_turn(false);
        wgmma_wait<0>();
        release(k_empty(stage(0)));
        if (n_mine == 1) release_q();
        float alpha[2];
        softmax(n_mine - 1, alpha);
        pack_p();
      }
      for (int it = 1; it < n_mine; ++it) {
        const int s = stage(it);
        const int sp = stage(it - 1);
        wait_full(k_full(s), parity(it), gathered(it));
        wait_full(v_full(sp), parity(it - 1), gathered(it - 1));
        wait_turn();
        wgmma_fence();
        issue_qk(s);
        wgmma_commit();
        issue_pv(sp, it > 1);
        wgmma_commit();
        pass_turn(false);
        wgmma_wait<1>();  // S_it is ready; P_{it−1}·V_{it−1} may still run
        release(k_empty(s));
        if (it == n_mine - 1) release_q();
        float alpha[2];
        softmax(n_mine - 1 - it, alpha);
        wgmma_wait<0>();
        release(v_empty(sp));
#pragma unroll
        for (int i = 0; i < kORegs; ++i) o_acc[i] *= alpha[(i >> 1) & 1];
        pack_p();
      }
      const int sl = stage(n_mine - 1);
      wait_full(v_full(sl), parity(n_mine - 1), gathered(n_mine - 1));
      wait_turn();
      wgmma_fence();
      issue_pv(sl, n_mine > 1);
      wgmma_commit();
      pass_turn(last_unit);
      if (!last_unit) next = sm90_work<kPaged, Shape>(p, u + 1);
      wgmma_wait<0>();
      release(v_empty(sl));
    } else {
      release_q();
      wait_turn();  // the unit's last (or, without KV tiles, one) turn: empty
      pass_turn(last_unit);
      if (!last_unit) next = sm90_work<kPaged, Shape>(p, u + 1);
#pragma unroll
      for (int i = 0; i < kORegs; ++i) o_acc[i] = 0.f;
    }
    tiles_before = ring0 + n_mine;  // + n_tiles

    // ---- Epilogue: O / l as bf16 and the LSE. --------------------------------------------------
    float inv[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float l = quad_sum(row_l[h]);
      inv[h] = l > 0.f ? fast_rcp(l) : 0.f;
      const int row = my_row + 8 * h;
      if (p.lse != nullptr && tq == 0 && row < w.row_count()) {
        // Dense: lse [batch, q_heads, q_len]; packed: [q_heads, total_q] (lse_stride_b unused).
        int64_t at;
        if constexpr (kPaged) {
          const int token = w.rows.token(row);
          at = static_cast<int64_t>(w.rows.head(row, token)) * p.lse_stride_h +
               static_cast<int64_t>(w.q_first + token) * p.lse_stride_l;
        } else {
          at = w.b * p.lse_stride_b + w.head * p.lse_stride_h + static_cast<int64_t>(row) * p.lse_stride_l;
        }
        p.lse[at] = l > 0.f ? (row_m[h] + fast_log2(l)) * kLn2 : neg_inf();
      }
    }
    if constexpr (kPaged) {
      // Straight from registers (Q's shared memory already holds the next unit's rows): a quad's
      // four 4-byte stores fill 16 contiguous bytes of its row, the request's rows only.
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = my_row + 8 * h;
        if (row < w.row_count()) {
          const int token = w.rows.token(row);
          char* dst = static_cast<char*>(p.out) +
                      (static_cast<int64_t>(w.q_first + token) * p.out_stride_l +
                       static_cast<int64_t>(w.rows.head(row, token)) * p.out_stride_h) * 2 + 4 * tq;
#pragma unroll
          for (int j = 0; j < kHeadDim / 8; ++j) {
            *reinterpret_cast<uint32_t*>(dst + 16 * j) =
                pack_bf16x2(o_acc[4 * j + 2 * h] * inv[h], o_acc[4 * j + 2 * h + 1] * inv[h]);
          }
        }
      }
    } else {
      // Over this warpgroup's Q rows (its own wgmmas, the only readers, are complete once all
      // four warps get here), then one TMA store per 64-column atom.
      named_barrier_wg(1 + c);
#pragma unroll
      for (int j = 0; j < kHeadDim / 8; ++j) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = 16 * warp + g + 8 * h;  // row within the warpgroup's 64
          const uint32_t addr = q_wg + (j / 8) * kQAtomBytes + r * 128 + (((j % 8) ^ (r & 7)) << 4) + 4 * tq;
          st_shared_u32(addr, pack_bf16x2(o_acc[4 * j + 2 * h] * inv[h], o_acc[4 * j + 2 * h + 1] * inv[h]));
        }
      }
      fence_proxy_async();
      named_barrier_wg(1 + c);
      if (t == 0 && row0 < w.q_len) {
#pragma unroll
        for (int a = 0; a < kAtoms; ++a) tma_store_4d(&p.tma_out, a * 64, row0, w.head, w.b, q_wg + a * kQAtomBytes);
        bulk_commit();
        bulk_wait_read<0>();
      }
    }
  }
#else
  // Not sm_90a: the host never launches these kernels here (they compile so that the families'
  // points build for every arch).
  __trap();
#endif
}

}  // namespace detail

/// See the file comment. kHeadDim ∈ {64, 128}. Launch: PrefillSm90Shape<kHeadDim>::kThreads
/// threads and kSmemBytes of dynamic shared memory, grid (q_tiles, q_heads, batch).
template <int kHeadDim>
__global__ void __launch_bounds__(PrefillSm90Shape<kHeadDim>::kThreads, 1)
    prefill_sm90_kernel(KJIT_PARAMS PrefillSm90Params p) {
  detail::prefill_sm90_body<kHeadDim, false, PrefillSm90Shape<kHeadDim>::kBlockM, false>(p);
}

/// The ragged paged variant (see the file comment): PrefillParams as the mma.sync paged prefill
/// takes them (PackedQSchedule + PagedKV fields; q_tiles = the plan's work items, which must be
/// kRows-row tiles). kHeadDim ∈ {64, 128}; kRows 128, or 192 at kHeadDim 64 (three consumer
/// warpgroups); kTma: K/V pages load with TMA (tma_k_pages / tma_v_pages; page sizes that are
/// multiples of kPageBoxRows), else they are gathered. Launch: PrefillSm90Shape<kHeadDim, true,
/// kRows>::kThreads threads and kSmemBytes of dynamic shared memory, grid (num_work, q_heads).
template <int kHeadDim, int kRows, bool kTma>
__global__ void __launch_bounds__(PrefillSm90Shape<kHeadDim, true, kRows>::kThreads, 1)
    paged_prefill_sm90_kernel(KJIT_PARAMS PrefillParams p) {
  detail::prefill_sm90_body<kHeadDim, true, kRows, kTma>(p);
}

}  // namespace kjit::attention
