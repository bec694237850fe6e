#!/usr/bin/env bash
# No file input may hold a command up: a FIFO (or another non-regular file) given as --spec,
# --routing, --db, --curve-secret, --curve-server, a *.pub in --curve-allow or lookup's FILE is
# refused at once with one line, and the command exits non-zero. A FIFO that appears in the
# allow-list folder while the coordinator runs leaves the authenticator serving (an allowed
# worker still completes a sweep) and SIGTERM still stops the coordinator.
source "$(dirname "$0")/lib.sh"
M="$BIN/moetune"
F=$T/fifo
mkfifo "$F"

# refused WHAT CMD... : exits within 10 s, non-zero, one line on stderr naming the FIFO.
refused() {
  local what=$1; shift
  set +e
  timeout 10 "$@" >"$T/out.txt" 2>"$T/err.txt" </dev/null
  local rc=$?
  set -e
  [ $rc != 124 ] || fail "$what: still blocked after 10 s"
  [ $rc != 0 ] || fail "$what: exit 0"
  [ "$(grep -c . "$T/err.txt")" = 1 ] || { cat "$T/err.txt"; fail "$what: not one line on stderr"; }
  grep -q "not a regular file" "$T/err.txt" || { cat "$T/err.txt"; fail "$what: the reason is not given"; }
  pass "$what -> $rc: $(cat "$T/err.txt")"
}

K=$T/keys
for n in coordinator worker client; do "$M" keygen --out "$K" --name "$n" >/dev/null || fail "keygen $n"; done
A=$T/allow
mkdir -p "$A"
cp "$K/worker.pub" "$K/client.pub" "$A/"
S=(--backend sim --workers 1 --db "$T/t.db" --out "$T/out")
SH=(--shape E=8,N=256,K=512,topk=2)
CO=(--bind "tcp://127.0.0.1:$(free_port)" --control "tcp://127.0.0.1:$(free_port)")

refused "tune --spec FIFO" "$M" tune "${S[@]}" --spec "$F"
refused "tune --routing FIFO" "$M" tune "${S[@]}" "${SH[@]}" --routing "$F"
refused "tune --db FIFO" "$M" tune --backend sim --workers 1 --db "$F" --out "$T/out" "${SH[@]}"
refused "coordinator --db FIFO" "$BIN/moetune-coordinator" --db "$F" "${CO[@]}"
refused "coordinator --curve-secret FIFO" "$BIN/moetune-coordinator" --db "$T/c.db" "${CO[@]}" \
  --curve-secret "$F" --curve-allow "$A"
ln -s "$F" "$T/fifo.pub"
mkdir -p "$T/allow_fifo" && cp "$K/worker.pub" "$T/allow_fifo/" && mkfifo "$T/allow_fifo/evil.pub"
refused "coordinator --curve-allow with a FIFO *.pub" "$BIN/moetune-coordinator" --db "$T/c.db" "${CO[@]}" \
  --curve-secret "$K/coordinator.key" --curve-allow "$T/allow_fifo"
refused "worker --curve-server FIFO" "$BIN/moetune-worker" --connect "tcp://127.0.0.1:1" --backend sim \
  --curve-secret "$K/worker.key" --curve-server "$F"
refused "worker --curve-secret FIFO" "$BIN/moetune-worker" --connect "tcp://127.0.0.1:1" --backend sim \
  --curve-secret "$F" --curve-server "$K/coordinator.pub"
refused "status --curve-server FIFO" "$M" status --control "tcp://127.0.0.1:1" --timeout-ms 300 \
  --curve-secret "$K/client.key" --curve-server "$T/fifo.pub"
refused "status --curve-secret FIFO" "$M" status --control "tcp://127.0.0.1:1" --timeout-ms 300 \
  --curve-secret "$F" --curve-server "$K/coordinator.pub"
refused "results --db FIFO" "$M" results --db "$F"
refused "report --db FIFO" "$M" report --db "$F" --sweep 1 -o "$T/r.html"
refused "history --db FIFO" "$M" history --db "$F" --shape E=8,N=256
refused "diff --db FIFO" "$M" diff --db "$F" prev last
refused "export --db FIFO" "$M" export --db "$F" --out "$T/out"
refused "lookup FIFO" "$M" lookup "$F" 16
# an export folder whose manifest.json or config file is a FIFO
sqlite3 "$T/x.db" <"${MT_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}/db/schema.sql"
sqlite3 "$T/x.db" "INSERT INTO devices (id, name, uuid) VALUES (1, 'NVIDIA H200', 'SIM-1');
  INSERT INTO sweeps (id, name, spec, state, created) VALUES (1, 'a', x'', 'done', 1);
  INSERT INTO configs VALUES (1, 16, 64, 128, 1, 4, 3);
  INSERT INTO shapes (id, e, n, k, topk, dtype) VALUES (1, 8, 768, 2048, 2, 'bf16');
  INSERT INTO results (sweep_id, shape_id, config_id, batch_size, status, median_us, min_us, stddev_us, samples,
    device_id, backend, compiler, kernel_hash, created) VALUES (1, 1, 1, 1, 'ok', 10.0, 9.0, 0.1, 20, 1, 'sim', 'sim', 'kh', 1);"
mkdir -p "$T/xo/sim" "$T/xc/sim"
mkfifo "$T/xo/sim/manifest.json" "$T/xc/sim/E=8,N=768,device_name=NVIDIA_H200.json"
refused "export into a folder whose manifest.json is a FIFO" "$M" export --db "$T/x.db" --out "$T/xo"
refused "export over a config file that is a FIFO" "$M" export --db "$T/x.db" --out "$T/xc"
refused "lookup a directory" "$M" lookup "$T" 16
refused "results --db a directory" "$M" results --db "$T"

# A FIFO that appears in the allow-list folder while the coordinator runs.
CLIENT_ARGS=(--curve-secret "$K/client.key" --curve-server "$K/coordinator.pub")
start_coordinator --heartbeat-ms 200 --curve-secret "$K/coordinator.key" --curve-allow "$A"
mkfifo "$A/late.pub"
touch "$A"
"$BIN/moetune-worker" --connect "$WEP" --backend sim --id w-$$ --heartbeat-ms 200 \
  --curve-secret "$K/worker.key" --curve-server "$K/coordinator.pub" >>"$T/worker.log" 2>&1 &
PIDS+=($!)
timeout 20 "$M" submit --control "$CEP" "${CLIENT_ARGS[@]}" --name fifo "${SH[@]}" --block-m 16,32 \
  --block-n 64 --block-k 64 --group-m 1 --num-warps 4 --num-stages 2 --batch-sizes 1,16 >"$T/submit.out" 2>&1 \
  || { cat "$T/submit.out"; fail "submit with a FIFO in the allow-list folder failed"; }
state=$(wait_sweep 1 60)
[ "$state" = done ] || fail "sweep with a FIFO in the allow-list folder: $state"
wait_log "$T/coord.log" "allow-list not reloaded .*late.pub: not a regular file" 5 || fail "the refused reload is not logged"
kill -TERM "$COORD_PID"
for _ in $(seq 1 100); do kill -0 "$COORD_PID" 2>/dev/null || break; sleep 0.1; done
kill -0 "$COORD_PID" 2>/dev/null && fail "coordinator ignored SIGTERM with a FIFO in its allow-list folder"
wait "$COORD_PID" 2>/dev/null || true
COORD_PID=
pass "a FIFO added to the allow-list folder: reload refused and logged, sweep done, SIGTERM honoured"
