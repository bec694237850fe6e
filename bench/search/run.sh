#!/usr/bin/env bash
# Search strategies on one GPU (issue 9's benchmark), in one run so every figure shares one lease:
# the same shape, space and batch sizes tuned three times, each from a fresh database,
#   exhaustive  every config measured to the RSD rule, racing off (--race-margin 0): the reference;
#   racing      the default (exhaustive with racing, margin 0.2);
#   halving     --strategy halving;
#   decide      racing with its decide step (--decide-margin 0.02: near-ties re-measured side by side);
# then, per batch size, each strategy's pick looked up in the exhaustive run's own measurements
# (which hold every config of the space) and divided by the exhaustive best: 1.000 = the same pick
# or one as fast. Also each run's wall time and its GPU-busy fraction (tune's last progress line).
#   bench/search/run.sh OUT_DIR [tune options: --model/--shape, --tp, space, --batch-sizes]
# Env: BACKEND (default cuda; sim for a dry run), STRATEGIES (the order they run in; default
#      "exhaustive racing halving"; exhaustive must be one of them),
#      MT_BIN_DIR (the moetune binaries; default from PATH).
set -uo pipefail
out=${1:?usage: bench/search/run.sh OUT_DIR [tune options]}
shift
source "$(dirname "$0")/lib.sh" "$@"
for s in ${STRATEGIES:-exhaustive racing halving}; do
  case $s in
    exhaustive) opt=(--race-margin 0) ;;
    racing) opt=() ;;
    halving) opt=(--strategy halving) ;;
    decide) opt=(--decide-margin 0.02) ;;
    *) echo "unknown strategy $s" >&2; exit 2 ;;
  esac
  rm -f "$out/$s.db"*
  echo "== $s: moetune tune --backend $backend ${args[*]} ${opt[*]}"
  t0=$(date +%s.%N)
  "$bin/moetune" tune --backend "$backend" "${extra[@]}" "${args[@]}" "${opt[@]}" --name "bench-$s" \
    --db "$out/$s.db" --out "$out/configs-$s" >"$out/$s.out" 2>"$out/$s.err"
  rc=$?
  t1=$(date +%s.%N)
  python3 -c "print('$s wall', round($t1 - $t0, 1), 's, exit', $rc)" | tee "$out/$s.time"
  tr '\r' '\n' <"$out/$s.err" | grep -E 'sweep [0-9]+ ' | tail -n 1
done
# the exhaustive run is the reference, whichever order they ran in
others=$(for s in ${STRATEGIES:-exhaustive racing halving}; do [ "$s" = exhaustive ] || printf '%s ' "$s"; done)
python3 "$here/compare.py" "$out" exhaustive $others
