#pragma once
// Params of the FP8 quantize kernels (kernel_sources/fp8/quantize.cu). Compiled by g++ (runtime/
// ops/fp8/quantize.cc fills them) and by NVRTC, so they hold only fixed-width integers, floats and
// raw pointers. The contract (shapes, scale formulas) is documented in include/kjit/ops/fp8.hpp.
#include "kjit/fast_div.h"
#include "kjit/fp8_format.h"  // kFormatE4M3, kFormatE5M2: the `kFmt` template argument
#include "kjit/types.h"

namespace kjit::fp8 {

// Input element types, as the `kIn` template argument (values of the family's `in` parameter).
constexpr int kInBF16 = 0;
constexpr int kInF16 = 1;
constexpr int kInF32 = 2;

// Scale granularities (values of kjit::fp8::Granularity).
constexpr int kGranTensor = 0;
constexpr int kGranRow = 1;
constexpr int kGranBlock1x128 = 2;
constexpr int kGranBlock128x128 = 3;

// Edge of a scale block (1×128 activations, 128×128 weights).
constexpr int kScaleBlock = 128;

// Per-tensor kernels: CTA size, and 16-byte vectors each thread loads before it converts any,
// so that kTensorUnroll independent loads are in flight per thread.
constexpr int kTensorThreads = 256;
constexpr int kTensorUnroll = 4;
// Per-row kernel: 16-byte vectors of its row each thread keeps in registers between the amax
// reduction and the conversion (the host sizes the CTA so that a row usually fits); vectors
// past threads · kRowCache are read twice, the second time from L2.
constexpr int kRowCache = 8;
constexpr int kRowMaxThreads = 512;
// Block kernels: CTA size, and 1×128 blocks each thread group converts per iteration.
constexpr int kBlockThreads = 256;
constexpr int kBlockUnroll = 4;

// One struct for all quantize kernels of a program. Strides are in elements.
struct QuantizeParams {
  const void* x;             // [rows, cols] bf16/f16/f32, 16-byte aligned rows
  void* y;                   // [rows, cols] fp8 bytes, 16-byte aligned rows
  const float* multiplier;   // tensor, given multiplier: device f32 [1], or null → multiplier_value
  float* amax;               // tensor: [1] (atomicMax target, zeroed by the host before the launch;
                             // read by the dynamic quantize kernel); row/block: per row/block or null
  float* scale_inv;          // dequant scale 1 / multiplier: tensor [1] or null; row/block: required
  int64_t rows;
  int64_t cols;              // multiple of 16
  int64_t x_stride;          // row strides
  int64_t y_stride;
  int64_t s_stride0;         // amax / scale_inv strides: row → [rows]; blocks → [row blocks, col blocks]
  int64_t s_stride1;
  FastDiv64 vpr_div;         // per-tensor kernels: vectors per row (cols / 16-byte vector), divisor of
                             // the vector index when rows > 1
  float multiplier_value;
  int32_t col_blocks;        // ceil(cols / 128)
};

// The delayed-scaling update (one thread): pushes this step's amax into the history ring and
// recomputes the multiplier from the history, as Transformer Engine's "max" amax algorithm.
struct DelayedScalingParams {
  const float* amax;         // [1] amax of this step's input (from the quantize kernel)
  float* history;            // [history_len] ring of past amaxes, zero-initialized
  int32_t* step;             // [1] steps taken so far (the next ring slot is step % history_len)
  float* multiplier;         // [1] in: this step's multiplier; out: the next step's (the quantize
                             // kernel of the next step writes its 1 / multiplier)
  float margin_scale;        // 2^margin
  int32_t history_len;
};

}  // namespace kjit::fp8
