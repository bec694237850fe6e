#!/usr/bin/env bash
# Call 2 of the stability pair (call1.sh's output unpacked in r1/): on the same GPU model, run B
# resumes from r1/b/ until done, then bench/search/remeasure.sh re-measures, side by side, the two
# runs' picks where they differ and scores the pair; all by T seconds (env T, default 585:
# the device time left, less a margin).
t0=$(date +%s); T=${T:-585}; W=/tmp/w; d=bench/search/logs/2026-12-06-pair; mkdir -p $W/b
export PATH=$PWD/dist/bin:$PATH LD_LIBRARY_PATH=$PWD/dist/lib
{ date; nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader; nproc; } >$W/host.txt
g=$(cut -d, -f1 $W/host.txt | sed -n 2p)
grep -q "$g" $d/r1/host.txt || { echo "got $g, run B began on $(sed -n 2p $d/r1/host.txt)" >$W/rm.log; tar czf $OUT/r.tgz -C $W .; exit 0; }
case $g in
  *H100*) gunzip -c $d/r1/a/racing.db.gz >$W/a.db ;;
  *) gunzip -c bench/search/logs/2026-12-04-hold/mixtral-racing.db.gz >$W/a.db ;;
esac
cp $d/r1/b/racing.boxes $d/r1/b/racing.out $d/r1/b/racing.err $W/b/ 2>/dev/null; gunzip -c $d/r1/b/racing.db.gz >$W/b/racing.db
box=$((T - ($(date +%s) - t0) - 60))
MOETUNE_CUDA_PROFILE=1 timeout -k 5 $((box + 20)) bash bench/search/fullspace.sh $W/b $box racing --model mixtral-8x7b --tp 2 >$W/b.log 2>&1; echo "rc $?" >>$W/b.log
left=$((T - ($(date +%s) - t0) - 15))
timeout -k 5 "$left" bash bench/search/remeasure.sh $W/rm $W/a.db $W/b/racing.db --model mixtral-8x7b --tp 2 >$W/rm.log 2>&1
echo "rc $? at $(($(date +%s) - t0)) s" >>$W/rm.log
rm -f $W/a.db; gzip -f $W/b/racing.db $W/rm/*.db 2>/dev/null; tar czf $OUT/r.tgz -C $W .
