#!/usr/bin/env bash
# Sim at scale on the GPU machine's 16-core host (no GPU used), repository root, the bundle in
# dist/ and the binaries of main's 8faac5d in dist/before/ (same libraries): the 8-shape sweep of
# bench/RESULTS.md "Search at scale", before and after alternating, 3 pairs; then the 40-shape
# sweep of bench/search/scale_models.sh, after, then before; then the 8-shape sweep once more
# with the workers' logs (scale_span.py's breakdown per worker and the lag of each shape's phase 2).
set -u
W=/tmp/wA; rm -rf "$W"; mkdir -p "$W"
export PATH=$PWD/dist/bin:$PATH LD_LIBRARY_PATH=$PWD/dist/lib
{ date; nproc; grep -m1 "model name" /proc/cpuinfo; } >"$W/host.txt"
shapes=(--shape E=128,N=768,K=2048,topk=8 --shape E=8,N=7168,K=4096,topk=2 --shape E=256,N=256,K=7168,topk=8
        --shape E=128,N=1536,K=4096,topk=8 --shape E=64,N=1408,K=2048,topk=6 --shape E=8,N=14336,K=4096,topk=2
        --shape E=160,N=1536,K=5120,topk=6 --shape E=384,N=256,K=7168,topk=8)
run() { # name, bin dir, script args...
  local name=$1 bin=$2; shift 2
  { echo "== $name, load $(cut -d' ' -f1-3 /proc/loadavg)"
    KEEP_LOGS=1 timeout 150 bash "$@" 2>&1 | grep -v Killed
    d=$(ls -dt /tmp/moetune-scale.* | head -1); python3 bench/search/scale_span.py "$d" 2>&1; rm -rf "$d"
  } >>"$W/scale-16core.txt"
}
for r in 1 2 3; do
  COORD_LOG_LEVEL=debug run "8 shapes, before, pair $r" dist/before bench/search/scale.sh dist/before 256 "${shapes[@]}"
  COORD_LOG_LEVEL=debug run "8 shapes, after, pair $r" dist/bin bench/search/scale.sh dist/bin 256 "${shapes[@]}"
done
run "33 shapes, after" dist/bin bench/search/scale_models.sh dist/bin 256
run "33 shapes, before" dist/before bench/search/scale_models.sh dist/before 256
WORKER_LOGS=1 COORD_LOG_LEVEL=debug run "8 shapes, after, with the workers' logs" dist/bin bench/search/scale.sh dist/bin 256 "${shapes[@]}"
cp "$W"/* "$OUT"/
