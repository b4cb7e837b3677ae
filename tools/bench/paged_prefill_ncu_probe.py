#!/usr/bin/env python3
"""Probe (a diagnostic, not a published benchmark): kjit's ragged paged prefill and FlashInfer's fa3 as
Nsight Compute sees them, one call each on the uniform rows of bench_flashinfer.py (8 × (q 512 / kv
2048), GQA 32/8, page 16 or --page, causal; hd128 and hd64): kjit's automatic plan with its
persistent schedule (its pages loaded with TMA from page 16), the same plan with a CTA per work unit
(persistent=False), the persistent plan with its pages gathered (page_load="gather"), at hd64 the
persistent plan of 128-row tiles (TMA pages) beside the planned 192-row ones, kjit's dense Hopper
prefill on the same rows as contiguous [B, L, H, D] tensors (TMA loads, no gather, no GQA packing:
what the gather costs), and fa3 (unless --no-fa3).

Run under `ncu --profile-from-start off --clock-control none --cache-control all --csv --metrics
<list> python3 paged_prefill_ncu_probe.py` (FlashInfer importable: flashinfer_env.sh; its fa3
modules prebuilt by `bench_flashinfer.py --prebuild`); the script prints the order of its calls,
which is the order of the kernels in ncu's report (FlashInfer's plan step launches no kernel).
With --time it runs no profiler and prints each call's CUDA-graph time in µs instead.

Usage: paged_prefill_ncu_probe.py [--seed N] [--time] [--head-dims 128,64] [--no-fa3] [--page 16]
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import arg_parser, profile_calls, require_gpu, seeded_generator  # noqa: E402  (first)
import bench_flashinfer as bf  # noqa: E402
from bench_attention import Kjit  # noqa: E402
import torch  # noqa: E402

ap = arg_parser(__doc__)
ap.add_argument("--time", action="store_true", help="print CUDA-graph times instead of one call each")
ap.add_argument("--head-dims", default="128,64", help="comma-separated head dims (default 128,64)")
ap.add_argument("--no-fa3", action="store_true", help="kjit only (FlashInfer not needed)")
ap.add_argument("--page", type=int, default=16, help="page size (default 16; below 16 every plan gathers)")
args = ap.parse_args()
require_gpu()
if not args.no_fa3:
    import flashinfer  # noqa: E402

kj = Kjit()
gen, _ = seeded_generator(args)
ws = torch.empty(bf.WS_BYTES, dtype=torch.uint8, device="cuda")
q_lens, kv_lens, hq, hkv, page = [512] * 8, [2048] * 8, 32, 8, args.page
calls, keep = [], []
for d in (int(x) for x in args.head_dims.split(",")):
    pools = bf.Pools(kv_lens, page, hkv, d, 1, gen)
    cache = bf.KjitCache(pools, 0)
    q = torch.randn(sum(q_lens), hq, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    out = torch.empty_like(q)
    variants = [("persistent", None, "auto", 0), ("grid", False, "auto", 0), ("persistent gather", None, "gather", 0)]
    if d == 64:  # the 128-row tile, whose pages load with TMA, beside the planned 192-row one
        variants.append(("persistent 128-row", True, "auto", 128))
    for name, persistent, load, rows in variants:
        plan = kj.plan(q_lens, d, tile_rows=rows, cache=cache, q_heads=hq, causal=True, kv_heads=hkv,
                       pack_gqa="auto", persistent=persistent, page_load=load)
        keep.append(plan)
        calls.append((f"kjit {name} hd{d} (tile {plan['plan'].tile_rows}, ctas {plan['plan'].ctas})",
                      lambda plan=plan, q=q, cache=cache, out=out: kj.paged_prefill(plan, q, cache, out, causal=True)))
    kd = torch.randn(len(kv_lens), kv_lens[0], hkv, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    vd = torch.randn_like(kd)
    qd = q.view(len(q_lens), q_lens[0], hq, d)
    keep.append((kd, vd))
    calls.append((f"kjit dense hd{d}", lambda qd=qd, kd=kd, vd=vd, out=out:
                  kj.prefill(qd, kd, vd, out.view_as(qd), causal=True, variant="wgmma")))
    if args.no_fa3:
        continue
    qo = torch.tensor([0] + [sum(q_lens[:i + 1]) for i in range(len(q_lens))], device="cuda", dtype=torch.int32)
    w = bf.fi_wrapper(flashinfer, ws, pools, qo, hq, hkv, d, True, "fa3")
    keep.append((w, pools))
    calls.append((f"fa3 hd{d}", lambda w=w, q=q, pools=pools, out=out: w.run(q, pools.sets[0], out=out)))
profile_calls(calls, args.time)
