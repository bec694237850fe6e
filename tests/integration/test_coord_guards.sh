#!/usr/bin/env bash
# The coordinator's own guards: one writer per database (a second coordinator or tune on the
# same --db is refused in one line naming the holder, two at once on a new file never fail with
# schema text), one set of heartbeat limits, a loopback worker socket by default and a loud
# warning for a plain non-loopback bind.
source "$(dirname "$0")/lib.sh"

C="$BIN/moetune-coordinator"
start_coordinator
# 1. a second coordinator on the same database: refused at once, one line naming the holder
set +e
"$C" --db "$DB" --bind "tcp://127.0.0.1:$(free_port)" --control "tcp://127.0.0.1:$(free_port)" \
  >"$T/second.out" 2>"$T/second.err"
rc=$?
set -e
[ $rc -ne 0 ] || fail "a second coordinator on $DB started"
[ "$(grep -c . "$T/second.err")" = 1 ] || { cat "$T/second.err"; fail "second coordinator: not one line"; }
grep -q "in use by pid $COORD_PID on host $(hostname) since 20" "$T/second.err" \
  || { cat "$T/second.err"; fail "second coordinator does not name the holder"; }
pass "second coordinator refused: $(cat "$T/second.err")"
kill -0 "$COORD_PID" || fail "the first coordinator died"

# 2. tune on a database in use says who holds it
set +e
"$BIN/moetune" tune --backend sim --workers 1 --db "$DB" --out "$T/out" --shape E=8,N=256,K=256,topk=2 \
  --batch-sizes 1 >"$T/tune.out" 2>"$T/tune.err"
rc=$?
set -e
[ $rc -ne 0 ] || fail "tune on a database in use succeeded"
grep -q "in use by pid $COORD_PID" "$T/tune.err" || { cat "$T/tune.err"; fail "tune does not name the holder"; }
pass "tune refused: $(grep 'in use' "$T/tune.err" | head -n 1)"
[ "$(sql 'SELECT count(*) FROM sweeps')" = 0 ] || fail "tune stored a sweep in a database in use"
kill_quiet "$COORD_PID"; COORD_PID=

# 3. two coordinators at once on a new file, five times: one runs, the other names it
for i in 1 2 3 4 5; do
  N=$T/new$i.db
  P=()
  for k in 1 2; do
    "$C" --db "$N" --bind "tcp://127.0.0.1:$(free_port)" --control "tcp://127.0.0.1:$(free_port)" \
      >"$T/race$i-$k.log" 2>&1 &
    P+=($!)
  done
  sleep 1
  alive=0
  for p in "${P[@]}"; do kill -0 "$p" 2>/dev/null && alive=$((alive + 1)); done
  for p in "${P[@]}"; do kill_quiet "$p"; done
  [ $alive = 1 ] || { cat "$T"/race$i-*.log; fail "race $i: $alive coordinators running"; }
  grep -l "in use by pid" "$T"/race$i-*.log >/dev/null || { cat "$T"/race$i-*.log; fail "race $i: no lock message"; }
  ! grep -qiE "schema|table|sqlite" "$T"/race$i-*.log || { cat "$T"/race$i-*.log; fail "race $i: schema text"; }
  [ "$(sqlite3 "$N" 'PRAGMA integrity_check')" = ok ] || fail "race $i: database damaged"
done
pass "two coordinators at once on a new file: one runs, the other names it (5 of 5)"

# 4. one set of heartbeat limits: the coordinator may not set a period the worker ignores
set +e
"$C" --db "$T/hb.db" --heartbeat-ms 600001 >"$T/hb.out" 2>"$T/hb.err"
rc=$?
set -e
[ $rc = 2 ] || fail "--heartbeat-ms 600001: exit $rc, expected 2"
grep -q "10..600000" "$T/hb.err" || { cat "$T/hb.err"; fail "--heartbeat-ms: limits not named"; }
pass "--heartbeat-ms 600001 refused: $(cat "$T/hb.err")"
