#!/usr/bin/env bash
# SIGKILL one worker while it holds a lease: its jobs go to the others after three silent
# heartbeat periods, the sweep completes, and the rows are exactly the planned set.
source "$(dirname "$0")/lib.sh"
SPACE=(--block-m 16,64 --block-n 64,128 --block-k 128 --group-m 1,16 --num-warps 4,8 --num-stages 3,4)

start_coordinator --heartbeat-ms 200 --lease-ms 5000
start_workers 4 --sim-time-scale 1
"$BIN/moetune" submit --control "$CEP" --name kill-worker --chunk 4 "${SPACE[@]}" \
  --shape E=128,N=768,K=2048,topk=8 --shape E=8,N=7168,K=4096,topk=2 >"$T/submit.out" 2>&1 \
  || { cat "$T/submit.out"; fail "submit failed"; }

victim=${PIDS[0]}
# Stopped first, so that the jobs it holds are known: a stopped worker finishes nothing, and
# what it holds is in the database half a second later. A worker stopped between two jobs
# holds none: it is let go again and stopped a moment later.
held_ids=""
for _ in $(seq 1 40); do
  held=$(sql "SELECT count(*) FROM jobs WHERE state='leased' AND worker_id='w1-$$'" 2>/dev/null || echo 0)
  done_rows=$(sql "SELECT count(*) FROM results" 2>/dev/null || echo 0)
  if [ "$held" -gt 0 ] && [ "$done_rows" -gt 0 ]; then
    kill -STOP "$victim"
    # what it sent before the stop is committed within the half second, before its three
    # silent heartbeat periods (600 ms) give its leases back
    sleep 0.5
    held_ids=$(sql "SELECT id FROM jobs WHERE state='leased' AND worker_id='w1-$$'" | tr '\n' ',' | sed 's/,$//')
    [ -n "$held_ids" ] && break
    kill -CONT "$victim"
  fi
  sleep 0.05
done
[ -n "$held_ids" ] || fail "worker 1, stopped, never held a lease"
held=$(tr ',' '\n' <<<"$held_ids" | wc -l)
kill_quiet "$victim"
pass "killed worker 1 (pid $victim) while it held $held job(s), $done_rows rows committed"

state=$(wait_sweep 1 240)
[ "$state" = done ] || fail "sweep state is $state"
rows=$(check_rows 1)
requeued=$(sql "SELECT count(*) FROM jobs WHERE sweep_id=1 AND attempts > 0")
[ "$requeued" -ge 1 ] || fail "no job was re-queued after the kill"
# Each job the victim held at the kill was finished by another worker, on a later attempt.
taken=$(sql "SELECT count(*) FROM jobs WHERE id IN ($held_ids) AND state='done' AND worker_id <> 'w1-$$' AND attempts >= 1")
[ "$taken" = "$held" ] || fail "of the $held job(s) worker 1 held ($held_ids), $taken were finished by another worker after a re-queue: $(sql "SELECT id, state, worker_id, attempts FROM jobs WHERE id IN ($held_ids)")"
pass "sweep done: $rows rows, exactly the planned set; $requeued job(s) re-queued, the $held held by worker 1 finished by others"
sleep 0.5
orphans=$(pgrep -f -- "--id w1-$$" | wc -l || true)
[ "$orphans" = 0 ] || fail "$orphans process(es) of the killed worker are still running"
pass "no process of the killed worker is left"
