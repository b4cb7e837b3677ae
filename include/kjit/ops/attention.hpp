#pragma once
/// \file ops/attention.hpp
/// GQA attention decode over a contiguous BLHD KV cache (the astrai seed's `attn_decode`):
///   out[b, h] = softmax(scale · q[b, h] · K[b, :, h / group]ᵀ + mask) · V[b, :, h / group]
/// with group = q_heads / kv_heads, over positions j < kv_lens[b] where mask[b, j] is true.
/// Split-KV: each CTA reduces a slice of the sequence to a partial (o, lse); a merge step
/// combines the partials (Milakov & Gimelshein 2018, "Online normalizer calculation for softmax";
/// FlashDecoding). MMA (mma.sync m16n8k16 bf16) on sm_80+.

#include <kjit/runtime.hpp>
#include <kjit/tensor.hpp>

#include <cuda.h>

#include <cstddef>

namespace kjit::attention {

/// Arguments of decode(). All tensors on one CUDA device.
struct DecodeArgs {
  /// [batch, 1, q_heads, head_dim] bf16, head_dim contiguous.
  TensorRef q;
  /// [batch, max_kv_len, kv_heads, head_dim] bf16 (BLHD), head_dim contiguous, 16-byte aligned
  /// rows; q_heads % kv_heads == 0; head_dim 64, 128 or 256.
  TensorRef k;
  TensorRef v;
  /// [batch] int32 on the device, each in [0, max_kv_len]; ndim == 0 means all max_kv_len.
  TensorRef kv_lens;
  /// Optional [batch, max_kv_len] bool (true = attend); ndim == 0 for none.
  TensorRef mask;
  /// [batch, 1, q_heads, head_dim] bf16. A row with no attended position is written as zeros.
  TensorRef out;
  /// Optional [batch, q_heads] f32 log-sum-exp (natural log) of the scaled scores; -inf for a row
  /// with no attended position; ndim == 0 for none.
  TensorRef lse;
  /// Softmax scale; 0 means 1 / sqrt(head_dim).
  float scale = 0.f;
  /// Split-KV count; 0 lets the planner choose from the SM count, batch and kv length.
  int num_splits = 0;
};

/// Bytes of device workspace decode() needs for `args` on the current device (split-KV partials).
/// Depends only on shapes, so a caller can size it once per shape bucket.
size_t decode_workspace_bytes(const DecodeArgs& args, Runtime& runtime = Runtime::global());

/// Runs GQA decode on `stream`. `workspace` must hold decode_workspace_bytes(args) bytes (16-byte
/// aligned). Never allocates or synchronizes (graph-capturable). Throws InvalidArgument naming the
/// tensor and the rule it broke, Unsupported below sm_80, DriverError for driver failures.
void decode(const DecodeArgs& args, void* workspace, size_t workspace_bytes, CUstream stream,
            Runtime& runtime = Runtime::global());

}  // namespace kjit::attention
