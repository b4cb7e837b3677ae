"""What the kjit benchmark scripts share: tensor pointers for the ctypes shims, CUDA-graph timing,
relative L2 error, table formatting and the common command line (shim path, --json, --seed)."""
import argparse
import os
import sys

import torch
import triton.testing


def ptr(t):
    return None if t is None else t.data_ptr()


def stream_ptr():
    return torch.cuda.current_stream().cuda_stream


def check_rc(rc, what):
    if rc != 0:
        raise RuntimeError(f"kjit {what} failed (see stderr)")


def rel_l2(a, b):
    a, b = a.float(), b.float()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def graph_time_us(step, n_calls):
    """Median µs per call of `step(i)` for i in range(n_calls), replayed from one CUDA graph."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for i in range(n_calls):
            step(i)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(n_calls):
            step(i)
    torch.cuda.synchronize()
    ms = triton.testing.do_bench(graph.replay, warmup=25, rep=300, return_mode="median")
    return ms * 1e3 / n_calls


def fmt(x, spec):
    return "-" if x is None else format(x, spec)


def arg_parser(doc):
    """The options every script takes: the shim library (positional, --lib or $KJIT_BENCH_SHIM),
    --json and --seed."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("lib_pos", nargs="?", help="path of libkjit_bench_shim.so")
    ap.add_argument("--lib", help="path of libkjit_bench_shim.so (default: $KJIT_BENCH_SHIM)")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--seed", type=int, default=None)
    return ap


def shim_path(args):
    path = args.lib or os.environ.get("KJIT_BENCH_SHIM") or args.lib_pos
    if not path:
        sys.exit("no shim library: pass --lib PATH or set KJIT_BENCH_SHIM")
    return path


def seeded_generator(args):
    """A CUDA generator seeded from --seed or at random; prints the device and the seed."""
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}  seed {seed}")
    return torch.Generator(device="cuda").manual_seed(seed), seed
