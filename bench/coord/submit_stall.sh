#!/usr/bin/env bash
# How long the coordinator's control socket goes unanswered while it plans a submit at the plan
# bound (52 shapes x the default 1920-config space = 99,840 configs, 702,000 results planned).
#   bench/coord/submit_stall.sh BUILD_DIR [RUNS]     (default 3 runs, a fresh database each)
# Each run: one coordinator, `moetune submit` of that spec in the background and, until it returns,
# `moetune status` in a loop; prints the submit's wall time, how many status calls were answered
# while it ran, and the longest status round trip (process start included, about 10 ms when the
# loop is free), next to the longest of 10 status calls just before the submit (idle_max_ms: what
# the machine's load alone costs). A loop that plans on its own thread answers no status until the
# plan is stored.
set -euo pipefail
build=${1:?usage: bench/coord/submit_stall.sh BUILD_DIR [RUNS]}
runs=${2:-3}
T=$(mktemp -d /tmp/moetune-stall.XXXXXX)
trap 'kill -KILL $(jobs -p) 2>/dev/null || true; rm -rf "$T"' EXIT
shapes=()
for i in $(seq 1 52); do shapes+=(--shape "E=64,N=$((128 * i)),K=4096,topk=4"); done
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
printf '%-4s %-12s %-10s %-16s %-14s %-8s\n' run idle_max_ms submit_ms status_answered max_status_ms jobs
for r in $(seq 1 "$runs"); do
  db=$T/stall-$r.db
  port=$((40000 + RANDOM % 10000))
  cep=tcp://127.0.0.1:$((port + 1))
  "$build/moetune-coordinator" --db "$db" --bind "tcp://127.0.0.1:$port" --control "$cep" --log-level warn \
    2>"$T/coord-$r.log" &
  coord=$!
  until "$build/moetune" status --control "$cep" --timeout-ms 200 >/dev/null 2>&1; do sleep 0.05; done
  idle=0
  for i in $(seq 1 10); do
    a=$(now_ms)
    "$build/moetune" status --control "$cep" --timeout-ms 60000 >/dev/null 2>&1 || true
    b=$(now_ms)
    [ $((b - a)) -gt "$idle" ] && idle=$((b - a))
  done
  t0=$(now_ms)
  "$build/moetune" submit --control "$cep" --timeout-ms 60000 --json --name "stall-$r" "${shapes[@]}" \
    >"$T/submit-$r.json" &
  sub=$!
  answered=0 worst=0
  while kill -0 "$sub" 2>/dev/null; do
    a=$(now_ms)
    "$build/moetune" status --control "$cep" --timeout-ms 60000 >/dev/null 2>&1 || true
    b=$(now_ms)
    kill -0 "$sub" 2>/dev/null && answered=$((answered + 1))
    [ $((b - a)) -gt "$worst" ] && worst=$((b - a))
  done
  wait "$sub"
  t1=$(now_ms)
  jobs=$(grep -o '"jobs": *[0-9]*' "$T/submit-$r.json" | grep -o '[0-9]*$' || echo '?')
  printf '%-4s %-12s %-10s %-16s %-14s %-8s\n' "$r" "$idle" $((t1 - t0)) "$answered" "$worst" "$jobs"
  kill -TERM "$coord"
  wait "$coord" 2>/dev/null || true
done
