#!/usr/bin/env bash
# Fuzzes the parsers of what kjit reads from disk with clang's libFuzzer (ASan + UBSan): the entry
# decoder, the bundle reader, the memo records' decoders, the tuning table reader, the warm-up
# manifest reader, the tune report reader and the fleet tier's record decoder
# (tests/fuzz/*_fuzz.cc). Builds with clang in its own build folder, then runs each target for a
# bounded number of executions, starting from the checked-in corpus.
#
#   tools/fuzz.sh [--runs N] [--build-dir DIR] [--jobs N] [--target NAME]... [--seeds]
#
#   --runs N      executions per target (default 1000000)
#   --target NAME entry, bundle, memo, tune_table, manifest, tune_report or remote_record
#                 (repeatable; default: all)
#   --seeds       rewrite the seeds tests/fuzz/make_seeds.cc makes first (after a format change;
#                 tune_report's seeds are hand-written JSON and stay)
#
# Needs clang and libclang-rt (Debian: apt-get install clang libclang-rt-14-dev). New inputs
# found while fuzzing go to DIR/corpus-NAME, not into the source tree. A crash leaves its input
# in DIR/crashes-NAME/ and fails the run: fix the bug, then copy the input to
# tests/fuzz/regressions/NAME/ so that CTest (fuzz.NAME_replay) replays it on every build.
set -euo pipefail

runs=1000000
build_dir=build-fuzz
jobs=$(nproc)
targets=()
seeds=0
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs=$2; shift 2 ;;
    --build-dir) build_dir=$2; shift 2 ;;
    -j|--jobs) jobs=$2; shift 2 ;;
    --target) targets+=("$2"); shift 2 ;;
    --seeds) seeds=1; shift ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "fuzz.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=(entry bundle memo tune_table manifest tune_report remote_record)

cd "$(dirname "$0")/.."
command -v clang++ >/dev/null || { echo "fuzz.sh: clang++ not found (apt-get install clang libclang-rt-14-dev)" >&2; exit 2; }

CC=clang CXX=clang++ cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKJIT_FUZZ=ON \
  -DKJIT_BUILD_TOOLS=OFF >/dev/null
build_targets=()
for t in "${targets[@]}"; do build_targets+=(--target "fuzz_$t"); done
[ "$seeds" = 1 ] && build_targets+=(--target fuzz_make_seeds)
cmake --build "$build_dir" -j "$jobs" "${build_targets[@]}"
if [ "$seeds" = 1 ]; then
  rm -rf tests/fuzz/corpus/{entry,bundle,memo,tune_table,manifest}
  "$build_dir/tests/fuzz/fuzz_make_seeds" tests/fuzz/corpus
fi

status=0
for t in "${targets[@]}"; do
  corpus="$build_dir/corpus-$t"
  crashes="$build_dir/crashes-$t"
  mkdir -p "$corpus" "$crashes"
  cp -n tests/fuzz/corpus/"$t"/* "$corpus"/
  [ -d tests/fuzz/regressions/"$t" ] && cp -n tests/fuzz/regressions/"$t"/* "$corpus"/
  log="$build_dir/fuzz-$t.log"
  echo "fuzz.sh: fuzz_$t for $runs executions (log: $log)"
  start=$(date +%s)
  if "$build_dir/tests/fuzz/fuzz_$t" -runs="$runs" -max_len=8192 -timeout=10 -rss_limit_mb=2048 \
       -print_final_stats=1 -artifact_prefix="$crashes/" "$corpus" >"$log" 2>&1; then
    result="no crash"
  else
    result="CRASH (input in $crashes/)"
    status=1
  fi
  execs=$(grep -m1 '^stat::number_of_executed_units' "$log" | awk '{print $2}')
  cov=$(grep -E '^#[0-9]+' "$log" | tail -1 | grep -oE 'cov: [0-9]+' || true)
  echo "fuzz.sh: fuzz_$t: ${execs:-?} executions in $(( $(date +%s) - start )) s, ${cov:-cov: ?}, $result"
done
exit $status
