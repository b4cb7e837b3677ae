#!/usr/bin/env python3
"""Probe (a diagnostic, not a published benchmark): the fused FP8 SWA MLA decode as Nsight Compute
sees it, one call per (T, plan) on bench_swa.py's workload (128 heads, latent 512, window 128,
a 512 MiB paged E4M3 cache, random window slots).

Run under `ncu --profile-from-start off --clock-control none --csv --metrics <list> python3
swa_ncu_probe.py`: every call is made once before the profiled region (compiles, loads), and the
script prints the order of the profiled calls, which is the order of the kernels in ncu's report.
With --time it runs no profiler and prints each call's CUDA-graph time in µs instead.

Usage: swa_ncu_probe.py [--seed N] [--time] [--tokens T ...] [--groups G ...] [--clusters C ...]
"""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import arg_parser, profile_calls, require_gpu, seeded_generator  # noqa: E402  (first)
import bench_swa as bs  # noqa: E402
import torch  # noqa: E402

ap = arg_parser(__doc__)
ap.add_argument("--time", action="store_true", help="print CUDA-graph times instead of one call each")
ap.add_argument("--tokens", type=int, nargs="*", default=[1, 64, 512])
ap.add_argument("--groups", type=int, nargs="*", default=[0],
                help="head groups to force (0: the planner's); one call per (T, group, cluster)")
ap.add_argument("--clusters", type=int, nargs="*", default=[0],
                help="cluster splits to force (0: the planner's, 1: none; 2, 4, 8 need sm_90+)")
args = ap.parse_args()
require_gpu()
gen, _ = seeded_generator(args)
kj = bs.Kjit()
kv, inv_scale = bs.make_cache(gen)
calls = []
for T in args.tokens:
    q, indices, lens = bs.make_tokens(T, gen)
    out = torch.empty_like(q)
    for g in args.groups:
        for c in args.clusters:
            plan = kj.plan(q, kv, inv_scale, indices, lens, group=g, cluster=c)
            name = f"T{T} g{plan.head_group} s{plan.num_splits} c{plan.cluster_split} ctas {plan.ctas}"
            calls.append((name, lambda q=q, indices=indices, lens=lens, out=out, g=g, c=c:
                          kj.decode(q, kv, inv_scale, indices, lens, out, scale=1.0 / math.sqrt(bs.HD), group=g,
                                    cluster=c)))
profile_calls(calls, args.time)
