#!/usr/bin/env bash
# The tail of a sweep: 8 sim workers at time scale 1 and a sweep of 3 long jobs (48 configs,
# chunk 16, 18 batch sizes, racing off). Without splitting, 5 workers idle and the sweep lasts at
# least its longest job (>= the simulated work / 3); with it, idle workers take the back half of
# a leased job's open configs, so the wall time must beat that bound, and every planned row is
# stored exactly once although a holder may measure a config that was moved away from it.
source "$(dirname "$0")/lib.sh"

start_coordinator
start_workers 8 --sim-time-scale 1
for _ in $(seq 1 100); do
  alive=$("$BIN/moetune" workers --control "$CEP" --json 2>/dev/null | jq '[.workers[] | select(.state == "idle")] | length' 2>/dev/null || echo 0)
  [ "$alive" = 8 ] && break
  sleep 0.1
done
[ "$alive" = 8 ] || fail "$alive of 8 workers connected"
t0=$(date +%s.%N)
"$BIN/moetune" submit --control "$CEP" --name tail --wait --shape E=8,N=7168,K=4096,topk=2 \
  --block-m 16,32,64 --block-n 64,128 --block-k 64,128 --group-m 1 --num-warps 4,8 --num-stages 3,4 \
  --chunk 16 --race-margin 0 >"$T/submit.out" 2>&1 || { cat "$T/submit.out"; fail "submit failed"; }
t1=$(date +%s.%N)
[ "$(sql "SELECT state FROM sweeps WHERE id=1")" = done ] || fail "sweep is $(sql "SELECT state FROM sweeps WHERE id=1")"
rows=$(check_rows 1)
[ "$rows" = $((48 * 18)) ] || fail "$rows rows, expected $((48 * 18))"
pass "$rows rows, exactly the planned set, each once"

# the wall time against the bound without splitting: the longest of 3 jobs >= the work / 3;
# work per config as the sim sleeps it: timed samples, warm-up (2 x median), 50 ms compile
work=$(sql "SELECT (SUM(timed_us) + SUM(2 * median_us)) / 1e6 + 0.05 * COUNT(DISTINCT config_id) FROM results WHERE sweep_id=1")
wall=$(echo "$t1 - $t0" | bc -l)
bound=$(echo "$work / 3" | bc -l)
printf 'wall %.1f s, simulated work %.1f s, no-split bound %.1f s, ideal %.1f s\n' "$wall" "$work" "$bound" "$(echo "$work / 8" | bc -l)"
[ "$(echo "$wall < 0.8 * $bound" | bc -l)" = 1 ] || fail "wall $wall s does not beat 0.8 x the no-split bound $bound s"
pass "wall time beats the no-split bound"

# jobs: the 3 planned, and the splits; every config in exactly one job, every job done
planned_jobs=3
jobs=$(sql "SELECT count(*) FROM jobs WHERE sweep_id=1")
[ "$jobs" -gt "$planned_jobs" ] || fail "no job was split ($jobs jobs)"
[ "$(sql "SELECT count(*) FROM jobs WHERE sweep_id=1 AND state <> 'done'")" = 0 ] || fail "a job is not done"
[ "$(sql "SELECT count(*), count(DISTINCT config_id) FROM job_configs jc JOIN jobs j ON j.id = jc.job_id WHERE j.sweep_id=1")" = "48|48" ] \
  || fail "job_configs: $(sql "SELECT count(*), count(DISTINCT config_id) FROM job_configs")"
[ "$(sql "SELECT count(*) FROM jobs j WHERE sweep_id=1 AND NOT EXISTS (SELECT 1 FROM job_configs WHERE job_id = j.id)")" = 0 ] \
  || fail "a job lost all its configs"
pass "$jobs jobs ($planned_jobs planned), each config in one job, all done"

# nothing was rejected or requeued: a holder's results for moved configs are accepted or dropped quietly
st=$("$BIN/moetune" status --control "$CEP" --json)
[ "$(echo "$st" | jq '.counters.rejected_results // 0')" = 0 ] || fail "rejected results: $(echo "$st" | jq .counters)"
[ "$(echo "$st" | jq '.counters.requeued_jobs // 0')" = 0 ] || fail "requeued jobs: $(echo "$st" | jq .counters)"
[ "$(echo "$st" | jq '.sweeps[0].results_done')" = "$rows" ] || fail "status counts $(echo "$st" | jq '.sweeps[0].results_done') of $rows"
pass "no result rejected, no job requeued, status counts every row once"
