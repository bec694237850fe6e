#!/usr/bin/env bash
# `moetune tune` run again on the same --db: it resumes an interrupted sweep and reuses a done one
# (re-exporting its files, measuring nothing) only when the expanded plan and every measurement
# setting are equal; otherwise it names what differs and exits 2 until the user chooses --fresh or
# --keep-settings. Asserted on sweeps and result rows, not on file contents.
source "$(dirname "$0")/lib.sh"
M="$BIN/moetune"
SHAPE=(--shape E=8,N=1024,K=1024,topk=2 --block-m 16,32,64 --block-n 64,128 --block-k 64,128 --group-m 1,16
       --num-warps 4 --num-stages 3,4 --batch-sizes 1,8,64 --chunk 2)
F="$T/configs/sim/E=8,N=1024,device_name=NVIDIA_H200.json"

# tune_run NAME SCALE [extra...]: runs tune, output in $T/NAME.{out,err}; sets RC
tune_run() {
  local name=$1 scale=$2; shift 2
  set +e
  "$M" tune --backend sim --workers 2 --sim-time-scale "$scale" "${SHAPE[@]}" --db "$DB" --out "$T/configs" "$@" \
    >"$T/$name.out" 2>"$T/$name.err"
  RC=$?
  set -e
}

# tune_interrupted NAME [extra...]: starts a slow tune, sends SIGINT after its first results
tune_interrupted() {
  local name=$1; shift
  local before
  before=$(sql "SELECT count(*) FROM results" 2>/dev/null || echo 0)
  "$M" tune --backend sim --workers 2 --sim-time-scale 30 "${SHAPE[@]}" --db "$DB" --out "$T/configs" "$@" \
    >"$T/$name.out" 2>"$T/$name.err" &
  local pid=$!
  for _ in $(seq 1 300); do
    [ "$(sql "SELECT count(*) FROM results" 2>/dev/null || echo 0)" -gt "$before" ] && break
    sleep 0.05
  done
  kill -INT $pid
  set +e
  wait $pid
  RC=$?
  set -e
}

sweeps() { sql "SELECT count(*) FROM sweeps"; }
rows() { sql "SELECT count(*) FROM results"; }

# ---- an interrupted sweep, then the same command: resumed, never duplicated
tune_interrupted t1
[ $RC = 130 ] || { cat "$T/t1.err"; fail "interrupted tune exited $RC, expected 130"; }
[ "$(sql "SELECT state FROM sweeps WHERE id=1")" = running ] || fail "the interrupted sweep is not left running"
part=$(rows)
[ "$part" -gt 0 ] && [ "$part" -lt "$(sql "SELECT results_planned FROM sweeps WHERE id=1")" ] \
  || fail "interrupted sweep has $part rows: not a partial sweep"
tune_run t2 0
[ $RC = 0 ] || { cat "$T/t2.err"; fail "resuming tune exited $RC"; }
grep -q "resuming sweep 1" "$T/t2.err" || fail "the same command did not resume sweep 1: $(head -n2 "$T/t2.err")"
[ "$(sweeps)" = 1 ] || fail "resume made a new sweep: $(sweeps) sweeps"
full=$(check_rows 1)
pass "interrupted at $part rows, the same command resumed sweep 1 to $full rows"

# ---- done: the same command measures nothing and exports sweep 1's files again
rm -rf "$T/configs"
tune_run t3 0
[ $RC = 0 ] || { cat "$T/t3.err"; fail "tune on a done sweep exited $RC"; }
grep -q "sweep 1 already measured this on 2 x NVIDIA H200 (sim)" "$T/t3.err" || fail "reuse not said: $(cat "$T/t3.err")"
[ "$(sweeps)" = 1 ] || fail "the same command on a done sweep made a new sweep"
[ "$(rows)" = "$full" ] || fail "the same command on a done sweep measured again: $(rows) rows, was $full"
[ -f "$F" ] || fail "the reused sweep's file was not exported again"
pass "done sweep reused: still 1 sweep and $full rows, $(basename "$F") exported again"

# ---- other settings: refused with what differs, nothing planned
for alt in "--min-samples 20|min_samples 10, now 20" "--seed 5|seed 1, now 5" "--warmup 5|warmup 2, now 5" \
           "--rsd-target 0.05|rsd_target 0.01, now 0.05" "--max-samples 50|max_samples 100, now 50" \
           "--round-process new|round_process same, now new"; do
  flags=${alt%%|*} want=${alt#*|}
  # shellcheck disable=SC2086
  tune_run alt 0 $flags
  [ $RC = 2 ] || { cat "$T/alt.err"; fail "tune $flags on a done sweep with other settings exited $RC, expected 2"; }
  grep -qF "$want" "$T/alt.err" || fail "tune $flags: the message lacks '$want': $(cat "$T/alt.err")"
  grep -q -- "--fresh" "$T/alt.err" && grep -q -- "--keep-settings" "$T/alt.err" || fail "tune $flags: no choice offered"
  [ "$(sweeps)" = 1 ] && [ "$(rows)" = "$full" ] || fail "tune $flags planned or measured something"
done
pass "6 changed settings refused with exit 2, each named, nothing planned"

tune_run keep 0 --min-samples 20 --keep-settings
[ $RC = 0 ] || { cat "$T/keep.err"; fail "--keep-settings exited $RC"; }
[ "$(sweeps)" = 1 ] && [ "$(rows)" = "$full" ] || fail "--keep-settings measured again"
grep -q "sweep 1 already measured" "$T/keep.err" || fail "--keep-settings did not reuse sweep 1"
tune_run fresh 0 --min-samples 20 --fresh
[ $RC = 0 ] || { cat "$T/fresh.err"; fail "--fresh exited $RC"; }
[ "$(sweeps)" = 2 ] && [ "$(sql "SELECT state FROM sweeps WHERE id=2")" = done ] || fail "--fresh did not measure a sweep 2"
rows2=$(check_rows 2)
# a row settled early (a clear loser, WRK_SETTLE_SAMPLES) may stop under min_samples
low=$(sql "SELECT count(*) FROM results WHERE sweep_id=2 AND status='ok' AND samples < 20 AND COALESCE(detail, '') NOT LIKE '%settled%'")
full2=$(sql "SELECT count(*) FROM results WHERE sweep_id=2 AND status='ok' AND samples >= 20")
[ "$low" = 0 ] && [ "$full2" -gt 0 ] || fail "sweep 2 has $low unsettled ok rows under --min-samples 20 ($full2 with 20 or more)"
pass "--keep-settings reused sweep 1; --fresh --min-samples 20 measured sweep 2 ($rows2 rows, each >= 20 samples)"
# The defaults again: sweep 1 (identical) is reused, not refused because of the newer sweep 2.
tune_run again 0
[ $RC = 0 ] && grep -q "sweep 1 already measured" "$T/again.err" || { cat "$T/again.err"; fail "identical sweep 1 not reused"; }
[ "$(sweeps)" = 2 ] || fail "a new sweep was made"
pass "the default settings reuse sweep 1 beside sweep 2"

# ---- an interrupted sweep with other settings: refused, then --fresh cancels and replaces it
tune_interrupted t4 --seed 5 --fresh
[ $RC = 130 ] || { cat "$T/t4.err"; fail "interrupted tune exited $RC"; }
tune_run t5 0 --seed 6
[ $RC = 2 ] || { cat "$T/t5.err"; fail "tune --seed 6 beside an interrupted --seed 5 exited $RC, expected 2"; }
grep -qF "seed 5, now 6" "$T/t5.err" || fail "the message lacks the seeds: $(cat "$T/t5.err")"
[ "$(sweeps)" = 3 ] || fail "a refused tune made a sweep"
tune_run t6 0 --seed 6 --fresh
[ $RC = 0 ] || { cat "$T/t6.err"; fail "--fresh beside an interrupted sweep exited $RC"; }
[ "$(sql "SELECT state FROM sweeps WHERE id=3")" = cancelled ] || fail "sweep 3 is $(sql "SELECT state FROM sweeps WHERE id=3"), not cancelled"
[ "$(sql "SELECT state FROM sweeps WHERE id=4")" = done ] || fail "sweep 4 not done"
check_rows 4 >/dev/null
pass "interrupted --seed 5 sweep: --seed 6 refused, --fresh cancelled sweep 3 and measured sweep 4"

# ---- both choices at once is a usage error
tune_run both 0 --fresh --keep-settings
[ $RC = 2 ] && grep -q "exclude each other" "$T/both.err" || fail "--fresh --keep-settings: exit $RC: $(cat "$T/both.err")"
pass "--fresh with --keep-settings: exit 2"
