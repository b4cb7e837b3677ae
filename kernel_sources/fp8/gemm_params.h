#pragma once
// Params and launch shape of the FP8 GEMM kernel (kernel_sources/fp8/gemm.cu). Compiled by g++
// (runtime/ops/fp8/gemm.cc) and by NVRTC. Contract: include/kjit/ops/fp8.hpp.
#include "kjit/types.h"

namespace kjit::fp8 {

// K elements (= bytes) of A and B one pipeline stage holds; also the K edge of a scale block,
// so block-scaled GEMMs promote their accumulators once per stage.
constexpr int kGemmBK = 128;
// Rows of the CTA tile that one raster group spans before moving to the next column of tiles
// (consecutive CTAs then share A row blocks and B column blocks in L2).
constexpr int kGemmGroupM = 8;

// Launch shape of a BM × BN tile (a class template rather than constexpr functions, so device
// code can use it without __host__ __device__ annotations in a header g++ also compiles).
// Tensorwise: 2 × 4 warps of 64 × 32 for 128 × 128, 2 × 2 warps of (BM/2) × 32 otherwise.
// Blockwise: warps of 32 × 32 (BM/32 × BN/32 of them), because a thread then holds two
// accumulator sets (the 128-k block's partial sums and the scaled totals): 64 × 32 warp tiles
// would need 128 accumulator registers and spill, and so would 16 warps of 32 × 32 (a 512-thread
// CTA gets at most 128 registers a thread); so blockwise tiles are 64 × 64 and 128 × 64 only.
// A pipeline stage holds the A and B tiles
// (kGemmBK bytes per row or column) and, when block-scaled, BM A scales and one B scale, rounded
// up to 128 bytes.
template <int kBM, int kBN, bool kBlockScale>
struct GemmShape {
  static constexpr int kWarpsM = kBlockScale ? kBM / 32 : 2;
  static constexpr int kWarpsN = kBlockScale ? kBN / 32 : (kBM == 128 && kBN == 128 ? 4 : 2);
  static constexpr int kThreads = 32 * kWarpsM * kWarpsN;
  static constexpr int kStageBytes = ((kBM + kBN) * kGemmBK + (kBlockScale ? kBM * 4 + 16 : 0) + 127) / 128 * 128;
  static_assert(!kBlockScale || kBN == 64, "blockwise tiles are 64 x 64 and 128 x 64");
};

// The same numbers for run-time tile sizes (host planner).
struct GemmLaunchShape {
  int threads;
  int stage_bytes;
};
inline GemmLaunchShape gemm_launch_shape(int bm, int bn, bool block_scale) {
  const int warps = block_scale ? (bm / 32) * (bn / 32) : (bm == 128 && bn == 128 ? 8 : 4);
  return {32 * warps, ((bm + bn) * kGemmBK + (block_scale ? bm * 4 + 16 : 0) + 127) / 128 * 128};
}

// D[m, n] = Σ_k A[m, k] · B[n, k] · scales (+ bias[n], or bias[m] with bias_rows). Strides in elements (bytes for A, B).
struct GemmParams {
  const uint8_t* a;      // [M, K] (K contiguous) or, with kATrans, [K, M] (M contiguous)
  const uint8_t* b;      // [N, K] (K contiguous) or, with kBTrans, [K, N] (N contiguous)
  void* d;               // [M, N] bf16 or f32, N contiguous
  const float* scale_a;  // tensor mode: [1] or [M]; block mode: [M, ceil(K / 128)]
  const float* scale_b;  // tensor mode: [1] or [N]; block mode: [ceil(N / 128), ceil(K / 128)]
  const void* bias;      // [N] bf16 or f32, or null
  int64_t lda;           // row stride of A as stored
  int64_t ldb;           // row stride of B as stored
  int64_t ldd;           // row stride of D
  int64_t sa_stride_m;   // tensor mode: 0 (per tensor) or the [M] stride; block: dim 0 stride
  int64_t sa_stride_k;   // block mode: dim 1 stride
  int64_t sb_stride_n;   // tensor mode: 0 or the [N] stride; block: dim 0 (128-row block) stride
  int64_t sb_stride_k;   // block mode: dim 1 stride
  int32_t m;
  int32_t n;
  int32_t k;             // multiple of 16 (and of 128 in block mode)
  int32_t tiles_m;       // ceil(M / BM)
  int32_t tiles_n;       // ceil(N / BN)
  int32_t bias_bf16;     // 1: bias is bf16; 0: f32
  int32_t bias_rows;     // 1: bias is indexed by the row of D (the operand-swapped column-major
                         //    case); 0: by the column
  int32_t vec_store;     // 1: d and every row of D start 16-byte aligned (vector stores allowed)
};

}  // namespace kjit::fp8
