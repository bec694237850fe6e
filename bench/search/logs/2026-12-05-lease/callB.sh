#!/usr/bin/env bash
# The lease's second call: exhaustive (racing off) alone on Mixtral-8x7B TP2's fixed sample of 40
# configs (seed 1, the sample of bench/search/logs/2026-12-04-sample); racing and halving against it
# follow in callC.sh on the same kind of GPU. (The 2026-12-04 exhaustive run of this sample was an
# H200's; this lease had H100s only, so the reference was measured again.)
set -u
W=/tmp/wb; rm -rf "$W"; mkdir -p "$W/sample"
export PATH=$PWD/dist/bin:$PATH LD_LIBRARY_PATH=$PWD/dist/lib
{ date; nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader; nproc; } >"$W/host.txt"
STRATEGIES=exhaustive timeout -k 5 575 bash bench/search/run.sh "$W/sample" --model mixtral-8x7b --tp 2 \
  --sample 40 >"$W/sample.log" 2>&1; echo "rc $?" >>"$W/sample.log"
rm -f "$W"/sample/*.db-* "$W"/sample/*.lock
gzip -f "$W"/sample/*.db
tar czf "$OUT/r.tgz" -C "$W" .
