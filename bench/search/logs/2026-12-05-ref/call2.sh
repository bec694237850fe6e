#!/usr/bin/env bash
# The lease's second call: exhaustive (racing off), racing and halving on one sample of 40
# Mixtral-8x7B TP2 configs (bench/search/sample.sh), for halving against exhaustive.
set -u
W=/tmp/w; mkdir -p "$W"
export PATH=$PWD/dist/bin:$PATH LD_LIBRARY_PATH=$PWD/dist/lib
{ date; nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader; nproc; } >"$W/host.txt"
timeout -k 10 575 bash bench/search/sample.sh "$W/sample" 40 --model mixtral-8x7b --tp 2 >"$W/sample.log" 2>&1
echo "rc $?" >>"$W/sample.log"
gzip -f "$W"/sample/*.db "$W"/sample/rm-*/*.db 2>/dev/null
tar czf "$OUT/r.tgz" -C "$W" .
