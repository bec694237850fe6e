#!/usr/bin/env bash
# One call, repository root, the bundle in dist/. On an H200: Mixtral-8x7B TP2 racing once more
# against the H200 racing sweep of 2026-12-04 (bench/search/logs/2026-12-05-ref/call3.sh, the
# stability benchmark's second run). On any other GPU (its timings cannot be compared with the
# H200's): sim at scale on the host's CPUs, three builds in turn (below): the cluster sweep twice
# each, the 8-shape sweep once each.
set -u
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "$gpu" >"$OUT/gpu.txt"
case $gpu in
  *H200*) exec bash bench/search/logs/2026-12-05-ref/call3.sh ;;
esac
export PATH=$PWD/dist/bin:$PATH LD_LIBRARY_PATH=$PWD/dist/lib
{ date; nproc; grep -m1 "model name" /proc/cpuinfo; } >"$OUT/host.txt"
shapes=(--shape E=128,N=768,K=2048,topk=8 --shape E=8,N=7168,K=4096,topk=2 --shape E=256,N=256,K=7168,topk=8
        --shape E=128,N=1536,K=4096,topk=8 --shape E=64,N=1408,K=2048,topk=6 --shape E=8,N=14336,K=4096,topk=2
        --shape E=160,N=1536,K=5120,topk=6 --shape E=384,N=256,K=7168,topk=8)
run() { # name, script args...
  local name=$1; shift
  { echo "== $name, load $(cut -d' ' -f1-3 /proc/loadavg)"
    KEEP_LOGS=1 COORD_LOG_LEVEL=debug timeout 150 bash "$@" 2>&1 | grep -v Killed
    d=$(ls -dt /tmp/moetune-scale.* | head -1); python3 bench/search/scale_span.py "$d" 2>&1; rm -rf "$d"
  } >>"$OUT/scale-16core.txt"
}
# dist/before: main's 886a670 (schema 4, the results_best index); dist/index: 9ec85b9 (schema 5,
# no index); dist/bin: e9fdf86 (no index; a shape's open jobs and pending phase-2 jobs counted, racing
# bests hashed: the coordinator loop's scans gone)
for r in 1 2; do
  for v in before index bin; do run "33 shapes, $v, round $r" bench/search/scale_models.sh dist/$v 256; done
done
for v in before index bin; do run "8 shapes, $v" bench/search/scale.sh dist/$v 256 "${shapes[@]}"; done
