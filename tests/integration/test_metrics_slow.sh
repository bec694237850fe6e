#!/usr/bin/env bash
# A scrape always answers: 100 slow HTTP clients on the metrics port (each sends a request line,
# then one header line a second and never finishes) do not keep /metrics from answering, every
# scrape during them succeeds, and libmicrohttpd's lines go through the coordinator's log (a
# timestamp and a level), never bare on stderr.
source "$(dirname "$0")/lib.sh"
command -v python3 >/dev/null || { echo "skip: no python3"; exit 77; }
command -v curl >/dev/null || { echo "skip: no curl"; exit 77; }

MPORT=$(free_port)
while [ "$MPORT" = "$WPORT" ] || [ "$MPORT" = "$CPORT" ]; do MPORT=$(free_port); done
M=http://127.0.0.1:$MPORT/metrics
start_coordinator --metrics 127.0.0.1:$MPORT
curl -sf --max-time 2 "$M" >/dev/null || fail "no scrape before the slow clients"

python3 - "$MPORT" 100 12 >"$T/slow.out" 2>&1 <<'EOF' &
import socket, sys, time
port, n, secs = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
socks = []
for i in range(n):
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=2)
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        socks.append(s)
    except OSError:
        pass
print("connected", len(socks), flush=True)
end = time.time() + secs
k = 0
while time.time() < end:
    time.sleep(1)
    k += 1
    alive = []
    for s in socks:
        try:
            s.sendall(b"X-Slow-%d: %d\r\n" % (k, k))
            alive.append(s)
        except OSError:
            pass
    socks = alive
print("still open", len(socks), flush=True)
EOF
SLOW=$!
PIDS+=($SLOW)
wait_log "$T/slow.out" connected 10 || fail "the slow clients did not connect"
ok=0
for i in $(seq 1 10); do
  sleep 0.8
  if curl -sf --max-time 2 "$M" >"$T/scrape$i.prom" && grep -q '^moetune_workers' "$T/scrape$i.prom"; then
    ok=$((ok + 1))
  fi
done
wait "$SLOW" || true
[ "$ok" = 10 ] || { cat "$T/slow.out"; fail "$ok of 10 scrapes answered while 100 slow clients were connected"; }
pass "10 of 10 scrapes answered during 100 slow clients ($(tr '\n' ' ' <"$T/slow.out"))"
grep -qE '^[0-9T:.-]+Z WARN +\[coord\] metrics http: a client closed' "$T/coord.log" \
  || { tail "$T/coord.log"; fail "closing slow clients is not logged through the logger"; }
! grep -vE '^[0-9]{4}-[0-9]{2}-[0-9]{2}T' "$T/coord.log" | grep -q . \
  || { grep -vE '^[0-9]{4}-' "$T/coord.log" | head; fail "a line of the coordinator's log has no timestamp"; }
pass "the metrics server's lines go through the logger: $(grep -m1 'metrics http' "$T/coord.log" | cut -c1-110)"
