#pragma once
/// \file ops/rotary.hpp
/// Rotary position embedding (RoPE), fused cos/sin lookup and rotation, as in the astrai seed's
/// `rotary_emb` and Su et al., "RoFormer" (arXiv:2104.09864), eq. 34:
///   for pair (x0, x1) of dimension pair i at position p:
///     y0 = x0 * cos[p, i] - x1 * sin[p, i]
///     y1 = x1 * cos[p, i] + x0 * sin[p, i]
/// NeoX pairing takes x0 = x[i], x1 = x[i + rotary_dim/2]; GPT-J pairing takes x0 = x[2i],
/// x1 = x[2i + 1]. Dimensions at or past rotary_dim pass through unchanged.

#include <kjit/runtime.hpp>
#include <kjit/tensor.hpp>

#include <cuda.h>

namespace kjit {

/// How rotary dimensions are paired.
enum class RotaryStyle {
  kNeoX,  ///< half-split: (i, i + rotary_dim/2)  (GPT-NeoX, Llama)
  kGPTJ,  ///< interleaved: (2i, 2i + 1)          (GPT-J)
};

/// Arguments of kjit::rotary. All tensors on one CUDA device.
struct RotaryArgs {
  /// [tokens, q_heads, head_dim] bf16; any token/head strides, the last dim contiguous, rows
  /// aligned to 4 bytes.
  TensorRef q;
  /// [tokens, kv_heads, head_dim] bf16, same rules; ndim == 0 for none.
  TensorRef k;
  /// [max_position, rotary_dim / 2] f32, contiguous.
  TensorRef cos;
  /// [max_position, rotary_dim / 2] f32, contiguous.
  TensorRef sin;
  /// [tokens] int32 or int64, each in [0, max_position).
  TensorRef positions;
  /// Outputs shaped like q / k; ndim == 0 means in place.
  TensorRef q_out;
  TensorRef k_out;
  /// Even, 2 ≤ rotary_dim ≤ head_dim; 0 means head_dim.
  int rotary_dim = 0;
  RotaryStyle style = RotaryStyle::kNeoX;
};

/// Applies RoPE to q (and k) on `stream`. Never allocates or synchronizes (graph-capturable).
/// Throws InvalidArgument naming the tensor and the rule it broke (shape, dtype, stride,
/// alignment, device), Unsupported below sm_80, DriverError for driver failures.
/// A position outside [0, max_position) is not checked on the device (it would need a sync).
void rotary(const RotaryArgs& args, CUstream stream, Runtime& runtime = Runtime::global());

}  // namespace kjit
