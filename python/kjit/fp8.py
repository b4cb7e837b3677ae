"""FP8 quantization, GEMM and linear layer (kjit/ops/fp8.hpp), sm_89+.

quantize(x, *, y=None, format="e4m3", granularity="tensor", dynamic=False, multiplier=None,
         amax=None, scale_inv=None, pow2_scale=False, stream=None) -> (y, scale_inv, amax)
    x [rows, cols] bf16/f16/f32; granularity {granularities};
    multiplier: a float or a [1] f32 device tensor; amax is None unless given or dynamic per-tensor.
gemm(a, b, scale_a, scale_b, *, d=None, out_dtype="bf16", bias=None, scale_mode="tensorwise",
     kernel="auto", tile="auto", stages=0, splits=0, multicast=0, b_constant=False, fp8_format="e4m3",
     stream=None) -> d
    tile "auto" | {tiles}
    D = (A · Bᵀ) · scales (+ bias); a [M, K], b [N, K] fp8 (uint8 tensors are read as fp8_format).
    b_constant=True: b (a weight) is written by no earlier work on the stream that may still be
    running; on sm_90 the kernel (launched with programmatic dependent launch) then loads its
    first stages of b before waiting for the previous kernel. Runs on the current stream, so it
    can be captured in a CUDA graph (after one call outside the capture has compiled it).
Linear(weight, *, max_tokens, recipe="delayed", weight_granularity="row", activation_format="e4m3",
       weight_format="e4m3", history_len=16, margin=0, stream=None).forward(x, *, y, bias, out_dtype, stream)

Frameworks without FP8 dtypes (NumPy, CuPy) get uint8 outputs holding the format's bits.
"""
from ._C import Linear, family_values
from ._C import fp8_gemm as gemm
from ._C import fp8_quantize as quantize

# The choices the docstring lists are the family declarations' (the one place they are written).
if __doc__:  # None under python -OO
    __doc__ = __doc__.format(
        granularities=" | ".join(f'"{v}"' for v in family_values("fp8.quantize", "granularity")),
        tiles=" | ".join(f'"{v}"' for v in family_values("fp8.gemm", "tile")))

__all__ = ["Linear", "gemm", "quantize"]
