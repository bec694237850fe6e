#!/usr/bin/env bash
# Where the siblings' per-process modes come from (siblings.sh): the same side-by-side re-measure
# of the three GROUP_SIZE_M siblings at M=256 and at M=512, N (env, default 4) processes per
# variant, on a build with placement-knobs.diff applied (dist-exp/): base (as shipped), reload
# (each round loads the config's module afresh), realloc (each round re-allocates the weights,
# scratch and batch buffers behind a pad of random size), restart (`--round-process new`: each
# round in a new worker child, a new process and CUDA context; no knob needed). A variant whose rounds re-roll the mode shows a larger
# pooled deviation within a process and medians that agree across processes.
W=/tmp/wp; rm -rf $W; mkdir -p $W; export LD_LIBRARY_PATH=$PWD/dist-exp/lib
{ date; nvidia-smi --query-gpu=name,driver_version,power.limit,serial,uuid --format=csv,noheader; nproc; } >$W/host.txt
be=(--backend cuda); [ "${BACKEND:-}" = sim ] && be=(--backend sim --workers 1 --sim-time-scale 0)
for v in ${VARIANTS:-base reload realloc restart}; do
  for i in $(seq ${N:-4}); do
    for p in 256:32x256x64x16x4x2,32x256x64x32x4x2,32x256x64x64x4x2 512:128x256x128x16x8x2,128x256x128x32x8x2,128x256x128x64x8x2; do
      m=${p%%:*}; e=(); o=(); [ $v = reload ] || [ $v = realloc ] && e=(env MOETUNE_EXP_${v^^}=1)
      [ $v = restart ] && o=(--round-process new)
      "${e[@]}" dist-exp/bin/moetune tune "${be[@]}" "${o[@]}" --model mixtral-8x7b --tp 2 --configs "${p#*:}" --batch-sizes $m \
        --name $v-$m-$i --db $W/$v-$m-$i.db --out $W/cfg </dev/null >>$W/tune.out 2>>$W/tune.err
    done
  done
done
python3 - "$W" >$W/placement.txt <<'PY'
import glob, sqlite3, statistics, sys
W = sys.argv[1]
for v in ("base", "reload", "realloc", "restart"):
    for m in (256, 512):
        rows = {}
        for db in sorted(glob.glob(f"{W}/{v}-{m}-*.db")):
            for g, med, sd, mean, n in sqlite3.connect(db).execute(
                    "SELECT f.group_m, r.median_us, r.stddev_us, r.mean_us, r.samples FROM results r"
                    " JOIN configs f ON f.id = r.config_id WHERE r.status = 'ok'"):
                rows.setdefault(g, []).append((med, 100 * sd / mean))
        for g, vs in sorted(rows.items()):
            us = [a for a, _ in vs]
            print(f"{v:8s} M={m} GROUP_SIZE_M {g:2d}  us {' '.join(f'{a:7.1f}' for a in us)}  median {statistics.median(us):7.1f}"
                  f"  across {100 * (max(us) / min(us) - 1):4.1f} %  rsd within {' '.join(f'{b:.2f}' for _, b in vs)}")
PY
cat $W/placement.txt
rm -rf $W/cfg; gzip -f $W/*.db; tar czf ${OUT:-/tmp}/r.tgz -C $W .
