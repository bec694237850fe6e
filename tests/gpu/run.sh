#!/usr/bin/env bash
# tests/gpu/run.sh - builds and runs the GPU tests of the cuda backend on a machine with an
# NVIDIA GPU, CUDA toolkit 12+ (nvcc/NVRTC headers and libnvrtc) and gcc. The project's other
# dependencies are not needed: the test is built straight from the backend's sources.
# Exit 0 all passed, 1 a failure, 77 skipped (no GPU or no toolkit; the reason is printed).
#   tests/gpu/run.sh [BUILD_DIR]      (default: a temporary directory)
set -uo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
cuda=${CUDA_HOME:-/usr/local/cuda}
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "skipped: no NVIDIA GPU here (nvidia-smi -L failed)"; exit 77
fi
if [ ! -f "$cuda/include/nvrtc.h" ]; then
  echo "skipped: no CUDA toolkit at $cuda (set CUDA_HOME)"; exit 77
fi
out=${1:-$(mktemp -d)}
mkdir -p "$out/gen"
cmake -DSRC_DIR="$src/kernels" -DOUT_DIR="$out/gen" -P "$src/kernels/embed.cmake" || exit 1
cmake -DOUT_DIR="$out/gen" -P "$src/cmake/facts.cmake" || exit 1
gcc -O2 -std=c11 -D_GNU_SOURCE -DMT_HAVE_CUDA=1 -Wall -Wextra -Wno-unused-parameter \
  -I"$src/common" -I"$src/kernels" -I"$src/worker" -I"$out/gen" -I"$cuda/include" \
  "$src/tests/gpu/test_cuda_gpu.c" "$src/common/mt.c" "$src/kernels/space.c" "$src/kernels/engines.c" \
  "$src/worker/backend_cuda.c" "$src/worker/backend_cuda_nvrtc.c" "$out/gen/kernel_sources.c" \
  -o "$out/test_cuda_gpu" -L"$cuda/lib64" -lnvrtc -ldl -lpthread -lm -Wl,-rpath,"$cuda/lib64" || exit 1
export XDG_CACHE_HOME=${XDG_CACHE_HOME:-$out/cache}
"$out/test_cuda_gpu"
