#!/usr/bin/env bash
# Run-to-run noise of a few configs: the same `tune --configs` sweep N times, each from a fresh
# database (a new process, new allocations, one job measuring the configs side by side), then per
# (batch size, config) the slowest run's median over the fastest's (stability.py spread). Tells
# how far apart two separate measurements of one config land, which bounds what any sweep's picks
# among near-ties can agree on.
#   bench/search/noise.sh OUT_DIR N [tune options, --configs among them]
# Env: BACKEND (default cuda; sim for a dry run), MT_BIN_DIR (the binaries; default from PATH).
set -uo pipefail
out=${1:?usage: bench/search/noise.sh OUT_DIR N [tune options]}
n=${2:?usage: bench/search/noise.sh OUT_DIR N [tune options]}
shift 2
bin=${MT_BIN_DIR:-$(dirname "$(command -v moetune)")}
backend=${BACKEND:-cuda}
here=$(cd "$(dirname "$0")" && pwd)
extra=()
[ "$backend" = sim ] && extra=(--workers 1 --sim-time-scale 0)
mkdir -p "$out"
dbs=()
for i in $(seq 1 "$n"); do
  rm -f "$out/run$i.db"*
  "$bin/moetune" tune --backend "$backend" "${extra[@]}" "$@" --name "noise-$i" --db "$out/run$i.db" \
    --out "$out/configs-$i" >"$out/run$i.out" 2>"$out/run$i.err" || { tail -n 5 "$out/run$i.err"; exit 1; }
  dbs+=("$out/run$i.db")
done
python3 "$here/stability.py" spread "${dbs[@]}"
