#!/usr/bin/env bash
# The lease's second call: Mixtral-8x7B TP2 on the fixed sample of 40 configs (seed 1) of
# bench/search/logs/2026-12-04-sample. On an H200 (that sample's exhaustive run was measured on
# an H200): halving alone, its picks against that exhaustive run, differing picks side by side.
# On another GPU: exhaustive (racing off) alone; racing and halving follow in the next call.
set -u
W=/tmp/wb; rm -rf "$W"; mkdir -p "$W/sample"
export PATH=$PWD/dist/bin:$PATH LD_LIBRARY_PATH=$PWD/dist/lib
{ date; nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader; nproc; } >"$W/host.txt"
m=(--model mixtral-8x7b --tp 2)
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  gunzip -c bench/search/logs/2026-12-04-sample/mixtral-exhaustive.db.gz >"$W/sample/exhaustive.db"
  STRATEGIES=halving timeout 400 bash bench/search/run.sh "$W/sample" "${m[@]}" --sample 40 \
    >"$W/sample.log" 2>&1; echo "rc $?" >>"$W/sample.log"
  timeout -k 5 150 bash bench/search/remeasure.sh "$W/sample/rm-halving" "$W/sample/exhaustive.db" \
    "$W/sample/halving.db" "${m[@]}" >"$W/remeasure.log" 2>&1; echo "rc $?" >>"$W/remeasure.log"
  rm -f "$W/sample/exhaustive.db"
else
  STRATEGIES=exhaustive timeout -k 5 575 bash bench/search/run.sh "$W/sample" "${m[@]}" --sample 40 \
    >"$W/sample.log" 2>&1; echo "rc $?" >>"$W/sample.log"
fi
rm -f "$W"/sample/*.db-* "$W"/sample/rm-*/*.db-*
gzip -f "$W"/sample/*.db "$W"/sample/rm-*/*.db 2>/dev/null
tar czf "$OUT/r.tgz" -C "$W" .
