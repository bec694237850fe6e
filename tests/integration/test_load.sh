#!/usr/bin/env bash
# Load: 500 worker connections on loopback against one coordinator (one process holding 500
# DEALER sockets, each a minimal worker that answers every Job at once). Every connection is
# welcomed and served at least one job, the sweep's rows are exactly the planned set, and the
# coordinator's peak memory stays bounded. Prints peak RSS and results/s.
source "$(dirname "$0")/lib.sh"
N=${MT_LOAD_CONNECTIONS:-500}
# 256 MiB; under AddressSanitizer (MT_SANITIZED=1, set by CMake) 1 GiB, for its shadow memory
# and the quarantine of freed blocks.
RSS_LIMIT_KB=${MT_LOAD_RSS_LIMIT_KB:-262144}
[ "${MT_SANITIZED:-0}" = 1 ] && RSS_LIMIT_KB=${MT_LOAD_RSS_LIMIT_KB:-1048576}
ulimit -n 8192 2>/dev/null || ulimit -n 4096 2>/dev/null || true
[ "$(ulimit -n)" -ge $((N * 2 + 100)) ] || { echo "skipped: open-file limit $(ulimit -n) is too low for $N connections"; exit 77; }

start_coordinator --heartbeat-ms 1000 --lease-ms 30000
t0=$(date +%s.%N)
"$BIN/mt_loadgen" "$WEP" "$N" 240 4000 >"$T/load.json" 2>"$T/load.err" &
LOAD_PID=$!
PIDS+=($LOAD_PID)
# The sweep is submitted once all connections have joined, so every worker's Ready is waiting
# when the jobs appear (a sweep this fast would otherwise be over before the last ones join).
for _ in $(seq 1 600); do
  joined=$(sql "SELECT count(*) FROM workers WHERE worker_id LIKE 'load-%'" 2>/dev/null || echo 0)
  [ "$joined" = "$N" ] && break
  sleep 0.1
done
[ "$joined" = "$N" ] || fail "only $joined of $N connections joined"
t_join=$(date +%s.%N)
t_sub=$(date +%s.%N)   # the rate counts from the submit, planning included
# 8 shapes x the default space, chunk 4: about 2,300 jobs, so each of the 500 connections gets several.
"$BIN/moetune" submit --control "$CEP" --name load --chunk 4 \
  --batch-sizes 1,16,64,256,1024,4096 \
  --shape E=128,N=768,K=2048,topk=8 --shape E=8,N=7168,K=4096,topk=2 --shape E=256,N=256,K=7168,topk=8 \
  --shape E=128,N=1536,K=4096,topk=8 --shape E=512,N=512,K=2048,topk=10 --shape E=8,N=14336,K=4096,topk=2 \
  --shape E=128,N=384,K=2048,topk=8 --shape E=256,N=2048,K=7168,topk=8 >"$T/submit.out" 2>&1 \
  || { cat "$T/submit.out"; fail "submit failed"; }
planned=$(sql "SELECT results_planned FROM sweeps WHERE id=1")
jobs=$(sql "SELECT count(*) FROM jobs WHERE sweep_id=1")
state=$(wait_sweep 1 240)
t1=$(date +%s.%N)
[ "$state" = done ] || fail "sweep state is $state"
hwm=$(awk '/VmHWM/ {print $2}' "/proc/$COORD_PID/status")
wait "$LOAD_PID" || fail "load generator failed: $(cat "$T/load.err")"
cat "$T/load.json"
rows=$(check_rows 1)
welcomed=$(jq -r .welcomed "$T/load.json")
served=$(jq -r .served "$T/load.json")
[ "$welcomed" = "$N" ] || fail "$welcomed of $N connections welcomed"
[ "$served" = "$N" ] || fail "$served of $N connections got a job"
known=$(sql "SELECT count(*) FROM workers WHERE worker_id LIKE 'load-%'")
[ "$known" = "$N" ] || fail "$known of $N workers recorded"
[ "$hwm" -le "$RSS_LIMIT_KB" ] || fail "coordinator peak RSS ${hwm} kB is over ${RSS_LIMIT_KB} kB"
rate=$(echo "$rows / ($t1 - $t_sub)" | bc -l)
join_s=$(echo "$t_join - $t0" | bc -l)
printf 'ok: %s connections joined in %.1f s, all welcomed and served; %s jobs, %s rows = planned; coordinator peak RSS %s kB; %.0f results/s\n' \
  "$N" "$join_s" "$jobs" "$rows" "$hwm" "$rate"
