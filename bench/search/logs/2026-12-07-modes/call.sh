#!/usr/bin/env bash
# The two-mode rule of the decide step (coordinator/halving.h HALVING_DECIDE_MODES) on the GPU:
# racing sweeps of Mixtral-8x7B TP2 at batch sizes 128,256,512 (the BLOCK_SIZE_M=32 configs of
# two modes are at 256), alternating the build with the rule (dist/) and the one before it
# (dist-old/, 8afb60d), while T seconds (env, default 560) allow, then one side-by-side
# re-measure (`tune --configs`, 5 rounds) of every pick at 256 with the new build.
# Env BACKEND=sim: a dry run on the sim; BUILDS="new": the build with the rule only.
# Output: $OUT/r.tgz (each sweep's database, its picks as `moetune results --best --json`, logs).
t0=$(date +%s); T=${T:-560}; W=/tmp/wm; rm -rf $W; mkdir -p $W
{ date; nvidia-smi --query-gpu=name,driver_version,power.limit,serial,uuid --format=csv,noheader; nproc; } >$W/host.txt
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
    LD_LIBRARY_PATH=$x/lib $x/bin/moetune results --db $d/r.db --sweep 1 --best --json >$d/best.json 2>>$d/err
  done
done
picks=$(python3 - $W <<'PY'
import glob, json, sys
keys = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages")
s = set()
for f in glob.glob(sys.argv[1] + "/*/best.json"):
    for line in open(f):
        r = json.loads(line)
        if r["batch_size"] == 256:
            s.add("x".join(str(r["config"][k]) for k in keys))
print(",".join(sorted(s)))
PY
)
echo "picks at 256: $picks" >$W/rm.out
left=$((T - ($(date +%s) - t0) - 10))
[ -n "$picks" ] && LD_LIBRARY_PATH=dist/lib timeout -s INT -k 5 $left dist/bin/moetune tune "${be[@]}" --model mixtral-8x7b --tp 2 \
  --configs "$picks" --batch-sizes 256 --name rm --db $W/rm.db --out $W/rm-cfg </dev/null >>$W/rm.out 2>$W/rm.err
echo "rc $? at $(($(date +%s) - t0)) s" >>$W/rm.out
for f in $W/*/r.db $W/rm.db; do
  [ -f $f ] && python3 -c 'import sqlite3, sys; sqlite3.connect(sys.argv[1]).execute("PRAGMA wal_checkpoint(TRUNCATE)")' $f && rm -f $f-wal $f-shm $f.lock
done
gzip -f $W/*/r.db $W/rm.db 2>/dev/null; tar czf $OUT/r.tgz -C $W .
