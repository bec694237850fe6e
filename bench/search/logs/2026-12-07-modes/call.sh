#!/usr/bin/env bash
# The two-mode rule of the decide step (coordinator/halving.h HALVING_DECIDE_MODES) on the GPU:
# racing sweeps of Mixtral-8x7B TP2 at batch sizes 128,256,512 (the BLOCK_SIZE_M=32 configs of
# two modes are at 256), alternating the build with the rule (dist/) and the one before it
# (dist-old/, 8afb60d), while T seconds (env, default 560) allow, then one side-by-side
# re-measure (`tune --configs`, 5 rounds) of every pick at 128 and at 256 with the new build
# (the H200 read its two modes at 128, the H100 at 256), scored into score.txt.
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
: >$W/rm.out
for m in 128 256; do
  picks=$(python3 - $W $m <<'PY'
import glob, json, sys
keys = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages")
s = set()
for f in glob.glob(sys.argv[1] + "/[0-9]*-*/best.json"):
    for line in open(f):
        r = json.loads(line)
        if r["batch_size"] == int(sys.argv[2]):
            s.add("x".join(str(r["config"][k]) for k in keys))
print(",".join(sorted(s)))
PY
)
  echo "picks at $m: $picks" >>$W/rm.out
  left=$((T - ($(date +%s) - t0) - 10))
  [ -n "$picks" ] && [ $left -gt 10 ] && LD_LIBRARY_PATH=dist/lib timeout -s INT -k 5 $left dist/bin/moetune tune "${be[@]}" \
    --model mixtral-8x7b --tp 2 --configs "$picks" --batch-sizes $m --name rm-$m --db $W/rm-$m.db --out $W/rm-cfg-$m \
    </dev/null >>$W/rm.out 2>>$W/rm.err
  echo "rc $? at $(($(date +%s) - t0)) s" >>$W/rm.out
done
# each sweep's picks at 128 and 256 against the fastest of the picks there, re-measured side by side
python3 - $W >$W/score.txt <<'PY'
import glob, json, os, sqlite3, sys
keys = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages")
w = sys.argv[1]
q = ("SELECT c.block_m, c.block_n, c.block_k, c.group_m, c.num_warps, c.num_stages, r.median_us FROM results r"
     " JOIN configs c ON c.id = r.config_id WHERE r.status = 'ok'")
re = {}
for m in (128, 256):
    if os.path.exists(f"{w}/rm-{m}.db"):
        re[m] = {"x".join(map(str, row[:6])): row[6] for row in sqlite3.connect(f"{w}/rm-{m}.db").execute(q)}
sweeps = sorted(glob.glob(w + "/[0-9]*-*/"), key=lambda d: int(os.path.basename(d.rstrip("/")).split("-")[0]))
for m in (128, 256):
    fastest = min(re[m].values()) if re.get(m) else None
    for d in sweeps:
        done = "rc 0 " in open(d + "out").read()
        for line in open(d + "best.json"):
            r = json.loads(line)
            if r["batch_size"] != m:
                continue
            c = "x".join(str(r["config"][k]) for k in keys)
            ratio = f"{re[m][c] / fastest:.4f}" if fastest and c in re[m] else "-"
            print(f"M={m}", os.path.basename(d.rstrip("/")), "done" if done else "stopped", c,
                  f"{r['median_us']:.1f}", "side by side", ratio)
PY
cat $W/score.txt >>$W/rm.out
for f in $W/*/r.db $W/rm-*.db; do
  [ -f $f ] && python3 -c 'import sqlite3, sys; sqlite3.connect(sys.argv[1]).execute("PRAGMA wal_checkpoint(TRUNCATE)")' $f && rm -f $f-wal $f-shm $f.lock
done
gzip -f $W/*/r.db $W/rm-*.db 2>/dev/null; tar czf $OUT/r.tgz -C $W .
