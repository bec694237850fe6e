#!/usr/bin/env bash
# The lease's first call (repository root on the GPU machine, the bundle in dist/): the GPU tests
# (the reference as tiled GEMMs, the check on the GPU, the wrong-result injection), then sim at
# scale on this 16-core host, twice (256 sim workers, the 8-shape sweep of bench/RESULTS.md
# "Search at scale"; no GPU used).
set -u
W=/tmp/w; rm -rf "$W"; mkdir -p "$W"
export PATH=$PWD/dist/bin:$PATH LD_LIBRARY_PATH=$PWD/dist/lib
{ date; nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader; nproc; } >"$W/host.txt"
MT_GPU_STRIDE=32 timeout 200 tests/gpu/run.sh "$W/gpu" >"$W/gputest.log" 2>&1; echo "rc $?" >>"$W/gputest.log"
rm -rf "$W/gpu"
shapes=(--shape E=128,N=768,K=2048,topk=8 --shape E=8,N=7168,K=4096,topk=2 --shape E=256,N=256,K=7168,topk=8
        --shape E=128,N=1536,K=4096,topk=8 --shape E=64,N=1408,K=2048,topk=6 --shape E=8,N=14336,K=4096,topk=2
        --shape E=160,N=1536,K=5120,topk=6 --shape E=384,N=256,K=7168,topk=8)
for r in 1 2; do
  { echo "== run $r, load $(cut -d' ' -f1-3 /proc/loadavg)"
    KEEP_LOGS=1 COORD_LOG_LEVEL=debug timeout 60 bash bench/search/scale.sh dist/bin 256 "${shapes[@]}" 2>&1
    d=$(ls -dt /tmp/moetune-scale.* | head -1); python3 bench/search/scale_span.py "$d" 2>&1; rm -rf "$d"
  } >>"$W/scale-16core.txt"
done
cp "$W"/* "$OUT"/   # the GPU test log is kept as tests/gpu/logs/gputest-ref-h100-2026-12-05.log
