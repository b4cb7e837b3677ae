#!/usr/bin/env bash
# Copies build/ to build-run/ without what only a rebuild needs (object files, the CLI test's
# scratch folder) and without the CPU test programs, so it fits the device tool's carry limit.
# On the device: mv build-run build.
set -euo pipefail
cd "$(dirname "$0")/../.."
rm -rf build-run
cp -a build build-run
find build-run -name '*.o' -delete
rm -rf build-run/tests/cli-work build-run/Testing build-run/tests/CMakeFiles
# The fuzz targets go, their install script stays (cmake --install of the build reads it).
find build-run/tests/fuzz -type f ! -name cmake_install.cmake -delete
# The device runs the GPU suites only (h200_session.sh); the CPU suites run here and in CI.
find build-run/tests -maxdepth 1 -type f -executable ! -name 'gpu_*' -delete
# The Debian libraries libkjit links (fmt, xxHash, hiredis, libsodium) beside it: the device
# machine need not have them (h200_session.sh puts the build folder on LD_LIBRARY_PATH).
ldd build/libkjit.so | awk '/=> \/(usr\/)?lib\/x86_64-linux-gnu\/lib(fmt|xxhash|hiredis|sodium)/ {print $3}' |
  xargs -r cp -L -t build-run
# The CLI also links libarchive (OCI images: kjit_oci), which the device image lacks: it and the
# libraries of its chain that the image may lack go too, except ICU's 30 MB data library (over
# the carry limit); a device without libicudata then cannot start the CLI (the library and the
# tests need none of them).
ldd build/tools/kjit | awk '/=> \/(usr\/)?lib\/x86_64-linux-gnu\/lib(archive|nettle|lz4|acl|xml2|icuuc)\./ {print $3}' |
  xargs -r cp -L -t build-run
du -sh build-run
