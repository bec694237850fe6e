#!/usr/bin/env bash
# Call 1 of a Mixtral-8x7B TP2 racing stability pair (run as one command, 600 s). Run A is a racing
# sweep kept from an earlier lease of the same GPU model: on an H100, the one of
# ../2026-12-06-stab/h100-mixtral/ (97 % done; resumed here first); on an H200, the one of
# ../2026-12-04-hold/ (done). Run B, a fresh racing sweep of the same shape, runs in the time left;
# call2.sh resumes it and re-measures where the two runs' picks differ.
t0=$(date +%s); W=/tmp/w; mkdir -p $W/a $W/b
export PATH=$PWD/dist/bin:$PATH LD_LIBRARY_PATH=$PWD/dist/lib
{ date; nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader; nproc; } >$W/host.txt
if grep -q H100 $W/host.txt; then
  k=bench/search/logs/2026-12-06-stab/h100-mixtral
  gunzip -c $k/racing.db.gz >$W/a/racing.db; cp $k/racing.boxes $W/a/
  MOETUNE_CUDA_PROFILE=1 timeout -k 5 200 bash bench/search/fullspace.sh $W/a 180 racing --model mixtral-8x7b --tp 2 >$W/a.log 2>&1; echo "rc $?" >>$W/a.log
  gzip -f $W/a/racing.db
fi
box=$((600 - ($(date +%s) - t0) - 45))
MOETUNE_CUDA_PROFILE=1 timeout -k 5 $((box + 20)) bash bench/search/fullspace.sh $W/b $box racing --model mixtral-8x7b --tp 2 >$W/b.log 2>&1; echo "rc $?" >>$W/b.log
gzip -f $W/b/racing.db; tar czf $OUT/r.tgz -C $W .
