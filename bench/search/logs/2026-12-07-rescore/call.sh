#!/usr/bin/env bash
# The 2026-12-06 Mixtral-8x7B TP2 pair (run A: ../2026-12-06-pair/r1/a, run B: ../2026-12-06-pair/r2/b)
# re-scored with the picks of the build at hand: bench/search/remeasure.sh re-measures, side by
# side on one GPU, the two runs' picks where they differ, REPEAT times (env, default 3), each into
# its own folder rmN/; all by T seconds (env T, default 300).
t0=$(date +%s); T=${T:-300}; R=${REPEAT:-3}; W=/tmp/w; d=bench/search/logs/2026-12-06-pair; mkdir -p $W
export PATH=$PWD/dist/bin:$PATH LD_LIBRARY_PATH=$PWD/dist/lib
{ date; nvidia-smi --query-gpu=name,driver_version,power.limit,serial,uuid --format=csv,noheader; nproc; } >$W/host.txt
gunzip -c $d/r1/a/racing.db.gz >$W/a.db
gunzip -c $d/r2/b/racing.db.gz >$W/b.db
for r in $(seq 1 "$R"); do
  left=$((T - ($(date +%s) - t0) - 10))
  [ "$left" -gt 30 ] || break
  timeout -k 5 "$left" bash bench/search/remeasure.sh $W/rm$r $W/a.db $W/b.db --model mixtral-8x7b --tp 2 >$W/rm$r.log 2>&1
  echo "rc $? at $(($(date +%s) - t0)) s" >>$W/rm$r.log
done
rm -f $W/a.db $W/b.db; gzip -f $W/rm*/*.db 2>/dev/null; tar czf $OUT/r.tgz -C $W .
