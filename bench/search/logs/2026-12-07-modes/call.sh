#!/usr/bin/env bash
# The two-mode rule of the decide step (coordinator/halving.h HALVING_DECIDE_MODES) on the GPU:
# racing sweeps of Mixtral-8x7B TP2 at batch sizes 128,256,512 (the BLOCK_SIZE_M=32 configs of
# two modes are at 256), alternating the build with the rule (dist/) and the one before it
# (dist-old/, 8afb60d), while T seconds (env, default 560) allow, then one side-by-side
# re-measure (`tune --configs`, 5 rounds) of every pick at 128 and at 256 with the new build
# (the H200 read its two modes at 128, the H100 at 256), scored into score.txt.
# Env BACKEND=sim: a dry run on the sim; BUILDS="new": the build with the rule only.
# Output: $OUT/r.tgz (each sweep's database and logs, the re-measures, score.txt).
t0=$(date +%s); T=${T:-560}; W=/tmp/wm; rm -rf $W; mkdir -p $W
{ date; nvidia-smi --query-gpu=name,driver_version,power.limit,serial,uuid --format=csv,noheader; nproc; } >$W/host.txt
h=$(dirname "$0"); export MT_BIN_DIR=$PWD/dist/bin # score.py reads picks with it
be=(--backend cuda); [ "${BACKEND:-}" = sim ] && be=(--backend sim --workers 1 --sim-time-scale 0)
i=0
while :; do
  for b in ${BUILDS:-new old}; do
    left=$((T - ($(date +%s) - t0)))
    [ $left -gt ${MIN_LEFT:-140} ] || break 2
    i=$((i + 1)); d=$W/$i-$b; mkdir -p $d
    x=$PWD/dist; [ $b = old ] && x=$PWD/dist-old
    s=$(date +%s.%N)
    LD_LIBRARY_PATH=$x/lib timeout -s INT -k 10 $((left - 90)) $x/bin/moetune tune "${be[@]}" --model mixtral-8x7b --tp 2 \
      --batch-sizes 128,256,512 --name modes --db $d/r.db --out $d/cfg </dev/null >$d/out 2>$d/err
    echo "rc $? wall $(python3 -c "print(round($(date +%s.%N) - $s, 1))") s" >>$d/out
  done
done
: >$W/rm.out
for m in 128 256; do
  picks=$(LD_LIBRARY_PATH=$PWD/dist/lib python3 $h/score.py picks $W $m)
  echo "picks at $m: $picks" >>$W/rm.out
  left=$((T - ($(date +%s) - t0) - 10))
  [ -n "$picks" ] && [ $left -gt 10 ] && LD_LIBRARY_PATH=dist/lib timeout -s INT -k 5 $left dist/bin/moetune tune "${be[@]}" \
    --model mixtral-8x7b --tp 2 --configs "$picks" --batch-sizes $m --name rm-$m --db $W/rm-$m.db --out $W/rm-cfg-$m \
    </dev/null >>$W/rm.out 2>>$W/rm.err
  echo "rc $? at $(($(date +%s) - t0)) s" >>$W/rm.out
done
# each sweep's picks at 128 and 256 against the fastest of the picks there, re-measured side by side
LD_LIBRARY_PATH=$PWD/dist/lib python3 $h/score.py score $W >$W/score.txt
cat $W/score.txt >>$W/rm.out
for f in $W/*/r.db $W/rm-*.db; do
  [ -f $f ] && python3 -c 'import sqlite3, sys; sqlite3.connect(sys.argv[1]).execute("PRAGMA wal_checkpoint(TRUNCATE)")' $f && rm -f $f-wal $f-shm $f.lock
done
gzip -f $W/*/r.db $W/rm-*.db 2>/dev/null; tar czf $OUT/r.tgz -C $W .
