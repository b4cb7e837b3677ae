#!/usr/bin/env python3
"""Probe (a diagnostic, not a published benchmark): the small-M FP8 GEMM's kernels as Nsight
Compute sees them, kjit's beside cuBLASLt's.

One call per case, meant to run under
  ncu --profile-from-start off --clock-control none --cache-control all --csv --metrics <list> \
    python3 fp8_ncu_probe.py
(every call is made once before the profiled region: compiles and warm-up are not profiled) so that each kernel's duration is measured alone, from a flushed L2, and its launch shape (grid,
cluster, registers, shared memory) and DRAM traffic are read from the counters. The script prints
the order of its calls, which is the order of the kernels in ncu's report.

Usage: fp8_ncu_probe.py [--only SUBSTRING]... [--shapes NxK,...] [--m 1,16,...] [--no-splits] [--pairs]
       [--a-pairs]
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import profile_calls, require_gpu  # noqa: E402  (first: a plain message without torch or kjit)
import bench_fp8 as b  # noqa: E402
import torch  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--only", action="append", default=[], help="run only the cases whose name contains this")
parser.add_argument("--shapes", default="7168x2048,4096x7168", help="comma-separated NxK (the weight)")
parser.add_argument("--m", default="1,16,64,128,256", help="comma-separated M values")
parser.add_argument("--no-splits", action="store_true", help="skip the forced split-K cases at M = 1")
parser.add_argument("--pairs", action="store_true", help="add 128x128 with CTA pairs sharing B (multicast) at M > 64")
parser.add_argument("--a-pairs", action="store_true",
                    help="add 128x128 with CTA pairs sharing A (multicast 3: adjacent n-tiles) at M > 64")
args = parser.parse_args()
require_gpu()
kj = b.Kjit()
dev = "cuda"
calls = []
shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
m_values = [int(v) for v in args.m.split(",")]
for n, k in shapes:
    w = b.random_e4m3((n, k), dev)
    wt = w.t()
    sb = torch.tensor([0.01], device=dev)
    for m in m_values:
        a = b.random_e4m3((max(m, 16), k), dev)
        sa = torch.tensor([0.01], device=dev)
        d = torch.empty(m, n, device=dev, dtype=torch.bfloat16)
        calls.append((f"cublaslt M{max(m, 16)} N{n} K{k}", lambda a=a, wt=wt, sa=sa, sb=sb: b.scaled_mm(a, wt, sa, sb)))
        calls.append((f"kjit M{m} N{n} K{k}", lambda a=a[:m], w=w, d=d, sa=sa, sb=sb: kj.gemm(a, w, d, sa, sb)))
        if m > 64 and args.pairs:
            calls.append((f"kjit M{m} N{n} K{k} 128x128 pairs",
                          lambda a=a[:m], w=w, d=d, sa=sa, sb=sb:
                          kj.gemm(a, w, d, sa, sb, kernel="wgmma", tile="128x128", multicast=2)))
        if m > 64 and args.a_pairs:
            calls.append((f"kjit M{m} N{n} K{k} 128x128 a-pairs",
                          lambda a=a[:m], w=w, d=d, sa=sa, sb=sb:
                          kj.gemm(a, w, d, sa, sb, kernel="wgmma", tile="128x128", multicast=3)))
        if m == 1 and not args.no_splits:
            for sp in (2, 3):
                calls.append((f"kjit M1 N{n} K{k} 128x16 s8 split{sp}",
                              lambda a=a[:1], w=w, d=d, sa=sa, sb=sb, sp=sp:
                              kj.gemm(a, w, d, sa, sb, kernel="wgmma", tile="128x16", stages=8, splits=sp)))
calls = [c for c in calls if not args.only or any(o in c[0] for o in args.only)]
profile_calls(calls)
