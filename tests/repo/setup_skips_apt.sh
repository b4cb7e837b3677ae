#!/usr/bin/env bash
# tools/setup.sh runs no apt-get (and needs no root) when dpkg lists every package it needs as
# installed. An apt-get and a sudo first on PATH that fail loudly stand in for the real ones; dpkg
# is the machine's own. Skipped (77) where dpkg lists one of them as missing: there the script
# must run apt-get.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
command -v dpkg-query >/dev/null || { echo "no dpkg-query: not a Debian machine"; exit 77; }
# The list is setup.sh's own (its `packages=(...)` assignment).
eval "$(sed -n '/^ *packages=(/,/)$/p' "$root/tools/setup.sh")"
[ "${#packages[@]}" -gt 0 ] || { echo "no packages=(...) list in tools/setup.sh"; exit 1; }
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q ' installed$' || { echo "$p is not installed"; exit 77; }
done
stand_in=$(mktemp -d)
trap 'rm -rf "$stand_in"' EXIT
for tool in apt-get sudo; do
  printf '#!/bin/sh\necho "%s ran: $*" >&2\nexit 99\n' "$tool" > "$stand_in/$tool"
  chmod +x "$stand_in/$tool"
done
out=$(PATH="$stand_in:$PATH" "$root/tools/setup.sh" --deps-only 2>&1)
rc=$?
echo "$out"
[ "$rc" = 0 ] || { echo "setup.sh --deps-only exited $rc"; exit 1; }
case "$out" in
  *"ran:"*) echo "setup.sh ran apt-get or sudo with every package installed"; exit 1 ;;
  *"apt-get is not run"*) exit 0 ;;
  *) echo "setup.sh did not say it skipped apt-get"; exit 1 ;;
esac
