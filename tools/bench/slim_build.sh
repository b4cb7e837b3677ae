#!/usr/bin/env bash
# Copies build/ to build-run/ without what only a rebuild needs (object files, the CLI test's
# scratch folder), so it fits the device tool's carry limit. On the device: mv build-run build.
set -euo pipefail
cd "$(dirname "$0")/../.."
rm -rf build-run
cp -a build build-run
find build-run -name '*.o' -delete
rm -rf build-run/tests/cli-work build-run/Testing
du -sh build-run
