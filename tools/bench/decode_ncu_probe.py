#!/usr/bin/env python3
"""Probe (a diagnostic, not a published benchmark): kjit's contiguous decode beside its paged
decode at pages of 1, 16 and 64 as Nsight Compute sees them, on bench_attention.py's paged-decode
shape (B16, 32 query heads, 8 KV heads, head_dim 128, 4096 keys; the pages a random permutation
of the pool), one call each.

Run under `ncu --profile-from-start off --clock-control none --csv --metrics <list> python3
decode_ncu_probe.py`: every call is made once before the profiled region, and the script prints
the order of the profiled calls (a split plan's merge kernel follows its decode kernel). With
--time it runs no profiler and prints each call's CUDA-graph time in µs instead.

Usage: decode_ncu_probe.py [--seed N] [--time] [--splits S]
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import arg_parser, profile_calls, require_gpu, seeded_generator  # noqa: E402  (first)
import bench_attention as ba  # noqa: E402
import torch  # noqa: E402

ap = arg_parser(__doc__)
ap.add_argument("--time", action="store_true", help="print CUDA-graph times instead of one call each")
ap.add_argument("--splits", type=int, default=0, help="force the paged decode's split count (0: the planner's)")
args = ap.parse_args()
require_gpu()
gen, _ = seeded_generator(args)
kj = ba.Kjit()
B, Hq, Hkv, D, L = ba.DECODE_SHAPE
q = torch.randn(B, 1, Hq, D, device="cuda", dtype=torch.bfloat16, generator=gen)
k = torch.randn(B, L, Hkv, D, device="cuda", dtype=torch.bfloat16, generator=gen)
v = torch.randn(B, L, Hkv, D, device="cuda", dtype=torch.bfloat16, generator=gen)
lens = torch.full((B,), L, device="cuda", dtype=torch.int32)
out = torch.empty_like(q)
ws = kj.decode_workspace(q, k, v)
calls = [("contiguous", lambda: kj.decode(q, k, v, lens, out, ws))]
for ps in ba.PAGE_SIZES:
    cache = ba.PagedCache(k, v, [L] * B, ps, gen, spare=0)
    pws = kj.paged_decode_workspace(q, cache, splits=args.splits)
    calls.append((f"paged page {ps}", lambda cache=cache, pws=pws:
                  kj.paged_decode(q, cache, out, pws, splits=args.splits)))
profile_calls(calls, args.time)
