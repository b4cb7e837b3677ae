#!/usr/bin/env python3
"""kjit FP8 GEMM and quantize against PyTorch / cuBLASLt on one GPU, in one process.

kjit runs through its Python package (kjit.fp8.gemm / quantize on the torch tensors, torch's
current stream; forced kernels, tiles, stages, splits and CTA pairs are gemm's keyword arguments).

GEMM (e4m3 x e4m3 -> bf16, per-tensor scales; D = A · Bᵀ with A [M, K] row-major and B [N, K]
row-major, the nn.Linear layout): every shape is first checked against a float64 GEMM on the
dequantized operands (relative L2 ≤ 1e-2) and against torch._scaled_mm (cuBLASLt), then timed
with triton.testing.do_bench (median ms). TFLOP/s = 2·M·N·K / time. kjit runs twice: the
planner's kernel (on sm_90 the TMA + wgmma kernel: persistent, or split-K over clusters when the
output has fewer tiles than half the SMs; for M ≤ 64 the 128x16/32/64 tiles with A and B swapped)
and the mma.sync kernel forced. --sweep adds forced wgmma variants per shape (tiles and stages for
large M; split counts of the small and the 128x128 tiles for small M, swapped 128x64 tiles up to
M = 256). torch._scaled_mm gets b = B.t() (column-major [K, N], what cuBLASLt wants); shapes it
rejects (M not a multiple of 16 on some versions) are padded to M = 16 for it, and marked.

Quantize (16384 × 7168 bf16 → e4m3 with amax): kjit's one-pass per-tensor quantize with a given
multiplier and amax, against torch's x.abs().amax() then (x * s).clamp(-448, 448).to(e4m3).
Effective TB/s = (2 B read + 1 B written per element) / time, the same bytes for both. kjit's
bytes are checked against torch computing the same f32 product: (x.float() * s).clamp().to().
Extra kjit rows: dynamic per-tensor (two passes), per-row and 1×128 block quantization.

Usage: bench_fp8.py [--json out.json] [--sweep] [--gemm-only]
"""
import argparse
import json
import sys

from bench_common import require_gpu  # first: a plain message without torch or kjit
import kjit
import torch

GEMM_SHAPES = [(4096, 4096, 4096), (4096, 7168, 2048), (128, 4096, 7168), (64, 7168, 2048)]
for _n, _k in ((7168, 2048), (4096, 7168)):
    for _m in (1, 16, 64, 128, 256, 1024, 4096):
        if (_m, _n, _k) not in GEMM_SHAPES:
            GEMM_SHAPES.append((_m, _n, _k))
QUANT_SHAPE = (16384, 7168)
E4M3_MAX = 448.0


class Kjit:
    """kjit.fp8.gemm / quantize through the Python package on torch's current stream."""

    @staticmethod
    def gemm(a, b, d, sa, sb, block=False, tile="auto", stages=0, kernel="auto", splits=0, multicast=0):
        """kernel: "auto" (the planner's choice), "mma" (mma.sync) or "wgmma" (sm_90); tile: "auto"
        or a kjit.fp8 tile name ("128x16", ...); stages: 0 the planner's; splits: 0 the planner's,
        1..4 forced (wgmma); multicast: 0 the planner's, 1 off, 2 B shared by CTA pairs, 3 A shared by
        CTA pairs (wgmma)."""
        kjit.fp8.gemm(a, b, sa, sb, d=d, scale_mode="blockwise" if block else "tensorwise", kernel=kernel, tile=tile,
                      stages=stages, splits=splits, multicast=multicast)

    @staticmethod
    def quantize(x, y, granularity="tensor", multiplier=None, multiplier_value=1.0, dynamic=False, amax=None,
                 scale_inv=None):
        kjit.fp8.quantize(x, y=y, granularity=granularity, dynamic=dynamic,
                          multiplier=multiplier_value if multiplier is None else multiplier, amax=amax,
                          scale_inv=scale_inv)


def bench(fn):
    try:
        import triton.testing
        return triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")
    except ImportError:
        for _ in range(10):
            fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(50):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b))
        times.sort()
        return times[len(times) // 2]


def rel_l2(x, ref):
    x = x.double()
    return ((x - ref).norm() / ref.norm().clamp_min(1e-300)).item()


def random_e4m3(shape, dev):
    """Operands as the quantizer makes them: normal values scaled into the e4m3 range."""
    return (torch.randn(shape, device=dev) * 80).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)


def scaled_mm(a, b_t, sa, sb):
    out = torch._scaled_mm(a, b_t, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
    return out[0] if isinstance(out, tuple) else out


def sweep_variants(m):
    """(label, kwargs) of forced wgmma variants worth timing at M."""
    if m >= 1024:
        return [("128x256 s3 pairs", dict(kernel="wgmma", tile="128x256", stages=3, splits=1, multicast=2)),
                ("128x256 s3 single", dict(kernel="wgmma", tile="128x256", stages=3, splits=1, multicast=1)),
                ("128x128 s5 pairs", dict(kernel="wgmma", tile="128x128", stages=5, splits=1, multicast=2)),
                ("128x128 s5 single", dict(kernel="wgmma", tile="128x128", stages=5, splits=1, multicast=1))]
    small = []
    if m <= 64:  # the swapped small tiles, 128 rows and 64
        tile = "128x16" if m <= 16 else "128x32" if m <= 32 else "128x64"
        tile64 = "64x16" if m <= 16 else "64x32" if m <= 32 else "64x64"
        small = [(f"small split{s}", dict(kernel="wgmma", tile=tile, splits=s)) for s in (1, 2, 3, 4)] + \
            [(f"small64 split{s}", dict(kernel="wgmma", tile=tile64, splits=s)) for s in (1, 2)]
    elif m <= 256:  # swapped 128x64 tiles over M / 64 activation tiles
        small = [(f"swap 128x64 split{s}", dict(kernel="wgmma", tile="128x64", splits=s)) for s in (1, 2)]
    return small + [(f"128x128 split{s}", dict(kernel="wgmma", tile="128x128", splits=s)) for s in (1, 2, 3, 4)] + \
        [("128x256 split2", dict(kernel="wgmma", tile="128x256", splits=2))] + \
        ([("128x128 pairs", dict(kernel="wgmma", tile="128x128", splits=1, multicast=2))] if m >= 256 else [])


def gemm_rows(kj, dev, failures, sweep=False):
    rows = []
    for m, n, k in GEMM_SHAPES:
        a = random_e4m3((m, k), dev)
        b = random_e4m3((n, k), dev)
        sa = torch.tensor([0.0123], device=dev, dtype=torch.float32)
        sb = torch.tensor([0.0071], device=dev, dtype=torch.float32)
        d = torch.empty(m, n, device=dev, dtype=torch.bfloat16)
        kj.gemm(a, b, d, sa, sb)
        torch.cuda.synchronize()
        ref = (a.double() @ b.double().t()) * (sa.double() * sb.double())
        err_ref = rel_l2(d, ref)
        # cuBLASLt through torch._scaled_mm; pad M to 16 if this torch insists.
        padded = False
        try:
            t_out = scaled_mm(a, b.t(), sa, sb)
            a_t = a
        except RuntimeError:
            padded = True
            a_t = torch.zeros(16, k, device=dev, dtype=torch.float8_e4m3fn)
            a_t[:m] = a
            t_out = scaled_mm(a_t, b.t(), sa, sb)[:m]
        torch.cuda.synchronize()
        err_torch = rel_l2(d, t_out.double())
        ok = err_ref <= 1e-2 and err_torch <= 1e-2
        failures[0] += 0 if ok else 1
        print(f"  check {m}x{n}x{k}: rel_l2 vs float64 {err_ref:.2e}, vs torch._scaled_mm {err_torch:.2e} "
              f"{'ok' if ok else 'FAIL'}")
        # The mma.sync kernel on its own (what sm_89 and small M run), checked too.
        d_mma = torch.empty_like(d)
        kj.gemm(a, b, d_mma, sa, sb, kernel="mma")
        torch.cuda.synchronize()
        err_mma = rel_l2(d_mma, ref)
        if err_mma > 1e-2:
            failures[0] += 1
            print(f"  check {m}x{n}x{k} mma.sync: rel_l2 vs float64 {err_mma:.2e} FAIL")
        t_kjit = bench(lambda: kj.gemm(a, b, d, sa, sb))
        t_mma = bench(lambda: kj.gemm(a, b, d_mma, sa, sb, kernel="mma"))
        bt = b.t()
        t_torch = bench(lambda: scaled_mm(a_t, bt, sa, sb))
        flops = 2.0 * m * n * k
        variants = {}
        if sweep:
            for label, kw in sweep_variants(m):
                d_v = torch.empty_like(d)
                try:
                    kj.gemm(a, b, d_v, sa, sb, **kw)
                except RuntimeError:
                    continue
                torch.cuda.synchronize()
                err_v = rel_l2(d_v, ref)
                if err_v > 1e-2:
                    failures[0] += 1
                    print(f"  check {m}x{n}x{k} {label}: rel_l2 vs float64 {err_v:.2e} FAIL")
                t_v = bench(lambda: kj.gemm(a, b, d_v, sa, sb, **kw))
                variants[label] = {"ms": t_v, "tflops": flops / (t_v * 1e-3) / 1e12, "ratio": t_torch / t_v}
            print(f"  sweep {m}x{n}x{k} (cuBLASLt {t_torch * 1e3:.1f} us, kjit {t_kjit * 1e3:.1f} us): " +
                  ", ".join(f"{lab} {v['ms'] * 1e3:.1f} us {v['tflops']:.0f} TF/s x{v['ratio']:.2f}"
                            for lab, v in variants.items()))
        rows.append({
            "variants": variants,
            "m": m, "n": n, "k": k, "kjit_ms": t_kjit, "kjit_mma_ms": t_mma, "torch_ms": t_torch,
            "kjit_tflops": flops / (t_kjit * 1e-3) / 1e12, "kjit_mma_tflops": flops / (t_mma * 1e-3) / 1e12,
            "torch_tflops": flops / (t_torch * 1e-3) / 1e12,
            "ratio_kjit_over_torch": t_torch / t_kjit, "ratio_mma_over_torch": t_torch / t_mma,
            "torch_padded_m16": padded, "rel_l2_vs_float64": err_ref, "rel_l2_vs_torch": err_torch,
            "rel_l2_mma_vs_float64": err_mma,
        })
    return rows


def quantize_rows(kj, dev, failures):
    rows_, cols = QUANT_SHAPE
    x = torch.randn(rows_, cols, device=dev).to(torch.bfloat16)
    y = torch.empty(rows_, cols, device=dev, dtype=torch.float8_e4m3fn)
    amax = torch.empty(1, device=dev, dtype=torch.float32)
    sinv = torch.empty(1, device=dev, dtype=torch.float32)
    s = torch.tensor(E4M3_MAX / 4.5, device=dev, dtype=torch.float32)  # saturates the tail
    mult = s.reshape(1).clone()

    kj.quantize(x, y, "tensor", multiplier=mult, amax=amax, scale_inv=sinv)
    torch.cuda.synchronize()
    same_f32 = (x.float() * s).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    mismatches = (y.view(torch.uint8) != same_f32.view(torch.uint8)).sum().item()
    amax_ok = amax.item() == x.abs().amax().float().item()
    ok = mismatches == 0 and amax_ok
    failures[0] += 0 if ok else 1
    print(f"  check quantize {rows_}x{cols}: {mismatches} bytes differ from torch's f32 product, "
          f"amax {'equal' if amax_ok else 'DIFFERS'} {'ok' if ok else 'FAIL'}")

    eff = rows_ * cols * 3.0

    def torch_quant():
        xa = x.abs().amax()
        (x * s).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
        return xa

    t_kjit = bench(lambda: kj.quantize(x, y, "tensor", multiplier=mult, amax=amax, scale_inv=sinv))
    t_torch = bench(torch_quant)
    out = [{"what": "per-tensor given multiplier + amax (one pass)", "kjit_ms": t_kjit, "torch_ms": t_torch,
            "kjit_tbs": eff / (t_kjit * 1e-3) / 1e12, "torch_tbs": eff / (t_torch * 1e-3) / 1e12,
            "ratio_kjit_over_torch": t_torch / t_kjit, "mismatched_bytes": mismatches}]
    row_s = torch.empty(rows_, device=dev, dtype=torch.float32)
    blk_s = torch.empty(rows_, (cols + 127) // 128, device=dev, dtype=torch.float32)
    extra = [
        # scale_inv passed: the package would otherwise allocate one per call
        ("per-tensor dynamic (amax pass + convert)",
         lambda: kj.quantize(x, y, "tensor", dynamic=True, amax=amax, scale_inv=sinv)),
        ("per-row (token) scales", lambda: kj.quantize(x, y, "row", scale_inv=row_s)),
        ("1x128 block scales", lambda: kj.quantize(x, y, "block1x128", scale_inv=blk_s)),
    ]
    for what, fn in extra:
        t = bench(fn)
        out.append({"what": what, "kjit_ms": t, "kjit_tbs": eff / (t * 1e-3) / 1e12})
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", default=None)
    ap.add_argument("--sweep", action="store_true", help="also time forced wgmma tiles/stages/splits per shape")
    ap.add_argument("--gemm-only", action="store_true", help="skip the quantize rows")
    args = ap.parse_args()
    require_gpu()
    kj = Kjit()
    torch.manual_seed(0)
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    print(f"device: {props.name} (sm_{props.major}{props.minor}, {props.multi_processor_count} SMs), "
          f"torch {torch.__version__}")
    failures = [0]
    gemm = gemm_rows(kj, dev, failures, args.sweep)
    quant = [] if args.gemm_only else quantize_rows(kj, dev, failures)

    print()
    print("GEMM e4m3 x e4m3 -> bf16, per-tensor scales. kjit = the planner's kernel (wgmma on sm_90),")
    print("mma = the mma.sync kernel forced; ratio = cuBLASLt time / kjit time (> 1: kjit faster)")
    print(f"{'M x N x K':<26} {'kjit ms':>9} {'kjit TF/s':>10} {'mma TF/s':>9} {'cuBLASLt ms':>12} "
          f"{'cuBLASLt TF/s':>14} {'kjit/cuBLASLt':>14} {'mma/cuBLASLt':>13}")
    for r in gemm:
        name = f"{r['m']}x{r['n']}x{r['k']}" + (" (torch M->16)" if r["torch_padded_m16"] else "")
        print(f"{name:<26} {r['kjit_ms']:>9.4f} {r['kjit_tflops']:>10.1f} {r['kjit_mma_tflops']:>9.1f} "
              f"{r['torch_ms']:>12.4f} {r['torch_tflops']:>14.1f} {r['ratio_kjit_over_torch']:>14.2f} "
              f"{r['ratio_mma_over_torch']:>13.2f}")
    print()
    print(f"{'quantize 16384x7168 bf16->e4m3':<46} {'kjit ms':>9} {'kjit TB/s':>10} {'torch ms':>9} "
          f"{'torch TB/s':>11} {'speedup':>8}")
    for r in quant:
        if "torch_ms" in r:
            print(f"{r['what']:<46} {r['kjit_ms']:>9.4f} {r['kjit_tbs']:>10.2f} {r['torch_ms']:>9.4f} "
                  f"{r['torch_tbs']:>11.3f} {r['ratio_kjit_over_torch']:>8.1f}")
        else:
            print(f"{r['what']:<46} {r['kjit_ms']:>9.4f} {r['kjit_tbs']:>10.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": props.name, "gemm": gemm, "quantize": quant, "check_failures": failures[0]}, f,
                      indent=2)
    return 1 if failures[0] else 0


if __name__ == "__main__":
    sys.exit(main())
