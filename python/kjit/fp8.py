"""FP8 quantization, GEMM and linear layer (kjit/ops/fp8.hpp), sm_89+.

quantize(x, *, y=None, format="e4m3", granularity="tensor", dynamic=False, multiplier=None,
         amax=None, scale_inv=None, pow2_scale=False, stream=None) -> (y, scale_inv, amax)
    x [rows, cols] bf16/f16/f32; format {formats};
    granularity {granularities};
    multiplier: a float or a [1] f32 device tensor; amax is None unless given or dynamic per-tensor.
gemm(a, b, scale_a, scale_b, *, d=None, out_dtype="bf16", bias=None, scale_mode="tensorwise",
     kernel="auto", tile="auto", stages=0, splits=0, multicast=0, b_constant=False, fp8_format="e4m3",
     stream=None) -> d
    scale_mode {scale_modes}; kernel {kernels};
    tile {tiles}
    D = (A · Bᵀ) · scales (+ bias); a [M, K], b [N, K] fp8 (uint8 tensors are read as fp8_format).
    multicast (wgmma, persistent): 0 plan, 1 none, 2 CTA pairs on adjacent tile rows sharing b's
    tile, 3 CTA pairs on adjacent tile columns sharing a's tile (forced only).
    b_constant=True: b (a weight) is written by no earlier work on the stream that may still be
    running; on sm_90 the kernel (launched with programmatic dependent launch) then loads its
    first stages of b before waiting for the previous kernel. Runs on the current stream, so it
    can be captured in a CUDA graph (after one call outside the capture has compiled it).
Linear(weight, *, max_tokens, recipe="delayed", weight_granularity="row", activation_format="e4m3",
       weight_format="e4m3", history_len=16, margin=0, stream=None).forward(x, *, y, bias, out_dtype, stream)
    recipe {recipes}

Frameworks without FP8 dtypes (NumPy, CuPy) get uint8 outputs holding the format's bits.
FORMATS, GRANULARITIES, SCALE_MODES, GEMM_KERNELS, GEMM_TILES, RECIPES: the names each argument
above takes, as tuples.
"""
from ._C import Linear
from ._C import fp8_formats as FORMATS
from ._C import fp8_gemm as gemm
from ._C import fp8_gemm_kernels as GEMM_KERNELS
from ._C import fp8_gemm_tiles as GEMM_TILES
from ._C import fp8_granularities as GRANULARITIES
from ._C import fp8_quantize as quantize
from ._C import fp8_recipes as RECIPES
from ._C import fp8_scale_modes as SCALE_MODES
from ._names import fill_doc

# The choices the docstring lists are the C++ name tables' (the one place they are written).
__doc__ = fill_doc(__doc__, formats=FORMATS, granularities=GRANULARITIES, scale_modes=SCALE_MODES,
                   kernels=GEMM_KERNELS, tiles=GEMM_TILES, recipes=RECIPES)

__all__ = ["FORMATS", "GEMM_KERNELS", "GEMM_TILES", "GRANULARITIES", "Linear", "RECIPES", "SCALE_MODES", "gemm",
           "quantize"]
