#!/usr/bin/env bash
# Runs the CPU test suites under sanitizers, each in its own build folder:
#   address,undefined (ASan + UBSan): every CPU suite (all of ctest except the GPU suites, which
#       skip without a device, and the find_package consumer, which builds an uninstrumented
#       program against the instrumented library);
#   thread (TSan): the cache and runtime suites, where the threads and processes are.
# Every finding fails the run (UBSan does not recover; TSan exits non-zero on a report).
#
#   tools/sanitize.sh [--only asan|tsan] [--jobs N] [--build-root DIR]
#
# Builds go to DIR/build-asan and DIR/build-tsan (default DIR: the repository root), logs to
# DIR/build-*/sanitize.log. Slow: the ASan run builds the whole project again and runs the
# emulators instrumented (about 30 minutes on 2 cores), which is why CI does not run it.
set -euo pipefail

only=""
jobs=$(nproc)
build_root=""
while [ $# -gt 0 ]; do
  case "$1" in
    --only) only=$2; shift 2 ;;
    -j|--jobs) jobs=$2; shift 2 ;;
    --build-root) build_root=$2; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "sanitize.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
case "$only" in ""|asan|tsan) ;; *) echo "sanitize.sh: --only asan or tsan" >&2; exit 2 ;; esac

cd "$(dirname "$0")/.."
src=$PWD
build_root=${build_root:-$src}
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)

export ASAN_OPTIONS=detect_leaks=1:check_initialization_order=1:detect_stack_use_after_return=1:strict_string_checks=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export TSAN_OPTIONS=second_deadlock_stack=1:history_size=4
[ -f tools/sanitizers/lsan.supp ] && export LSAN_OPTIONS=suppressions=$src/tools/sanitizers/lsan.supp
[ -f tools/sanitizers/tsan.supp ] && export TSAN_OPTIONS="$TSAN_OPTIONS:suppressions=$src/tools/sanitizers/tsan.supp"

status=0

run_asan() {
  local dir=$build_root/build-asan
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKJIT_SANITIZE=address,undefined "${launcher[@]}" >/dev/null
  cmake --build "$dir" -j "$jobs"
  local start=$(date +%s)
  if ctest --test-dir "$dir" --output-on-failure -LE '^gpu$' -E 'consumer_test' -j "$jobs" 2>&1 | tee "$dir/sanitize.log"; then
    echo "sanitize.sh: asan+ubsan: clean ($(( $(date +%s) - start )) s of tests)"
  else
    echo "sanitize.sh: asan+ubsan: FINDINGS or failures (see $dir/sanitize.log)"
    status=1
  fi
}

run_tsan() {
  local dir=$build_root/build-tsan
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKJIT_SANITIZE=thread -DKJIT_BUILD_TOOLS=OFF "${launcher[@]}" >/dev/null
  local targets=()
  for f in tests/cache/*_test.cc tests/runtime/*_test.cc; do
    local folder=$(basename "$(dirname "$f")")
    targets+=(--target "${folder}_$(basename "$f" .cc)")
  done
  cmake --build "$dir" -j "$jobs" "${targets[@]}"
  local start=$(date +%s)
  if ctest --test-dir "$dir" --output-on-failure -L '^(cache|runtime)$' -j "$jobs" 2>&1 | tee "$dir/sanitize.log"; then
    echo "sanitize.sh: tsan: clean ($(( $(date +%s) - start )) s of tests)"
  else
    echo "sanitize.sh: tsan: FINDINGS or failures (see $dir/sanitize.log)"
    status=1
  fi
}

[ "$only" = tsan ] || run_asan
[ "$only" = asan ] || run_tsan
exit $status
