#!/usr/bin/env bash
# bench/search/remeasure.sh on the sim: two sweeps of one shape over disjoint spaces (BLOCK_SIZE_M 16
# against 64) pick different configs at both batch sizes; the script lists them and their batch
# sizes, re-measures exactly those picks at exactly those batch sizes in one side-by-side sweep, and
# scores both batch sizes from it. The same database twice: nothing to re-measure, 2/2 agree.
source "$(dirname "$0")/lib.sh"
S=${MT_SOURCE_DIR:?MT_SOURCE_DIR must point at the source folder}
M="$BIN/moetune"
SHAPE=(--model qwen3-30b-a3b --tp 1)
SPACE=(--backend sim --workers 1 --sim-time-scale 0 "${SHAPE[@]}" --batch-sizes 1,256 --block-n 64,128
  --block-k 64 --group-m 1 --num-warps 4 --num-stages 2)
"$M" tune "${SPACE[@]}" --block-m 16 --db "$T/a.db" --out "$T/a" >"$T/a.out" 2>"$T/a.log" || fail "sweep A exited $?"
"$M" tune "${SPACE[@]}" --block-m 64 --db "$T/b.db" --out "$T/b" >"$T/b.out" 2>"$T/b.log" || fail "sweep B exited $?"

BACKEND=sim MT_BIN_DIR=$BIN bash "$S/bench/search/remeasure.sh" "$T/r" "$T/a.db" "$T/b.db" "${SHAPE[@]}" \
  >"$T/r.log" 2>&1 || { cat "$T/r.log"; fail "remeasure.sh exited $?"; }
[ "$(sed -n 2p "$T/r/differ.txt")" = "1,256" ] || fail "differ.txt lists batch sizes '$(sed -n 2p "$T/r/differ.txt")', not 1,256"
cfgs=$(sed -n 1p "$T/r/differ.txt" | tr ',' '\n' | wc -l)
[ "$cfgs" -ge 2 ] && [ "$cfgs" -le 4 ] || fail "differ.txt lists $cfgs configs, not the 2-4 picks"
q() { sqlite3 -batch -noheader "$1" "$2"; }
rows=$(q "$T/r/remeasure.db" "SELECT COUNT(*) FROM results WHERE status = 'ok'")
[ "$rows" = $((cfgs * 2)) ] || fail "the re-measure holds $rows ok rows, not $cfgs configs x 2 batch sizes"
[ "$(q "$T/r/remeasure.db" "SELECT COUNT(*) FROM results WHERE batch_size NOT IN (1, 256)")" = 0 ] \
  || fail "the re-measure measured a batch size it was not given"
summary=$(grep '^summary ' "$T/r/score.txt" | cut -d' ' -f2-)
[ "$(jq -r '"\(.batch_sizes) \(.re_measured)"' <<<"$summary")" = "2 2" ] \
  || fail "score summary $summary: not 2 batch sizes, both re-measured"
jq -e '.worst_ratio >= 1' <<<"$summary" >/dev/null || fail "worst ratio under 1 in $summary"
pass "remeasure.sh: $cfgs picks re-measured side by side at 2 batch sizes ($summary)"

BACKEND=sim MT_BIN_DIR=$BIN bash "$S/bench/search/remeasure.sh" "$T/s" "$T/a.db" "$T/a.db" "${SHAPE[@]}" \
  >"$T/s.log" 2>&1 || fail "remeasure.sh on one database twice exited $?"
[ ! -e "$T/s/remeasure.db" ] || fail "the same database twice was re-measured"
grep -q '^agree 2/2 ' "$T/s/score.txt" || fail "the same database twice: $(grep '^agree' "$T/s/score.txt")"
pass "remeasure.sh: one database twice agrees at 2/2, nothing re-measured"
