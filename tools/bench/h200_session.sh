#!/usr/bin/env bash
# One call on the lent H200: GPU tests, `kjit selftest` and every benchmark, kjit beside its peers
# in the same run. Build here first (cmake --build build), then through the device tool:
#   run(command="bash tools/bench/h200_session.sh", carry=["build"])
# Results land under $OUT (logs + JSON); the last lines printed are the summary table.
source "$(dirname "$0")/device_guard.sh" "$0" "$@"
set -uo pipefail
root=$PWD
build=${KJIT_BUILD:-build}
# Everything lands in one folder, packed at the end into $OUT/results.tar.gz (the device tool
# brings back at most 8 files).
final=${OUT:-/tmp/kjit-out}
out=$(mktemp -d /tmp/kjit-results.XXXXXX)
trap 'tar -C "$out" -czf "$final/results.tar.gz" . 2>/dev/null' EXIT
# The build tree records absolute paths (CTest, RPATH): make this checkout appear where it was built.
if [ ! -e /work/main ]; then mkdir -p /work && ln -s "$root" /work/main; fi
export LD_LIBRARY_PATH=$root/$build:$root/$build/tools:${LD_LIBRARY_PATH:-}
export KJIT_CACHE_DIR=/tmp/kjit-session-cache  # its own: the session wipes it (rm -rf below)
export PYTHONUNBUFFERED=1
kjit=$root/$build/tools/kjit
step() { echo; echo "=== $* ==="; }
# The kjit Python package, which every bench_*.py imports: the python step installs it, and a
# bench or flashinfer step that runs without the python step installs it first (once a run).
source "$root/tools/bench/python_package.sh"
python_ready=0
python_package() {
  [ "$python_ready" = 1 ] && return 0
  kjit_python_install "$root" "$build" "$out/python_install.txt"
  local rc=$?
  echo "pip install: rc=$rc ($(cd /tmp && python3 -c 'import kjit; print(kjit.__file__, kjit.__version__)' 2>&1))"
  [ $rc = 0 ] && python_ready=1
  return $rc
}
# KJIT_STEPS picks steps (default: all but compile, sanitize, tune, tune_sweep and multi_device), KJIT_BENCHES the benchmarks; KJIT_SWEEP=1 adds the
# planner sweeps (every forced split count / head group) to the decode, paged decode and SWA benchmarks and
# the forced wgmma variants (tiles, stages, splits, CTA pairs) to the FP8 GEMM benchmark.
steps=${KJIT_STEPS:-"precompile tests selftest runtime bench cublaslt python deploy"}
# The FlashInfer kit (KJIT_FI_KIT, default .peers/peers/flashinfer of this checkout), when carried,
# adds the steps flashinfer (kjit's ragged paged prefill beside FlashInfer fa2/fa3 on the same
# inputs) and layer (one FP8 decoder layer, kjit's stack beside cuBLASLt + FlashInfer + torch).
fi_kit=${KJIT_FI_KIT:-$root/.peers/peers/flashinfer}
[ -z "${KJIT_STEPS:-}" ] && [ -d "$fi_kit" ] && steps="$steps flashinfer layer"
# FlashInfer's environment (flashinfer_env.sh), set up once a run by the first step that needs it.
fi_env=0
fi_environment() {
  [ "$fi_env" = 1 ] && return 0
  [ -d "$fi_kit" ] || return 1
  KJIT_FI_KIT=$fi_kit source "$root/tools/bench/flashinfer_env.sh" || return 1
  fi_env=1
}
# fp8_decode calls kjit through its Python package, so it runs after the python step installs it.
benches=${KJIT_BENCHES:-"decode rotary swa fp8 attention fp8_decode async_jit"}
want() { case " $steps " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
extra_args() {
  [ "${KJIT_SWEEP:-0}" = 1 ] || return 0
  case "$1" in decode) echo --sweep-splits ;; swa | fp8 | attention) echo --sweep ;; esac
}

step gpu
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee "$out/gpu.txt"
"$kjit" devices

if want precompile; then
step "precompile (cold, then warm)"
rm -rf "$KJIT_CACHE_DIR"
# NVRTC (12.9+) also caches PTX and cubins in the driver's compute cache: off for the cold figures.
export CUDA_CACHE_DISABLE=1
/usr/bin/time -f "%e s wall" "$kjit" precompile -j 16 --json > "$out/precompile_cold.json"
/usr/bin/time -f "%e s wall" "$kjit" precompile -j 16 --json > "$out/precompile_warm.json"
cat "$out/precompile_cold.json" "$out/precompile_warm.json"
for j in 1 4 16; do
  d=/tmp/kjit-pc-$j; rm -rf $d
  s=$(date +%s%N); KJIT_CACHE_DIR=$d "$kjit" precompile -j $j --json > /dev/null
  echo "precompile -j $j: $(( ($(date +%s%N) - s) / 1000000 )) ms" | tee -a "$out/precompile_throughput.txt"
done
# The same from another kernel-source tree (KJIT_BASELINE_KERNELS: the sources before a change).
if [ -n "${KJIT_BASELINE_KERNELS:-}" ]; then
  for j in 1 16; do
    d=/tmp/kjit-pc-base-$j; rm -rf $d
    s=$(date +%s%N); KJIT_KERNEL_DIR=$KJIT_BASELINE_KERNELS KJIT_CACHE_DIR=$d "$kjit" precompile -j $j --json > /dev/null
    echo "precompile -j $j, baseline sources: $(( ($(date +%s%N) - s) / 1000000 )) ms" | tee -a "$out/precompile_throughput.txt"
  done
fi
unset CUDA_CACHE_DISABLE
fi

# Cold compile time per default specialization (tools/bench/compile_bench): PTX vs cubin, and
# with KJIT_BASELINE_KERNELS=DIR the same cubins from that kernel-source tree (the sources before
# a change) in the same run; KJIT_COMPILE_VARIANT adds a column with those NVRTC options.
if want compile; then
  step "cold compile time"
  args=(--reps "${KJIT_COMPILE_REPS:-2}" --json "$out/compile_bench.json")
  [ -n "${KJIT_BASELINE_KERNELS:-}" ] && args+=(--baseline-kernel-dir "$KJIT_BASELINE_KERNELS")
  [ -n "${KJIT_COMPILE_VARIANT:-}" ] && args+=(--variant "$KJIT_COMPILE_VARIANT")
  "$root/$build/tools/compile_bench" "${args[@]}" | tee "$out/compile_bench.txt"  # sets CUDA_CACHE_DISABLE=1
fi

# The GPU suites run as plain executables so they share one cache with the selftest and the
# benchmarks (CTest gives each test its own): every specialization compiles once per run.
if want tests; then
  step "GPU tests"
  [ -d "$KJIT_CACHE_DIR" ] || "$kjit" precompile -j 16 > /dev/null
  fails=0
  for t in "$root/$build"/tests/gpu_*_test; do
    echo "--- $(basename "$t")"
    timeout 400 "$t" --gtest_brief=1 > "$out/$(basename "$t").txt" 2>&1
    rc=$?
    tail -n 3 "$out/$(basename "$t").txt"
    [ $rc -eq 0 ] || { fails=$((fails + 1)); grep -E "Failure|FAILED|error" "$out/$(basename "$t").txt" | head -n 20; }
  done
  echo "GPU suites failed: $fails" | tee "$out/gpu_tests.txt"
fi

# compute-sanitizer over every GPU suite: memcheck (out-of-bounds and misaligned accesses, leaks
# of device allocations) and racecheck (shared-memory hazards). KJIT_SANITIZE_FILTER narrows the
# gtest cases (racecheck is ~100x slower); each tool gets KJIT_SANITIZE_TIMEOUT seconds a suite.
if want sanitize; then
  step "compute-sanitizer"
  cs=/usr/local/cuda/bin/compute-sanitizer
  [ -d "$KJIT_CACHE_DIR" ] || "$kjit" precompile -j 16 > /dev/null
  # `kjit selftest` runs every op once on small shapes: the whole family list in one process.
  # KJIT_SANITIZE_SUITES: names to run (selftest, gpu_rotary_test, ...); default all.
  suites=()
  for t in selftest "$root/$build"/tests/gpu_*_test; do
    n=$(basename "$t")
    case " ${KJIT_SANITIZE_SUITES:-$n} " in *" $n "*) suites+=("$t") ;; esac
  done
  for tool in ${KJIT_SANITIZE_TOOLS:-memcheck racecheck}; do
    for t in "${suites[@]}"; do
      if [ "$t" = selftest ]; then name=selftest; cmd=("$kjit" selftest); else
        name=$(basename "$t"); cmd=("$t" --gtest_brief=1 --gtest_filter="${KJIT_SANITIZE_FILTER:-*}"); fi
      extra=()
      [ "$tool" = memcheck ] && extra=(--leak-check full)
      timeout "${KJIT_SANITIZE_TIMEOUT:-120}" "$cs" --tool "$tool" "${extra[@]}" --error-exitcode 3 \
        "${cmd[@]}" > "$out/$tool.$name.txt" 2>&1
      rc=$?
      summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY|LEAK SUMMARY" "$out/$tool.$name.txt" | tr '\n' ' ')
      echo "$tool $name rc=$rc ${summary:-(no summary: timed out or crashed)}" | tee -a "$out/sanitize.txt"
    done
  done
fi

# kjit tune: the GPU tune tests, then timed sweeps in a cache of their own (cold: every compile;
# cached: the same sweep again) of decode over tools/tune/shapes/decode_h200.txt and of the FP8
# GEMM over M = 1..4096 at N×K 7168×2048 and 4096×7168, then 2-3 shapes each of paged decode,
# prefill (mma.sync and wgmma candidates) and SWA decode (tools/tune/shapes/<op>_h200.txt), each
# writing its whole sweep as JSON (chart it here: kjit tune report FILE.json --png out.png), then
# --check of the stored winners. KJIT_TUNE_OPS picks the sweeps (default: all five) and
# KJIT_TUNE_GTEST filters gpu_tune_test; the new ops alone (about 4 minutes):
#   KJIT_STEPS=tune KJIT_TUNE_OPS="paged_decode prefill swa_decode" \
#   KJIT_TUNE_GTEST='*PagedDecode*:*Prefill*:*SwaDecode*' bash tools/bench/h200_session.sh
if want tune; then
  step "tune"
  tune_ops=${KJIT_TUNE_OPS:-"decode fp8_gemm paged_decode prefill swa_decode"}
  tune_op() { case " $tune_ops " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
  timeout 400 "$root/$build/tests/gpu_tune_test" --gtest_brief=1 --gtest_filter="${KJIT_TUNE_GTEST:-*}" \
    > "$out/gpu_tune_test.txt" 2>&1
  echo "gpu_tune_test rc=$?"; grep -E "OK|FAILED|Failure" "$out/gpu_tune_test.txt" | head -n 20
  tc=/tmp/kjit-tune-cache; rm -rf "$tc"
  if tune_op decode; then
    for pass in cold cached; do
      s=$(date +%s%N)
      KJIT_CACHE_DIR=$tc timeout 300 "$kjit" tune decode --shapes "$root/tools/tune/shapes/decode_h200.txt" -j 16 \
        --report --json-out "$out/tune_decode_$pass.json" > "$out/tune_decode_$pass.txt" 2>&1
      echo "tune decode ($pass, 10 shapes): rc=$? $(( ($(date +%s%N) - s) / 1000000 )) ms" | tee -a "$out/tune_times.txt"
    done
  fi
  if tune_op fp8_gemm; then
    s=$(date +%s%N)
    KJIT_CACHE_DIR=$tc timeout 580 "$kjit" tune fp8_gemm --shapes "$root/tools/tune/shapes/fp8_gemm_msweep_h200.txt" \
      -j 16 --report --json-out "$out/tune_fp8_gemm.json" > "$out/tune_fp8_gemm.txt" 2>&1
    echo "tune fp8_gemm (26 shapes): rc=$? $(( ($(date +%s%N) - s) / 1000000 )) ms" | tee -a "$out/tune_times.txt"
  fi
  for op in paged_decode prefill swa_decode; do
    tune_op "$op" || continue
    s=$(date +%s%N)
    KJIT_CACHE_DIR=$tc timeout 150 "$kjit" tune "$op" --shapes "$root/tools/tune/shapes/${op}_h200.txt" -j 16 --report \
      --json-out "$out/tune_$op.json" > "$out/tune_$op.txt" 2>&1
    rc=$?
    echo "tune $op ($(grep -cv '^#' "$root/tools/tune/shapes/${op}_h200.txt") shapes): rc=$rc $(( ($(date +%s%N) - s) / 1000000 )) ms" \
      | tee -a "$out/tune_times.txt"
  done
  "$kjit" tune rotary | tee "$out/tune_rotary.txt"
  "$kjit" tune fp8_quantize | tee "$out/tune_fp8_quantize.txt"
  KJIT_CACHE_DIR=$tc timeout 300 "$kjit" tune --check > "$out/tune_check.txt" 2>&1
  echo "tune --check rc=$?"; tail -n 40 "$out/tune_check.txt"
  cp "$tc"/tuning/*.json "$out/" 2>/dev/null
  grep -hE "winner|no winner" "$out"/tune_decode_cached.txt "$out"/tune_fp8_gemm.txt "$out"/tune_paged_decode.txt \
    "$out"/tune_prefill.txt "$out"/tune_swa_decode.txt 2>/dev/null | head -n 80
fi

# The tuning sweep over every op's H200 shapes (tools/tune/shapes: the peer shapes and the FP8
# GEMM M sweep), timed per op, then --check; fails when a tuned plan is slower than its default
# beyond 2% (about 4 minutes): KJIT_STEPS=tune_sweep bash tools/bench/h200_session.sh
if want tune_sweep; then
  step "tune sweep (tools/bench/h200_tune_sweep.sh)"
  KJIT_BIN="$kjit" bash "$root/tools/bench/h200_tune_sweep.sh" "$out/tune_sweep"
  echo "tune sweep rc=$?"
fi

# The Python package (tools/bench/python_package.sh: built on this machine against the carried
# build), then the pytest suite (GPU tests included) and the call-overhead benchmark. Before the
# bench and flashinfer steps, which import the package.
if want python; then
  step "python package, tests, overhead"
  python_package
  # One pytest process per test file, failure reasons in the summary (-rfEs): a crash loses only
  # the rest of its file, whose tests then run one process each.
  : > "$out/python_tests.txt"
  for f in "$root"/python/tests/test_*.py; do
    (cd /tmp && timeout 240 python3 -m pytest -q -p no:cacheprovider -rfEs --tb=short "$f" 2>&1) >> "$out/python_tests.txt"
    rc=$?
    echo "pytest $(basename "$f"): rc=$rc" | tee -a "$out/python_tests.txt"
    if [ "$rc" -ge 124 ]; then  # killed by a signal or the timeout
      for t in $(cd /tmp && python3 -m pytest -q -p no:cacheprovider --collect-only "$f" 2>/dev/null | grep '::'); do
        (cd /tmp && timeout 60 python3 -m pytest -q -p no:cacheprovider -rfEs --tb=short "$f::${t#*::}" 2>&1) \
          >> "$out/python_tests.txt"
        echo "  alone: ${t#*::}: rc=$?" | tee -a "$out/python_tests.txt"
      done
    fi
  done
  grep -E '^(FAILED|ERROR|SKIPPED)|(passed|failed|error)' "$out/python_tests.txt" | tail -n 40
  timeout 300 python3 "$root/tools/bench/bench_python.py" --json "$out/bench_python.json" 2>&1 | tee "$out/bench_python.txt"
fi

# kjit beside FlashInfer (tools/bench/bench_flashinfer.py): the kit installed and FlashInfer's JIT
# modules built first (several minutes of nvcc on a cold machine), then the cases.
if want flashinfer; then
  step "FlashInfer (ragged paged prefill)"
  if python_package && fi_environment; then
    (cd "$root/tools/bench" && timeout 600 python3 bench_flashinfer.py --prebuild) > "$out/fi_prebuild.txt" 2>&1
    echo "prebuild rc=$?"; tail -n 5 "$out/fi_prebuild.txt"
    (cd "$root/tools/bench" && timeout 300 python3 bench_flashinfer.py --json "$out/bench_flashinfer.json") \
      2>&1 | tee "$out/bench_flashinfer.txt" | tail -n 12
  fi
fi

# One FP8 decoder layer of a 70B-class model (tools/bench/bench_layer.py): kjit's stack beside the
# peer stack (cuBLASLt, FlashInfer, torch), each in one CUDA graph and op by op, decode at batch 1,
# 8, 32, 128 (and mixed lengths) and an 8 × 512 prefill chunk. FlashInfer's modules (decode on CUDA
# and tensor cores, fa3 prefill) are built first in the same JIT workspace as the flashinfer step;
# without the kit the peer's attention is kjit's and the tables say so.
if want layer; then
  step "decoder layer (kjit stack beside cuBLASLt + FlashInfer + torch)"
  if python_package; then
    layer_args=(--json "$out/bench_layer.json")
    if fi_environment; then
      (cd "$root/tools/bench" && timeout 600 python3 bench_layer.py --prebuild) > "$out/layer_prebuild.txt" 2>&1
      echo "prebuild rc=$?"; tail -n 5 "$out/layer_prebuild.txt"
    else
      echo "no usable FlashInfer kit at $fi_kit: the peer's attention is kjit's"
      layer_args+=(--no-fi)
    fi
    (cd "$root/tools/bench" && timeout 420 python3 bench_layer.py "${layer_args[@]}") \
      2>&1 | tee "$out/bench_layer.txt" | tail -n 16
    echo "bench_layer rc=${PIPESTATUS[0]}"
  fi
fi

want selftest && step selftest && "$kjit" selftest --all-devices 2>&1 | tee "$out/selftest.txt"

# Several GPUs in one process: the devices as kjit sees them (ordinal, target, fingerprint), the
# selftest on every device, and tests/gpu/multi_device_test (two threads, one Runtime: devices 0
# and 1, or two contexts of device 0 on a one-GPU host; its "[multi-device]" lines say which).
# Not a default step (the `tests` and `selftest` steps cover it); run it alone, on the two-GPU
# kind for the two-device half, with KJIT_STEPS=multi_device.
if want multi_device; then
  step multi-device
  "$kjit" devices | tee "$out/devices.txt"
  "$kjit" devices --json > "$out/devices.json"
  timeout 300 "$root/$build/tests/gpu_multi_device_test" > "$out/multi_device.txt" 2>&1
  echo "gpu_multi_device_test rc=$?" | tee -a "$out/multi_device.txt"
  grep -E "^\[multi-device\]|^\[ +(OK|FAILED|SKIPPED) +\]|Failure|Expected|Which is|Value of" "$out/multi_device.txt" | head -n 60
  timeout 400 "$kjit" selftest --all-devices > "$out/selftest_all_devices.txt" 2>&1
  echo "selftest --all-devices rc=$?" | tee -a "$out/selftest_all_devices.txt"
  grep -E "^device [0-9]+:|FAIL|checks passed|error" "$out/selftest_all_devices.txt" | head -n 40
fi

want runtime && step "runtime costs" && "$root/$build/tools/runtime_bench" --json "$out/runtime_bench.json" 2>&1 | tee "$out/runtime_bench.txt"

# The op hot path alone (not a default step; `runtime` and `tests` include it): the GPU suites of
# the ops whose per-call work is memoized (TMA maps of the wgmma prefill and FP8 GEMM, the decode
# split search, the per-op kernel-table memo; deploy_test captures graphs), then the hot-call
# figures three times (the raw launch itself moves by ~1 µs between runs). A few minutes:
#   KJIT_STEPS=hot bash tools/bench/h200_session.sh
if want hot; then
  step "hot path: GPU suites, then runtime_bench --hot-only x3"
  [ -d "$KJIT_CACHE_DIR" ] || "$kjit" precompile -j 16 > /dev/null
  suites="hot_memo attention_prefill fp8 attention_decode attention_paged deploy"
  for t in $suites; do  # in parallel: mostly float64 references on the CPUs
    (timeout 240 "$root/$build/tests/gpu_${t}_test" --gtest_brief=1 > "$out/gpu_${t}_test.txt" 2>&1
     echo "rc=$?" >> "$out/gpu_${t}_test.txt") &
  done
  wait
  for t in $suites; do
    echo "gpu_${t}_test $(tail -n 1 "$out/gpu_${t}_test.txt") $(grep -E '^\[  (PASSED|FAILED) ' "$out/gpu_${t}_test.txt" | tr '\n' ' ')"
    grep -E "Failure|FAILED  \]" "$out/gpu_${t}_test.txt" | head -n 10
  done
  for i in 1 2 3; do
    "$root/$build/tools/runtime_bench" --hot-only --json "$out/runtime_hot_$i.json" 2>&1 | tee "$out/runtime_hot_$i.txt"
  done
fi

want bench && python_package && for b in $benches; do
  if [ -f "$root/tools/bench/bench_$b.py" ]; then
    step "bench $b"
    timeout "$(case $b in fp8_decode|async_jit) echo 600 ;; *) echo 300 ;; esac)" python3 "$root/tools/bench/bench_$b.py" --json "$out/bench_$b.json" $(extra_args $b) 2>&1 | tee "$out/bench_$b.txt" | tail -n 30
  fi
done

# What cuBLASLt's heuristic picks (tile, stages, split-K, reduction, swizzle, cluster) for the FP8
# GEMM shapes of the decoder layer and the earlier decode shapes, M = 1 … 256, asked as
# torch._scaled_mm asks (tools/bench/cublaslt_algos.py; its descriptor is checked against torch's).
if want cublaslt; then
  step "cuBLASLt's FP8 GEMM algorithms"
  if python_package; then
    timeout 300 python3 "$root/tools/bench/cublaslt_algos.py" --json "$out/cublaslt_algos.json" 2>&1 \
      | tee "$out/cublaslt_algos.txt" | tail -n 70
    echo "cublaslt_algos rc=${PIPESTATUS[0]}"
  fi
fi

# Deployment (tests/gpu/deploy_test.cc): a decode loop under KJIT_RECORD, replayed by `kjit
# precompile --manifest` into an empty cache and rerun under KJIT_JIT=off (zero compiles, same
# bits), and a miss under stream capture (global, thread-local, relaxed) raising CaptureMiss with
# the capture intact. Its child processes bring their own cache folders. Run alone with
# KJIT_STEPS=deploy.
if want deploy; then
  step deploy
  timeout 300 "$root/$build/tests/gpu_deploy_test" 2>&1 | tee "$out/deploy.txt" | tail -n 25
  echo "deploy rc=${PIPESTATUS[0]}" | tee -a "$out/deploy.txt"
fi
