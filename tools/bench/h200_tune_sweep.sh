#!/usr/bin/env bash
# kjit tune over every tunable op's H200 shapes (tools/tune/shapes/*_h200.txt: the peer shapes of
# the H200 comparison, and the FP8 GEMM M sweep 1..4096 at N x K 7168 x 2048 and 4096 x 7168),
# then `kjit tune --check` of everything stored. Run on the GPU host after building (kjit_cli):
#   bash tools/bench/h200_tune_sweep.sh OUT_DIR
# (h200_session.sh runs it as its tune_sweep step). Writes under OUT_DIR, per sweep NAME:
#   tune_NAME.txt           the --report table (every candidate: status, graph/eager µs, spread)
#   tune_NAME.json          the whole sweep (--json-out; chart it anywhere: kjit tune report F --png)
#   tune_NAME.summary.json  kjit tune report F --json (winner, gain, wrong/failed/dropped per shape)
#   check.txt, check.json   the re-measured winners; times.txt (wall time per sweep); summary.txt
#   tuning/                 the tuning table the sweeps published
# Decode runs twice: cold (every compile) and cached (the same sweep again; target < 20 s).
# Exits non-zero when a sweep or the check fails, or when a stored tuned plan measures slower
# than its default plan beyond 2% in the check. KJIT_SWEEP_OPS picks the sweeps (default: all),
# KJIT_TUNE_JOBS the parallel compiles (16), KJIT_TUNE_CACHE the cache folder (emptied first).
set -uo pipefail
out=${1:?usage: h200_tune_sweep.sh OUT_DIR}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
kjit=${KJIT_BIN:-$root/${KJIT_BUILD:-build}/tools/kjit}
shapes=$root/tools/tune/shapes
jobs=${KJIT_TUNE_JOBS:-16}
ops=${KJIT_SWEEP_OPS:-"decode fp8_gemm paged_decode prefill paged_prefill swa_decode"}
mkdir -p "$out"
out=$(cd "$out" && pwd)
export KJIT_CACHE_DIR=${KJIT_TUNE_CACHE:-/tmp/kjit-tune-sweep-cache}
rm -rf "$KJIT_CACHE_DIR"
: > "$out/times.txt"
failed=0
want() { case " $ops " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

# sweep NAME OP SHAPES_FILE TIMEOUT_S
sweep() {
  local name=$1 op=$2 file=$3 limit=$4 start rc ms
  start=$(date +%s%N)
  timeout "$limit" "$kjit" tune "$op" --shapes "$file" -j "$jobs" --report --json-out "$out/tune_$name.json" \
    > "$out/tune_$name.txt" 2>&1
  rc=$?
  ms=$(( ($(date +%s%N) - start) / 1000000 ))
  printf '%-22s %3d shapes  rc=%-3d %8.1f s wall\n' "$name" "$(grep -cvE '^[[:space:]]*(#|$)' "$file")" "$rc" \
    "$(echo "$ms" | awk '{print $1 / 1000}')" | tee -a "$out/times.txt"
  if [ "$rc" -ne 0 ]; then
    failed=1
    tail -n 5 "$out/tune_$name.txt"
  elif [ -s "$out/tune_$name.json" ]; then
    "$kjit" tune report "$out/tune_$name.json" --json > "$out/tune_$name.summary.json" 2>/dev/null
  fi
}

echo "=== kjit tune sweeps ($ops), cache $KJIT_CACHE_DIR"
if want decode; then
  sweep decode_cold decode "$shapes/decode_h200.txt" 240
  sweep decode_cached decode "$shapes/decode_h200.txt" 120
fi
want fp8_gemm && sweep fp8_gemm_msweep fp8_gemm "$shapes/fp8_gemm_msweep_h200.txt" 420
for op in paged_decode prefill paged_prefill swa_decode; do
  want "$op" && sweep "$op" "$op" "$shapes/${op}_h200.txt" 240
done

echo "=== kjit tune --check"
start=$(date +%s%N)
timeout 420 "$kjit" tune --check --json > "$out/check.json" 2> "$out/check.txt"
rc=$?
printf '%-22s %10s  rc=%-3d %8.1f s wall\n' check "" "$rc" \
  "$(echo $(( ($(date +%s%N) - start) / 1000000 )) | awk '{print $1 / 1000}')" | tee -a "$out/times.txt"
# --check exits 1 for drift beyond 10% or a winner no longer 2% ahead: reported, not fatal here;
# anything else (no table, a crash, the timeout) is.
[ "$rc" -le 1 ] || failed=1
mkdir -p "$out/tuning"
cp "$KJIT_CACHE_DIR"/tuning/*.json "$out/tuning/" 2>/dev/null

# The summary: per sweep the measuring time and what it found; the gains; the 2% rule.
python3 - "$out" <<'EOF' | tee "$out/summary.txt"
import glob, json, os, sys
out = sys.argv[1]
for path in sorted(glob.glob(os.path.join(out, "tune_*.json"))):
    if path.endswith(".summary.json"):
        continue
    r = json.load(open(path))
    cands = [c for s in r["shapes"] for c in s["candidates"]]
    count = lambda st: sum(c["status"] == st for c in cands)
    print(f"{os.path.basename(path)[5:-5]:<18} {len(r['shapes']):3d} shapes {len(cands):5d} candidates "
          f"(ok {count('ok')}, dropped {count('dropped')}, wrong {count('wrong')}, failed {count('failed')}, "
          f"compile-failed {count('compile-failed')}); compile {r['compile_s']:.1f} s, measure {r['measure_s']:.1f} s")
    for s in r["shapes"]:
        w = s["winner"]
        if w > 0:
            c = s["candidates"]
            print(f"    gain {s['gain'] * 100:5.1f}%  {s['text']}: {c[0]['us']:.2f} -> {c[w]['us']:.2f} us  {c[w]['label']}")
        elif w < 0:
            print(f"    NO WINNER (the default did not measure ok)  {s['text']}")
try:
    check = json.load(open(os.path.join(out, "check.json")))
except (OSError, ValueError) as e:
    check = {"error": str(e)}
if "entries" not in check:
    print(f"check: no result ({check.get('error', 'no entries')})")
    sys.exit(2)
slower = [e for e in check["entries"] if e.get("slower_than_default")]
tuned = [e for e in check["entries"] if not e.get("default_won")]
print(f"check: {len(check['entries'])} stored entries, {len(tuned)} tuned (not the default), "
      f"{check['drifted']} flagged by --check, {len(slower)} tuned plans slower than the default beyond 2%")
for e in slower:
    print(f"    SLOWER: {e['op']} {e['shape']}: {e['now_us']:.2f} us vs default {e['default_now_us']:.2f} us "
          f"({e['winner']}; {e['status']})")
sys.exit(1 if slower else 0)
EOF
rule=${PIPESTATUS[0]}
[ "$rule" -eq 0 ] || failed=1
echo "=== wall times"; cat "$out/times.txt"
exit "$failed"
