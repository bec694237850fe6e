#!/usr/bin/env bash
# The stability benchmark's second run on an H200 (repository root, the bundle in dist/): Mixtral-8x7B
# TP2's whole-space racing sweep once more, its picks against the racing sweep of 2026-12-04 on an
# H200 (bench/search/logs/2026-12-04-hold), re-measured side by side where they differ
# (bench/search/remeasure.sh). Run only on an H200 (the reference's GPU); exits 4 elsewhere.
set -u
W=/tmp/wB; rm -rf "$W"; mkdir -p "$W"; t0=$(date +%s)
export PATH=$PWD/dist/bin:$PATH LD_LIBRARY_PATH=$PWD/dist/lib
{ date; nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader; nproc; } >"$W/host.txt"
grep -q H200 "$W/host.txt" || { cat "$W/host.txt"; echo "not an H200"; exit 4; }
gunzip -c bench/search/logs/2026-12-04-hold/mixtral-racing.db.gz >"$W/racing-a.db"
MOETUNE_CUDA_PROFILE=1 bash bench/search/fullspace.sh "$W/full" 520 racing --model mixtral-8x7b --tp 2 >/dev/null 2>&1
left=$((585 - ($(date +%s) - t0)))
timeout -k 5 "$left" bash bench/search/remeasure.sh "$W/rm" "$W/racing-a.db" "$W/full/racing.db" \
  --model mixtral-8x7b --tp 2 >"$W/rm.log" 2>&1
echo "rc $?" >>"$W/rm.log"
rm -f "$W/racing-a.db" "$W"/full/*.db-* "$W"/full/*.lock "$W"/rm/*.db-* "$W"/rm/*.lock
gzip -f "$W/full/racing.db" "$W"/rm/*.db 2>/dev/null
tar czf "$OUT/r.tgz" -C "$W" .
