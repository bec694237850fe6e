#!/usr/bin/env bash
# Successive halving with real processes (sim backend). 1: the same spec exhaustive (racing off,
# the reference; racing on, the sample count to beat) and halving: halving picks the exhaustive
# winner wherever the simulated gap to the runner-up exceeds the noise, keeps every row once (the
# non-finalists 'pruned' with their rank, never exported; each finalist's phase-2 row in place of
# its phase-1 row) and takes fewer samples than racing. 2: a restart between the phases (phase 1
# over, phase 2 not stored) plans phase 2 at load; a restart during phase 2 continues it; the sweep
# ends with the same picks and every row exactly once. During phase 2 (every result in) `status`
# and its --json say phase 2 with the finalists planned and measured, under 100 %, and read them
# back after a restart.
source "$(dirname "$0")/lib.sh"
M="$BIN/moetune"
q() { sqlite3 -batch -noheader "$1" "$2"; }

# check_picks FILE DB REF_DB BATCH_SIZES: FILE's pick at each batch size is an ok row of DB, within
# 1 % of REF_DB's best, and REF_DB's own winner wherever that leads its runner-up by more than 3 %.
# Prints the worst ratio and how many batch sizes had such a gap (and so the same winner).
check_picks() {
  local f=$1 db=$2 ref=$3 exact=0 bs
  WORST=0
  [ -f "$f" ] || fail "missing export $f"
  for bs in ${4//,/ }; do
    local e w st win
    e=$(jq -c --arg k "$bs" '.[$k]' "$f")
    [ "$e" != null ] || fail "$f has no entry for batch size $bs"
    w=$(pick_where "$f" "$bs")
    st=$(q "$db" "SELECT r.status || ' ' || r.phase FROM results r JOIN configs c ON c.id = r.config_id WHERE r.batch_size = $bs AND $w")
    [ "$st" = "ok 2" ] || fail "batch size $bs: the exported config's row is '$st', not an ok phase-2 row"
    near_best "$ref" "$bs" "$w" halving
    if clear_lead; then
      win=$(q "$ref" "SELECT r.median_us = (SELECT MIN(median_us) FROM results WHERE status = 'ok' AND batch_size = $bs)
            FROM results r JOIN configs c ON c.id = r.config_id WHERE r.batch_size = $bs AND $w")
      [ "$win" = 1 ] || fail "batch size $bs: halving picked another config than exhaustive's (gap $GAP)"
      exact=$((exact + 1))
    fi
  done
  echo "$WORST $exact"
}

# ---- 1: halving against exhaustive
BS=1,16,256,4096
SPEC=(--backend sim --workers 2 --sim-time-scale 0 --model qwen3-30b-a3b --tp 1 --batch-sizes $BS)
"$M" tune "${SPEC[@]}" --race-margin 0 --db "$T/off.db" --out "$T/off" >"$T/off.out" 2>"$T/off.err" \
  || { tail "$T/off.err"; fail "tune exhaustive, racing off, exited $?"; }
"$M" tune "${SPEC[@]}" --db "$T/race.db" --out "$T/race" >"$T/race.out" 2>"$T/race.err" \
  || { tail "$T/race.err"; fail "tune exhaustive with racing exited $?"; }
"$M" tune "${SPEC[@]}" --strategy halving --db "$T/hv.db" --out "$T/hv" >"$T/hv.out" 2>"$T/hv.err" \
  || { tail "$T/hv.err"; fail "tune --strategy halving exited $?"; }
[ "$(q "$T/hv.db" "SELECT state FROM sweeps")" = done ] || fail "the halving sweep is not done"
# the ship guard's configs outside the space (the engine's default) add their own rows
rows=$(q "$T/hv.db" "SELECT COUNT(*) FROM results r WHERE $SEARCHED")
[ "$rows" = "$(q "$T/off.db" "SELECT COUNT(*) FROM results")" ] || fail "halving stored $rows rows, not exhaustive's count"
[ "$(q "$T/hv.db" "SELECT COUNT(*) FROM results")" = "$(q "$T/hv.db" "SELECT results_planned FROM sweeps")" ] \
  || fail "halving's rows are not its planned set"
hpruned=$(q "$T/hv.db" "SELECT COUNT(*) FROM results WHERE status = 'pruned' AND detail LIKE 'halving: rank % of % at phase 1%'")
final=$(q "$T/hv.db" "SELECT COUNT(*) FROM results WHERE phase = 2")
[ "$hpruned" -gt 0 ] || fail "halving pruned no row"
[ "$final" -gt 0 ] || fail "halving measured no finalist in phase 2"
[ "$(q "$T/hv.db" "SELECT COUNT(*) FROM results WHERE phase = 1 AND status = 'ok'")" = 0 ] \
  || fail "phase-1 ok rows are left: a finalist kept its phase-1 row or a non-finalist was not pruned"
# 5 samples, or 4 (WRK_SETTLE_SAMPLES) where settling stopped a clear loser
[ "$(q "$T/hv.db" "SELECT COUNT(*) FROM results WHERE detail LIKE 'halving:%' AND (samples NOT IN (4, 5) OR phase <> 1 OR median_us <= 0)")" = 0 ] \
  || fail "a halving-pruned row is not a 5-sample (4 if settled) phase-1 measurement with its latency"
[ "$(q "$T/hv.db" "SELECT COUNT(*) FROM results WHERE phase = 2 AND (status = 'pruned' OR samples < 10)")" = 0 ] \
  || fail "a finalist was raced or measured below min_samples in phase 2"
# every finalist's phase-2 rows are exactly its phase-2 job's batch sizes
p2=$(q "$T/hv.db" "SELECT COALESCE(SUM(CASE WHEN j.batch_sizes IS NULL THEN 4 ELSE
       LENGTH(j.batch_sizes) - LENGTH(REPLACE(j.batch_sizes, ',', '')) + 1 END), 0)
       FROM jobs j JOIN job_configs jc ON jc.job_id = j.id WHERE j.phase = 2")
[ "$p2" = "$final" ] || fail "phase-2 jobs plan $p2 rows, $final phase-2 rows stored"
# one batch size a phase-2 job, so its finalists are measured side by side; a finalist row in one job only
[ "$(q "$T/hv.db" "SELECT COUNT(*) FROM jobs WHERE phase = 2 AND (batch_sizes IS NULL OR batch_sizes LIKE '%,%')")" = 0 ] \
  || fail "a phase-2 job measures more than one batch size"
[ "$(q "$T/hv.db" "SELECT COUNT(*) - COUNT(DISTINCT jc.config_id || '@' || j.batch_sizes) FROM job_configs jc JOIN jobs j ON j.id = jc.job_id WHERE j.phase = 2")" = 0 ] \
  || fail "a finalist is in two phase-2 jobs of one batch size"
pass "halving: $rows rows, $hpruned pruned by rank, $final finalist rows measured again in phase 2"

read -r worst exact <<<"$(check_picks "$T/hv/sim/E=128,N=768,device_name=NVIDIA_H200.json" "$T/hv.db" "$T/off.db" $BS)"
pass "halving's picks are within ${worst}x of the exhaustive best ($exact batch sizes with a gap over 3 %: the same config)"
s_race=$(q "$T/race.db" "SELECT SUM(samples) FROM results")
s_hv=$(q "$T/hv.db" "SELECT SUM(samples) FROM results")
s_off=$(q "$T/off.db" "SELECT SUM(samples) FROM results")
[ "$s_hv" -lt "$s_race" ] || fail "halving took $s_hv samples, not fewer than racing's $s_race"
pass "samples: halving $s_hv, exhaustive with racing $s_race, exhaustive without racing $s_off"

# ---- 2: restarts between the phases and during phase 2
# a space whose winner at 4096 leads its runner-up by 6 % in the sim: there the pick must be the same config
SPACE=(--block-m 16,32,64,128 --block-n 64,128,256 --block-k 64,128 --group-m 1 --num-warps 4,8 --num-stages 3)
"$M" tune --backend sim --workers 2 --sim-time-scale 0 --model qwen3-30b-a3b --tp 1 --batch-sizes $BS "${SPACE[@]}" \
  --race-margin 0 --db "$T/ref.db" --out "$T/ref" >/dev/null 2>"$T/ref.err" || { tail "$T/ref.err"; fail "reference tune exited $?"; }

start_coordinator --heartbeat-ms 200 --lease-ms 5000
# phase 2 cannot be stored: the transition's one transaction fails as a whole and is retried
sql "CREATE TRIGGER hold_p2 BEFORE INSERT ON jobs WHEN NEW.phase = 2 BEGIN SELECT RAISE(ABORT, 'test: phase 2 held'); END"
# (the ship guard off: its rows outside the space would keep the results under 100 % mid phase 2)
"$M" submit --control "$CEP" --name halving-restart --worker-backend sim --strategy halving --model qwen3-30b-a3b --tp 1 \
  --batch-sizes $BS "${SPACE[@]}" --guard off >"$T/submit.out" 2>&1 || { cat "$T/submit.out"; fail "submit failed"; }
start_workers 2 --sim-time-scale 1
wait_log "$T/coord.log" "halving's phase 2 not planned yet" 120 || fail "phase 1 did not end"
[ "$(sql "SELECT state FROM sweeps WHERE id = 1")" = running ] || fail "the sweep ended without its phase 2"
[ "$(sql "SELECT COUNT(*) FROM results WHERE detail LIKE 'halving:%'")" = 0 ] \
  || fail "a failed transition left pruned rows behind"
[ "$(sql "SELECT COUNT(*) FROM jobs WHERE phase = 2")" = 0 ] || fail "phase-2 jobs exist though their insert failed"
kill_quiet "$COORD_PID"
p1=$(sql "SELECT COUNT(*) FROM results WHERE sweep_id = 1")
pass "phase 1 over ($p1 rows), phase 2 not stored: coordinator killed"

# phase 2 commits stop after a few rows, so the next kill lands in the middle of it
sql "DROP TRIGGER hold_p2"
sql "CREATE TRIGGER hold_commit BEFORE UPDATE ON results WHEN NEW.phase = 2 AND
     (SELECT COUNT(*) FROM results WHERE phase = 2) >= 6 BEGIN SELECT RAISE(ABORT, 'test: phase 2 commits held'); END"
start_coordinator --heartbeat-ms 200 --lease-ms 5000
wait_log "$T/coord.log" "halving phase 1 over: [0-9]+ finalist rows in [1-9][0-9]* phase-2 jobs" 30 \
  || fail "the restart did not plan phase 2"
planned_p2=$(sql "SELECT COALESCE(SUM(CASE WHEN j.batch_sizes IS NULL THEN 4 ELSE
       LENGTH(j.batch_sizes) - LENGTH(REPLACE(j.batch_sizes, ',', '')) + 1 END), 0)
       FROM jobs j JOIN job_configs jc ON jc.job_id = j.id WHERE j.phase = 2")
# (the first run's failed transition logged a failed commit too: wait for this run's, of phase-2 rows)
wait_log "$T/coord.log" "commit of [0-9]+ results failed, kept unacknowledged and retried: UPDATE results" 60 \
  || fail "phase-2 commits were not held"
# mid phase 2 every result is in (a phase-2 row replaces its phase-1 row), so the progress must
# come from the finalists: phase 2, the rows planned and re-measured, under 100 %
# (a commit of fewer rows may still pass the trigger: the store's count before and after brackets it)
mid0=$(sql "SELECT COUNT(*) FROM results WHERE phase = 2")
"$M" status --control "$CEP" --json >"$T/st.json" || fail "status --json exited $?"
mid=$(sql "SELECT COUNT(*) FROM results WHERE phase = 2")
read -r sp rd rp fp fd pct <<<"$(jq -r '.sweeps[0] | "\(.phase) \(.results_done) \(.results_planned) \(.finalists_planned) \(.finalists_done) \(.percent)"' "$T/st.json")"
[ "$sp" = 2 ] || fail "status says phase '$sp' during phase 2"
[ "$rd" = "$rp" ] || fail "results $rd/$rp: not the moment where the results alone read 100 %"
[ "$fp" = "$planned_p2" ] && [ "$fd" -ge "$mid0" ] && [ "$fd" -le "$mid" ] \
  || fail "status has $fd/$fp finalists, the store $mid0..$mid/$planned_p2"
awk -v p="$pct" 'BEGIN { exit !(p < 100) }' || fail "status --json says $pct % during phase 2"
"$M" status --control "$CEP" >"$T/st.txt" || fail "status exited $?"
grep -Eq "sweep 1: halving phase 2: [0-9]+/$planned_p2 finalists, $rd/$rp results \(" "$T/st.txt" \
  || { cat "$T/st.txt"; fail "status does not show phase 2's finalists"; }
grep -q "100.0%" "$T/st.txt" && fail "status shows 100 % during phase 2"
kill_quiet "$COORD_PID"
mid=$(sql "SELECT COUNT(*) FROM results WHERE phase = 2")
[ "$mid" -gt 0 ] && [ "$mid" -lt "$planned_p2" ] || fail "the kill is not mid phase 2 ($mid of $planned_p2 rows)"
pass "coordinator killed during phase 2: $mid of $planned_p2 finalist rows committed; status showed phase 2 at $pct %"

sql "DROP TRIGGER hold_commit"
sleep 1
start_coordinator --heartbeat-ms 200 --lease-ms 5000
# the restarted coordinator reads phase 2's progress back from the store
read -r sp fp fd <<<"$("$M" status --control "$CEP" --json | jq -r '.sweeps[0] | "\(.phase) \(.finalists_planned) \(.finalists_done)"')"
[ "$sp" = 2 ] && [ "$fp" = "$planned_p2" ] && [ "$fd" -ge "$mid" ] && [ "$fd" -le "$planned_p2" ] \
  || fail "after the restart status has phase $sp, $fd/$fp finalists; the store had $mid/$planned_p2"
state=$(wait_sweep 1 240)
[ "$state" = done ] || fail "sweep state after the restarts is $state"
read -r fp fd pct <<<"$("$M" status --control "$CEP" --json | jq -r '.sweeps[0] | "\(.finalists_planned) \(.finalists_done) \(.percent)"')"
[ "$fp/$fd/$pct" = "$planned_p2/$planned_p2/100" ] || fail "the done sweep's status has $fd/$fp finalists at $pct %"
rows=$(check_rows 1)
[ "$(sql "SELECT COUNT(*) FROM results WHERE phase = 2")" = "$planned_p2" ] || fail "phase-2 rows are not the planned $planned_p2"
[ "$(sql "SELECT COUNT(*) - COUNT(DISTINCT jc.config_id || '@' || j.batch_sizes) FROM job_configs jc JOIN jobs j ON j.id = jc.job_id WHERE j.phase = 2")" = 0 ] \
  || fail "phase 2 was planned twice"
[ "$(sql "SELECT COUNT(*) FROM results WHERE phase = 1 AND status = 'ok'")" = 0 ] || fail "phase-1 ok rows are left"
"$M" export --db "$DB" --out "$T/r" --sweep 1 >"$T/export.out" 2>&1 || { cat "$T/export.out"; fail "export failed"; }
read -r worst exact <<<"$(check_picks "$T/r/sim/E=128,N=768,device_name=NVIDIA_H200.json" "$DB" "$T/ref.db" $BS)"
[ "$exact" -ge 1 ] || fail "no batch size with a gap over 3 %: the exact-winner check did not run"
pass "after both restarts: $rows rows exactly once, $planned_p2 phase-2 rows (status: $fd/$fp finalists, $pct %), picks within ${worst}x of exhaustive's, the same config at $exact batch sizes with a gap over 3 %"
