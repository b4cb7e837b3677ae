// Hopper (sm_90a) fused fp8 sliding-window MLA decode: wgmma on the raw E4M3/E5M2 cache bytes.
// Same function and Params as swa_decode_kernel (mla/swa_decode.cu, whose file comment gives the
// contract and the floor); runtime/ops/mla/swa_decode.cc picks this kernel as head group 64 on
// sm_90 for windows of at most 128 positions, NH a multiple of 64 and T · NH / 64 ≥ SMs / 2.
//
// Why: the mma.sync kernel spends most of a CTA's life converting K (8 × per token, once per
// 16-head m-tile) and in phases that do not overlap (docs/perf-notes.md, "fp8 SWA decode").
// Here a work item is 64 heads of one token and the whole window, nothing of K is converted,
// and a CTA (one per SM) loops over items with the next item's window rows, scales, indices and
// q already requested:
//
// 1. Load. Each warp gathers 16 of the window's 128 rows (cp.async, one 512-byte row per
//    instruction, masked rows zero-filled) into the 128-byte-swizzle K-major layout wgmma reads
//    (4 k-blocks of [128 rows][128 B]) of one of two K buffers, and the 4-byte word holding each
//    row's bf16 inverse scale; this happens one item ahead (the indices two items ahead). Each
//    thread converts a quarter of a q row (loaded at the end of the previous item): the row is
//    scaled by a power of two 2^e (max |q·2^e| in [2^7, 2^8)) and stored as E4M3 hi + lo
//    (Veltkamp split: hi keeps 4 significant bits, lo the next ~4; hi + lo ≈ bf16's 8 bits).
// 2. Q·Kᵀ. Warpgroup w multiplies the 64 heads (M) by window positions [64w, 64w + 64) (N):
//    32 wgmma m64n64k32 (16 k-steps of 32 dims, for q hi then q lo, against the same K bytes).
// 3. Vᵀ. fp8 wgmma reads B K-major only, so P·V needs V token-contiguous: every thread reads a
//    16 × 16-byte block of K (16 rows × one 16-byte chunk), transposes it with byte permutes and,
//    after a barrier (all Q·Kᵀ done), writes it back as 16 dim rows × 16 tokens over the same
//    64 KiB (Vᵀ [512 dims][128 B], 128-byte swizzle). Lanes (k-block kb, chunk c, token chunk
//    tc = (c + warp) % 8): the eight lanes of a shared-memory phase differ in both c and tc,
//    so the reads and the writes are conflict-free.
// 4. Softmax (exact, whole window in flight): scores · 2^-e · inv_scale · scale · log2(e),
//    masked to −inf; row max and sum across the two warpgroups through shared memory.
//    P' = p · inv_scale · 2^c (max P' just below 2^8) as E4M3 hi + lo, [64 heads][128 B].
// 5. P·V. Warpgroup w computes dims [256w, 256w + 256) of all 64 heads: 8 wgmma m64n256k32
//    (4 k-steps of 32 tokens, P' hi then lo). Output = O / (l · 2^c) as bf16, staged in shared
//    memory (over the q tile) and stored 16 bytes per lane, a 512-byte row per instruction;
//    LSE from the row max and sum.
//
// Numerics: as the sm_89 path of swa_decode.cu (q and P' as E4M3 hi + lo, the cache bytes
// exact, inv_scale in f32); dequantized values are never rounded to bf16.
//
// Resources (NVRTC 13.0, sm_90a): 255 registers, no spills; 256 threads,
// __launch_bounds__(256, 1); kSwaWgmmaSmemBytes (≈ 212 KiB) of dynamic shared memory: one CTA
// per SM, and the host launches min(items, SMs) CTAs. SASS: 32 QGMMA.64x64x32 + 8
// QGMMA.64x256x32 per item, issued back to back (no serialization warning).
#include "kjit/config.cuh"
#include "kjit/cp_async.cuh"
#include "kjit/fast_math.cuh"
#include "kjit/float_bits.cuh"
#include "kjit/fp8_cvt.cuh"
#include "kjit/fp8_format.h"
#include "kjit/named_barrier.cuh"
#include "kjit/f16_bits.cuh"
#include "kjit/prefetch.cuh"
#include "kjit/smem.cuh"
#include "kjit/tma.cuh"
#include "kjit/warp_reduce.cuh"
#include "kjit/wgmma.cuh"
#include "mla/swa_cache.cuh"
#include "mla/swa_decode_params.h"
#include "mla/swa_split.cuh"

namespace kjit::mla {

namespace sm90_swa_detail {

/// Byte offset of (row, byte b) in a 128-byte-swizzle K-major tile of 128-byte rows.
KJIT_DEVICE uint32_t sw128(int row, int b) {
  return static_cast<uint32_t>(row * 128 + ((((b >> 4) ^ row) & 7) << 4) + (b & 15));
}

}  // namespace sm90_swa_detail

/// The Hopper decode kernel; see the file comment. kHeadDim 512; kWindow the indices row length
/// (64 or 128); kCache kSwaCacheE4M3 or kSwaCacheE5M2. Work items: tokens · head_groups (NH / 64),
/// item = token · head_groups + head_group; CTA b takes items b, b + gridDim.x, ... (the host
/// launches min(items, SMs) CTAs); 256 threads; kSwaWgmmaSmemBytes.
template <int kHeadDim, int kWindow, int kCache>
__global__ void __launch_bounds__(kSwaWgmmaThreads, 1) swa_decode_wgmma_kernel(KJIT_PARAMS SwaDecodeParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace sm90_swa_detail;
  using namespace sm90;
  static_assert(kHeadDim == 512, "the lane maps are written for head_dim 512");
  static_assert(kWindow <= kSwaWgmmaTile, "the whole window must fit one tile");
  constexpr bool kE5M2 = kCache == kSwaCacheE5M2;
  constexpr int kFmtB = kE5M2 ? kjit::fp8::kFormatE5M2 : kjit::fp8::kFormatE4M3;

  extern __shared__ __align__(16) unsigned char smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  unsigned char* const gbase = smem_raw + (base - raw);
  const uint32_t q_s = base + kSwaWgmmaQOffset;
  const uint32_t p_s = base + kSwaWgmmaPOffset;
  const uint32_t misc_s = base + kSwaWgmmaMiscOffset;
  uint32_t* const s_tokw = reinterpret_cast<uint32_t*>(gbase + kSwaWgmmaMiscOffset);  // [2][128] scale words
  int* const s_valid = reinterpret_cast<int*>(s_tokw + 256);                          // [2][128]
  float* const s_rowf = reinterpret_cast<float*>(s_valid + 256);                      // [64]
  float* const s_rowmax = s_rowf + 64;                                                // [2][64]
  float* const s_rowsum = s_rowmax + 128;                                             // [2][64]
  float* const s_smax = s_rowsum + 128;                                               // [8]

  const int tid = threadIdx.x;
  const int warp = tid >> 5;
  const int lane = tid & 31;
  const int wg = tid >> 7;  // warpgroup
  const int ww = warp & 3;  // warp within the warpgroup
  const int g = lane >> 2;
  const int t = lane & 3;
  const int items = p.tokens * p.head_groups;
  // Window rows: lane l of warp w owns the slot of row r_own = 16w + l % 16; warp w copies rows
  // 16w .. 16w + 15, one 512-byte row per instruction with lane l taking 16-byte chunk l, so
  // each cp.async touches 4 cache lines (one lane per 16 bytes of one row per instruction
  // touched 32 lines and kept the load/store unit's queue full: ncu stall_lg / long_sb on the
  // copies' address registers).
  const int r_own = 16 * warp + (lane & 15);

  // Window slot of row r_own of `token` and the token's length (both loads in flight before
  // either is used).
  auto load_slot = [&](int token, int64_t& slot, int64_t& len) {
    const long long* idx_row = reinterpret_cast<const long long*>(p.indices) + static_cast<int64_t>(token) * kWindow;
    slot = r_own < kWindow ? static_cast<int64_t>(__ldg(idx_row + r_own)) : -1;
    len = p.lens_i64 ? __ldg(static_cast<const long long*>(p.lens) + token)
                     : static_cast<int64_t>(__ldg(static_cast<const int*>(p.lens) + token));
  };
  // cp.async of the warp's 16 rows into K buffer `buf` (masked rows zero-filled, nothing read)
  // and of the 4-byte word holding each row's bf16 inverse scale; one commit group.
  // s_valid[buf][r] says whether row r counts (bit 0) and which half of the word is its scale
  // (bit 1).
  auto issue_rows = [&](int buf, int64_t slot, int64_t len) {
    len = len < 0 ? 0 : (len > kWindow ? kWindow : len);
    const bool valid = r_own < len && slot >= 0;
    const uint8_t* src = valid ? kv_row(p, slot) : p.fill_src;
    const uint32_t dst = base + buf * 65536 + (lane >> 3) * 16384;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const int row = 16 * warp + i;
      const uint8_t* rsrc = reinterpret_cast<const uint8_t*>(
          __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(src), i));
      const bool rvalid = __shfl_sync(0xffffffffu, valid ? 1 : 0, i) != 0;
      cp_async_16(dst + sw128(row, (lane & 7) << 4), rvalid ? rsrc + lane * 16 : rsrc, rvalid);
    }
    if (lane < 16) {
      const uintptr_t sa = reinterpret_cast<uintptr_t>(static_cast<const unsigned short*>(p.inv_scale) +
                                                       (valid ? slot : 0) * p.scale_stride);
      cp_async_4(misc_s + (buf * 128 + r_own) * 4, valid ? reinterpret_cast<const void*>(sa & ~uintptr_t{3}) : p.fill_src,
                 valid);
      s_valid[buf * 128 + r_own] = valid ? 1 | static_cast<int>(sa & 2) : 0;
    }
    cp_async_commit();
  };

  // Thread (qr, qd) converts dims 32i + 8qd + [0, 8), i < 16, of head row qr of an item's q.
  const int qr = tid >> 2;
  const int qd = tid & 3;
  uint4 qv[16];
  auto load_q = [&](int it) {
    const int tok = it / p.head_groups;
    const bf16* qrow = static_cast<const bf16*>(p.q) + static_cast<int64_t>(tok) * p.q_stride_t +
                                static_cast<int64_t>((it - tok * p.head_groups) * kSwaWgmmaHeads + qr) * p.q_stride_h +
                                8 * qd;
#pragma unroll
    for (int i = 0; i < 16; ++i) qv[i] = __ldg(reinterpret_cast<const uint4*>(qrow + 32 * i));
  };

  // Prologue: the first item's q (its round trip overlaps the indices → rows chain) and rows;
  // the second item's indices. Each iteration then holds the next item's q in registers from
  // the end of the previous one, and the indices of the item after next from its start.
  int item = blockIdx.x;
  int64_t slot_n = -1, len_n = 0;  // indices of item + gridDim.x, loaded an iteration ahead
  if (item < items) {
    load_q(item);
    int64_t slot, len;
    load_slot(item / p.head_groups, slot, len);
    if (item + static_cast<int>(gridDim.x) < items) {
      load_slot((item + static_cast<int>(gridDim.x)) / p.head_groups, slot_n, len_n);
    }
    issue_rows(0, slot, len);
  }
  for (int iter = 0; item < items; ++iter, item += gridDim.x) {
    const int buf = iter & 1;
    const uint32_t kv_s = base + buf * 65536;
    const int token = item / p.head_groups;
    const int head_base = (item - token * p.head_groups) * kSwaWgmmaHeads;
    const int next = item + static_cast<int>(gridDim.x);
    const int next2 = next + static_cast<int>(gridDim.x);
    int64_t slot_nn = -1, len_nn = 0;
    if (next2 < items) load_slot(next2 / p.head_groups, slot_nn, len_nn);

    // ---- q → E4M3 hi + lo of q · 2^e (max |q · 2^e| in [2^7, 2^8)) ---------------------------
    {
      float m = 0.f;
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        const uint32_t w[4] = {qv[i].x, qv[i].y, qv[i].z, qv[i].w};
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          m = fmaxf(m, fabsf(__uint_as_float(w[u] << 16)));
          m = fmaxf(m, fabsf(__uint_as_float(w[u] & 0xffff0000u)));
        }
      }
      m = quad_max(m);  // the four threads of a row are lanes 4k .. 4k+3
      const int e = m > 0.f ? min(7 - ilog2(m), 126) : 0;
      const float f = exp2i(e);
      if (qd == 0) s_rowf[qr] = exp2i(-e);
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        const uint32_t w[4] = {qv[i].x, qv[i].y, qv[i].z, qv[i].w};
        uint32_t hi[2], lo[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float x[4] = {__uint_as_float(w[2 * h] << 16) * f, __uint_as_float(w[2 * h] & 0xffff0000u) * f,
                        __uint_as_float(w[2 * h + 1] << 16) * f, __uint_as_float(w[2 * h + 1] & 0xffff0000u) * f};
          float xh[4], xl[4];
#pragma unroll
          for (int k = 0; k < 4; ++k) split_hi_lo(x[k], xh[k], xl[k]);
          hi[h] = e4m3x2_pack(xh[0], xh[1]) | (e4m3x2_pack(xh[2], xh[3]) << 16);
          lo[h] = e4m3x2_pack(xl[0], xl[1]) | (e4m3x2_pack(xl[2], xl[3]) << 16);
        }
        const int d0 = 32 * i + 8 * qd;
        const uint32_t off = (d0 >> 7) * 8192 + sw128(qr, d0 & 127);
        st_shared_v2(q_s + off, hi[0], hi[1]);
        st_shared_v2(q_s + 32768 + off, lo[0], lo[1]);
      }
    }
    // The next item's rows go into the other K buffer (its last reader, the previous item's
    // P·V, finished before the previous iteration's closing barrier); always one commit group,
    // so that "all but the newest group" is this item's rows.
    if (next < items) {
      issue_rows(buf ^ 1, slot_n, len_n);
      // Pull the next item's q rows into L2 (no registers held): its q loads then wait for an
      // L2 round trip instead of a DRAM one. Thread (qr, qd) takes 128-byte lines qd and qd + 4.
      const int tok_n = next / p.head_groups;
      const char* qn = reinterpret_cast<const char*>(static_cast<const bf16*>(p.q) +
                                                     static_cast<int64_t>(tok_n) * p.q_stride_t +
                                                     static_cast<int64_t>(next - tok_n * p.head_groups) * kSwaWgmmaHeads * p.q_stride_h +
                                                     static_cast<int64_t>(qr) * p.q_stride_h);
      prefetch_l2(qn + 128 * qd);
      prefetch_l2(qn + 128 * (qd + 4));
    } else {
      cp_async_commit();
    }
    cp_async_wait<1>();
    fence_proxy_async();  // generic-proxy writes (cp.async, q stores) → wgmma reads
    __syncthreads();

    // ---- 2. Q·Kᵀ: heads × window positions [64 wg, +64) ----------------------------------------
    float s[32];
    wgmma_fence();
#pragma unroll
    for (int step = 0; step < 32; ++step) {
      const int sub = step & 15;
      const uint32_t a = q_s + (step >> 4) * 32768 + (sub >> 2) * 8192 + (sub & 3) * 32;
      const uint32_t b = kv_s + (sub >> 2) * 16384 + wg * 8192 + (sub & 3) * 32;
      wgmma_fp8<64, kjit::fp8::kFormatE4M3, kFmtB>(s, smem_desc_k128(a), smem_desc_k128(b), step != 0 ? 1u : 0u);
    }
    wgmma_commit();

    // ---- 3a. this thread's 16 × 16-byte block of K, read while the wgmmas run -----------------
    const int tkb = lane >> 3;         // k-block (128 dims)
    const int tc8 = lane & 7;          // 16-byte chunk of the k-block: dims 128 tkb + 16 tc8 ..
    const int ttc = (tc8 + warp) & 7;  // token chunk: rows 16 ttc ..
    uint4 blk[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const int row = 16 * ttc + i;
      blk[i] = ld_shared_v4(kv_s + tkb * 16384 + sw128(row, tc8 << 4));
    }
    wgmma_wait<0>();

    // ---- 4a. scores, row max (this warpgroup's half of the window) ----------------------------
    const int h0 = 16 * ww + g;  // this thread's rows h0 and h0 + 8 (of the CTA's 64 heads)
    float sv[8][2];
    {
      const float rf0 = s_rowf[h0] * p.scale_log2;
      const float rf1 = s_rowf[h0 + 8] * p.scale_log2;
      float m0 = neg_inf(), m1 = neg_inf(), smax = 0.f;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int k = 64 * wg + 8 * j + 2 * t + e;
          const int v = s_valid[buf * 128 + k];
          const uint32_t word = s_tokw[buf * 128 + k];
          sv[j][e] = v ? __uint_as_float((v & 2) ? (word & 0xffff0000u) : (word << 16)) : 0.f;
          smax = fmaxf(smax, fabsf(sv[j][e]));
          s[4 * j + e] = v ? s[4 * j + e] * (rf0 * sv[j][e]) : neg_inf();
          s[4 * j + 2 + e] = v ? s[4 * j + 2 + e] * (rf1 * sv[j][e]) : neg_inf();
          m0 = fmaxf(m0, s[4 * j + e]);
          m1 = fmaxf(m1, s[4 * j + 2 + e]);
        }
      }
      m0 = quad_max(m0);
      m1 = quad_max(m1);
      smax = warp_max(smax);
      if (t == 0) {
        s_rowmax[wg * 64 + h0] = m0;
        s_rowmax[wg * 64 + h0 + 8] = m1;
      }
      if (lane == 0) s_smax[warp] = smax;
    }
    __syncthreads();  // every Q·Kᵀ is done reading K and q; row and scale maxima are visible

    // ---- 3b. Vᵀ: write the transposed block over K -------------------------------------------
    // Dim row d = 128 tkb + 16 tc8 + j holds tokens 16 ttc + [0, 16): word q of it is byte j of
    // rows 4q .. 4q+3 of the block.
#pragma unroll
    for (int jw = 0; jw < 4; ++jw) {
      uint32_t col[4][4];  // [b][q]: dim 4 jw + b, tokens 4q .. 4q+3
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const uint32_t w[4] = {
            jw == 0 ? blk[4 * q].x : jw == 1 ? blk[4 * q].y : jw == 2 ? blk[4 * q].z : blk[4 * q].w,
            jw == 0 ? blk[4 * q + 1].x : jw == 1 ? blk[4 * q + 1].y : jw == 2 ? blk[4 * q + 1].z : blk[4 * q + 1].w,
            jw == 0 ? blk[4 * q + 2].x : jw == 1 ? blk[4 * q + 2].y : jw == 2 ? blk[4 * q + 2].z : blk[4 * q + 2].w,
            jw == 0 ? blk[4 * q + 3].x : jw == 1 ? blk[4 * q + 3].y : jw == 2 ? blk[4 * q + 3].z : blk[4 * q + 3].w};
        const uint32_t ab0 = __byte_perm(w[0], w[1], 0x5140);  // [A0, B0, A1, B1]
        const uint32_t ab1 = __byte_perm(w[0], w[1], 0x7362);  // [A2, B2, A3, B3]
        const uint32_t cd0 = __byte_perm(w[2], w[3], 0x5140);
        const uint32_t cd1 = __byte_perm(w[2], w[3], 0x7362);
        col[0][q] = __byte_perm(ab0, cd0, 0x5410);  // [A0, B0, C0, D0]
        col[1][q] = __byte_perm(ab0, cd0, 0x7632);
        col[2][q] = __byte_perm(ab1, cd1, 0x5410);
        col[3][q] = __byte_perm(ab1, cd1, 0x7632);
      }
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        const int d = 128 * tkb + 16 * tc8 + 4 * jw + b;
        st_shared_v4(kv_s + sw128(d, ttc << 4), make_uint4(col[b][0], col[b][1], col[b][2], col[b][3]));
      }
    }

    // ---- 4b. softmax: P' = 2^(y − max) · inv_scale · 2^c as E4M3 hi + lo -----------------------
    float mrow[2];
    float smax_all = 0.f;
#pragma unroll
    for (int w = 0; w < 8; ++w) smax_all = fmaxf(smax_all, s_smax[w]);
    const int c_exp = smax_all > 0.f ? max(-126, min(126, 7 - ilog2(smax_all))) : 0;
    const float c_norm = exp2i(c_exp);
    {
      mrow[0] = fmaxf(s_rowmax[h0], s_rowmax[64 + h0]);
      mrow[1] = fmaxf(s_rowmax[h0 + 8], s_rowmax[64 + h0 + 8]);
      const float base0 = mrow[0] == neg_inf() ? 0.f : mrow[0];
      const float base1 = mrow[1] == neg_inf() ? 0.f : mrow[1];
      float l0 = 0.f, l1 = 0.f;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        float pe[4];
#pragma unroll
        for (int r = 0; r < 4; ++r) pe[r] = fast_exp2(s[4 * j + r] - ((r >> 1) ? base1 : base0));
        l0 += pe[0] + pe[1];
        l1 += pe[2] + pe[3];
        const int k = 64 * wg + 8 * j + 2 * t;  // tokens k, k + 1
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
          float hi0, lo0, hi1, lo1;
          split_hi_lo(pe[2 * hr] * (sv[j][0] * c_norm), hi0, lo0);
          split_hi_lo(pe[2 * hr + 1] * (sv[j][1] * c_norm), hi1, lo1);
          const uint32_t off = sw128(h0 + 8 * hr, k);
          st_shared_u16(p_s + off, e4m3x2_pack(hi0, hi1));
          st_shared_u16(p_s + 8192 + off, e4m3x2_pack(lo0, lo1));
        }
      }
      l0 = quad_sum(l0);
      l1 = quad_sum(l1);
      if (t == 0) {
        s_rowsum[wg * 64 + h0] = l0;
        s_rowsum[wg * 64 + h0 + 8] = l1;
      }
    }
    fence_proxy_async();  // Vᵀ and P' stores → wgmma reads
    __syncthreads();

    // ---- 5. P·V: dims [256 wg, +256) of all 64 heads -------------------------------------------
    float o[128];
    wgmma_fence();
#pragma unroll
    for (int step = 0; step < 8; ++step) {
      const uint32_t a = p_s + (step >> 2) * 8192 + (step & 3) * 32;
      const uint32_t b = kv_s + wg * 256 * 128 + (step & 3) * 32;
      wgmma_fp8<256, kjit::fp8::kFormatE4M3, kFmtB>(o, smem_desc_k128(a), smem_desc_k128(b),
                                                                        step != 0 ? 1u : 0u);
    }
    wgmma_commit();
    wgmma_wait<0>();

    // ---- 6. epilogue: bf16 through shared memory, then coalesced 16-byte stores ----------------
    // Scattered 4-byte stores straight from the accumulators kept the load/store unit's queue
    // full for a third of the CTA's life (ncu: stall_lg). The q region is free (Q·Kᵀ is done):
    // it stages [64 heads][512 dims] bf16, 1 KiB rows with 16-byte chunk c at c ^ (row % 8), so
    // the accumulator writes (8 rows × one chunk per warp) and the row reads are conflict-free.
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int h = h0 + 8 * hr;
      const float l = s_rowsum[h] + s_rowsum[64 + h];
      const float inv = l > 0.f ? 1.f / (l * c_norm) : 0.f;
#pragma unroll
      for (int j = 0; j < 32; ++j) {
        const int c = 32 * wg + j;
        st_shared_u32(q_s + h * 1024 + (((c ^ h) & 7) | (c & ~7)) * 16 + 4 * t,
                      pack_bf16x2(o[4 * j + 2 * hr] * inv, o[4 * j + 2 * hr + 1] * inv));
      }
      if (p.lse != nullptr && wg == 0 && t == 0) {
        p.lse[static_cast<int64_t>(token) * p.lse_stride_t + static_cast<int64_t>(head_base + h) * p.lse_stride_h] =
            l > 0.f ? (mrow[hr] + __log2f(l)) * kLn2 : neg_inf();
      }
    }
    // The next item's q: its round trip overlaps these stores and the closing barrier.
    if (next < items) load_q(next);
    // Each warpgroup stores the dims it computed: only its own four warps need to meet.
    named_barrier_wg(1 + wg);
    {
      const int c = 32 * wg + lane;  // this lane's 16-byte chunk of each row
#pragma unroll
      for (int it = 0; it < 16; ++it) {
        const int h = 4 * it + ww;
        const uint4 v = ld_shared_v4(q_s + h * 1024 + (((c ^ h) & 7) | (c & ~7)) * 16);
        bf16* orow = static_cast<bf16*>(p.out) + static_cast<int64_t>(token) * p.out_stride_t +
                              static_cast<int64_t>(head_base + h) * p.out_stride_h;
        *reinterpret_cast<uint4*>(orow + 8 * c) = v;
      }
    }
    // The next item writes q over the staging tile, P, the row statistics and (two items on)
    // this K buffer.
    __syncthreads();
    slot_n = slot_nn;
    len_n = len_nn;
  }
  cp_async_wait<0>();  // nothing may be in flight into shared memory at exit
#endif
}

}  // namespace kjit::mla
