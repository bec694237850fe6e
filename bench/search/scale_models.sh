#!/usr/bin/env bash
# Sim at scale on a cluster's sweep: scale.sh with every model preset of the presets table
# (the presets `moetune --help` lists: mixtral-8x7b, mixtral-8x22b, deepseek-v3, kimi-k2, qwen3-30b-a3b, qwen3-235b-a22b,
# qwen3-next-80b-a3b, qwen3.5-397b-a17b, gpt-oss-20b, gpt-oss-120b) at TP 1, 2, 4 and 8 in bf16
# (N = the moe intermediate size / TP), those moetune's CUDA kernel (the sim's rules) can run:
# N a multiple of 64, the smallest BLOCK_SIZE_K (the kernel has no tail handling; the planner
# refuses a sweep with a shape that has no config). 33 shapes (gpt-oss at TP 2, 4, 8 and
# Qwen3-30B-A3B at TP 8 left out) x the default space x the 18 default batch sizes, racing and the
# decide step on (the defaults), in one sweep.
#   bench/search/scale_models.sh BUILD_OR_BIN_DIR [N]
# Env as scale.sh's (KEEP_LOGS, WORKER_LOGS, COORD_LOG_LEVEL, ...); SCALE_SH, the script run
# (default scale.sh beside this one; a test gives one that prints its arguments).
set -euo pipefail
bin=${1:?usage: bench/search/scale_models.sh BUILD_OR_BIN_DIR [N]}
n=${2:-256} # workers
# preset: E topk K (hidden) intermediate
models=(
  "8 2 4096 14336"    # mixtral-8x7b
  "8 2 6144 16384"    # mixtral-8x22b
  "256 8 7168 2048"   # deepseek-v3
  "384 8 7168 2048"   # kimi-k2
  "128 8 2048 768"    # qwen3-30b-a3b
  "128 8 4096 1536"   # qwen3-235b-a22b
  "512 10 2048 512"   # qwen3-next-80b-a3b
  "512 10 4096 1024"  # qwen3.5-397b-a17b
  "32 4 2880 2880"    # gpt-oss-20b
  "128 4 2880 2880"   # gpt-oss-120b
)
shapes=()
for m in "${models[@]}"; do
  read -r e topk k inter <<<"$m"
  for tp in 1 2 4 8; do
    nn=$((inter / tp))
    [ $((nn % 64)) -eq 0 ] && shapes+=(--shape "E=$e,N=$nn,K=$k,topk=$topk")
  done
done
exec "${SCALE_SH:-$(dirname "$0")/scale.sh}" "$bin" "$n" "${shapes[@]}"
