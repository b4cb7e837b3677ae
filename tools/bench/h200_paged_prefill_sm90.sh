#!/usr/bin/env bash
# One device call for the Hopper ragged paged prefill (run from the checkout root on the H200):
# FlashInfer's JIT modules start building in the background (when the kit is carried: KJIT_FI_KIT,
# default .peers/peers/flashinfer) while the GPU run a smoke test of the paged wgmma kernel, the
# prefill GPU suite (every paged case on both kernels), compute-sanitizer memcheck and racecheck
# on a small case, then bench_flashinfer.py (kjit beside FlashInfer fa2/fa3, same inputs), which
# imports the kjit Python package (tools/bench/python_package.sh builds it here first).
# Optional: KJIT_VARIANTS="name=DIR ..." times the cases VARIANT_CASES (comma-separated name
# prefixes of bench_flashinfer.py's cases; default the issue's and the mixed one) again with each
# kernel-source tree DIR (KJIT_KERNEL_DIR, relative to the checkout: an A/B of a kernel change);
# AB_BUILD=DIR times every case again with the kjit of another build folder (same checkout; its
# package installed beside the first, in /tmp/kjit-py-ab), and
# with AB_TESTS=FILTER runs those GPU cases of that build (AB_RACE=FILTER: racecheck too);
# DENSE=1 adds bench_attention.py --prefill-only (the dense Hopper prefill beside cuDNN).
# SAN_FILTER picks the GPU cases that memcheck and racecheck run (default: two small ones).
# PROBES="PROBE ARGS;..." runs tools/bench probes plainly (probe_<i>.txt; leading VAR=VALUE words
# go to the probe's environment, KJIT_KERNEL_DIR relative to the checkout); NCU="PROBE ARGS;..."
# runs each under Nsight Compute (--set full, every kernel alone from a flushed L2): the probe's
# call order in ncu_<i>.txt, the report's details page in ncu_<i>.csv and, per kernel, its SASS
# with the stall samples in ncu_<i>_source.csv. Both run last, or with PROBES_EARLY=1 /
# NCU_EARLY=1 before the bench (while FlashInfer's modules build: probes that need no FlashInfer,
# such as paged_prefill_ncu_probe.py --no-fa3).
# KJIT_BUILD names the build folder (default build). Each step has its own timeout, cut to what
# is left of DEADLINE_S (default 560 s: the device tool's 600 s call, less the packing), and a step
# with under 15 s left is skipped, so the results always come back. Logs and JSON land in
# $OUT/results.tar.gz.
source "$(dirname "$0")/device_guard.sh" "$0" "$@"
set -uo pipefail
root=$PWD
build=${KJIT_BUILD:-build}
final=${OUT:-/tmp/kjit-out}
out=$(mktemp -d /tmp/kjit-results.XXXXXX)
trap 'tar -C "$out" -czf "$final/results.tar.gz" . 2>/dev/null' EXIT
export LD_LIBRARY_PATH=$root/$build:$root/$build/tools:${LD_LIBRARY_PATH:-}
export KJIT_CACHE_DIR=/tmp/kjit-cache
export PYTHONUNBUFFERED=1
export PATH=$PATH:/usr/local/cuda/bin
deadline=${DEADLINE_S:-560}
# `within S CMD...`: CMD under a timeout of S seconds or what is left before the deadline.
within() {
  local left=$((deadline - SECONDS)) s=$1
  shift
  [ "$left" -lt "$s" ] && s=$left
  if [ "$s" -lt 15 ]; then echo "skipped (deadline): $*"; return 124; fi
  timeout "$s" "$@"
}
t=$root/$build/tests/gpu_attention_prefill_test
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu,power.draw --format=csv | tee "$out/gpu.txt"
source "$root/tools/bench/python_package.sh"
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  kjit_python_install "$root" "$build" "$out/python_install.txt" || echo "python package install failed"
  if [ -n "${AB_BUILD:-}" ]; then
    kjit_python_install "$root" "$AB_BUILD" "$out/python_install_ab.txt" /tmp/kjit-py-ab ||
      echo "python package install of $AB_BUILD failed"
  fi
fi
fi_kit=${KJIT_FI_KIT:-$root/.peers/peers/flashinfer}
fi_ok=0
if [ -d "$fi_kit" ] && KJIT_FI_KIT=$fi_kit source "$root/tools/bench/flashinfer_env.sh"; then
  fi_ok=1
  (cd "$root/tools/bench" && nice -n 10 timeout ${FI_BUILD_S:-420} python3 bench_flashinfer.py --prebuild) \
    > "$out/fi_prebuild.txt" 2>&1 &
  fi_pid=$!
fi
# Each probe of $NCU under Nsight Compute; each of $PROBES (e.g. "paged_prefill_ncu_probe.py --time")
# run plainly into probe_<i>.txt.
run_probes() {
  local i=0 probe
  IFS=';' read -ra probes <<< "${PROBES:-}"
  for probe in "${probes[@]}"; do
    [ -n "$probe" ] || continue
    i=$((i + 1))
    echo "=== probe $i: $probe ==="
    local envs=() words
    read -ra words <<< "$probe"
    while [ "${#words[@]}" -gt 0 ] && [[ ${words[0]} == *=* ]]; do
      if [[ ${words[0]} == KJIT_KERNEL_DIR=* && ${words[0]#*=} != /* ]]; then
        envs+=("KJIT_KERNEL_DIR=$root/${words[0]#*=}")
      else
        envs+=("${words[0]}")
      fi
      words=("${words[@]:1}")
    done
    (cd "$root/tools/bench" && within ${PROBE_S:-90} env "${envs[@]}" python3 "${words[@]}") > "$out/probe_$i.txt" 2>&1
    echo "rc=$?"; tail -n 15 "$out/probe_$i.txt"
  done
}
run_ncu() {
  local i=0 probe rep
  IFS=';' read -ra probes <<< "${NCU:-}"
  for probe in "${probes[@]}"; do
    [ -n "$probe" ] || continue
    i=$((i + 1))
    echo "=== ncu $i: $probe ==="
    rep=/tmp/kjit-ncu-$i
    # shellcheck disable=SC2086
    (cd "$root/tools/bench" && within ${NCU_S:-240} ncu --profile-from-start off --clock-control none \
      --cache-control all --set full --import-source no -f -o $rep python3 $probe) > "$out/ncu_$i.txt" 2>&1
    echo "rc=$?"; grep "^call" "$out/ncu_$i.txt"
    ncu --import $rep.ncu-rep --page details --csv > "$out/ncu_$i.csv" 2>&1
    ncu --import $rep.ncu-rep --page source --print-source sass --csv > "$out/ncu_${i}_source.csv" 2>&1
    echo "details: $(wc -l < "$out/ncu_$i.csv") lines; source: $(wc -l < "$out/ncu_${i}_source.csv") lines"
  done
}
echo "=== smoke ==="
within ${SMOKE_S:-90} "$t" --gtest_filter='*PlanOfThreeRaggedRequests*' 2>&1 | tail -n 25 | tee "$out/smoke.txt"
smoke=${PIPESTATUS[0]}
if [ "$smoke" = 0 ] || [ "${FORCE:-0}" = 1 ]; then
  echo "=== GPU suite ==="
  within ${TESTS_S:-240} "$t" > "$out/gpu_tests.txt" 2>&1
  echo "suite rc=$?"
  grep -E "FAILED|Failure|threw|rel_l2|OK \]|PASSED|Expected" "$out/gpu_tests.txt" | head -n 60
  echo "=== compute-sanitizer ==="
  for tool in memcheck racecheck; do
    within ${SAN_S:-150} compute-sanitizer --tool $tool --error-exitcode 3 "$t" \
      --gtest_filter="${SAN_FILTER:-*PlanOfThreeRaggedRequests*:*PagedHopperMoreItemsThanSms*}" > "$out/sanitize_$tool.txt" 2>&1
    echo "$tool rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Error|Hazard" "$out/sanitize_$tool.txt" | head -n 8
  done
else
  echo "smoke failed ($smoke): suite and sanitizer skipped"
fi
[ "${PROBES_EARLY:-0}" = 1 ] && run_probes
[ "${NCU_EARLY:-0}" = 1 ] && run_ncu
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  echo "=== bench ==="
  if [ "$fi_ok" = 1 ]; then
    within ${FI_WAIT_S:-300} tail --pid=$fi_pid -f /dev/null; echo "prebuild done:"; tail -n 6 "$out/fi_prebuild.txt"
  fi
  (cd "$root/tools/bench" && within ${BENCH_S:-240} python3 bench_flashinfer.py \
    --json "$out/bench_flashinfer.json") 2>&1 | tee "$out/bench_flashinfer.txt" | grep -v "^   {"
  if [ -n "${AB_BUILD:-}" ]; then
    echo "=== the same cases, kjit from the build $AB_BUILD ==="
    (cd "$root/tools/bench" && export LD_LIBRARY_PATH=$root/$AB_BUILD:$LD_LIBRARY_PATH \
      PYTHONPATH=/tmp/kjit-py-ab${PYTHONPATH:+:$PYTHONPATH} &&
      within 150 python3 bench_flashinfer.py --no-fi --json "$out/bench_ab.json") \
      2>&1 | tee "$out/bench_ab.txt" | grep "^|"
    if [ -n "${AB_TESTS:-}" ]; then
      echo "=== $AB_BUILD: GPU cases $AB_TESTS, then racecheck of ${AB_RACE:-none} ==="
      LD_LIBRARY_PATH=$root/$AB_BUILD within 200 "$root/$AB_BUILD/tests/gpu_attention_prefill_test" \
        --gtest_filter="$AB_TESTS" > "$out/ab_tests.txt" 2>&1
      echo "rc=$?"; grep -E "FAILED|Failure|threw|OK \]|PASSED" "$out/ab_tests.txt" | head -n 20
      if [ -n "${AB_RACE:-}" ]; then
        LD_LIBRARY_PATH=$root/$AB_BUILD within 120 compute-sanitizer --tool racecheck --error-exitcode 3 \
          "$root/$AB_BUILD/tests/gpu_attention_prefill_test" --gtest_filter="$AB_RACE" > "$out/ab_racecheck.txt" 2>&1
        echo "racecheck rc=$?"; grep -E "RACECHECK SUMMARY|Hazard" "$out/ab_racecheck.txt" | head -n 4
      fi
    fi
  fi
  for v in ${KJIT_VARIANTS:-}; do
    echo "=== kernel sources ${v%%=*} ==="
    (cd "$root/tools/bench" && KJIT_KERNEL_DIR=$root/${v#*=} within 120 python3 bench_flashinfer.py \
      --no-fi --cases "${VARIANT_CASES:-issue,mixed}" --json "$out/bench_${v%%=*}.json") 2>&1 | tee "$out/bench_${v%%=*}.txt" | grep "^|"
  done
fi
if [ "${DENSE:-0}" = 1 ]; then
  echo "=== dense prefill (bench_attention.py --prefill-only) ==="
  within ${DENSE_S:-200} python3 "$root/tools/bench/bench_attention.py" --prefill-only \
    --json "$out/bench_prefill.json" 2>&1 | tee "$out/bench_prefill.txt" | tail -n 14
fi
[ "${PROBES_EARLY:-0}" = 1 ] || run_probes
[ "${NCU_EARLY:-0}" = 1 ] || run_ncu
