#!/usr/bin/env bash
# bench/cuda/run.sh - measures the copy bandwidth and the bf16 cuBLAS rate (through torch),
# builds bench_cuda from the backend's sources and runs it. Needs an NVIDIA GPU, the CUDA
# toolkit, gcc, and python3 with torch. Output: markdown tables on stdout.
#   bench/cuda/run.sh [BUILD_DIR] [SHAPE...]
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
cuda=${CUDA_HOME:-/usr/local/cuda}
out=${1:-$(mktemp -d)}; shift || true
mkdir -p "$out/gen"
cmake -DSRC_DIR="$src/kernels" -DOUT_DIR="$out/gen" -P "$src/kernels/embed.cmake"
gcc -O2 -std=c11 -D_GNU_SOURCE -DMT_HAVE_CUDA=1 -I"$src/common" -I"$src/kernels" -I"$src/worker" -I"$out/gen" \
  -I"$cuda/include" "$src/bench/cuda/bench_cuda.c" "$src/common/mt.c" "$src/kernels/space.c" \
  "$src/worker/backend_cuda.c" "$src/worker/backend_cuda_nvrtc.c" "$out/gen/kernel_sources.c" \
  -o "$out/bench_cuda" -L"$cuda/lib64" -lnvrtc -ldl -lpthread -lm -Wl,-rpath,"$cuda/lib64"
read -r copy tflops < <(python3 - <<'PY'
import torch
x = torch.empty(2 * 1024**3, dtype=torch.uint8, device="cuda"); y = torch.empty_like(x)
for _ in range(3): y.copy_(x)
s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
torch.cuda.synchronize(); s.record()
for _ in range(10): y.copy_(x)
e.record(); torch.cuda.synchronize()
copy = 2 * x.numel() * 10 / (s.elapsed_time(e) / 1e3) / 1e9
del x, y
a = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda"); b = torch.randn_like(a)
for _ in range(3): a @ b
torch.cuda.synchronize(); s.record()
for _ in range(20): a @ b
e.record(); torch.cuda.synchronize()
print(f"{copy:.0f} {2 * 8192**3 * 20 / (s.elapsed_time(e) / 1e3) / 1e12:.0f}")
PY
)
echo "# measured: copy ${copy} GB/s (read+write), bf16 cuBLAS ${tflops} TFLOP/s; $(date -u +%Y-%m-%d)"
export XDG_CACHE_HOME=${XDG_CACHE_HOME:-$out/cache}
"$out/bench_cuda" "$copy" "$tflops" "$@"
