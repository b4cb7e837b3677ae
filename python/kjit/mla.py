"""MLA sliding-window fp8 decode (kjit/ops/swa_decode.hpp).

swa_decode(q, kv_cache, inv_scale, indices, lens, *, out, lse, return_lse, scale, num_splits,
           head_group, workspace, stream)
    q/out [T, NH, 512] bf16, kv_cache [blocks, block_size, 512] u8/e4m3/e5m2, inv_scale [slots, 1]
    bf16, indices [T, W] i64, lens [T] i64/i32; returns out, or (out, lse [T, NH] f32)
"""
from ._C import mla_swa_decode as swa_decode

__all__ = ["swa_decode"]
