#pragma once
// Params and launch shape of the Hopper FP8 GEMM (kernel_sources/fp8/gemm_sm90.cu). Compiled by
// g++ (runtime/ops/fp8/gemm.cc) and by NVRTC. Contract: include/kjit/ops/fp8.hpp.
#include "kjit/types.h"

namespace kjit::fp8 {

// A CUtensorMap (cuda.h's type is 128 bytes, 64-byte aligned), opaque to the kernel: the host
// encodes it with cuTensorMapEncodeTiled and copies the bytes here; the kernel passes its
// address (in the __grid_constant__ parameter space) to cp.async.bulk.tensor.
struct alignas(64) TmaDescriptor {
  uint64_t opaque[16];
};

// CTA tile BM × BN × 128 (k): one producer warpgroup (TMA) and two consumer warpgroups, each
// multiplying 64 rows of A by the BN columns with wgmma m64nBNk32. A stage holds A (BM rows ×
// 128 bytes) and B (BN rows × 128 bytes), each 1024-byte aligned (the 128-byte swizzle atom).
// Three kinds of tile:
// * staged (BN 128 and 256, BM = 128): the large-problem tiles; their epilogue stages D in
//   shared memory and stores it with TMA.
// * small (BN 16, 32 and 64): for a problem whose N is at most 64 (the host swaps the operands of
//   a small-M GEMM into that form); their stages are mostly A, so a ring of 8–12 stages keeps
//   128–192 KiB of A in flight per SM. A small tile may also have BM = 64 (the second consumer
//   warpgroup then only frees stages): twice the CTAs over the same A, for problems whose 128-row
//   tiles would leave SMs idle (one SM takes in about 30 bytes a cycle through TMA).
// * wave-fitting (BN 80, 96, 112, 160, 192 and 224, BM = 128): for M ≤ 256 (one or two tile rows),
//   where the output has few tiles, B (the weight) is most of the bytes and a tile height that
//   is not a power of two makes the tiles a whole number of waves of the SMs (N = 10240: 128 tiles
//   of 80 rows against 80 of 128). Their epilogue stores D directly from the accumulators (BN is
//   not a whole number of 128-byte boxes); they run persistent only (no split-K).
// The staged and wave-fitting tiles also come 64 rows high (one consumer warpgroup multiplies,
// the other only frees stages), for problems of one 128-row tile row (64 < M ≤ 128): two CTAs
// of a pair take the two 64-row halves of M and share each B (weight) tile by multicast, so
// twice the CTAs stream the weight from L2 once.
// CTA pairs (persistent only) come in two forms, the cluster's shape in tiles: cluster_m = 2
// (B-pairs: vertically adjacent tiles share B) or cluster_n = 2 (A-pairs: horizontally adjacent
// tiles share A, the activation rows; cuBLASLt's 1x2 clusters at M ≥ 128).
constexpr int kSm90BM = 128;  // the staged and wave-fitting tiles' BM, and the small tiles' unless BM = 64
constexpr int kSm90Threads = 384;
inline constexpr bool sm90_small_tile(int bn) { return bn == 16 || bn == 32 || bn == 64; }
inline constexpr bool sm90_staged_tile(int bn) { return bn == 128 || bn == 256; }
inline constexpr bool sm90_wave_tile(int bn) {
  return bn == 80 || bn == 96 || bn == 112 || bn == 160 || bn == 192 || bn == 224;
}
/// The tiles CTA pairs may share an operand over (cluster_m == 2: B; cluster_n == 2: A): the
/// staged and wave-fitting ones, 128 or 64 rows high. Each CTA loads half the shared box: BN / 2
/// rows of B (BN is a multiple of 16) or BM / 2 rows of A (64 or 32), so each half is whole 8-row
/// swizzle atoms (1024 bytes) and lands 1024-byte aligned.
inline constexpr bool sm90_pair_tile(int bn) { return sm90_staged_tile(bn) || sm90_wave_tile(bn); }
inline constexpr bool sm90_valid_bm(int bm, int bn) {
  return (bm == 128 || bm == 64) && (sm90_small_tile(bn) || sm90_pair_tile(bn));
}
/// The wave-fitting tiles run for problems of at most this many rows of A (two 128-row tile rows).
constexpr int kSm90WaveTileMaxM = 256;
// Split-K: at most this many CTAs (one cluster) share an output tile.
constexpr int kSm90MaxSplits = 4;
// Pipeline stages: 2..8 for the staged and wave-fitting tiles (what fits), 2..12 for the small ones.
constexpr int kSm90MaxStages = 12;
constexpr int kSm90LargeTileMaxStages = 8;
/// The staged and wave-fitting tiles' planned and tuned ring depth: the deepest that fits up to
/// this (deeper ones run when forced).
constexpr int kSm90LargeTileStages = 6;
inline constexpr int sm90_stage_bytes(int bm, int bn) { return (bm + bn) * 128; }
// The staged tiles' epilogue stages D through shared memory in TMA boxes of 64 rows × 128 bytes
// (8 KiB): BN / 64 per consumer warpgroup (two at BN = 128, four at BN = 256), so a bf16 tile is
// written at once and its stores drain during the next tile's mainloop; f32 takes two rounds.
// Two boxes at BN = 128 leave room for a sixth stage (6 × 32 KiB + 32 KiB; measured 1–3% faster
// than five at M = 256, docs/perf-notes.md R79b). The small tiles stage a transposed D as f32,
// 64 × BN per consumer warpgroup. The wave-fitting tiles stage nothing.
constexpr int kSm90StagingBoxBytes = 8192;
inline constexpr int sm90_staging_boxes(int bn) { return bn / 64; }  // per consumer warpgroup, staged tiles
inline constexpr int sm90_epilogue_bytes(int bn) {
  return sm90_small_tile(bn) ? 2 * 64 * bn * 4 : sm90_staged_tile(bn) ? 2 * sm90_staging_boxes(bn) * kSm90StagingBoxBytes : 0;
}
// Dynamic shared memory: the stages, the epilogue's staging boxes (kept apart from the stages:
// the producer already loads the next tile while the consumers store this one), 1024 bytes to
// align the base, and the barriers (2 × 8 bytes per stage). Split-K's partial tile (BM × BN f32)
// reuses stages + staging.
constexpr int kSm90BarrierBytes = 256;
static_assert(2 * 8 * kSm90MaxStages <= kSm90BarrierBytes, "barriers fit");
inline constexpr int sm90_smem_bytes(int bm, int bn, int stages) {
  return stages * sm90_stage_bytes(bm, bn) + sm90_epilogue_bytes(bn) + 1024 + kSm90BarrierBytes;
}

// D[m, n] = (Σ_k A[m, k] · B[n, k]) · sa[m] · sb[n] (+ bias). A and B are K-major.
struct GemmSm90Params {
  TmaDescriptor tma_a;   // A [M, K] bytes: dims {K, M}, box {128, BM / cluster_n}, 128-byte swizzle
  TmaDescriptor tma_b;   // B [N, K] bytes: dims {K, N}, box {128, BN / cluster_m}, 128-byte swizzle
  TmaDescriptor tma_d;   // D [M, N] (when tma_store): dims {N, M}, box {128 bytes of columns,
                         // 64 rows}, 128-byte swizzle
  void* d;               // [M, N] bf16 or f32, N contiguous
  const float* scale_a;  // [1] or [M]
  const float* scale_b;  // [1] or [N]
  const void* bias;      // [N] (or [M] with bias_rows) bf16 or f32, or null
  int64_t ldd;
  int64_t sa_stride_m;   // 0: per tensor
  int64_t sb_stride_n;
  int32_t m;
  int32_t n;
  int32_t k;
  int32_t tiles_m;
  int32_t tiles_n;
  int32_t bias_bf16;
  int32_t bias_rows;
  int32_t pair_store;    // 1: d and ldd allow storing two adjacent outputs at once
  int32_t tma_store;     // 1: the epilogue stages D in shared memory and stores it with TMA
                         //    (staged tiles; d and every row 16-byte aligned); 0: direct stores
  int32_t d_trans;       // 1: D is stored transposed, D[m, n] at d[n * ldd + m] (small tiles:
                         //    the host swapped a small-M problem's operands)
  int32_t d_vec16;       // 1: d and ldd · element size are multiples of 16 bytes (the transposed
                         //    store writes 8 outputs at once)
  int32_t splits;        // 1: persistent CTAs walk tiles blockIdx.x, + gridDim.x, ...; S > 1:
                         //    split-K, CTA b computes k-slice b % S of tile b / S and the S CTAs
                         //    of a tile (one cluster of S) sum their partials in rank order
  int32_t cluster_m;     // The cluster's shape in tiles: cluster_m × cluster_n is 1 × 1, or
  int32_t cluster_n;     //    (persistent only) a CTA pair: 2 × 1, B-pairs: the 2 CTAs of a
                         //    cluster take m-tiles 2u, 2u + 1 of one tile column and share B:
                         //    each loads BN/2 rows (tma_b's box) and multicasts them to both;
                         //    1 × 2, A-pairs: they take n-tiles 2v, 2v + 1 of one tile row and
                         //    share A: each loads BM/2 rows (tma_a's box), multicast to both,
                         //    and its own whole B. Never 2 × 2.
  int32_t const_a;       // 1: A's bytes are written by no work on the stream that may still run
  int32_t const_b;       //    (a model weight, GemmArgs::b_constant); likewise B. Such an operand's
                         //    first ring of stages loads before the kernel waits for the previous
                         //    grid (programmatic dependent launch); with pairs, each CTA's
                         //    multicast half of the shared operand. 0: nothing before the wait.
};

}  // namespace kjit::fp8
