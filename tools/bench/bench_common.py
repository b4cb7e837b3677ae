"""What the kjit benchmark scripts share: the imports they need (PyTorch, the kjit package) with a
plain message when one is missing, the GPU check, CUDA-graph timing, relative L2 error, table
formatting and the common command line (--json, --seed). kjit runs through its Python package on
torch tensors (DLPack) and torch's current stream, so kjit and the PyTorch peers share one process,
one stream and the same memory.

Import this module before torch or kjit: without them, or without a GPU (require_gpu), a script
exits 2 with one line in the kjit CLI's words ("<script>: error: no CUDA device: <script> needs a
GPU (why)"), not a traceback."""
import argparse
import os
import sys

_PROG = os.path.basename(sys.argv[0])


def cannot_run(missing, needs, why):
    """Exits 2 with "<script>: error: no <missing>: <script> needs <needs> (<why>)": the words and
    exit status of the kjit CLI's refusal where something a command needs is absent."""
    print(f"{_PROG}: error: no {missing}: {_PROG} needs {needs} ({why})", file=sys.stderr)
    sys.exit(2)


try:
    import torch
except ImportError as _e:
    cannot_run("PyTorch", "PyTorch with CUDA on a GPU machine", _e)
try:
    import kjit
except ImportError as _e:
    cannot_run("kjit package", "the kjit Python package (tools/setup.sh installs it; on the device, "
               "tools/bench/h200_session.sh's python step)", _e)
try:
    import triton.testing  # noqa: F401  (do_bench times every benchmark; a CPU-only torch lacks it)
except ImportError as _e:
    cannot_run("Triton", "Triton (its do_bench times the calls)", _e)


def require_gpu():
    """Exits 2, in the kjit CLI's words, unless torch and kjit both see a CUDA GPU."""
    if not torch.cuda.is_available():
        cannot_run("CUDA device", "a GPU", f"torch {torch.__version__} sees none")
    if not kjit.driver_available():
        cannot_run("CUDA device", "a GPU", kjit.driver_unavailable_reason())
    if kjit.device_count() == 0:
        cannot_run("CUDA device", "a GPU", "the driver lists no device")


def rel_l2(a, b):
    a, b = a.float(), b.float()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def capture_graph(fn):
    """fn() captured into a CUDA graph after one call on a side stream (so nothing compiles,
    builds or allocates a workspace for the first time under capture)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    torch.cuda.synchronize()
    return graph


def graph_time_us(step, n_calls):
    """Median µs per call of `step(i)` for i in range(n_calls), replayed from one CUDA graph."""
    import triton.testing

    def calls():
        for i in range(n_calls):
            step(i)
    graph = capture_graph(calls)
    ms = triton.testing.do_bench(graph.replay, warmup=25, rep=300, return_mode="median")
    return ms * 1e3 / n_calls


def profile_calls(calls, time_graphs=False):
    """The ncu probes' last step over `calls`, a list of (name, fn): make every call once (compiles,
    loads, first touches), then make each once more inside the profiled region (what `ncu
    --profile-from-start off` records), printing `call i: name` in the report's kernel order; with
    `time_graphs`, profile nothing and print each call's CUDA-graph time in µs instead."""
    import torch

    for _, fn in calls:
        fn()
    torch.cuda.synchronize()
    if not time_graphs:
        torch.cuda.profiler.start()
    for i, (name, fn) in enumerate(calls):
        if time_graphs:
            print(f"call {i}: {name}: {graph_time_us(lambda _, fn=fn: fn(), 3):.1f} us", flush=True)
            continue
        print(f"call {i}: {name}", flush=True)
        fn()
        torch.cuda.synchronize()
    if not time_graphs:
        torch.cuda.profiler.stop()


def fmt(x, spec):
    return "-" if x is None else format(x, spec)


def arg_parser(doc):
    """The options every script takes: --json and --seed."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--seed", type=int, default=None)
    return ap


def seeded_generator(args):
    """A CUDA generator seeded from --seed or at random; prints the device and the seed."""
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}  seed {seed}")
    return torch.Generator(device="cuda").manual_seed(seed), seed
