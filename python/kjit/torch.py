"""kjit's ops as PyTorch library ops (torch.ops.kjit.*), so that torch.compile(fullgraph=True)
traces a model that calls them (each has a fake implementation giving the output shapes) and
CUDA graphs capture them. Importing this module imports torch; `import kjit` never does.

Registration path: torch.library.Library(...).define + impl("CUDA") + register_fake. It costs
less per eager call than torch.library.custom_op (which wraps every call in Python-side
autograd/schema handling; tools/bench/bench_python.py measures all three: the direct kjit call,
this path, and a custom_op wrapper). Under torch.compile or a CUDA graph the dispatch cost leaves
the hot path either way. The direct API (kjit.rotary, kjit.attention.decode, ...) stays the
fastest eager path and takes torch tensors as they are.

Ops (tensors are torch tensors; the CUDA kernel runs on torch's current stream):
    torch.ops.kjit.rotary_(q, cos, sin, positions, k=None, rotary_dim=0, style="neox")   in place
    torch.ops.kjit.decode(q, k, v, kv_lens=None, mask=None, scale=0.0, num_splits=0) -> out
    torch.ops.kjit.decode_lse(...) -> (out, lse)
    torch.ops.kjit.paged_decode(q, k_pages, v_pages, indptr, page_indices, last_page_len,
                                scale=0.0, num_splits=0, kv_len_hint=0) -> out
    torch.ops.kjit.prefill(q, k, v, kv_lens=None, mask=None, causal=False, scale=0.0) -> out
    torch.ops.kjit.append_paged_kv_(k, v, k_pages, v_pages, indptr, page_indices,
                                    last_page_len, append_indptr)     writes k_pages / v_pages
    torch.ops.kjit.swa_decode(q, kv_cache, inv_scale, indices, lens, scale=0.0) -> out
    torch.ops.kjit.fp8_quantize(x, format="e4m3", granularity="tensor") -> (y, scale_inv)
    torch.ops.kjit.fp8_gemm(a, b, scale_a, scale_b, bias=None, out_dtype=torch.bfloat16) -> d
The same names are attributes of this module (kjit.torch.decode is torch.ops.kjit.decode).
"""
from __future__ import annotations

import torch

from . import _C

_LIB = torch.library.Library("kjit", "DEF")

_DEFS = {
    "rotary_": "rotary_(Tensor(a!) q, Tensor cos, Tensor sin, Tensor positions, Tensor(b!)? k=None, "
               "int rotary_dim=0, str style='neox') -> ()",
    "decode": "decode(Tensor q, Tensor k, Tensor v, Tensor? kv_lens=None, Tensor? mask=None, float scale=0.0, "
              "int num_splits=0) -> Tensor",
    "decode_lse": "decode_lse(Tensor q, Tensor k, Tensor v, Tensor? kv_lens=None, Tensor? mask=None, "
                  "float scale=0.0, int num_splits=0) -> (Tensor, Tensor)",
    "paged_decode": "paged_decode(Tensor q, Tensor k_pages, Tensor v_pages, Tensor indptr, Tensor page_indices, "
                    "Tensor last_page_len, float scale=0.0, int num_splits=0, int kv_len_hint=0) -> Tensor",
    "prefill": "prefill(Tensor q, Tensor k, Tensor v, Tensor? kv_lens=None, Tensor? mask=None, bool causal=False, "
               "float scale=0.0) -> Tensor",
    "append_paged_kv_": "append_paged_kv_(Tensor k, Tensor v, Tensor(a!) k_pages, Tensor(b!) v_pages, "
                        "Tensor indptr, Tensor page_indices, Tensor last_page_len, Tensor append_indptr) -> ()",
    "swa_decode": "swa_decode(Tensor q, Tensor kv_cache, Tensor inv_scale, Tensor indices, Tensor lens, "
                  "float scale=0.0) -> Tensor",
    "fp8_quantize": "fp8_quantize(Tensor x, str format='e4m3', str granularity='tensor') -> (Tensor, Tensor)",
    "fp8_gemm": "fp8_gemm(Tensor a, Tensor b, Tensor scale_a, Tensor scale_b, Tensor? bias=None, "
                "ScalarType out_dtype=bfloat16) -> Tensor",
}
for _schema in _DEFS.values():
    _LIB.define(_schema)


def _impl(name):
    def register(fn):
        _LIB.impl(name, fn, "CUDA")
        return fn
    return register


def _fake(name):
    return torch.library.register_fake(f"kjit::{name}")


# ---- CUDA implementations: the direct kjit calls -------------------------------------------------

@_impl("rotary_")
def _rotary(q, cos, sin, positions, k=None, rotary_dim=0, style="neox"):
    _C.rotary(q, cos, sin, positions, k, rotary_dim=rotary_dim, style=style)


@_impl("decode")
def _decode(q, k, v, kv_lens=None, mask=None, scale=0.0, num_splits=0):
    return _C.attention_decode(q, k, v, kv_lens, mask=mask, scale=scale, num_splits=num_splits)


@_impl("decode_lse")
def _decode_lse(q, k, v, kv_lens=None, mask=None, scale=0.0, num_splits=0):
    return _C.attention_decode(q, k, v, kv_lens, mask=mask, scale=scale, num_splits=num_splits, return_lse=True)


@_impl("paged_decode")
def _paged_decode(q, k_pages, v_pages, indptr, page_indices, last_page_len, scale=0.0, num_splits=0, kv_len_hint=0):
    return _C.attention_paged_decode(q, k_pages, v_pages, indptr, page_indices, last_page_len, scale=scale,
                                     num_splits=num_splits, kv_len_hint=kv_len_hint)


@_impl("prefill")
def _prefill(q, k, v, kv_lens=None, mask=None, causal=False, scale=0.0):
    return _C.attention_prefill(q, k, v, kv_lens=kv_lens, mask=mask, causal=causal, scale=scale)


@_impl("append_paged_kv_")
def _append(k, v, k_pages, v_pages, indptr, page_indices, last_page_len, append_indptr):
    _C.attention_append_paged_kv(k, v, k_pages, v_pages, indptr, page_indices, last_page_len,
                                 append_indptr=append_indptr)


@_impl("swa_decode")
def _swa(q, kv_cache, inv_scale, indices, lens, scale=0.0):
    return _C.mla_swa_decode(q, kv_cache, inv_scale, indices, lens, scale=scale)


@_impl("fp8_quantize")
def _quantize(x, format="e4m3", granularity="tensor"):
    y, scale_inv, _ = _C.fp8_quantize(x, format=format, granularity=granularity, dynamic=granularity == "tensor")
    return y, scale_inv


@_impl("fp8_gemm")
def _gemm(a, b, scale_a, scale_b, bias=None, out_dtype=torch.bfloat16):
    return _C.fp8_gemm(a, b, scale_a, scale_b, bias=bias, out_dtype=str(out_dtype))


# ---- fake (meta) implementations: output shapes only ---------------------------------------------

@_fake("rotary_")
def _rotary_fake(q, cos, sin, positions, k=None, rotary_dim=0, style="neox"):
    return None


@_fake("decode")
def _decode_fake(q, k, v, kv_lens=None, mask=None, scale=0.0, num_splits=0):
    return torch.empty_like(q)


@_fake("decode_lse")
def _decode_lse_fake(q, k, v, kv_lens=None, mask=None, scale=0.0, num_splits=0):
    return torch.empty_like(q), q.new_empty((q.shape[0], q.shape[2]), dtype=torch.float32)


@_fake("paged_decode")
def _paged_decode_fake(q, k_pages, v_pages, indptr, page_indices, last_page_len, scale=0.0, num_splits=0,
                       kv_len_hint=0):
    return torch.empty_like(q)


@_fake("prefill")
def _prefill_fake(q, k, v, kv_lens=None, mask=None, causal=False, scale=0.0):
    return torch.empty_like(q)


@_fake("append_paged_kv_")
def _append_fake(k, v, k_pages, v_pages, indptr, page_indices, last_page_len, append_indptr):
    return None


@_fake("swa_decode")
def _swa_fake(q, kv_cache, inv_scale, indices, lens, scale=0.0):
    return torch.empty_like(q)


_FP8 = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}


@_fake("fp8_quantize")
def _quantize_fake(x, format="e4m3", granularity="tensor"):
    rows, cols = x.shape
    scales = _C.fp8_scale_shape(granularity, rows, cols)
    return x.new_empty(x.shape, dtype=_FP8[format]), x.new_empty(scales, dtype=torch.float32)


@_fake("fp8_gemm")
def _gemm_fake(a, b, scale_a, scale_b, bias=None, out_dtype=torch.bfloat16):
    return a.new_empty((a.shape[0], b.shape[0]), dtype=out_dtype)


_OPS = torch.ops.kjit
rotary_ = _OPS.rotary_
decode = _OPS.decode
decode_lse = _OPS.decode_lse
paged_decode = _OPS.paged_decode
prefill = _OPS.prefill
append_paged_kv_ = _OPS.append_paged_kv_
swa_decode = _OPS.swa_decode
fp8_quantize = _OPS.fp8_quantize
fp8_gemm = _OPS.fp8_gemm

__all__ = ["append_paged_kv_", "decode", "decode_lse", "fp8_gemm", "fp8_quantize", "paged_decode", "prefill",
           "rotary_", "swa_decode"]
