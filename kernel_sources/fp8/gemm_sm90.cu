// Hopper FP8 GEMM: TMA loads, an mbarrier ring, wgmma.mma_async m64nNk32 (e4m3/e5m2 → f32),
// warp-specialized (sm_90a only; SASS: QGMMA). Contract: include/kjit/ops/fp8.hpp; host:
// runtime/ops/fp8_gemm.cc, which picks this kernel on sm_90 for tensorwise scales with A and B
// both K-major (the only FP8 layout wgmma reads: transposed operands exist for 16-bit types only)
// and routes everything else to the mma.sync kernel (fp8/gemm.cu).
//
//   D[m, n] = (Σ_k A[m, k] · B[n, k]) · sa[m] · sb[n] (+ bias[n])
//
// CTA: 384 threads = 3 warpgroups. Warpgroup 0 is the producer: it gives registers back
// (setmaxnreg.dec) and one thread issues, per 128-k tile, a TMA box of A (128 rows) and of B (BN
// rows) into stage kt % kStages after that stage's "empty" barrier says both consumers are done
// with it; the TMA completes the stage's "full" barrier (arrive + expected transaction bytes).
// Warpgroups 1 and 2 are consumers (setmaxnreg.inc): each waits on "full", issues 4 wgmma
// m64nBNk32 over the tile's 128 k for its 64 rows, waits for them (wgmma.wait_group 0), then each
// of its warps arrives on "empty" once the tile's wgmmas are known complete: the next tile's are
// issued first and wgmma.wait_group 1 then retires the previous ones, so the tensor cores always
// have one tile queued. TMA zero-fills out-of-bounds rows and k, so M, N and K need no
// predication in the main loop. Epilogue: scale (and bias) in registers, then either a TMA store
// through a swizzled shared-memory staging tile (clipped to M × N by the TMA unit) or, when D is
// not 16-byte aligned, direct stores masked to M × N.
//
// Shared memory: the TMA boxes use the 128-byte swizzle (16-byte chunk c of row r at c ^ (r % 8)
// within each 1024-byte group of 8 rows), which is the layout wgmma's "128B swizzle" K-major
// descriptor reads; stepping k by 32 inside the 128-byte rows moves the descriptor's start address
// by 32 bytes (the swizzle is a function of the address bits, and the tile base is 1024-aligned).
#include "kjit/config.cuh"
#include "fp8/gemm_params.h"
#include "fp8/gemm_sm90_params.h"
#include "fp8/ptx_sm90.cuh"
#include "fp8/quantize_params.h"

namespace kjit::fp8 {

namespace sm90_detail {

KJIT_DEVICE uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

}  // namespace sm90_detail

template <int kFmtA, int kFmtB, bool kOutF32, int kBN, int kStages>
__global__ void __launch_bounds__(kSm90Threads, 1) gemm_sm90_kernel(KJIT_PARAMS GemmSm90Params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL) || defined(KJIT_EMULATE_SM90)
  using namespace sm90;
  static_assert(kBN == 128 || kBN == 256, "BN");
  constexpr int kABytes = kSm90BM * 128;
  constexpr int kStageBytes = (kSm90BM + kBN) * 128;
  constexpr int kConsumerWarps = 8;

  extern __shared__ uint8_t smem_raw[];
  // The 128-byte swizzle atoms must start at 1024-byte boundaries.
  const uint32_t raw = smem_addr(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  const uint32_t bars = base + kStages * kStageBytes;  // full[s] at bars + 8s, empty[s] after them
  auto full_bar = [&](int s) { return bars + 8u * s; };
  auto empty_bar = [&](int s) { return bars + 8u * (kStages + s); };

  const int wg = threadIdx.x / 128;
  const int t = threadIdx.x % 128;

  // Grouped raster, as the mma.sync kernel.
  const int tile = blockIdx.x;
  const int group_tiles = kGemmGroupM * p.tiles_n;
  const int first_m = (tile / group_tiles) * kGemmGroupM;
  const int group_m = min(p.tiles_m - first_m, kGemmGroupM);
  const int in_group = tile % group_tiles;
  const int m0 = (first_m + in_group % group_m) * kSm90BM;
  const int n0 = (in_group / group_m) * kBN;
  const int ktiles = (p.k + 127) / 128;

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbarrier_init(full_bar(s), 1);
      mbarrier_init(empty_bar(s), kConsumerWarps);
    }
    fence_barrier_init();
    prefetch_tensormap(&p.tma_a);
    prefetch_tensormap(&p.tma_b);
  }
  __syncthreads();

  if (wg == 0) {
    // Producer.
    setmaxnreg_dec<40>();
    if (t == 0) {
      for (int kt = 0; kt < ktiles; ++kt) {
        const int s = kt % kStages;
        const int round = kt / kStages;
        if (round > 0) mbarrier_wait(empty_bar(s), static_cast<uint32_t>((round - 1) & 1));
        const uint32_t a_dst = base + s * kStageBytes;
        mbarrier_arrive_expect_tx(full_bar(s), kStageBytes);
        tma_load_2d(a_dst, &p.tma_a, kt * 128, m0, full_bar(s));
        tma_load_2d(a_dst + kABytes, &p.tma_b, kt * 128, n0, full_bar(s));
      }
    }
    return;
  }

  // Consumers: warpgroup c = wg - 1 owns rows [64c, 64c + 64) of the tile.
  setmaxnreg_inc<232>();
  const int c = wg - 1;
  // No zero fill: the first wgmma runs with scale-d = 0 (D = A·B). Writing the accumulators with
  // ordinary instructions would make ptxas serialize the wgmmas (C7515).
  float acc[kBN / 2];
  for (int kt = 0; kt < ktiles; ++kt) {
    const int s = kt % kStages;
    mbarrier_wait(full_bar(s), static_cast<uint32_t>((kt / kStages) & 1));
    const uint32_t a_tile = base + s * kStageBytes + c * 64 * 128;
    const uint32_t b_tile = base + s * kStageBytes + kABytes;
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      wgmma_m64k32<kBN, kFmtA, kFmtB>(acc, smem_desc_k128(a_tile + kk * 32), smem_desc_k128(b_tile + kk * 32),
                                      (kt | kk) != 0 ? 1u : 0u);
    }
    wgmma_commit();
    // Keep this tile's wgmmas in flight; the previous tile's are done, so its stage is free.
    wgmma_wait<1>();
    if (kt > 0 && (t & 31) == 0) mbarrier_arrive(empty_bar((kt - 1) % kStages));
  }
  wgmma_wait<0>();

  const int w = t / 32, l = t % 32;
  const bool bias_bf16 = p.bias_bf16 != 0;
  // Scale and bias of the thread's outputs (outside M × N: 0, never stored, nothing read).
  auto finish = [&](float x, int row, int col, float sa) {
    if (row >= p.m || col >= p.n) return 0.f;
    x *= sa * __ldg(p.scale_b + int64_t(col) * p.sb_stride_n);
    if (p.bias != nullptr) {
      const int i = p.bias_rows ? row : col;
      x += bias_bf16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(p.bias)[i])
                     : __ldg(static_cast<const float*>(p.bias) + i);
    }
    return x;
  };

  if (p.tma_store) {
    // Stage this warpgroup's 64 × BN outputs in shared memory as TMA boxes of 64 rows × 128
    // bytes (64 bf16 or 32 f32 columns) in the 128-byte swizzle (conflict-free: the 8 rows of a
    // store land in 8 different 16-byte slots), then one thread stores the boxes with TMA, which
    // clips rows ≥ M and columns ≥ N. Both warpgroups must be done reading the stages first.
    constexpr int kElem = kOutF32 ? 4 : 2;
    constexpr int kBoxCols = 128 / kElem;
    constexpr int kBoxes = kBN / kBoxCols;
    const uint32_t region = base + c * (64 * kBN * kElem);
    named_barrier<1, 256>();
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = 16 * w + l / 4 + 8 * h;  // row within the warpgroup's 64
      const int row = m0 + c * 64 + r;
      const float sa = row < p.m ? __ldg(p.scale_a + int64_t(row) * p.sa_stride_m) : 0.f;
#pragma unroll
      for (int j = 0; j < kBN / 8; ++j) {
        const int col = n0 + 8 * j + 2 * (l % 4);
        const float v0 = finish(acc[4 * j + 2 * h], row, col, sa);
        const float v1 = finish(acc[4 * j + 2 * h + 1], row, col + 1, sa);
        const int box = (8 * j) / kBoxCols;
        const int byte = ((8 * j) % kBoxCols + 2 * (l % 4)) * kElem;  // within the box row
        const uint32_t addr = region + box * 8192 + r * 128 + ((((byte >> 4) ^ (r & 7))) << 4) + (byte & 15);
        if constexpr (kOutF32) {
          st_shared_f32x2(addr, v0, v1);
        } else {
          st_shared_u32(addr, sm90_detail::pack_bf16x2(v0, v1));
        }
      }
    }
    fence_proxy_async();
    if (c == 0) {
      named_barrier<2, 128>();
    } else {
      named_barrier<3, 128>();
    }
    if (t == 0) {
#pragma unroll
      for (int b = 0; b < kBoxes; ++b) tma_store_2d(&p.tma_d, n0 + b * kBoxCols, m0 + c * 64, region + b * 8192);
      bulk_commit();
      bulk_wait_read();
    }
    return;
  }

  // Direct stores from the accumulators (D not 16-byte aligned for TMA).
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = m0 + c * 64 + 16 * w + l / 4 + 8 * h;
    if (row >= p.m) continue;
    const float sa = __ldg(p.scale_a + int64_t(row) * p.sa_stride_m);
    char* out_row = static_cast<char*>(p.d) + int64_t(row) * p.ldd * (kOutF32 ? 4 : 2);
#pragma unroll
    for (int j = 0; j < kBN / 8; ++j) {
      const int col = n0 + 8 * j + 2 * (l % 4);
      const float v[2] = {finish(acc[4 * j + 2 * h], row, col, sa), finish(acc[4 * j + 2 * h + 1], row, col + 1, sa)};
      if (col + 1 < p.n && p.pair_store) {
        if constexpr (kOutF32) {
          *reinterpret_cast<float2*>(out_row + int64_t(col) * 4) = make_float2(v[0], v[1]);
        } else {
          *reinterpret_cast<uint32_t*>(out_row + int64_t(col) * 2) = sm90_detail::pack_bf16x2(v[0], v[1]);
        }
      } else {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          if (col + e >= p.n) continue;
          if constexpr (kOutF32) {
            reinterpret_cast<float*>(out_row)[col + e] = v[e];
          } else {
            reinterpret_cast<__nv_bfloat16*>(out_row)[col + e] = __float2bfloat16_rn(v[e]);
          }
        }
      }
    }
  }
#else
  // Not sm_90a: the host never launches this kernel here (it compiles so that the family's
  // defaults build for every arch).
  __trap();
#endif
}

}  // namespace kjit::fp8
