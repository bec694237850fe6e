#!/usr/bin/env bash
# The stability benchmark's second Mixtral run, as bench/search/logs/2026-12-05-ref/call3.sh, in a
# shorter box (for a call with less than 10 minutes of device time left): Mixtral-8x7B TP2's
# whole-space racing sweep once more (a box of 470 s), its picks against the H200 racing sweep of
# 2026-12-04 (bench/search/logs/2026-12-04-hold), re-measured side by side where they differ, all
# by 540 s. On any GPU but an H200 it only says which GPU it got (the baseline is an H200's).
set -u
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "$gpu" >"$OUT/gpu.txt"
case $gpu in *H200*) ;; *) exit 0 ;; esac
W=/tmp/w; mkdir -p "$W"; t0=$(date +%s)
export PATH=$PWD/dist/bin:$PATH LD_LIBRARY_PATH=$PWD/dist/lib
{ date; nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader; nproc; } >"$W/host.txt"
gunzip -c bench/search/logs/2026-12-04-hold/mixtral-racing.db.gz >"$W/racing-a.db"
MOETUNE_CUDA_PROFILE=1 bash bench/search/fullspace.sh "$W/full" 470 racing --model mixtral-8x7b --tp 2 >/dev/null 2>&1
echo "fullspace rc $? at $(($(date +%s) - t0)) s" >"$W/rm.log"
left=$((530 - ($(date +%s) - t0)))
[ "$left" -gt 5 ] && timeout -k 5 "$left" bash bench/search/remeasure.sh "$W/rm" "$W/racing-a.db" "$W/full/racing.db" \
  --model mixtral-8x7b --tp 2 >>"$W/rm.log" 2>&1
echo "rc $? at $(($(date +%s) - t0)) s" >>"$W/rm.log"
rm -f "$W/racing-a.db"; gzip -f "$W/full/racing.db" "$W"/rm/*.db 2>/dev/null
tar czf "$OUT/r.tgz" -C "$W" .
