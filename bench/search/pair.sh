#!/usr/bin/env bash
# A stability pair: two racing sweeps of Mixtral-8x7B TP2 on one GPU, E then F, each in time boxes
# (bench/search/fullspace.sh), then their picks re-measured side by side by PROCESSES (default 3)
# separate processes (bench/search/remeasure.sh). Run it again on the same warm machine until it
# prints "pair: done": the state stays in W (default /tmp/wp). One call uses at most T seconds
# (default 570). Needs the bundle in ./dist (deploy/bundle.sh build dist).
# Env: BACKEND=sim, MODEL_OPTS: a dry run on the sim, on a smaller space. REF=DB.gz: run E only and
# score it against that finished sweep (REF_H100=DB.gz: the same, only where the GPU is an H100).
# RULES="median second": also score the pair with picks by those rules (rm-median/, rm-second/;
# stability.py's rounds table of both runs in rounds.txt).
# Output (outside the tree): ${OUT:-/tmp/moetune-bench}/r.tgz: host.txt, each sweep's folder
# (database checkpointed and gzipped), rm/.
set -uo pipefail
t0=$(date +%s); T=${T:-570}; W=${W:-/tmp/wp}; mkdir -p "$W"
s=bench/search
export MT_BIN_DIR=$PWD/dist/bin LD_LIBRARY_PATH=$PWD/dist/lib
read -r -a model <<<"${MODEL_OPTS:---model mixtral-8x7b --tp 2}"
[ -f "$W/host.txt" ] || { date; nvidia-smi --query-gpu=name,driver_version,power.limit,serial,uuid --format=csv,noheader; nproc; } >"$W/host.txt" 2>&1
left() { echo $((T - ($(date +%s) - t0))); }
grep -q H100 "$W/host.txt" && [ -n "${REF_H100:-}" ] && REF=$REF_H100
runs="e f"
if [ -n "${REF:-}" ]; then
  runs=e
  [ -f "$W/f.done" ] || { mkdir -p "$W/f" && zcat "$REF" >"$W/f/racing.db" && echo "$REF" >"$W/f/ref.txt" && touch "$W/f.done"; }
fi
for r in $runs; do
  [ -f "$W/$r.done" ] && continue
  box=$(($(left) - 50)) # tune's INT grace (30 s) and judges.py after it
  [ $box -gt 60 ] || break
  bash $s/fullspace.sh "$W/$r" $box racing "${model[@]}"
  rc=$?
  [ $rc -eq 0 ] && touch "$W/$r.done" && continue
  [ $rc -eq 3 ] || echo "pair: run $r failed (exit $rc)"
  break
done
# the pair scored by moetune's picks in rm/; RULES="median second": again with each run's picks by
# the median of its rounds, or by its second-fastest round (stability.py PICK_RULE; rows list their
# rounds from the build after 4f4ff03), in rm-RULE/
done=1
for rule in fastest ${RULES:-}; do
  d=rm; [ $rule = fastest ] || d=rm-$rule
  if [ -f "$W/e.done" ] && [ -f "$W/f.done" ] && [ ! -f "$W/$d.done" ] && [ $(left) -gt 90 ]; then
    mkdir -p "$W/$d"
    [ $rule = fastest ] || [ -f "$W/rounds.txt" ] ||
      python3 $s/stability.py rounds "$W/e/racing.db" "$W/f/racing.db" >"$W/rounds.txt" 2>&1
    PICK_RULE=$rule PROCESSES=${PROCESSES:-3} timeout -s INT $(($(left) - 20)) bash $s/remeasure.sh "$W/$d" \
      "$W/e/racing.db" "$W/f/racing.db" "${model[@]}" >"$W/$d.log" 2>&1 && touch "$W/$d.done"
    tail -n 25 "$W/$d.log"
  fi
  [ -f "$W/$d.done" ] || { done=0; break; } # a rule after the plain score only
done
[ $done = 1 ] && echo "pair: done" || echo "pair: not done, run it again"
# what comes back: the databases checkpointed, then gzipped copies; the originals stay for the next call
p=/tmp/pack; rm -rf $p; mkdir -p $p
cp -r "$W"/. $p/
find $p -name '*.db' | while read -r f; do
  python3 -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute('PRAGMA wal_checkpoint(TRUNCATE)'); c.close()" "$f"
  rm -f "$f-wal" "$f-shm"; gzip -f "$f"
done
mkdir -p "${OUT:-/tmp/moetune-bench}"
tar czf "${OUT:-/tmp/moetune-bench}/r.tgz" -C $p .
