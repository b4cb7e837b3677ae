#!/usr/bin/env python3
"""What a request that misses costs under KJIT_JIT=on, KJIT_JIT=async and a warm cache: the latency of
the first 1,000 decode calls of a process that starts cold (nothing in its memory) on a disk cache
that holds the deployment's precompiled kernels but not the one the calls ask for.

    python3 tools/bench/bench_async_jit.py [--calls 1000] [--shape B,Hq,Hkv,D,L] [--json out.json]

The calls are kjit.attention.decode at group Hq/Hkv = 16 (default shape 1,32,2,128,4096), whose
built-in plan runs 16 query heads per CTA (attention.decode rows=16). The cache is what a
deployment precompiled for group-4 models: attention.decode head_dim=D rows=8 and its split-KV merge
(a seed process runs the group-4 shape once under KJIT_JIT=on). Each mode then runs in a fresh
process on its own copy of that cache:

  on     KJIT_JIT=on: the first call compiles rows=16 with NVRTC on the calling thread;
  async  KJIT_JIT=async: the first calls run the rows=8 kernel (rows is performance-only) while
         rows=16 compiles on kjit's background thread; the call after it is loaded runs rows=16;
  warm   the cache also holds rows=16 (compiled beforehand): the first call reads it from disk.

Each call is timed on the host from the call to the end of torch.cuda.synchronize() after it (what a
request waits for), in milliseconds: p50, p99 and max over the calls, the first call, and under
async how many calls ran the fallback and at which call the exact kernel took over. Every mode's
first output and last output are checked against float32 SDPA (relative L2 <= 1e-2), so a fallback
that computed something else fails the run. Exits 1 when a check fails.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from bench_common import arg_parser, fmt, rel_l2, require_gpu  # first
import kjit
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

TOL = 1e-2
MODES = ("on", "async", "warm")


def parse_shape(text):
    b, hq, hkv, d, length = (int(x) for x in text.split(","))
    if hq % hkv != 0:
        raise SystemExit(f"--shape {text}: Hq must be a multiple of Hkv")
    return b, hq, hkv, d, length


def make_inputs(b, hq, hkv, d, length, seed):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(b, 1, hq, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    k = torch.randn(b, length, hkv, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    v = torch.randn(b, length, hkv, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    return q, k, v


def reference(q, k, v):
    """float32 SDPA (math backend): [B, 1, Hq, D]."""
    with sdpa_kernel([SDPBackend.MATH]):
        o = F.scaled_dot_product_attention(q.float().transpose(1, 2), k.float().transpose(1, 2),
                                           v.float().transpose(1, 2), enable_gqa=True)
    return o.transpose(1, 2)


def child(mode, shape, calls, seed):
    """One cold process: `calls` timed decode calls. Prints one JSON object on stdout."""
    require_gpu()
    b, hq, hkv, d, length = shape
    q, k, v = make_inputs(b, hq, hkv, d, length, seed)
    out = torch.empty_like(q)
    ws_bytes = kjit.attention.decode_workspace_bytes(q, k, v)
    ws = torch.empty(max(ws_bytes, 16), dtype=torch.uint8, device="cuda")
    events = []
    kjit.add_listener(lambda e: events.append((time.perf_counter(), e["kind"], e["params"], e["detail"])))
    ref = reference(q, k, v)
    torch.cuda.synchronize()
    times, outputs_ok = [], []
    done_at = None
    for i in range(calls):
        t0 = time.perf_counter()
        kjit.attention.decode(q, k, v, None, out=out, workspace=ws)
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        times.append((t1 - t0) * 1e3)
        if done_at is None and any(kind == "background_compile_done" and t < t0 for t, kind, _, _ in events):
            done_at = i  # the first call that began after the exact kernel was loaded
        if i in (0, calls - 1):
            err = rel_l2(out, ref)
            outputs_ok.append({"call": i, "rel_l2": err, "ok": err <= TOL and bool(torch.isfinite(out).all())})
    s = kjit.stats()
    kinds = [kind for _, kind, _, _ in events]
    print(json.dumps({
        "mode": mode, "times_ms": times, "checks": outputs_ok, "exact_from_call": done_at,
        "fallback_launches": s["fallback_launches"], "compiles": s["compiles"], "disk_hits": s["disk_hits"],
        "background_compiles": s["background_compiles"], "no_fallback": s["no_fallback"],
        "events": {k: kinds.count(k) for k in sorted(set(kinds))},
    }))


def seed_cache(cache, shape, seed):
    """Runs the group-4 shape of `shape`'s head_dim once under KJIT_JIT=on into `cache`: what a
    deployment precompiled for its group-4 models."""
    b, hq, _, d, length = shape
    run_child("seed", cache, "on", (b, hq, hq // 4, d, length), 1, seed)


def run_child(mode, cache, jit, shape, calls, seed):
    """`calls` calls in a fresh process on `cache` under KJIT_JIT=`jit`; its JSON result."""
    env = dict(os.environ, KJIT_CACHE_DIR=cache, KJIT_JIT=jit, KJIT_TUNING="off")
    env.pop("KJIT_REMOTE", None)  # the local disk cache only: what is measured is the compile
    cmd = [sys.executable, os.path.abspath(__file__), "--child", mode, "--shape", ",".join(str(x) for x in shape),
           "--calls", str(calls), "--seed", str(seed)]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    if r.returncode != 0:
        raise SystemExit(f"{os.path.basename(__file__)}: error: the {mode} process failed (exit {r.returncode}):\n"
                         f"{r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def percentile(sorted_values, p):
    i = min(len(sorted_values) - 1, max(0, int(round(p / 100.0 * (len(sorted_values) - 1)))))
    return sorted_values[i]


def summarize(result):
    t = sorted(result["times_ms"])
    return {"mode": result["mode"], "p50_ms": percentile(t, 50), "p99_ms": percentile(t, 99), "max_ms": t[-1],
            "first_ms": result["times_ms"][0], "fallback_launches": result["fallback_launches"],
            "exact_from_call": result["exact_from_call"], "compiles": result["compiles"],
            "checks": result["checks"], "ok": all(c["ok"] for c in result["checks"])}


def main():
    ap = arg_parser(__doc__)
    ap.add_argument("--calls", type=int, default=1000, help="decode calls timed per mode (default 1000)")
    ap.add_argument("--shape", default="1,32,2,128,4096", help="B,Hq,Hkv,D,L of the calls (default 1,32,2,128,4096)")
    ap.add_argument("--child", choices=MODES + ("seed",), help=argparse.SUPPRESS)
    args = ap.parse_args()
    shape = parse_shape(args.shape)
    seed = args.seed if args.seed is not None else 1234
    if args.child:
        child(args.child, shape, args.calls, seed)
        return 0
    require_gpu()
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}  shape B,Hq,Hkv,D,L = {args.shape}  "
          f"calls {args.calls}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="kjit-bench-async-") as tmp:
        seed_dir = os.path.join(tmp, "seed")
        seed_cache(seed_dir, shape, seed)
        for mode in MODES:
            cache = os.path.join(tmp, mode)
            shutil.copytree(seed_dir, cache)
            if mode == "warm":
                run_child("seed", cache, "on", shape, 1, seed)  # the exact kernel, compiled beforehand
            rows.append(summarize(run_child(mode, cache, "on" if mode == "warm" else mode, shape, args.calls, seed)))
    print(f"{'mode':<6} {'p50 ms':>9} {'p99 ms':>9} {'max ms':>9} {'first ms':>9} {'fallback':>9} "
          f"{'exact from':>11} {'rel_l2':>9}  ok")
    for r in rows:
        worst = max(c["rel_l2"] for c in r["checks"])
        print(f"{r['mode']:<6} {r['p50_ms']:>9.3f} {r['p99_ms']:>9.3f} {r['max_ms']:>9.3f} {r['first_ms']:>9.3f} "
              f"{r['fallback_launches']:>9} {fmt(r['exact_from_call'], 'd'):>11} {worst:>9.2e}  "
              f"{'PASS' if r['ok'] else 'FAIL'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "shape": args.shape, "calls": args.calls,
                       "results": rows}, f, indent=2)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
