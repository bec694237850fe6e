#!/usr/bin/env bash
# moetune-coordinator --metrics: the Prometheus text format over HTTP, scraped during a sim sweep
# (workers, leased jobs, a running sweep) and after it, where every counter must equal what the
# database holds: results committed, results by status (wrong results planted with --sim-faults),
# jobs by state; the commit histogram counts every commit.
source "$(dirname "$0")/lib.sh"

MPORT=$(free_port)
while [ "$MPORT" = "$WPORT" ] || [ "$MPORT" = "$CPORT" ]; do MPORT=$(free_port); done
M=http://127.0.0.1:$MPORT/metrics
start_coordinator --metrics 127.0.0.1:$MPORT
scrape() { curl -sf "$M" >"$T/$1.prom" || fail "scrape $1 failed"; }
val() { # FILE METRIC[{labels}] : the sample's value
  awk -v k="$2" '$1 == k {print $2; found=1} END {if (!found) print "absent"}' "$T/$1.prom"
}

# before any worker: zeros, and the format's HELP/TYPE lines
scrape idle
[ "$(val idle 'moetune_workers{state="alive"}')" = 0 ] || fail "alive workers before any started"
[ "$(val idle moetune_results_committed_total)" = 0 ] || fail "results before any sweep"
grep -q '^# TYPE moetune_commit_duration_seconds histogram$' "$T/idle.prom" || fail "no histogram TYPE line"
grep -q '^# TYPE moetune_results_committed_total counter$' "$T/idle.prom" || fail "no counter TYPE line"
ctype=$(curl -s -o /dev/null -w '%{content_type}' "$M")
[ "$ctype" = "text/plain; version=0.0.4" ] || fail "content type '$ctype'"
[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$MPORT/")" = 404 ] || fail "/ is not 404"
[ "$(curl -s -o /dev/null -w '%{http_code}' -X POST "$M")" = 405 ] || fail "POST is not 405"

WRONG=64x128x64x1x4x3
start_workers 2 --sim-time-scale 0.4 --sim-faults wrong=$WRONG
"$BIN/moetune" submit --control "$CEP" --name metrics --shape E=8,N=7168,K=4096,topk=2 --batch-sizes 1,16,64 \
  >"$T/submit.out" 2>&1 || { cat "$T/submit.out"; fail "submit failed"; }

# during the sweep
seen=0
for _ in $(seq 1 100); do
  scrape during
  if [ "$(val during moetune_sweeps_running)" = 1 ] && [ "$(val during 'moetune_workers{state="alive"}')" = 2 ] \
     && [ "$(val during 'moetune_jobs{state="leased"}')" -gt 0 ] && [ "$(val during moetune_results_committed_total)" -gt 0 ]; then
    seen=1; break
  fi
  sleep 0.1
done
[ $seen = 1 ] || { cat "$T/during.prom"; fail "never saw the sweep running with 2 workers and leased jobs"; }
mid=$(val during moetune_results_committed_total)
dbmid=$(sql "SELECT count(*) FROM results")
[ "$mid" -le "$dbmid" ] || fail "metrics count $mid results, the database $dbmid (committed ones only)"
# GPU busy while it runs: the sim workers sleep their timed samples (time scale 0.4: a sweep of
# about 2 s, long enough for the 0.5-s snapshots to see it running; at 0.002 it took 0.2 s), so the
# running sweep's fraction is known and a fraction (0 < x <= 1 per GPU, 2 GPUs)
busy=$(val during moetune_gpu_busy_ratio)
awk -v b="${busy:-x}" 'BEGIN { exit !(b + 0 > 0 && b + 0 <= 2) }' || { grep gpu_busy "$T/during.prom"; fail "GPU busy '$busy' while running"; }
pass "during the sweep: 2 workers alive, $(val during 'moetune_jobs{state="leased"}') jobs leased, $mid results committed (db $dbmid)"

state=$(wait_sweep 1 300)
[ "$state" = done ] || fail "sweep ended $state"
sleep 0.6   # one snapshot period
scrape after
rows=$(sql "SELECT count(*) FROM results")
[ "$(val after moetune_results_committed_total)" = "$rows" ] || fail "committed $(val after moetune_results_committed_total) != $rows rows"
for st in ok invalid compile_error launch_error wrong_result timeout crashed pruned; do
  want=$(sql "SELECT count(*) FROM results WHERE status='$st'")
  got=$(val after "moetune_results_total{status=\"$st\"}")
  [ "$got" = "$want" ] || fail "status $st: metrics $got, database $want"
done
wrong=$(sql "SELECT count(*) FROM results WHERE status='wrong_result'")
[ "$wrong" = 3 ] || fail "expected the planted config's 3 wrong results, database has $wrong"
for js in pending leased done failed cancelled; do
  want=$(sql "SELECT count(*) FROM jobs WHERE state='$js'")
  got=$(val after "moetune_jobs{state=\"$js\"}")
  [ "$got" = "$want" ] || fail "jobs $js: metrics $got, database $want"
done
[ "$(val after moetune_sweeps_running)" = 0 ] || fail "a sweep still running"
commits=$(val after moetune_commit_duration_seconds_count)
inf=$(val after 'moetune_commit_duration_seconds_bucket{le="+Inf"}')
[ "$commits" -gt 0 ] && [ "$inf" = "$commits" ] || fail "histogram: count $commits, +Inf bucket $inf"
[ "$(val after moetune_storage_errors_total)" = 0 ] && [ "$(val after moetune_storage_error)" = 0 ] || fail "storage errors"
[ "$(val after 'moetune_connections_refused_total{reason="curve"}')" = 0 ] && [ "$(val after 'moetune_connections_refused_total{reason="worker_cap"}')" = 0 ] || fail "refused connections without CURVE or a cap reached"
pass "after the sweep: $rows results ($wrong wrong_result), jobs by state and statuses equal the database; $commits commits"

# a refused message is counted
"$BIN/mt_garbage" "$CEP" 20 3 >/dev/null || fail "garbage sender failed"
sleep 0.6
scrape bad
[ "$(val bad moetune_bad_messages_total)" -ge 1 ] || fail "a garbage message was not counted"
pass "bad messages counted ($(val bad moetune_bad_messages_total))"

# bad --metrics values are usage errors
for bad in nohost 127.0.0.1:99999 999.1.1.1:80; do
  set +e; "$BIN/moetune-coordinator" --db "$T/x.db" --metrics "$bad" >"$T/bad.out" 2>&1; rc=$?; set -e
  [ $rc = 2 ] && grep -q -- "--metrics" "$T/bad.out" || { cat "$T/bad.out"; fail "--metrics $bad: rc $rc"; }
done
pass "bad --metrics addresses refused"
