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

# 5. the worker socket binds loopback by default; a plain bind other hosts reach is warned about
N=$T/bind.db
CP=$(free_port)
"$C" --db "$N" --control "tcp://127.0.0.1:$CP" >"$T/default-bind.log" 2>&1 &
P1=$!
wait_log "$T/default-bind.log" "coordinator on|Address already in use" 10 || { kill_quiet $P1; fail "default bind: no start line"; }
if grep -q "Address already in use" "$T/default-bind.log"; then
  echo "skip: port 5555 is taken on this host; the default bind is not checked"
else
  grep -q "coordinator on tcp://127.0.0.1:5555 (workers)" "$T/default-bind.log" \
    || { kill_quiet $P1; cat "$T/default-bind.log"; fail "default worker bind is not loopback"; }
  ! grep -q WARNING "$T/default-bind.log" || { kill_quiet $P1; fail "a loopback bind is warned about"; }
  pass "default worker socket: $(grep -o 'coordinator on [^ ]* (workers)' "$T/default-bind.log")"
fi
kill_quiet $P1
"$C" --db "$N" --bind "tcp://*:$(free_port)" --control "tcp://127.0.0.1:$(free_port)" >"$T/open-bind.log" 2>&1 &
P1=$!
wait_log "$T/open-bind.log" "coordinator on" 10 || { kill_quiet $P1; fail "open bind: no start line"; }
sleep 0.2
kill_quiet $P1
grep -q "WARNING: the worker socket tcp://0.0.0.0:[0-9]* is reachable from other hosts in plain TCP without CURVE" \
  "$T/open-bind.log" || { cat "$T/open-bind.log"; fail "no warning for a plain all-interfaces bind"; }
! grep -q "WARNING: the control socket" "$T/open-bind.log" || fail "loopback control socket warned about"
pass "plain all-interfaces bind warned: $(grep -o 'WARNING.*' "$T/open-bind.log" | cut -c1-100)..."

# 6. a leftover running sweep is named, not measured silently ahead of the one asked for
DB=$T/left.db
start_coordinator
# 256 configs: enough that tune's worker (sleeping its simulated time) cannot finish it before
# tune's own submit arrives
"$BIN/moetune" submit --control "$CEP" --name leftover --decide-margin 0 --shape E=8,N=256,K=256,topk=2 --batch-sizes 1,2 \
  --block-m 16 --block-n 32,64,128,256 --block-k 64,128 --group-m 1,16,32,64 --num-warps 4,8 --num-stages 2,3,4,5 \
  >"$T/sub1.out" 2>"$T/sub1.err"
! grep -q "queued behind" "$T/sub1.err" || fail "the first sweep is said to wait"
"$BIN/moetune" submit --control "$CEP" --name second --shape E=8,N=512,K=256,topk=2 --batch-sizes 1 \
  >"$T/sub2.out" 2>"$T/sub2.err"
grep -q "queued behind running sweep 1, measured first" "$T/sub2.err" || { cat "$T/sub2.err"; fail "submit does not name sweep 1"; }
pass "submit: $(cat "$T/sub2.err")"
"$BIN/moetune" cancel --control "$CEP" --sweep 2 >/dev/null
# the cancel is committed by the writer thread: wait for it, or the stop may come first and
# sweep 2 would still be running after the restart
for _ in $(seq 1 100); do [ "$(sql "SELECT state FROM sweeps WHERE id = 2")" = cancelled ] && break; sleep 0.1; done
[ "$(sql "SELECT state FROM sweeps WHERE id = 2")" = cancelled ] || fail "the cancel of sweep 2 was never committed"
kill_quiet "$COORD_PID"; COORD_PID=
set +e
# (sim time scale 1: tune now waits for its worker to connect before it submits, and an instant
# sim worker would finish the leftover sweep first)
"$BIN/moetune" tune --backend sim --workers 1 --sim-time-scale 1 --db "$DB" --out "$T/out6" --shape E=8,N=768,K=256,topk=2 \
  --batch-sizes 1 --block-m 16 --block-n 64 --block-k 64 --group-m 1 --num-warps 4 --num-stages 2 \
  >"$T/tune6.out" 2>"$T/tune6.err"
rc=$?
set -e
[ $rc = 0 ] || { cat "$T/tune6.err"; fail "tune behind a leftover sweep: exit $rc"; }
grep -q "moetune tune: queued behind running sweep 1, measured first" "$T/tune6.err" \
  || { cat "$T/tune6.err"; fail "tune does not say that sweep 1 goes first"; }
pass "tune names the leftover sweep: $(grep 'queued behind' "$T/tune6.err")"
[ "$(sql 'SELECT state FROM sweeps WHERE id = 1')" = done ] || fail "the leftover sweep was not finished"

# 7. a mixed fleet (an H100 and an H200) never splits a sweep: each sweep is measured whole by one model
DB=$T/mixed.db
start_coordinator
start_workers 1 --sim-device h100
"$BIN/moetune-worker" --connect "$WEP" --backend sim --sim-device h200 --id "w2-$$" >>"$T/worker2.log" 2>&1 &
PIDS+=($!)
for n in 256 512; do
  "$BIN/moetune" submit --control "$CEP" --shape E=8,N=$n,K=256,topk=2 --batch-sizes 1,2 --block-m 16,32 \
    --block-n 64 --block-k 64 --group-m 1,16 --num-warps 4,8 --num-stages 2,3 >/dev/null
done
for id in 1 2; do
  [ "$(wait_sweep $id 120)" = done ] || fail "mixed fleet: sweep $id did not finish"
  rows=$(check_rows $id)
  models=$(sql "SELECT count(DISTINCT d.name) FROM results r JOIN devices d ON d.id = r.device_id WHERE r.sweep_id = $id")
  [ "$models" = 1 ] || fail "mixed fleet: sweep $id measured by $models GPU models"
  pass "mixed fleet: sweep $id: all $rows rows from $(sql "SELECT DISTINCT d.name FROM results r JOIN devices d ON d.id = r.device_id WHERE r.sweep_id = $id")"
done

# 8. 300 idle connections under a 256-descriptor limit: the worker socket refuses (and logs) the
# ones over its cap, and the control socket still answers during the flood
if command -v python3 >/dev/null; then
  DB=$T/flood.db
  kill_quiet "$COORD_PID"; COORD_PID=
  ( ulimit -n 256; exec "$C" --db "$DB" --bind "$WEP" --control "$CEP" ) >>"$T/flood-coord.log" 2>&1 &
  FPID=$!
  wait_log "$T/flood-coord.log" "coordinator on" 10 || { kill_quiet $FPID; fail "flood: coordinator did not start"; }
  python3 "$MT_SOURCE_DIR/tests/tools/mt_flood.py" 127.0.0.1 "$WPORT" 300 100000 4 >"$T/flood.out" &
  PY=$!
  sleep 2.5
  "$BIN/moetune" status --control "$CEP" --timeout-ms 2000 >/dev/null || { kill_quiet $FPID; fail "flood: control socket silent"; }
  wait $PY
  kill_quiet $FPID
  grep -q "worker socket: .* connections, over its limit of 128: refusing new ones" "$T/flood-coord.log" \
    || { cat "$T/flood-coord.log" | tail; fail "flood: refusals not logged"; }
  pass "flood under ulimit -n 256: control answered; $(cat "$T/flood.out")"
  # 9. the same cap with CURVE on: the authenticator's watch holds the socket's one monitor and
  # enforces it (raw connections over the cap are shut down at once and logged)
  K=$T/keys; mkdir -p "$K" "$T/allow"
  for n in coordinator worker; do "$BIN/moetune" keygen --out "$K" --name $n >/dev/null || fail "keygen $n"; done
  cp "$K/worker.pub" "$T/allow/"
  DB=$T/flood-curve.db
  "$C" --db "$DB" --bind "$WEP" --control "$CEP" --max-connections 20 --curve-secret "$K/coordinator.key" \
    --curve-allow "$T/allow" >>"$T/flood-curve.log" 2>&1 &
  FPID=$!
  wait_log "$T/flood-curve.log" "coordinator on" 10 || { cat "$T/flood-curve.log"; kill_quiet $FPID; fail "curve flood: no start"; }
  # 60 idle connections that never start the handshake (a CURVE-less greeting is refused at once)
  python3 -c 'import socket, sys, time
s = [socket.create_connection(("127.0.0.1", int(sys.argv[1]))) for _ in range(60)]
time.sleep(2)' "$WPORT" || fail "curve flood: could not connect"
  kill_quiet $FPID
  grep -q "workers socket: .* connections, over its limit of 20: refusing new ones" "$T/flood-curve.log" \
    || { tail "$T/flood-curve.log"; fail "curve flood: the cap was not enforced"; }
  pass "with CURVE on, the worker socket's cap of 20 refused and logged the flood's extra connections"
else
  echo "skip: no python3 for the connection flood"
fi
