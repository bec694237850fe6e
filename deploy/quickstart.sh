#!/usr/bin/env bash
# One command from a fresh machine to tuned config files: installs what is missing, builds, and
# tunes Qwen3-30B-A3B (TP 1). With GPUs and the CUDA toolkit it measures real kernels on every
# local GPU; without, it runs the simulated backend (results under configs/sim/, marked simulated).
# Any extra arguments go to `moetune tune` (e.g. --model mixtral-8x7b --tp 2).
set -euo pipefail
cd "$(dirname "$0")/.."
deploy/install-deps.sh
cmake -S . -B build >/dev/null
cmake --build build -j"$(nproc)"
backend=sim
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q GPU; then backend=cuda; fi
args=("$@")
[ ${#args[@]} -eq 0 ] && args=(--model qwen3-30b-a3b --tp 1)
echo "quickstart: tuning with the $backend backend: ${args[*]}"
exec build/moetune tune --backend "$backend" --db moetune.db --out configs "${args[@]}"
