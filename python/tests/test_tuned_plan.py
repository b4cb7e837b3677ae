"""plan_paged_prefill plans for the device: a tuning table installed for it chooses the tile of a
call in its bucket. Runs in a child process on the stand-in libcuda.so.1 of the CMake build
(tests/support/simulated_driver.cc with KJIT_SIM_HOST_PATH=1: one sm_90 device, "device" memory in
host memory, nothing launches), whose folder CTest passes in KJIT_SIM_DRIVER_DIR."""
import json
import os
import subprocess
import sys

import pytest

SIM = os.environ.get("KJIT_SIM_DRIVER_DIR", "")

# Two requests of 1000 query rows over 2000 KV tokens (125 pages of 16), 16 q heads, causal: the
# built-in rule takes 128-row tiles. The bucket (docs/tuning.md): head_dim, causal, pow2(total_q
# * q_heads), pow2(mean q rows), pow2(max_kv_len), page_size.
CALL = dict(qo_indptr=[0, 1000, 2000], head_dim=128, kv_indptr=[0, 125, 250], last_page_len=[16, 16], q_heads=16,
            page_size=16, causal=True)
BUCKET = [128, 1, 32768, 1024, 2048, 16]

CHILD = """
import json, sys
import kjit
call = json.loads(sys.argv[1])
def plan(**over):
    p = kjit.attention.plan_paged_prefill(**dict(call, **over))
    return {"tile_rows": p.tile_rows, "variant": p.variant, "num_work": p.num_work}
print(json.dumps({"auto": plan(), "forced": plan(tile_rows=128), "other_bucket": plan(causal=False),
                  "forced_variant": plan(variant="wgmma")}))
"""


def choice(point):
    return {"family": "attention.paged_prefill", "point": point, "knobs": {"pack_gqa": 0}, "us": 10.0, "eager_us": 11.0,
            "spread": 0.01, "threads": 128, "smem": 0, "registers": -1, "cluster": 1}


@pytest.fixture
def simulated(tmp_path):
    if not os.path.exists(os.path.join(SIM, "libcuda.so.1")):
        pytest.skip("needs the stand-in driver of a CMake build with tests (KJIT_SIM_DRIVER_DIR, set by CTest)")
    return dict(os.environ, LD_LIBRARY_PATH=SIM, KJIT_SIM_HOST_PATH="1", KJIT_SIM_CC="9.0",
                KJIT_CACHE_DIR=str(tmp_path / "cache"))


def run(env, *args):
    r = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_a_tuned_table_for_the_device_chooses_the_tile(simulated):
    device = run(simulated, "-m", "kjit", "devices", "--json")["devices"][0]
    untuned = run(simulated, "-c", CHILD, json.dumps(CALL))
    assert untuned["auto"] == {"tile_rows": 128, "variant": "auto", "num_work": 16}

    # The table `kjit tune paged_prefill` would publish for this device: 64-row tiles won. "planner"
    # is the paged_prefill planner's revision (TuneOpSpec::planner): an entry of another revision
    # is dropped with a warning, so this test fails when the revision moves without it.
    fingerprint = dict(device["fingerprint"], id=device["fingerprint_id"])
    table = {"format": "kjit-tuning", "version": 1, "fingerprint": fingerprint,
             "entries": [{"op": "paged_prefill", "bucket": BUCKET, "shape": "batch=2 q_len=1000 kv_len=2000",
                          "winner": choice("head_dim=128 block_m=64"), "runner_up": None,
                          "default": choice("head_dim=128 block_m=128"), "margin": 0.1, "gain": 0.1,
                          "tuned_unix": 1764547200, "planner": 4}]}
    tuning = os.path.join(simulated["KJIT_CACHE_DIR"], "tuning")
    os.makedirs(tuning)
    with open(os.path.join(tuning, device["fingerprint_id"] + ".json"), "w") as f:
        json.dump(table, f)

    tuned = run(simulated, "-c", CHILD, json.dumps(CALL))
    # The measured kernel, strictly: 2 requests x ceil(1000 / 64) work items.
    assert tuned["auto"] == {"tile_rows": 64, "variant": "mma", "num_work": 32}
    # A forced tile and another bucket are the table's to leave alone.
    assert tuned["forced"] == untuned["forced"] == {"tile_rows": 128, "variant": "auto", "num_work": 16}
    assert tuned["other_bucket"] == untuned["other_bucket"] == untuned["auto"]
    # A forced Hopper kernel gets a tile it runs (128), not the table's 64-row mma.sync tile.
    assert tuned["forced_variant"] == {"tile_rows": 128, "variant": "wgmma", "num_work": 16}
    # KJIT_TUNING=off: the built-in rule again.
    assert run(dict(simulated, KJIT_TUNING="off"), "-c", CHILD, json.dumps(CALL))["auto"] == untuned["auto"]
