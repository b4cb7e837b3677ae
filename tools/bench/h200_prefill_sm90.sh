#!/usr/bin/env bash
# One device call for the Hopper prefill work (run from the worktree root on the H200 machine):
# a smoke test of the wgmma kernel, the prefill GPU suite (every case on each capable variant),
# then bench_attention.py --prefill-only (wgmma and mma.sync beside cuDNN and FA2 SDPA), which
# imports the kjit Python package (tools/bench/python_package.sh builds it here first).
source "$(dirname "$0")/device_guard.sh" "$0" "$@"
set -uo pipefail
root=$PWD
out=${OUT:-/tmp/kjit-out}
export LD_LIBRARY_PATH=$root/build:$root/build/tools:${LD_LIBRARY_PATH:-}
export KJIT_CACHE_DIR=/tmp/kjit-cache
export PYTHONUNBUFFERED=1
source "$root/tools/bench/python_package.sh"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu,power.draw --format=csv | tee "$out/gpu.txt"
t=build/tests/gpu_attention_prefill_test
echo "=== smoke ==="
timeout ${SMOKE_S:-60} $t --gtest_filter='*NoQueriesOrNoKeys*:*EdgeLengths*' 2>&1 | tail -n 30 | tee "$out/smoke${TAG:-}.txt"
rc=${PIPESTATUS[0]}
if [ "$rc" != 0 ] && [ "${FORCE:-0}" != 1 ]; then echo "smoke failed ($rc): stopping"; exit 1; fi
if [ "${BENCH_FIRST:-0}" = 1 ]; then order="bench tests"; else order="tests bench"; fi
for s in $order; do
  if [ "$s" = tests ] && [ "${SKIP_TESTS:-0}" != 1 ]; then
    echo "=== GPU suite ==="
    timeout ${TESTS_S:-200} $t 2>&1 | tee "$out/gpu_tests${TAG:-}.txt" | grep -E "FAILED|Failure|PASSED|rel_l2|threw|OK \]|Expected|seed" | head -n 80
  fi
  if [ "$s" = bench ] && [ "${SKIP_BENCH:-0}" != 1 ]; then
    echo "=== bench ==="
    kjit_python_install "$root" build "$out/python_install${TAG:-}.txt" || echo "python package install failed"
    timeout ${BENCH_S:-240} python3 tools/bench/bench_attention.py \
      --prefill-only --json "$out/bench_prefill${TAG:-}.json" 2>&1 | tee "$out/bench_prefill${TAG:-}.txt" | tail -n 40
  fi
done
