#!/usr/bin/env bash
# Two GPUs of one model that read the same kernels a few percent apart (sim): how often a racing
# sweep over both picks what a sweep on one card picks. Two H100s of one model, driver and power
# limit read these kernels up to 3 % apart (docs/performance.md), more than the decide step's 2 %.
# A one-card reference sweep (one sim worker), then RUNS sweeps of the same spec over two sim
# workers on GPU indices 0 and 1 (two devices of one name), the second's latencies x SLOWDOWN
# (--sim-faults slowdown=X); compare.py scores each run against the reference: the batch sizes
# where it picked another config (other_config), and its picks' medians in the reference over the
# reference's pick (worst, mean).
#   bench/search/two_cards.sh BUILD_OR_BIN_DIR OUT_DIR [RUNS] [SLOWDOWN] [sweep options]
# Default: 8 runs, slowdown 1.04, Qwen3-30B-A3B TP1, the default space, 13 batch sizes 1 .. 4096,
# racing and its decide step (the defaults); sim time scale 0. Env REF_SWEEP: the reference's
# options instead of the sweep's (a halving sweep against every config measured: REF_SWEEP="--model
# qwen3-30b-a3b --tp 1 --race-margin 0 --batch-sizes ..."). Writes OUT_DIR/ref.db, OUT_DIR/twoN.db
# and OUT_DIR/compare.txt (its last line: summary {"twoN": {...}, ...}).
set -euo pipefail
bin=${1:?usage: bench/search/two_cards.sh BUILD_OR_BIN_DIR OUT_DIR [RUNS] [SLOWDOWN] [sweep options]}
out=${2:?OUT_DIR}
runs=${3:-8}
slow=${4:-1.04}
shift $(($# >= 4 ? 4 : $#))
sweep=("$@")
[ ${#sweep[@]} -eq 0 ] && sweep=(--model qwen3-30b-a3b --tp 1 --batch-sizes 1,2,4,8,16,32,64,128,256,512,1024,2048,4096)
here=$(cd "$(dirname "$0")" && pwd)
source "$here/coord.sh"
mkdir -p "$out"
rm -f "$out"/ref.db "$out"/two*.db
T=$(mktemp -d /tmp/moetune-two.XXXXXX)
trap 'rc=$?; kill -KILL $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$T"; exit $rc' EXIT
ref=("${sweep[@]}")
[ -n "${REF_SWEEP:-}" ] && read -r -a ref <<<"$REF_SWEEP"
"$bin/moetune" tune --backend sim --workers 1 --sim-time-scale 0 "${ref[@]}" --db "$out/ref.db" --out "$T/ref" \
  >"$T/ref.out" 2>"$T/ref.err" || { tail -n 5 "$T/ref.err"; exit 1; }
for r in $(seq 1 "$runs"); do
  db=$out/two$r.db
  start_coord "$db" "$T/coord.log" || exit 1
  "$bin/moetune-worker" --connect "$wep" --backend sim --gpu 0 --id fast --log-level warn 2>>"$T/w.log" &
  w0=$!
  "$bin/moetune-worker" --connect "$wep" --backend sim --gpu 1 --id slow --sim-faults "slowdown=$slow" \
    --log-level warn 2>>"$T/w.log" &
  w1=$!
  "$bin/moetune" submit --control "$cep" --name two-cards "${sweep[@]}" >"$T/submit.out" 2>&1 || { cat "$T/submit.out"; exit 1; }
  state=
  for _ in $(seq 1 3000); do
    state=$(python3 -c 'import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute("SELECT state FROM sweeps WHERE id = 1").fetchone()[0])' "$db" 2>/dev/null || true)
    [ -n "$state" ] && [ "$state" != running ] && break
    sleep 0.2
  done
  kill -TERM "$w0" "$w1" "$coord" 2>/dev/null || true
  wait "$w0" "$w1" "$coord" 2>/dev/null || true
  [ "$state" = done ] || { echo "run $r ended '$state'" >&2; exit 1; }
done
MT_BIN_DIR=$bin python3 "$here/compare.py" "$out" ref $(seq -f 'two%g' 1 "$runs") >"$out/compare.txt"
grep '^summary ' "$out/compare.txt"
