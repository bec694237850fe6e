#!/usr/bin/env bash
# bench/flood/run.sh COORD_BIN N FRAME_BYTES: coordinator RSS (kB) before, during and after N connections
# that each send all but 1 KiB of one FRAME_BYTES frame, and whether the control socket answers: RSS of the coordinator before, during and after N connections
set -u
BINC=$1; N=$2; FRAME=$3; D=$(mktemp -d /tmp/i8c-fl.XXXX)
P=$((20000 + RANDOM % 9000)); Q=$((P + 1))
$BINC --db $D/f.db --bind tcp://127.0.0.1:$P --control tcp://127.0.0.1:$Q >$D/c.log 2>&1 &
PID=$!; sleep 1
rss() { grep VmRSS /proc/$PID/status | awk '{print $2}'; }
echo "start rss_kb $(rss)"
python3 "$(dirname "$0")/../../tests/tools/mt_flood.py" 127.0.0.1 $P $N $FRAME 3 &
FP=$!; sleep 2.5; echo "during rss_kb $(rss)"; ${MT_BIN_DIR:-build}/moetune status --control tcp://127.0.0.1:$Q --timeout-ms 1000 >/dev/null && echo "control answers during" || echo "control silent during"; wait $FP; sleep 1
echo "after rss_kb $(rss)"
${MT_BIN_DIR:-build}/moetune status --control tcp://127.0.0.1:$Q --timeout-ms 2000 >/dev/null && echo "control answers"
kill $PID; rm -rf $D
