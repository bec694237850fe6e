#!/usr/bin/env bash
# Nothing waits forever on a lease, nothing impossible is stored:
#  1. a job whose Results the wire rejects goes back and is leased again to the worker that still
#     holds it: the worker takes the new lease, and after --max-attempts the job fails, so the
#     sweep ends (failed) instead of waiting;
#  2. leases are renewed by progress only: a peer that takes jobs and only heartbeats (asking for
#     1024 credits) holds 2 jobs at most and loses them after one lease; a peer that claims to
#     measure one config forever keeps it for the config timeout, then loses it;
#  3. impossible measurements (ok with 0 samples, min above the median, stddev 1e11, a median of
#     1e-9 us, 4e9 samples) are rejected and their jobs sent back: a real worker finishes the
#     sweep and no such row is stored;
#  4. a lease shorter than two heartbeats is refused at start in one line;
#  5. status names a racing sweep's two phases as its decide step, not halving.
source "$(dirname "$0")/lib.sh"
[ -x "$BIN/mt_peer" ] || { echo "mt_peer not built"; exit 77; }
SPACE=(--block-m 16,32 --block-n 64,128 --block-k 64,128 --group-m 1,16 --num-warps 4,8 --num-stages 2)

# ---- 1. rejected Results, the same worker leased again, --max-attempts
start_coordinator --heartbeat-ms 200 --lease-ms 5000
# a sim card 100 times faster than any GPU: medians under half a microsecond, which the wire rejects
start_workers 1 --sim-faults slowdown=0.01
"$BIN/moetune" submit --control "$CEP" --name tiny --max-attempts 3 --chunk 8 --batch-sizes 1,2 "${SPACE[@]}" \
  --shape E=8,N=256,K=256,topk=2 >"$T/submit1.out" 2>&1 || { cat "$T/submit1.out"; fail "submit failed"; }
state=$(wait_sweep 1 60)
[ "$state" = failed ] || fail "sweep of rejected results: $state (expected failed after --max-attempts 3)"
[ "$(sql "SELECT count(*) FROM jobs WHERE sweep_id = 1 AND (state <> 'failed' OR attempts <> 3)")" = 0 ] \
  || fail "jobs not failed after 3 attempts: $(sql "SELECT id, state, attempts FROM jobs WHERE sweep_id = 1")"
[ "$(sql "SELECT count(*) FROM results WHERE sweep_id = 1 AND status = 'ok' AND median_us < 0.5")" = 0 ] \
  || fail "medians under 0.5 us were stored"
grep -q "leased to us again (its earlier lease went back): measured anew" "$T/worker1.log" \
  || fail "the worker did not take the re-lease of a job it held"
! grep -q "already held; ignoring the duplicate" "$T/worker1.log" || fail "the worker dropped a re-lease"
pass "rejected results: each job leased again to its worker, failed after 3 attempts; sweep 1 failed, not stuck"
kill_quiet "${PIDS[0]}"; PIDS=()
kill_quiet "$COORD_PID"; COORD_PID=

# ---- 2 and 3. hoarders, an endless claim and impossible rows, then one real worker
DB=$T/peers.db
start_coordinator --heartbeat-ms 200 --lease-ms 3000
"$BIN/moetune" submit --control "$CEP" --name peers --chunk 2 --max-attempts 10 --config-timeout-ms 2000 --batch-sizes 1,2 "${SPACE[@]}" \
  --shape E=8,N=256,K=256,topk=2 >"$T/submit2.out" 2>&1 || { cat "$T/submit2.out"; fail "submit failed"; }
planned=$(sql "SELECT results_planned FROM sweeps WHERE id = 1")
"$BIN/mt_peer" "$WEP" "hoard-$$" credits=1024 mode=hold seconds=20 >"$T/hoard.out" 2>&1 &
PIDS+=($!)
wait_log "$T/hoard.out" "^job" 5 || fail "the hoarder got no job"
"$BIN/mt_peer" "$WEP" "claim-$$" credits=1 mode=claim seconds=20 >"$T/claim.out" 2>&1 &
PIDS+=($!)
wait_log "$T/claim.out" "^job" 5 || fail "the claimer got no job"
for kind in samples0 minmed stddev tiny manysamples; do
  "$BIN/mt_peer" "$WEP" "bad-$kind-$$" credits=1 mode=bad bad=$kind seconds=20 >"$T/bad-$kind.out" 2>&1 &
  PIDS+=($!)
  wait_log "$T/bad-$kind.out" "^job" 5 || fail "the $kind peer got no job"
done
sleep 0.5
hoarded=$(sql "SELECT count(*) FROM jobs WHERE state = 'leased' AND worker_id = 'hoard-$$'")
[ "$hoarded" -le 2 ] || fail "a peer asking for 1024 credits holds $hoarded jobs"
claim_job=$(awk '/^job/ {print $2; exit}' "$T/claim.out")
start_workers 1
state=$(wait_sweep 1 40)
[ "$state" = done ] || fail "sweep with hoarders: $state ($(sql "SELECT worker_id, count(*) FROM jobs WHERE state = 'leased' GROUP BY 1"))"
rows=$(check_rows 1)
# the ship guard's rows outside the space join the plan when a shape's decide step is planned
[ "$rows" -ge "$planned" ] && [ "$rows" = "$(sql "SELECT results_planned FROM sweeps WHERE id=1")" ] \
  || fail "$rows rows, $planned planned at submit"
[ "$(grep -c '^job' "$T/hoard.out")" -le 2 ] || fail "the hoarder was sent $(grep -c '^job' "$T/hoard.out") jobs"
grep -Eq "job [0-9]+ back to pending: lease expired" "$T/coord.log" || fail "no lease expired"
[ "$(sql "SELECT worker_id FROM jobs WHERE id = $claim_job")" = "w1-$$" ] \
  || fail "the claimed job $claim_job was not finished by the real worker"
pass "sweep done with $rows rows: the hoarder held $hoarded jobs and lost them, the endless claim lost job $claim_job"
impossible=$(sql "SELECT count(*) FROM results WHERE status IN ('ok', 'pruned') AND (samples < 1 OR samples > 16000000
                  OR min_us > median_us OR stddev_us > 1e6 OR median_us < 0.5 OR worker_id LIKE 'bad-%')")
[ "$impossible" = 0 ] || fail "$impossible impossible rows stored"
rejected=$("$BIN/moetune" status --control "$CEP" --json | jq -r .counters.rejected_results)
[ "$rejected" -ge 5 ] || fail "rejected_results is $rejected, expected 5 or more"
for kind in samples0 minmed stddev tiny manysamples; do
  job=$(awk '/^job/ {print $2; exit}' "$T/bad-$kind.out")
  [ "$(sql "SELECT attempts >= 1 AND state = 'done' FROM jobs WHERE id = $job")" = 1 ] \
    || fail "the job of the $kind peer was not sent back and finished: $(sql "SELECT state, attempts FROM jobs WHERE id = $job")"
done
pass "5 kinds of impossible rows rejected ($rejected rejected), their jobs sent back and finished; none stored"
for p in "${PIDS[@]}"; do kill_quiet "$p"; done; PIDS=()
kill_quiet "$COORD_PID"; COORD_PID=

# ---- 4. a lease shorter than two heartbeats
set +e
timeout 5 "$BIN/moetune-coordinator" --db "$T/lease.db" --bind "tcp://127.0.0.1:$(free_port)" \
  --control "tcp://127.0.0.1:$(free_port)" --lease-ms 100 >"$T/lease.out" 2>"$T/lease.err"
rc=$?
set -e
[ $rc = 2 ] || fail "--lease-ms 100 with a 1000 ms heartbeat: exit $rc, expected 2"
[ "$(grep -c . "$T/lease.err")" = 1 ] && grep -q "shorter than two heartbeat periods (2 x 1000 ms)" "$T/lease.err" \
  || { cat "$T/lease.err"; fail "--lease-ms 100: not one line naming the heartbeat"; }
pass "--lease-ms 100: $(cat "$T/lease.err")"

# ---- 5. status of a racing sweep with its decide step
DB=$T/status.db
start_coordinator
"$BIN/moetune" submit --control "$CEP" --name racing --batch-sizes 1,2 "${SPACE[@]}" --shape E=8,N=256,K=256,topk=2 \
  >/dev/null 2>&1 || fail "submit failed"
"$BIN/moetune" status --control "$CEP" >"$T/status.txt"
grep -q "^sweep 1: racing, then the decide step: phase 1: " "$T/status.txt" || { cat "$T/status.txt"; fail "status: no decide step"; }
! grep -q "halving" "$T/status.txt" || { cat "$T/status.txt"; fail "status calls an exhaustive sweep halving"; }
pass "status: $(grep '^sweep 1: racing' "$T/status.txt")"
