#!/usr/bin/env bash
set -uo pipefail
root=$PWD
[ -e /work/main ] || { mkdir -p /work && ln -s "$root" /work/main; }
export LD_LIBRARY_PATH=$root/build:$root/build/tools
for c in small big; do
  export KJIT_CACHE_DIR=/tmp/kc_$c
  ./build/tools/kjit precompile -j 16 --family rotary > /dev/null 2>&1
  [ $c = big ] && ./build/tools/kjit precompile -j 16 > /dev/null 2>&1
  ./build/tools/runtime_bench --warm-child > /dev/null
  for i in 1 2 3 4 5; do echo "$c $(./build/tools/runtime_bench --warm-child)"; done
  for i in 1 2 3; do echo "$c $(./build/tools/runtime_bench --warm-phases)"; done
done
