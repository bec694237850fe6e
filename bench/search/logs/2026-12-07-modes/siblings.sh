#!/usr/bin/env bash
# The re-measure's own spread on the GROUP_SIZE_M siblings that split the Mixtral-8x7B TP2 pairs
# (M=256: 32x256x64x{16,32,64}x4x2; M=512: 128x256x128x{16,32,64}x8x2): N (env, default 8)
# separate `tune --configs` processes, each re-measuring the three siblings side by side (5 rounds),
# then each process's medians and their spread across processes. Output: $OUT/r.tgz (the dbs, sib.txt).
W=/tmp/ws; rm -rf $W; mkdir -p $W; export LD_LIBRARY_PATH=$PWD/dist/lib
{ date; nvidia-smi --query-gpu=name,driver_version,power.limit,serial,uuid --format=csv,noheader; nproc; } >$W/host.txt
be=(--backend cuda); [ "${BACKEND:-}" = sim ] && be=(--backend sim --workers 1 --sim-time-scale 0)
for i in $(seq ${N:-8}); do
  for p in 256:32x256x64x16x4x2,32x256x64x32x4x2,32x256x64x64x4x2 512:128x256x128x16x8x2,128x256x128x32x8x2,128x256x128x64x8x2; do
    m=${p%%:*}; dist/bin/moetune tune "${be[@]}" --model mixtral-8x7b --tp 2 --configs "${p#*:}" --batch-sizes $m \
      --name sib-$m-$i --db $W/$m-$i.db --out $W/cfg </dev/null >>$W/tune.out 2>>$W/tune.err
  done
done
python3 - "$W" >$W/sib.txt <<'PY'
import glob, statistics, sys
sys.path.insert(0, "bench/search"); import stability
W = sys.argv[1]
for m in (256, 512):
    rows = {}
    for db in sorted(glob.glob(f"{W}/{m}-*.db"), key=lambda p: int(p.rsplit("-", 1)[1][:-3])):
        med = stability.medians(db)
        best = min(med.values())
        for ((sk, bs), c), v in sorted(med.items(), key=lambda kv: kv[0][1]):
            rows.setdefault(stability.cfg_text(c), []).append((v, v / best))
    for c, vs in rows.items():
        us = [v for v, _ in vs]; r = [x for _, x in vs]
        print(f"M={m} {c:22s} us {' '.join(f'{v:7.1f}' for v in us)}  median {statistics.median(us):7.1f}"
              f"  spread {100 * (max(us) / min(us) - 1):4.1f} %  fastest in {sum(x == 1.0 for x in r)}/{len(r)}")
PY
cat $W/sib.txt
for f in $W/*.db; do python3 -c 'import sqlite3,sys; sqlite3.connect(sys.argv[1]).execute("PRAGMA wal_checkpoint(TRUNCATE)")' $f && rm -f $f-wal $f-shm $f.lock; done
gzip -f $W/*.db; tar czf ${OUT:-/tmp}/r.tgz -C $W .
