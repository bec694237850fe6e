#!/usr/bin/env bash
# Run-to-run noise of a few configs: the same `tune --configs` sweep N times, each from a fresh
# database (a new process, new allocations, one job measuring the configs side by side), then per
# (batch size, config) the slowest run's median over the fastest's (stability.py spread). Tells
# how far apart two separate measurements of one config land, which bounds what any sweep's picks
# among near-ties can agree on.
# With ONE_PROCESS=1 the N sweeps go instead to one coordinator and one worker started once, one
# after another: the same worker process (its buffers kept while the shape is the same) measures
# them all, so what differs between its sweeps is time, not process state.
#   bench/search/noise.sh OUT_DIR N [tune options, --configs among them]
# Env: BACKEND (default cuda; sim for a dry run), MT_BIN_DIR (the binaries; default from PATH),
#      ONE_PROCESS (0 or 1), PORT (ONE_PROCESS: worker port, control is PORT+1; default 5655).
set -uo pipefail
out=${1:?usage: bench/search/noise.sh OUT_DIR N [tune options]}
n=${2:?usage: bench/search/noise.sh OUT_DIR N [tune options]}
shift 2
source "$(dirname "$0")/lib.sh" "$@"
if [ "${ONE_PROCESS:-0}" = 1 ]; then
  port=${PORT:-5655}
  db="$out/one.db"
  rm -f "$db"*
  "$bin/moetune-coordinator" --db "$db" --bind "tcp://127.0.0.1:$port" --control "tcp://127.0.0.1:$((port + 1))" \
    >"$out/coordinator.log" 2>&1 &
  cpid=$!
  wargs=()
  [ "$backend" = sim ] && wargs=(--sim-time-scale 0)
  "$bin/moetune-worker" --connect "tcp://127.0.0.1:$port" --backend "$backend" "${wargs[@]}" >"$out/worker.log" 2>&1 &
  wpid=$!
  trap 'kill $wpid $cpid 2>/dev/null; wait' EXIT
  for i in $(seq 1 "$n"); do
    "$bin/moetune" submit --control "tcp://127.0.0.1:$((port + 1))" --worker-backend "$backend" "$@" --name "noise-$i" \
      --wait >"$out/submit$i.out" 2>"$out/submit$i.err" || { tail -n 5 "$out/submit$i.err"; exit 1; }
  done
  python3 "$here/stability.py" spread "$db"
  exit
fi
dbs=()
for i in $(seq 1 "$n"); do
  rm -f "$out/run$i.db"*
  "$bin/moetune" tune --backend "$backend" "${extra[@]}" "$@" --name "noise-$i" --db "$out/run$i.db" \
    --out "$out/configs-$i" >"$out/run$i.out" 2>"$out/run$i.err" || { tail -n 5 "$out/run$i.err"; exit 1; }
  dbs+=("$out/run$i.db")
done
python3 "$here/stability.py" spread "${dbs[@]}"
