#!/usr/bin/env bash
# SIGKILL the coordinator mid-sweep and restart it on the same database: the workers rejoin, the
# sweep completes with exactly the planned rows, and no result committed before the kill is
# measured again (checked against the workers' per-result log lines).
source "$(dirname "$0")/lib.sh"
SPACE=(--block-m 16,64 --block-n 64,128 --block-k 128 --group-m 1,16 --num-warps 4,8 --num-stages 3,4)

start_coordinator --heartbeat-ms 200 --lease-ms 5000
start_workers 4 --sim-time-scale 1 --log-level debug
# (decide step off: its side-by-side rows re-measure committed configs by design)
"$BIN/moetune" submit --control "$CEP" --name kill-coord --chunk 4 --decide-margin 0 "${SPACE[@]}" \
  --shape E=128,N=768,K=2048,topk=8 --shape E=8,N=7168,K=4096,topk=2 >"$T/submit.out" 2>&1 \
  || { cat "$T/submit.out"; fail "submit failed"; }
planned=$(sql "SELECT results_planned FROM sweeps WHERE id=1")
for _ in $(seq 1 400); do
  n=$(sql "SELECT count(*) FROM results" 2>/dev/null || echo 0)
  [ "$n" -ge $((planned / 3)) ] && break
  sleep 0.05
done
kill_quiet "$COORD_PID"
sleep 0.3
before=$(sql "SELECT count(*) FROM results WHERE sweep_id=1")
[ "$before" -gt 0 ] && [ "$before" -lt "$planned" ] || fail "kill came too late or too early ($before of $planned rows)"
cut=$(date -u +%Y-%m-%dT%H:%M:%S.%3NZ)
sql "SELECT j.id || ' ' || r.config_id FROM results r JOIN jobs j ON j.sweep_id=r.sweep_id AND j.shape_id=r.shape_id
     JOIN job_configs jc ON jc.job_id=j.id AND jc.config_id=r.config_id WHERE r.sweep_id=1 GROUP BY j.id, r.config_id" \
  | sort -u >"$T/committed_pairs.txt"
sql "SELECT shape_id || ' ' || config_id FROM results WHERE sweep_id=1 GROUP BY 1" | sort -u >"$T/committed.txt"
pass "coordinator killed with $before of $planned rows committed"

sleep 1   # workers notice the silence
start_coordinator --heartbeat-ms 200 --lease-ms 5000
state=$(wait_sweep 1 240)
[ "$state" = done ] || fail "sweep state after restart is $state"
rows=$(check_rows 1)
pass "sweep done after restart: $rows rows, exactly the planned set"

# Every result a worker produced after the kill: (job, config) -> (shape, config); none may be
# one that was committed before the kill.
cat "$T"/worker*.log | awk -v cut="$cut" '$1 > cut && /config [0-9]+: result seq/ {
    for (i = 1; i <= NF; i++) { if ($i == "job") j = $(i+1); if ($i == "config") c = $(i+1) }
    sub(":", "", c); print j, c }' | sort -u >"$T/after_pairs.txt"
after=$(wc -l <"$T/after_pairs.txt")
[ "$after" -gt 0 ] || fail "no worker produced results after the restart"
: >"$T/after.txt"
while read -r job cfg; do
  echo "$(sql "SELECT shape_id FROM jobs WHERE id=$job") $cfg" >>"$T/after.txt"
done <"$T/after_pairs.txt"
sort -u -o "$T/after.txt" "$T/after.txt"
again=$(comm -12 "$T/committed.txt" "$T/after.txt" | wc -l)
[ "$again" = 0 ] || { comm -12 "$T/committed.txt" "$T/after.txt" | head; fail "$again committed configs were measured again"; }
pass "$after configs measured after the restart, none of the $(wc -l <"$T/committed.txt") committed before it"
