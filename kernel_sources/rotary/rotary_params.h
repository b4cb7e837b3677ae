#pragma once
// Params of the rotary kernels (kernel_sources/rotary/rotary.cu). Compiled by g++ (runtime/ops/
// rotary/rotary.cc fills it) and by NVRTC, so it holds only fixed-width integers and raw pointers.
// The namespace is kjit::rope, not kjit::rotary: on the host that name is the op function.
#include "kjit/types.h"

namespace kjit::rope {

// Pairing styles, as the `kStyle` template argument of the kernels (values of kjit::RotaryStyle).
constexpr int kStyleNeoX = 0;  // (i, i + rotary_dim/2)
constexpr int kStyleGPTJ = 1;  // (2i, 2i + 1)

// q and k heads one thread of the vector kernel rotates; it reads this many head rows before it
// writes any, so that 2 * kHeadsPerThread independent 16-byte loads are in flight per thread.
constexpr int kHeadsPerThread = 4;
// CTA sizes. The vector kernel uses the largest multiple of head_dim / 16 that fits in
// kVectorThreads (head_dim 80: 5 threads a head row → 125 threads); small CTAs let the ~80-96
// registers it needs still fill 20+ warps an SM.
constexpr int kVectorThreads = 128;
constexpr int kScalarThreads = 256;

// Element pointers, strides in elements. In place: q_out == q with q's strides (and likewise
// for k) and copy_tail == 0. No k: kv_heads == 0 and the k pointers are null.
struct RotaryParams {
  const void* q;  // bf16 [tokens, q_heads, head_dim], last dim contiguous
  const void* k;  // bf16 [tokens, kv_heads, head_dim]
  void* q_out;
  void* k_out;
  const float* cos;       // f32 [max_position, rotary_dim / 2], contiguous
  const float* sin;       // f32 [max_position, rotary_dim / 2], contiguous
  const void* positions;  // int32 or int64 [tokens]
  int64_t q_token_stride;
  int64_t q_head_stride;
  int64_t k_token_stride;
  int64_t k_head_stride;
  int64_t q_out_token_stride;
  int64_t q_out_head_stride;
  int64_t k_out_token_stride;
  int64_t k_out_head_stride;
  int32_t tokens;
  int32_t q_heads;
  int32_t kv_heads;
  int32_t rotary_dim;   // even, 2 ≤ rotary_dim ≤ head_dim
  int32_t q_head_groups;  // vector kernel: ceil(q_heads / kHeadsPerThread)
  int32_t k_head_groups;  // vector kernel: ceil(kv_heads / kHeadsPerThread)
  int32_t copy_tail;    // 1 when out of place: write dims [rotary_dim, head_dim) through
};

}  // namespace kjit::rope
