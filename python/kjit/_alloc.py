"""Output allocation for tensors whose framework lacks the DLPack C exchange API (the C++ side
calls empty() through kjit._C): a new, uninitialized tensor on `like`'s device, in `like`'s
framework. Dtypes a framework does not have are replaced by one of the same width holding the
bits (bf16 → uint16, fp8 → uint8); kjit reads them as the dtype asked for. NumPy always gets the
stand-in: its __dlpack__ refuses extension dtypes (ml_dtypes.bfloat16), and a NumPy output only
ever reaches kjit's "must be on a CUDA device" rule anyway.
"""
from __future__ import annotations

from ._C import InvalidArgument

_WIDTH_STANDIN = {"bf16": "uint16", "f16": "float16", "f32": "float32", "f64": "float64", "i32": "int32",
                  "i64": "int64", "u8": "uint8", "bool": "bool", "e4m3": "uint8", "e5m2": "uint8"}
_JAX_NAMES = {"bf16": "bfloat16", "e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2"}


def empty(like, shape, dtype: str):
    module = type(like).__module__.split(".")[0]
    if module == "torch":
        import torch
        names = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32, "f64": torch.float64,
                 "i32": torch.int32, "i64": torch.int64, "u8": torch.uint8, "bool": torch.bool,
                 "e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
        return torch.empty(shape, dtype=names[dtype], device=like.device)
    if module == "cupy":
        import cupy
        with cupy.cuda.Device(like.device.id):
            return cupy.empty(shape, dtype=_WIDTH_STANDIN[dtype])
    if module in ("jax", "jaxlib"):
        import jax.numpy as jnp
        device = next(iter(like.devices()))
        return jnp.empty(shape, dtype=getattr(jnp, _JAX_NAMES.get(dtype, _WIDTH_STANDIN[dtype])), device=device)
    if module == "numpy":
        import numpy
        return numpy.empty(shape, dtype=_WIDTH_STANDIN[dtype])
    raise InvalidArgument(f"kjit cannot allocate an output like a {type(like).__module__}.{type(like).__name__}: "
                          f"pass the output tensor in (out=, y=, d=, ...)")
