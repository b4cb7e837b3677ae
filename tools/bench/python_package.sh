# Sourced by the device scripts (h200_session.sh, h200_prefill_sm90.sh, h200_paged_prefill_sm90.sh):
# the kjit Python package, which every bench_*.py imports, built on the device machine. Its
# python3 (3.12) differs from the build host's, and it lacks kjit's Debian build dependencies, so
# the carried build is installed to a prefix and pip compiles the extension alone against it
# (python/CMakeLists.txt, standalone mode).
#
#   kjit_python_install ROOT BUILD LOG [TARGET]
#     ROOT: the checkout; BUILD: its build folder, relative to ROOT; LOG: where the install's
#     output goes. Without TARGET the package goes into python3's site-packages (replacing any
#     other kjit there); with TARGET into that folder alone (put it on PYTHONPATH: a second build's
#     package beside the first, for an A/B). Returns pip's status.
#
# Also prepends the CUDA toolkit's lib64 to LD_LIBRARY_PATH: an installed libkjit carries no
# RUNPATH to NVRTC.
kjit_python_install() {
  local root=$1 build=$2 log=$3 target=${4:-}
  local tag
  tag=$(basename "$build")
  local prefix=/tmp/kjit-prefix-$tag pybuild=/tmp/kjit-pybuild-$tag
  rm -rf "$prefix" "$pybuild"
  export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
  cmake --install "$root/$build" --prefix "$prefix" > "$log" 2>&1 || return 1
  local where=(--force-reinstall)
  if [ -n "$target" ]; then
    rm -rf "$target"
    where=(--target "$target")
  fi
  python3 -m pip install --no-build-isolation --no-deps --no-index "${where[@]}" \
    -Ccmake.source-dir=python -Cbuild-dir="$pybuild" -Ccmake.define.CMAKE_PREFIX_PATH="$prefix" \
    -Ccmake.define.KJIT_DLPACK_INCLUDE_DIR="$root/$build/python-sdk/include" "$root" >> "$log" 2>&1
}
