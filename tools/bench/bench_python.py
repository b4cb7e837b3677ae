#!/usr/bin/env python3
"""Python call overhead of kjit's ops, in one process on one set of tensors (a GPU and torch
needed; CuPy optional):

  cpp        the C++ op call alone: the binding runs its converted call N times in C++
             (kjit._C._bench_set_repeat), the hot call runtime_bench measures
  direct     kjit.<op>(torch tensors) from Python (the direct API)
  binding    the same Python call with the C++ op skipped (kjit._C._bench_set_repeat(-1)): the
             dispatch, tensor conversions, allocations and result alone; when direct − cpp is
             well above this, the rest is the op's host work running slower between Python calls
             (caches), not the binding
  torch.ops  torch.ops.kjit.<op> (kjit.torch: torch.library define/impl)
  custom_op  the same call wrapped by torch.library.custom_op (what most extensions use)

and, for user kernels, kjit Kernel.launch with a ctypes params struct next to CuPy's RawKernel
launch of the same source. Host µs per call: median of rounds of N calls, each round ended by a
synchronize. "over cpp" = direct − cpp: what Python and the binding add (target ≤ 2 µs).

Run: python3 tools/bench/bench_python.py [--json PATH] [--calls N] [--rounds R]
"""
import argparse
import ctypes
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# bench_common first: without torch or kjit the script exits with a message naming what is missing.
from bench_common import require_gpu  # noqa: E402

import kjit  # noqa: E402
import kjit.torch  # noqa: E402,F401
import torch  # noqa: E402


def host_us(fn, calls, rounds):
    per = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        per.append((t1 - t0) / calls * 1e6)
    return statistics.median(per)


def cpp_us(fn, calls, rounds):
    per = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        kjit._C._bench_set_repeat(calls)
        try:
            fn()
        finally:
            kjit._C._bench_set_repeat(0)
        torch.cuda.synchronize()
        per.append(kjit._C._bench_last_ns() / calls / 1e3)
    return statistics.median(per)


def binding_us(fn, calls, rounds):
    kjit._C._bench_set_repeat(-1)
    try:
        return host_us(fn, calls, rounds)
    finally:
        kjit._C._bench_set_repeat(0)


def cases():
    g = torch.Generator(device="cuda").manual_seed(0)
    bf = dict(device="cuda", dtype=torch.bfloat16)
    out = {}

    # rotary: the runtime_bench shape (1 token, 8 heads, 128)
    q = torch.randn(1, 8, 128, **bf)
    cos = torch.zeros(64, 64, device="cuda")
    sin = torch.zeros(64, 64, device="cuda")
    pos = torch.zeros(1, dtype=torch.int64, device="cuda")
    out["rotary"] = (lambda: kjit.rotary(q, cos, sin, pos),
                     lambda: torch.ops.kjit.rotary_(q, cos, sin, pos),
                     ("rotary", ["q"], lambda q, cos, sin, pos: kjit.rotary(q, cos, sin, pos), (q, cos, sin, pos)))

    # decode: batch 8, GQA 32/8, 1024 keys
    qd = torch.randn(8, 1, 32, 128, **bf)
    kd = torch.randn(8, 1024, 8, 128, **bf)
    vd = torch.randn(8, 1024, 8, 128, **bf)
    lens = torch.full((8,), 1024, dtype=torch.int32, device="cuda")
    od = torch.empty_like(qd)
    out["decode"] = (lambda: kjit.attention.decode(qd, kd, vd, lens, out=od),
                     lambda: torch.ops.kjit.decode(qd, kd, vd, lens),
                     ("decode", [], lambda q, k, v, l: kjit.attention.decode(q, k, v, l), (qd, kd, vd, lens)))
    out["decode (allocating out)"] = (lambda: kjit.attention.decode(qd, kd, vd, lens), None, None)

    # prefill: 1 x 128 tokens
    qp = torch.randn(1, 128, 32, 128, **bf)
    kp = torch.randn(1, 128, 8, 128, **bf)
    op = torch.empty_like(qp)
    out["prefill"] = (lambda: kjit.attention.prefill(qp, kp, kp, causal=True, out=op),
                      lambda: torch.ops.kjit.prefill(qp, kp, kp, None, None, True), None)

    # paged decode + append
    B, ps, pages = 8, 16, 64
    kpool = torch.randn(B * pages, ps, 8, 128, **bf)
    indptr = torch.arange(0, B * pages + 1, pages, dtype=torch.int32, device="cuda")
    pidx = torch.arange(B * pages, dtype=torch.int32, device="cuda")
    last = torch.full((B,), ps, dtype=torch.int32, device="cuda")
    out["paged_decode"] = (lambda: kjit.attention.paged_decode(qd, kpool, kpool, indptr, pidx, last, out=od),
                           lambda: torch.ops.kjit.paged_decode(qd, kpool, kpool, indptr, pidx, last), None)
    newk = torch.randn(B, 8, 128, **bf)
    aip = torch.arange(B + 1, dtype=torch.int32, device="cuda")
    out["append_paged_kv"] = (
        lambda: kjit.attention.append_paged_kv(newk, newk, kpool, kpool, indptr, pidx, last, append_indptr=aip),
        lambda: torch.ops.kjit.append_paged_kv_(newk, newk, kpool, kpool, indptr, pidx, last, aip), None)

    # MLA SWA decode: 4 tokens, 64 heads, W 128
    qs = torch.randn(4, 64, 512, **bf)
    kv = torch.zeros(64, 64, 512, dtype=torch.uint8, device="cuda")
    inv = torch.ones(64 * 64, 1, **bf)
    idx = torch.randint(0, 64 * 64, (4, 128), device="cuda", generator=g)
    sl = torch.full((4,), 128, dtype=torch.int64, device="cuda")
    os_ = torch.empty_like(qs)
    out["swa_decode"] = (lambda: kjit.mla.swa_decode(qs, kv, inv, idx, sl, out=os_),
                         lambda: torch.ops.kjit.swa_decode(qs, kv, inv, idx, sl), None)

    if torch.cuda.get_device_capability() >= (8, 9):
        x = torch.randn(16, 4096, device="cuda", dtype=torch.bfloat16)
        y = torch.empty(16, 4096, device="cuda", dtype=torch.float8_e4m3fn)
        si = torch.empty(16, device="cuda")
        out["fp8.quantize (row)"] = (lambda: kjit.fp8.quantize(x, y=y, scale_inv=si, granularity="row"),
                                     lambda: torch.ops.kjit.fp8_quantize(x, "e4m3", "row"), None)
        w = torch.randn(4096, 4096, device="cuda").to(torch.float8_e4m3fn)
        sw = torch.ones(4096, device="cuda")
        d = torch.empty(16, 4096, device="cuda", dtype=torch.bfloat16)
        out["fp8.gemm 16x4096x4096"] = (lambda: kjit.fp8.gemm(y, w, si, sw, d=d),
                                        lambda: torch.ops.kjit.fp8_gemm(y, w, si, sw), None)
    return out


def custom_op_wrappers():
    """torch.library.custom_op wrappers of two ops, as an extension would write them."""
    @torch.library.custom_op("kjit_bench::rotary", mutates_args=("q",))
    def rotary(q: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, pos: torch.Tensor) -> None:
        kjit.rotary(q, cos, sin, pos)

    @torch.library.custom_op("kjit_bench::decode", mutates_args=())
    def decode(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lens: torch.Tensor) -> torch.Tensor:
        return kjit.attention.decode(q, k, v, lens)

    return {"rotary": rotary, "decode": decode}


SAXPY = r"""
struct P { float* y; const float* x; float a; int n; };
extern "C" __global__ void saxpy_c(float* y, const float* x, float a, int n) {
  int i = blockIdx.x * 256 + threadIdx.x; if (i < n) y[i] += a * x[i];
}
__global__ void saxpy(const __grid_constant__ P p) {
  int i = blockIdx.x * 256 + threadIdx.x; if (i < p.n) p.y[i] += p.a * p.x[i];
}
"""


class P(ctypes.Structure):
    _fields_ = [("y", ctypes.c_void_p), ("x", ctypes.c_void_p), ("a", ctypes.c_float), ("n", ctypes.c_int)]


def user_kernel_rows(calls, rounds):
    rows = []
    n = 4096
    x = torch.randn(n, device="cuda")
    y = torch.zeros(n, device="cuda")
    k = kjit.Program(SAXPY, ["saxpy"]).load().kernel("saxpy")
    stream = torch.cuda.current_stream().cuda_stream
    params = P(y.data_ptr(), x.data_ptr(), 0.0, n)
    rows.append(("user kernel: kjit Kernel.launch (ctypes struct)",
                 host_us(lambda: k.launch(n // 256, 256, params, stream=stream), calls, rounds)))
    raw = bytes(params)
    rows.append(("user kernel: kjit Kernel.launch (bytes)",
                 host_us(lambda: k.launch(n // 256, 256, raw, stream=stream), calls, rounds)))
    try:
        import cupy
        ck = cupy.RawKernel(SAXPY, "saxpy_c")
        cx, cy = cupy.from_dlpack(x), cupy.from_dlpack(y)
        a = cupy.float32(0.0)
        nn = cupy.int32(n)
        ck((n // 256,), (256,), (cy, cx, a, nn))
        cupy.cuda.Device().synchronize()
        rows.append(("user kernel: CuPy RawKernel launch",
                     host_us(lambda: ck((n // 256,), (256,), (cy, cx, a, nn)), calls, rounds)))
    except ImportError:
        rows.append(("user kernel: CuPy RawKernel launch (cupy missing)", float("nan")))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    require_gpu()
    calls, rounds = args.calls, args.rounds
    wrappers = custom_op_wrappers()
    results = []
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}  kjit {kjit.__version__}")
    print(f"{'op':<26}{'cpp':>8}{'direct':>9}{'over cpp':>10}{'binding':>9}{'torch.ops':>11}{'custom_op':>11}"
          "   (host µs/call)")
    for name, (direct, via_ops, custom) in cases().items():
        direct()  # compile/load once
        via_ops and via_ops()
        torch.cuda.synchronize()
        cpp = cpp_us(direct, calls, rounds)
        d = host_us(direct, calls, rounds)
        b = binding_us(direct, calls, rounds)
        t = host_us(via_ops, calls, rounds) if via_ops else float("nan")
        c = float("nan")
        if custom:
            wname, _, _, cargs = custom
            w = wrappers[wname]
            w(*cargs)
            c = host_us(lambda: w(*cargs), calls, rounds)
        row = dict(op=name, cpp_us=cpp, direct_us=d, over_cpp_us=d - cpp, binding_us=b, torch_ops_us=t,
                   custom_op_us=c)
        results.append(row)
        print(f"{name:<26}{cpp:8.2f}{d:9.2f}{d - cpp:10.2f}{b:9.2f}{t:11.2f}{c:11.2f}")
    for label, us in user_kernel_rows(calls, rounds):
        results.append(dict(op=label, direct_us=us))
        print(f"{label:<52}{us:8.2f}")
    worst = max(r["over_cpp_us"] for r in results if "over_cpp_us" in r and "allocating" not in r["op"])
    print(f"largest direct-API overhead over the C++ hot call (passed-in outputs): {worst:.2f} µs (target <= 2)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
