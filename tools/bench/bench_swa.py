#!/usr/bin/env python3
"""kjit's fused fp8 sliding-window MLA decode beside a batched PyTorch fallback, on one GPU.

    python3 tools/bench/bench_swa.py [--json out.json] [--seed N] [--tokens T ...] [--cluster-split C ...]
    python3 tools/bench/bench_swa.py --sweep [--json sweep.json] [--tokens T ...] [--cluster-split C ...]

--sweep times, for each T, every (head group, split count) the op accepts and, on sm_90+, every
(head group, cluster split), forced through the op's num_splits= / head_group= / cluster_split=
(the planner clamps a requested split count, so requests that give the same plan, as
kjit.mla.swa_decode_plan reports it, are timed once), checks each against the float64 reference,
and prints one line per T: the planner's own choice, then `g<group>/s<splits>x<split_len>` (a
split merged by a second kernel) or `g<group>/c<cluster>x<split_len>` (a cluster split, one
launch) with its eager/graph µs per plan, then the fastest. --cluster-split limits the sweep's
cluster plans to those sizes; without --sweep it adds, for each T, kjit forced to each of those
cluster splits (groups of 16) beside the planner's plan, and those plans to the correctness check.

kjit runs through its Python package (kjit.mla.swa_decode on the torch tensors, torch's current
stream). The workload is DeepSeek-V4 decode: NH 128 query heads, latent HD 512, window
W 128, a paged E4M3 cache of 256-row blocks (uint8 storage) with one bf16 inverse scale per slot.
The cache holds 2^20 slots (512 MiB), far more than L2, and every token's window indices are
random slots spread over all of its blocks. The script

  1. writes the op the way a PyTorch serving stack does without a fused kernel: one batched
     gather of every token's window, dequantize to bf16, masked SDPA (torch_fallback);
  2. checks kjit against it and against a float64 torch reference of the same function (the
     dequantized values rounded to bf16 as the fallback does), on the benchmark inputs and on a case
     with ragged lengths (incl. 0 and W), invalid indices and LSE (relative L2 ≤ 1e-2 for out,
     2e-3 for LSE: kjit keeps the dequantized values exact where the fallback rounds them to bf16);
  3. times kjit (eager: the Python call and the launch; and replayed from a CUDA graph) and the
     fallback with triton.testing.do_bench (median; do_bench flushes L2 before every call) at T = 1, 8, 64, 512;
  4. prints T, kjit µs, fallback µs, speedup, the floor and kjit's % of it, where
       floor = max(bytes / 4.2 TB/s, FLOPs / 790 TFLOP/s)
       bytes = T · (W·HD fp8 KV + W·2 scales + W·8 indices + 8 lens + NH·HD·2 q + NH·HD·2 out)
       FLOPs = T · 4 · NH · W · HD
     (each token's KV rows are read from DRAM once: the NH/group CTAs of a token share them in L2).
"""
import argparse
import json
import math
import os
import sys

from bench_common import capture_graph, require_gpu  # first: a plain message without torch or kjit
import kjit
import torch
import torch.nn.functional as F

try:
    import triton.testing

    def bench_ms(fn, rep=200):
        return triton.testing.do_bench(fn, warmup=25, rep=rep, return_mode="median")
except ImportError:  # pragma: no cover - the H200 image has triton
    def bench_ms(fn, rep=200):
        flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
        times = []
        for _ in range(10):
            fn()
        torch.cuda.synchronize()
        for _ in range(max(10, rep // 2)):
            flush.zero_()
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            stop.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(stop))
        times.sort()
        return times[len(times) // 2]

NH, HD, W, BLOCK_SIZE = 128, 512, 128, 256
TOKENS = [1, 8, 64, 512]
CACHE_SLOTS = 1 << 20
HBM_BYTES_PER_S = 4.2e12
BF16_FLOPS_PER_S = 790e12
OUT_TOL, LSE_TOL = 1e-2, 2e-3
TARGET_SPEEDUP = {1: 50.0, 64: 200.0}
TARGET_FLOOR_PCT = 50.0  # at T >= 64

class Kjit:
    """kjit.mla.swa_decode through the Python package on torch's current stream, with a workspace
    per (shape, requests) of the size kjit.mla.swa_decode_plan gives."""

    def __init__(self):
        self.ws = {}

    def workspace(self, q, kv, inv_scale, indices, lens, splits=0, group=0, cluster=0):
        key = (tuple(q.shape), kv.shape[0], splits, group, cluster)
        if key not in self.ws:
            n = self.plan(q, kv, inv_scale, indices, lens, splits, group, cluster).workspace_bytes
            self.ws[key] = torch.empty(max(n, 16), dtype=torch.uint8, device="cuda")
        return self.ws[key]

    @staticmethod
    def plan(q, kv, inv_scale, indices, lens, splits=0, group=0, cluster=0):
        """The kjit.mla.SwaDecodePlan the op runs for these requests; its first seven fields (group,
        tile, num_splits, cluster_split, split_len, ctas, launches) are what the tables and --json
        print (PLAN_FIELDS)."""
        return kjit.mla.swa_decode_plan(q, kv, inv_scale, indices, lens, num_splits=splits, head_group=group,
                                        cluster_split=cluster)

    def decode(self, q, kv, inv_scale, indices, lens, out, lse=None, scale=0.0, splits=0, group=0, cluster=0):
        kjit.mla.swa_decode(q, kv, inv_scale, indices, lens, out=out, lse=lse, scale=scale, num_splits=splits,
                            head_group=group, cluster_split=cluster,
                            workspace=self.workspace(q, kv, inv_scale, indices, lens, splits, group, cluster))


PLAN_FIELDS = ("group", "tile", "splits", "cluster", "split_len", "ctas", "launches")


def plan_key(plan):
    """The PLAN_FIELDS of a kjit.mla.SwaDecodePlan, as a tuple."""
    return tuple(plan[:len(PLAN_FIELDS)])


def plan_name(key):
    """g<group>/s<splits>x<split_len>, or g<group>/c<cluster>x<split_len> for a cluster split."""
    f = dict(zip(PLAN_FIELDS, key))
    how = f"c{f['cluster']}" if f["cluster"] > 1 else f"s{f['splits']}"
    return f"g{f['group']}/{how}x{f['split_len']}"


def has_clusters():
    return torch.cuda.get_device_capability() >= (9, 0)


def torch_fallback(q, kv_cache, inv_scale, indices, lens, block_size, scale, window):
    """The op in plain PyTorch: gather every token's window at once, dequantize
    (fp8 → bf16, times the slot's inverse scale, back to bf16), one batched SDPA over NH · T rows
    with a −inf mask for positions ≥ lens or with a negative index."""
    T, nh, hd = q.shape
    if indices.dim() == 3:
        indices = indices.squeeze(0)
    idx = indices[:T]
    slot = idx.clamp(min=0)
    rows = kv_cache[slot // block_size, slot % block_size]  # [T, W, HD] uint8
    if kv_cache.dtype == torch.uint8:
        rows = rows.view(torch.float8_e4m3fn)
    k = (rows.to(torch.bfloat16) * inv_scale[slot]).to(torch.bfloat16)  # [T, W, HD]
    masked = (torch.arange(window, device=q.device)[None, :] >= lens[:T, None]) | (idx < 0)
    bias = torch.zeros(masked.shape, dtype=torch.bfloat16, device=q.device)
    bias[masked] = float("-inf")
    qb = q.permute(1, 0, 2).reshape(nh * T, 1, hd)
    kb = k.unsqueeze(0).expand(nh, T, window, hd).reshape(nh * T, window, hd)
    mb = bias.unsqueeze(0).unsqueeze(2).expand(nh, T, 1, window).reshape(nh * T, 1, window)
    o = F.scaled_dot_product_attention(qb, kb, kb, attn_mask=mb, is_causal=False, scale=scale)
    return o.reshape(nh, T, hd).permute(1, 0, 2)


def reference64(q, kv_cache, inv_scale, indices, lens, block_size, scale, window):
    """The same function in float64 (dequantized values rounded to bf16 as the fallback does; the
    f32 product fp8 · bf16 is exact, so that is one rounding). Empty rows: out 0, lse −inf."""
    T = q.shape[0]
    outs, lses = [], []
    for t0 in range(0, T, 64):
        t1 = min(T, t0 + 64)
        idx = indices[t0:t1]
        slot = idx.clamp(min=0)
        rows = kv_cache[slot // block_size, slot % block_size].view(torch.float8_e4m3fn)
        k = (rows.float() * inv_scale[slot].float()).to(torch.bfloat16).double()  # [t, W, HD]
        s = torch.einsum("thd,tjd->thj", q[t0:t1].double(), k) * scale
        valid = (torch.arange(window, device=q.device)[None, :] < lens[t0:t1, None]) & (idx >= 0)
        s = s.masked_fill(~valid[:, None, :], float("-inf"))
        lse = torch.logsumexp(s, dim=-1)
        p = torch.exp(s - lse[..., None].clamp(min=-1e300))
        p = torch.nan_to_num(p, nan=0.0)
        outs.append(torch.einsum("thj,tjd->thd", p, k))
        lses.append(lse)
    return torch.cat(outs), torch.cat(lses)


def rel_l2(a, b, rows=None):
    a, b = a.double(), b.double()
    if rows is not None:
        a, b = a[rows], b[rows]
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def make_cache(gen):
    num_blocks = CACHE_SLOTS // BLOCK_SIZE
    # E4M3 bytes of N(0, 1)·2 (no NaN codes), and inverse scales log-uniform in [1/2, 2].
    kv = torch.empty(num_blocks, BLOCK_SIZE, HD, dtype=torch.uint8, device="cuda")
    for b0 in range(0, num_blocks, 256):
        b1 = min(num_blocks, b0 + 256)
        x = torch.randn(b1 - b0, BLOCK_SIZE, HD, device="cuda", generator=gen) * 2.0
        kv[b0:b1] = x.to(torch.float8_e4m3fn).view(torch.uint8)
    inv_scale = torch.exp2(torch.rand(CACHE_SLOTS, 1, device="cuda", generator=gen) * 2 - 1).to(torch.bfloat16)
    return kv, inv_scale


def make_tokens(T, gen, ragged=False):
    q = torch.randn(T, NH, HD, device="cuda", dtype=torch.bfloat16, generator=gen)
    indices = torch.randint(0, CACHE_SLOTS, (T, W), device="cuda", dtype=torch.int64, generator=gen)
    lens = torch.full((T,), W, device="cuda", dtype=torch.int64)
    if ragged:
        lens = torch.randint(0, W + 1, (T,), device="cuda", dtype=torch.int64, generator=gen)
        lens[0], lens[1], lens[2], lens[3] = 0, 1, W - 1, W
        drop = torch.rand(T, W, device="cuda", generator=gen) < 0.1
        indices[drop] = -1
        indices[4] = -1  # a row with no valid position
    return q, indices, lens


def check_options(kj, kv, inv_scale, gen, clusters):
    """Ragged lens (0, 1, W−1, W, random), 10% invalid indices, an all-invalid row, LSE; planned,
    one and three splits and both head groups, and on sm_90+ the cluster splits `clusters`, against
    the float64 reference."""
    T = 37
    q, indices, lens = make_tokens(T, gen, ragged=True)
    scale = 1.0 / math.sqrt(HD)
    ref_out, ref_lse = reference64(q, kv, inv_scale, indices, lens, BLOCK_SIZE, scale, W)
    results = []
    cases = [(0, 0, 0), (1, 16, 0), (0, 32, 0), (3, 32, 0), (8, 16, 0)]
    if has_clusters():
        cases += [(0, 16, c) for c in clusters] + [(0, 32, c) for c in clusters]
    for splits, group, cluster in cases:
        out = torch.full_like(q, float("nan"))
        lse = torch.full((T, NH), float("nan"), device="cuda")
        kj.decode(q, kv, inv_scale, indices, lens, out, lse=lse, splits=splits, group=group, cluster=cluster)
        torch.cuda.synchronize()
        finite = ref_lse.isfinite()
        e_out = rel_l2(out, ref_out)
        e_lse = rel_l2(lse, ref_lse, rows=finite)
        empty_ok = bool((lse[~finite] == float("-inf")).all()) and bool((out[~finite] == 0).all())
        ok = e_out <= OUT_TOL and e_lse <= LSE_TOL and bool(torch.isfinite(out).all()) and empty_ok
        results.append({"case": f"T{T} ragged+invalid+empty-row+lse splits={splits or 'auto'} group={group or 'auto'}"
                                f" cluster={cluster or 'auto'}",
                        "rel_l2_out": e_out, "rel_l2_lse": e_lse, "empty_rows_ok": empty_ok, "ok": ok})
    return results


def graph_us(fn):
    return bench_ms(capture_graph(fn).replay) * 1e3


def bench_tokens(kj, kv, inv_scale, T, gen, clusters):
    q, indices, lens = make_tokens(T, gen)
    scale = 1.0 / math.sqrt(HD)
    out = torch.empty_like(q)
    kj.decode(q, kv, inv_scale, indices, lens, out)  # compiles / loads once
    torch.cuda.synchronize()
    fb = torch_fallback(q, kv, inv_scale, indices, lens, BLOCK_SIZE, scale, W)
    ref, _ = reference64(q, kv, inv_scale, indices, lens, BLOCK_SIZE, scale, W)
    row = {"T": T, "rel_l2_vs_fallback": rel_l2(out, fb), "rel_l2_vs_ref64": rel_l2(out, ref),
           "fallback_rel_l2_vs_ref64": rel_l2(fb, ref)}
    row["ok"] = (row["rel_l2_vs_fallback"] <= OUT_TOL and row["rel_l2_vs_ref64"] <= OUT_TOL
                 and bool(torch.isfinite(out).all()))
    del fb, ref

    row["kjit_us"] = bench_ms(lambda: kj.decode(q, kv, inv_scale, indices, lens, out)) * 1e3
    row["kjit_graph_us"] = graph_us(lambda: kj.decode(q, kv, inv_scale, indices, lens, out))
    row["fallback_us"] = bench_ms(lambda: torch_fallback(q, kv, inv_scale, indices, lens, BLOCK_SIZE, scale, W),
                                  rep=500) * 1e3
    row["speedup"] = row["fallback_us"] / row["kjit_us"]
    # The mma.sync kernel (what the planner picked on the H200 before the wgmma kernel; the only
    # path off Hopper) at its R5 group, same inputs, same run.
    mma_group = 16 if T * NH // 32 < torch.cuda.get_device_properties(0).multi_processor_count else 32
    row["mma_group"] = mma_group
    mma_fn = lambda: kj.decode(q, kv, inv_scale, indices, lens, out, group=mma_group)  # noqa: E731
    row["mma_us"] = bench_ms(mma_fn) * 1e3
    row["mma_graph_us"] = graph_us(mma_fn)
    if torch.cuda.get_device_capability() == (9, 0):  # the sm_90a wgmma kernel (head group 64), forced
        wg_fn = lambda: kj.decode(q, kv, inv_scale, indices, lens, out, group=64)  # noqa: E731
        row["wgmma_us"] = bench_ms(wg_fn) * 1e3
        row["wgmma_graph_us"] = graph_us(wg_fn)
    # Forced cluster splits (sm_90+), groups of 16: eager / graph µs and the plan each ran.
    row["cluster"] = {}
    for c in clusters if has_clusters() else ():
        fn = lambda c=c: kj.decode(q, kv, inv_scale, indices, lens, out, group=16, cluster=c)  # noqa: E731
        fn()
        torch.cuda.synchronize()
        ref, _ = reference64(q, kv, inv_scale, indices, lens, BLOCK_SIZE, scale, W)
        err = rel_l2(out, ref)
        del ref
        row["ok"] = row["ok"] and err <= OUT_TOL and bool(torch.isfinite(out).all())
        row["cluster"][c] = {"plan": plan_key(kj.plan(q, kv, inv_scale, indices, lens, 0, 16, c)),
                             "rel_l2_vs_ref64": err, "eager_us": bench_ms(fn) * 1e3, "graph_us": graph_us(fn)}
    row["plan"] = plan_key(kj.plan(q, kv, inv_scale, indices, lens))
    per_token_bytes = W * HD + W * 2 + W * 8 + 8 + 2 * NH * HD * 2
    row["bytes"] = T * per_token_bytes
    row["flops"] = T * 4 * NH * W * HD
    row["floor_us"] = max(row["bytes"] / HBM_BYTES_PER_S, row["flops"] / BF16_FLOPS_PER_S) * 1e6
    row["pct_floor"] = 100.0 * row["floor_us"] / row["kjit_us"]
    row["pct_floor_graph"] = 100.0 * row["floor_us"] / row["kjit_graph_us"]
    row["kjit_gbps"] = row["bytes"] / (row["kjit_graph_us"] * 1e-6) / 1e9
    row["kjit_tflops"] = row["flops"] / (row["kjit_graph_us"] * 1e-6) / 1e12
    targets = []
    if T in TARGET_SPEEDUP:
        targets.append(row["speedup"] >= TARGET_SPEEDUP[T])
    if T >= 64:
        targets.append(row["pct_floor"] >= TARGET_FLOOR_PCT)
    row["meets_targets"] = all(targets) if targets else None
    torch.cuda.empty_cache()
    return row


def sweep_tokens(kj, kv, inv_scale, T, gen, clusters):
    """Every distinct plan the op accepts at this T (groups 16 and 32 × requested splits
    1..min(32, W/16); on sm_90+ groups 16 and 32 × the cluster splits `clusters`; group 64, the
    sm_90a wgmma kernel, unsplit, on Hopper), plus the planner's choice: correctness vs float64,
    eager and graph µs."""
    q, indices, lens = make_tokens(T, gen)
    scale = 1.0 / math.sqrt(HD)
    ref, _ = reference64(q, kv, inv_scale, indices, lens, BLOCK_SIZE, scale, W)
    auto = plan_key(kj.plan(q, kv, inv_scale, indices, lens))
    plans = {}
    hopper = torch.cuda.get_device_capability() == (9, 0)
    for group in (16, 32, 64) if hopper else (16, 32):
        if NH % group:
            continue
        for splits in range(1, (1 if group == 64 else min(32, W // 16)) + 1):
            key = plan_key(kj.plan(q, kv, inv_scale, indices, lens, splits, group, 1))
            plans.setdefault(key, (splits, group, 1))
        for cluster in clusters if group != 64 and has_clusters() else ():
            key = plan_key(kj.plan(q, kv, inv_scale, indices, lens, 0, group, cluster))
            plans.setdefault(key, (0, group, cluster))
    plans.setdefault(auto, (0, 0, 0))
    rows = []
    for key, (splits, group, cluster) in sorted(plans.items(), key=lambda kv_: (kv_[0][0], kv_[0][3], kv_[0][2])):
        out = torch.full_like(q, float("nan"))
        fn = lambda: kj.decode(q, kv, inv_scale, indices, lens, out, splits=splits, group=group,  # noqa: E731
                               cluster=cluster)
        row = dict(zip(PLAN_FIELDS, key))
        row.update({"name": plan_name(key), "requested_splits": splits, "requested_group": group,
                    "requested_cluster": cluster, "auto": key == auto})
        try:
            fn()
            torch.cuda.synchronize()
        except RuntimeError as e:  # a plan the op rejects (kjit.Error says why): note it, go on
            row.update({"error": str(e), "ok": False, "eager_us": float("inf"), "graph_us": float("inf")})
            rows.append(row)
            continue
        err = rel_l2(out, ref)
        ok = err <= OUT_TOL and bool(torch.isfinite(out).all())
        row.update({"rel_l2_vs_ref64": err, "ok": ok, "eager_us": bench_ms(fn) * 1e3, "graph_us": graph_us(fn)})
        rows.append(row)
    kj.ws.clear()  # split partials reach 1 GiB at T = 512
    torch.cuda.empty_cache()
    return auto, rows


def run_sweep(kj, kv, inv_scale, gen, tokens, clusters, json_path, seed):
    results = {}
    all_ok = True
    for T in tokens:
        auto, rows = sweep_tokens(kj, kv, inv_scale, T, gen, clusters)
        results[T] = {"auto": auto, "rows": rows}
        best_e = min(rows, key=lambda r: r["eager_us"])
        best_g = min(rows, key=lambda r: r["graph_us"])
        auto_row = next(r for r in rows if r["auto"])
        cells = " ".join(f"{r['name']}{'*' if r['auto'] else ''}"
                         f"{'' if r['ok'] else '(WRONG)'} {r['eager_us']:.1f}/{r['graph_us']:.1f}" for r in rows)
        print(f"sweep T={T}: auto {plan_name(auto)} {auto_row['eager_us']:.1f}/{auto_row['graph_us']:.1f} us"
              f" | {cells} | best eager {best_e['name']} {best_e['eager_us']:.1f},"
              f" best graph {best_g['name']} {best_g['graph_us']:.1f}", flush=True)
        all_ok = all_ok and all(r["ok"] for r in rows)
    print("(g<group>/s<splits>x<split_len>: window splits merged by a second kernel; g<group>/c<cluster>x<split_len>:"
          " a cluster split in one launch; eager/graph us; * = planner's choice; tile and CTAs in --json)")
    if json_path:
        with open(json_path, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "seed": seed,
                       "shape": {"NH": NH, "HD": HD, "W": W, "block_size": BLOCK_SIZE, "cache_slots": CACHE_SLOTS},
                       "sweep": {str(T): v for T, v in results.items()}, "ok": all_ok}, f, indent=2)
    return 0 if all_ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--tokens", type=int, nargs="*", default=TOKENS)
    ap.add_argument("--sweep", action="store_true",
                    help="time every (head group, split count / cluster split) plan per T instead of the default "
                         "comparison")
    ap.add_argument("--cluster-split", type=int, nargs="*", default=None, metavar="C",
                    help="cluster splits (2, 4, 8; sm_90+) to force: the sweep's cluster plans (default all), or "
                         "extra forced runs beside the default comparison's planner (default none)")
    args = ap.parse_args()
    require_gpu()
    kj = Kjit()
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    gen = torch.Generator(device="cuda").manual_seed(seed)
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}  seed {seed}")
    kv, inv_scale = make_cache(gen)
    if args.sweep:
        clusters = args.cluster_split if args.cluster_split is not None else [2, 4, 8]
        return run_sweep(kj, kv, inv_scale, gen, args.tokens, clusters, args.json, seed)

    clusters = args.cluster_split or []
    checks = check_options(kj, kv, inv_scale, gen, clusters)
    for c in checks:
        print(f"check {c['case']}: out rel_l2 {c['rel_l2_out']:.2e}, lse rel_l2 {c['rel_l2_lse']:.2e}, "
              f"empty rows {'ok' if c['empty_rows_ok'] else 'WRONG'}: {'ok' if c['ok'] else 'FAIL'}")

    rows = []
    for T in args.tokens:
        r = bench_tokens(kj, kv, inv_scale, T, gen, clusters)
        rows.append(r)
        wg = f"; wgmma kernel {r['wgmma_us']:.1f} / {r['wgmma_graph_us']:.1f}" if "wgmma_us" in r else ""
        wg += "".join(f"; {plan_name(v['plan'])} {v['eager_us']:.1f} / {v['graph_us']:.1f}"
                      f"{'' if v['rel_l2_vs_ref64'] <= OUT_TOL else ' (WRONG)'}" for v in r["cluster"].values())
        print(f"T={T}: kjit {r['kjit_us']:.1f} us (graph {r['kjit_graph_us']:.1f}; planner {plan_name(r['plan'])}; mma.sync kernel "
              f"g{r['mma_group']} {r['mma_us']:.1f} / {r['mma_graph_us']:.1f}{wg}), fallback {r['fallback_us']:.1f} us, "
              f"rel_l2 vs fallback {r['rel_l2_vs_fallback']:.2e}, vs float64 {r['rel_l2_vs_ref64']:.2e} "
              f"(fallback vs float64 {r['fallback_rel_l2_vs_ref64']:.2e})")

    head = (f"{'T':>5} {'kjit us':>9} {'graph us':>9} {'fallback us':>12} {'speedup':>8} {'floor us':>9} "
            f"{'% floor':>8} {'GB/s':>6} {'TFLOP/s':>8} {'ok':>4} {'targets':>8}")
    print()
    print(head)
    print("-" * len(head))
    for r in rows:
        meets = "-" if r["meets_targets"] is None else ("yes" if r["meets_targets"] else "NO")
        print(f"{r['T']:>5} {r['kjit_us']:>9.2f} {r['kjit_graph_us']:>9.2f} {r['fallback_us']:>12.1f} "
              f"{r['speedup']:>8.1f} {r['floor_us']:>9.2f} {r['pct_floor']:>8.1f} {r['kjit_gbps']:>6.0f} "
              f"{r['kjit_tflops']:>8.1f} {'yes' if r['ok'] else 'NO':>4} {meets:>8}")
    print(f"targets: speedup >= {TARGET_SPEEDUP[1]:.0f}x at T=1 and >= {TARGET_SPEEDUP[64]:.0f}x at T=64; "
          f">= {TARGET_FLOOR_PCT:.0f}% of the floor at T >= 64 (eager kjit time)")
    all_ok = all(r["ok"] for r in rows) and all(c["ok"] for c in checks)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "seed": seed,
                       "shape": {"NH": NH, "HD": HD, "W": W, "block_size": BLOCK_SIZE, "cache_slots": CACHE_SLOTS},
                       "checks": checks, "rows": rows, "ok": all_ok}, f, indent=2)
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
