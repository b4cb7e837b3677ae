"""KJIT_JIT=async from Python, in child processes on the stand-in libcuda.so.1 of the CMake build
(tests/support/simulated_driver.cc with KJIT_SIM_HOST_PATH=1: one sm_90 device, "device" memory in
host memory, launches checked and counted, nothing computes), whose folder CTest passes in
KJIT_SIM_DRIVER_DIR. A warm-up under KJIT_JIT=on builds the decode kernel of group-4 models
(rows=8); a process under KJIT_JIT=async then calls a group-16 decode, whose built-in plan (rows=16)
is not built: the call runs the rows=8 kernel, rows=16 compiles on kjit's background thread, and a
Python listener hears the fallback and the compile from the background thread (which reports the
fallback that served meanwhile, so the calling thread builds no key and writes no file)."""
import json
import os
import subprocess
import sys

import pytest

SIM = os.environ.get("KJIT_SIM_DRIVER_DIR", "")
HERE = os.path.dirname(os.path.abspath(__file__))

CHILD = """
import json, sys, threading, time
sys.path.insert(0, sys.argv[1])
from fake_dlpack import FakeTensor
import kjit
hq, hkv = int(sys.argv[2]), int(sys.argv[3])
q = FakeTensor((1, 1, hq, 128), "bf16", device=0)
k = FakeTensor((1, 64, hkv, 128), "bf16", device=0)
v = FakeTensor((1, 64, hkv, 128), "bf16", device=0)
out = FakeTensor((1, 1, hq, 128), "bf16", device=0)
seen = []
kjit.add_listener(lambda e: seen.append([e["kind"], e["params"], threading.current_thread() is threading.main_thread()]))
kjit.attention.decode(q, k, v, out=out)
deadline = time.time() + 60
while kjit.jit_mode() == "async" and not any(s[0] == "background_compile_done" for s in seen) and time.time() < deadline:
    time.sleep(0.01)  # the background thread's listener call needs the GIL
kjit.attention.decode(q, k, v, out=out)
print(json.dumps({"seen": seen, "stats": kjit.stats()}))
"""


@pytest.fixture
def simulated(tmp_path):
    if not os.path.exists(os.path.join(SIM, "libcuda.so.1")):
        pytest.skip("needs the stand-in driver of a CMake build with tests (KJIT_SIM_DRIVER_DIR, set by CTest)")
    return dict(os.environ, LD_LIBRARY_PATH=SIM, KJIT_SIM_HOST_PATH="1", KJIT_SIM_CC="9.0", KJIT_TUNING="off",
                KJIT_CACHE_DIR=str(tmp_path / "cache"))


def run(env, jit, hq, hkv):
    r = subprocess.run([sys.executable, "-c", CHILD, HERE, str(hq), str(hkv)], capture_output=True, text=True,
                       timeout=300, env=dict(env, KJIT_JIT=jit))
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_a_miss_runs_the_fallback_and_the_background_compile_reaches_a_python_listener(simulated):
    warm = run(simulated, "on", 32, 8)  # group 4: rows=8
    assert warm["stats"]["compiles"] >= 1
    got = run(simulated, "async", 32, 2)  # group 16: rows=16, not built
    kinds = [(kind, main) for kind, _, main in got["seen"]]
    fallback = [s for s in got["seen"] if s[0] == "fallback_launch"]
    assert len(fallback) == 1 and "rows=16" in fallback[0][1] and not fallback[0][2], got["seen"]
    assert ("compile", False) in kinds and ("background_compile_done", False) in kinds, got["seen"]
    assert ("compile", True) not in kinds, "compiled on the calling thread"
    s = got["stats"]
    assert (s["jit_mode"], s["compiles"], s["background_compiles"], s["fallback_launches"], s["no_fallback"]) == (
        "async", 1, 1, 1, 0)
