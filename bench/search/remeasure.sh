#!/usr/bin/env bash
# Two finished sweeps of the same shape (two strategies, two runs, two builds): where their picks
# differ, the two picks of each batch size are re-measured side by side (`tune --configs A,B
# --batch-sizes <the sizes where the picks are that pair>`: one job, racing off, 5 rounds; one such
# sweep per pair, so a pick is measured only where it is one), and stability.py scores them (a
# batch size agrees when both picked the same config or the re-measured picks are within 1 %).
#   bench/search/remeasure.sh OUT_DIR A.db B.db [tune shape options: --model/--shape, --tp, ...]
# Writes OUT_DIR/differ.txt, OUT_DIR/remeasure-N.db (one per pair of picks) and OUT_DIR/score.txt.
# Env: BACKEND (default cuda; sim for a dry run), MT_BIN_DIR (the binaries; default from PATH),
# PROCESSES (default 1): each pair re-measured by that many separate `tune --configs` processes
# (OUT_DIR/remeasure-N.P.db), scored by the median of a pick's medians. A config on the GPU can
# read in one of two levels for the whole life of a process, and which one differs from process
# to process (docs/performance.md, "levels per process"); one process reads one draw. ROUND_PROCESS (same or
# new; unset: tune's default, new on cuda): `tune --round-process`, each of the 5 rounds in a new child
# where new.
set -uo pipefail
out=${1:?usage: bench/search/remeasure.sh OUT_DIR A.db B.db [tune shape options]}
a=${2:?A.db}
b=${3:?B.db}
shift 3
procs=${PROCESSES:-1}
[[ $procs =~ ^[1-9][0-9]*$ ]] || { echo "PROCESSES=$procs: not a count of processes (1 or more)"; exit 1; }
source "$(dirname "$0")/lib.sh" "$@"
python3 "$here/stability.py" differ "$a" "$b" >"$out/differ.txt" || exit 1
cfgs=$(sed -n 1p "$out/differ.txt")
sizes=$(sed -n 2p "$out/differ.txt")
if [ -z "$cfgs" ]; then
  python3 "$here/stability.py" score "$a" "$b" | tee "$out/score.txt"
  exit 0
fi
# the shape options without a space or batch sizes: the list replaces them
shape=()
set -- "${args[@]}"
while [ $# -gt 0 ]; do
  case $1 in
    --model | --shape | --tp | --ep | --dtype | --model-config | --routing) shape+=("$1" "$2"); shift 2 ;;
    *) shift ;;
  esac
done
rm -f "$out"/remeasure-*.db*
echo "== remeasure: $(echo "$cfgs" | tr ',' '\n' | wc -l) configs at batch sizes $sizes, $(($(wc -l <"$out/differ.txt") - 2)) pairs"
t0=$(date +%s.%N)
dbs=()
n=0
rp=()
[ -n "${ROUND_PROCESS:-}" ] && rp=(--round-process "$ROUND_PROCESS")
while read -r bs pair; do
  n=$((n + 1))
  for p in $(seq "$procs"); do
    name=remeasure-$n; [ "$procs" = 1 ] || name=remeasure-$n.$p
    "$bin/moetune" tune --backend "$backend" "${extra[@]}" "${shape[@]}" "${rp[@]}" --configs "$pair" --batch-sizes "$bs" \
      --name "$name" --db "$out/$name.db" --out "$out/configs-$name" </dev/null >>"$out/remeasure.out" 2>>"$out/remeasure.err"
    rc=$?
    [ $rc = 0 ] || { tail -n 5 "$out/remeasure.err"; echo "remeasure of $pair at $bs exited $rc"; exit 1; }
    dbs+=("$out/$name.db")
  done
done < <(tail -n +3 "$out/differ.txt")
t1=$(date +%s.%N)
python3 -c "print('remeasure wall', round($t1 - $t0, 1), 's,', $n, 'pairs x', $procs, 'processes')"
python3 "$here/stability.py" score "$a" "$b" "${dbs[@]}" | tee "$out/score.txt"
