#pragma once
/// \file ops/rotary.hpp
/// Rotary position embedding (RoPE), fused cos/sin lookup and rotation: one pass gathers each
/// token's cos/sin rows by position and rotates q and k (Su et al., "RoFormer",
/// arXiv:2104.09864, eq. 34):
///   for pair (x0, x1) of dimension pair i at position p = positions[t]:
///     y0 = x0 * cos[p, i] - x1 * sin[p, i]
///     y1 = x1 * cos[p, i] + x0 * sin[p, i]
/// NeoX pairing takes x0 = x[i], x1 = x[i + rotary_dim/2]; GPT-J pairing takes x0 = x[2i],
/// x1 = x[2i + 1]; i ∈ [0, rotary_dim/2). Dimensions at or past rotary_dim pass through
/// unchanged: untouched in place, copied bit for bit out of place.
///
/// Precision: computed in f32 from the exact bf16 inputs and f32 tables, with the products split
/// exactly (FMA-based TwoProduct) so that cancellation between them loses nothing, then rounded
/// once to bf16 (nearest even). Every output is within 1 bf16 ulp of the float64 result (the
/// correctly rounded value except at near-ties). A bf16 implementation that rounds the products
/// before adding them (PyTorch's complex-multiply formulation in bf16, say) is no more accurate
/// and usually differs from kjit's in the last bit.
///
/// Kernels (kernel_sources/rotary/rotary.cu): a vector kernel moves 16-byte chunks (8 bf16) and
/// reads each (token, chunk)'s cos/sin as float4s once for 4 heads; it runs when rotary_dim is a
/// multiple of 16 and every q/k/q_out/k_out data pointer, token stride and head stride (of dims
/// longer than 1), and the cos/sin pointers, are 16-byte aligned. Anything else (e.g.
/// rotary_dim = 40, or a view starting at an odd element) runs a scalar kernel: every valid
/// input is handled, never with a misaligned access, only slower.
/// Supported from sm_80 (Ampere) on; head_dim ∈ {32, 64, 80, 96, 128, 160, 192, 256, 512}.

#include <kjit/names.hpp>
#include <kjit/runtime.hpp>
#include <kjit/tensor.hpp>

#include <cuda.h>

namespace kjit {

/// How rotary dimensions are paired.
enum class RotaryStyle {
  kNeoX,  ///< half-split: (i, i + rotary_dim/2)  (GPT-NeoX, Llama)
  kGPTJ,  ///< interleaved: (2i, 2i + 1)          (GPT-J)
};

/// RotaryStyle's names, in enumerator order (kjit/names.hpp): the rotary family's `style`
/// values, and kjit.ROTARY_STYLES in Python.
inline constexpr EnumName<RotaryStyle> kRotaryStyleNames[] = {{RotaryStyle::kNeoX, "neox"},
                                                              {RotaryStyle::kGPTJ, "gptj"}};

/// Arguments of kjit::rotary. All tensors on one CUDA device (q's).
struct RotaryArgs {
  /// [tokens, q_heads, head_dim] bf16; any token/head strides (e.g. a view into a fused qkv
  /// buffer), the last dim contiguous, 2-byte aligned (16-byte aligned rows take the fast path).
  TensorRef q;
  /// [tokens, kv_heads, head_dim] bf16, same rules; ndim == 0 for none.
  TensorRef k;
  /// [max_position, rotary_dim / 2] f32, contiguous, max_position ≥ 1.
  TensorRef cos;
  /// [max_position, rotary_dim / 2] f32, contiguous, the shape of cos.
  TensorRef sin;
  /// [tokens] int32 or int64, contiguous, each in [0, max_position) (not checked on the device).
  TensorRef positions;
  /// Outputs shaped like q / k (any strides, last dim contiguous). Both absent (ndim == 0): in
  /// place. Out of place: q_out, and k_out when k is given; outputs must not overlap the inputs
  /// or each other (an output equal to its input, same pointer and strides, is in place).
  TensorRef q_out;
  TensorRef k_out;
  /// Even, 2 ≤ rotary_dim ≤ head_dim; 0 means head_dim.
  int rotary_dim = 0;
  RotaryStyle style = RotaryStyle::kNeoX;
};

/// Applies RoPE to q (and k) on `stream`. Never allocates or synchronizes (graph-capturable);
/// no tokens (or no heads) launches nothing. Throws InvalidArgument naming the tensor and the
/// rule it broke (rank, dtype, shape, stride, alignment, device, rotary_dim, head_dim) before any
/// driver call, Unsupported below sm_80, DriverError for driver failures.
/// A position outside [0, max_position) is not checked on the device (it would need a sync) and
/// reads outside the tables.
void rotary(const RotaryArgs& args, CUstream stream, Runtime& runtime = Runtime::global());

}  // namespace kjit
