#!/usr/bin/env bash
# Proves that a kernel_sources change leaves the generated code alone: compiles every family's
# default specializations from two versions of kernel_sources/ with the same kjit binary (through
# KJIT_KERNEL_DIR, so only the kernel text differs) into two scratch caches, then compares the
# binaries entry by entry, matched on (family, template_args, target). The cache keys differ
# whenever any included header's bytes differ, so they cannot be compared; the payloads can.
# With --old-kjit the OLD side is compiled by another kjit build (an older release, say), so a
# host-side change (families, options, cache keys) is checked too; `embedded` then names the
# sources each binary carries.
#
# One thing varies between two compiles of the same text: NVRTC names device symbols with
# internal linkage (a namespace-scope constexpr the kernel takes the address of, say)
# _INTERNAL_<8 hex>_<n>_<file>_<8 hex module id>_<pid>..., so PTX and cubins of one source differ
# from process to process. The script runs each precompile as PID 1 of a fresh PID namespace
# (unshare; needs root or user namespaces) so that the names keep their length, and zeroes the
# module id before comparing; nothing else is masked.
#
#   tools/check_codegen.sh [options] OLD NEW
#
# OLD, NEW: a git revision (its kernel_sources/ is exported with git archive), a folder that
# is a kernel_sources/ checkout, or `embedded`: the kernel sources built into that side's kjit
# (KJIT_KERNEL_DIR unset). Options:
#   --kjit PATH     the kjit CLI (default: build/tools/kjit); compiles NEW, and OLD unless
#                   --old-kjit is given
#   --old-kjit PATH the kjit CLI that compiles OLD (default: --kjit); the two sides' NVRTC
#                   options are compared too (reported, never a failure: the code decides)
#   --arch T        a target, repeatable (default: sm_90a sm_89 compute_90a compute_89: cubins
#                   and the PTX they come from)
#   -j N            precompile threads (default: the CPU count)
#   --keep DIR      keep the scratch caches under DIR instead of a temporary folder; a later run
#                   with the same DIR reuses a side whose kernel text and kjit are unchanged
# Prints, per target, how many specializations are byte-identical and how many differ only in
# their module constants (listed, with the constants that came or went: see "same code" in the
# comparison below), and whether the two sides passed NVRTC the same options (as recorded in the
# entries: same list, same set in another order, or different). Exits 0 when no
# specialization's code differs, 1 when one does or exists in only one version (each is
# listed), 2 on a usage or compile error.
set -euo pipefail

repo=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
kjit="$repo/build/tools/kjit"
old_kjit=""
archs=()
jobs=$(nproc)
keep=""
revs=()
while (($#)); do
  case "$1" in
    --kjit) kjit=$2; shift 2 ;;
    --old-kjit) old_kjit=$2; shift 2 ;;
    --arch) archs+=("$2"); shift 2 ;;
    -j) jobs=$2; shift 2 ;;
    --keep) keep=$2; shift 2 ;;
    -h|--help) sed -n '2,37p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "check_codegen: unknown option $1" >&2; exit 2 ;;
    *) revs+=("$1"); shift ;;
  esac
done
((${#revs[@]} == 2)) || { echo "usage: check_codegen.sh [options] OLD NEW (see --help)" >&2; exit 2; }
((${#archs[@]})) || archs=(sm_90a sm_89 compute_90a compute_89)
[[ -x "$kjit" ]] || { echo "check_codegen: no kjit CLI at $kjit (build target kjit_cli, or pass --kjit)" >&2; exit 2; }
[[ -n "$old_kjit" ]] || old_kjit=$kjit
[[ -x "$old_kjit" ]] || { echo "check_codegen: no kjit CLI at $old_kjit (--old-kjit)" >&2; exit 2; }

if [[ -n "$keep" ]]; then
  work=$keep
  mkdir -p "$work"
else
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
fi

# The kernel_sources folder of a revision or folder argument, as an absolute path; nothing for
# `embedded`.
sources_of() {  # name, rev-or-dir
  local name=$1 what=$2
  if [[ $what == embedded ]]; then
    return 0
  elif [[ -d "$what" ]]; then
    (cd "$what" && pwd)
  else
    rm -rf "$work/$name/src"
    mkdir -p "$work/$name/src"
    git -C "$repo" archive "$what" kernel_sources | tar -x -C "$work/$name/src"
    echo "$work/$name/src/kernel_sources"
  fi
}

# A fresh PID namespace per side: see the file comment.
pidns=(unshare --pid --fork)
if ! unshare --pid --fork true 2>/dev/null; then
  pidns=(unshare --user --map-root-user --pid --fork)
  if ! unshare --user --map-root-user --pid --fork true 2>/dev/null; then
    echo "check_codegen: warning: cannot create a PID namespace; entries with internal-linkage" \
         "symbols will differ whenever the two precompile PIDs have different lengths" >&2
    pidns=()
  fi
fi

arch_args=()
for a in "${archs[@]}"; do arch_args+=(--arch "$a"); done

for side in old new; do
  if [[ $side == old ]]; then what=${revs[0]} side_kjit=$old_kjit; else what=${revs[1]} side_kjit=$kjit; fi
  src=$(sources_of "$side" "$what")
  mkdir -p "$work/$side"
  # With --keep, a side whose kernel text and kjit binary are unchanged since the last run keeps
  # its cache (saves the recompile while iterating on the other side). Embedded sources are part
  # of the binary's hash.
  stamp=$( (if [[ -n "$src" ]]; then cd "$src" && find . -type f | LC_ALL=C sort | xargs sha256sum; \
            else echo embedded; fi; sha256sum "$side_kjit" | cut -c1-64; \
            echo "${archs[*]}") | sha256sum | cut -c1-64)
  if [[ -n "$keep" && -f "$work/$side/stamp" && $(cat "$work/$side/stamp") == "$stamp" ]]; then
    echo "check_codegen: $side = $what: unchanged since the kept run, reusing its cache" >&2
    continue
  fi
  rm -rf "$work/$side/cache" "$work/$side/stamp"
  echo "check_codegen: $side = $what (${src:-the sources in $side_kjit})" >&2
  # An empty KJIT_KERNEL_DIR would be a live folder of its own; embedded means none at all.
  if [[ -n "$src" ]]; then kernel_dir=(KJIT_KERNEL_DIR="$src"); else kernel_dir=(-u KJIT_KERNEL_DIR); fi
  # A clean cache per side: every default is compiled from this side's text, none is found.
  if ! env "${kernel_dir[@]}" KJIT_CACHE_DIR="$work/$side/cache" KJIT_CACHE_MAX_BYTES=0 \
      "${pidns[@]}" "$side_kjit" precompile "${arch_args[@]}" -j "$jobs" --json > "$work/$side/precompile.json"; then
    echo "check_codegen: precompile of $side failed:" >&2
    cat "$work/$side/precompile.json" >&2
    exit 2
  fi
  echo "$stamp" > "$work/$side/stamp"
done

python3 - "$work/old/cache" "$work/new/cache" <<'EOF'
import hashlib, json, os, re, struct, sys

# _INTERNAL_<8 hex>_<n>_<n characters of file name>_<8 hex module id>_: zero the module id.
INTERNAL = re.compile(rb"_INTERNAL_[0-9a-f]{8}_(\d+)_")
HEX8 = re.compile(rb"[0-9a-f]{8}")
def normalize(payload):
    out = bytearray(payload)
    for m in INTERNAL.finditer(payload):
        s = m.end() + int(m.group(1))
        if payload[s:s + 1] == b"_" and HEX8.fullmatch(payload[s + 1:s + 9]):
            out[s + 1:s + 9] = b"00000000"
    return bytes(out)

# Entry layout (cache/entry.hpp): magic "KJITCUBN", u32 version, 16-byte key, u64 metadata size M,
# u64 payload size P, u64 checksum, then M bytes of JSON metadata and P bytes of payload.
def entries(root):
    out, options = {}, {}
    for dirpath, _, files in os.walk(root):
        for f in files:
            with open(os.path.join(dirpath, f), "rb") as fh:
                b = fh.read()
            if len(b) < 52 or b[:8] != b"KJITCUBN":
                continue
            m, p = struct.unpack_from("<QQ", b, 28)
            meta = json.loads(b[52:52 + m])
            k = (meta["family"], meta["template_args"], meta["target"])
            out[k] = normalize(b[52 + m:52 + m + p])
            options[k] = meta.get("options", [])
    return out, options

# When the bytes differ, is the code the same? With -default-device every namespace-scope
# constexpr variable of every included header becomes a .global of the module (used or not), so
# moving a constant between headers or namespaces, or including a header of constants, changes
# the symbol and string tables but not one instruction. A cubin's code is its .text.<kernel>
# sections (the SASS) with .nv.shared.* and .nv.constant0.* (shared-memory and parameter-bank
# layout); a PTX module's is everything but its .global lines.
def elf_sections(b):
    shoff = struct.unpack_from("<Q", b, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", b, 0x3A)
    hdrs = [struct.unpack_from("<IIQQQQIIQQ", b, shoff + i * shentsize) for i in range(shnum)]
    names = hdrs[shstrndx][4]
    def name(off):
        return b[names + off:b.index(b"\0", names + off)].decode()
    return {name(h[0]): (b[h[4]:h[4] + h[5]] if h[1] != 8 else h[5]) for h in hdrs}

def code(payload):
    if payload[:4] == b"\x7fELF":
        return {k: v for k, v in elf_sections(payload).items()
                if k.startswith((".text.", ".nv.shared.", ".nv.constant0."))}
    return [l for l in payload.split(b"\n") if not l.startswith(b".global")]

def constants(payload):
    """The module's internal-linkage constants, as kjit::ns::name."""
    out = set()
    for m in re.finditer(rb"_ZN(\d+)_INTERNAL_", payload):
        rest = payload[m.end(1) + int(m.group(1)):]
        parts = []
        while rest[:1].isdigit():
            n = re.match(rb"\d+", rest).group(0)
            parts.append(rest[len(n):len(n) + int(n)].decode(errors="replace"))
            rest = rest[len(n) + int(n):]
        out.add("::".join(parts))
    return out

(old, old_opts), (new, new_opts) = entries(sys.argv[1]), entries(sys.argv[2])
by_target, differ, only, opts = {}, [], [], [0, 0, 0]
for k in sorted(set(old) | set(new)):
    if k not in old or k not in new:
        only.append((k, "old" if k in old else "new"))
        continue
    t = by_target.setdefault(k[2], [0, 0, 0])
    o, n = old_opts[k], new_opts[k]
    opts[0 if o == n else 1 if sorted(o) == sorted(n) else 2] += 1
    if sorted(o) != sorted(n):
        print(f"options differ {k[0]} {k[1]} {k[2]}: -{sorted(set(o) - set(n))} +{sorted(set(n) - set(o))}")
    a, b = old[k], new[k]
    if a == b:
        t[0] += 1
    elif code(a) == code(b):
        t[1] += 1
        gone, added = sorted(constants(a) - constants(b)), sorted(constants(b) - constants(a))
        print(f"same code {k[0]} {k[1]} {k[2]}: constants -{gone} +{added}")
    else:
        t[2] += 1
        differ.append(k)
for t, (same, same_code, d) in sorted(by_target.items()):
    print(f"{t}: {same + same_code + d} compared, {same} byte-identical, {same_code} with identical code "
          f"(module constants differ), {d} with different code")
print(f"NVRTC options: {opts[0]} with the same list, {opts[1]} with the same set in another order, "
      f"{opts[2]} with a different set")
for k in differ:
    print(f"DIFFERENT CODE {k[0]} {k[1]} {k[2]}: sha256 {hashlib.sha256(old[k]).hexdigest()[:12]} vs "
          f"{hashlib.sha256(new[k]).hexdigest()[:12]}")
for k, side in only:
    print(f"ONLY IN {side.upper()} {k[0]} {k[1]} {k[2]}")
total = sum(sum(v) for v in by_target.values())
print(f"total: {total} compared, {len(differ)} with different code, {len(only)} unmatched")
sys.exit(0 if not differ and not only else 1)
EOF
