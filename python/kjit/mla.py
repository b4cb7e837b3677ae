"""MLA sliding-window fp8 decode (kjit/ops/swa_decode.hpp).

swa_decode(q, kv_cache, inv_scale, indices, lens, *, out, lse, return_lse, scale, num_splits,
           head_group, workspace, stream)
    q/out [T, NH, {head_dim}] bf16, kv_cache [blocks, block_size, {head_dim}] u8/e4m3/e5m2,
    inv_scale [slots, 1] bf16, indices [T, W] i64 (W one of {windows}), lens [T] i64/i32;
    head_group 0 (auto) or one of {groups}; returns out, or (out, lse [T, NH] f32)
"""
from ._C import family_values
from ._C import mla_swa_decode as swa_decode

# The sizes the docstring lists are the family declaration's (the one place they are written).
if __doc__:  # None under python -OO
    __doc__ = __doc__.format(head_dim=family_values("mla.swa_decode", "head_dim")[0],
                             windows=", ".join(family_values("mla.swa_decode", "window")),
                             groups=", ".join(family_values("mla.swa_decode", "group")))

__all__ = ["swa_decode"]
