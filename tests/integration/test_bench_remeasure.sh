#!/usr/bin/env bash
# bench/search/remeasure.sh on the sim: two sweeps of one shape over disjoint spaces (BLOCK_SIZE_M 16
# against 64) pick different configs at both batch sizes; the script lists them and their batch
# sizes, re-measures each batch size's two picks side by side there and nowhere else (one sweep per
# pair), and scores both batch sizes from them. The same database twice: nothing to re-measure, 2/2
# agree. A sweep that is not done is refused.
source "$(dirname "$0")/lib.sh"
S=${MT_SOURCE_DIR:?MT_SOURCE_DIR must point at the source folder}
M="$BIN/moetune"
SHAPE=(--model qwen3-30b-a3b --tp 1)
# (the ship guard off: both sweeps would ship the engine's default at M=1, and their picks differ by design)
SPACE=(--backend sim --workers 1 --sim-time-scale 0 "${SHAPE[@]}" --batch-sizes 1,256 --block-n 64,128
  --block-k 64 --group-m 1 --num-warps 4 --num-stages 2 --guard off)
"$M" tune "${SPACE[@]}" --block-m 16 --db "$T/a.db" --out "$T/a" >"$T/a.out" 2>"$T/a.log" || fail "sweep A exited $?"
"$M" tune "${SPACE[@]}" --block-m 64 --db "$T/b.db" --out "$T/b" >"$T/b.out" 2>"$T/b.log" || fail "sweep B exited $?"

BACKEND=sim MT_BIN_DIR=$BIN bash "$S/bench/search/remeasure.sh" "$T/r" "$T/a.db" "$T/b.db" "${SHAPE[@]}" \
  >"$T/r.log" 2>&1 || { cat "$T/r.log"; fail "remeasure.sh exited $?"; }
[ "$(sed -n 2p "$T/r/differ.txt")" = "1,256" ] || fail "differ.txt lists batch sizes '$(sed -n 2p "$T/r/differ.txt")', not 1,256"
cfgs=$(sed -n 1p "$T/r/differ.txt" | tr ',' '\n' | wc -l)
[ "$cfgs" -ge 2 ] && [ "$cfgs" -le 4 ] || fail "differ.txt lists $cfgs configs, not the 2-4 picks"
q() { sqlite3 -batch -noheader "$1" "$2"; }
pairs=$(tail -n +3 "$T/r/differ.txt" | wc -l)
[ "$pairs" -ge 1 ] && [ "$pairs" -le 2 ] || fail "differ.txt lists $pairs pairs, not 1 or 2"
n=0
for db in "$T"/r/remeasure-*.db; do n=$((n + 1)); done
[ "$n" = "$pairs" ] || fail "$n re-measure databases for $pairs pairs"
# every (batch size, config) re-measured is a pick of A or B at that batch size: 2 per batch size
measured=$(for db in "$T"/r/remeasure-*.db; do
  q "$db" "SELECT r.batch_size || ' ' || f.block_m || 'x' || f.block_n || 'x' || f.block_k || 'x' || f.group_m
    || 'x' || f.num_warps || 'x' || f.num_stages FROM results r JOIN configs f ON f.id = r.config_id
    WHERE r.status = 'ok' AND $SEARCHED"; done | sort)
[ "$(wc -l <<<"$measured")" = 4 ] || fail "the re-measure holds $(wc -l <<<"$measured") ok rows, not 2 picks x 2 batch sizes: $measured"
for m in 1 256; do
  for db in a b; do
    pick=$(q "$T/$db.db" "SELECT f.block_m || 'x' || f.block_n || 'x' || f.block_k || 'x' || f.group_m || 'x'
      || f.num_warps || 'x' || f.num_stages FROM results r JOIN configs f ON f.id = r.config_id
      WHERE r.status = 'ok' AND r.batch_size = $m ORDER BY r.median_us LIMIT 1")
    grep -qx "$m $pick" <<<"$measured" || fail "$db's pick $pick at M=$m was not re-measured there: $measured"
  done
done
summary=$(grep '^summary ' "$T/r/score.txt" | cut -d' ' -f2-)
[ "$(jq -r '"\(.batch_sizes) \(.re_measured)"' <<<"$summary")" = "2 2" ] \
  || fail "score summary $summary: not 2 batch sizes, both re-measured"
jq -e '.worst_ratio >= 1' <<<"$summary" >/dev/null || fail "worst ratio under 1 in $summary"
pass "remeasure.sh: each batch size's 2 picks re-measured side by side there, $pairs sweeps ($summary)"

BACKEND=sim MT_BIN_DIR=$BIN bash "$S/bench/search/remeasure.sh" "$T/s" "$T/a.db" "$T/a.db" "${SHAPE[@]}" \
  >"$T/s.log" 2>&1 || fail "remeasure.sh on one database twice exited $?"
! ls "$T"/s/remeasure-*.db >/dev/null 2>&1 || fail "the same database twice was re-measured"
grep -q '^agree 2/2 ' "$T/s/score.txt" || fail "the same database twice: $(grep '^agree' "$T/s/score.txt")"
pass "remeasure.sh: one database twice agrees at 2/2, nothing re-measured"

# A sweep that is not done (stopped by a time limit, say) has no picks to compare: refused.
cp "$T/b.db" "$T/c.db"
sqlite3 "$T/c.db" "UPDATE sweeps SET state = 'running' WHERE id = 1"
set +e
BACKEND=sim MT_BIN_DIR=$BIN bash "$S/bench/search/remeasure.sh" "$T/u" "$T/a.db" "$T/c.db" "${SHAPE[@]}" >"$T/u.log" 2>&1
rc=$?
set -e
[ $rc != 0 ] || fail "remeasure.sh compared a sweep that is not done"
grep -q 'sweep 1 is running, not done' "$T/u.log" || fail "no reason given: $(cat "$T/u.log")"
! ls "$T"/u/remeasure-*.db >/dev/null 2>&1 || fail "a sweep not done was re-measured"
pass "remeasure.sh: a sweep that is not done is refused, nothing re-measured"

# Picks as moetune takes them (stability.py asks `moetune results --best`): where a batch size has phase-2 rows (a decide step's side-by-side
# re-measure), a first-pass row is not a pick, even one read faster on another GPU of the same
# name. D is A with, at M=1, A's pick re-measured (phase 2) and another config's first-pass row
# from a second device, twice as fast: D's picks are A's.
cp "$T/a.db" "$T/d.db"
python3 - "$T/d.db" <<'PY'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
pick, dev, med = c.execute("SELECT config_id, device_id, median_us FROM results WHERE status = 'ok'"
                           " AND batch_size = 1 ORDER BY median_us LIMIT 1").fetchone()
other = c.execute("SELECT config_id FROM results WHERE batch_size = 1 AND config_id != ?", (pick,)).fetchone()[0]
c.execute("INSERT INTO devices (name, uuid) SELECT name, 'GPU-second' FROM devices WHERE id = ?", (dev,))
second = c.execute("SELECT max(id) FROM devices").fetchone()[0]
c.execute("UPDATE results SET phase = 2 WHERE batch_size = 1 AND config_id = ?", (pick,))
c.execute("UPDATE results SET status = 'ok', phase = 1, device_id = ?, median_us = ? WHERE batch_size = 1"
          " AND config_id = ?", (second, med / 2, other))
c.commit()
PY
MT_BIN_DIR=$BIN python3 "$S/bench/search/stability.py" differ "$T/a.db" "$T/d.db" >"$T/d.txt" || fail "stability.py differ on D exited $?"
[ -z "$(sed -n 1p "$T/d.txt")" ] || fail "a first-pass row beat M=1's phase-2 pick: $(cat "$T/d.txt")"
# and the same row without a phase 2 there is the pick
sqlite3 "$T/d.db" "UPDATE results SET phase = 1 WHERE batch_size = 1"
MT_BIN_DIR=$BIN python3 "$S/bench/search/stability.py" differ "$T/a.db" "$T/d.db" >"$T/e.txt" || fail "stability.py differ on E exited $?"
[ "$(sed -n 2p "$T/e.txt")" = 1 ] || fail "without a phase 2, the faster row is not M=1's pick: $(cat "$T/e.txt")"
pass "stability.py: where a batch size has phase-2 rows they decide; without, the fastest row"

# PROCESSES=3: each pair re-measured by 3 separate processes (remeasure-N.P.db), and a pick reads
# as the median of its 3 medians: one process reading it 10x slower moves nothing, two do.
BACKEND=sim PROCESSES=3 MT_BIN_DIR=$BIN bash "$S/bench/search/remeasure.sh" "$T/p" "$T/a.db" "$T/b.db" "${SHAPE[@]}" \
  >"$T/p.log" 2>&1 || { cat "$T/p.log"; fail "remeasure.sh with PROCESSES=3 exited $?"; }
n=0
for db in "$T"/p/remeasure-*.*.db; do n=$((n + 1)); done
[ "$n" = $((3 * pairs)) ] || fail "$n re-measure databases for $pairs pairs x 3 processes"
[ "$(grep '^summary ' "$T/p/score.txt" | cut -d' ' -f2- | jq -r .processes)" = 3 ] \
  || fail "the score does not count 3 processes: $(grep '^summary ' "$T/p/score.txt")"
ratio() { MT_BIN_DIR=$BIN python3 "$S/bench/search/stability.py" score "$T/a.db" "$T/b.db" "$T"/p/remeasure-*.*.db \
  | grep '^summary ' | cut -d' ' -f2- | jq -r .worst_ratio; }
r0=$(ratio)
slow() { sqlite3 "$T/p/remeasure-1.$1.db" "UPDATE results SET median_us = median_us * 10 WHERE batch_size =
  (SELECT min(batch_size) FROM results) AND config_id = (SELECT min(config_id) FROM results)"; }
slow 1
[ "$(ratio)" = "$r0" ] || fail "one process of 3 read 10x slower moved the score: $(ratio), not $r0"
slow 2
r2=$(ratio)
jq -en "$r2 > 5" >/dev/null || fail "two processes of 3 read 10x slower left the worst ratio at $r2"
pass "remeasure.sh PROCESSES=3: $n databases, each pick the median of its 3 processes (worst ratio $r0; one outlier moves nothing, two move it to $r2)"
set +e
BACKEND=sim PROCESSES=0 MT_BIN_DIR=$BIN bash "$S/bench/search/remeasure.sh" "$T/z" "$T/a.db" "$T/b.db" "${SHAPE[@]}" >"$T/z.log" 2>&1
rc=$?
set -e
[ $rc != 0 ] && grep -q 'PROCESSES=0: not a count' "$T/z.log" || fail "PROCESSES=0: exit $rc, $(cat "$T/z.log")"
! ls "$T"/z/remeasure-*.db >/dev/null 2>&1 || fail "PROCESSES=0 re-measured"
pass "remeasure.sh PROCESSES=0: refused with a reason, nothing re-measured"

# ROUND_PROCESS reaches each re-measure's tune as --round-process: a wrong one is tune's refusal
set +e
BACKEND=sim ROUND_PROCESS=maybe MT_BIN_DIR=$BIN bash "$S/bench/search/remeasure.sh" "$T/y" "$T/a.db" "$T/b.db" "${SHAPE[@]}" >"$T/y.log" 2>&1
rc=$?
set -e
[ $rc != 0 ] && grep -q -- '--round-process maybe: not same or new' "$T/y.log" || fail "ROUND_PROCESS=maybe: exit $rc, $(cat "$T/y.log")"
BACKEND=sim ROUND_PROCESS=new MT_BIN_DIR=$BIN bash "$S/bench/search/remeasure.sh" "$T/x" "$T/a.db" "$T/b.db" "${SHAPE[@]}" \
  >"$T/x.log" 2>&1 || { cat "$T/x.log"; fail "remeasure.sh with ROUND_PROCESS=new exited $?"; }
[ "$(grep '^summary ' "$T/x/score.txt" | cut -d' ' -f2- | jq -r .re_measured)" = 2 ] || fail "ROUND_PROCESS=new: $(cat "$T/x/score.txt")"
pass "remeasure.sh ROUND_PROCESS: passed to tune (maybe refused by it; new re-measures both batch sizes)"
