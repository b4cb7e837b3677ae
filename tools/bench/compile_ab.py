#!/usr/bin/env python3
"""Cold compile time of two kjit builds, interleaved per specialization.

compile_bench times one build's whole default set, so two builds timed one after the other see
different machine weather (on a shared host a whole run drifts by up to 1.5x). This script takes
the specializations both builds have and, for each one, compiles it with build A, then B, then B,
then A, ... (--reps rounds; the order alternates), each time into an empty cache with NVRTC's own
cache off, and keeps the fastest compile of each build. It prints, per specialization, A's and
B's figures and their ratio, and at the end the median of A's figures over the median of B's and
the median of the per-specialization ratios.

  compile_ab.py --a BUILD_DIR --b BUILD_DIR --specs compile_bench.json [--reps 3] [--arch sm_90a]
                [--json OUT]

Each compile runs in a fresh process, so every figure is a process's first compile and includes
NVRTC's first-call initialization (tens of ms without a GPU, ~150-200 ms on a host with a driver
loaded); compile_bench, which compiles in one process, leaves it out.

BUILD_DIR holds tools/kjit and the libkjit it was built with (put first on LD_LIBRARY_PATH, so an
old build never runs the new library). --specs is a JSON list of {family, params} (what
compile_bench --json writes); a specialization B rejects is skipped and named.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def compile_ms(build, arch, family, params):
    """One cold compile with `build`'s kjit: its compile_ms, or None when it rejects the spec."""
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, LD_LIBRARY_PATH=os.path.abspath(build), KJIT_CACHE_DIR=cache, CUDA_CACHE_DISABLE="1")
        cmd = [os.path.join(build, "tools", "kjit"), "compile", "--json", "--arch", arch, family, *params.split()]
        r = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if r.returncode != 0:
            return None
        return float(json.loads(r.stdout)["compile_ms"])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", required=True, help="build directory A (e.g. the baseline)")
    ap.add_argument("--b", required=True, help="build directory B")
    ap.add_argument("--specs", required=True, help="JSON list of {family, params} (compile_bench --json)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    specs = [(s["family"], s["params"]) for s in json.load(open(args.specs))]
    rows = []
    for family, params in specs:
        times = {"a": [], "b": []}
        for rep in range(args.reps):
            for side in ("a", "b") if rep % 2 == 0 else ("b", "a"):
                times[side].append(compile_ms(getattr(args, side), args.arch, family, params))
        if None in times["a"] or None in times["b"]:
            print(f"skipped (a build rejects it): {family} {params}", file=sys.stderr)
            continue
        a, b = min(times["a"]), min(times["b"])
        rows.append({"family": family, "params": params, "a_ms": a, "b_ms": b, "ratio": a / b,
                     "a_all": times["a"], "b_all": times["b"]})
        print(f"{family:<24} {params[:48]:<48} {a:8.1f} {b:8.1f} {a / b:6.2f}", flush=True)

    med_a = statistics.median(r["a_ms"] for r in rows)
    med_b = statistics.median(r["b_ms"] for r in rows)
    med_ratio = statistics.median(r["ratio"] for r in rows)
    print(f"{len(rows)} specializations, {args.arch}, fastest of {args.reps} interleaved: median A {med_a:.1f} ms, "
          f"B {med_b:.1f} ms, A/B {med_a / med_b:.2f}; median of per-specialization A/B {med_ratio:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"arch": args.arch, "reps": args.reps, "median_a_ms": med_a, "median_b_ms": med_b,
                       "ratio_of_medians": med_a / med_b, "median_ratio": med_ratio, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
