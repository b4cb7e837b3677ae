#!/usr/bin/env python3
"""kjit GQA decode attention beside its peers on one GPU, in one process, on the same tensors.

    python3 tools/bench/bench_decode.py [--json out.json] [--seed N] [--sweep-splits] [--merge MODE [MODE ...]]

kjit runs through its Python package (kjit.attention.decode on the torch tensors, torch's current
stream, a workspace of the size kjit.attention.decode_workspace_bytes gives). For each shape the
script

  1. checks kjit against torch SDPA (math backend, float32) on ragged lengths, a mask and LSE, and
     on the benchmark inputs (relative L2 must stay <= 1e-2: bf16 output);
  2. times kjit, cuDNN SDPA and FlashAttention-2 SDPA (torch.nn.attention.sdpa_kernel with
     SDPBackend.CUDNN_ATTENTION / FLASH_ATTENTION, enable_gqa=True, q as [B, Hq, 1, D]) with
     triton.testing.do_bench (median). Each implementation's calls are captured in one CUDA graph
     that rotates over enough K/V buffer sets to exceed the 60 MB L2 several times, so host-side
     launch cost is excluded for everyone and every call streams its K/V from DRAM; the graph time
     is divided by the number of calls. kjit's eager (Python call + launch) time is reported too.

GB/s counts q + K + V bytes read plus out written.

--merge forces how kjit combines its KV splits (kjit.attention.decode's merge=: "auto", "kernel"
(the merge kernel) or "cluster" (thread-block clusters, sm_90+)) in every kjit call: the checks,
the table (the first mode) and --sweep-splits. With several modes each shape is also timed under
each (kjit_<mode>_us), and the split sweep runs under each (cluster: at most 8 splits), in this
process, so the modes compare on one GPU and one set of inputs.
"""
import json
import math
import sys

from bench_common import arg_parser, fmt, graph_time_us, rel_l2, require_gpu, seeded_generator  # first
import kjit
import torch
import torch.nn.functional as F
import triton.testing
from torch.nn.attention import SDPBackend, sdpa_kernel

# (batch, q_heads, kv_heads, head_dim, kv_len): the decode shapes of the peer table in docs/perf-notes.md.
SHAPES = [
    (1, 32, 8, 128, 512),
    (1, 32, 8, 128, 8192),
    (16, 32, 8, 128, 4096),
    (64, 32, 8, 128, 4096),
    (32, 32, 8, 64, 4096),
    (16, 16, 4, 256, 4096),
]
L2_BYTES = 60e6
ROTATE_BYTES = 4 * L2_BYTES  # K/V bytes one graph cycles through
MAX_SETS = 128
TOL = 1e-2

class Kjit:
    """kjit's decode with a workspace per (shape, split count, merge), sized by the package's query;
    `merge` is the split merge of every call that names none."""

    def __init__(self, merge="auto"):
        self.ws = {}
        self.merge = merge

    def workspace(self, q, k, v, splits, merge=None):
        merge = merge or self.merge
        key = (tuple(q.shape), tuple(k.shape), splits, merge)
        if key not in self.ws:
            n = kjit.attention.decode_workspace_bytes(q, k, v, num_splits=splits, merge=merge)
            self.ws[key] = torch.empty(max(n, 16), dtype=torch.uint8, device="cuda")
        return self.ws[key]

    def decode(self, q, k, v, lens, out, mask=None, lse=None, scale=0.0, splits=0):
        kjit.attention.decode(q, k, v, lens, mask=mask, out=out, lse=lse, scale=scale, num_splits=splits,
                              merge=self.merge, workspace=self.workspace(q, k, v, splits))

    def decode_fast(self, q, k, v, lens, out, ws, merge=None):
        """The benchmarked call: per-sequence lengths, no mask, no lse, default scale, auto splits."""
        kjit.attention.decode(q, k, v, lens, out=out, merge=merge or self.merge, workspace=ws)


def reference(q, k, v, lens, mask=None, scale=None):
    """float32 SDPA (math backend) over j < lens[b] and mask[b, j]; returns out [B,1,Hq,D], lse [B,Hq]."""
    B, L, Hkv, D = k.shape
    Hq = q.shape[2]
    scale = scale or 1.0 / math.sqrt(D)
    outs, lses = [], []
    for b0 in range(0, B, 8):  # chunks keep the float32 copies small
        b1 = min(B, b0 + 8)
        qf = q[b0:b1].float().transpose(1, 2)  # [b, Hq, 1, D]
        kf = k[b0:b1].float().transpose(1, 2)  # [b, Hkv, L, D]
        vf = v[b0:b1].float().transpose(1, 2)
        keep = torch.arange(L, device=q.device)[None, :] < lens[b0:b1, None].long()
        if mask is not None:
            keep = keep & mask[b0:b1]
        attn_mask = keep[:, None, None, :]
        with sdpa_kernel([SDPBackend.MATH]):
            o = F.scaled_dot_product_attention(qf, kf, vf, attn_mask=attn_mask, scale=scale, enable_gqa=True)
        outs.append(o.transpose(1, 2))
        s = torch.einsum("bhgd,bhld->bhgl", qf.reshape(b1 - b0, Hkv, Hq // Hkv, D), kf) * scale
        s = s.masked_fill(~keep[:, None, None, :], float("-inf"))
        lses.append(torch.logsumexp(s, dim=-1).reshape(b1 - b0, Hq))
    return torch.cat(outs), torch.cat(lses)


def make_inputs(B, Hq, Hkv, D, L, gen):
    q = torch.randn(B, 1, Hq, D, device="cuda", dtype=torch.bfloat16, generator=gen)
    k = torch.randn(B, L, Hkv, D, device="cuda", dtype=torch.bfloat16, generator=gen)
    v = torch.randn(B, L, Hkv, D, device="cuda", dtype=torch.bfloat16, generator=gen)
    return q, k, v


def check_options(kj, B, Hq, Hkv, D, L, gen):
    """Ragged lengths, a random mask, LSE and forced split counts against float32 SDPA."""
    results = []
    q, k, v = make_inputs(B, Hq, Hkv, D, L, gen)
    lens = torch.randint(1, L + 1, (B,), device="cuda", dtype=torch.int32, generator=gen)
    lens[0] = L
    mask = torch.rand(B, L, device="cuda", generator=gen) < 0.8
    mask[:, 0] = True  # SDPA returns NaN for rows that attend nothing; kjit's zeros are tested in C++
    ref_out, ref_lse = reference(q, k, v, lens, mask)
    for splits in (1, 3, 0):
        out = torch.full_like(q, float("nan"))
        lse = torch.full((B, Hq), float("nan"), device="cuda")
        kj.decode(q, k, v, lens, out, mask=mask, lse=lse, splits=splits)
        torch.cuda.synchronize()
        e_out, e_lse = rel_l2(out, ref_out), rel_l2(lse, ref_lse)
        ok = e_out <= TOL and e_lse <= 1e-4 and bool(torch.isfinite(out).all())
        results.append({"shape": f"B{B} Hq{Hq} Hkv{Hkv} D{D} L{L} ragged+mask+lse splits={splits or 'auto'}",
                        "rel_l2_out": e_out, "rel_l2_lse": e_lse, "ok": ok})
    return results


def bench_shape(kj, B, Hq, Hkv, D, L, gen, merges=()):
    """The shape's row (kjit under kj.merge), and kjit under each of `merges` as kjit_<mode>_us."""
    kv_bytes = 2 * B * L * Hkv * D * 2
    io_bytes = kv_bytes + 2 * B * Hq * D * 2
    n_sets = int(min(MAX_SETS, max(2, math.ceil(ROTATE_BYTES / kv_bytes))))
    q = torch.randn(B, 1, Hq, D, device="cuda", dtype=torch.bfloat16, generator=gen)
    ks = [torch.randn(B, L, Hkv, D, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(n_sets)]
    vs = [torch.randn(B, L, Hkv, D, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(n_sets)]
    lens = torch.full((B,), L, device="cuda", dtype=torch.int32)
    out = torch.empty_like(q)
    ws = kj.workspace(q, ks[0], vs[0], 0)
    row = {"shape": f"B{B} Hq{Hq} Hkv{Hkv} D{D} L{L}", "batch": B, "q_heads": Hq, "kv_heads": Hkv,
           "head_dim": D, "kv_len": L, "bytes": io_bytes, "kv_sets": n_sets, "workspace_bytes": ws.numel()}

    # Correctness on the benchmark inputs (set 0).
    kj.decode_fast(q, ks[0], vs[0], lens, out, ws)
    torch.cuda.synchronize()
    ref_out, _ = reference(q, ks[0], vs[0], lens)
    row["rel_l2"] = rel_l2(out, ref_out)
    row["ok"] = row["rel_l2"] <= TOL and bool(torch.isfinite(out).all())

    row["kjit_us"] = graph_time_us(lambda i: kj.decode_fast(q, ks[i], vs[i], lens, out, ws), n_sets)
    for merge in merges:
        try:
            mws = kj.workspace(q, ks[0], vs[0], 0, merge)
            kj.decode_fast(q, ks[0], vs[0], lens, out, mws, merge)
        except kjit.Unsupported as e:  # merge="cluster" below sm_90
            row[f"kjit_{merge}_error"] = str(e).splitlines()[0][:200]
            continue
        torch.cuda.synchronize()
        row["ok"] = row["ok"] and rel_l2(out, ref_out) <= TOL
        row[f"kjit_{merge}_us"] = graph_time_us(
            lambda i, mws=mws, merge=merge: kj.decode_fast(q, ks[i], vs[i], lens, out, mws, merge), n_sets)
    counter = [0]

    def eager():
        i = counter[0] = (counter[0] + 1) % n_sets
        kj.decode_fast(q, ks[i], vs[i], lens, out, ws)

    row["kjit_eager_us"] = triton.testing.do_bench(eager, warmup=25, rep=200, return_mode="median") * 1e3

    qt = q.transpose(1, 2)  # [B, Hq, 1, D]
    kts = [k.transpose(1, 2) for k in ks]  # [B, Hkv, L, D] views of the BLHD cache
    vts = [v.transpose(1, 2) for v in vs]
    for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("fa2", SDPBackend.FLASH_ATTENTION)):
        def step(i, backend=backend):
            with sdpa_kernel([backend]):
                return F.scaled_dot_product_attention(qt, kts[i], vts[i], enable_gqa=True)
        try:
            peer = step(0)
            torch.cuda.synchronize()
            row[f"{name}_rel_l2"] = rel_l2(peer.transpose(1, 2), ref_out)
            row[f"{name}_us"] = graph_time_us(step, n_sets)
        except Exception as e:  # a backend that does not take this shape
            row[f"{name}_us"] = None
            row[f"{name}_error"] = str(e).splitlines()[0][:200]
    for name in ("kjit", "cudnn", "fa2"):
        us = row.get(f"{name}_us")
        row[f"{name}_gbps"] = io_bytes / (us * 1e-6) / 1e9 if us else None
    row["kjit_over_cudnn"] = row["kjit_gbps"] / row["cudnn_gbps"] if row.get("cudnn_gbps") else None
    del ks, vs
    torch.cuda.empty_cache()
    return row


def sweep_splits(kj, B, Hq, Hkv, D, L, gen, splits=(1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64), merge=None):
    """Graph-replayed µs of kjit decode for each forced split count (the planner's tuning data) under
    `merge` (kj.merge when None; "cluster" takes at most 8 splits)."""
    merge = merge or kj.merge
    kv_bytes = 2 * B * L * Hkv * D * 2
    n_sets = int(min(MAX_SETS, max(2, math.ceil(ROTATE_BYTES / kv_bytes))))
    q = torch.randn(B, 1, Hq, D, device="cuda", dtype=torch.bfloat16, generator=gen)
    ks = [torch.randn(B, L, Hkv, D, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(n_sets)]
    vs = [torch.randn(B, L, Hkv, D, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(n_sets)]
    lens = torch.full((B,), L, device="cuda", dtype=torch.int32)
    out = torch.empty_like(q)
    times = {}
    for s in (0,) + tuple(splits):
        if s and (L + s - 1) // s < 16 or (merge == "cluster" and s > 8):
            continue
        try:
            ws = kj.workspace(q, ks[0], vs[0], s, merge)
            kjit.attention.decode(q, ks[0], vs[0], lens, out=out, num_splits=s, merge=merge, workspace=ws)
        except kjit.Unsupported:  # merge="cluster" below sm_90
            break

        def step(i, s=s, ws=ws):
            kjit.attention.decode(q, ks[i], vs[i], lens, out=out, num_splits=s, merge=merge, workspace=ws)
        times[s] = graph_time_us(step, n_sets)
    del ks, vs
    torch.cuda.empty_cache()
    return times


def main():
    ap = arg_parser(__doc__)
    ap.add_argument("--sweep-splits", action="store_true", help="also time every forced split count")
    ap.add_argument("--merge", nargs="+", default=["auto"], choices=kjit.attention.DECODE_MERGES, metavar="MODE",
                    help="how kjit combines its KV splits: " + ", ".join(kjit.attention.DECODE_MERGES)
                    + " (several: the table under the first, each shape and split sweep under each)")
    args = ap.parse_args()
    require_gpu()
    kj = Kjit(args.merge[0])
    extra_merges = tuple(args.merge) if len(args.merge) > 1 else ()
    gen, seed = seeded_generator(args)

    checks = []
    for (B, Hq, Hkv, D, L) in ((3, 32, 8, 128, 1000), (3, 16, 2, 64, 777), (3, 16, 4, 256, 1500),
                               (2, 32, 32, 128, 300), (2, 32, 2, 128, 129)):
        checks += check_options(kj, B, Hq, Hkv, D, L, gen)
    for c in checks:
        print(f"check {c['shape']}: out rel_l2 {c['rel_l2_out']:.2e}, lse rel_l2 {c['rel_l2_lse']:.2e} "
              f"{'ok' if c['ok'] else 'FAIL'}")

    rows = []
    for shape in SHAPES:
        rows.append(bench_shape(kj, *shape, gen, extra_merges))
        r = rows[-1]
        print(f"{r['shape']}: kjit {r['kjit_us']:.1f} us (eager {r['kjit_eager_us']:.1f}), rel_l2 {r['rel_l2']:.2e}"
              + "".join(f"; merge={m} {r[f'kjit_{m}_us']:.1f} us" for m in extra_merges if r.get(f"kjit_{m}_us"))
              + "".join(f"; merge={m}: {r[f'kjit_{m}_error']}" for m in extra_merges if r.get(f"kjit_{m}_error"))
              + "".join(f"; {n} error: {r[n + '_error']}" for n in ("cudnn", "fa2") if r.get(n + "_error")))

    head = f"{'shape':<28} {'kjit us':>9} {'kjit GB/s':>10} {'cuDNN GB/s':>11} {'FA2 GB/s':>9} {'kjit/cuDNN':>11} {'ok':>4}"
    print()
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r['shape']:<28} {fmt(r['kjit_us'], '9.1f')} {fmt(r['kjit_gbps'], '10.0f')} "
              f"{fmt(r['cudnn_gbps'], '11.0f')} {fmt(r['fa2_gbps'], '9.0f')} {fmt(r['kjit_over_cudnn'], '11.2f')} "
              f"{'yes' if r['ok'] else 'NO':>4}")
    sweeps, sweeps_by_merge = {}, {}
    if args.sweep_splits:
        print()
        for shape in SHAPES:
            name = "B{} Hq{} Hkv{} D{} L{}".format(*shape)
            for merge in args.merge:
                t = sweep_splits(kj, *shape, gen, merge=merge)
                if merge == args.merge[0]:
                    sweeps[name] = t
                sweeps_by_merge.setdefault(name, {})[merge] = t
                print(f"splits {name}" + (f" merge={merge}" if extra_merges or merge != "auto" else "") + ": "
                      + " ".join(f"{k or 'auto'}={v:.1f}" for k, v in t.items()))
    all_ok = all(r["ok"] for r in rows) and all(c["ok"] for c in checks)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "seed": seed,
                       "merge": args.merge, "checks": checks, "rows": rows, "split_sweeps": sweeps,
                       "split_sweeps_by_merge": sweeps_by_merge, "ok": all_ok}, f, indent=2)
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
