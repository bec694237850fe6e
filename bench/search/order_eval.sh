#!/usr/bin/env bash
# How good the planner's cost model and order are against a GPU's measurements: for each
# database (a sweep of one shape on the whole space, any strategy), per batch size the rank
# correlation of the model's estimates with the measured medians and the model's first 5 picks
# measured against the best, and, in the planner's order, the first position where a config
# within 5 % / 2 % of the best comes (a strong racing best sooner means fewer configs measured
# in full), time-weighted over the batch sizes by their best median.
#   bench/search/order_eval.sh A.db E,N,K,TOPK [B.db E,N,K,TOPK ...]
# Needs gcc and python3. Builds bench/search/order_eval.c from the planner's sources.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
bin=$(mktemp -d)/order_eval
trap 'rm -rf "$(dirname "$bin")"' EXIT
gcc -O2 -std=c11 -D_GNU_SOURCE -I"$src/common" -I"$src/kernels" -I"$src/coordinator" "$src/bench/search/order_eval.c" \
  "$src/coordinator/order.c" "$src/kernels/space.c" "$src/common/mt.c" -o "$bin" -lm
python3 "$src/bench/search/order_eval.py" "$bin" "$@"
