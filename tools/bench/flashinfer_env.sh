#!/usr/bin/env bash
# Source this (bash) to make a FlashInfer kit importable for tools/bench/bench_flashinfer.py:
#     KJIT_FI_KIT=DIR source tools/bench/flashinfer_env.sh    # DIR holds the kit's *.whl
# Installs (offline, no dependencies resolved) the kit's FlashInfer, apache-tvm-ffi and ninja
# wheels into /tmp/fi-site, plus each small pure-Python wheel whose module this Python lacks (so
# the torch environment's own copies are not shadowed), then sets FlashInfer's JIT environment:
# sm_90a only, workspace /tmp/fi-ws, nvcc from $CUDA_HOME (default /usr/local/cuda), 16 parallel
# nvcc jobs. Returns nonzero (and installs nothing more) when the kit or pip fails.
fi_kit=${KJIT_FI_KIT:?set KJIT_FI_KIT to the folder of the FlashInfer kit wheels}
fi_site=/tmp/fi-site
fi_wheels=()
for w in flashinfer_python apache_tvm_ffi ninja; do
  f=$(ls "$fi_kit"/$w-*.whl 2>/dev/null | tail -n 1)
  [ -n "$f" ] && fi_wheels+=("$f")
done
if [ ${#fi_wheels[@]} -lt 3 ]; then
  echo "flashinfer_env.sh: $fi_kit lacks the flashinfer / apache_tvm_ffi / ninja wheels"
  return 1 2>/dev/null || exit 1
fi
# wheel prefix:module for the small dependencies, installed only where missing.
for pair in filelock:filelock packaging:packaging tqdm:tqdm nvidia_ml_py:pynvml typing_extensions:typing_extensions \
            jinja2:jinja2 markupsafe:markupsafe requests:requests urllib3:urllib3 idna:idna certifi:certifi \
            charset_normalizer:charset_normalizer; do
  python3 -c "import ${pair#*:}" 2>/dev/null && continue
  f=$(ls "$fi_kit"/${pair%%:*}-*.whl 2>/dev/null | tail -n 1)
  [ -n "$f" ] && fi_wheels+=("$f")
done
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$fi_site" \
  "${fi_wheels[@]}" || { echo "flashinfer_env.sh: pip install failed"; return 1 2>/dev/null || exit 1; }
export PYTHONPATH="$fi_site${PYTHONPATH:+:$PYTHONPATH}"
export CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
export PATH="$fi_site/bin:$CUDA_HOME/bin:$PATH"
export FLASHINFER_WORKSPACE_BASE=/tmp/fi-ws
export FLASHINFER_CUDA_ARCH_LIST=9.0a
export MAX_JOBS=${MAX_JOBS:-16}
export FLASHINFER_NVCC_THREADS=1
mkdir -p "$FLASHINFER_WORKSPACE_BASE"
