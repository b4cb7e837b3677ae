"""MLA sliding-window fp8 decode (kjit/ops/swa_decode.hpp).

swa_decode(q, kv_cache, inv_scale, indices, lens, *, out, lse, return_lse, scale, num_splits,
           head_group, cluster_split, workspace, stream)
    q/out [T, NH, {head_dim}] bf16, kv_cache [blocks, block_size, {head_dim}] u8/e4m3/e5m2,
    inv_scale [slots, 1] bf16, indices [T, W] i64 (W one of {windows}), lens [T] i64/i32;
    head_group 0 (auto) or one of {groups}; cluster_split 0 (auto) or one of {clusters} (CTAs of
    one thread-block cluster that split each window, sm_90+; 1 = none); returns out, or
    (out, lse [T, NH] f32)
swa_decode_plan(q, kv_cache, inv_scale, indices, lens, *, num_splits=0, head_group=0,
                cluster_split=0) -> SwaDecodePlan
    how swa_decode runs this call: the device's tuned plan (`kjit tune swa_decode`) where one
    applies (never to a call that requests num_splits, head_group or cluster_split), else the
    built-in rule, which clamps a requested split count to what the window allows (several
    requests can give one plan). Validates as swa_decode does and reads the device's SM count,
    compute capability and shared memory.
"""
from typing import NamedTuple

from . import _C
from ._C import family_values
from ._C import mla_swa_decode as swa_decode

# The sizes the docstring lists are the family declaration's (the one place they are written).
if __doc__:  # None under python -OO
    __doc__ = __doc__.format(head_dim=family_values("mla.swa_decode", "head_dim")[0],
                             windows=", ".join(family_values("mla.swa_decode", "window")),
                             groups=", ".join(family_values("mla.swa_decode", "group")),
                             clusters=", ".join(family_values("mla.swa_decode", "cluster_split")))


class SwaDecodePlan(NamedTuple):
    """A swa_decode plan: heads per CTA (the family's `group`; 64 = the sm_90a wgmma kernel), the
    family's `kv_tile`, CTAs per (token, head group) along the window merged by a second kernel
    (num_splits) or inside one thread-block cluster (the family's `cluster_split`), the window
    positions of each, decode-kernel CTAs, kernel launches (2 when a merge follows the split),
    and the workspace bytes the call needs."""
    head_group: int
    kv_tile: int
    num_splits: int
    cluster_split: int
    split_len: int
    ctas: int
    launches: int
    workspace_bytes: int


def swa_decode_plan(q, kv_cache, inv_scale, indices, lens, *, num_splits=0, head_group=0, cluster_split=0):
    """How swa_decode runs this call with these requests (see the module doc): a SwaDecodePlan."""
    return SwaDecodePlan(*_C.mla_swa_decode_plan(q, kv_cache, inv_scale, indices, lens, num_splits=num_splits,
                                                 head_group=head_group, cluster_split=cluster_split))

__all__ = ["SwaDecodePlan", "swa_decode", "swa_decode_plan"]
