#!/usr/bin/env bash
# bench/search/sample.sh on the sim: exhaustive, racing and halving measure the same sample of 16
# configs (32 results each at 2 batch sizes), the picks are compared and scored side by side, and
# the exhaustive wall time is extrapolated by valid configs / 16. A stopped sweep is left out of
# the comparison's summary.
source "$(dirname "$0")/lib.sh"
S=${MT_SOURCE_DIR:?MT_SOURCE_DIR must point at the source folder}
BACKEND=sim MT_BIN_DIR=$BIN bash "$S/bench/search/sample.sh" "$T/o" 16 --model qwen3-30b-a3b --tp 1 \
  --batch-sizes 1,4096 --guard off >"$T/o.log" 2>&1 || { cat "$T/o.log"; fail "sample.sh exited $?"; }
q() { sqlite3 -batch -noheader "$1" "$2"; }
cfgs() { q "$1" "SELECT f.block_m||'x'||f.block_n||'x'||f.block_k||'x'||f.group_m||'x'||f.num_warps||'x'||f.num_stages
  FROM (SELECT DISTINCT config_id FROM results r WHERE $SEARCHED) r JOIN configs f ON f.id = r.config_id ORDER BY 1"; }
ref=$(cfgs "$T/o/exhaustive.db")
[ "$(wc -l <<<"$ref")" = 16 ] || fail "exhaustive measured $(wc -l <<<"$ref") configs, not the sample's 16"
for s in exhaustive racing halving; do
  [ "$(q "$T/o/$s.db" "SELECT COUNT(*) FROM results r WHERE sweep_id = 1 AND $SEARCHED")" = 32 ] \
    || fail "$s holds $(q "$T/o/$s.db" "SELECT COUNT(*) FROM results r WHERE sweep_id = 1 AND $SEARCHED") results, not 16 x 2"
  [ "$(cfgs "$T/o/$s.db")" = "$ref" ] || fail "$s measured another sample than exhaustive"
done
[ "$(q "$T/o/exhaustive.db" "SELECT COUNT(*) FROM results WHERE status = 'pruned'")" = 0 ] \
  || fail "the exhaustive reference pruned rows: racing was not off"
grep -q '^summary {"racing"' "$T/o/compare.txt" || fail "no comparison of the picks: $(tail -n 3 "$T/o/compare.txt")"
valid=$(sed -n 's/.* on 16 of \([0-9]*\) valid configs.*/\1/p' "$T/o/extrapolated.txt")
[ "$valid" = 1152 ] || fail "extrapolation not over 1152 valid configs: $(cat "$T/o/extrapolated.txt")"
for s in racing halving; do
  grep -q '^summary ' "$T/o/rm-$s/score.txt" || fail "no side-by-side score for $s"
  jq -e '.b_over_a_points == 2' <<<"$(sed -n 's/^summary //p' "$T/o/rm-$s/score.txt")" >/dev/null \
    || fail "$s's score does not cover both batch sizes: $(grep '^summary' "$T/o/rm-$s/score.txt")"
done
pass "sample.sh: exhaustive, racing and halving on one sample of 16 of $valid configs, compared and scored"

# a sweep that is not done (stopped by a time limit) is shown but left out of the summary
sqlite3 "$T/o/halving.db" "UPDATE sweeps SET state = 'running' WHERE id = 1"
python3 "$S/bench/search/compare.py" "$T/o" exhaustive racing halving >"$T/c.txt" || fail "compare.py exited $?"
grep -q '^halving: not summarised, its sweep is not done' "$T/c.txt" || fail "the stopped sweep was not flagged"
jq -e 'has("racing") and (has("halving") | not)' <<<"$(sed -n 's/^summary //p' "$T/c.txt")" >/dev/null \
  || fail "summary of a stopped sweep: $(grep '^summary' "$T/c.txt")"
pass "compare.py: a stopped sweep is flagged and left out of the summary"
