// FP8 GEMM on pre-quantized operands with mma.sync m16n8k32 (e4m3/e5m2 in, f32 accumulate;
// sm_89+). Contract and scale formulas: include/kjit/ops/fp8.hpp. Host: runtime/ops/fp8/gemm.cc.
//
//   D[m, n] = (Σ_k A[m, k] · B[n, k]) · sa[m] · sb[n] (+ bias[n])      tensor / channel scales
//   D[m, n] = Σ_kb (Σ_{k in block kb} A[m, k] · B[n, k]) · sa[m, kb] · sb[n / 128, kb] (+ bias[n])
//                                                                      1×128 / 128×128 blocks
//
// CTA tile BM × BN × 128 (K), warps of 64 × 32 or 32 × 32 (GemmShape); kStages-deep cp.async ring in
// dynamic shared memory; loads are predicated per 16-byte chunk and zero-filled past M, N, K.
//
// Operand layouts. The tensor core wants, per thread, 4 consecutive k of one row (A) or one
// column (B) in a register. A K-major operand (A [M, K], B [N, K]) is stored as rows of 128
// k-bytes and read with plain ldmatrix, treating a k-byte pair as one b16. An MN-major operand
// (A [K, M], B [K, N]) is stored as 128 k-rows of BM (or BN) bytes and read with ldmatrix.trans:
// a transposed 8×8 b16 matrix hands lane (g, t) = (lane/4, lane%4) the m-bytes (2g, 2g+1) of
// its k-rows 2t and 2t+1. Pointing the 8 row addresses of matrix X0 at k-rows
// {0,1,4,5,8,9,12,13} and of X1 at {2,3,6,7,10,11,14,15} makes those k-rows 4t, 4t+1 (X0) and
// 4t+2, 4t+3 (X1), so two byte permutes (prmt) give the A register of row 2g (bytes 0, 2 of X0
// and X1) and of row 2g+1 (bytes 1, 3): all four k in order, no permutation of K. The fragment's
// logical row g then holds physical row 2g and row g+8 holds 2g+1 (for B: the n8 tile 2p holds
// even columns, 2p+1 odd ones); only the epilogue needs to know. All four operand layout
// combinations are native specializations (kATrans, kBTrans), with no transposed copy; only a
// column-major D goes through the host's operand swap (Dᵀ = B · Aᵀ, bias then indexed by row).
//
// Shared-memory swizzles (16-byte chunks, conflict-free for cp.async stores and ldmatrix):
//   K-major rows of 128 bytes:  chunk c of row r at c ^ (r & 7)
//   MN-major rows of 128 bytes: c ^ ((r & 1) | ((r >> 1) & 6))  — the 8 rows {0,1,4,5,8,..}
//                               that one ldmatrix.trans matrix reads land in 8 distinct chunks
//   MN-major rows of 64 bytes:  c ^ ((r >> 2) & 3)               — same, two rows per 128 bytes
#include "kjit/config.cuh"
#include "kjit/cp_async.cuh"
#include "kjit/mma.cuh"
#include "kjit/f16_bits.cuh"
#include "kjit/smem.cuh"
#include "fp8/gemm_params.h"
#include "fp8/quantize_params.h"

namespace kjit::fp8 {

namespace gemm_detail {

/// Byte offset of 16-byte chunk `c` of row `r` in a K-major tile (rows of 128 bytes).
KJIT_DEVICE int kmajor_offset(int r, int c) { return r * 128 + ((c ^ (r & 7)) << 4); }

/// Byte offset of chunk `c` of k-row `r` in an MN-major tile with rows of kRowBytes (64 or 128).
template <int kRowBytes>
KJIT_DEVICE int mnmajor_offset(int r, int c) {
  static_assert(kRowBytes == 64 || kRowBytes == 128, "MN-major rows are 64 or 128 bytes");
  const int h = kRowBytes == 128 ? ((r & 1) | ((r >> 1) & 6)) : ((r >> 2) & 3);
  return r * kRowBytes + ((c ^ h) << 4);
}

/// Copies one operand tile (kRows rows of M or N × kGemmBK k) into shared memory with
/// cp.async. The thread's chunks are j = 0, 1, ...: the same 16-byte column of rows
/// row0 + j · kRowStep, so one pointer, one stride and one swizzle serve all of them.
/// K-major: global row mn at g + mn · ld, k contiguous. MN-major: global row k at g + k · ld.
template <int kRows, bool kTrans, int kThreads>
struct OperandLoader {
  static constexpr int kCpr = kTrans ? kRows / 16 : kGemmBK / 16;  // 16-byte chunks per smem row
  static constexpr int kRowStep = kThreads / kCpr;                  // rows between a thread's chunks
  static constexpr int kChunks = (kTrans ? kGemmBK : kRows) * kCpr / kThreads;
  static constexpr int kSmemRowBytes = kCpr * 16;
  static_assert((kTrans ? kGemmBK : kRows) * kCpr % kThreads == 0 && kRowStep % 16 == 0, "loader shape");

  const uint8_t* g;   // global address of chunk 0 at k0 = 0 (or the base when out of range)
  int64_t ld;
  uint32_t smem_off;  // offset of chunk 0 in the tile (the swizzle is the same for every j)
  int row0;           // smem row of chunk 0: an mn index (K-major) or a k index (MN-major)
  int col;            // first k (K-major) or mn (MN-major) of this thread's chunk column

  KJIT_DEVICE OperandLoader(const uint8_t* base, int64_t ld_, int mn0, int tid) : ld(ld_) {
    row0 = tid / kCpr;
    const int c = tid % kCpr;
    if constexpr (!kTrans) {
      smem_off = kmajor_offset(row0, c);
      col = c * 16;
      g = base + int64_t(mn0 + row0) * ld + col;
      row0 += mn0;  // from here on: the global mn of chunk 0
    } else {
      smem_off = mnmajor_offset<kRows>(row0, c);
      col = mn0 + c * 16;
      g = base + int64_t(row0) * ld + col;
    }
  }

  /// Issues the copies of k-tile starting at k0 into the tile at shared address `dst`.
  KJIT_DEVICE void load(uint32_t dst, const uint8_t* base, int k0, int mn_limit, int k_limit) const {
#pragma unroll
    for (int j = 0; j < kChunks; ++j) {
      const uint32_t s = dst + smem_off + j * kRowStep * kSmemRowBytes;
      if constexpr (!kTrans) {
        const bool ok = row0 + j * kRowStep < mn_limit && k0 + col < k_limit;  // k_limit % 16 == 0
        cp_async_16(s, ok ? g + int64_t(j) * kRowStep * ld + k0 : base, ok);
      } else {
        const int k = k0 + row0 + j * kRowStep;
        int bytes = k < k_limit ? mn_limit - col : 0;
        bytes = bytes < 0 ? 0 : (bytes > 16 ? 16 : bytes);
        cp_async_16_partial(s, bytes > 0 ? g + (int64_t(k0) + int64_t(j) * kRowStep) * ld : base, bytes);
      }
    }
  }
};

/// The k-row (within a 32-k step) whose address lane `lane` gives to ldmatrix.trans: matrix
/// q = lane / 8 covers k 16·(q/2) .. +15, rows {0,1,4,5,8,9,12,13} (+2 when q is odd).
KJIT_DEVICE int trans_krow(int lane) {
  const int q = lane >> 3, r = lane & 7;
  return (q >> 1) * 16 + (q & 1) * 2 + (r >> 1) * 4 + (r & 1);
}

template <bool kF32>
struct OutType {
  using type = bf16;
};
template <>
struct OutType<true> {
  using type = float;
};

template <class T>
KJIT_DEVICE void store_scalar(T* ptr, float v);
template <>
KJIT_DEVICE void store_scalar<float>(float* ptr, float v) { *ptr = v; }
template <>
KJIT_DEVICE void store_scalar<bf16>(bf16* ptr, float v) { *ptr = f32_to_bf16(v); }

/// Stores kN consecutive outputs of one row starting at column `col` (a multiple of kN).
/// Vector store when allowed and the run is inside N, else per-element with bounds checks.
template <bool kOutF32, int kN>
KJIT_DEVICE void store_run(void* row_ptr, int col, int n, bool vec, const float (&v)[kN]) {
  using OutT = typename OutType<kOutF32>::type;
  OutT* out = static_cast<OutT*>(row_ptr) + col;
  if (vec && col + kN <= n) {
    if constexpr (kOutF32 && kN == 2) {
      *reinterpret_cast<float2*>(out) = make_float2(v[0], v[1]);
    } else if constexpr (kOutF32 && kN == 4) {
      *reinterpret_cast<float4*>(out) = make_float4(v[0], v[1], v[2], v[3]);
    } else if constexpr (!kOutF32 && kN == 2) {
      *reinterpret_cast<uint32_t*>(out) = pack_bf16x2(v[0], v[1]);
    } else {
      *reinterpret_cast<uint2*>(out) = make_uint2(pack_bf16x2(v[0], v[1]), pack_bf16x2(v[2], v[3]));
    }
    return;
  }
#pragma unroll
  for (int i = 0; i < kN; ++i) {
    if (col + i < n) store_scalar<OutT>(out + i, v[i]);
  }
}

}  // namespace gemm_detail

template <int kFmtA, int kFmtB, bool kOutF32, bool kBlockScale, int kBM, int kBN, int kStages, bool kATrans,
          bool kBTrans>
__global__ void __launch_bounds__((GemmShape<kBM, kBN, kBlockScale>::kThreads)) gemm_kernel(KJIT_PARAMS GemmParams p) {
  using namespace gemm_detail;
  static_assert((kBM == 64 || kBM == 128) && (kBN == 64 || kBN == 128), "tile");
  static_assert(kStages >= 2, "stages");
  using Shape = GemmShape<kBM, kBN, kBlockScale>;
  constexpr int kThreads = Shape::kThreads;
  constexpr int kWarpsN = Shape::kWarpsN;
  constexpr int kWM = kBM / Shape::kWarpsM;  // warp tile rows: 32 or 64
  constexpr int kWN = kBN / kWarpsN;         // warp tile cols: 32
  constexpr int kMI = kWM / 16;          // m16 tiles per warp
  constexpr int kNI = kWN / 8;           // n8 tiles per warp (even)
  constexpr int kStageBytes = Shape::kStageBytes;
  constexpr int kBOffset = kBM * kGemmBK;
  constexpr int kScaleOffset = (kBM + kBN) * kGemmBK;
  static_assert(kWN == 32 && kNI % 2 == 0, "warp tile");

  extern __shared__ __align__(128) uint8_t smem[];
  const uint32_t smem_base = smem_u32(smem);
  const int tid = threadIdx.x;
  const int lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t4 = lane & 3;
  const int warp_m0 = (warp / kWarpsN) * kWM;
  const int warp_n0 = (warp % kWarpsN) * kWN;

  // Grouped raster: kGemmGroupM tile rows sweep the tile columns together.
  const int tile = blockIdx.x;
  const int group_tiles = kGemmGroupM * p.tiles_n;
  const int first_m = (tile / group_tiles) * kGemmGroupM;
  const int group_m = min(p.tiles_m - first_m, kGemmGroupM);
  const int in_group = tile % group_tiles;
  const int m0 = (first_m + in_group % group_m) * kBM;
  const int n0 = (in_group / group_m) * kBN;

  const int ktiles = (p.k + kGemmBK - 1) / kGemmBK;
  // B scale block row of this CTA: BN divides 128, so the tile lies inside one 128-row block.
  const int64_t sb_row = int64_t(n0 / 128) * p.sb_stride_n;

  const OperandLoader<kBM, kATrans, kThreads> a_loader(p.a, p.lda, m0, tid);
  const OperandLoader<kBN, kBTrans, kThreads> b_loader(p.b, p.ldb, n0, tid);
  auto load_stage = [&](int slot, int kt) {
    const uint32_t base = smem_base + slot * kStageBytes;
    const int k0 = kt * kGemmBK;
    a_loader.load(base, p.a, k0, p.m, p.k);
    b_loader.load(base + kBOffset, p.b, k0, p.n, p.k);
    if constexpr (kBlockScale) {
      for (int i = tid; i < kBM; i += kThreads) {
        const bool ok = m0 + i < p.m;
        const float* src = ok ? p.scale_a + int64_t(m0 + i) * p.sa_stride_m + int64_t(kt) * p.sa_stride_k : p.scale_a;
        cp_async_4(base + kScaleOffset + i * 4, src, ok);
      }
      if (tid == 0) cp_async_4(base + kScaleOffset + kBM * 4, p.scale_b + sb_row + int64_t(kt) * p.sb_stride_k, true);
    }
  };

  float acc[kMI][kNI][4];
  float total[kMI][kNI][4];  // block mode only (dead and removed otherwise)
#pragma unroll
  for (int i = 0; i < kMI; ++i)
#pragma unroll
    for (int j = 0; j < kNI; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[i][j][r] = 0.f;
  if constexpr (kBlockScale) {
#pragma unroll
    for (int i = 0; i < kMI; ++i)
#pragma unroll
      for (int j = 0; j < kNI; ++j)
#pragma unroll
        for (int r = 0; r < 4; ++r) total[i][j][r] = 0.f;
  }

  // Row of this thread's accumulator (mi, half h) inside the CTA tile; see the header comment.
  auto row_local = [&](int mi, int h) { return warp_m0 + mi * 16 + (kATrans ? 2 * g + h : g + 8 * h); };

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < ktiles) load_stage(s, s);
    cp_async_commit();
  }

  // Per-lane fragment addresses, hoisted out of the K loop. K-major: the lane's row is
  // r = base + (lane & 7) (+8), so r & 7 = lane & 7 and chunk kk·2 + hi swizzles to
  // (kk·2) ^ (hi ^ (lane & 7)); the m16/n16 tile index only adds whole rows (an immediate).
  // MN-major: the lane's k-row is kk·32 + trans_krow(lane), whose swizzle depends only on
  // trans_krow(lane) (period 16); the chunk column (warp base | tile index) XORs with it.
  const int t_krow = trans_krow(lane);
  const int a_hi = lane >> 4, b_hi = (lane >> 3) & 1;
  const uint32_t a_lane = !kATrans
      ? uint32_t((warp_m0 + (lane & 7) + ((lane >> 3) & 1) * 8) * 128)
      : uint32_t(mnmajor_offset<kBM>(t_krow, warp_m0 >> 4));
  const int a_x = !kATrans ? (a_hi ^ (lane & 7)) : 0;
  const uint32_t b_lane = !kBTrans
      ? uint32_t((warp_n0 + (lane & 7) + (lane >> 4) * 8) * 128)
      : uint32_t(mnmajor_offset<kBN>(t_krow, warp_n0 >> 4));
  const int b_x = !kBTrans ? (b_hi ^ (lane & 7)) : 0;
  // MN-major: mnmajor_offset(r, c) = r·RB + ((c ^ h(r)) << 4); with c = c_warp | i (disjoint
  // bits) that is the c_warp offset above with its chunk bits XORed by i.
  for (int kt = 0; kt < ktiles; ++kt) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // stage kt landed for every thread; stage kt-1 is free to refill
    {
      const int nt = kt + kStages - 1;
      if (nt < ktiles) load_stage(nt % kStages, nt);
      cp_async_commit();
    }
    const int slot = kt % kStages;
    const uint32_t a_s = smem_base + slot * kStageBytes;
    const uint32_t b_s = a_s + kBOffset;
#pragma unroll
    for (int kk = 0; kk < kGemmBK / 32; ++kk) {
      uint32_t af[kMI][4];
      uint32_t bf[kNI][2];
#pragma unroll
      for (int mi = 0; mi < kMI; ++mi) {
        if constexpr (!kATrans) {
          ldmatrix_x4(af[mi], a_s + a_lane + mi * 16 * 128 + (((kk * 2) ^ a_x) << 4));
        } else {
          uint32_t x[4];
          ldmatrix_x4_trans(x, a_s + kk * 32 * kBM + (a_lane ^ (mi << 4)));
          af[mi][0] = __byte_perm(x[0], x[1], 0x6420);
          af[mi][1] = __byte_perm(x[0], x[1], 0x7531);
          af[mi][2] = __byte_perm(x[2], x[3], 0x6420);
          af[mi][3] = __byte_perm(x[2], x[3], 0x7531);
        }
      }
#pragma unroll
      for (int pi = 0; pi < kNI / 2; ++pi) {
        uint32_t x[4];
        if constexpr (!kBTrans) {
          ldmatrix_x4(x, b_s + b_lane + pi * 16 * 128 + (((kk * 2) ^ b_x) << 4));
          bf[2 * pi][0] = x[0];
          bf[2 * pi][1] = x[1];
          bf[2 * pi + 1][0] = x[2];
          bf[2 * pi + 1][1] = x[3];
        } else {
          ldmatrix_x4_trans(x, b_s + kk * 32 * kBN + (b_lane ^ (pi << 4)));
          bf[2 * pi][0] = __byte_perm(x[0], x[1], 0x6420);
          bf[2 * pi][1] = __byte_perm(x[2], x[3], 0x6420);
          bf[2 * pi + 1][0] = __byte_perm(x[0], x[1], 0x7531);
          bf[2 * pi + 1][1] = __byte_perm(x[2], x[3], 0x7531);
        }
      }
#pragma unroll
      for (int mi = 0; mi < kMI; ++mi)
#pragma unroll
        for (int ni = 0; ni < kNI; ++ni) mma_fp8<kFmtA, kFmtB>(acc[mi][ni], af[mi][0], af[mi][1], af[mi][2], af[mi][3], bf[ni][0], bf[ni][1]);
    }
    if constexpr (kBlockScale) {
      // Promote this 128-k block into the f32 totals with its scales (the tensor core's own
      // accumulation then never spans more than one scale block).
      const float* sa = reinterpret_cast<const float*>(smem + slot * kStageBytes + kScaleOffset);
      const float sb = sa[kBM];
#pragma unroll
      for (int mi = 0; mi < kMI; ++mi) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float s = sa[row_local(mi, h)] * sb;
#pragma unroll
          for (int ni = 0; ni < kNI; ++ni) {
#pragma unroll
            for (int j = 0; j < 2; ++j) {
              total[mi][ni][2 * h + j] = fmaf(acc[mi][ni][2 * h + j], s, total[mi][ni][2 * h + j]);
              acc[mi][ni][2 * h + j] = 0.f;
            }
          }
        }
      }
    }
  }
  cp_async_wait<0>();

  // Epilogue: scale, bias, convert, store straight from the fragments. The factors of the
  // thread's columns (scale_b, a per-column bias) are read once, not once per row: a column j of
  // pair pi is col_of(pi, j) (K-major B: n8 tiles 2pi and 2pi + 1 hold base + 2t4 + {0, 1} and
  // base + 8 + 2t4 + {0, 1}; MN-major: base + 4t4 + {0..3}, even columns in tile 2pi).
  const bool vec = p.vec_store != 0;
  auto bias_at = [&](int i) {
    return p.bias_bf16 ? bf16_to_f32(static_cast<const bf16*>(p.bias)[i]) : __ldg(static_cast<const float*>(p.bias) + i);
  };
  auto col_of = [&](int pi, int j) {
    const int base = n0 + warp_n0 + pi * 16;
    return kBTrans ? base + 4 * t4 + j : base + 2 * t4 + (j >> 1) * 8 + (j & 1);
  };
  const bool col_bias = p.bias != nullptr && !p.bias_rows;
  float cs[kNI / 2][4], cb[kNI / 2][4];
#pragma unroll
  for (int pi = 0; pi < kNI / 2; ++pi) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int col = col_of(pi, j);
      const bool in = col < p.n;
      cs[pi][j] = !kBlockScale && in ? __ldg(p.scale_b + int64_t(col) * p.sb_stride_n) : 1.f;
      cb[pi][j] = col_bias && in ? bias_at(col) : 0.f;
    }
  }
#pragma unroll
  for (int mi = 0; mi < kMI; ++mi) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = m0 + row_local(mi, h);
      if (row >= p.m) continue;
      const float rs = kBlockScale ? 1.f : __ldg(p.scale_a + int64_t(row) * p.sa_stride_m);
      const float rb = p.bias != nullptr && p.bias_rows ? bias_at(row) : 0.f;
      void* row_ptr = static_cast<char*>(p.d) + int64_t(row) * p.ldd * (kOutF32 ? 4 : 2);
#pragma unroll
      for (int pi = 0; pi < kNI / 2; ++pi) {
        const float(&c0)[4] = kBlockScale ? total[mi][2 * pi] : acc[mi][2 * pi];
        const float(&c1)[4] = kBlockScale ? total[mi][2 * pi + 1] : acc[mi][2 * pi + 1];
        // The thread's four values of this row in col_of(pi, 0..3) order.
        const float raw[4] = {c0[2 * h], kBTrans ? c1[2 * h] : c0[2 * h + 1], kBTrans ? c0[2 * h + 1] : c1[2 * h],
                              c1[2 * h + 1]};
        float v[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) v[j] = fmaf(raw[j], rs * cs[pi][j], cb[pi][j] + rb);
        if constexpr (!kBTrans) {
          store_run<kOutF32, 2>(row_ptr, col_of(pi, 0), p.n, vec, {v[0], v[1]});
          store_run<kOutF32, 2>(row_ptr, col_of(pi, 2), p.n, vec, {v[2], v[3]});
        } else {
          store_run<kOutF32, 4>(row_ptr, col_of(pi, 0), p.n, vec, v);
        }
      }
    }
  }
}

}  // namespace kjit::fp8
