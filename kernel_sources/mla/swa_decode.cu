// Fused fp8 sliding-window decode attention for MLA models (DeepSeek-V3/V4 style: K = V, one
// 512-wide latent per cached token, 128 query heads). Contract: include/kjit/ops/swa_decode.hpp;
// host side: runtime/ops/mla/swa_decode.cc. The function, as a batched PyTorch version computes it
// (gather every token's window, dequantize, masked SDPA):
//
//   for token t, head h, over the window positions j < lens[t] whose slot indices[t, j] ≥ 0:
//     out[t, h] = Σ_j softmax_j(scale · q[t, h] · k_j) · k_j,  k_j = fp8(kv[slot_j]) · inv_scale[slot_j]
//
// ---------------------------------------------------------------------------------------------
// Design
// ---------------------------------------------------------------------------------------------
// CTA = (token, window split, `group` heads); four warps per 16 heads (an "m-tile", the M of
// mma.sync), so group 16 → 128 threads and group 32 → 256 threads sharing one KV slice.
//
// 1. Load. The CTA's window slice (≤ kTile rows of 512 fp8 bytes) goes into shared memory once,
//    raw, by cp.async; masked rows (position ≥ len, index < 0) are zero-filled and never read
//    from global memory. The same bytes feed Q·Kᵀ and P·V (K = V). 16-byte chunks are XOR-
//    swizzled per row so that both products' reads are bank-conflict free.
// 2. Q·Kᵀ. Warp (dh, th) of an m-tile multiplies its 16 heads by the rows of the 16-token steps
//    k ≡ th (mod 2), over head dims [256·dh, +256); its Q fragments stay in registers (64).
//    K fragments come straight from the raw rows: lane (g, t) reads whole 16-byte chunks of
//    row g (a dot product does not care about the order of its terms, so Q is loaded in the
//    same permuted dim order and nothing is shuffled). Every lane copies exactly the chunks it
//    reads here, so an m-tile waits only on its own cp.async groups (with two m-tiles, the one
//    that did not copy a step meets the one that did at a 64-thread named barrier).
// 3. Softmax. Both dim halves park their partial scores in shared memory; the finalizing warp
//    of each step adds them, applies the per-token factor scale·log2(e)·inv_scale, and the four
//    warps agree on each row's max. The slice (≤ 128 positions) is in flight at once, so the
//    softmax is exact, not online: no rescaling of the output accumulators.
// 4. P·V. Each of the CTA's 4·m-tiles warps owns 512 / (4·m-tiles) output dims for all of its
//    heads (16 heads × 128 dims, or 32 heads × 64 dims: 64 accumulators either way), so every V
//    value is read and converted once per CTA. B fragments hold two (f16) or four (fp8) tokens
//    per register: each lane reads 16 or 8 bytes of each of four rows and regroups them with
//    byte permutes.
// 5. One write: bf16 out (+ LSE), or, when the window is split, an f32 partial normalized by its
//    own sum and its log2 LSE, which swa_merge_kernel combines.
// 6. Cluster split (kCluster = 2, 4 or 8; sm_90+), for few tokens, where the (token, head group)
//    items leave most SMs idle and each CTA's chain of steps 1-5 is the whole latency: the
//    kCluster CTAs of one thread-block cluster share an item, CTA rank r running steps 1-4 over
//    the window slice [r·W/kCluster, +W/kCluster) (kTile is the smallest tile that holds it).
//    They merge in the same launch, without a workspace, through distributed shared memory.
//    The protocol (cluster_merge below):
//    a. Each CTA writes its partial into its own shared memory, over the rows, P and the
//       statistics, which a CTA barrier first shows are read for the last time: O normalized by
//       its own row sums, f32 [kGroup heads][512] (chunks swizzled, xchg_chunk), and the log2
//       LSE of each head (the exchange, SwaShape::kXchg*). Nothing writes it again.
//    b. barrier.cluster.arrive.release + barrier.cluster.wait.acquire: every CTA's exchange is
//       written and visible cluster-wide, and every CTA of the cluster has started (reading a
//       peer's shared memory needs both).
//    c. CTA r merges output dims [r·512/kCluster, +512/kCluster) of all kGroup heads: for each
//       (head, 8 dims) it reads the kCluster partials and LSEs (mapa + ld.shared::cluster, its
//       own included) and weights partial s by 2^(lse_s − max lse), as swa_merge_kernel does;
//       the LSE of the merge is max + log2 Σ weights, exact as in the unsplit kernel.
//    d. barrier.cluster.arrive.relaxed right after those reads (their values are loaded and
//       used: nothing is left to order, and a release arrive compiles to MEMBAR.ALL.GPU), then
//       its bf16 stores (rank 0 also the LSE), then
//       barrier.cluster.wait: no CTA exits, which frees the shared memory its peers read,
//       before every peer has finished reading it; the stores overlap that wait.
//
// Arithmetic per arch (swa_ptx.cuh):
//  - sm_89, sm_120+: mma.sync m16n8k32 with E4M3 A and the raw cache bytes (E4M3 or E5M2) as B:
//    no conversion of K or V at all. q (per-row power of two) and P' are split into E4M3
//    hi + lo (Veltkamp), placed in k 0..15 and 16..31 against the same B register twice: ~8
//    significant bits, like bf16.
//  - sm_90, sm_100 (where ptxas emulates fp8 mma.sync with conversions): mma.sync m16n8k16 f16.
//    fp8 is exact in f16; K fragments convert with cvt.f16x2.e4m3x2 (the conversion pipe, slow
//    on Hopper) and V fragments with byte permutes and bit operations (the integer pipe), so the
//    two pipes share the conversion work. q goes to f16 through a per-row power of two (exact
//    for bf16 down to 2^-28 of the row max); P' in f16.
//  - sm_80: the f16 path with bit operations for both (E4M3 comes out as value · 2^-8).
//  In every path inv_scale is applied in f32: to the scores (per token) and folded into
//  P' = p · s · c, c a power of two that puts max |P'| just below the operand type's range.
//  A bf16 PyTorch version instead rounds each dequantized value fp8 · inv_scale to bf16 before
//  both products; the float64 reference (tools/testing/reference_swa.cc) does too, and the kernel
//  differs from it by that rounding (~2^-9 per value, random sign: ~1e-3 relative L2 on out).
//  Exponentials are ex2.approx on log2-domain scores.
//
// Why not dequantize into a bf16 tile and ldmatrix it (the obvious mma.sync design)? Each KV row is used
// by NH/16 = 8 m-tiles and mma.sync reads B per warp: (K + V) · 8 · 2 bytes = 2 MiB of shared
// memory reads per token plus the exchange, ≈ 70 µs at T = 512 on an H200 (128 B/clk/SM).
// Reading raw fp8 halves that. Per token with groups of 32 (T ≥ 64) the kernel reads ≈ 1 MiB of
// shared memory (≈ 8k SM-cycles at 128 B/clk), issues 8192 mma (≈ 12k SM-cycles at mma.sync
// rates) and on sm_90 converts 512 Ki fp8 values for K on the conversion pipe (≈ 16k SM-cycles
// if it runs at 16/clk/SM) and 256 Ki for V on the integer pipe (≈ 8k), i.e. ≈ 34 µs of SM
// time at T = 512 over 132 SMs if the pipes overlapped. They do not (measured 144 µs): a CTA
// runs its phases in sequence behind barriers and the two CTAs of an SM start together, so the
// pipe times add (≈ 44k SM-cycles per token), and every wave of CTAs first waits for two
// dependent DRAM round trips (indices, then rows). docs/perf-notes.md ("fp8 SWA decode") has
// the counts per CTA and what would remove each term.
//
// Floor (H200: 4.2 TB/s, 790 TFLOP/s bf16; NH 128, HD 512, W 128), per token:
//   bytes = W·HD fp8 KV (64 KiB; the NH/group CTAs of a token share it through L2)
//         + W·2 scales + W·8 indices + 8 lens + NH·HD·2 q (128 KiB) + NH·HD·2 out (128 KiB)
//         = 321.3 KiB
//   FLOPs = 4 · NH · W · HD = 33.6 MFLOP
//   floor(T) = max(T · 329 kB / 4.2 TB/s, T · 33.6 MFLOP / 790 TFLOP/s) = T · 78 ns
//   T = 1: 0.08 µs (latency bound in practice), T = 64: 5.0 µs, T = 512: 40.1 µs.
//
// Resources (NVRTC 13.0, ptxas -v; launch bounds (threads, 2)), registers / spill bytes:
//              sm_80     sm_89     sm_90a    sm_100a   sm_120
//   group 16   163 / 0   249 / 0   163 / 0   182 / 0   220 / 0
//   group 32   128 / 0   128 / 0   128 / 0   128 / 0   128 / 0
//   cluster split, group 16 / tile 64: 168 / 0 (sm_90a, sm_100a; 155 with 2 CTAs on sm_100a),
//   217 / 0 on sm_120; group 32: 128 / 0.
//   merge kernel: 40 / 0.
// Shared memory (dynamic): group 16 / tile 128: 86544 B, group 32 / tile 128: 107552 B, tile 64:
// 43536 / 54304 B → two CTAs per H200 SM (16 warps with group 32); a cluster split's exchange
// (32832 / 65664 B) raises group 32 / tile 64 to 65664 B. On 99 KiB parts (sm_86/89/120) the
// planner keeps group 16.
#include "kjit/config.cuh"
#include "kjit/float_bits.cuh"
#include "kjit/fp8_format.h"
#include "kjit/f16_bits.cuh"
#include "kjit/warp_reduce.cuh"
#include "mla/swa_cache.cuh"
#include "mla/swa_decode_params.h"
#include "mla/swa_ptx.cuh"
#include "mla/swa_split.cuh"

namespace kjit::mla {
namespace swa_detail {

/// f16 path only: log2 of the factor the f16 K / V fragments carry. E4M3 converted with bit
/// operations comes out as value · 2^-8 (it keeps E4M3's exponent bits, whose bias is 8 less
/// than f16's); the hardware cvt and E5M2 (a truncated f16) are exact. The fp8 mma path
/// multiplies the bytes themselves.
template <int kCache>
KJIT_DEVICE constexpr int k_bias_log2() {
  return kCache == kSwaCacheE4M3 && !KJIT_SWA_FP8_MMA && !KJIT_SWA_CVT_E4M3 ? -8 : 0;
}
template <int kCache>
KJIT_DEVICE constexpr int v_bias_log2() {
  return kCache == kSwaCacheE4M3 && !KJIT_SWA_FP8_MMA ? -8 : 0;
}

/// E4M3 in the high byte of each 16-bit half of `x` (low bytes ignored) → f16x2 of value · 2^-8:
/// s eeee mmm at bits 15..8 → s at 15, eeee mmm at 13..7, subnormals included. NaN codes become
/// finite values (they are not valid cache contents).
KJIT_DEVICE uint32_t e4m3_high_bytes_to_f16x2(uint32_t x) {
  return (x & 0x80008000u) | ((x & 0x7f007f00u) >> 1);
}

/// f16 path, Q·Kᵀ operand: the two fp8 values in the low (kHigh false) or high 16 bits of `w` as
/// f16x2 (the lower byte in the lower half), times 2^k_bias_log2. E4M3 uses the hardware cvt
/// where there is one, so that K fragments load the conversion pipe while V fragments
/// (v_fp8x2_to_f16x2) load the integer pipe.
template <int kCache, bool kHigh>
KJIT_DEVICE uint32_t k_fp8x2_to_f16x2(uint32_t w) {
  // [0, b0, 0, b1]: each fp8 byte in the high byte of a 16-bit half.
  const uint32_t spread = __byte_perm(w, 0u, kHigh ? 0x3424 : 0x1404);
  if (kCache == kSwaCacheE5M2) return spread;  // E5M2 is the high byte of an f16
#if KJIT_SWA_CVT_E4M3
  (void)spread;
  return cvt_e4m3x2_f16x2<kHigh>(w);
#else
  return e4m3_high_bytes_to_f16x2(spread);
#endif
}

/// f16 path, P·V operand: (byte kD of token word a, byte kD of token word b) as f16x2, times
/// 2^v_bias_log2: one byte permute [a_d, a_d, b_d, b_d] and bit operations.
template <int kCache, int kD>
KJIT_DEVICE uint32_t v_fp8x2_to_f16x2(uint32_t a, uint32_t b) {
  const uint32_t x = __byte_perm(a, b, kD * 0x0011 + (4 + kD) * 0x1100);
  if (kCache == kSwaCacheE5M2) return x & 0xff00ff00u;
  return e4m3_high_bytes_to_f16x2(x);
}

/// Cluster split exchange (SwaShape::kXchgOffset): where 16-byte chunk `c` (dims 4c..4c+3) of
/// head row `row` is stored in that row. The chunk index's low three bits are XORed with its bits
/// 3-4 and the row's parity at bit 2, so the eight lanes of a store phase (rows g, g+1 × the
/// quad's four t, whose chunks differ in bits 3-4 with group 16) and of a merge read (eight
/// consecutive 8-dim pieces of one row) hit eight distinct bank groups. (Group 32's stores keep a
/// 2-way conflict: cluster splits run at small T, where the planner takes group 16.)
KJIT_DEVICE int xchg_chunk(int row, int c) { return c ^ (((c >> 3) & 3) | ((row & 1) << 2)); }

/// fp8 path: four floats as E4M3 words (element i in byte i) of their hi and lo parts.
KJIT_DEVICE void split_e4m3x4(float x0, float x1, float x2, float x3, uint32_t& hi, uint32_t& lo) {
  float h0, h1, h2, h3, l0, l1, l2, l3;
  split_hi_lo(x0, h0, l0);
  split_hi_lo(x1, h1, l1);
  split_hi_lo(x2, h2, l2);
  split_hi_lo(x3, h3, l3);
  hi = e4m3x2_pack(h0, h1) | (e4m3x2_pack(h2, h3) << 16);
  lo = e4m3x2_pack(l0, l1) | (e4m3x2_pack(l2, l3) << 16);
}

/// Exponent of the power of two that q rows and P are scaled to (max magnitude in
/// [2^e, 2^(e+1))): f16 path 14 (below f16's 65504), fp8 path 7 (below E4M3's 448).
constexpr int kOperandExp = KJIT_SWA_FP8_MMA ? 7 : 14;

/// bf16x2 → f16x2 of (x · f): exact while |x · f| ≥ 2^-14 (f is a power of two).
KJIT_DEVICE uint32_t bf16x2_to_f16x2_scaled(uint32_t w, float f) {
  const float lo = __uint_as_float(w << 16) * f;
  const float hi = __uint_as_float(w & 0xffff0000u) * f;
  return pack_f16x2(lo, hi);
}

/// cp_async_wait for a run-time count (a branch on `pending`, warp-uniform here).
KJIT_DEVICE void cp_async_wait_n(int pending) {
  if (pending <= 0) {
    cp_async_wait<0>();
  } else if (pending == 1) {
    cp_async_wait<1>();
  } else if (pending == 2) {
    cp_async_wait<2>();
  } else {
    cp_async_wait<3>();
  }
}

/// The normalization of output row `rr` (0..15) of an m-tile from its statistics block `st`
/// (SwaShape stats): `inv` = 2^-c / Σp undoes the P scale c and the softmax sum (0 for a row
/// that attended nothing) and `lse2` is the row's log2 LSE (−inf for such a row).
template <int kVBiasLog2>
KJIT_DEVICE void row_normalizer(const float* st, int rr, float& inv, float& lse2) {
  const float* rowmax = st;
  const float* rowsum = st + 64;
  const float* scalemax = st + 128;
  const float sm = fmaxf(fmaxf(scalemax[0], scalemax[1]), fmaxf(scalemax[2], scalemax[3]));
  const int ce = sm > 0.f ? max(-126, min(126, kOperandExp - (ilog2(sm) - kVBiasLog2))) : 0;
  const float l = (rowsum[rr] + rowsum[16 + rr]) + (rowsum[32 + rr] + rowsum[48 + rr]);
  const float mx = fmaxf(fmaxf(rowmax[rr], rowmax[16 + rr]), fmaxf(rowmax[32 + rr], rowmax[48 + rr]));
  inv = l > 0.f ? (1.f / l) * exp2i(-ce) : 0.f;
  lse2 = l > 0.f ? mx + __log2f(l) : neg_inf();
}

/// Steps 6b-6d of the cluster split (file comment): after this CTA wrote its exchange, meets the
/// cluster, merges output dims [rank·kHeadDim/kCluster, +kHeadDim/kCluster) of the kGroup heads
/// from every CTA's exchange and stores them as bf16 (and the LSE, rank 0), then keeps its shared
/// memory until every peer has read it. `rank` is this CTA's rank in the cluster.
template <int kHeadDim, int kGroup, int kTile, int kCluster>
KJIT_DEVICE void cluster_merge(const SwaDecodeParams& p, const unsigned char* smem, int token, int head_group,
                               int rank) {
  using Shape = SwaShape<kHeadDim, kGroup, kTile>;
  constexpr int kSliceDims = kHeadDim / kCluster;  // output dims this CTA merges
  constexpr int kPieces = kSliceDims / 8;          // 8-dim pieces of one head row: 2 chunks in, 16 B out
  static_assert(kGroup * kPieces % Shape::kThreads == 0, "every thread merges whole pieces");
  constexpr int kJobs = kGroup * kPieces / Shape::kThreads;  // pieces per thread: 8 / kCluster
  constexpr uint32_t kRowBytes = kHeadDim * 4;
  const uint32_t xchg = smem_u32(smem + Shape::kXchgOffset);

  sm90::cluster_sync();  // b: every exchange of the cluster is written and visible

  // c: consecutive threads take consecutive pieces of a row (16-byte stores side by side).
  uint4 packed[kJobs];
  float lse[kJobs];
#pragma unroll
  for (int i = 0; i < kJobs; ++i) {
    const int job = static_cast<int>(threadIdx.x) + i * Shape::kThreads;
    const int row = job / kPieces;
    const int c = (rank * kSliceDims + (job % kPieces) * 8) / 4;  // the piece's first chunk
    float l[kCluster];
    float4 a[kCluster], b[kCluster];
#pragma unroll
    for (int r = 0; r < kCluster; ++r) {
      const uint32_t peer = sm90::map_shared_rank(xchg, static_cast<uint32_t>(r));
      l[r] = sm90::ld_shared_cluster_f32(peer + (Shape::kXchgLseOffset - Shape::kXchgOffset) + 4 * row);
      const uint32_t xrow = peer + static_cast<uint32_t>(row) * kRowBytes;
      a[r] = sm90::ld_shared_cluster_f32x4(xrow + (xchg_chunk(row, c) << 4));
      b[r] = sm90::ld_shared_cluster_f32x4(xrow + (xchg_chunk(row, c + 1) << 4));
    }
    float m = neg_inf();
#pragma unroll
    for (int r = 0; r < kCluster; ++r) m = fmaxf(m, l[r]);
    const float base = m == neg_inf() ? 0.f : m;
    float total = 0.f;
    float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int r = 0; r < kCluster; ++r) {
      const float w = fast_exp2(l[r] - base);  // 0 for a slice that attended nothing
      total += w;
      acc[0] += w * a[r].x;
      acc[1] += w * a[r].y;
      acc[2] += w * a[r].z;
      acc[3] += w * a[r].w;
      acc[4] += w * b[r].x;
      acc[5] += w * b[r].y;
      acc[6] += w * b[r].z;
      acc[7] += w * b[r].w;
    }
    const float inv = total > 0.f ? 1.f / total : 0.f;
    packed[i] = make_uint4(pack_bf16x2(acc[0] * inv, acc[1] * inv), pack_bf16x2(acc[2] * inv, acc[3] * inv),
                           pack_bf16x2(acc[4] * inv, acc[5] * inv), pack_bf16x2(acc[6] * inv, acc[7] * inv));
    lse[i] = total > 0.f ? (m + __log2f(total)) * kLn2 : neg_inf();
  }

  sm90::cluster_arrive_relaxed();  // d: this CTA's reads of the exchanges are done (loaded: no release)
#pragma unroll
  for (int i = 0; i < kJobs; ++i) {
    const int job = static_cast<int>(threadIdx.x) + i * Shape::kThreads;
    const int row = job / kPieces;
    const int piece = job % kPieces;
    const int head = head_group * kGroup + row;
    bf16* orow = static_cast<bf16*>(p.out) + static_cast<int64_t>(token) * p.out_stride_t +
                 static_cast<int64_t>(head) * p.out_stride_h + rank * kSliceDims + piece * 8;
    *reinterpret_cast<uint4*>(orow) = packed[i];
    if (p.lse != nullptr && rank == 0 && piece == 0) {
      p.lse[static_cast<int64_t>(token) * p.lse_stride_t + static_cast<int64_t>(head) * p.lse_stride_h] = lse[i];
    }
  }
  sm90::cluster_wait_acquire();  // ... and so are the peers' reads of this CTA's exchange
}

/// The XOR applied to the low three bits of a row's 16-byte chunk index. Q·Kᵀ reads
/// (eight lanes of a phase = rows 2p, 2p+1 × chunks 4q + t) and P·V reads (rows c + 2t, chunk
/// 8w + g) then hit eight distinct bank groups; so do the cp.async writes.
KJIT_DEVICE int swizzle(int row) { return (((row >> 1) & 3) << 1) ^ ((row & 1) << 2); }

/// The fp8 format (fp8::kFormat*) of a cache format (kSwaCache*): the B type of the fp8 MMA.
template <int kCache>
constexpr int kCacheFormat = kCache == kSwaCacheE5M2 ? fp8::kFormatE5M2 : fp8::kFormatE4M3;

}  // namespace swa_detail

/// The decode kernel; see the file comment. kHeadDim 512; kGroup 16 or 32 heads per CTA;
/// kTile 64 or 128 window positions per CTA (the host splits longer slices); kWindow the
/// indices row length; kCache kSwaCacheE4M3 or kSwaCacheE5M2; kCluster 1, or the CTAs of a
/// thread-block cluster that split the window (step 6; launched with that cluster size).
template <int kHeadDim, int kGroup, int kTile, int kWindow, int kCache, int kCluster>
__global__ void __launch_bounds__((SwaShape<kHeadDim, kGroup, kTile>::kThreads), 2)
    swa_decode_kernel(KJIT_PARAMS SwaDecodeParams p) {
#if KJIT_HAS_SM80
  using namespace swa_detail;
  static_assert(kHeadDim == kSwaHeadDim, "the kernel's lane maps are written for head_dim 512");
  static_assert(kGroup == 16 || kGroup == 32, "group: 16 or 32 heads per CTA");
  static_assert(kTile == 64 || kTile == 128, "tile: 64 or 128 window positions per CTA");
  static_assert(kWindow % kSwaStepTokens == 0, "window: a multiple of 16");
  static_assert(kCluster == 1 || kCluster == 2 || kCluster == 4 || kCluster == 8, "cluster split: 1, 2, 4 or 8 CTAs");
  static_assert(kCluster == 1 || (kWindow % (kSwaStepTokens * kCluster) == 0 && kWindow / kCluster <= kTile),
                "cluster split: whole 16-position steps per CTA, within its tile");
  constexpr int kMTiles = kGroup / kSwaHeadsPerTile;
  constexpr int kSteps = kTile / kSwaStepTokens;  // token k-steps of a full slice
  constexpr int kMySteps = kSteps / 2;             // Q·Kᵀ steps of one warp (k ≡ th mod 2)
  constexpr int kFinSteps = kMySteps / 2;          // steps it finalizes (i ≡ dh mod 2)
  constexpr int kRowBytes = kHeadDim;
  constexpr int kQkDims = kHeadDim / 2;            // Q·Kᵀ dims of one warp
  constexpr int kQkChunks = kQkDims / 64;          // 16-byte chunks a lane reads per row
  constexpr int kDimSteps = kQkDims / 16;          // mma k-steps over those dims
  constexpr int kPvDims = kHeadDim / (4 * kMTiles);  // P·V output dims of one warp (all heads)
  constexpr int kPvLane = kPvDims / 8;             // bytes of a row one lane reads for P·V
  constexpr int kPvTiles = kPvDims / 8;            // P·V n-tiles of one warp
  constexpr int kPvWords = kPvTiles / 4;           // 32-bit words a lane reads per row
  using Shape = SwaShape<kHeadDim, kGroup, kTile>;
  constexpr int kKBiasLog2 = k_bias_log2<kCache>();
  constexpr int kVBiasLog2 = v_bias_log2<kCache>();
  constexpr float kInvKBias = kKBiasLog2 == 0 ? 1.f : 256.f;  // 2^-kKBiasLog2
  constexpr float kInvVBias = kVBiasLog2 == 0 ? 1.f : 256.f;

  unsigned char* const smem = dynamic_smem();
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int mt = warp >> 2;  // m-tile of the CTA
  const int w4 = warp & 3;   // warp within the m-tile
  const int dh = w4 >> 1;    // Q·Kᵀ dim half
  const int th = w4 & 1;     // Q·Kᵀ step parity
  const int g = lane >> 2;
  const int t = lane & 3;

  unsigned char* raw = smem + Shape::kRawOffset;
  const uint32_t raw_u32 = smem_u32(raw);
  float* xbuf = reinterpret_cast<float*>(smem + Shape::kXbufOffset + mt * Shape::kXbufBytesPerTile);
  uint4* pbuf = reinterpret_cast<uint4*>(smem + Shape::kPbufOffset + mt * Shape::kPbufBytesPerTile);
  float* stats = reinterpret_cast<float*>(smem + Shape::kStatsOffset + mt * Shape::kStatsBytesPerTile);
  float* s_rowmax = stats;        // [4][16]
  float* s_rowsum = stats + 64;   // [4][16]
  float* s_scalemax = stats + 128;  // [4]

  // ---- which token, split and heads --------------------------------------------------------
  uint32_t cta = blockIdx.x;
  int split = 0;
  if constexpr (kCluster > 1) {
    split = static_cast<int>(sm90::cluster_ctarank());  // = blockIdx.x % kCluster
    cta /= kCluster;
  }
  const int head_group = static_cast<int>(cta % static_cast<uint32_t>(p.head_groups));
  cta /= static_cast<uint32_t>(p.head_groups);
  if constexpr (kCluster == 1) {
    split = static_cast<int>(cta % static_cast<uint32_t>(p.num_splits));
    cta /= static_cast<uint32_t>(p.num_splits);
  }
  const int token = static_cast<int>(cta);
  const int split_len = kCluster > 1 ? kWindow / kCluster : p.split_len;  // window positions of a split
  const int head0 = head_group * kGroup + mt * kSwaHeadsPerTile + g;  // this lane's rows: head0, head0 + 8

  // The slots of the rows this lane copies are requested before lens (each is a DRAM round trip
  // and neither depends on the other); the q rows right after the copies are issued. (Loading q
  // first as well would hold its 64 registers through the copies and spill.)
  const int start = split * split_len;
  const int avail = min(split_len, kWindow - start);  // window positions of this split
  const long long* idx_row =
      reinterpret_cast<const long long*>(p.indices) + static_cast<int64_t>(token) * kWindow + start;
  int64_t slots[kMySteps][2];
#pragma unroll
  for (int i = 0; i < kMySteps; ++i) {
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      const int r = (th + 2 * i) * kSwaStepTokens + nt * 8 + g;
      slots[i][nt] = i % kMTiles == mt && r < avail ? static_cast<int64_t>(__ldg(idx_row + r)) : -1;
    }
  }

  int64_t len64 = p.lens_i64 ? __ldg(static_cast<const long long*>(p.lens) + token)
                             : static_cast<int64_t>(__ldg(static_cast<const int*>(p.lens) + token));
  len64 = len64 < 0 ? 0 : (len64 > kWindow ? kWindow : len64);
  // Window positions [start, start + n_tok) count; the lens clamp makes n_tok ≤ avail.
  const int n_tok = max(min(split_len, static_cast<int>(len64) - start), 0);
  const int n_steps = (n_tok + kSwaStepTokens - 1) / kSwaStepTokens;

  // ---- 1. cp.async of the rows this lane reads in Q·Kᵀ (one commit group per own step) -----
#pragma unroll
  for (int i = 0; i < kMySteps; ++i) {
    if (i % kMTiles == mt) {
      const int k = th + 2 * i;
      if (k < n_steps) {
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
          const int r = k * kSwaStepTokens + nt * 8 + g;
          const int64_t slot = r < n_tok ? slots[i][nt] : -1;
          const bool valid = slot >= 0;
          const uint8_t* src = valid ? kv_row(p, slot) : p.fill_src;
          // The finalizing warps read this row's scale after Q·Kᵀ: pull it into L1 now.
          if (valid) prefetch_l1(static_cast<const unsigned short*>(p.inv_scale) + slot * p.scale_stride);
          const uint32_t dst_row = raw_u32 + r * kRowBytes;
          const int sw = swizzle(r);
#pragma unroll
          for (int q = 0; q < kQkChunks; ++q) {
            const int c = dh * (kQkDims / 16) + 4 * q + t;
            cp_async_16(dst_row + ((c ^ sw) << 4), valid ? src + c * 16 : src, valid);
          }
        }
      }
      cp_async_commit();
    }
  }

  // This lane's q rows (see the Q fragments below).
  uint4 qraw[2][kQkChunks][2];
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const bf16* qrow = static_cast<const bf16*>(p.q) + static_cast<int64_t>(token) * p.q_stride_t +
                                static_cast<int64_t>(head0 + 8 * hr) * p.q_stride_h + dh * kQkDims + 16 * t;
#pragma unroll
    for (int q = 0; q < kQkChunks; ++q) {
      qraw[hr][q][0] = __ldg(reinterpret_cast<const uint4*>(qrow + 64 * q));
      qraw[hr][q][1] = __ldg(reinterpret_cast<const uint4*>(qrow + 64 * q + 8));
    }
  }

  // ---- Q fragments: per-row power of two; f16, or E4M3 hi + lo on the fp8 mma path --------
  // Lane (g, t) holds, for rows head0 and head0 + 8, dims dh·256 + 64q + 16t + [0, 16) for
  // q < 4. mma k-step 4q + u takes dims +4u .. +4u+3 — the order the K fragments below use:
  // f16: A cols 2t, 2t+1 ← dims +4u, +4u+1 and cols 2t+8, 2t+9 ← +4u+2, +4u+3;
  // fp8: A cols 4t..4t+3 ← the 4 dims' hi parts and cols 16+4t.. ← their lo parts.
  uint32_t qf[kDimSteps][4];
  float rowf[2];  // 2^-e of rows head0, head0 + 8
  {
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      float m = 0.f;
#pragma unroll
      for (int q = 0; q < kQkChunks; ++q) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const uint32_t w[4] = {qraw[hr][q][h].x, qraw[hr][q][h].y, qraw[hr][q][h].z, qraw[hr][q][h].w};
#pragma unroll
          for (int u = 0; u < 4; ++u) {
            m = fmaxf(m, fabsf(__uint_as_float(w[u] << 16)));
            m = fmaxf(m, fabsf(__uint_as_float(w[u] & 0xffff0000u)));
          }
        }
      }
      m = quad_max(m);
      // max |q·2^e| in [2^kOperandExp, 2^(kOperandExp+1)): f16 holds every bf16 value down to
      // 2^-28 of the max exactly; E4M3 hi + lo keep ~8 bits down to ~2^-12 of the max.
      const int e = m > 0.f ? min(kOperandExp - ilog2(m), 126) : 0;
      const float f = exp2i(e);
      rowf[hr] = exp2i(-e);
#pragma unroll
      for (int q = 0; q < kQkChunks; ++q) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const uint32_t w[4] = {qraw[hr][q][h].x, qraw[hr][q][h].y, qraw[hr][q][h].z, qraw[hr][q][h].w};
          // chunk half h holds dims +8h .. +8h+7 = mma steps 4q + 2h (words 0, 1) and 4q + 2h + 1
#pragma unroll
          for (int u2 = 0; u2 < 2; ++u2) {
            const int ds = 4 * q + 2 * h + u2;
#if KJIT_SWA_FP8_MMA
            // A cols 4t..4t+3 (hi, a0/a1) and 16+4t.. (lo, a2/a3): the step's 4 dims, twice.
            split_e4m3x4(__uint_as_float(w[2 * u2] << 16) * f, __uint_as_float(w[2 * u2] & 0xffff0000u) * f,
                         __uint_as_float(w[2 * u2 + 1] << 16) * f, __uint_as_float(w[2 * u2 + 1] & 0xffff0000u) * f,
                         qf[ds][hr], qf[ds][2 + hr]);
#else
            qf[ds][hr] = bf16x2_to_f16x2_scaled(w[2 * u2], f);          // cols 2t, 2t+1
            qf[ds][2 + hr] = bf16x2_to_f16x2_scaled(w[2 * u2 + 1], f);  // cols 2t+8, 2t+9
#endif
          }
        }
      }
    }
  }

  // ---- 2. Q·Kᵀ over this warp's steps ------------------------------------------------------
  // Not unrolled: unrolling lets the scheduler hoist the next step's loads and conversions,
  // which costs more registers than the 64 Q fragments leave.
#pragma unroll 1
  for (int i = 0; i < kMySteps; ++i) {
    const int k = th + 2 * i;
    if (kMTiles == 1) {
      cp_async_wait_n(kMySteps - 1 - i);
    } else {
      // Step i was copied by m-tile i % 2; its lanes wait for it, then both m-tiles' warps of
      // this (dh, th) meet (the copies of one lane feed the same lane of the other m-tile).
      // Met on every step, with work or not: then every warp passes the same barriers whatever
      // its step parity. (Under `k < n_steps` the th = 0 and th = 1 warps passed different
      // counts when n_steps is odd; the results were right, but compute-sanitizer racecheck
      // then reported the softmax statistics' stores and loads around the CTA barrier below as
      // hazards.) A step with no work makes this a wait for the partner warp alone.
      if ((i & 1) == mt) cp_async_wait_n((kMySteps - 1 - i) / 2);
      named_barrier(5 + w4, 64);
    }
    if (k < n_steps) {
      // Both dim halves park their partial of step i, [th][i][dh][n-tile][lane][4]; the warp
      // with dh == i % 2 finalizes it. Each n-tile is stored before the next one's rows are
      // read, which keeps the scheduler from holding both tiles' chunks at once.
      float4* dst = reinterpret_cast<float4*>(xbuf) + (((th * kMySteps + i) * 2 + dh) * 2) * 32 + lane;
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        // Two accumulators (even / odd dim steps): one would chain all 16 mma of the n-tile on
        // each other's results (~33 clk apiece on Hopper), which with 4-8 warps per scheduler
        // leaves the tensor pipe idle; two halve the chain for 4 registers.
        float s[4] = {0.f, 0.f, 0.f, 0.f};
        float s1[4] = {0.f, 0.f, 0.f, 0.f};
        const int r = k * kSwaStepTokens + nt * 8 + g;
        const unsigned char* row = raw + r * kRowBytes;
        const int sw = swizzle(r);
#pragma unroll
        for (int q = 0; q < kQkChunks; ++q) {
          const int c = dh * (kQkDims / 16) + 4 * q + t;
          const uint4 w = *reinterpret_cast<const uint4*>(row + ((c ^ sw) << 4));
          const uint32_t ws[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
          for (int u = 0; u < 4; ++u) {
            const int ds = 4 * q + u;
            float(&acc)[4] = (u & 1) ? s1 : s;
#if KJIT_SWA_FP8_MMA
            // B rows 4t..4t+3 (against q hi) and 16+4t.. (against q lo) are both this word.
            mma_fp8<fp8::kFormatE4M3, kCacheFormat<kCache>>(acc, qf[ds][0], qf[ds][1], qf[ds][2], qf[ds][3], ws[u], ws[u]);
#else
            mma_f16_16816(acc, qf[ds][0], qf[ds][1], qf[ds][2], qf[ds][3], k_fp8x2_to_f16x2<kCache, false>(ws[u]),
                    k_fp8x2_to_f16x2<kCache, true>(ws[u]));
#endif
          }
        }
        dst[nt * 32] = make_float4((s[0] + s1[0]) * rowf[0], (s[1] + s1[1]) * rowf[0], (s[2] + s1[2]) * rowf[1],
                                   (s[3] + s1[3]) * rowf[1]);
      }
    }
  }
  // Scales of the tokens whose scores this lane finalizes: steps k = th + 2i, i = dh + 2f; C
  // columns 2t, 2t+1 of n-tiles 0 and 1 → window offsets 16k + {2t, 2t+1, 8+2t, 9+2t}. (Loaded
  // here, from L1 after the prefetch above: holding them through Q·Kᵀ would spill.)
  float tok_scale[kFinSteps][4];
  uint32_t tok_valid = 0;
#pragma unroll
  for (int f = 0; f < kFinSteps; ++f) {
    const int k = th + 2 * (dh + 2 * f);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int r = k * kSwaStepTokens + (j >> 1) * 8 + 2 * t + (j & 1);
      const int64_t slot = r < n_tok ? static_cast<int64_t>(__ldg(idx_row + r)) : -1;
      tok_scale[f][j] = 0.f;
      if (slot >= 0) {
        tok_scale[f][j] = inv_scale_of(p, slot);
        tok_valid |= 1u << (f * 4 + j);
      }
    }
  }

  named_barrier(1 + mt * 2 + th, 64);  // the two dim halves of (m-tile, th)

  // ---- 3. full scores, softmax ---------------------------------------------------------------
  const float colf_base = p.scale_log2 * kInvKBias;
  float y[kFinSteps][2][4];
  float mloc[2] = {neg_inf(), neg_inf()};
  float smax = 0.f;
#pragma unroll
  for (int f = 0; f < kFinSteps; ++f) {
    const int i = dh + 2 * f;
    const int k = th + 2 * i;
    const bool active = k < n_steps;
    const float4* src = reinterpret_cast<const float4*>(xbuf) + ((th * kMySteps + i) * 2 * 2) * 32 + lane;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      float sum[4] = {0.f, 0.f, 0.f, 0.f};
      if (active) {
        const float4 a = src[nt * 32];       // dh 0
        const float4 b = src[64 + nt * 32];  // dh 1
        sum[0] = a.x + b.x;
        sum[1] = a.y + b.y;
        sum[2] = a.z + b.z;
        sum[3] = a.w + b.w;
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int j = nt * 2 + (e & 1);
        const bool valid = (tok_valid >> (f * 4 + j)) & 1u;
        y[f][nt][e] = valid ? sum[e] * (tok_scale[f][j] * colf_base) : neg_inf();
        mloc[e >> 1] = fmaxf(mloc[e >> 1], y[f][nt][e]);
      }
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) smax = fmaxf(smax, fabsf(tok_scale[f][j]));
  }
  mloc[0] = quad_max(mloc[0]);
  mloc[1] = quad_max(mloc[1]);
  smax = warp_max(smax);
  if (t == 0) {
    s_rowmax[w4 * 16 + g] = mloc[0];
    s_rowmax[w4 * 16 + g + 8] = mloc[1];
  }
  if (lane == 0) s_scalemax[w4] = smax;
  __syncthreads();

  float mrow[2];
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    mrow[hr] = fmaxf(fmaxf(s_rowmax[g + 8 * hr], s_rowmax[16 + g + 8 * hr]),
                     fmaxf(s_rowmax[32 + g + 8 * hr], s_rowmax[48 + g + 8 * hr]));
  }
  const float smax_all = fmaxf(fmaxf(s_scalemax[0], s_scalemax[1]), fmaxf(s_scalemax[2], s_scalemax[3]));
  // c puts max |P'| = smax · c / v_bias in [2^kOperandExp, 2^(kOperandExp+1)).
  const int c_exp = smax_all > 0.f ? max(-126, min(126, kOperandExp - (ilog2(smax_all) - kVBiasLog2))) : 0;
  const float c_norm = exp2i(c_exp);
  {
    const float base[2] = {mrow[0] == neg_inf() ? 0.f : mrow[0],
                           mrow[1] == neg_inf() ? 0.f : mrow[1]};
    float lsum[2] = {0.f, 0.f};
#pragma unroll
    for (int f = 0; f < kFinSteps; ++f) {
      const int k = th + 2 * (dh + 2 * f);
      if (k < n_steps) {
        float pp[2][4];
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float pe = fast_exp2(y[f][nt][e] - base[e >> 1]);
            lsum[e >> 1] += pe;
            pp[nt][e] = pe * ((tok_scale[f][nt * 2 + (e & 1)] * c_norm) * kInvVBias);
          }
        }
#if KJIT_SWA_FP8_MMA
        // A row g / g+8, cols 4t..4t+3 = tokens (2t, 2t+1, 8+2t, 9+2t) of the step (P·V's k
        // order; V's B fragment reads the same rows), hi in cols 0..15 and lo in 16..31.
        uint32_t hi0, lo0, hi1, lo1;
        split_e4m3x4(pp[0][0], pp[0][1], pp[1][0], pp[1][1], hi0, lo0);
        split_e4m3x4(pp[0][2], pp[0][3], pp[1][2], pp[1][3], hi1, lo1);
        pbuf[k * 32 + lane] = make_uint4(hi0, hi1, lo0, lo1);
#else
        pbuf[k * 32 + lane] = make_uint4(pack_f16x2(pp[0][0], pp[0][1]), pack_f16x2(pp[0][2], pp[0][3]),
                                         pack_f16x2(pp[1][0], pp[1][1]), pack_f16x2(pp[1][2], pp[1][3]));
#endif
      }
    }
    lsum[0] = quad_sum(lsum[0]);
    lsum[1] = quad_sum(lsum[1]);
    if (t == 0) {
      s_rowsum[w4 * 16 + g] = lsum[0];
      s_rowsum[w4 * 16 + g + 8] = lsum[1];
    }
  }
  cp_async_wait<0>();
  __syncthreads();

  // ---- 4. P·V: warp pw owns dims [kPvDims·pw, +kPvDims) for all the CTA's heads ------------
  // With two m-tiles each warp multiplies both m-tiles' P by the same V fragments, so every V
  // value is read and converted once per CTA. n-tile j, column n ↔ dim kPvDims·pw + kPvLane·n + j
  // (kPvLane = kPvDims / 8 bytes a lane reads per row): lane (g, t) reads its kPvLane bytes of
  // rows 16k + {2t, 2t+1, 2t+8, 2t+9}; its C values are dims kPvDims·pw + 2·kPvLane·t + j (c0)
  // and + kPvLane (c1).
  const int pw = warp;
  float o[kMTiles][kPvTiles][4];
#pragma unroll
  for (int m = 0; m < kMTiles; ++m)
#pragma unroll
    for (int j = 0; j < kPvTiles; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[m][j][e] = 0.f;
  const int vbyte = kPvDims * pw + kPvLane * g;  // this lane's first byte of a row
  const uint4* pbuf0 = reinterpret_cast<const uint4*>(smem + Shape::kPbufOffset);
#pragma unroll 1
  for (int k = 0; k < n_steps; ++k) {
    uint4 a[kMTiles];
#pragma unroll
    for (int m = 0; m < kMTiles; ++m) a[m] = pbuf0[m * (Shape::kPbufBytesPerTile / 16) + k * 32 + lane];
    const int r0 = k * kSwaStepTokens + 2 * t;
    uint32_t v[4][kPvWords];  // rows 2t, 2t+1, 2t+8, 2t+9
#pragma unroll
    for (int rr = 0; rr < 4; ++rr) {
      const int r = r0 + (rr & 1) + (rr >> 1) * 8;
      const unsigned char* src = raw + r * kRowBytes + (((vbyte >> 4) ^ swizzle(r)) << 4) + (vbyte & 15);
      if constexpr (kPvWords == 4) {
        const uint4 w = *reinterpret_cast<const uint4*>(src);
        v[rr][0] = w.x;
        v[rr][1] = w.y;
        v[rr][2] = w.z;
        v[rr][3] = w.w;
      } else {
        const uint2 w = *reinterpret_cast<const uint2*>(src);
        v[rr][0] = w.x;
        v[rr][1] = w.y;
      }
    }
#pragma unroll
    for (int u = 0; u < kPvWords; ++u) {
      // The B fragments of dims 4u..4u+3 of this lane's bytes (n-tiles 4u..4u+3).
      uint32_t b0[4], b1[4];
#if KJIT_SWA_FP8_MMA
      // B rows 4t..4t+3 = tokens (2t, 2t+1, 2t+8, 2t+9) of one dim: a 4x4 byte transpose of the
      // four rows' word u; the same word serves rows 16+4t.. (P's lo part).
      const uint32_t ab0 = __byte_perm(v[0][u], v[1][u], 0x5140);  // [A0, B0, A1, B1]
      const uint32_t ab1 = __byte_perm(v[0][u], v[1][u], 0x7362);  // [A2, B2, A3, B3]
      const uint32_t cd0 = __byte_perm(v[2][u], v[3][u], 0x5140);
      const uint32_t cd1 = __byte_perm(v[2][u], v[3][u], 0x7362);
      b0[0] = __byte_perm(ab0, cd0, 0x5410);  // [A0, B0, C0, D0]
      b0[1] = __byte_perm(ab0, cd0, 0x7632);
      b0[2] = __byte_perm(ab1, cd1, 0x5410);
      b0[3] = __byte_perm(ab1, cd1, 0x7632);
#pragma unroll
      for (int d = 0; d < 4; ++d) b1[d] = b0[d];
#else
      // B rows 2t, 2t+1 (b0) and 2t+8, 2t+9 (b1) of dim 4u + d.
      b0[0] = v_fp8x2_to_f16x2<kCache, 0>(v[0][u], v[1][u]);
      b0[1] = v_fp8x2_to_f16x2<kCache, 1>(v[0][u], v[1][u]);
      b0[2] = v_fp8x2_to_f16x2<kCache, 2>(v[0][u], v[1][u]);
      b0[3] = v_fp8x2_to_f16x2<kCache, 3>(v[0][u], v[1][u]);
      b1[0] = v_fp8x2_to_f16x2<kCache, 0>(v[2][u], v[3][u]);
      b1[1] = v_fp8x2_to_f16x2<kCache, 1>(v[2][u], v[3][u]);
      b1[2] = v_fp8x2_to_f16x2<kCache, 2>(v[2][u], v[3][u]);
      b1[3] = v_fp8x2_to_f16x2<kCache, 3>(v[2][u], v[3][u]);
#endif
#pragma unroll
      for (int m = 0; m < kMTiles; ++m) {
#pragma unroll
        for (int d = 0; d < 4; ++d) {
#if KJIT_SWA_FP8_MMA
          mma_fp8<fp8::kFormatE4M3, kCacheFormat<kCache>>(o[m][4 * u + d], a[m].x, a[m].y, a[m].z, a[m].w, b0[d], b1[d]);
#else
          mma_f16_16816(o[m][4 * u + d], a[m].x, a[m].y, a[m].z, a[m].w, b0[d], b1[d]);
#endif
        }
      }
    }
  }

  // ---- 5. epilogue: rows of every m-tile, this warp's dims -----------------------------------
  const int dim0 = kPvDims * pw + 2 * kPvLane * t;
  if constexpr (kCluster > 1) {
    // ---- 6a. this CTA's partial into its exchange (file comment) ------------------------------
    float inv[kMTiles][2], lse2[kMTiles][2];
#pragma unroll
    for (int m = 0; m < kMTiles; ++m) {
      const float* st = reinterpret_cast<const float*>(smem + Shape::kStatsOffset + m * Shape::kStatsBytesPerTile);
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) row_normalizer<kVBiasLog2>(st, g + 8 * hr, inv[m][hr], lse2[m][hr]);
    }
    __syncthreads();  // the rows, P and the statistics have been read for the last time
    float4* xo = reinterpret_cast<float4*>(smem + Shape::kXchgOffset);
    float* xlse = reinterpret_cast<float*>(smem + Shape::kXchgLseOffset);
#pragma unroll
    for (int m = 0; m < kMTiles; ++m) {
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int row = m * kSwaHeadsPerTile + g + 8 * hr;
        float4* xrow = xo + row * (kHeadDim / 4);
        const float f = inv[m][hr];
#pragma unroll
        for (int c = 0; c < kPvTiles / 4; ++c) {
          const int j = 4 * c;
          xrow[xchg_chunk(row, dim0 / 4 + c)] =
              make_float4(o[m][j][2 * hr] * f, o[m][j + 1][2 * hr] * f, o[m][j + 2][2 * hr] * f, o[m][j + 3][2 * hr] * f);
          xrow[xchg_chunk(row, (dim0 + kPvTiles) / 4 + c)] =
              make_float4(o[m][j][2 * hr + 1] * f, o[m][j + 1][2 * hr + 1] * f, o[m][j + 2][2 * hr + 1] * f,
                          o[m][j + 3][2 * hr + 1] * f);
        }
        if (pw == 0 && t == 0) xlse[row] = lse2[m][hr];
      }
    }
    cluster_merge<kHeadDim, kGroup, kTile, kCluster>(p, smem, token, head_group, split);
  } else {
#pragma unroll
    for (int m = 0; m < kMTiles; ++m) {
      const float* st = reinterpret_cast<const float*>(smem + Shape::kStatsOffset + m * Shape::kStatsBytesPerTile);
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int rr = g + 8 * hr;
        float inv, lse2;
        row_normalizer<kVBiasLog2>(st, rr, inv, lse2);
        const int head = head_group * kGroup + m * kSwaHeadsPerTile + rr;
        if (p.num_splits == 1) {
          bf16* orow = static_cast<bf16*>(p.out) + static_cast<int64_t>(token) * p.out_stride_t +
                       static_cast<int64_t>(head) * p.out_stride_h + dim0;
          uint32_t packed[kPvTiles];
#pragma unroll
          for (int j = 0; j < kPvTiles / 2; ++j) {
            packed[j] = pack_bf16x2(o[m][2 * j][2 * hr] * inv, o[m][2 * j + 1][2 * hr] * inv);
            packed[kPvTiles / 2 + j] = pack_bf16x2(o[m][2 * j][2 * hr + 1] * inv, o[m][2 * j + 1][2 * hr + 1] * inv);
          }
#pragma unroll
          for (int c = 0; c < kPvTiles / 4; ++c) {
            reinterpret_cast<uint4*>(orow)[c] =
                make_uint4(packed[4 * c], packed[4 * c + 1], packed[4 * c + 2], packed[4 * c + 3]);
          }
          if (p.lse != nullptr && pw == 0 && t == 0) {
            p.lse[static_cast<int64_t>(token) * p.lse_stride_t + static_cast<int64_t>(head) * p.lse_stride_h] =
                lse2 * kLn2;
          }
        } else {
          const int64_t prow = (static_cast<int64_t>(token) * p.num_heads + head) * p.num_splits + split;
          float* orow = p.o_part + prow * kHeadDim + dim0;
#pragma unroll
          for (int c = 0; c < kPvTiles / 4; ++c) {
            const int j = 4 * c;
            reinterpret_cast<float4*>(orow)[c] =
                make_float4(o[m][j][2 * hr] * inv, o[m][j + 1][2 * hr] * inv, o[m][j + 2][2 * hr] * inv,
                            o[m][j + 3][2 * hr] * inv);
            reinterpret_cast<float4*>(orow + kPvTiles)[c] =
                make_float4(o[m][j][2 * hr + 1] * inv, o[m][j + 1][2 * hr + 1] * inv, o[m][j + 2][2 * hr + 1] * inv,
                            o[m][j + 3][2 * hr + 1] * inv);
          }
          if (pw == 0 && t == 0) p.lse_part[prow] = lse2;
        }
      }
    }
  }
#endif
}

/// Combines the split partials of one (token, head) row per warp: out = Σ_s w_s o_s / Σ_s w_s
/// with w_s = 2^(lse_s − max lse) (Milakov & Gimelshein 2018; FlashDecoding). A row whose splits
/// all attended nothing gets zeros and LSE −inf.
template <int kHeadDim>
__global__ void __launch_bounds__(kSwaMergeThreads) swa_merge_kernel(KJIT_PARAMS SwaDecodeParams p) {
  using namespace swa_detail;
  static_assert(kHeadDim % 128 == 0, "merge: 4 floats a lane per 128 dims");
  constexpr int kChunks = kHeadDim / 128;
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kSwaMergeRowsPerCta + (threadIdx.x >> 5);
  if (row >= static_cast<int64_t>(p.tokens) * p.num_heads) return;
  const int splits = p.num_splits;
  const float mine = lane < splits ? p.lse_part[row * splits + lane] : neg_inf();
  const float m = warp_max(mine);
  const float base = m == neg_inf() ? 0.f : m;
  const float w = lane < splits ? exp2f(mine - base) : 0.f;
  const float total = warp_sum(w);
  float4 acc[kChunks];
#pragma unroll
  for (int c = 0; c < kChunks; ++c) acc[c] = make_float4(0.f, 0.f, 0.f, 0.f);
  const float* part = p.o_part + row * splits * kHeadDim + 4 * lane;
  // Four splits' partials are requested before any is used: a loop that loads and adds one
  // split at a time pays one L2 round trip per split (8 splits ≈ 8 × 0.3 µs at T = 1, where
  // this kernel is pure latency). An empty split (weight 0) is not read: its partial is zeros.
  constexpr int kBatch = 4;
  for (int s0 = 0; s0 < splits; s0 += kBatch) {
    float ws[kBatch];
    float4 v[kBatch][kChunks];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      ws[b] = __shfl_sync(0xffffffffu, w, min(s0 + b, kSwaMaxSplits - 1));
      if (s0 + b >= splits) ws[b] = 0.f;
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        v[b][c] = ws[b] != 0.f ? *reinterpret_cast<const float4*>(part + (s0 + b) * kHeadDim + 128 * c)
                               : make_float4(0.f, 0.f, 0.f, 0.f);
      }
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        acc[c].x += ws[b] * v[b][c].x;
        acc[c].y += ws[b] * v[b][c].y;
        acc[c].z += ws[b] * v[b][c].z;
        acc[c].w += ws[b] * v[b][c].w;
      }
    }
  }
  const float inv = total > 0.f ? 1.f / total : 0.f;
  const int token = static_cast<int>(row / p.num_heads);
  const int head = static_cast<int>(row - static_cast<int64_t>(token) * p.num_heads);
  bf16* orow = static_cast<bf16*>(p.out) + static_cast<int64_t>(token) * p.out_stride_t +
                        static_cast<int64_t>(head) * p.out_stride_h + 4 * lane;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    reinterpret_cast<uint2*>(orow + 128 * c)[0] =
        make_uint2(pack_bf16x2(acc[c].x * inv, acc[c].y * inv), pack_bf16x2(acc[c].z * inv, acc[c].w * inv));
  }
  if (p.lse != nullptr && lane == 0) {
    p.lse[static_cast<int64_t>(token) * p.lse_stride_t + static_cast<int64_t>(head) * p.lse_stride_h] =
        total > 0.f ? (m + __log2f(total)) * kLn2 : neg_inf();
  }
}

}  // namespace kjit::mla
