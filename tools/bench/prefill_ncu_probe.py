#!/usr/bin/env python3
"""Probe (a diagnostic, not a published benchmark): the Hopper prefill kernel and cuDNN's as
Nsight Compute sees them, one call each per shape of the published prefill rows.

Run under `ncu --profile-from-start off --clock-control none --csv --metrics <list> python3
prefill_ncu_probe.py` (the calls are made once before the profiled region); the
script prints the order of its calls, which is the order of the kernels in ncu's report. With
--time it runs no profiler and prints each call's CUDA-graph time in µs instead.

Usage: prefill_ncu_probe.py [--seed N] [--time]
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import arg_parser, profile_calls, require_gpu, seeded_generator  # noqa: E402  (first)
import bench_attention as ba  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

ap = arg_parser(__doc__)
ap.add_argument("--time", action="store_true", help="print CUDA-graph times instead of one call each")
args = ap.parse_args()
require_gpu()
kj = ba.Kjit()
gen, _ = seeded_generator(args)
calls = []
for B, H, L, D, causal in ((4, 32, 4096, 128, False), (4, 32, 4096, 128, True), (1, 32, 8192, 128, True),
                            (8, 16, 2048, 64, True)):
    q, k, v = (torch.randn(B, L, H, D, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(3))
    out = torch.empty_like(q)
    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    shape = f"B{B} H{H} L{L} D{D} {'causal' if causal else 'full'}"

    def cudnn(qt=qt, kt=kt, vt=vt, causal=causal):
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)

    calls.append((f"kjit wgmma {shape}", lambda q=q, k=k, v=v, out=out, causal=causal:
                  kj.prefill(q, k, v, out, causal=causal, variant="wgmma")))
    calls.append((f"cudnn {shape}", cudnn))
profile_calls(calls, args.time)
