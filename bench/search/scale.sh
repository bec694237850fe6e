#!/usr/bin/env bash
# Sim at scale (issue 9's benchmark): N sim workers at time scale 1 on one sweep, its wall time
# against the ideal. The workers sleep what a GPU would spend (compile, warm-up and timed
# samples, sim backend), so a perfect scheduler finishes in (total simulated work) / N.
#   bench/search/scale.sh BUILD_OR_BIN_DIR [N] [--shape ... | --model ... sweep options]
# Default N = 256, sweep = 4 shapes x (BLOCK_M 16..128, BLOCK_N 64..256, BLOCK_K 64,128, GROUP 1,16,
# warps 4,8, stages 3,4) x the 18 default batch sizes, racing on (the default).
# The wall time runs from the submit to the sweep's 'done' (the coordinator's log line), with every worker
# connected before the submit (start-up is not the scheduler's work). The ideal is the GPU's
# work: what the sim sleeps as kernels, per result row its timed samples (results.timed_us,
# racing's first samples included) and its warm-up replays (WARMUP, default 2 as --warmup's, x
# median for a row measured before a best was known; WARMUP - 2 for a racing survivor, whose first
# 2 timed samples were its warm-up; none for a pruned row; WARMUP per round for a decide row,
# measured in 5 rounds; scale_span.py's gpu_work), over N. Env: WARMUP, when the sweep options
# give another --warmup; WORKER_CREDITS, the jobs each worker holds (--credits; default the sim's 1,
# cuda workers hold 2); KEEP_LOGS=1 keeps the run's directory for scale_span.py, WORKER_LOGS=1 with
# each worker's own log at debug (w1.log ..; costs some CPU) for its breakdown; COORD_LOG_LEVEL=debug
# (default info) lets scale_span.py count the commit backlog.
# A finalist's first-pass work is not in it (its decide row replaced that row), so the ideal is
# a little short of the work. Compiles are not in it: the sim compiles a job's
# configs ahead on 15 threads per worker, as the cuda backend does on a 16-core host, so what a worker
# waits for them (mostly a job's first config) counts against the scheduler. Needs python3
# (sqlite3 module).
set -euo pipefail
bin=${1:?usage: bench/search/scale.sh BUILD_OR_BIN_DIR [N] [sweep options]}
n=${2:-256}
shift $(( $# >= 2 ? 2 : 1 ))
sweep=("$@")
if [ ${#sweep[@]} -eq 0 ]; then
  sweep=(--shape E=128,N=768,K=2048,topk=8 --shape E=8,N=7168,K=4096,topk=2 --shape E=256,N=256,K=7168,topk=8
         --shape E=128,N=1536,K=4096,topk=8 --block-m 16,32,64,128 --block-n 64,128,256 --block-k 64,128
         --group-m 1,16 --num-warps 4,8 --num-stages 3,4)
fi
case ${COORD_LOG_LEVEL:-info} in
  info | debug) ;;
  *) echo "COORD_LOG_LEVEL must be info or debug: the sweep's end is read from the coordinator's log" >&2; exit 2 ;;
esac
T=$(mktemp -d /tmp/moetune-scale.XXXXXX)
# the script's own exit status stays (a kill of nothing left must not turn 0 into 1)
trap 'rc=$?; kill -TERM $(jobs -p) 2>/dev/null || true; sleep 1; kill -KILL $(jobs -p) 2>/dev/null || true
      wait 2>/dev/null || true; [ -n "${KEEP_LOGS:-}" ] || rm -rf "$T"; exit $rc' EXIT
ulimit -n 65536 2>/dev/null || ulimit -n 8192 2>/dev/null || true
db=$T/scale.db
source "$(dirname "$0")/coord.sh"
start_coord "$db" "$T/coord.log" --max-connections 4096 --log-level "${COORD_LOG_LEVEL:-info}" || exit 1
for i in $(seq 1 "$n"); do
  if [ -n "${WORKER_LOGS:-}" ]; then log=(--log-level debug) wlog=$T/w$i.log; else log=(--log-level warn) wlog=$T/workers.log; fi
  "$bin/moetune-worker" --connect "$wep" --backend sim --sim-time-scale 1 --id "s$i" \
    ${WORKER_CREDITS:+--credits "$WORKER_CREDITS"} "${log[@]}" 2>>"$wlog" &
done
for _ in $(seq 1 300); do
  alive=$("$bin/moetune" workers --control "$cep" --json 2>/dev/null | python3 -c '
import json, sys
d = json.load(sys.stdin)
ws = d.get("workers", d) if isinstance(d, dict) else d
print(sum(1 for w in ws if w.get("state") in ("idle", "busy")))' 2>/dev/null || echo 0)
  [ "$alive" -ge "$n" ] && break
  sleep 0.1
done
echo "workers connected: $alive of $n"
[ -z "${KEEP_LOGS:-}" ] || echo "kept: $T"
t0=$(date +%s.%N)
"$bin/moetune" submit --control "$cep" --name scale "${sweep[@]}" >"$T/submit.out" 2>"$T/submit.err" ||
  { cat "$T/submit.err"; exit 1; }
# the end: the coordinator's log line for the sweep ('done', or 'failed'/'cancelled'), watched
# with grep every 0.1 s (a status poll, a moetune and a python3 process 10 times a second, took a
# share of the 2 cores the system under test runs on); its timestamp is the end, not when the
# watch saw it
line=
for _ in $(seq 1 6000); do
  line=$(grep -m 1 -E "sweep 1 'scale' (done|failed|cancelled):" "$T/coord.log" || true)
  [ -n "$line" ] && break
  sleep 0.1
done
case "$line" in
  *"'scale' done:"*) t1=$(date -d "${line%% *}" +%s.%N) ;;
  *) echo "sweep ended: ${line:-not in 10 min}"; exit 1 ;;
esac
python3 - "$db" "$n" "$t0" "$t1" "${WARMUP:-2}" "$(dirname "$0")" <<'PY'
import sqlite3, sys
db, n, t0, t1 = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
sys.path.insert(0, sys.argv[6])
from scale_span import gpu_work
c = sqlite3.connect(db)
rows, planned = c.execute("SELECT count(*), (SELECT results_planned FROM sweeps WHERE id=1) FROM results WHERE sweep_id=1").fetchone()
per = gpu_work(db, int(sys.argv[5])).values()
timed, warm = sum(t for t, _ in per), sum(u for _, u in per)
by = dict(c.execute("SELECT status, count(*) FROM results WHERE sweep_id=1 GROUP BY status").fetchall())
work = timed + warm
wall = t1 - t0
print(f"rows {rows} of {planned} planned; by status {by}")
print(f"workers {n}; wall {wall:.1f} s; GPU work {work:.1f} s (timed {timed:.1f}, warm-up {warm:.1f})")
print(f"ideal {work / n:.2f} s -> efficiency {work / n / wall * 100:.1f} %")
assert rows == planned, "rows missing"
PY
