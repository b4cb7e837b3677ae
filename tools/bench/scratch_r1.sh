#!/usr/bin/env bash
# scratch (not committed): warm-start A/B and racecheck variants of the SWA kernel
set -uo pipefail
root=$PWD
[ -e /work/main ] || { mkdir -p /work && ln -s "$root" /work/main; }
export KJIT_CACHE_DIR=/tmp/kc
final=$OUT; out=$(mktemp -d); trap 'tar -C $out -czf $final/results.tar.gz .' EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv > $out/gpu.txt
export LD_LIBRARY_PATH=$root/build:$root/build/tools
# warm start A/B: new build, old build, alternating processes
./build/tools/kjit precompile -j 16 > /dev/null 2>&1
./build/tools/runtime_bench --json $out/rb_new.json > $out/rb_new.txt 2>&1
( export LD_LIBRARY_PATH=$root/oldbin; export KJIT_CACHE_DIR=/tmp/kc_old
  ./oldbin/runtime_bench --json $out/rb_old.json > $out/rb_old.txt 2>&1 )
for i in $(seq 1 9); do
  echo "new $(./build/tools/runtime_bench --warm-child)" >> $out/ab.txt
  echo "old $(LD_LIBRARY_PATH=$root/oldbin KJIT_CACHE_DIR=/tmp/kc_old ./oldbin/runtime_bench --warm-child)" >> $out/ab.txt
done
for i in 1 2 3 4 5; do ./build/tools/runtime_bench --warm-phases >> $out/phases.txt; done
# racecheck variants of the SWA kernel
cs=/usr/local/cuda/bin/compute-sanitizer
f=mla/swa_decode.cu
for v in v0 v1 v3; do
  d=/tmp/ks_$v; rm -rf $d; cp -r kernel_sources $d
  case $v in
    v1) python3 - $d/$f <<'PY'
import sys; p=sys.argv[1]; s=open(p).read()
s=s.replace("if (k < n_steps) named_barrier(5 + w4, 64);","if (k < n_steps) { switch (w4) { case 0: named_barrier<5, 64>(); break; case 1: named_barrier<6, 64>(); break; case 2: named_barrier<7, 64>(); break; default: named_barrier<8, 64>(); } }")
s=s.replace("named_barrier(1 + mt * 2 + th, 64);","switch (mt * 2 + th) { case 0: named_barrier<1, 64>(); break; case 1: named_barrier<2, 64>(); break; case 2: named_barrier<3, 64>(); break; default: named_barrier<4, 64>(); }")
open(p,'w').write(s)
PY
    ;;
    v3) sed -i 's/if (k < n_steps) named_barrier(5 + w4, 64);/named_barrier(5 + w4, 64);/' $d/$f ;;
  esac
  diff <(cat kernel_sources/$f) $d/$f | head -5 > $out/diff_$v.txt
  s=$(date +%s)
  KJIT_KERNEL_DIR=$d timeout 170 $cs --tool racecheck --racecheck-report all --print-limit 20 ./build/tests/gpu_swa_decode_test \
     --gtest_filter=SwaDecodeGpu.Group32WithRandomLensAndInvalidIndices > $out/rc_$v.txt 2>&1
  echo "$v rc=$? $(( $(date +%s) - s )) s $(grep -E 'RACECHECK SUMMARY|PASSED|FAILED' $out/rc_$v.txt | tr '\n' ' ')" | tee -a $out/rc_summary.txt
done
d=/tmp/ks_v0
KJIT_KERNEL_DIR=$d timeout 120 $cs --tool synccheck ./build/tests/gpu_swa_decode_test \
     --gtest_filter=SwaDecodeGpu.Group32WithRandomLensAndInvalidIndices > $out/sc_v0.txt 2>&1
echo "synccheck v0 rc=$? $(grep -E 'ERROR SUMMARY|PASSED|FAILED' $out/sc_v0.txt | tr '\n' ' ')" | tee -a $out/rc_summary.txt
