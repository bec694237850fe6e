#!/usr/bin/env bash
# One strategy on the whole default space of a shape (issue 9's full-space benchmark), in time
# boxes: `moetune tune` runs until the sweep is done or LIMIT seconds have passed, then gets
# SIGINT (Ctrl-C: what is committed stays); the same command run again resumes the sweep from
# OUT/STRATEGY.db. Each box's wall time and progress go to OUT/STRATEGY.boxes; the sweep's wall
# time is their sum (the resume's start-up included, as a user who resumes would see it).
#   bench/search/fullspace.sh OUT_DIR LIMIT_S STRATEGY [tune options: --model/--shape, --tp, ...]
# STRATEGY: racing (the default: racing and its decide step), halving, or exhaustive (racing off).
# Env: BACKEND (default cuda; sim for a dry run), MT_BIN_DIR (the binaries; default from PATH),
#      MOETUNE_CUDA_PROFILE=1: each box's worker profile goes to OUT/STRATEGY.profile too.
# After each box, OUT/STRATEGY.judges holds judges.py's split of the rows so far: which judge
# ended them and what each cost the GPU.
# Exit 0 when the sweep is done, 3 when the box ended first (run it again), else tune's code.
set -uo pipefail
out=${1:?usage: bench/search/fullspace.sh OUT_DIR LIMIT_S STRATEGY [tune options]}
limit=${2:?limit in seconds}
s=${3:?strategy}
shift 3
source "$(dirname "$0")/lib.sh" "$@"
case $s in
  racing) opt=() ;;
  halving) opt=(--strategy halving) ;;
  exhaustive) opt=(--race-margin 0) ;;
  *) echo "unknown strategy $s" >&2; exit 2 ;;
esac
keep=()
[ -n "${MOETUNE_CUDA_PROFILE:-}" ] && keep=(--keep-temp)
echo "== $s: moetune tune --backend $backend ${args[*]} ${opt[*]} (box of $limit s)" | tee -a "$out/$s.boxes"
t0=$(date +%s.%N)
timeout -s INT -k 30 "$limit" "$bin/moetune" tune --backend "$backend" "${extra[@]}" "${args[@]}" "${opt[@]}" "${keep[@]}" \
  --name "full-$s" --db "$out/$s.db" --out "$out/configs-$s" >>"$out/$s.out" 2>>"$out/$s.err"
rc=$?
t1=$(date +%s.%N)
last=$(tr '\r' '\n' <"$out/$s.err" | grep -E 'sweep [0-9]+ ' | tail -n 1)
python3 -c "print('box wall', round($t1 - $t0, 1), 's, exit', $rc)" | tee -a "$out/$s.boxes"
echo "$last" | tee -a "$out/$s.boxes"
[ ${#keep[@]} -gt 0 ] && worker_profile "$out/$s.err" | tee -a "$out/$s.profile"
python3 "$(dirname "$0")/judges.py" "$out/$s.db" >"$out/$s.judges" 2>&1
python3 - "$out/$s.boxes" <<'PY'
import re, sys
walls = [float(m) for m in re.findall(r'box wall ([\d.]+) s', open(sys.argv[1]).read())]
print(f"boxes {len(walls)}, wall so far {sum(walls):.1f} s ({sum(walls) / 60:.1f} min)")
PY
case "$last" in *" done:"* | *"already measured"*) exit 0 ;; esac
[ $rc -eq 124 ] || [ $rc -eq 130 ] || [ $rc -eq 0 ] && exit 3
exit $rc
