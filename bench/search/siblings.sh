#!/usr/bin/env bash
# The re-measure's own spread on GROUP_SIZE_M siblings of Mixtral-8x7B TP2
# (M=256: 32x256x64x{16,32,64}x4x2; M=512: 128x256x128x{16,32,64}x8x2): N (env, default 8)
# separate `tune --configs` processes, each re-measuring the three siblings side by side (5 rounds),
# then per config each process's median, their spread across processes, in how many it was the
# fastest, and each process's pooled deviation over its rounds (% of the mean).
# Env: BIN (the bundle, default dist), TUNE_ENV (variables for tune, e.g. MOETUNE_CUDA_PROFILE=1),
# TUNE_OPTS (more tune options; "--round-process same" for the one child of the runs before new
# became the cuda default), W (work folder, default /tmp/ws), BACKEND=sim (a dry run),
# SETS (what each process re-measures: "M:CONFIG,CONFIG,... M:..."; default the siblings above).
# Output (outside the tree): ${OUT:-/tmp/moetune-bench}/r.tgz (the dbs, sib.txt: also each batch size's mean wall time of a process).
W=${W:-/tmp/ws}; X=${BIN:-dist}; rm -rf $W; mkdir -p $W; export LD_LIBRARY_PATH=$PWD/$X/lib
{ date; nvidia-smi --query-gpu=name,driver_version,power.limit,serial,uuid --format=csv,noheader; nproc; } >$W/host.txt
be=(--backend cuda); [ "${BACKEND:-}" = sim ] && be=(--backend sim --workers 1 --sim-time-scale 0)
for i in $(seq ${N:-8}); do
  for p in ${SETS:-256:32x256x64x16x4x2,32x256x64x32x4x2,32x256x64x64x4x2 512:128x256x128x16x8x2,128x256x128x32x8x2,128x256x128x64x8x2}; do
    m=${p%%:*}; s=$(date +%s.%N)
    env ${TUNE_ENV:-} $X/bin/moetune tune "${be[@]}" ${TUNE_OPTS:-} --model mixtral-8x7b --tp 2 \
      --configs "${p#*:}" --batch-sizes $m --name sib-$m-$i --db $W/$m-$i.db --out $W/cfg </dev/null >>$W/tune.out 2>>$W/tune.err
    echo "$m $i $(python3 -c "print(round($(date +%s.%N) - $s, 2))")" >>$W/wall.txt
  done
done
python3 - "$W" >$W/sib.txt <<'PY'
import glob, sqlite3, statistics, sys
sys.path.insert(0, "bench/search"); import stability
W = sys.argv[1]
walls = {}
for line in open(f"{W}/wall.txt"):
    m, _, w = line.split()
    walls.setdefault(int(m), []).append(float(w))
for m in sorted(walls):
    print(f"M={m} wall of a process: mean {statistics.mean(walls[m]):.1f} s over {len(walls[m])}")
    rows = {}
    for db in sorted(glob.glob(f"{W}/{m}-*.db"), key=lambda p: int(p.rsplit("-", 1)[1][:-3])):
        got = [(stability.cfg_text(r[:6]), r[6], 100 * r[7] / r[8]) for r in sqlite3.connect(db).execute(
            "SELECT f.block_m, f.block_n, f.block_k, f.group_m, f.num_warps, f.num_stages, r.median_us, r.stddev_us,"
            " r.mean_us FROM results r JOIN configs f ON f.id = r.config_id WHERE r.status = 'ok'")]
        best = min(v for _, v, _ in got)
        for c, v, rsd in sorted(got):
            rows.setdefault(c, []).append((v, v == best, rsd))
    for c, vs in rows.items():
        us = [v for v, _, _ in vs]
        print(f"M={m} {c:22s} us {' '.join(f'{v:7.1f}' for v in us)}  median {statistics.median(us):7.1f}"
              f"  spread {100 * (max(us) / min(us) - 1):4.1f} %  fastest in {sum(f for _, f, _ in vs)}/{len(vs)}"
              f"  rsd within {' '.join(f'{r:.2f}' for _, _, r in vs)}")
PY
cat $W/sib.txt
for f in $W/*.db; do python3 -c 'import sqlite3,sys; sqlite3.connect(sys.argv[1]).execute("PRAGMA wal_checkpoint(TRUNCATE)")' $f && rm -f $f-wal $f-shm $f.lock; done
rm -rf $W/cfg; gzip -f $W/*.db; mkdir -p "${OUT:-/tmp/moetune-bench}"; tar czf "${OUT:-/tmp/moetune-bench}/r.tgz" -C $W .
