#!/usr/bin/env bash
# The triton backend end to end with a fake helper (tests/tools/fake_helper.py: no torch, no GPU):
# a real coordinator and `moetune-worker --backend triton`. Values, versions and the up/down
# latencies reach the store; a helper that dies part way through a config keeps what it measured
# and is replaced; one that hangs is cut at the sweep's --config-timeout-ms and leaves no process
# behind; one that says fatal, or an interpreter that does not exist, stops the worker with one line.
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
[ -x "$PY" ] || { echo "skip: $PY not found"; exit 77; }
: "${MT_SOURCE_DIR:?MT_SOURCE_DIR must point at the source tree}"
export MOETUNE_HELPER=$MT_SOURCE_DIR/tests/tools/fake_helper.py
export FAKE_HELPER_PIDS=$T/pids FAKE_HELPER_HANG=$T/hang
SPACE=(--block-m 16,64 --block-n 64 --block-k 128 --group-m 1 --num-warps 4 --num-stages 3,4)
SHAPE=(--shape E=128,N=768,K=2048,topk=8 --batch-sizes 1,16,256)
M="$BIN/moetune"

# run_worker NAME MODE [args...]: a triton worker in the background
run_worker() {
  local name=$1 mode=$2; shift 2
  FAKE_HELPER_MODE=$mode "$BIN/moetune-worker" --connect "$WEP" --backend triton --python "$PY" --id "$name-$$" \
    --heartbeat-ms 200 "$@" >>"$T/$name.log" 2>&1 &
  PIDS+=($!)
}

# submit NAME [args...]: a sweep of 4 configs x 3 batch sizes; prints nothing (racing off: the checks expect every row ok)
submit() {
  local name=$1; shift
  "$M" submit --control "$CEP" --name "$name" --chunk 2 --race-margin 0 "${SPACE[@]}" "${SHAPE[@]}" "$@" >"$T/submit.out" 2>&1 \
    || { cat "$T/submit.out"; fail "submit $name failed"; }
}

stop_workers() { for p in "${PIDS[@]}"; do kill_quiet "$p"; done; PIDS=(); }

# gone PID: waits up to 3 s for a process to be gone (a zombie waiting for init counts as gone)
gone() {
  for _ in $(seq 1 30); do
    kill -0 "$1" 2>/dev/null || return 0
    [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" = Z ] && return 0
    sleep 0.1
  done
  ps -o pid,ppid,pgid,stat,args -p "$1" >&2 || true
  return 1
}

start_coordinator --heartbeat-ms 200 --lease-ms 5000

# ---- (a) answers that round-trip
run_worker ok ok --kernel sglang
submit ok
state=$(wait_sweep 1 120)
[ "$state" = done ] || fail "sweep ok: $state"
rows=$(check_rows 1)
[ "$rows" = 12 ] || fail "sweep ok: $rows rows, expected 12"
# a GPU worker holds the next job too (its default --credits 2, so that job compiles ahead): the
# sweep's second job reached the worker before its first was done
got2=$(grep -n 'job 2: ' "$T/ok.log" | head -n 1 | cut -d: -f1)
done1=$(grep -n 'job 1 done' "$T/ok.log" | head -n 1 | cut -d: -f1)
[ -n "$got2" ] && [ -n "$done1" ] && [ "$got2" -lt "$done1" ] \
  || { cat "$T/ok.log" >&2; fail "the triton worker did not hold job 2 while job 1 ran (lines ${got2:-none}, ${done1:-none})"; }
bad=$(sql "SELECT count(*) FROM results r JOIN configs c ON c.id = r.config_id WHERE r.sweep_id = 1 AND NOT (
           r.status = 'ok' AND r.median_us = c.block_m + r.batch_size / 2.0 AND r.min_us = r.median_us - 0.5
           AND r.up_us = r.median_us / 2 AND r.down_us = r.median_us / 4 AND r.samples = 20
           AND r.backend = 'triton' AND r.compiler = 'triton_3_6_0' AND r.kernel_hash = '0123456789abcdef'
           AND r.versions = 'kernel=sglang triton=3.6.0 torch=2.11.0 python=3.12.3' AND r.detail = 'rel_err=1.00e-03')")
[ "$bad" = 0 ] || { sql "SELECT * FROM results WHERE sweep_id = 1" >&2; fail "$bad rows do not carry the helper's values"; }
[ "$(sql "SELECT versions FROM workers WHERE worker_id = 'ok-$$'")" = "kernel=sglang triton=3.6.0 torch=2.11.0 python=3.12.3" ] \
  || fail "workers.versions not stored"
[ "$(sql "SELECT name FROM devices d JOIN workers w ON w.device_id = d.id WHERE w.worker_id = 'ok-$$'")" = "Fake H200" ] \
  || fail "the helper's device was not stored"
json=$("$M" results --db "$DB" --sweep 1 --json --batch-size 16 --limit 1)
[ "$(jq -r .versions <<<"$json")" = "kernel=sglang triton=3.6.0 torch=2.11.0 python=3.12.3" ] || fail "results --json: versions: $json"
[ "$(jq -r '.up_us == .median_us / 2 and .down_us == .median_us / 4' <<<"$json")" = true ] || fail "results --json: up/down: $json"
[ "$(wc -l <"$T/pids")" = 1 ] || fail "sweep ok started $(wc -l <"$T/pids") helpers, expected 1"
pass "12 ok rows with the helper's latencies, up/down, versions; results --json shows them"
stop_workers

# ---- (b) a helper that dies after the first batch size of each BLOCK_SIZE_M=64 config
: >"$T/pids"
FAKE_HELPER_BM=64 run_worker die die
submit die
state=$(wait_sweep 2 120)
[ "$state" = done ] || fail "sweep die: $state"
check_rows 2 >/dev/null
q() { sql "SELECT count(*) FROM results r JOIN configs c ON c.id = r.config_id WHERE r.sweep_id = 2 AND $1"; }
[ "$(q "c.block_m = 64 AND r.batch_size = 1 AND r.status = 'ok' AND r.up_us > 0")" = 2 ] || fail "the first batch size of a dying config was not kept"
[ "$(q "c.block_m = 64 AND r.batch_size > 1 AND r.status = 'crashed' AND r.detail = 'helper died: exit status 3: fake: dying on purpose'")" = 4 ] \
  || { sql "SELECT batch_size, status, detail FROM results WHERE sweep_id = 2" >&2; fail "the rest of a dying config is not crashed with the helper's reason"; }
[ "$(q "c.block_m = 16 AND r.status = 'ok'")" = 6 ] || fail "the other configs were not measured"
helpers=$(sort -u "$T/pids" | wc -l)
[ "$helpers" = 3 ] || fail "$helpers helpers started, expected 3 (one, and a new one after each of 2 deaths)"
kill -0 "${PIDS[0]}" || fail "the worker died"
pass "dying helper: batch size 1 kept ok, 4 rows crashed with 'helper died: exit status 3: ...', $helpers helpers"
stop_workers

# ---- (c) a helper that hangs: cut at --config-timeout-ms, no process left behind
: >"$T/pids"
FAKE_HELPER_BM=64 run_worker hang hang
submit hang --config-timeout-ms 1500
state=$(wait_sweep 3 120)
[ "$state" = done ] || fail "sweep hang: $state"
check_rows 3 >/dev/null
[ "$(sql "SELECT count(*) FROM results r JOIN configs c ON c.id = r.config_id WHERE r.sweep_id = 3 AND c.block_m = 64
          AND r.status = 'timeout' AND r.detail = 'timed out after 1500 ms'")" = 6 ] \
  || { sql "SELECT config_id, batch_size, status, detail FROM results WHERE sweep_id = 3" >&2; fail "hanging configs are not timeout at 1500 ms"; }
for p in $(cat "$T/pids"); do
  # every helper but the one now serving is gone
  [ "$p" = "$(tail -n 1 "$T/pids")" ] && continue
  gone "$p" || fail "helper $p outlived its child"
done
hung=$(cat "$T/hang")
gone "$hung" || fail "the hung helper $hung is still there"
pass "hanging helper: 6 rows timeout at 1500 ms, the hung helpers are gone"
stop_workers
for p in $(cat "$T/pids"); do gone "$p" || fail "helper $p outlived its worker"; done
pass "no helper outlives a SIGKILLed worker"

# ---- (f) fatal at start, (g) no such interpreter: exit 1, one line
expect_one_line() {
  local name=$1 want=$2; shift 2
  set +e
  "$@" >"$T/out.txt" 2>"$T/err.txt" </dev/null
  local rc=$?
  set -e
  [ $rc = 1 ] || { cat "$T/err.txt"; fail "$name: exit $rc, expected 1"; }
  [ "$(grep -c . "$T/err.txt")" = 1 ] || { cat "$T/err.txt"; fail "$name: not one line on stderr"; }
  [ "$(cat "$T/err.txt")" = "$want" ] || fail "$name: '$(cat "$T/err.txt")', expected '$want'"
  pass "$name -> 1: $want"
}
# ---- fp8 with block scales on captured routing: the worker hands the helper the shape's dtype,
# block shape and the routing file with its sha256
python3 -c 'import struct,sys; h="{'"'"'descr'"'"': '"'"'<i4'"'"', '"'"'fortran_order'"'"': False, '"'"'shape'"'"': (4, 8), }"; h+=" "*(64-(10+len(h)+1)%64)+"\n"; open(sys.argv[1],"wb").write(b"\x93NUMPY\x01\x00"+struct.pack("<H",len(h))+h.encode()+struct.pack("<32i",*range(32)))' "$T/r.npy"
FAKE_HELPER_REQS=$T/reqs run_worker fp8 ok --kernel moetune
"$M" submit --control "$CEP" --name fp8 --chunk 2 --decide-margin 0 "${SPACE[@]}" --shape E=64,N=256,K=512,topk=8,dtype=fp8_w8a8,block_shape=128x128 \
  --batch-sizes 1,16 --routing "$T/r.npy" >"$T/submit.out" 2>&1 || { cat "$T/submit.out"; fail "submit fp8 failed"; }
sid=$(sql "SELECT id FROM sweeps WHERE name = 'fp8'")
[ "$(wait_sweep "$sid" 60)" = done ] || fail "sweep fp8 not done"
sha=$(sha256sum "$T/r.npy" | cut -d' ' -f1)
[ "$(jq -s --arg p "$(realpath "$T/r.npy")" --arg h "$sha" 'map(.routing == {"path": $p, "sha256": $h} and
      .shape.dtype == "fp8_w8a8" and .shape.block_n == 128 and .shape.block_k == 128) | all and length == 4' "$T/reqs")" = true ] \
  || { cat "$T/reqs"; fail "the helper was not given the fp8 shape and the routing"; }
stop_workers
pass "fp8 block-scale shape and captured routing reach the helper (4 requests, sha256 ${sha:0:12})"

FAKE_HELPER_MODE=fatal expect_one_line "fatal helper" \
  "moetune-worker: triton backend: $PY ($PY): torch is not importable: No module named 'torch'" \
  "$BIN/moetune-worker" --connect "$WEP" --backend triton --python "$PY"
expect_one_line "no such python" \
  "moetune-worker: triton backend: cannot run python '/nonexistent/python3': No such file or directory" \
  "$BIN/moetune-worker" --connect "$WEP" --backend triton --python /nonexistent/python3
