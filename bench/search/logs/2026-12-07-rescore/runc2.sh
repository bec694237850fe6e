#!/usr/bin/env bash
# Call 2 of run C (runc1.sh's output unpacked in c/): run C resumes until done, then
# bench/search/remeasure.sh scores it side by side against run A and against run B of the
# 2026-12-06 pair; all by T seconds (env, default 590). Output: $OUT/r.tgz.
t0=$(date +%s); T=${T:-590}; W=/tmp/w; d=bench/search/logs/2026-12-06-pair; h=bench/search/logs/2026-12-07-rescore; mkdir -p $W/c
export PATH=$PWD/dist/bin:$PATH LD_LIBRARY_PATH=$PWD/dist/lib
{ date; nvidia-smi --query-gpu=name,driver_version,power.limit,serial,uuid --format=csv,noheader; nproc; } >$W/host.txt
cp $h/c/racing.boxes $h/c/racing.out $h/c/racing.err $W/c/ 2>/dev/null; gunzip -c $h/c/racing.db.gz >$W/c/racing.db
box=$((T - ($(date +%s) - t0) - 200))
MOETUNE_CUDA_PROFILE=1 timeout -k 5 $((box + 20)) bash bench/search/fullspace.sh $W/c $box racing --model mixtral-8x7b --tp 2 >$W/c.log 2>&1; rc=$?; echo "rc $rc" >>$W/c.log
gunzip -c $d/r1/a/racing.db.gz >$W/a.db; gunzip -c $d/r2/b/racing.db.gz >$W/b.db
for p in a b; do
  left=$((T - ($(date +%s) - t0) - 10)); [ $rc -eq 0 ] && [ "$left" -gt 30 ] || break
  timeout -k 5 $((left / 2 + 5)) bash bench/search/remeasure.sh $W/rm-$p $W/$p.db $W/c/racing.db --model mixtral-8x7b --tp 2 >$W/rm-$p.log 2>&1
  echo "rc $? at $(($(date +%s) - t0)) s" >>$W/rm-$p.log
done
rm -f $W/a.db $W/b.db; gzip -f $W/c/racing.db $W/rm-*/*.db 2>/dev/null; tar czf $OUT/r.tgz -C $W .
