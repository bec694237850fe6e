#!/usr/bin/env bash
# The nightly command end to end with the sim backend: submit --wait --compare-to last diffs the
# sweep against the previous done sweep of the same spec on the same device and exports only when
# nothing regressed (or --force); exit 3 on a regression. The regression is a real one: workers
# restarted with --sim-faults slowdown=X measure every config X times slower.
source "$(dirname "$0")/lib.sh"

start_coordinator
start_workers 2 --sim-time-scale 0
# (the ship guard off: the counts below are of the sweep's own batch sizes; with it on, the batch
# sizes it checks between the keys are compared too)
SPEC=(--shape E=8,N=7168,K=4096,topk=2 --batch-sizes 1,16,256 --guard off)
nightly() { # NAME [extra args]: runs one nightly submit, output in $T/NAME.out, sets rc
  local name=$1; shift
  set +e
  "$BIN/moetune" submit --control "$CEP" --name "$name" "${SPEC[@]}" --wait --compare-to last --db "$DB" \
    --out "$T/configs" "$@" >"$T/$name.out" 2>&1
  rc=$?
  set -e
}
exports() { sql "SELECT count(*) FROM exports"; }
restart_workers() {
  for p in "${PIDS[@]}"; do kill_quiet "$p"; done
  PIDS=()
  start_workers 2 --sim-time-scale 0 "$@"
}

# 1: the first of its spec: nothing to compare, exported
nightly n1
[ $rc = 0 ] || { cat "$T/n1.out"; fail "first nightly exited $rc"; }
grep -q "nothing to compare, sweep 1 is the first" "$T/n1.out" || { cat "$T/n1.out"; fail "first nightly did not say it is the first"; }
file=$(ls "$T/configs/sim/"E=8,N=7168,*.json) || fail "first nightly exported nothing"
[ "$(jq 'keys | length' "$file")" = 3 ] || fail "exported file does not have 3 entries"
e1=$(exports); [ "$e1" -ge 1 ] || fail "no export recorded"
pass "first nightly: no previous sweep, exported $(basename "$file")"

# a sweep of another spec in between is never the one compared against
"$BIN/moetune" submit --control "$CEP" --name other --shape E=8,N=7168,K=4096,topk=2 --batch-sizes 1,16 --wait >"$T/other.out" 2>&1 \
  || fail "other sweep failed"

# 3: same spec, same workers: compared with sweep 1 (not 2), no regression, exported
nightly n3
[ $rc = 0 ] || { cat "$T/n3.out"; fail "second nightly exited $rc"; }
grep -q "^old: sweep 1 'n1'" "$T/n3.out" && grep -q "^new: sweep 3 'n3'" "$T/n3.out" || { cat "$T/n3.out"; fail "n3 not compared with sweep 1"; }
grep -q "^3 entries: 0 regressions" "$T/n3.out" || { cat "$T/n3.out"; fail "n3: expected 3 entries, 0 regressions"; }
e3=$(exports); [ "$e3" -gt "$e1" ] || fail "second nightly did not export"
pass "second nightly: compared with sweep 1 (the other spec skipped), same results, exported"

# 4: workers 25 % slower: 3 regressions, exit 3, nothing exported
restart_workers --sim-faults slowdown=1.25
before=$(md5sum <"$file")
nightly n4
[ $rc = 3 ] || { cat "$T/n4.out"; fail "regressed nightly exited $rc, expected 3"; }
grep -q "^old: sweep 3 'n3'" "$T/n4.out" || { cat "$T/n4.out"; fail "n4 not compared with sweep 3"; }
[ "$(grep -c ' regression$' "$T/n4.out")" = 3 ] || { cat "$T/n4.out"; fail "n4: 3 regressions expected"; }
grep -q "not exported: 3 regressions against sweep 3" "$T/n4.out" || fail "n4 does not say it did not export"
[ "$(exports)" = "$e3" ] || fail "a regressed nightly exported"
[ "$(md5sum <"$file")" = "$before" ] || fail "a regressed nightly changed the config file"
[ "$(sql "SELECT state FROM sweeps WHERE id=4")" = done ] || fail "sweep 4 not done"
pass "regressed nightly (+25 %): exit 3, 3 regressions, nothing exported"

# 5: slower again (x1.6 against x1.25 = +28 %) with --force: exit 3 and exported
restart_workers --sim-faults slowdown=1.6
nightly n5 --force
[ $rc = 3 ] || { cat "$T/n5.out"; fail "forced nightly exited $rc, expected 3"; }
grep -q "exporting despite 3 regressions (--force)" "$T/n5.out" || { cat "$T/n5.out"; fail "n5 did not export with --force"; }
[ "$(exports)" -gt "$e3" ] || fail "--force did not export"
pass "forced nightly: exit 3, exported"

# 6: the JSON form prints the diff as one object
restart_workers --sim-faults slowdown=1.6
nightly n6 --json
[ $rc = 0 ] || { cat "$T/n6.out"; fail "n6 exited $rc"; }
grep '^{"old"' "$T/n6.out" | jq -e '.old.sweep == 5 and .new.sweep == 6 and .regressions == 0' >/dev/null \
  || { cat "$T/n6.out"; fail "n6 JSON diff wrong"; }
pass "json nightly: compared 5 -> 6, no regression"

# bad usage
set +e
"$BIN/moetune" submit --control "$CEP" "${SPEC[@]}" --compare-to last --db "$DB" >"$T/u1.out" 2>&1; r1=$?
"$BIN/moetune" submit --control "$CEP" "${SPEC[@]}" --wait --compare-to last >"$T/u2.out" 2>&1; r2=$?
"$BIN/moetune" submit --control "$CEP" "${SPEC[@]}" --force >"$T/u3.out" 2>&1; r3=$?
set -e
[ "$r1$r2$r3" = 222 ] || fail "bad usage exit codes $r1 $r2 $r3"
grep -q "needs --wait" "$T/u1.out" && grep -q "needs --db" "$T/u2.out" && grep -q "go with --compare-to" "$T/u3.out" \
  || fail "bad usage messages"
[ "$(sql "SELECT count(*) FROM sweeps")" = 6 ] || fail "a refused command submitted a sweep"
pass "bad usage refused before anything is submitted"

# 7: --compare-to a sweep with no shape in common: nothing compared, exit 1, nothing exported
e6=$(exports)
set +e
"$BIN/moetune" submit --control "$CEP" --name n7 --shape E=16,N=2048,K=1024,topk=2 --batch-sizes 1,16 --wait \
  --compare-to 1 --db "$DB" --out "$T/configs7" >"$T/n7.out" 2>"$T/n7.err"
rc=$?
set -e
[ $rc = 1 ] || { cat "$T/n7.out" "$T/n7.err"; fail "--compare-to a sweep with no shape in common exited $rc, expected 1"; }
grep -q "no (shape, batch size) in common" "$T/n7.err" || { cat "$T/n7.err"; fail "n7: no reason given"; }
[ "$(exports)" = "$e6" ] && [ ! -e "$T/configs7" ] || fail "n7 exported although nothing was compared"
pass "--compare-to a sweep with no shape in common: exit 1, nothing exported"
