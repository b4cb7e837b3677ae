#!/usr/bin/env bash
# scratch (not committed): warm-start phases A/B, racecheck of every GPU suite in parallel
set -uo pipefail
root=$PWD
[ -e /work/main ] || { mkdir -p /work && ln -s "$root" /work/main; }
export KJIT_CACHE_DIR=/tmp/kc
final=$OUT; out=$(mktemp -d); trap 'tar -C $out -czf $final/results.tar.gz .' EXIT
export LD_LIBRARY_PATH=$root/build:$root/build/tools
./build/tools/kjit precompile -j 16 > /dev/null 2>&1
( export LD_LIBRARY_PATH=$root/oldbin KJIT_CACHE_DIR=/tmp/kc_old; ./oldbin/runtime_bench --warm-child > /dev/null 2>&1; ./oldbin/runtime_bench --warm-child >/dev/null 2>&1 )
for i in $(seq 1 9); do
  echo "new $(./build/tools/runtime_bench --warm-child)" >> $out/ab.txt
  echo "old $(LD_LIBRARY_PATH=$root/oldbin KJIT_CACHE_DIR=/tmp/kc_old ./oldbin/runtime_bench --warm-child)" >> $out/ab.txt
  echo "new $(./build/tools/runtime_bench --warm-phases)" >> $out/phases.txt
  echo "old $(LD_LIBRARY_PATH=$root/oldbin KJIT_CACHE_DIR=/tmp/kc_old ./oldbin/runtime_bench --warm-phases)" >> $out/phases.txt
done
cs=/usr/local/cuda/bin/compute-sanitizer
pids=()
for t in build/tests/gpu_*_test; do
  n=$(basename $t)
  ( s=$(date +%s); timeout 200 $cs --tool racecheck --print-limit 20 $t --gtest_brief=1 > $out/rc.$n.txt 2>&1; rc=$?
    echo "$n rc=$rc $(( $(date +%s) - s )) s $(grep -E 'RACECHECK SUMMARY|PASSED|FAILED' $out/rc.$n.txt | tr '\n' ' ')" >> $out/rc_summary.txt ) &
  pids+=($!)
done
wait "${pids[@]}"
cat $out/rc_summary.txt
