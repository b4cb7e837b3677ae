#!/usr/bin/env python3
"""What a request that misses costs under KJIT_JIT=on, KJIT_JIT=async and a warm cache: the latency of
the first 1,000 calls of an op in a process that starts cold (nothing in its memory) on a disk cache
that holds the deployment's precompiled kernels but not the one the calls ask for.

    python3 tools/bench/bench_async_jit.py [--calls 1000] [--shape B,Hq,Hkv,D,L] [--ops decode,...]
                                           [--json out.json]

--ops (default decode; "all" for every one) picks the ops, each measured the same way. What the cache
holds (a seed process runs it once under KJIT_JIT=on) and what the calls ask for:

  decode         kjit.attention.decode at group Hq/Hkv = 16 (--shape, default 1,32,2,128,4096), whose
                 built-in plan runs 16 query heads per CTA (attention.decode rows=16); the cache holds
                 what a deployment precompiled for group-4 models: rows=8 and its split-KV merge.
  paged_decode   kjit.attention.paged_decode of --shape's requests (each L tokens, pages of 16): the
                 same rows=16 miss over the group-4 cache (attention.paged_decode rows=8 + merge).
  paged_prefill  kjit.attention.paged_prefill of 3 requests (300/200/500 query rows over 600/200/900
                 keys, Hq32/Hkv8, D128, pages of 16, causal) planned with variant="mma" (the mma.sync
                 kernel, unpacked); the cache holds the plan the device takes by itself (on sm_90a the
                 wgmma kernel, the group packed). Elsewhere mma.sync is that plan: skipped.
  gemm           kjit.fp8.gemm M256 N10240 K4096 (e4m3, tensor scales, bf16): its wave-fitting tile;
                 the cache holds the tile of M2048 N2048 K4096.
  rotary         kjit.rotary NeoX of T4096 Hq32/Hkv8 D128 (out of place); the cache holds GPT-J.
  quantize       kjit.fp8.quantize per row of a bf16 4096x4096 to e4m3; the cache holds e5m2.
  swa            kjit.mla.swa_decode T512 NH128 W128 (on sm_90a the wgmma kernel, group 64); the cache
                 holds the T8 plan (group 16).

Rotary and quantize have no performance-only parameter: a miss of theirs has no fallback, so under
async their first call compiles as under on (the no_fallback event). Each mode then runs in a fresh
process on its own copy of the op's cache:

  on     KJIT_JIT=on: the first call compiles the missing kernel with NVRTC on the calling thread;
  async  KJIT_JIT=async: the first calls run a built kernel that differs only in performance-only
         parameters (decode: rows=8) while the missing one compiles on kjit's background thread; the
         call after it is loaded runs it;
  warm   the cache also holds the missing kernel (compiled beforehand): the first call reads it from disk.

Each call is timed on the host from the call to the end of torch.cuda.synchronize() after it (what a
request waits for), in milliseconds: p50, p99 and max over the calls, the first call, and under
async how many calls ran the fallback and at which call the exact kernel took over. Every mode's
first output and last output are checked against a reference (float32 SDPA for attention, float64
for the GEMM, RoPE and SWA decode; quantize dequantized against its input), so a fallback that
computed something else fails the run. Exits 1 when a check fails.
"""
import argparse
import json
import math
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

from bench_attention import PagedCache, reference as request_reference
from bench_rotary import reference as rotary_reference, tables as rotary_tables
from bench_swa import BLOCK_SIZE as SWA_BLOCK, HD as SWA_HD, W as SWA_W, make_cache as swa_cache, \
    make_tokens as swa_tokens, reference64 as swa_reference

TOL = 1e-2
ROTARY_TOL = 4e-3  # bf16 rounding alone gives about 1.6e-3 (tools/testing/reference_rotary.hpp)
QUANT_TOL = 5e-2   # e4m3 keeps 3 mantissa bits: its rounding alone leaves a few percent, dequantized
MODES = ("on", "async", "warm")
OPS = ("decode", "paged_decode", "paged_prefill", "gemm", "rotary", "quantize", "swa")
PAGE = 16


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


def attention_check(out, ref):
    """The check of an attention output: (rel_l2 against `ref`, whether it passes)."""
    err = rel_l2(out, ref)
    return err, err <= TOL and bool(torch.isfinite(out).all())


def decode_case(shape, seed, precompiled):
    """kjit.attention.decode of `shape`; `precompiled`: the group-4 shape a deployment built."""
    b, hq, hkv, d, length = shape
    q, k, v = make_inputs(b, hq, hq // 4 if precompiled else hkv, d, length, seed)
    out = torch.empty_like(q)
    ws = torch.empty(max(kjit.attention.decode_workspace_bytes(q, k, v), 16), dtype=torch.uint8, device="cuda")
    ref = reference(q, k, v)
    return (lambda: kjit.attention.decode(q, k, v, None, out=out, workspace=ws)), (lambda: attention_check(out, ref))


def paged_decode_case(shape, seed, precompiled):
    """kjit.attention.paged_decode of `shape`'s requests (each L tokens) on pages of PAGE; `precompiled`:
    the group-4 shape."""
    b, hq, hkv, d, length = shape
    q, k, v = make_inputs(b, hq, hq // 4 if precompiled else hkv, d, length, seed)
    cache = PagedCache(k, v, [length] * b, PAGE, torch.Generator(device="cuda").manual_seed(seed + 1))
    table = (cache.k, cache.v, cache.indptr, cache.indices, cache.last)
    out = torch.empty_like(q)
    ws = torch.empty(max(kjit.attention.paged_decode_workspace_bytes(q, *table), 16), dtype=torch.uint8, device="cuda")
    ref = reference(q, k, v)
    return (lambda: kjit.attention.paged_decode(q, *table, out=out, workspace=ws)), (lambda: attention_check(out, ref))


def paged_prefill_case(shape, seed, precompiled):
    """The ragged paged prefill of the module doc: the device's own plan (`precompiled`), else the
    mma.sync kernel forced."""
    q_lens, kv_lens, hq, hkv, d = [300, 200, 500], [600, 200, 900], 32, 8, 128
    gen = torch.Generator(device="cuda").manual_seed(seed)
    k = torch.randn(len(kv_lens), max(kv_lens), hkv, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    v = torch.randn(len(kv_lens), max(kv_lens), hkv, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    cache = PagedCache(k, v, kv_lens, PAGE, gen)
    q = torch.randn(sum(q_lens), hq, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    indptr = [0]
    for n in q_lens:
        indptr.append(indptr[-1] + n)
    plan = kjit.attention.plan_paged_prefill(indptr, d, 0, torch.cuda.current_device(),
                                             variant="auto" if precompiled else "mma", kv_indptr=cache.indptr.cpu(),
                                             last_page_len=cache.last.cpu(), q_heads=hq, page_size=PAGE, causal=True,
                                             kv_heads=hkv)
    qo = torch.tensor(indptr, device="cuda", dtype=torch.int32)
    out = torch.empty_like(q)
    ref = torch.cat([request_reference(q[indptr[i]:indptr[i + 1]], k[i], v[i], kv_len=kv_lens[i], causal=True)[0]
                     for i in range(len(q_lens))])
    call = lambda: kjit.attention.paged_prefill(q, qo, cache.k, cache.v, cache.indptr, cache.indices, cache.last, plan,
                                                causal=True, out=out)
    return call, (lambda: attention_check(out, ref))


def gemm_case(shape, seed, precompiled):
    """kjit.fp8.gemm D = A · Bᵀ of the module doc, e4m3 operands as a quantizer makes them."""
    m, n, k = (2048, 2048, 4096) if precompiled else (256, 10240, 4096)
    gen = torch.Generator(device="cuda").manual_seed(seed)
    a = (torch.randn(m, k, device="cuda", generator=gen) * 80).clamp(-448, 448).to(torch.float8_e4m3fn)
    b = (torch.randn(n, k, device="cuda", generator=gen) * 80).clamp(-448, 448).to(torch.float8_e4m3fn)
    sa = torch.tensor([0.0123], device="cuda", dtype=torch.float32)
    sb = torch.tensor([0.0071], device="cuda", dtype=torch.float32)
    d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    ref = (a.double() @ b.double().t()) * (sa.double() * sb.double())
    return (lambda: kjit.fp8.gemm(a, b, sa, sb, d=d)), (lambda: attention_check(d, ref))


def rotary_case(shape, seed, precompiled):
    """kjit.rotary of q and k out of place: NeoX, or GPT-J (`precompiled`)."""
    t, hq, hkv, d, max_position = 4096, 32, 8, 128, 8192
    style = "gptj" if precompiled else "neox"
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(t, hq, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    k = torch.randn(t, hkv, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    pos = torch.randint(0, max_position, (t,), device="cuda", generator=gen)
    cos, sin = rotary_tables(max_position, d)
    q_out, k_out = torch.empty_like(q), torch.empty_like(k)
    ref = torch.cat([rotary_reference(q, cos, sin, pos, style == "neox").flatten(),
                     rotary_reference(k, cos, sin, pos, style == "neox").flatten()])

    def check():
        out = torch.cat([q_out.flatten(), k_out.flatten()])
        err = rel_l2(out.double(), ref)
        return err, err <= ROTARY_TOL and bool(torch.isfinite(out).all())

    call = lambda: kjit.rotary(q, cos, sin, pos, k, q_out=q_out, k_out=k_out, rotary_dim=d, style=style)
    return call, check


def quantize_case(shape, seed, precompiled):
    """kjit.fp8.quantize per row of bf16 x [4096, 4096]: to e4m3, or e5m2 (`precompiled`)."""
    rows, cols = 4096, 4096
    fmt_name, dtype = ("e5m2", torch.float8_e5m2) if precompiled else ("e4m3", torch.float8_e4m3fn)
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = (torch.randn(rows, cols, device="cuda", generator=gen) *
         torch.rand(rows, 1, device="cuda", generator=gen) * 100).to(torch.bfloat16)
    y = torch.empty(rows, cols, device="cuda", dtype=dtype)
    scale_inv = torch.empty(rows, device="cuda", dtype=torch.float32)

    def check():
        err = rel_l2(y.float() * scale_inv[:, None], x.float())
        return err, err <= QUANT_TOL and bool(torch.isfinite(scale_inv).all())

    call = lambda: kjit.fp8.quantize(x, y=y, format=fmt_name, granularity="row", scale_inv=scale_inv)
    return call, check


def swa_case(shape, seed, precompiled):
    """kjit.mla.swa_decode of T512 (T8: `precompiled`) tokens, NH128 W128, over bench_swa.py's cache."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    kv, inv_scale = swa_cache(gen)
    q, indices, lens = swa_tokens(8 if precompiled else 512, gen)
    plan = kjit.mla.swa_decode_plan(q, kv, inv_scale, indices, lens)
    ws = torch.empty(max(plan.workspace_bytes, 16), dtype=torch.uint8, device="cuda")
    out = torch.empty_like(q)
    ref, _ = swa_reference(q, kv, inv_scale, indices, lens, SWA_BLOCK, 1.0 / math.sqrt(SWA_HD), SWA_W)
    call = lambda: kjit.mla.swa_decode(q, kv, inv_scale, indices, lens, out=out, workspace=ws)
    return call, (lambda: attention_check(out, ref))


CASES = {"decode": decode_case, "paged_decode": paged_decode_case, "paged_prefill": paged_prefill_case,
         "gemm": gemm_case, "rotary": rotary_case, "quantize": quantize_case, "swa": swa_case}


def child(mode, op, precompiled, shape, calls, seed):
    """One cold process: `calls` timed calls of `op` (its precompiled case: what the seed runs).
    Prints one JSON object on stdout."""
    require_gpu()
    call, check = CASES[op](shape, seed, precompiled)
    events = []
    kjit.add_listener(lambda e: events.append((time.perf_counter(), e["kind"], e["params"], e["detail"])))
    torch.cuda.synchronize()
    times, outputs_ok = [], []
    done_at = None
    for i in range(calls):
        t0 = time.perf_counter()
        call()
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        times.append((t1 - t0) * 1e3)
        if done_at is None and any(kind == "background_compile_done" and t < t0 for t, kind, _, _ in events):
            done_at = i  # the first call that began after the exact kernel was loaded
        if i in (0, calls - 1):
            err, ok = check()
            outputs_ok.append({"call": i, "rel_l2": err, "ok": ok})
    s = kjit.stats()
    kinds = [kind for _, kind, _, _ in events]
    print(json.dumps({
        "mode": mode, "op": op, "times_ms": times, "checks": outputs_ok, "exact_from_call": done_at,
        "fallback_launches": s["fallback_launches"], "compiles": s["compiles"], "disk_hits": s["disk_hits"],
        "background_compiles": s["background_compiles"], "no_fallback": s["no_fallback"],
        "events": {k: kinds.count(k) for k in sorted(set(kinds))},
    }))


def run_child(mode, cache, jit, op, precompiled, shape, calls, seed):
    """`calls` calls of `op` (its precompiled case: what a deployment built) in a fresh process on
    `cache` under KJIT_JIT=`jit`; its JSON result."""
    env = dict(os.environ, KJIT_CACHE_DIR=cache, KJIT_JIT=jit, KJIT_TUNING="off")
    env.pop("KJIT_REMOTE", None)  # the local disk cache only: what is measured is the compile
    cmd = [sys.executable, os.path.abspath(__file__), "--child", mode, "--child-op", op,
           "--shape", ",".join(str(x) for x in shape), "--calls", str(calls), "--seed", str(seed)]
    if precompiled:
        cmd.append("--child-precompiled")
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
    return {"op": result["op"], "mode": result["mode"], "p50_ms": percentile(t, 50), "p99_ms": percentile(t, 99), "max_ms": t[-1],
            "first_ms": result["times_ms"][0], "fallback_launches": result["fallback_launches"],
            "exact_from_call": result["exact_from_call"], "compiles": result["compiles"],
            "checks": result["checks"], "ok": all(c["ok"] for c in result["checks"])}


def parse_ops(text):
    ops = OPS if text == "all" else tuple(text.split(","))
    for op in ops:
        if op not in OPS:
            raise SystemExit(f"--ops {text}: {op} is not one of {', '.join(OPS)} (or all)")
    return ops


def measure(op, shape, calls, seed, tmp):
    """The three modes of `op`, each a fresh process on its own copy of the op's seeded cache."""
    os.makedirs(os.path.join(tmp, op))
    seed_dir = os.path.join(tmp, op, "seed")
    run_child("seed", seed_dir, "on", op, True, shape, 1, seed)  # what the deployment precompiled
    rows = []
    for mode in MODES:
        cache = os.path.join(tmp, op, mode)
        shutil.copytree(seed_dir, cache)
        if mode == "warm":
            run_child("seed", cache, "on", op, False, shape, 1, seed)  # the exact kernel, compiled beforehand
        rows.append(summarize(run_child(mode, cache, "on" if mode == "warm" else mode, op, False, shape, calls, seed)))
    return rows


def main():
    ap = arg_parser(__doc__)
    ap.add_argument("--calls", type=int, default=1000, help="calls timed per op and mode (default 1000)")
    ap.add_argument("--shape", default="1,32,2,128,4096",
                    help="B,Hq,Hkv,D,L of the decode and paged_decode calls (default 1,32,2,128,4096)")
    ap.add_argument("--ops", default="decode", help=f"comma-separated, of {', '.join(OPS)}; or all (default decode)")
    ap.add_argument("--child", choices=MODES + ("seed",), help=argparse.SUPPRESS)
    ap.add_argument("--child-op", choices=OPS, default="decode", help=argparse.SUPPRESS)
    ap.add_argument("--child-precompiled", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    shape = parse_shape(args.shape)
    ops = parse_ops(args.ops)
    seed = args.seed if args.seed is not None else 1234
    if args.child:
        child(args.child, args.child_op, args.child_precompiled, shape, args.calls, seed)
        return 0
    require_gpu()
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}  shape B,Hq,Hkv,D,L = {args.shape}  "
          f"calls {args.calls}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="kjit-bench-async-") as tmp:
        for op in ops:
            if op == "paged_prefill" and torch.cuda.get_device_capability() != (9, 0):
                print("paged_prefill: skipped (its miss and fallback are the sm_90a kernels; elsewhere mma.sync is "
                      "the plan the cache holds)")
                continue
            if op != "decode" or len(ops) > 1:
                print(f"op {op}:")
            op_rows = measure(op, shape, args.calls, seed, tmp)
            rows += op_rows
            print(f"{'mode':<6} {'p50 ms':>9} {'p99 ms':>9} {'max ms':>9} {'first ms':>9} {'fallback':>9} "
                  f"{'exact from':>11} {'rel_l2':>9}  ok")
            for r in op_rows:
                worst = max(c["rel_l2"] for c in r["checks"])
                print(f"{r['mode']:<6} {r['p50_ms']:>9.3f} {r['p99_ms']:>9.3f} {r['max_ms']:>9.3f} "
                      f"{r['first_ms']:>9.3f} {r['fallback_launches']:>9} {fmt(r['exact_from_call'], 'd'):>11} "
                      f"{worst:>9.2e}  {'PASS' if r['ok'] else 'FAIL'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "shape": args.shape, "calls": args.calls,
                       "ops": list(ops), "results": rows}, f, indent=2)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
