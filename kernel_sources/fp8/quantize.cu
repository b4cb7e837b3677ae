// FP8 quantization: bf16/f16/f32 → E4M3/E5M2 with amax, per tensor, per row, per 1×128 block or
// per 128×128 block. Contract and formulas: include/kjit/ops/fp8.hpp. Host: runtime/ops/
// fp8/quantize.cc.
//
// Every kernel moves 16-byte input vectors (8 bf16/f16 or 4 f32) and writes the matching 8 or
// 4 fp8 bytes; cols is a multiple of 16 and rows are 16-byte aligned, so no vector straddles a
// row or a 128-column block. y = sat(x · multiplier) with one f32 rounding of the product.
//
//  - quantize_tensor_kernel<kIn, kFmt, kDynamic, kPow2>: kTensorUnroll vectors per thread, all
//    loads in flight before any conversion; the host launches one CTA per kTensorThreads ·
//    kTensorUnroll vectors (the grid-stride loop only matters past the grid limit). Given multiplier (kDynamic = false): also reduces
//    amax (fmaxf per thread, warp shuffles, one atomicMax per CTA on the float bits: non-negative
//    floats order like their bit patterns as unsigned ints) into p.amax, which the host zeroed
//    with cuMemsetD8Async just before. Dynamic (kDynamic = true): the multiplier comes from the
//    amax that amax_kernel left in p.amax.
//  - amax_kernel<kIn>: the first pass of the dynamic per-tensor path (reads only).
//  - quantize_row_kernel<kIn, kFmt, kPow2>: one CTA per row; the row stays in registers between
//    its amax reduction and its conversion (kRowCache vectors per thread).
//  - quantize_block_kernel<kIn, kFmt, kPow2>: 1×128 blocks; a group of 128 / vec threads (16 or
//    32 lanes of one warp) per block, shuffle reduction, kBlockUnroll blocks per group in flight.
//  - quantize_tile_kernel<kIn, kFmt, kPow2>: 128×128 blocks; one CTA per block, the block in
//    registers (8 or 16 vectors per thread), CTA reduction.
//  - delayed_scaling_kernel<kFmt>: the delayed-scaling recipe's per-step update (one thread).
#include "kjit/config.cuh"
#include "fp8/convert.cuh"
#include "fp8/quantize_params.h"

namespace kjit::fp8 {

namespace detail {

/// One CTA's atomicMax of a non-negative float into *dst (as unsigned bits).
KJIT_DEVICE void atomic_max_nonneg(float* dst, float v) {
  atomicMax(reinterpret_cast<unsigned int*>(dst), __float_as_uint(v));
}

/// Per-tensor body shared by the amax pass and the quantize kernels.
template <int kIn, int kFmt, bool kQuantize, bool kReduceAmax>
KJIT_DEVICE void tensor_pass(const QuantizeParams& p, float multiplier) {
  using Traits = InTraits<kIn>;
  constexpr int kVec = Traits::kVec;
  constexpr int kInBytes = 16 / kVec;
  const int64_t vpr = p.cols / kVec;
  const int64_t total = p.rows * vpr;
  float amax = 0.f;
  const int64_t step = int64_t(gridDim.x) * kTensorThreads * kTensorUnroll;
  for (int64_t base = int64_t(blockIdx.x) * kTensorThreads * kTensorUnroll + threadIdx.x; base < total;
       base += step) {
    uint4 v[kTensorUnroll];
    int64_t y_off[kTensorUnroll];
#pragma unroll
    for (int u = 0; u < kTensorUnroll; ++u) {
      const int64_t i = base + int64_t(u) * kTensorThreads;
      if (i < total) {
        // Vector i at (row, col) of a [rows, vpr]-vector tensor; the host collapses contiguous
        // tensors to one row, which skips the division (kjit/fast_div.h: a 64-bit `/` inlined at
        // each of these offsets was half of the program's code and a third of its compile time).
        const int64_t row = p.rows == 1 ? 0 : static_cast<int64_t>(fast_quotient64(static_cast<uint64_t>(i), p.vpr_div));
        const int64_t col = i - row * vpr;
        v[u] = load_vec(static_cast<const char*>(p.x) + (row * p.x_stride + col * kVec) * kInBytes);
        y_off[u] = row * p.y_stride + col * kVec;
      }
    }
#pragma unroll
    for (int u = 0; u < kTensorUnroll; ++u) {
      const int64_t i = base + int64_t(u) * kTensorThreads;
      if (i < total) {
        float f[kVec];
        Traits::unpack(v[u], f);
        if (kReduceAmax) amax = vec_amax<kVec>(amax, f);
        if (kQuantize) {
          const uint2 q = vec_quantize<kFmt, kVec>(f, multiplier);
          store_fp8<kVec>(static_cast<char*>(p.y) + y_off[u], q);
        }
      }
    }
  }
  if (kReduceAmax && p.amax != nullptr) {
    __shared__ float scratch[32];
    amax = block_max(amax, scratch);
    if (threadIdx.x == 0) atomic_max_nonneg(p.amax, amax);
  }
}

}  // namespace detail

template <int kIn, int kFmt, bool kDynamic, bool kPow2>
__global__ void __launch_bounds__(kTensorThreads) quantize_tensor_kernel(KJIT_PARAMS QuantizeParams p) {
  float m;
  if (kDynamic) {
    m = multiplier_from_amax<kFmt, kPow2>(*p.amax);
  } else {
    m = round_multiplier<kPow2>(p.multiplier != nullptr ? *p.multiplier : p.multiplier_value);
  }
  if (blockIdx.x == 0 && threadIdx.x == 0 && p.scale_inv != nullptr) *p.scale_inv = __frcp_rn(m);
  detail::tensor_pass<kIn, kFmt, true, !kDynamic>(p, m);
}

template <int kIn>
__global__ void __launch_bounds__(kTensorThreads) amax_kernel(KJIT_PARAMS QuantizeParams p) {
  detail::tensor_pass<kIn, kFormatE4M3, false, true>(p, 1.f);
}

template <int kIn, int kFmt, bool kPow2>
__global__ void __launch_bounds__(kRowMaxThreads) quantize_row_kernel(KJIT_PARAMS QuantizeParams p) {
  using Traits = InTraits<kIn>;
  constexpr int kVec = Traits::kVec;
  constexpr int kInBytes = 16 / kVec;
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const int vpr = static_cast<int>(p.cols / kVec);
  const int threads = blockDim.x;
  const char* x = static_cast<const char*>(p.x) + row * p.x_stride * kInBytes;
  char* y = static_cast<char*>(p.y) + row * p.y_stride;

  uint4 v[kRowCache];
  float amax = 0.f;
#pragma unroll
  for (int c = 0; c < kRowCache; ++c) {
    const int i = threadIdx.x + c * threads;
    if (i < vpr) v[c] = load_vec(x + int64_t(i) * 16);
  }
#pragma unroll
  for (int c = 0; c < kRowCache; ++c) {
    const int i = threadIdx.x + c * threads;
    if (i < vpr) {
      float f[kVec];
      Traits::unpack(v[c], f);
      amax = vec_amax<kVec>(amax, f);
    }
  }
  for (int i = threadIdx.x + kRowCache * threads; i < vpr; i += threads) {
    float f[kVec];
    Traits::unpack(load_vec(x + int64_t(i) * 16), f);
    amax = vec_amax<kVec>(amax, f);
  }
  amax = block_max(amax, scratch);
  const float m = multiplier_from_amax<kFmt, kPow2>(amax);
  if (threadIdx.x == 0) {
    p.scale_inv[row * p.s_stride0] = __frcp_rn(m);
    if (p.amax != nullptr) p.amax[row * p.s_stride0] = amax;
  }
#pragma unroll
  for (int c = 0; c < kRowCache; ++c) {
    const int i = threadIdx.x + c * threads;
    if (i < vpr) {
      float f[kVec];
      Traits::unpack(v[c], f);
      store_fp8<kVec>(y + int64_t(i) * kVec, vec_quantize<kFmt, kVec>(f, m));
    }
  }
  for (int i = threadIdx.x + kRowCache * threads; i < vpr; i += threads) {
    float f[kVec];
    Traits::unpack(load_vec(x + int64_t(i) * 16), f);
    store_fp8<kVec>(y + int64_t(i) * kVec, vec_quantize<kFmt, kVec>(f, m));
  }
}

template <int kIn, int kFmt, bool kPow2>
__global__ void __launch_bounds__(kBlockThreads) quantize_block_kernel(KJIT_PARAMS QuantizeParams p) {
  using Traits = InTraits<kIn>;
  constexpr int kVec = Traits::kVec;
  constexpr int kInBytes = 16 / kVec;
  constexpr int kGroup = kScaleBlock / kVec;  // lanes per block: 16 (16-bit inputs) or 32 (f32)
  constexpr int kGroups = kBlockThreads / kGroup;
  const int lane = threadIdx.x % kGroup;
  const int group = threadIdx.x / kGroup;
  const int64_t total = p.rows * p.col_blocks;

  int64_t bid[kBlockUnroll];
  bool valid[kBlockUnroll];
  uint4 v[kBlockUnroll];
#pragma unroll
  for (int u = 0; u < kBlockUnroll; ++u) {
    // Consecutive groups take consecutive blocks, so a warp reads 256 or 512 contiguous bytes.
    bid[u] = (int64_t(blockIdx.x) * kBlockUnroll + u) * kGroups + group;
    valid[u] = false;
    if (bid[u] < total) {
      const int64_t row = bid[u] / p.col_blocks;
      const int64_t col = (bid[u] - row * p.col_blocks) * kScaleBlock + lane * kVec;
      valid[u] = col < p.cols;
      if (valid[u]) v[u] = load_vec(static_cast<const char*>(p.x) + (row * p.x_stride + col) * kInBytes);
    }
  }
#pragma unroll
  for (int u = 0; u < kBlockUnroll; ++u) {
    float f[kVec];
    float amax = 0.f;
    if (valid[u]) {
      Traits::unpack(v[u], f);
      amax = vec_amax<kVec>(0.f, f);
    }
    // Reduce over the group's lanes (xor offsets below kGroup stay inside the group).
#pragma unroll
    for (int o = kGroup / 2; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    if (bid[u] >= total) continue;
    const int64_t row = bid[u] / p.col_blocks;
    const int64_t cb = bid[u] - row * p.col_blocks;
    const float m = multiplier_from_amax<kFmt, kPow2>(amax);
    if (lane == 0) {
      p.scale_inv[row * p.s_stride0 + cb * p.s_stride1] = __frcp_rn(m);
      if (p.amax != nullptr) p.amax[row * p.s_stride0 + cb * p.s_stride1] = amax;
    }
    if (valid[u]) {
      const int64_t col = cb * kScaleBlock + lane * kVec;
      store_fp8<kVec>(static_cast<char*>(p.y) + row * p.y_stride + col, vec_quantize<kFmt, kVec>(f, m));
    }
  }
}

template <int kIn, int kFmt, bool kPow2>
__global__ void __launch_bounds__(kBlockThreads, 2) quantize_tile_kernel(KJIT_PARAMS QuantizeParams p) {
  using Traits = InTraits<kIn>;
  constexpr int kVec = Traits::kVec;
  constexpr int kInBytes = 16 / kVec;
  constexpr int kRowVecs = kScaleBlock / kVec;                       // vectors per block row
  constexpr int kPerThread = kScaleBlock * kRowVecs / kBlockThreads;  // 8 or 16
  __shared__ float scratch[32];
  const int64_t rb = blockIdx.y, cb = blockIdx.x;
  uint4 v[kPerThread];
  bool valid[kPerThread];
  float amax = 0.f;
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const int i = threadIdx.x + j * kBlockThreads;
    const int64_t row = rb * kScaleBlock + i / kRowVecs;
    const int64_t col = cb * kScaleBlock + (i % kRowVecs) * kVec;
    valid[j] = row < p.rows && col < p.cols;
    if (valid[j]) v[j] = load_vec(static_cast<const char*>(p.x) + (row * p.x_stride + col) * kInBytes);
  }
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    if (valid[j]) {
      float f[kVec];
      Traits::unpack(v[j], f);
      amax = vec_amax<kVec>(amax, f);
    }
  }
  amax = block_max(amax, scratch);
  const float m = multiplier_from_amax<kFmt, kPow2>(amax);
  if (threadIdx.x == 0) {
    p.scale_inv[rb * p.s_stride0 + cb * p.s_stride1] = __frcp_rn(m);
    if (p.amax != nullptr) p.amax[rb * p.s_stride0 + cb * p.s_stride1] = amax;
  }
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    if (valid[j]) {
      const int i = threadIdx.x + j * kBlockThreads;
      const int64_t row = rb * kScaleBlock + i / kRowVecs;
      const int64_t col = cb * kScaleBlock + (i % kRowVecs) * kVec;
      float f[kVec];
      Traits::unpack(v[j], f);
      store_fp8<kVec>(static_cast<char*>(p.y) + row * p.y_stride + col, vec_quantize<kFmt, kVec>(f, m));
    }
  }
}

/// Delayed scaling (Micikevicius et al. 2022, "FP8 Formats for Deep Learning", §4.3; NVIDIA
/// Transformer Engine's DelayedScaling with amax_compute_algo "max"): push this step's amax into
/// the ring, then, with amax_h = max(history),
///   multiplier' = (fmt_max / amax_h) / 2^margin, clamped to [FLT_MIN, FLT_MAX]   when 0 < amax_h < inf
///   multiplier' = multiplier                                                       otherwise (kept, as TE)
/// (divided in that order, as Transformer Engine; the clamp keeps 1 / multiplier finite).
template <int kFmt>
__global__ void delayed_scaling_kernel(KJIT_PARAMS DelayedScalingParams p) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  const int32_t step = *p.step;
  p.history[step % p.history_len] = *p.amax;
  // Wrap before int32 overflow at a multiple of the ring length, so the slot sequence continues.
  *p.step = step + 1 < 0x40000000 ? step + 1 : (step + 1) % p.history_len;
  float h = 0.f;
  for (int i = 0; i < p.history_len; ++i) h = fmaxf(h, p.history[i]);
  if (h > 0.f && h <= 3.402823466e38f) {
    const float m = __fdiv_rn(__fdiv_rn(FormatTraits<kFmt>::kMax, h), p.margin_scale);
    *p.multiplier = fminf(fmaxf(m, 1.175494351e-38f), 3.402823466e38f);
  }
}

}  // namespace kjit::fp8
