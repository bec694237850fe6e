#!/usr/bin/env bash
# Triton's static rules per device, on sim workers standing in for the Triton kernel: for each
# simulated device, the default space of each model's shapes is submitted with one such worker
# connected, and the plan's valid and rejected counts are printed. Then the warm start: the same
# tune twice on one database (the second with --fresh), and the share of results racing pruned in
# each; and the warm start from the engine's own file: a cold tune of Qwen3-30B-A3B at TP 1 whose
# serving interpreter holds a fake SGLang that ships a file for this shape and the sim's GPU
# (engine) beside one whose SGLang ships none (nofile: its default alone goes first), with the
# share each pruned and whether their searched picks agree. No GPU; runs in CI in seconds.
#
#   bench/triton/sim_rules.sh [BUILD_DIR]     (default: build)
#
# Columns: device, model, configs valid, rejected by the static rules, rejected share, rules line.
set -euo pipefail
BIN=$(cd "${1:-build}" && pwd)
ENGINES=$(cd "$(dirname "$0")/../../tests/fixtures/engines" && pwd)
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

# the warm start from the engine's file: the same cold tune with and without one
pruned() {
  sqlite3 -batch -noheader "$T/$1.db" "SELECT COUNT(*), SUM(status = 'pruned') FROM results WHERE sweep_id = 1" |
    awk -F'|' -v n="$1" '{ printf "%-6s %8d %8d %6.1f%%\n", n, $1, $2, 100 * $2 / $1 }'
}
# the searched best config at each of the sweep's batch sizes (not the guard's own rows)
picks() {
  sqlite3 -batch -noheader "$T/$1.db" "SELECT r.batch_size, r.config_id, MIN(r.median_us) FROM results r
    WHERE r.sweep_id = 1 AND r.status = 'ok' AND NOT EXISTS (SELECT 1 FROM guard g WHERE g.sweep_id = 1
    AND g.batch_size = r.batch_size AND (g.role = 'nearest' OR (g.config_id = r.config_id AND g.searched = 0)))
    GROUP BY r.batch_size ORDER BY r.batch_size" |
    while IFS='|' read -r bs id _; do
      echo "$bs $(sqlite3 -batch -noheader "$T/$1.db" "SELECT block_m, block_n, block_k, group_m, num_warps,
        num_stages FROM configs WHERE id = $id")"
    done
}
if [ -x /usr/bin/python3 ]; then
  for e in nofile:sglang-lacking engine:sglang-new; do
    MOETUNE_FAKE_GPU="NVIDIA H200" PYTHONPATH="$ENGINES/${e#*:}:$ENGINES/_stubs" "$M" tune --backend sim --workers 1 \
      --sim-time-scale 0 --model qwen3-30b-a3b --tp 1 --python /usr/bin/python3 --db "$T/${e%%:*}.db" \
      --out "$T/${e%%:*}" >/dev/null 2>"$T/${e%%:*}.err"
    pruned "${e%%:*}"
  done
  same=yes
  cmp -s <(picks nofile) <(picks engine) || same=no
  echo "engine's file first: $(jq -r '[.[] | .coverage.sweeps["1"].warm_start? // empty][0]' "$T/engine/sim/manifest.json")"
  echo "same picks with and without the engine's file: $same"
else
  echo "engine: skipped (no /usr/bin/python3 for the fake engine)"
fi
