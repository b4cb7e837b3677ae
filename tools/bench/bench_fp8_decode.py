#!/usr/bin/env python3
"""Decode-time FP8 GEMMs: kjit (its Python package) against cuBLASLt (torch._scaled_mm), alone and
in a captured decode step.

D = A · Bᵀ, e4m3 x e4m3 -> bf16, per-tensor scales, A [M, K] row-major activations and B [N, K]
the weight (nn.Linear layout), for M = 1 … 256 and N×K 7168×2048, 4096×7168 and 28672×8192 (a
70B-class MLP projection). The weight dominates the bytes: the floor is N·K bytes over the DRAM
bandwidth (--tbps; default from the device name: H200 4.8, H100 3.35 TB/s).

alone: one call at a time, triton.testing.do_bench (L2 flushed before every call, median), as in
    bench_fp8.py. Under do_bench the flush kernel precedes every call, so programmatic dependent
    launch cannot hide anything here.
graph: a decode step as it runs in a server: CUDA graphs of `calls` GEMMs launched back to back on
    one stream, each with a weight of its own (together at least ~4× the L2, so the weights come
    from DRAM), replayed under do_bench; the time per GEMM is the replay's over `calls`. kjit's
    launches carry programmatic dependent launch on sm_90 (captured as programmatic edges) and
    b_constant=True, so each GEMM's prologue and first weight stages overlap the previous one's
    tail. "mixed" rows: one graph cycling the three shapes (3 each), time per GEMM.

Every (M, N, K) is first checked: kjit against cuBLASLt's output (relative L2 ≤ 1e-2). ratio =
cuBLASLt time / kjit time (> 1: kjit faster). kjit runs on torch's current stream (the package
takes it through DLPack), which is what lets torch.cuda.graph capture it; the bench calls it once
before capturing, so nothing compiles under capture.

--vs-tiles 128x128,128x256,64x16:12,128x128:0:2: kjit is also timed, in the graph, with each of
    these tiles (and, after colons, the stage count, the multicast: 1 none, 2 CTA pairs sharing B
    (adjacent tile rows), 3 CTA pairs sharing A (adjacent tile columns, cuBLASLt's 1x2 clusters),
    then the split-K count) forced on the wgmma kernel: tiles with a 16/32/64 side at M ≤ 64 (the
    small tiles, operands swapped), the others at M > 64. Each forced run's output is checked
    against cuBLASLt's first (a mismatch counts as a failed check). The graph row reports the
    fastest ("forced") and plan / forced, and a line per forced tile follows it; the JSON has
    each; a forced plan the op refuses is reported and skipped.
--vs-any-tiles 128x64,128x32: likewise, but each at every M (a small tile at M > 64 still swaps
    the operands: the weight fills its 128-row side and M is cut into 64- or 32-row tiles).
--a-pairs: shorthand for --vs-any-tiles 128x128:0:1,128x128:0:2,128x128:0:3 (added to any given):
    the 128x128 tile unpaired, in pairs sharing B and in pairs sharing A, at every M.

Usage: bench_fp8_decode.py [--json out.json] [--m 1,16,256] [--shapes 7168x2048,...] [--tbps 4.8]
       [--vs-tiles 128x128,128x256] [--vs-any-tiles 128x160:0:3] [--a-pairs]
"""
import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# bench_common first: without torch or kjit the script exits with a message naming what is missing.
from bench_common import graph_time_us, rel_l2, require_gpu  # noqa: E402

import kjit  # noqa: E402
import torch  # noqa: E402
import triton.testing  # noqa: E402

M_VALUES = [1, 2, 4, 8, 16, 32, 64, 128, 256]
SHAPES = [(7168, 2048), (4096, 7168), (28672, 8192)]  # N, K
E4M3_MAX = 448.0
L2_MULTIPLE = 4  # the graph's weights together: at least this many L2s


def random_e4m3(shape, gen):
    return (torch.randn(shape, device="cuda", generator=gen) * 80).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)


def scaled_mm(a, b_t, sa, sb):
    out = torch._scaled_mm(a, b_t, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
    return out[0] if isinstance(out, tuple) else out


def cublaslt_a(a, w):
    """A as torch._scaled_mm takes it: some torch versions want M a multiple of 16 (padded, marked)."""
    m, k = a.shape
    sa = torch.ones(1, device="cuda")
    try:
        scaled_mm(a, w.t(), sa, sa)
        return a, False
    except RuntimeError:
        padded = torch.zeros((m + 15) // 16 * 16, k, device="cuda", dtype=torch.float8_e4m3fn)
        padded[:m] = a
        return padded, True


def do_bench_us(fn):
    return triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median") * 1e3


def default_tbps():
    name = torch.cuda.get_device_name()
    return 4.8 if "H200" in name else 3.35 if "H100" in name else None


class Problem:
    """`count` weights of one N×K (each its own memory), one activation, outputs for both libraries."""

    def __init__(self, m, n, k, count, gen):
        self.m, self.n, self.k = m, n, k
        self.a = random_e4m3((m, k), gen)
        self.w = [random_e4m3((n, k), gen) for _ in range(count)]
        self.a_t, self.padded = cublaslt_a(self.a, self.w[0])
        self.sa = torch.tensor([0.0123], device="cuda")
        self.sb = torch.tensor([0.0071], device="cuda")
        self.d = [torch.empty(m, n, device="cuda", dtype=torch.bfloat16) for _ in range(count)]

    def kjit(self, i, tile="auto"):
        """tile: "auto", or TILE[:STAGES[:MULTICAST[:SPLITS]]] forced on the wgmma kernel (0: the
        planner's; multicast 1: none, 2: B shared by CTA pairs, 3: A shared by CTA pairs)."""
        tile, *rest = tile.split(":")
        stages, multicast, splits = (int(v or 0) for v in (rest + ["0", "0", "0"])[:3])
        kernel = "auto" if tile == "auto" else "wgmma"  # a forced 128x128 alone would be the mma.sync kernel's
        kjit.fp8.gemm(self.a, self.w[i], self.sa, self.sb, d=self.d[i], b_constant=True, tile=tile, kernel=kernel,
                      stages=stages, multicast=multicast, splits=splits)

    def cublaslt(self, i):
        return scaled_mm(self.a_t, self.w[i].t(), self.sa, self.sb)


def graph_calls(n, k, l2_bytes):
    return max(8, math.ceil(L2_MULTIPLE * l2_bytes / (n * k)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--m", default=",".join(map(str, M_VALUES)), help="comma-separated M values")
    ap.add_argument("--shapes", default=",".join(f"{n}x{k}" for n, k in SHAPES), help="comma-separated NxK")
    ap.add_argument("--tbps", type=float, default=None, help="DRAM bandwidth for the floor, TB/s")
    ap.add_argument("--no-mixed", action="store_true", help="skip the mixed-shape graphs")
    ap.add_argument("--vs-tiles", default="", help="comma-separated tiles kjit also runs forced at M > 64 (graph)")
    ap.add_argument("--vs-any-tiles", default="", help="comma-separated tiles kjit also runs forced at every M (graph)")
    ap.add_argument("--a-pairs", action="store_true",
                    help="add 128x128 unpaired, B-pairs and A-pairs (multicast 1, 2, 3) forced at every M (graph)")
    args = ap.parse_args()
    vs_tiles = [t for t in args.vs_tiles.split(",") if t]
    vs_any = [t for t in args.vs_any_tiles.split(",") if t]
    if args.a_pairs:
        vs_any += [t for t in ("128x128:0:1", "128x128:0:2", "128x128:0:3") if t not in vs_any]
    require_gpu()
    ms = [int(x) for x in args.m.split(",")]
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    gen = torch.Generator(device="cuda").manual_seed(seed)
    props = torch.cuda.get_device_properties(0)
    l2_bytes = getattr(props, "L2_cache_size", 50 << 20)
    tbps = args.tbps or default_tbps()
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}  kjit {kjit.__version__}  seed {seed}  "
          f"L2 {l2_bytes >> 20} MiB  floor at {tbps} TB/s")

    rows, failures = [], 0

    def floor_us(n, k, calls=1):
        return None if tbps is None else n * k * calls / (tbps * 1e12) * 1e6

    header = f"{'mode':<6} {'M':>4} {'N x K':>12} {'calls':>5} {'kjit us':>9} {'cuBLASLt us':>11} {'ratio':>6} " \
             f"{'floor us':>8} {'kjit %floor':>11}"
    print(header)
    for n, k in shapes:
        calls = graph_calls(n, k, l2_bytes)
        for m in ms:
            p = Problem(m, n, k, calls, gen)
            # Agreement first (and every kernel loaded before any capture).
            p.kjit(0)
            ref = p.cublaslt(0)[:m]
            torch.cuda.synchronize()
            err = rel_l2(p.d[0], ref)
            ok = err <= 1e-2
            failures += 0 if ok else 1
            if not ok:
                print(f"  check {m}x{n}x{k}: kjit vs cuBLASLt rel_l2 {err:.2e} FAIL")
            t_k = do_bench_us(lambda: p.kjit(0))
            t_c = do_bench_us(lambda: p.cublaslt(0))
            g_k = graph_time_us(p.kjit, calls)
            g_c = graph_time_us(p.cublaslt, calls)
            fl = floor_us(n, k)
            forced = {}
            for tile in vs_tiles + vs_any:
                small = tile.split(":")[0].split("x")[1] in ("16", "32", "64")
                if tile in vs_any or small == (m <= 64):
                    try:
                        p.d[0].fill_(float("nan"))  # poisoned: a tile the forced plan leaves unwritten fails
                        p.kjit(0, tile)
                    except (kjit.Error, ValueError) as e:
                        print(f"  forced {tile} at {m}x{n}x{k}: refused: {str(e).splitlines()[0][:160]}")
                        continue
                    torch.cuda.synchronize()
                    err_f = rel_l2(p.d[0], ref)
                    if not err_f <= 1e-2:  # NaN fails too
                        failures += 1
                        print(f"  check forced {tile} at {m}x{n}x{k}: kjit vs cuBLASLt rel_l2 {err_f:.2e} FAIL")
                    forced[tile] = graph_time_us(lambda i, tile=tile: p.kjit(i, tile), calls)
            for mode, tk, tc in (("alone", t_k, t_c), ("graph", g_k, g_c)):
                rows.append({"mode": mode, "m": m, "n": n, "k": k, "calls": 1 if mode == "alone" else calls,
                             "kjit_us": tk, "cublaslt_us": tc, "ratio": tc / tk, "floor_us": fl,
                             "kjit_floor_fraction": None if fl is None else fl / tk,
                             "rel_l2_vs_cublaslt": err, "cublaslt_padded_m16": p.padded})
                extra = ""
                if mode == "graph" and forced:
                    best = min(forced, key=forced.get)
                    rows[-1]["kjit_forced_us"] = forced
                    extra = f"  forced {best} {forced[best]:.2f} us: plan/forced {forced[best] / tk:.2f}"
                pct = "-" if fl is None else f"{100 * fl / tk:.0f}%"
                print(f"{mode:<6} {m:>4} {f'{n}x{k}':>12} {rows[-1]['calls']:>5} {tk:>9.2f} {tc:>11.2f} "
                      f"{tc / tk:>6.2f} {fl or 0:>8.1f} {pct:>11}" + (" (cuBLASLt M padded to 16)" if p.padded else "")
                      + extra)
                if mode == "graph" and len(forced) > 1:
                    for tile, t in forced.items():
                        print(f"{'':<6} {'':>4} {'':>12} {'':>5} {t:>9.2f} {tc:>11.2f} {tc / t:>6.2f}   forced {tile}")
            del p
            torch.cuda.empty_cache()

    # A decode step of mixed shapes: the three projections, 3 weights each, cycled.
    if not args.no_mixed:
        for m in ms:
            probs = [Problem(m, n, k, 3, gen) for n, k in shapes]
            order = [(j, i) for i in range(3) for j in range(len(probs))]
            for pr in probs:
                pr.kjit(0)
                pr.cublaslt(0)
            g_k = graph_time_us(lambda c: probs[order[c][0]].kjit(order[c][1]), len(order))
            g_c = graph_time_us(lambda c: probs[order[c][0]].cublaslt(order[c][1]), len(order))
            fl = None if tbps is None else sum(floor_us(n, k) for n, k in shapes) / len(shapes)
            rows.append({"mode": "mixed", "m": m, "n": 0, "k": 0, "calls": len(order), "kjit_us": g_k,
                         "cublaslt_us": g_c, "ratio": g_c / g_k, "floor_us": fl,
                         "kjit_floor_fraction": None if fl is None else fl / g_k})
            pct = "-" if fl is None else f"{100 * fl / g_k:.0f}%"
            print(f"{'mixed':<6} {m:>4} {'3 shapes':>12} {len(order):>5} {g_k:>9.2f} {g_c:>11.2f} {g_c / g_k:>6.2f} "
                  f"{fl or 0:>8.1f} {pct:>11}")
            del probs
            torch.cuda.empty_cache()

    print(f"checks failed: {failures}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "seed": seed, "tbps": tbps, "l2_bytes": l2_bytes,
                       "rows": rows, "failures": failures}, f, indent=1)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
