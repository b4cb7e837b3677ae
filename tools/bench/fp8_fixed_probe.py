#!/usr/bin/env python3
"""Probe: where the small-M FP8 GEMM's time goes (a diagnostic, not a published benchmark).

At M = 1 it times cuBLASLt (M padded to 16) and kjit at N = 7168 over K = 128, 512, 2048 and at
N·K = 4096·7168 (the intercept is the fixed cost, the slope the streaming rate), kjit's 128x16
tile forced to 2, 4, 8 and 12 stages with 1 and 2 split-K slices, and a one-element torch kernel
as the timing floor, all through bench_fp8's do_bench protocol (L2 flushed before each call).

Usage: fp8_fixed_probe.py
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import require_gpu  # noqa: E402  (first: a plain message without torch or kjit)
import bench_fp8 as b  # noqa: E402
import torch  # noqa: E402

argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
require_gpu()
kj = b.Kjit()
dev = "cuda"
x = torch.zeros(1, device=dev)
print(f"floor (1-element add): {b.bench(lambda: x.add_(1)) * 1e3:.1f} us")
for n, k in ((7168, 128), (7168, 512), (7168, 2048), (4096, 7168)):
    a = b.random_e4m3((1, k), dev)
    w = b.random_e4m3((n, k), dev)
    sa = torch.tensor([0.01], device=dev)
    sb = torch.tensor([0.01], device=dev)
    d = torch.empty(1, n, device=dev, dtype=torch.bfloat16)
    a16 = torch.zeros(16, k, device=dev, dtype=torch.float8_e4m3fn)
    a16[:1] = a
    wt = w.t()
    row = [f"N{n} K{k}: cuBLASLt(M16) {b.bench(lambda: b.scaled_mm(a16, wt, sa, sb)) * 1e3:.1f}"]
    row.append(f"kjit {b.bench(lambda: kj.gemm(a, w, d, sa, sb)) * 1e3:.1f}")
    for st in (2, 4, 8, 12):
        for sp in (1, 2):
            if sp > (k + 127) // 128:
                continue
            us = b.bench(lambda: kj.gemm(a, w, d, sa, sb, kernel="wgmma", tile="128x16", stages=st, splits=sp)) * 1e3
            row.append(f"s{st}/split{sp} {us:.1f}")
    print(", ".join(row) + " us")
