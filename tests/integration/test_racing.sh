#!/usr/bin/env bash
# Racing with real processes (sim backend): the same sweep with racing off and on (default
# margin) picks the same config at every batch size where the simulated gap to the runner-up
# exceeds the noise; racing stores pruned rows (counted apart from failures, never exported)
# and measures fewer samples; the planner's order puts every BLOCK_SIZE_M in the first job.
source "$(dirname "$0")/lib.sh"
M="$BIN/moetune"
SPEC=(--backend sim --workers 2 --sim-time-scale 0 --model qwen3-30b-a3b --tp 1 --batch-sizes 1,16,256,4096)

"$M" tune "${SPEC[@]}" --race-margin 0 --db "$T/off.db" --out "$T/off" >"$T/off.out" 2>"$T/off.err" \
  || { tail "$T/off.err"; fail "tune with racing off exited $?"; }
"$M" tune "${SPEC[@]}" --db "$T/on.db" --out "$T/on" >"$T/on.out" 2>"$T/on.err" \
  || { tail "$T/on.err"; fail "tune with racing on exited $?"; }
q() { sqlite3 "$1" "$2"; }
[ "$(q "$T/off.db" "SELECT COUNT(*) FROM results WHERE status = 'pruned'")" = 0 ] || fail "racing off pruned rows"
pruned=$(q "$T/on.db" "SELECT COUNT(*) FROM results WHERE status = 'pruned'")
okrows=$(q "$T/on.db" "SELECT COUNT(*) FROM results WHERE status = 'ok'")
[ "$pruned" -gt 0 ] || fail "racing on pruned nothing"
[ "$(q "$T/on.db" "SELECT COUNT(*) FROM results r WHERE $SEARCHED")" = "$(q "$T/off.db" "SELECT COUNT(*) FROM results")" ] \
  || fail "racing changed the number of rows"
[ "$(q "$T/on.db" "SELECT COUNT(*) FROM results WHERE status = 'pruned' AND (samples NOT IN (1, 2) OR median_us <= 0)")" = 0 ] \
  || fail "a pruned row without its 1 or 2 samples or its latency"
# one sample only where it was far beyond the best (1 + 2 x 0.2 margin; the best then was never
# below the final one), two otherwise; both kinds occur in this sweep
far=$(q "$T/on.db" "SELECT COUNT(*) FROM results r WHERE status = 'pruned' AND samples = 1")
[ "$far" -gt 0 ] && [ "$far" -lt "$pruned" ] || fail "racing pruned $far of $pruned rows on one sample"
[ "$(q "$T/on.db" "SELECT COUNT(*) FROM results r WHERE status = 'pruned' AND samples = 1 AND median_us <=
  1.4 * (SELECT MIN(median_us) FROM results o WHERE o.status = 'ok' AND o.shape_id = r.shape_id
         AND o.batch_size = r.batch_size)")" = 0 ] || fail "a row pruned on one sample within 1.4x the best"
s_off=$(q "$T/off.db" "SELECT SUM(samples) FROM results")
s_on=$(q "$T/on.db" "SELECT SUM(samples) FROM results")
[ "$s_on" -lt "$s_off" ] || fail "racing took $s_on samples, not fewer than $s_off"
grep -q "$pruned pruned" "$T/on.err" || fail "the progress line does not count the pruned rows"
pass "racing pruned $pruned of $((pruned + okrows)) measured rows ($far on one sample); samples $s_on against $s_off"

# The picks: racing's pick, looked up among the exhaustive sweep's rows, is within the noise
# (1 %) of the exhaustive best at every batch size, and is the same config wherever the winner
# leads the runner-up by more than 3 %; a pruned config is never in the file.
f_off="$T/off/sim/E=128,N=768,device_name=NVIDIA_H200.json"
f_on="$T/on/sim/E=128,N=768,device_name=NVIDIA_H200.json"
[ -f "$f_on" ] && [ -f "$f_off" ] || fail "missing exports"
WORST=0
for bs in 1 16 256 4096; do
  a=$(jq -c --arg k $bs '.[$k]' "$f_off"); b=$(jq -c --arg k $bs '.[$k]' "$f_on")
  w=$(pick_where "$f_on" $bs)
  st=$(q "$T/on.db" "SELECT r.status FROM results r JOIN configs c ON c.id = r.config_id WHERE r.batch_size = $bs AND $w")
  [ "$st" = ok ] || fail "batch size $bs: the exported config's row is '$st'"
  near_best "$T/off.db" $bs "$w" racing
  if clear_lead; then
    [ "$a" = "$b" ] || fail "batch size $bs: racing picked $b, exhaustive $a (gap $GAP)"
  fi
done
pass "racing's picks are within ${WORST}x of the exhaustive best at every batch size; exports hold only ok rows"

# The decide step (--decide-margin): after racing, the near-ties of each batch size (at most 4,
# within 2 % of the best, 2 of another device's, 2 of two modes) are measured again side by side in
# phase-2 jobs; no row is added or pruned by it, and each batch size's pick is one of those side-by-side rows where it has any.
"$M" tune "${SPEC[@]}" --decide-margin 0.02 --db "$T/dec.db" --out "$T/dec" >"$T/dec.out" 2>"$T/dec.err" \
  || { tail "$T/dec.err"; fail "tune with --decide-margin exited $?"; }
p2jobs=$(q "$T/dec.db" "SELECT COUNT(*) FROM jobs WHERE phase = 2")
p2rows=$(q "$T/dec.db" "SELECT COUNT(*) FROM results r WHERE phase = 2 AND $SEARCHED")
[ "$p2jobs" -gt 0 ] || fail "the decide step planned no phase-2 job"
# tune's 2 sim workers are 2 devices (GPU indices 0 and 1): the second adds up to 2 near-ties of its
# own; rows of two modes are few on the sim (0-6 over a whole 18-batch-size sweep)
# (the ship guard adds the best where it stood alone, to measure it beside the engine's default)
[ "$p2rows" -gt 0 ] && [ "$p2rows" -le 28 ] || fail "$p2rows phase-2 rows (1 to 7 per batch size expected)"
[ "$(q "$T/dec.db" "SELECT COUNT(*) FROM results r WHERE $SEARCHED")" = "$(q "$T/on.db" "SELECT COUNT(*) FROM results r WHERE $SEARCHED")" ] \
  || fail "the decide step changed the number of rows"
[ "$(q "$T/dec.db" "SELECT COUNT(*) FROM results WHERE phase = 2 AND (status <> 'ok' OR samples < 10)")" = 0 ] \
  || fail "a phase-2 row was raced or cut short"
[ "$(q "$T/dec.db" "SELECT COUNT(*) FROM results WHERE status = 'pruned' AND detail LIKE 'halving:%'")" = 0 ] \
  || fail "the decide step pruned rows"
for bs in $(q "$T/dec.db" "SELECT DISTINCT batch_size FROM results WHERE phase = 2"); do
  [ "$(q "$T/dec.db" "SELECT phase FROM results WHERE status = 'ok' AND batch_size = $bs ORDER BY median_us LIMIT 1")" = 2 ] \
    || fail "batch size $bs: the pick is not one of the side-by-side rows"
done
pass "decide step: $p2rows near-tie rows re-measured side by side in $p2jobs phase-2 jobs; picks from them"

# Order: the cost model's first job spans every BLOCK_SIZE_M of the space (after the warm start's
# job of known picks, where the sweep has one: the engine's defaults at least).
warm=$(jq -r '[.[] | .coverage.sweeps["1"].warm_start? // empty][0] // ""' "$T/on/sim/manifest.json")
skip=$([ -n "$warm" ] && echo 1 || echo 0)
n_bm=$(q "$T/on.db" "SELECT COUNT(DISTINCT c.block_m) FROM configs c JOIN job_configs jc ON jc.config_id = c.id")
first=$(q "$T/on.db" "SELECT COUNT(DISTINCT c.block_m) FROM configs c JOIN job_configs jc ON jc.config_id = c.id
        WHERE jc.job_id = (SELECT MIN(id) FROM jobs) + $skip")
[ "$first" = "$n_bm" ] || fail "the first job covers $first of $n_bm BLOCK_SIZE_M values"
pass "the first job covers all $n_bm BLOCK_SIZE_M values"

# GPU busy: with the sim sleeping its simulated time (time scale 1), the committed results carry
# their timed kernel time and the final progress line shows the fraction, between 1 and 100 %.
"$M" tune --backend sim --workers 1 --sim-time-scale 1 --shape E=8,N=2048,K=4096,topk=2 --batch-sizes 4096 \
  --block-m 64,128 --block-n 128 --block-k 64 --group-m 1 --num-warps 4 --num-stages 3 --min-samples 20 \
  --db "$T/busy.db" --out "$T/busy" >"$T/busy.out" 2>"$T/busy.err" || { tail "$T/busy.err"; fail "tune (busy) exited $?"; }
line=$(grep "done:" "$T/busy.err" | tail -n1)
pct=$(echo "$line" | sed -n 's/.*GPU busy \([0-9]*\)%.*/\1/p')
[ -n "$pct" ] && [ "$pct" -ge 1 ] && [ "$pct" -le 100 ] || fail "no GPU-busy fraction in the final line: $line"
t=$(q "$T/busy.db" "SELECT SUM(timed_us) > 0 AND MIN(timed_us) > 0 FROM results WHERE status = 'ok'")
[ "$t" = 1 ] || fail "ok rows without their timed_us"
pass "GPU busy ${pct}% in tune's final line; every ok row carries its timed_us"
