#!/usr/bin/env bash
# Call 1 of a third Mixtral-8x7B TP2 racing run (C) on an H100, beside the 2026-12-06 pair (A, B):
# call.sh's re-measures first (REPEAT, default 3, within RT seconds, default 200), then run C
# starts with the time left of T (default 590); runc2.sh resumes it. Output: $OUT/r.tgz.
t0=$(date +%s); T=${T:-590}; W=/tmp/wc; mkdir -p $W/c
T=${RT:-200} OUT=$W bash bench/search/logs/2026-12-07-rescore/call.sh
mkdir -p $W/x && tar xzf $W/r.tgz -C $W/x && rm $W/r.tgz
export PATH=$PWD/dist/bin:$PATH LD_LIBRARY_PATH=$PWD/dist/lib
box=$((T - ($(date +%s) - t0) - 40))
MOETUNE_CUDA_PROFILE=1 timeout -k 5 $((box + 20)) bash bench/search/fullspace.sh $W/c $box racing --model mixtral-8x7b --tp 2 >$W/c.log 2>&1; echo "rc $?" >>$W/c.log
gzip -f $W/c/racing.db; tar czf $OUT/r.tgz -C $W x c c.log
