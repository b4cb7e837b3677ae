#pragma once
/// \file ops/swa_decode.hpp
/// Fused fp8 sliding-window decode attention for MLA models (DeepSeek-V3/V4 style: the cached
/// latent is both K and V). In one kernel (plus a merge kernel when the window is split across
/// CTAs that are not one thread-block cluster) it computes what a plain PyTorch version does with one batched gather of every token's
/// window, a dequantization and a masked scaled-dot-product attention (SDPA):
///
///   for token t, head h, over the window positions j < lens[t] whose slot s_j = indices[t, j]
///   is ≥ 0 (slot = block · block_size + offset):
///     k_j          = fp8(kv_cache[s_j / block_size, s_j % block_size, :]) · inv_scale[s_j, 0]
///     out[t, h, :] = Σ_j softmax_j(scale · q[t, h, :] · k_j) · k_j
///     lse[t, h]    = log Σ_j exp(scale · q[t, h, :] · k_j)                 (natural log)
///   A row with no such position gets out = 0 and lse = −inf (a masked SDPA would give NaN).
///
/// Numerics: the kernel multiplies the cached fp8 values exactly (as f16 on sm_80/sm_100 and in
/// the sm_90 mma.sync kernel, as raw E4M3/E5M2 mma operands on sm_89/sm_120 and in the sm_90a
/// wgmma kernel) and applies inv_scale in f32, to the scores
/// and (folded into P) to the output. q and P enter the products with ~8 significant bits or
/// more (f16, or an E4M3 hi + lo pair). A bf16 PyTorch version instead rounds each dequantized
/// value fp8 · inv_scale to bf16 before both products; the two differ by that rounding (≈ 2^-9
/// relative per value, random sign: ~1e-3 relative L2 on the output). Accumulation is f32; the
/// output is rounded to bf16 once.

#include <kjit/runtime.hpp>
#include <kjit/tensor.hpp>

#include <cuda.h>

#include <cstddef>

namespace kjit::mla {

/// Arguments of swa_decode(). All tensors on one CUDA device.
struct SwaDecodeArgs {
  /// [T, NH, HD] bf16 queries, RoPE already applied. HD = 512 (the specialization space);
  /// NH a multiple of 16 (heads share a CTA in groups of 16 or 32). Any token/head strides, the
  /// last dim contiguous, rows 16-byte aligned.
  TensorRef q;
  /// [num_blocks, block_size, HD] paged fp8 cache. dtype kU8 (raw E4M3 bytes, as caches stored
  /// as uint8 tensors hold them), kE4M3 or kE5M2. Any block/row strides, the last dim contiguous, rows 16-byte aligned.
  /// Bytes 0x7f/0xff (E4M3 NaN) are not valid contents.
  TensorRef kv_cache;
  /// [max_slots, 1] bf16: the dequantization multiplier of each cached token (slot). Any row
  /// stride.
  TensorRef inv_scale;
  /// [≥ T, W] int64 slot ids, contiguous (a leading dim of 1, [1, ≥ T, W], is accepted too:
  /// the shape a batch-of-one caller passes; rows past T are ignored). A negative id masks its position. W, the window,
  /// is 64, 128, 256 or 512. Ids must be < num_blocks · block_size and < max_slots: checking
  /// that would need a device synchronization, so it is the caller's contract.
  TensorRef indices;
  /// [≥ T] int64 or int32: only window positions j < lens[t] count (values are clamped to
  /// [0, W]). Contiguous.
  TensorRef lens;
  /// [T, NH, HD] bf16 output; same layout rules as q.
  TensorRef out;
  /// Optional [T, NH] f32 natural-log log-sum-exp of the scaled scores, −inf for an empty row;
  /// ndim == 0 for none. Any strides.
  TensorRef lse;
  /// Softmax scale; 0 means 1 / sqrt(HD). Must be finite.
  float scale = 0.f;
  /// Window splits per token (each split a CTA, combined by a merge kernel through the
  /// workspace); 0 lets the planner choose from the SM count and T. At most min(32, W / 16).
  int num_splits = 0;
  /// Heads per CTA, 16 or 32 (the mma.sync kernel, any arch), or 64 (the sm_90a wgmma kernel:
  /// Hopper only, W ≤ 128, num_splits 0 or 1); NH must be a multiple. 0 lets the planner choose
  /// (64 on Hopper for W ≤ 128 with at least SMs / 2 items of 64 heads).
  int head_group = 0;
  /// CTAs of one thread-block cluster that split the window of each (token, head group), 2, 4
  /// or 8 (sm_90+), each taking W / cluster_split positions; they merge through distributed
  /// shared memory in the same launch, with no workspace. W / cluster_split must be a multiple of
  /// 16 and at most 128; head_group 0, 16 or 32; num_splits 0 or 1. 1 = no cluster. 0 lets the
  /// planner choose (on sm_90+, 4 CTAs for each (token, 16 heads) while they fill at most half
  /// the SMs, else 2 while they fit one per SM: T ≤ 2 and T ≤ 8 at NH 128 on 132 SMs).
  int cluster_split = 0;
};

/// Bytes of device workspace swa_decode() needs for `args` on their device (split partials:
/// T · NH · splits · (HD + 1) floats when the plan splits the window over CTAs merged by a
/// second kernel, else 0; a cluster split needs none). Depends only on the shapes, num_splits,
/// head_group, cluster_split and the device. Throws InvalidArgument for the
/// arguments swa_decode refuses, by the same rules but naming kjit::mla::swa_decode_workspace_bytes;
/// DriverError when the device cannot be queried.
size_t swa_decode_workspace_bytes(const SwaDecodeArgs& args);

/// Runs the decode on `stream`. `workspace` must hold swa_decode_workspace_bytes(args) bytes,
/// 16-byte aligned (null is fine when that is 0). Never allocates or synchronizes
/// (graph-capturable). Throws InvalidArgument naming the tensor and the rule it broke (checked
/// before any driver call), Unsupported below sm_80 (and for a cluster_split > 1 below sm_90),
/// DriverError for driver failures.
void swa_decode(const SwaDecodeArgs& args, void* workspace, size_t workspace_bytes, CUstream stream,
                Runtime& runtime = Runtime::global());

}  // namespace kjit::mla
