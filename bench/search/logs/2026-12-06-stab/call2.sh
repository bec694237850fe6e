#!/usr/bin/env bash
# Sim at scale on the GPU machine's 16-core host (no GPU used), repository root: the cluster
# sweep (bench/search/scale_models.sh, 33 shapes, 256 workers) with three builds in turn, twice:
# dist/before = main's 886a670 (schema 4, the results_best index), dist/index = 9ec85b9 (schema 5,
# no index), dist/bin = e9fdf86 (no index; the coordinator loop's scans gone: a shape's open jobs
# and a sweep's pending phase-2 jobs counted, racing bests hashed). Coordinator at debug (the
# commit backlog), each run's logs read by scale_span.py.
set -u
export PATH=$PWD/dist/bin:$PATH LD_LIBRARY_PATH=$PWD/dist/lib
{ date; nproc; grep -m1 "model name" /proc/cpuinfo; nvidia-smi --query-gpu=name --format=csv,noheader; } >"$OUT/host2.txt"
run() { # name, script args...
  local name=$1; shift
  { echo "== $name, load $(cut -d' ' -f1-3 /proc/loadavg)"
    KEEP_LOGS=1 COORD_LOG_LEVEL=debug timeout 120 bash "$@" 2>&1 | grep -v Killed
    d=$(ls -dt /tmp/moetune-scale.* | head -1); python3 bench/search/scale_span.py "$d" 2>&1; rm -rf "$d"
  } >>"$OUT/scale-16core.txt"
}
for r in 1 2; do
  for v in before index bin; do run "33 shapes, $v, round $r" bench/search/scale_models.sh dist/$v 256; done
done
