#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine (CUDA 13 toolkit at /usr/local/cuda) for kjit: installs the
# Debian build dependencies, configures a Release build in build/ and builds the library, the
# `kjit` CLI, the benchmarks and the tests; then installs the Python package for the python3 on
# PATH (its extension alone is compiled, in DIR-python/, against the libkjit and CLI just built)
# and what its tests need (pytest, numpy).
#
#   tools/setup.sh [--jobs N] [--build-dir DIR] [--no-deps] [--deps-only] [--no-python]
#
# apt-get runs only when dpkg lists one of the packages as not installed, and then as root (or
# through sudo when it is not); --deps-only stops after that step. A toolkit elsewhere: set
# CUDAToolkit_ROOT.
set -euo pipefail

jobs=$(nproc)
build_dir=build
install_deps=1
deps_only=0
python=1
while [ $# -gt 0 ]; do
  case "$1" in
    -j|--jobs) jobs=$2; shift 2 ;;
    --build-dir) build_dir=$2; shift 2 ;;
    --no-deps) install_deps=0; shift ;;
    --deps-only) deps_only=1; shift ;;
    --no-python) python=0; shift ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

cd "$(dirname "$0")/.."

if [ "$install_deps" = 1 ]; then
  packages=(cmake make g++ libfmt-dev libxxhash-dev libcli11-dev nlohmann-json3-dev libdlpack-dev
            libgtest-dev libhiredis-dev libsodium-dev libarchive-dev redis-server skopeo umoci
            docker-registry python3-dev python3-pip)
  missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q ' installed$' || missing+=("$p")
  done
  if [ ${#missing[@]} = 0 ]; then
    echo "setup.sh: the ${#packages[@]} Debian packages are installed; apt-get is not run"
  else
    sudo=""
    if [ "$(id -u)" != 0 ]; then
      command -v sudo >/dev/null || { echo "setup.sh: installing ${missing[*]} needs root (or sudo)" >&2; exit 2; }
      sudo=sudo
    fi
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update
    $sudo apt-get install -y "${missing[@]}"
  fi
fi
if [ "$deps_only" = 1 ]; then exit 0; fi

cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release
cmake --build "$build_dir" -j "$jobs"
echo "setup.sh: built $build_dir/tools/kjit"

if [ "$python" = 1 ]; then
  # Debian's own python3 is "externally managed"; kjit's tests install into it all the same.
  export PIP_BREAK_SYSTEM_PACKAGES=1 PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1
  python3 -m pip install -q nanobind scikit-build-core pytest numpy
  # The package reuses the libkjit and CLI just built: they are installed into a prefix inside
  # the build folder, and the package's build (python/CMakeLists.txt, standalone) compiles only
  # the extension against them and copies them into the wheel.
  prefix=$(cd "$build_dir" && pwd)/python-prefix
  # A package build folder from before, which built libkjit itself, is of another project.
  [ -d "$build_dir-python/CMakeFiles/kjit.dir" ] && rm -rf "$build_dir-python"
  cmake --install "$build_dir" --prefix "$prefix" > /dev/null
  launcher=()
  command -v ccache >/dev/null && launcher=(-Ccmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache)
  CMAKE_BUILD_PARALLEL_LEVEL=$jobs python3 -m pip install -q --no-build-isolation \
    -Ccmake.source-dir=python -Ccmake.define.CMAKE_PREFIX_PATH="$prefix" \
    -Cbuild-dir="$build_dir-python" "${launcher[@]}" .
  echo "setup.sh: installed the kjit Python package ($(python3 -c 'import kjit; print(kjit.__file__)'))"
fi
