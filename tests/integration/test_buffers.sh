#!/usr/bin/env bash
# What peers can make the coordinator hold is bounded in total and said at start:
#  1. the start line states the bound: connections x per-connection bytes, MiB in all, and how
#     many batch sizes one Result may carry;
#  2. 200 peers that each send most of a 1 MiB frame to the worker socket, under a 100 MiB bound,
#     leave the coordinator's peak memory under that bound (each connection is capped to its
#     share), and the control socket answers meanwhile;
#  3. a sweep whose Result cannot fit the worker socket's message limit (18 batch sizes under
#     --max-msg-bytes 1024) is refused at submit, in one line, instead of being planned and then
#     waiting forever on Results that are dropped.
source "$(dirname "$0")/lib.sh"
command -v python3 >/dev/null || { echo "skip: no python3"; exit 77; }

# ---- 1 and 2
start_coordinator --max-msg-bytes 1048576 --max-buffer-mb 100
line=$(grep -m1 "buffers: at most" "$T/coord.log") || fail "no buffer bound at start"
echo "$line" | grep -Eq "buffers: at most [0-9]+ worker connections x [0-9]+ KiB \(messages up to [0-9]+ bytes: a Result of up to [0-9]+ batch sizes\) and 64 control connections x 1040 KiB, (9[0-9]|100) MiB in all \(--max-buffer-mb 100\)" \
  || fail "start line: $line"
pass "start: ${line#*] }"
base_kb=$(awk '/VmRSS/ {print $2}' /proc/$COORD_PID/status)
python3 "$MT_SOURCE_DIR/tests/tools/mt_flood.py" 127.0.0.1 "$WPORT" 200 1048576 3 >"$T/flood.out" 2>&1 &
FLOOD=$!
PIDS+=($FLOOD)
sleep 1.5
"$BIN/moetune" status --control "$CEP" --timeout-ms 3000 >/dev/null || fail "control socket silent during the flood"
wait "$FLOOD" || true
peak_kb=$(awk '/VmHWM/ {print $2}' /proc/$COORD_PID/status)
grown=$(( (peak_kb - base_kb) / 1024 ))
[ "$grown" -lt 100 ] || fail "the coordinator grew by $grown MiB under a 100 MiB bound ($(cat "$T/flood.out"))"
pass "200 peers sending 1 MiB frames: peak grew by $grown MiB (bound 100 MiB); $(cat "$T/flood.out")"
kill_quiet "$COORD_PID"; COORD_PID=

# ---- 3. a Result that cannot fit is refused at submit
DB=$T/small.db
start_coordinator --max-msg-bytes 1024
set +e
"$BIN/moetune" submit --control "$CEP" --name big --shape E=8,N=256,K=256,topk=2 \
  --batch-sizes 1,2,4,8,16,24,32,48,64,96,128,256,512,1024,1536,2048,3072,4096 >"$T/submit.out" 2>"$T/submit.err"
rc=$?
set -e
[ $rc -ne 0 ] || fail "a sweep of 18 batch sizes under --max-msg-bytes 1024 was accepted"
grep -q "a Result of this sweep (18 batch sizes) can take [0-9]* bytes, over the 1024 bytes the worker socket accepts" \
  "$T/submit.err" || { cat "$T/submit.err"; fail "the refusal does not say why"; }
[ "$(sql 'SELECT count(*) FROM sweeps')" = 0 ] || fail "the refused sweep was stored"
"$BIN/moetune" submit --control "$CEP" --name one --shape E=8,N=256,K=256,topk=2 --batch-sizes 16 \
  >/dev/null 2>&1 || fail "a sweep of 1 batch size was refused"
start_workers 1
[ "$(wait_sweep 1 60)" = done ] || fail "the sweep of one batch size did not finish"
pass "18 batch sizes refused at submit: $(cut -c1-150 "$T/submit.err")...; 1 batch size measured"
