#!/usr/bin/env bash
# Proves that a kernel_sources change leaves the generated code alone: compiles every family's
# default specializations from two versions of kernel_sources/ with the same kjit binary (through
# KJIT_KERNEL_DIR, so only the kernel text differs) into two scratch caches, then compares the
# binaries entry by entry, matched on (family, template_args, target). The cache keys differ
# whenever any included header's bytes differ, so they cannot be compared; the payloads can.
#
#   tools/check_codegen.sh [options] OLD NEW
#
# OLD, NEW: a git revision (its kernel_sources/ is exported with git archive) or a folder that
# is a kernel_sources/ checkout. Options:
#   --kjit PATH     the kjit CLI (default: build/tools/kjit)
#   --arch T        a target, repeatable (default: sm_90a sm_89 compute_90a compute_89: cubins
#                   and the PTX they come from)
#   -j N            precompile threads (default: the CPU count)
#   --keep DIR      keep the scratch caches under DIR instead of a temporary folder; a later run
#                   with the same DIR reuses a side whose kernel text and kjit are unchanged
# Exits 0 when every specialization has byte-identical binaries in both versions, 1 when any
# differs or exists in only one of them (each is listed), 2 on a usage or compile error.
set -euo pipefail

repo=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
kjit="$repo/build/tools/kjit"
archs=()
jobs=$(nproc)
keep=""
revs=()
while (($#)); do
  case "$1" in
    --kjit) kjit=$2; shift 2 ;;
    --arch) archs+=("$2"); shift 2 ;;
    -j) jobs=$2; shift 2 ;;
    --keep) keep=$2; shift 2 ;;
    -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "check_codegen: unknown option $1" >&2; exit 2 ;;
    *) revs+=("$1"); shift ;;
  esac
done
((${#revs[@]} == 2)) || { echo "usage: check_codegen.sh [options] OLD NEW (see --help)" >&2; exit 2; }
((${#archs[@]})) || archs=(sm_90a sm_89 compute_90a compute_89)
[[ -x "$kjit" ]] || { echo "check_codegen: no kjit CLI at $kjit (build target kjit_cli, or pass --kjit)" >&2; exit 2; }

if [[ -n "$keep" ]]; then
  work=$keep
  mkdir -p "$work"
else
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
fi

# The kernel_sources folder of a revision or folder argument, as an absolute path.
sources_of() {  # name, rev-or-dir
  local name=$1 what=$2
  if [[ -d "$what" ]]; then
    (cd "$what" && pwd)
  else
    rm -rf "$work/$name/src"
    mkdir -p "$work/$name/src"
    git -C "$repo" archive "$what" kernel_sources | tar -x -C "$work/$name/src"
    echo "$work/$name/src/kernel_sources"
  fi
}

arch_args=()
for a in "${archs[@]}"; do arch_args+=(--arch "$a"); done

for side in old new; do
  if [[ $side == old ]]; then what=${revs[0]}; else what=${revs[1]}; fi
  src=$(sources_of "$side" "$what")
  mkdir -p "$work/$side"
  # With --keep, a side whose kernel text and kjit binary are unchanged since the last run keeps
  # its cache (saves the recompile while iterating on the other side).
  stamp=$( (cd "$src" && find . -type f | LC_ALL=C sort | xargs sha256sum; sha256sum "$kjit" | cut -c1-64; \
            echo "${archs[*]}") | sha256sum | cut -c1-64)
  if [[ -n "$keep" && -f "$work/$side/stamp" && $(cat "$work/$side/stamp") == "$stamp" ]]; then
    echo "check_codegen: $side = $what: unchanged since the kept run, reusing its cache" >&2
    continue
  fi
  rm -rf "$work/$side/cache" "$work/$side/stamp"
  echo "check_codegen: $side = $what ($src)" >&2
  # A clean cache per side: every default is compiled from this side's text, none is found.
  if ! KJIT_CACHE_DIR="$work/$side/cache" KJIT_KERNEL_DIR="$src" KJIT_CACHE_MAX_BYTES=0 \
      "$kjit" precompile "${arch_args[@]}" -j "$jobs" --json > "$work/$side/precompile.json"; then
    echo "check_codegen: precompile of $side failed:" >&2
    cat "$work/$side/precompile.json" >&2
    exit 2
  fi
  echo "$stamp" > "$work/$side/stamp"
done

python3 - "$work/old/cache" "$work/new/cache" <<'EOF'
import hashlib, json, os, struct, sys

# Entry layout (cache/entry.hpp): magic "KJITCUBN", u32 version, 16-byte key, u64 metadata size M,
# u64 payload size P, u64 checksum, then M bytes of JSON metadata and P bytes of payload.
def entries(root):
    out = {}
    for dirpath, _, files in os.walk(root):
        for f in files:
            with open(os.path.join(dirpath, f), "rb") as fh:
                b = fh.read()
            if len(b) < 52 or b[:8] != b"KJITCUBN":
                continue
            m, p = struct.unpack_from("<QQ", b, 28)
            meta = json.loads(b[52:52 + m])
            payload = b[52 + m:52 + m + p]
            out[(meta["family"], meta["template_args"], meta["target"])] = (payload, meta)
    return out

old, new = entries(sys.argv[1]), entries(sys.argv[2])
same, differ, only = 0, [], []
for k in sorted(set(old) | set(new)):
    if k not in old or k not in new:
        only.append((k, "old" if k in old else "new"))
    elif old[k][0] == new[k][0]:
        same += 1
    else:
        differ.append(k)
by_target = {}
for k in old:
    if k in new:
        by_target.setdefault(k[2], [0, 0])[old[k][0] == new[k][0]] += 1
for t, (d, s) in sorted(by_target.items()):
    print(f"{t}: {s + d} compared, {s} identical, {d} different")
for k in differ:
    a, b = old[k][0], new[k][0]
    regs = [(x["registers"], y["registers"]) for x, y in zip(old[k][1]["kernels"], new[k][1]["kernels"])]
    print(f"DIFFERENT {k[0]} {k[1]} {k[2]}: {len(a)} vs {len(b)} bytes, sha256 "
          f"{hashlib.sha256(a).hexdigest()[:12]} vs {hashlib.sha256(b).hexdigest()[:12]}, registers {regs}")
for k, side in only:
    print(f"ONLY IN {side.upper()} {k[0]} {k[1]} {k[2]}")
print(f"total: {same + len(differ)} compared, {same} identical, {len(differ)} different, {len(only)} unmatched")
sys.exit(0 if not differ and not only else 1)
EOF
