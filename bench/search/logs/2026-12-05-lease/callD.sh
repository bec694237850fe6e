#!/usr/bin/env bash
# The lease's last call: Qwen3-30B-A3B TP1's whole-space halving with side-by-side finalists (on
# the H200 of 2026-12-03 it ran with finalists measured once), then, on an H200 and with the time
# left, Mixtral-8x7B TP2's whole-space halving with this worker (the H200's 293-299 s were the
# previous worker's).
# On 2026-12-05 the GPU was an H100 and Qwen3's box ended first (exit 3); the sweep was resumed on a
# fresh machine from the database this call brought back (D/qwen3/halving.db.gz), with
#   mkdir -p /tmp/wd && cp -r bench/search/logs/2026-12-05-lease/D/qwen3 /tmp/wd/ && gunzip /tmp/wd/qwen3/halving.db.gz
#   MOETUNE_CUDA_PROFILE=1 bash bench/search/fullspace.sh /tmp/wd/qwen3 200 halving --model qwen3-30b-a3b --tp 1
set -u
W=/tmp/wd; rm -rf "$W"; mkdir -p "$W"; t0=$(date +%s)
export PATH=$PWD/dist/bin:$PATH LD_LIBRARY_PATH=$PWD/dist/lib
{ date; nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader; nproc; } >"$W/host.txt"
MOETUNE_CUDA_PROFILE=1 bash bench/search/fullspace.sh "$W/qwen3" 240 halving --model qwen3-30b-a3b --tp 1 >/dev/null 2>&1
echo "rc $?" >>"$W/qwen3/halving.boxes"
left=$((580 - ($(date +%s) - t0)))
if grep -q H200 "$W/host.txt" && [ "$left" -gt 300 ]; then
  MOETUNE_CUDA_PROFILE=1 bash bench/search/fullspace.sh "$W/mixtral" "$left" halving --model mixtral-8x7b --tp 2 >/dev/null 2>&1
  echo "rc $?" >>"$W/mixtral/halving.boxes"
fi
rm -f "$W"/*/*.db-* "$W"/*/*.lock; gzip -f "$W"/*/*.db 2>/dev/null
tar czf "$OUT/r.tgz" -C "$W" .
