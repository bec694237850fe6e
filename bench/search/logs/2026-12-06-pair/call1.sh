#!/usr/bin/env bash
# Call 1 of a Mixtral-8x7B TP2 racing stability pair (run as one command; env T, default
# 600: the seconds it may take). Run A is a racing
# sweep kept from an earlier lease of the same GPU model: on an H100, the one of
# ../2026-12-06-stab/h100-mixtral/ (97 % done; resumed here first); on an H200, the one of
# ../2026-12-04-hold/ (done). Run B, a fresh racing sweep of the same shape, runs in the time left;
# when it ends in time, bench/search/remeasure.sh re-measures, side by side, the two runs' picks
# where they differ; else call2.sh resumes it and re-measures.
t0=$(date +%s); T=${T:-600}; W=/tmp/w; mkdir -p $W/a $W/b
export PATH=$PWD/dist/bin:$PATH LD_LIBRARY_PATH=$PWD/dist/lib
{ date; nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader; nproc; } >$W/host.txt
if grep -q H100 $W/host.txt; then
  k=bench/search/logs/2026-12-06-stab/h100-mixtral
  gunzip -c $k/racing.db.gz >$W/a/racing.db; cp $k/racing.boxes $W/a/
  MOETUNE_CUDA_PROFILE=1 timeout -k 5 200 bash bench/search/fullspace.sh $W/a 180 racing --model mixtral-8x7b --tp 2 >$W/a.log 2>&1; echo "rc $?" >>$W/a.log
  a=$W/a/racing.db
else
  a=$W/a.db; gunzip -c bench/search/logs/2026-12-04-hold/mixtral-racing.db.gz >$a
fi
box=$((T - ($(date +%s) - t0) - 45))
MOETUNE_CUDA_PROFILE=1 timeout -k 5 $((box + 20)) bash bench/search/fullspace.sh $W/b $box racing --model mixtral-8x7b --tp 2 >$W/b.log 2>&1; rc=$?; echo "rc $rc" >>$W/b.log
left=$((T - 15 - ($(date +%s) - t0)))
[ $rc -eq 0 ] && [ $left -gt 30 ] && { timeout -k 5 $left bash bench/search/remeasure.sh $W/rm $a $W/b/racing.db --model mixtral-8x7b --tp 2 >$W/rm.log 2>&1; echo "rc $? at $(($(date +%s) - t0)) s" >>$W/rm.log; }
rm -f $W/a.db; gzip -f $W/a/racing.db $W/b/racing.db $W/rm/*.db 2>/dev/null; tar czf $OUT/r.tgz -C $W .
