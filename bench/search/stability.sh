#!/usr/bin/env bash
# Stability of the default (racing) sweep, issue 9's benchmark: the same sweep twice, each from a
# fresh database; where the two runs picked different configs, remeasure.sh re-measures each batch
# size's two picks side by side (`tune --configs A,B --batch-sizes <where those two were picked>`:
# one sweep per pair, racing off, 5 rounds), and a batch size counts as stable when both runs picked
# the same config or the re-measured picks are within 1 % of each other (stability.py).
#   bench/search/stability.sh OUT_DIR [tune options: --model/--shape, --tp, space, --batch-sizes]
# Env: BACKEND (default cuda; sim for a dry run), MT_BIN_DIR (the binaries; default from PATH).
set -uo pipefail
out=${1:?usage: bench/search/stability.sh OUT_DIR [tune options]}
shift
source "$(dirname "$0")/lib.sh" "$@"

run() { # name, then extra tune options
  local name=$1
  shift
  rm -f "$out/$name.db"*
  echo "== $name: moetune tune --backend $backend $*"
  local t0 t1 rc
  t0=$(date +%s.%N)
  "$bin/moetune" tune --backend "$backend" "${extra[@]}" "$@" --name "stability-$name" \
    --db "$out/$name.db" --out "$out/configs-$name" >"$out/$name.out" 2>"$out/$name.err"
  rc=$?
  t1=$(date +%s.%N)
  python3 -c "print('$name wall', round($t1 - $t0, 1), 's, exit', $rc)" | tee "$out/$name.time"
  tr '\r' '\n' <"$out/$name.err" | grep -E 'sweep [0-9]+ ' | tail -n 1
  [ $rc = 0 ] || { tail -n 5 "$out/$name.err"; exit 1; }
}

run a "${args[@]}"
run b "${args[@]}"
# where the picks differ, re-measured side by side and scored (score.txt)
bash "$here/remeasure.sh" "$out" "$out/a.db" "$out/b.db" "${args[@]}"
