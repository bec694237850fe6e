#!/usr/bin/env bash
# history and diff over a database of sim sweeps: sweep 1 and 2 share a spec (2 shapes x 4 batch
# sizes); a regression is planted in sweep 2 by slowing every result of two (shape, batch size)
# pairs by 20 % in the database; sweep 3 is sweep 1's spec with another seed (noise only).
# diff 1 2 must flag exactly the planted pairs and exit 3; diff 1 3 must exit 0.
source "$(dirname "$0")/lib.sh"

start_coordinator
start_workers 3 --sim-time-scale 0
# (the ship guard off: diff compares the search's picks at the sweep's batch sizes)
SPEC=(--shape E=8,N=7168,K=4096,topk=2 --shape E=64,N=1408,K=2048,topk=6 --batch-sizes 1,16,64,256 --guard off)
for seed in 1 1 2; do
  "$BIN/moetune" submit --control "$CEP" --name "hd-$seed" "${SPEC[@]}" --seed $seed --wait >>"$T/submit.out" 2>&1 \
    || { cat "$T/submit.out"; fail "submit (seed $seed) failed"; }
done
for id in 1 2 3; do [ "$(sql "SELECT state FROM sweeps WHERE id=$id")" = done ] || fail "sweep $id not done"; done

# plant: shape E=8 at M=16 and shape E=64 at M=256 are 20 % slower in sweep 2
s8=$(sql "SELECT id FROM shapes WHERE e=8"); s64=$(sql "SELECT id FROM shapes WHERE e=64")
sql "UPDATE results SET median_us = median_us * 1.2 WHERE sweep_id=2 AND ((shape_id=$s8 AND batch_size=16) OR (shape_id=$s64 AND batch_size=256))"

# ---- diff: exactly the planted entries, exit 3
set +e
"$BIN/moetune" diff 1 2 --db "$DB" --json >"$T/diff12.json" 2>"$T/diff12.err"; rc=$?
set -e
[ $rc = 3 ] || { cat "$T/diff12.err"; fail "diff 1 2 exited $rc, expected 3"; }
[ "$(jq '.entries | length' "$T/diff12.json")" = 8 ] || fail "diff 1 2 has $(jq '.entries | length' "$T/diff12.json") entries, expected 8"
got=$(jq -r '.entries[] | select(.verdict=="regression") | "\(.shape) \(.batch_size)"' "$T/diff12.json" | sort)
want=$(printf '%s\n' "E=64,N=1408,K=2048,topk=6 256" "E=8,N=7168,K=4096,topk=2 16" | sort)
[ "$got" = "$want" ] || fail "diff 1 2 flagged [$got], expected [$want]"
[ "$(jq '.regressions' "$T/diff12.json")" = 2 ] || fail "regressions count is not 2"
# the flagged changes are the planted +20 % (same seed: the unplanted entries are identical)
jq -e '[.entries[] | select(.verdict=="regression") | .change_pct] | all(. > 19.9 and . < 20.1)' "$T/diff12.json" >/dev/null \
  || fail "planted entries do not show +20 %"
jq -e '[.entries[] | select(.verdict!="regression") | .change_pct] | all(. == 0)' "$T/diff12.json" >/dev/null \
  || fail "unplanted entries changed"
[ "$(jq '[.entries[] | select(.verdict=="same")] | length' "$T/diff12.json")" = 6 ] || fail "6 unchanged entries expected as same"
pass "diff 1 2: exactly the 2 planted entries are regressions (+20 %), exit 3; 6 unchanged"

# the text table says the same
set +e
"$BIN/moetune" diff 1 2 --db "$DB" >"$T/diff12.txt" 2>&1; rc=$?
set -e
[ $rc = 3 ] || fail "text diff exited $rc"
[ "$(grep -c ' regression$' "$T/diff12.txt")" = 2 ] || { cat "$T/diff12.txt"; fail "text diff does not list 2 regressions"; }
grep -q "^8 entries: 2 regressions" "$T/diff12.txt" || fail "text diff summary wrong"

# a threshold above the planted 20 %: beyond noise, but no regression
set +e
"$BIN/moetune" diff 1 2 --db "$DB" --threshold 25 --json >"$T/diff12t.json" 2>&1; rc=$?
set -e
[ $rc = 0 ] || fail "diff --threshold 25 exited $rc, expected 0"
[ "$(jq '[.entries[] | select(.verdict=="slower")] | length' "$T/diff12t.json")" = 2 ] || fail "--threshold 25: 2 entries should be slower"
pass "--threshold 25: the planted entries are slower, not regressions, exit 0"

# ---- noise only: another seed, no regression, exit 0
set +e
"$BIN/moetune" diff 1 3 --db "$DB" --json >"$T/diff13.json" 2>"$T/diff13.err"; rc=$?
set -e
[ $rc = 0 ] || { cat "$T/diff13.err"; jq -c '.entries[] | select(.verdict=="regression")' "$T/diff13.json"; fail "diff 1 3 (noise only) exited $rc"; }
[ "$(jq '.regressions' "$T/diff13.json")" = 0 ] || fail "noise-only diff reports regressions"
[ "$(jq '[.entries[] | select(.change_pct != 0)] | length' "$T/diff13.json")" -gt 0 ] || fail "seed 2 changed nothing: not a noise test"
max=$(jq '[.entries[] | .change_pct | fabs] | max' "$T/diff13.json")
pass "diff 1 3 (seeds 1 and 2): exit 0, largest change ${max} %"

# ---- last / prev: last = sweep 3; prev = the done sweep before it with the same spec (sweep 2:
# the seed is part of the spec, so sweep 3 has no prev)
set +e
"$BIN/moetune" diff prev last --db "$DB" >"$T/prevlast.out" 2>&1; rc=$?
set -e
[ $rc = 1 ] && grep -q "no earlier done sweep of the same spec" "$T/prevlast.out" || { cat "$T/prevlast.out"; fail "prev of sweep 3 should not exist"; }
set +e; "$BIN/moetune" diff 1 x --db "$DB" >"$T/bad.out" 2>&1; rc=$?; set -e
[ $rc = 2 ] && grep -q "'x' is not a sweep id" "$T/bad.out" || fail "diff 1 x: rc $rc"
set +e; "$BIN/moetune" diff 1 99 --db "$DB" >"$T/bad.out" 2>&1; rc=$?; set -e
[ $rc = 1 ] && grep -q "no sweep 99" "$T/bad.out" || fail "diff 1 99: rc $rc"
pass "prev/last resolution and bad references"

# ---- history: 3 sweeps in order, the planted entry's change shown against sweep 1
"$BIN/moetune" history --db "$DB" --shape E=8,N=7168 --json >"$T/hist.json" || fail "history failed"
[ "$(jq -c '[.sweeps[].sweep]' "$T/hist.json")" = "[1,2,3]" ] || fail "history sweeps: $(jq -c '[.sweeps[].sweep]' "$T/hist.json")"
[ "$(jq -c '[.sweeps[].best | length] | unique' "$T/hist.json")" = "[4]" ] || fail "history: 4 batch sizes per sweep expected"
want=$(sql "SELECT printf('%.4f', min(median_us)) FROM results WHERE sweep_id=2 AND shape_id=$s8 AND batch_size=16 AND status='ok'")
got=$(jq -r '.sweeps[1].best[] | select(.batch_size==16) | .median_us * 10000 | round / 10000 | tostring' "$T/hist.json")
awk -v a="$want" -v b="$got" 'BEGIN{exit !((a-b)^2 < 1e-6)}' || fail "history best of sweep 2 M=16 is $got, the database says $want"
[ "$(jq -r '.sweeps[0].device' "$T/hist.json")" = "$(sql "SELECT name FROM devices LIMIT 1")" ] || fail "history device"
"$BIN/moetune" history --db "$DB" --shape E=8,N=7168 --batch-size 16 >"$T/hist.txt" || fail "history (text) failed"
[ "$(grep -c '^sweep ' "$T/hist.txt")" = 3 ] || { cat "$T/hist.txt"; fail "history text: 3 sweeps expected"; }
grep -E '^  E=8,N=7168.* 16 .*\+20\.00%$' "$T/hist.txt" >/dev/null || { cat "$T/hist.txt"; fail "history does not show +20 % for sweep 2"; }
[ "$(grep -c 'E=8,N=7168' "$T/hist.txt")" = 3 ] || fail "--batch-size 16: one row per sweep expected"
"$BIN/moetune" history --db "$DB" --shape E=8 --device "no such gpu" >"$T/hist0.txt" || fail "history (no device)"
grep -q "no ok results" "$T/hist0.txt" || fail "history of an unknown device should be empty"
pass "history: 3 sweeps in order, stored best values, +20 % on the planted entry, device filter"

# ---- a sweep name that is not UTF-8 (submit accepts it): every --json output is whole
sql "UPDATE sweeps SET name = CAST(x'68ff64' AS TEXT) WHERE id = 2"
set +e
"$BIN/moetune" diff 1 2 --db "$DB" --json >"$T/diffbad.json" 2>"$T/diffbad.err"; rc=$?
set -e
[ $rc = 3 ] || { cat "$T/diffbad.err"; fail "diff --json with a non-UTF-8 name exited $rc, expected 3"; }
[ "$(jq -r '.new.name' "$T/diffbad.json")" = 'h\xFFd' ] || fail "diff --json: name '$(jq -r '.new.name' "$T/diffbad.json")'"
[ "$(jq '.regressions' "$T/diffbad.json")" = 2 ] || fail "diff --json with a non-UTF-8 name lost its regressions"
"$BIN/moetune" history --db "$DB" --shape E=8,N=7168 --json >"$T/histbad.json" || fail "history --json failed"
[ "$(jq -c '[.sweeps[].sweep]' "$T/histbad.json")" = "[1,2,3]" ] || fail "history --json dropped a sweep: $(jq -c '[.sweeps[].sweep]' "$T/histbad.json")"
pass "a non-UTF-8 sweep name: diff --json and history --json whole, the name escaped"
