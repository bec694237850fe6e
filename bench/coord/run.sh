#!/usr/bin/env bash
# Coordinator throughput and dispatch latency with sim workers at time scale 0 on loopback.
# For each worker count: a fresh database, one coordinator, N workers, one sweep of 8 shapes x the
# default space x 18 batch sizes. Reports results committed per second (planned rows / wall time
# from submit, with the workers starting after it, to the sweep's 'done' state, polled every 20 ms) and the dispatch round trip (Ready
# sent -> Job received, measured in every worker; p50 = median of the workers' p50, p99 = the
# workers' worst p99).
#   bench/coord/run.sh BUILD_DIR [WORKER_COUNTS...]      (default counts: 1 8 64)
#   env: COORD_LOG_LEVEL (coordinator --log-level, default warn; debug logs each batch's commit
#   time), KEEP_LOGS=1 (keep the temporary folder with the logs and the workers' stats).
# What the numbers mean:
# - Everything (coordinator, its writer thread, N worker parents and N sim children, the CLI and
#   the sqlite3 poller) shares this machine's cores. Sim workers at time scale 0 never idle while
#   jobs are pending, so the cores are saturated and the round trip includes the time the
#   coordinator's and the worker's threads wait for a core, not only the coordinator's own work.
#   On a 2-core machine that scheduling wait dominates p99 from 8 workers on.
# - The sweep is submitted before the workers start, so every Ready finds work queued (a worker
#   started before the submit would count its wait for work as dispatch time). Ready messages sent after the
#   last job was handed out never get a Job and are not samples.
# - Other processes on the machine change the numbers from run to run; run it more than once.
set -euo pipefail
build=${1:?usage: bench/coord/run.sh BUILD_DIR [N...]}
shift
counts=("$@")
[ ${#counts[@]} -eq 0 ] && counts=(1 8 64)
T=$(mktemp -d /tmp/moetune-bench.XXXXXX)
trap 'kill -KILL $(jobs -p) 2>/dev/null || true; [ -n "${KEEP_LOGS:-}" ] || rm -rf "$T"' EXIT
shapes=()
for s in E=128,N=768,K=2048,topk=8 E=8,N=7168,K=4096,topk=2 E=256,N=256,K=7168,topk=8 E=128,N=1536,K=4096,topk=8 \
         E=512,N=512,K=2048,topk=10 E=8,N=14336,K=4096,topk=2 E=128,N=384,K=2048,topk=8 E=256,N=2048,K=7168,topk=8; do
  shapes+=(--shape "$s")
done
printf '%-8s %-10s %-12s %-14s %-10s %-10s\n' workers rows seconds results/s rtt_p50_us rtt_p99_us
for n in "${counts[@]}"; do
  db=$T/bench-$n.db
  rm -f "$db"*
  port=$((40000 + RANDOM % 10000))
  wep=tcp://127.0.0.1:$port cep=tcp://127.0.0.1:$((port + 1))
  "$build/moetune-coordinator" --db "$db" --bind "$wep" --control "$cep" --log-level "${COORD_LOG_LEVEL:-warn}" 2>"$T/coord-$n.log" &
  coord=$!
  until "$build/moetune" status --control "$cep" --timeout-ms 200 >/dev/null 2>&1; do sleep 0.05; done
  # The sweep is queued before the workers start, so every Ready a worker sends finds work
  # waiting: the round trip is dispatch latency, not a wait for a sweep to exist. The wall time
  # starts at the submit and so includes the workers' start-up (conservative for the rate).
  t0=$(date +%s.%N)
  "$build/moetune" submit --control "$cep" --name "bench-$n" "${shapes[@]}" >/dev/null
  wpids=()
  for i in $(seq 1 "$n"); do
    "$build/moetune-worker" --connect "$wep" --backend sim --sim-time-scale 0 --id "b$i" --stats \
      --log-level warn >"$T/w$n-$i.json" 2>>"$T/workers-$n.log" &
    wpids+=($!)
  done
  while [ "$(sqlite3 "$db" "SELECT state FROM sweeps WHERE id=1")" = running ]; do sleep 0.02; done
  t1=$(date +%s.%N)
  rows=$(sqlite3 "$db" "SELECT count(*) FROM results WHERE sweep_id=1")
  planned=$(sqlite3 "$db" "SELECT results_planned FROM sweeps WHERE id=1")
  [ "$rows" = "$planned" ] || { echo "rows $rows != planned $planned" >&2; exit 1; }
  kill -TERM "${wpids[@]}"
  wait "${wpids[@]}" 2>/dev/null || true
  kill -TERM "$coord"; wait "$coord" 2>/dev/null || true
  secs=$(echo "$t1 - $t0" | bc -l)
  rate=$(echo "$rows / $secs" | bc -l)
  p50=$(cat "$T"/w$n-*.json | jq -s '[.[].dispatch_rtt_us.p50] | sort | .[length/2|floor]')
  p99=$(cat "$T"/w$n-*.json | jq -s '[.[].dispatch_rtt_us.p99] | max')
  printf '%-8s %-10s %-12.2f %-14.0f %-10.0f %-10.0f\n' "$n" "$rows" "$secs" "$rate" "$p50" "$p99"
done
