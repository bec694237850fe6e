#!/usr/bin/env bash
# One command from a fresh machine to tuned config files: installs what is missing, builds, and
# tunes Qwen3-30B-A3B (TP 1) into configs/.
#
# On a GPU host `moetune tune` picks the backend from the interpreter that serves (a running SGLang
# or vLLM server's, else $VIRTUAL_ENV's, $CONDA_PREFIX's or python3): where it has torch and Triton,
# the triton backend, with the engine's own kernel when the engine is installed there and moetune's
# Triton kernel otherwise, writing the files that engine reads and printing the one line that points
# the engine at them (SGLANG_MOE_CONFIG_DIR=... or VLLM_TUNED_CONFIG_FOLDER=...). Only without torch
# and Triton does it fall back to the cuda backend: files for moetune's CUDA kernel, which no engine
# reads. Without a GPU it runs the simulated backend (configs/sim/, marked simulated).
#
# Extra arguments go to `moetune tune` and win over the defaults (e.g. --model qwen3.5-122b-a10b
# --tp 4, --python /root/ml-env/bin/python3, --backend cuda). MOETUNE_BIN=path/to/moetune uses that
# build as it is: no install, no build.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${MOETUNE_BIN:-}" ]; then
  deploy/install-deps.sh
  cmake -S . -B build >/dev/null
  cmake --build build -j"$(nproc)"
  MOETUNE_BIN=build/moetune
fi
args=("$@")
[ ${#args[@]} -eq 0 ] && args=(--model qwen3-30b-a3b --tp 1)
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "quickstart: tuning on this host's GPUs (the backend follows the interpreter that serves): ${args[*]}"
  exec "$MOETUNE_BIN" tune --db moetune.db --out configs "${args[@]}"
fi
echo "quickstart: no GPU here: tuning with the sim backend: ${args[*]}"
exec "$MOETUNE_BIN" tune --backend sim --db moetune.db --out configs "${args[@]}"
