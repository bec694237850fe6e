#!/usr/bin/env bash
# bench/cuda/inspect.sh - builds bench/cuda/inspect.c (gcc + NVRTC, no GPU needed), compiles
# the winning configs' images for sm_90 into OUT_DIR (cubins + ptxas -v reports, summary in
# OUT_DIR/resources.txt), and, where cuobjdump is found (CUDA toolkit with its binary
# utilities), writes each image's SASS (*.sass) and resource usage (*.res.txt) and the
# instruction mix of each GEMM kernel's main loop (OUT_DIR/sass_mix.txt).
#   bench/cuda/inspect.sh OUT_DIR [BMxBNxBKxWxS...]
# With OUT_DIR already holding cubins and no cuobjdump here, only the mix step is re-run
# when *.sass files are present.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
cuda=${CUDA_HOME:-/usr/local/cuda}
out=${1:?usage: inspect.sh OUT_DIR [BMxBNxBKxWxS...]}; shift
mkdir -p "$out/build/gen"
if [ -f "$cuda/include/nvrtc.h" ]; then
  cmake -DSRC_DIR="$src/kernels" -DOUT_DIR="$out/build/gen" -P "$src/kernels/embed.cmake" >/dev/null
  gcc -O2 -std=c11 -D_GNU_SOURCE -DMT_HAVE_CUDA=1 -Wall -Wextra -Wno-unused-parameter \
    -I"$src/common" -I"$src/kernels" -I"$src/worker" -I"$out/build/gen" -I"$cuda/include" \
    "$src/bench/cuda/inspect.c" "$src/common/mt.c" "$src/kernels/space.c" "$src/worker/backend_cuda_nvrtc.c" \
    "$out/build/gen/kernel_sources.c" -o "$out/build/inspect" -L"$cuda/lib64" -lnvrtc -ldl -lpthread -lm \
    -Wl,-rpath,"$cuda/lib64"
  "$out/build/inspect" "$out" "$@" | tee "$out/resources.txt"
fi
objdump=$(command -v cuobjdump || true)
[ -z "$objdump" ] && [ -x "$cuda/bin/cuobjdump" ] && objdump=$cuda/bin/cuobjdump
if [ -n "$objdump" ]; then
  for c in "$out"/*.cubin; do
    "$objdump" -sass "$c" > "${c%.cubin}.sass"
    "$objdump" -res-usage "$c" > "${c%.cubin}.res.txt"
  done
else
  echo "no cuobjdump here: cubins and ptxas reports only" >&2
fi
if compgen -G "$out/moe_gemm_*.sass" >/dev/null; then
  python3 "$src/bench/cuda/sass_mix.py" "$out"/moe_gemm_*.sass | tee "$out/sass_mix.txt"
fi
