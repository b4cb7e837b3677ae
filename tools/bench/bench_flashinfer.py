#!/usr/bin/env python3
"""kjit's ragged paged prefill beside FlashInfer's (fa2 and fa3 backends), in one process on one GPU.

    python3 tools/bench/bench_flashinfer.py [--json out.json] [--seed N] [--cases NAME,...] [--no-fi]
    python3 tools/bench/bench_flashinfer.py --prebuild     # FlashInfer's JIT modules only, then exit

FlashInfer must be importable (tools/bench/flashinfer_env.sh installs a kit of wheels and sets
its JIT environment; h200_session.sh does both when the kit is carried). For each case one set of
inputs is built: random bf16 q [total_q, Hq, D] and K/V pools [num_pages, page, Hkv, D] in the
NHD layout both libraries read, on a random permutation of pages with the unused slots of each
last page and the spare pages NaN, one page table for both. Several pool sets (same table, fresh
data) rotate so that K/V come from DRAM as in serving. Every output is checked against a float32
torch reference and kjit against FlashInfer (relative L2 < 1e-2); a case that disagrees is marked.
Timing: a CUDA graph of one call per pool set, replayed with triton.testing.do_bench (median; host
launch cost excluded for both libraries). kjit runs through its Python package
(kjit.attention.plan_paged_prefill + paged_prefill on the torch tensors, torch's current stream):
its automatic kernel choice (the Hopper wgmma kernel on sm_90a where it can) and, for reference,
the mma.sync kernel forced (plan_paged_prefill(variant="mma")); at head_dim 64 also the plan of
192-row tiles forced (plan_paged_prefill(tile_rows=192): the Hopper kernel's three consumer
warpgroups), column "kjit 192"; and the automatic plan with its pages gathered by cp.async
(plan_paged_prefill(page_load="gather")) where it would load them with TMA (pages of a multiple
of 16 tokens, 128-row tiles), column "kjit gather". The
automatic plans are made for the device from the cache's layout (its tuning table, else the
built-in rule, which takes 192-row tiles at head_dim 64 when the requests average more than 128
query rows).
TFLOP/s counts the attended (query, key) pairs only: 4 · D · Hq per pair, causal bottom-right
aligned (query i of a request of q_len rows over kv_len keys sees kv_len − q_len + i + 1 keys).
ratio = FlashInfer's best µs / kjit's µs (> 1: kjit faster).

--prebuild builds FlashInfer's prefill modules (fa2 and fa3 at head_dim 64 and 128) by planning a
tiny call of each (four child processes side by side), so that a device run can overlap that
compile with other work.
"""
import argparse
import json
import math
import os
import sys
import time

from bench_common import arg_parser, fmt, graph_time_us, rel_l2, require_gpu, seeded_generator  # first
import kjit
import torch

from bench_attention import Kjit

TOL = 1e-2
ROTATE_BYTES = 240e6  # four times the H200's L2
MAX_SETS = 8
WS_BYTES = 256 << 20
FI_BACKENDS = ("fa2", "fa3")

# name, q_lens, kv_lens, q_heads, kv_heads, head_dim, page_size, causal
CASES = [
    ("issue 8x(q512/kv2048) hd128 p16 causal", [512] * 8, [2048] * 8, 32, 8, 128, 16, True),
    ("mixed lengths hd128 p16 causal", [1024, 37, 300, 513, 8, 2048, 129, 700],
     [2048, 37, 2300, 1024, 4008, 2048, 256, 1000], 32, 8, 128, 16, True),
    ("8x(q512/kv2048) hd64 p16 causal", [512] * 8, [2048] * 8, 32, 8, 64, 16, True),
    ("8x(q512/kv2048) hd128 p1 causal", [512] * 8, [2048] * 8, 32, 8, 128, 1, True),
    ("8x(q512/kv2048) hd128 p64 full", [512] * 8, [2048] * 8, 32, 8, 128, 64, False),
]


def log(*a):
    print(*a, flush=True)


class Pools:
    """Page table and `n_sets` K/V pool pairs for requests of `kv_lens` tokens (see the module doc);
    `kv0` keeps set 0's tokens as [sum(kv_lens), Hkv, D] for the reference."""

    def __init__(self, kv_lens, page, hkv, d, n_sets, gen):
        pages_per = [(n + page - 1) // page for n in kv_lens]
        total = sum(pages_per)
        self.page_size = page
        self.num_pages = total + 2
        perm = torch.randperm(self.num_pages, device="cuda", generator=gen).to(torch.int32)
        self.indices = perm[:total].contiguous()
        indptr = [0]
        for p in pages_per:
            indptr.append(indptr[-1] + p)
        self.indptr = torch.tensor(indptr, device="cuda", dtype=torch.int32)
        self.last = torch.tensor([n - (p - 1) * page if p else 0 for n, p in zip(kv_lens, pages_per)],
                                 device="cuda", dtype=torch.int32)
        self.nnz = total
        # Pool slot of every token, requests in order: page id · page + slot.
        slots = []
        for b, n in enumerate(kv_lens):
            j = torch.arange(n, device="cuda")
            slots.append(self.indices[indptr[b] + j // page].long() * page + j % page)
        slots = torch.cat(slots)
        self.sets, self.kv0 = [], None
        for s in range(n_sets):
            k = torch.randn(len(slots), hkv, d, device="cuda", dtype=torch.bfloat16, generator=gen)
            v = torch.randn_like(k)
            kp = torch.full((self.num_pages, page, hkv, d), float("nan"), device="cuda", dtype=torch.bfloat16)
            vp = torch.full_like(kp, float("nan"))
            kp.view(-1, hkv, d)[slots] = k
            vp.view(-1, hkv, d)[slots] = v
            self.sets.append((kp, vp))
            if s == 0:
                self.kv0 = (k, v)


class KjitCache:
    """What Kjit.paged_prefill reads of a cache (the attributes of bench_attention.PagedCache)."""

    def __init__(self, pools, s):
        self.k, self.v = pools.sets[s]
        self.indptr, self.indices, self.last = pools.indptr, pools.indices, pools.last
        self.num_pages, self.page_size, self.nnz = pools.num_pages, pools.page_size, pools.nnz


def reference(q, q_lens, kv_lens, kv0, hkv, causal):
    """float32 GQA attention per request, causal bottom-right aligned: q [total_q, Hq, D]."""
    k_all, v_all = kv0
    total_q, hq, d = q.shape
    g = hq // hkv
    out = torch.zeros(total_q, hq, d, device="cuda", dtype=torch.float32)
    q0 = k0 = 0
    for lq, lk in zip(q_lens, kv_lens):
        if lq and lk:
            qb = q[q0:q0 + lq].float().view(lq, hkv, g, d)
            kb, vb = k_all[k0:k0 + lk].float(), v_all[k0:k0 + lk].float()
            s = torch.einsum("qhgd,khd->hgqk", qb, kb) / math.sqrt(d)
            if causal:
                qi = torch.arange(lq, device="cuda").view(lq, 1) + (lk - lq)
                s.masked_fill_(torch.arange(lk, device="cuda").view(1, lk) > qi, float("-inf"))
            p = torch.nan_to_num(s.softmax(-1))  # rows that see no key: zeros
            out[q0:q0 + lq] = torch.einsum("hgqk,khd->qhgd", p, vb).reshape(lq, hq, d)
        q0 += lq
        k0 += lk
    return out


def attended_pairs(q_lens, kv_lens, causal):
    if not causal:
        return sum(q * k for q, k in zip(q_lens, kv_lens))
    return sum(min(max(k - q + i + 1, 0), k) for q, k in zip(q_lens, kv_lens) for i in range(q))


def fi_wrapper(fi, ws, pools, qo_d, hq, hkv, d, causal, backend):
    w = fi.BatchPrefillWithPagedKVCacheWrapper(ws, "NHD", backend=backend)
    w.plan(qo_d, pools.indptr, pools.indices, pools.last, hq, hkv, d, pools.page_size, causal=causal,
           q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16)
    return w


def prebuild_one(d, backend):
    """Builds FlashInfer's prefill module of one head_dim and backend by planning a tiny call."""
    import flashinfer
    gen = torch.Generator(device="cuda").manual_seed(0)
    ws = torch.empty(WS_BYTES, dtype=torch.uint8, device="cuda")
    qo = torch.tensor([0, 16], device="cuda", dtype=torch.int32)
    t = time.time()
    try:
        fi_wrapper(flashinfer, ws, Pools([32], 16, 1, d, 1, gen), qo, 1, 1, d, True, backend)
        log(f"prebuild: FlashInfer {backend} hd{d}: {time.time() - t:.0f} s")
    except Exception as e:  # reported; the timed run reports it again per case
        log(f"prebuild: FlashInfer {backend} hd{d} failed after {time.time() - t:.0f} s: {str(e)[:300]}")


def prebuild():
    """Builds the modules this script uses (see the module doc), one child process per module so
    that their nvcc jobs run side by side."""
    import subprocess
    children = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--prebuild-one", str(d), be])
                for d in (128, 64) for be in FI_BACKENDS]
    return max(c.wait() for c in children)


def run_case(case, kj, fi, ws, gen):
    name, q_lens, kv_lens, hq, hkv, d, page, causal = case
    res = dict(case=name, q_lens=q_lens, kv_lens=kv_lens, Hq=hq, Hkv=hkv, D=d, page=page, causal=causal)
    kv_bytes = 2 * sum(kv_lens) * hkv * d * 2
    n = int(min(MAX_SETS, max(2, math.ceil(ROTATE_BYTES / kv_bytes))))
    pools = Pools(kv_lens, page, hkv, d, n, gen)
    total_q = sum(q_lens)
    q = torch.randn(total_q, hq, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    ref = reference(q, q_lens, kv_lens, pools.kv0, hkv, causal)
    pools.kv0 = None
    flops = 4 * d * hq * attended_pairs(q_lens, kv_lens, causal)
    res.update(sets=n, flops=flops)
    caches = [KjitCache(pools, s) for s in range(n)]
    outs = {}
    wide = [("kjit_192", kjit.attention.WIDE_TILE_ROWS, "auto")] if d == kjit.attention.WIDE_TILE_HEAD_DIM else []
    # key, tile_rows, variant, pack_gqa, page_load (pack_gqa None: the plan's default)
    runs = [("kjit", 0, "auto", None, "auto"), ("kjit_mma", 0, "mma", None, "auto")]
    runs += [w + (None, "auto") for w in wide]
    # The plan's own choice with its pages gathered (cp.async) instead of loaded with TMA.
    runs += [("kjit_gather", 0, "auto", "auto" if hq > hkv else None, "gather")]
    if hq > hkv:
        # The plan's own choice with the GQA group's q heads packed and not, side by side.
        runs += [("kjit_pack", 0, "auto", "on", "auto"), ("kjit_nopack", 0, "auto", "off", "auto")]
    for key, tile_rows, variant, pack, page_load in runs:
        try:
            plan = kj.plan(q_lens, d, tile_rows=tile_rows, variant=variant, cache=caches[0], q_heads=hq,
                           causal=causal, kv_heads=hkv, pack_gqa=pack, page_load=page_load)
        except Exception as e:
            res[f"{key}_error"] = str(e)[:300]
            log(f"  {key} plan failed: {e}")
            continue
        try:
            out = torch.full_like(q, float("nan"))
            kj.paged_prefill(plan, q, caches[0], out, causal=causal)
            torch.cuda.synchronize()
            outs[key] = out.clone()
            res[f"{key}_err"] = rel_l2(out, ref)
            us = graph_time_us(lambda i: kj.paged_prefill(plan, q, caches[i], out, causal=causal), n)
            res.update({f"{key}_us": us, f"{key}_TFLOPs": flops / us / 1e6})
        except Exception as e:
            res[f"{key}_error"] = str(e)[:300]
            log(f"  {key} failed: {e}")
        finally:
            kj.free_plan(plan)
    if fi is not None:
        qo_d = torch.tensor([0] + [sum(q_lens[:i + 1]) for i in range(len(q_lens))], device="cuda", dtype=torch.int32)
        for be in FI_BACKENDS:
            try:
                w = fi_wrapper(fi, ws, pools, qo_d, hq, hkv, d, causal, be)
                out = torch.full_like(q, float("nan"))
                w.run(q, pools.sets[0], out=out)
                torch.cuda.synchronize()
                outs[be] = out.clone()
                res[f"fi_{be}_err"] = rel_l2(out, ref)
                us = graph_time_us(lambda i: w.run(q, pools.sets[i], out=out), n)
                res.update({f"fi_{be}_us": us, f"fi_{be}_TFLOPs": flops / us / 1e6})
                if "kjit" in outs:  # both on pool set 0 (the timed replays leave the last set's output)
                    res[f"kjit_vs_fi_{be}"] = rel_l2(outs["kjit"], outs[be])
            except Exception as e:
                res[f"fi_{be}_error"] = str(e)[:300]
                log(f"  FlashInfer {be} failed: {str(e)[:300]}")
    fi_us = {be: res[f"fi_{be}_us"] for be in FI_BACKENDS if f"fi_{be}_us" in res}
    if fi_us and "kjit_us" in res:
        best = min(fi_us, key=fi_us.get)
        res.update(fi_best=best, ratio_fi_over_kjit=fi_us[best] / res["kjit_us"])
        if "fa3" in fi_us:
            res["ratio_fa3_over_kjit"] = fi_us["fa3"] / res["kjit_us"]
            if "kjit_192_us" in res:
                res["ratio_fa3_over_kjit_192"] = fi_us["fa3"] / res["kjit_192_us"]
            for key in ("kjit_pack", "kjit_nopack", "kjit_gather"):
                if f"{key}_us" in res:
                    res[f"ratio_fa3_over_{key}"] = fi_us["fa3"] / res[f"{key}_us"]
    checks = [v for k, v in res.items() if k.endswith("_err") or k.startswith("kjit_vs_fi_")]
    res["agree"] = bool(checks) and all(v < TOL for v in checks)
    return res


def main():
    ap = arg_parser(__doc__)
    ap.add_argument("--prebuild", action="store_true", help="build FlashInfer's modules and exit")
    ap.add_argument("--prebuild-one", nargs=2, metavar=("HEAD_DIM", "BACKEND"), help=argparse.SUPPRESS)
    ap.add_argument("--no-fi", action="store_true", help="kjit only")
    ap.add_argument("--cases", help="comma-separated prefixes of case names (default: all)")
    args = ap.parse_args()
    if args.prebuild_one:
        prebuild_one(int(args.prebuild_one[0]), args.prebuild_one[1])
        return 0
    if args.prebuild:
        return prebuild()
    require_gpu()
    kj = Kjit()
    gen, seed = seeded_generator(args)
    fi = None
    if not args.no_fi:
        try:
            import flashinfer
            fi = flashinfer
            log(f"flashinfer {flashinfer.__version__}")
        except Exception as e:
            log(f"FlashInfer not importable ({e}): kjit only")
    ws = torch.empty(WS_BYTES, dtype=torch.uint8, device="cuda")
    cases = CASES
    if args.cases:
        wanted = args.cases.split(",")
        cases = [c for c in CASES if any(c[0].startswith(w) for w in wanted)]
    results = []
    for case in cases:
        log(f"== {case[0]}")
        r = run_case(case, kj, fi, ws, gen)
        log("   " + json.dumps({k: (round(v, 5) if isinstance(v, float) else v) for k, v in r.items()
                                 if k not in ("q_lens", "kv_lens")}))
        results.append(r)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(dict(seed=seed, device=torch.cuda.get_device_name(), results=results), f, indent=1)
    log("\n| case | kjit µs (TFLOP/s) | kjit gather | kjit 192 | kjit mma.sync | kjit packed | kjit unpacked | FI fa3 | "
        "FI fa2 | FI best / kjit | fa3 / kjit gather | fa3 / kjit 192 | fa3 / packed | fa3 / unpacked | agree |")
    log("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        def cell(key):
            us, tf = r.get(f"{key}_us"), r.get(f"{key}_TFLOPs")
            return "-" if us is None else f"{us:.1f} ({tf:.0f})"
        log(f"| {r['case']} | {cell('kjit')} | {cell('kjit_gather')} | {cell('kjit_192')} | {cell('kjit_mma')} | "
            f"{cell('kjit_pack')} | {cell('kjit_nopack')} | {cell('fi_fa3')} | {cell('fi_fa2')} | "
            f"{fmt(r.get('ratio_fi_over_kjit'), '.3f')} | {fmt(r.get('ratio_fa3_over_kjit_gather'), '.3f')} | "
            f"{fmt(r.get('ratio_fa3_over_kjit_192'), '.3f')} | {fmt(r.get('ratio_fa3_over_kjit_pack'), '.3f')} | "
            f"{fmt(r.get('ratio_fa3_over_kjit_nopack'), '.3f')} | {'yes' if r['agree'] else 'NO'} |")
    return 0 if all(r["agree"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
