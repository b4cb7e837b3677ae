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
  /// [batch, 1, q_heads, head_dim] bf16, head_dim contiguous, 16-byte aligned rows (pointer and
  /// batch/head strides). Query head h attends with KV head h / (q_heads / kv_heads).
  TensorRef q;
  /// [batch, max_kv_len, kv_heads, head_dim] bf16 (BLHD), head_dim contiguous, 16-byte aligned
  /// rows (pointer and batch/token/head strides: views of a larger cache are fine);
  /// q_heads % kv_heads == 0 (any ratio); head_dim 64, 128 or 256. Rows at or past kv_lens[b] are
  /// never read.
  TensorRef k;
  TensorRef v;
  /// [batch] int32 on the device, contiguous, each in [0, max_kv_len] (values outside are clamped
  /// on the device, not reported: checking would need a sync); ndim == 0 means all max_kv_len.
  TensorRef kv_lens;
  /// Optional [batch, max_kv_len] bool (or u8; nonzero = attend), any strides; ndim == 0 for none.
  TensorRef mask;
  /// [batch, 1, q_heads, head_dim] bf16, head_dim contiguous, 16-byte aligned rows. A row with no
  /// attended position (kv_len 0, or everything masked) is written as zeros.
  TensorRef out;
  /// Optional [batch, q_heads] f32 log-sum-exp (natural log) of the scaled scores; -inf for a row
  /// with no attended position; ndim == 0 for none.
  TensorRef lse;
  /// Softmax scale; 0 means 1 / sqrt(head_dim).
  float scale = 0.f;
  /// Split-KV count; 0 lets the planner choose from the SM count, batch, kv_heads and max_kv_len
  /// (filling ~1–2 waves of CTAs). A positive count splits max_kv_len into that many equal
  /// ranges (fewer when max_kv_len is shorter); 1 writes out/lse directly and needs no workspace.
  int num_splits = 0;
};

/// Bytes of device workspace decode() needs for `args` on the device of `args.q` (split-KV
/// partials: f32 o and lse per split; 0 when one split suffices). Depends only on the shapes,
/// num_splits and the device's SM count, so a caller can size it once per shape bucket. Throws
/// what decode() throws for invalid arguments; DriverError without a driver (unless
/// num_splits == 1, which needs no device query).
size_t decode_workspace_bytes(const DecodeArgs& args, Runtime& runtime = Runtime::global());

/// Runs GQA decode on `stream`. `workspace` must hold decode_workspace_bytes(args) bytes (16-byte
/// aligned; may be null when that is 0). Never allocates or synchronizes (graph-capturable).
/// All argument checks run before the first driver call. Throws InvalidArgument naming the
/// tensor and the rule it broke (or the workspace bytes needed), Unsupported below sm_80,
/// DriverError for driver failures. Scores are accumulated in f32 from the bf16 inputs; P is
/// rounded to bf16 for P·V (as FlashAttention does), the output to bf16 at the end.
void decode(const DecodeArgs& args, void* workspace, size_t workspace_bytes, CUstream stream,
            Runtime& runtime = Runtime::global());

}  // namespace kjit::attention
