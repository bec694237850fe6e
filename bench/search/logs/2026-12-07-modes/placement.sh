#!/usr/bin/env bash
# Where the siblings' per-process levels come from: siblings.sh's re-measure, N (env, default 4)
# processes per variant, on a build with placement-knobs.diff applied (dist-exp/): base (one
# child), reload (each round loads the config's module afresh), realloc (each round re-allocates
# the weights, scratch and batch buffers behind a pad of random size), restart (`--round-process
# new`: each round in a new worker child, a new process and CUDA context; no knob needed). A variant
# whose rounds re-roll the level shows a larger deviation within a process and medians that agree
# across processes. Env BIN (default dist-exp), VARIANTS, N, SETS (siblings.sh). Output: $OUT/r.tgz (placement.txt, and siblings.sh's r.tgz of each variant).
h=$(dirname "$0"); W=/tmp/wp; rm -rf $W; mkdir -p $W/out
for v in ${VARIANTS:-base reload realloc restart}; do
  e=; o="--round-process same" # one child, as the cuda backend measured before new became its default
  case $v in reload | realloc) e=MOETUNE_EXP_${v^^}=1 ;; restart) o="--round-process new" ;; esac
  out=$W/out/$v; mkdir -p $out
  BIN=${BIN:-dist-exp} TUNE_ENV=$e TUNE_OPTS=$o OUT=$out W=$W/$v N=${N:-4} bash $h/siblings.sh | sed "s/^/$v /"
done | tee $W/out/placement.txt
tar czf ${OUT:-/tmp}/r.tgz -C $W/out .
