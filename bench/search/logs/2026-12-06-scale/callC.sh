#!/usr/bin/env bash
# The cluster's sweep with 256 workers, twice (callA's 33-shape runs had 360: scale_models.sh
# passed its last N as the worker count), on the 16-core host, the bundle of this commit in dist/.
set -u
W=/tmp/wC; rm -rf "$W"; mkdir -p "$W"
export PATH=$PWD/dist/bin:$PATH LD_LIBRARY_PATH=$PWD/dist/lib
{ date; nproc; grep -m1 "model name" /proc/cpuinfo; } >"$W/host-c.txt"
for r in 1 2; do
  { echo "== 33 shapes, 256 workers, run $r, load $(cut -d' ' -f1-3 /proc/loadavg)"
    KEEP_LOGS=1 timeout 120 bash bench/search/scale_models.sh dist/bin 256 2>&1 | grep -v Killed
    d=$(ls -dt /tmp/moetune-scale.* | head -1); python3 bench/search/scale_span.py "$d" 2>&1; rm -rf "$d"
  } >>"$W/scale-16core-256.txt"
done
cp "$W"/* "$OUT"/
