#!/usr/bin/env bash
# Who measures is checked, not trusted:
#  1. GPU names and worker ids are data: a Hello whose GPU name holds an engine file name's
#     separators (',' '='), a newline, or is longer than 96 bytes, is refused for good in one line
#     (never shortened), and the worker is not recorded; a worker started with such an --id exits 2;
#  2. a worker that says Hello again under another GPU name gives back the job it holds at once;
#  3. a sweep is bound to the whole measuring identity of its first lease: a worker with the same
#     GPU name and backend but another compiler gets none of it;
#  4. a second worker started with the --id of a live one is refused with a reason on both sides
#     and exits; the first one goes on measuring.
source "$(dirname "$0")/lib.sh"
[ -x "$BIN/mt_peer" ] || { echo "mt_peer not built"; exit 77; }
SPACE=(--block-m 16,32 --block-n 64,128 --block-k 64,128 --group-m 1,16 --num-warps 4,8 --num-stages 2)

start_coordinator --heartbeat-ms 200 --lease-ms 3000
# ---- 1. names that are not data
long=$(printf 'NVIDIA H200 %0120d' 0)
i=0
for name in "NVIDIA H200,dtype=fp8_w8a8" $'NVIDIA\nH200' "$long"; do
  i=$((i + 1))
  set +e
  "$BIN/mt_peer" "$WEP" "name$i-$$" "gpu=$name" seconds=5 >"$T/name$i.out" 2>&1
  rc=$?
  set -e
  [ $rc = 3 ] || { cat "$T/name$i.out"; fail "GPU name $i: mt_peer exit $rc, expected 3 (refused)"; }
  grep -q "^refused: hello: the GPU name" "$T/name$i.out" || { cat "$T/name$i.out"; fail "GPU name $i: no reason"; }
  [ "$(sql "SELECT count(*) FROM workers WHERE worker_id = 'name$i-$$'")" = 0 ] || fail "GPU name $i: worker recorded"
done
[ "$(sql "SELECT count(*) FROM devices WHERE name LIKE '%,%' OR name LIKE '%=%' OR name LIKE '%' || char(10) || '%'
        OR length(name) > 96")" = 0 ] || fail "a device name that is not data was stored"
grep -q "hello: the GPU name is longer than 96 bytes (it is never shortened" "$T/coord.log" || fail "long name not refused"
! grep -q "^H200" "$T/coord.log" || fail "a newline reached the coordinator's log"
pass "3 GPU names refused at Hello ($(grep -m1 '^refused' "$T/name1.out" | cut -c1-90)...)"
set +e
"$BIN/moetune-worker" --connect "$WEP" --backend sim --id 'w,1' >"$T/badid.out" 2>"$T/badid.err"
rc=$?
set -e
[ $rc = 2 ] && [ "$(grep -c . "$T/badid.err")" = 1 ] && grep -q "^moetune-worker: --id: the worker id has" "$T/badid.err" \
  || { cat "$T/badid.err"; fail "--id 'w,1': exit $rc, not one line"; }
pass "--id 'w,1': $(cat "$T/badid.err")"

# ---- 2. a second Hello under another GPU name gives its lease back
"$BIN/moetune" submit --control "$CEP" --name rehello --chunk 4 --batch-sizes 1,2 "${SPACE[@]}" \
  --shape E=8,N=256,K=256,topk=2 >"$T/submit1.out" 2>&1 || { cat "$T/submit1.out"; fail "submit failed"; }
"$BIN/mt_peer" "$WEP" "turncoat-$$" credits=1 hello2="NVIDIA H100" seconds=30 >"$T/turncoat.out" 2>&1 &
PIDS+=($!)
wait_log "$T/turncoat.out" "^job" 5 || fail "the peer got no job"
job=$(awk '/^job/ {print $2; exit}' "$T/turncoat.out")
wait_log "$T/coord.log" "worker turncoat-$$ said hello as NVIDIA H100 / sim / sim / peer / , no longer NVIDIA H200 / sim / sim / peer / : its 1 leases go back" 5 \
  || fail "the lease of a worker whose GPU changed was not given back"
start_workers 1
state=$(wait_sweep 1 30)
[ "$state" = done ] || fail "sweep 1: $state"
[ "$(sql "SELECT worker_id FROM jobs WHERE id = $job")" = "w1-$$" ] || fail "job $job was not finished by w1"
[ "$(sql "SELECT count(*) FROM results WHERE sweep_id = 1 AND worker_id <> 'w1-$$'")" = 0 ] || fail "rows not from w1"
pass "a worker that said hello again as an H100 gave job $job back at once; w1 finished sweep 1"
for p in "${PIDS[@]}"; do kill_quiet "$p"; done; PIDS=()
sleep 1 # w1 is dead to the coordinator (3 silent heartbeats) before a new w1 starts

# ---- 3. the same GPU name and backend, another compiler: none of a bound sweep
# (one config hangs until its 3 s timeout, so the sweep is still running when the peer joins)
start_workers 1 --sim-faults hang=16x64x64x1x4x2
"$BIN/moetune" submit --control "$CEP" --name bound --chunk 2 --config-timeout-ms 3000 --batch-sizes 1,2 "${SPACE[@]}" \
  --shape E=8,N=512,K=256,topk=2 >"$T/submit2.out" 2>&1 || { cat "$T/submit2.out"; fail "submit failed"; }
wait_log "$T/coord.log" "sweep 2 bound to NVIDIA H200 / sim / sim / " 10 || fail "sweep 2 was not bound"
gpu=$(sql "SELECT d.name FROM workers w JOIN devices d ON d.id = w.device_id WHERE w.worker_id = 'w1-$$'")
hash=$(sql "SELECT kernel_hash FROM workers WHERE worker_id = 'w1-$$'")
"$BIN/mt_peer" "$WEP" "other-cc-$$" "gpu=$gpu" compiler=sim_other "hash=$hash" credits=2 mode=answer seconds=30 \
  >"$T/other.out" 2>&1 &
PIDS+=($!)
wait_log "$T/other.out" "^welcome" 5 || fail "the peer was not welcomed"
[ "$(sql "SELECT state FROM sweeps WHERE id = 2")" = running ] || fail "sweep 2 ended before the peer joined"
state=$(wait_sweep 2 60)
[ "$state" = done ] || fail "sweep 2: $state"
[ "$(grep -c '^job' "$T/other.out")" = 0 ] || fail "a worker of another compiler measured part of sweep 2"
[ "$(sql "SELECT count(DISTINCT worker_id) || count(DISTINCT compiler) FROM results WHERE sweep_id = 2")" = 11 ] \
  || fail "sweep 2 rows from several workers or compilers"
pass "sweep 2 bound to w1's identity: the peer with compiler sim_other and the same GPU '$gpu' got none of it"

# ---- 4. a second worker with the id of a live one
"$BIN/moetune-worker" --connect "$WEP" --backend sim --id "w1-$$" >"$T/dup.log" 2>"$T/dup.err" &
DUP=$!
PIDS+=($DUP)
for _ in $(seq 1 50); do kill -0 $DUP 2>/dev/null || break; sleep 0.1; done
! kill -0 $DUP 2>/dev/null || fail "a second worker with the id of a live one is still running"
set +e
wait $DUP
rc=$?
set -e
[ $rc = 1 ] || fail "the duplicate worker exited $rc"
grep -q "^moetune-worker: the coordinator refused this worker: worker id 'w1-$$' is in use by host .* pid " "$T/dup.err" \
  || { cat "$T/dup.err"; fail "the duplicate worker does not say why"; }
grep -q "hello refused: worker id 'w1-$$' is in use by host" "$T/coord.log" || fail "the coordinator does not log the refusal"
"$BIN/moetune" submit --control "$CEP" --name after --batch-sizes 1 --block-m 32 --block-n 128 --block-k 64 --group-m 1 \
  --num-warps 4 --num-stages 2 --shape E=8,N=768,K=256,topk=2 >/dev/null 2>&1 || fail "submit failed"
[ "$(wait_sweep 3 30)" = done ] || fail "the first w1 stopped measuring after the duplicate"
pass "duplicate id refused both sides: $(grep '^moetune-worker:' "$T/dup.err" | cut -c1-140)..."
