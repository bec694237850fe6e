#!/usr/bin/env bash
# The lease's second call: sim at scale on this 16-core host (256 sim workers, the 8-shape sweep
# of bench/RESULTS.md "Search at scale", twice; no GPU used), then exhaustive (racing off), racing
# and halving on one sample of 40 Mixtral-8x7B TP2 configs (bench/search/sample.sh), for halving
# against exhaustive.
set -u
W=/tmp/w; mkdir -p "$W"; t0=$(date +%s)
export PATH=$PWD/dist/bin:$PATH LD_LIBRARY_PATH=$PWD/dist/lib
{ date; nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader; nproc; } >"$W/host.txt"
shapes=(--shape E=128,N=768,K=2048,topk=8 --shape E=8,N=7168,K=4096,topk=2 --shape E=256,N=256,K=7168,topk=8
        --shape E=128,N=1536,K=4096,topk=8 --shape E=64,N=1408,K=2048,topk=6 --shape E=8,N=14336,K=4096,topk=2
        --shape E=160,N=1536,K=5120,topk=6 --shape E=384,N=256,K=7168,topk=8)
for r in 1 2; do
  { echo "== run $r, load $(cut -d' ' -f1-3 /proc/loadavg)"
    KEEP_LOGS=1 COORD_LOG_LEVEL=debug timeout 60 bash bench/search/scale.sh dist/bin 256 "${shapes[@]}" 2>&1
    d=$(ls -dt /tmp/moetune-scale.* | head -1); python3 bench/search/scale_span.py "$d" 2>&1; rm -rf "$d"
  } >>"$W/scale-16core.txt"
done
left=$((585 - ($(date +%s) - t0)))
timeout -k 10 "$left" bash bench/search/sample.sh "$W/sample" 40 --model mixtral-8x7b --tp 2 >"$W/sample.log" 2>&1
echo "rc $?" >>"$W/sample.log"
gzip -f "$W"/sample/*.db "$W"/sample/rm-*/*.db 2>/dev/null
tar czf "$OUT/r.tgz" -C "$W" .
