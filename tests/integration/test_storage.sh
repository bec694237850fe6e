#!/usr/bin/env bash
# Storage faults during a sweep: (a) another process holds an exclusive lock on the database for
# about 3 s; (b) the coordinator's file-size limit is lowered under the database's size so writes
# fail (EFBIG; SIGXFSZ is ignored), then raised again. In both the coordinator stays up, reports
# the error and the results waiting in status, and once the disk is writable the sweep completes
# with exactly the planned rows (and PRAGMA integrity_check is ok).
source "$(dirname "$0")/lib.sh"
command -v prlimit >/dev/null || { echo "prlimit (util-linux) not found"; exit 77; }
SPACE=(--block-m 16,64 --block-n 64,128 --block-k 128 --group-m 1,16 --num-warps 4,8 --num-stages 3,4)

counters() { "$BIN/moetune" status --control "$CEP" --json --timeout-ms 5000 | jq -c .counters; }

# ---- (a) a lock held by another process
start_coordinator --heartbeat-ms 200 --lease-ms 5000
start_workers 2 --sim-time-scale 1
"$BIN/moetune" submit --control "$CEP" --name locked --chunk 4 "${SPACE[@]}" \
  --shape E=128,N=768,K=2048,topk=8 --shape E=8,N=7168,K=4096,topk=2 >"$T/submit.out" 2>&1 \
  || { cat "$T/submit.out"; fail "submit failed"; }
for _ in $(seq 1 200); do [ "$(sql "SELECT count(*) FROM results")" -gt 0 ] && break; sleep 0.05; done
lock_db "$DB" 5
seen_err="" max_unacked=0
end=$(( $(date +%s%N) / 1000000 + 3000 ))
while [ $(( $(date +%s%N) / 1000000 )) -lt $end ]; do
  c=$(counters) || fail "status failed while locked"
  e=$(jq -r .storage_error <<<"$c"); u=$(jq -r .results_unacked <<<"$c")
  [ -n "$e" ] && seen_err=$e
  [ "$u" -gt "$max_unacked" ] && max_unacked=$u
  sleep 0.2
done
unlock_db
kill -0 "$COORD_PID" || fail "coordinator died under the lock"
[ -n "$seen_err" ] || fail "no storage error reported while locked"
[ "$max_unacked" -gt 0 ] || fail "no unacknowledged results reported while locked"
pass "locked for 3 s: status said '$seen_err', up to $max_unacked results waiting"
state=$(wait_sweep 1 120)
[ "$state" = done ] || fail "sweep state after the lock is $state"
rows=$(check_rows 1)
[ "$(counters | jq -r .storage_error)" = "" ] || fail "storage error still reported after the lock"
grep -q "storage: commit of .* failed" "$T/coord.log" || fail "no warning logged"
grep -q "storage: commits succeed again" "$T/coord.log" || fail "no recovery logged"
pass "sweep done after the lock: $rows rows, exactly the planned set"
for p in "${PIDS[@]}" $COORD_PID; do kill_quiet "$p"; done
PIDS=() COORD_PID=

# ---- (b) a file-size limit under the database's size
DB=$T/full.db
start_coordinator --heartbeat-ms 200 --lease-ms 5000
start_workers 2 --sim-time-scale 1
"$BIN/moetune" submit --control "$CEP" --name full --chunk 4 "${SPACE[@]}" \
  --shape E=128,N=768,K=2048,topk=8 --shape E=8,N=7168,K=4096,topk=2 >"$T/submit2.out" 2>&1 \
  || { cat "$T/submit2.out"; fail "submit failed"; }
size=$(stat -c %s "$DB")
prlimit --pid "$COORD_PID" --fsize=$((size + 16384)):unlimited || fail "prlimit failed"
seen_err=""
for _ in $(seq 1 150); do
  e=$(counters | jq -r .storage_error) || fail "status failed over the limit"
  [ -n "$e" ] && { seen_err=$e; break; }
  sleep 0.1
done
[ -n "$seen_err" ] || fail "no storage error over the file-size limit"
sleep 1
kill -0 "$COORD_PID" || fail "coordinator died over the file-size limit"
unacked=$(counters | jq -r .results_unacked)
pass "over the file-size limit: status said '$seen_err', $unacked results waiting"
prlimit --pid "$COORD_PID" --fsize=unlimited:unlimited || fail "prlimit failed"
state=$(wait_sweep 1 120)
[ "$state" = done ] || fail "sweep state after the limit is $state"
rows=$(check_rows 1)
[ "$(sql "PRAGMA integrity_check")" = ok ] || fail "integrity_check"
[ "$(counters | jq -r .storage_error)" = "" ] || fail "storage error still reported"
pass "sweep done after the limit was raised: $rows rows, exactly the planned set, integrity ok"
