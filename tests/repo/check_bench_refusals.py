"""Every benchmark script that needs PyTorch, kjit and a GPU refuses, where one is missing, as the
kjit CLI does: exit status 2 and one line "<script>: error: no <what>: <script> needs <what> (why)".
Skipped (77) on a machine where torch sees a GPU: there the scripts would run."""
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.path.join(ROOT, "tools", "bench")

try:
    import torch
    if torch.cuda.is_available():
        print("torch sees a CUDA GPU: the scripts would run")
        sys.exit(77)
except ImportError:
    pass

scripts = sorted(f for f in os.listdir(BENCH)
                 if f.endswith(".py") and f != "bench_common.py"
                 and "from bench_common import" in open(os.path.join(BENCH, f)).read())
problems = []
with tempfile.TemporaryDirectory() as cache:
    for name in scripts:
        r = subprocess.run([sys.executable, os.path.join(BENCH, name)], capture_output=True, text=True, timeout=120,
                           env=dict(os.environ, KJIT_CACHE_DIR=cache))
        lines = r.stderr.strip().splitlines()
        shape = re.compile(rf"{re.escape(name)}: error: no [^:]+: {re.escape(name)} needs .+ \(.+\)")
        if r.returncode != 2 or len(lines) != 1 or not shape.fullmatch(lines[0]):
            problems.append(f"{name}: exit {r.returncode}, stderr:\n{r.stderr}")
        else:
            print(f"{name}: {lines[0]}")
if not scripts:
    problems.append("no script imports bench_common")
for p in problems:
    print(p)
sys.exit(1 if problems else 0)
