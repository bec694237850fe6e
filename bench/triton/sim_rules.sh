#!/usr/bin/env bash
# Triton's static rules per device, on sim workers standing in for the Triton kernel: for each
# simulated device, the default space of each model's shapes is submitted with one such worker
# connected, and the plan's valid and rejected counts are printed. Then the warm start: the same
# tune twice on one database (the second with --fresh), and the share of results racing pruned in
# each. No GPU; runs in CI in seconds.
#
#   bench/triton/sim_rules.sh [BUILD_DIR]     (default: build)
#
# Columns: device, model, configs valid, rejected by the static rules, rejected share, rules line.
set -euo pipefail
BIN=$(cd "${1:-build}" && pwd)
M=$BIN/moetune
T=$(mktemp -d /tmp/moetune-rules.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null || true; done
  rm -rf "$T"
}
trap cleanup EXIT
port() { echo $(( (RANDOM % 12000) + 20000 )); }

printf '%-14s %-16s %6s %9s %6s  %s\n' device model valid rejected share rules
for dev in h100 h200 rtx-pro-6000; do
  W=tcp://127.0.0.1:$(port); C=tcp://127.0.0.1:$(port)
  "$BIN/moetune-coordinator" --db "$T/$dev.db" --bind "$W" --control "$C" >>"$T/coord.log" 2>&1 &
  PIDS+=($!)
  "$BIN/moetune-worker" --connect "$W" --backend sim --kernel moetune --sim-device "$dev" >>"$T/worker.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 1 100); do
    n=$("$M" workers --control "$C" --json 2>/dev/null | jq '.workers | length' 2>/dev/null || echo 0)
    [ "$n" -ge 1 ] && break
    sleep 0.1
  done
  for model in "qwen3-30b-a3b 1" "mixtral-8x7b 2" "deepseek-v3 8"; do
    set -- $model
    # plan only: the sweep is cancelled at once, nothing is measured
    "$M" submit --control "$C" --json --model "$1" --tp "$2" --worker-backend sim --name "$1" >"$T/sub.json"
    "$M" cancel --control "$C" --sweep "$(jq -r .sweep "$T/sub.json")" >/dev/null 2>&1 || true
    jq -r --arg d "$dev" --arg m "$1/tp$2" '"\($d) \($m) \(.configs_valid) \(.configs_rejected) \(.rules)"' "$T/sub.json" |
      while read -r d m v r rules; do
        printf '%-14s %-16s %6s %9s %5.1f%%  %s\n' "$d" "$m" "$v" "$r" \
          "$(awk -v r="$r" -v v="$v" 'BEGIN { print 100 * r / (v + r) }')" "$rules"
      done
  done
  kill "${PIDS[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  PIDS=()
done

echo
printf '%-6s %8s %8s %7s\n' sweep results pruned share
cd "$T"
RUN=(--backend sim --workers 1 --sim-time-scale 0 --model qwen3-30b-a3b --model mixtral-8x7b --tp 2 --db "$T/warm.db")
"$M" tune "${RUN[@]}" --out "$T/cold" >/dev/null 2>"$T/cold.err"
"$M" tune "${RUN[@]}" --out "$T/warm" --fresh >/dev/null 2>"$T/warm.err"
for id in 1 2; do
  sqlite3 -batch -noheader "$T/warm.db" "SELECT COUNT(*), SUM(status = 'pruned') FROM results WHERE sweep_id = $id" |
    awk -F'|' -v n="$([ $id = 1 ] && echo cold || echo warm)" '{ printf "%-6s %8d %8d %6.1f%%\n", n, $1, $2, 100 * $2 / $1 }'
done
same=yes
for f in "$T"/cold/sim/E=*.json; do
  cmp -s <(jq -S . "$f") <(jq -S . "$T/warm/sim/$(basename "$f")") || same=no
done
echo "same picks in both sweeps' files: $same"
