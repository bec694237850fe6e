#!/usr/bin/env bash
# Issue 9's reference on the whole default space, by sample: exhaustive (racing off), racing and
# halving on one fixed pseudo-random sample of N valid configs (`tune --sample N`, the same N
# configs for all three), each from a fresh database, in one lease (run.sh); each pick looked up
# in the exhaustive run's rows (compare.py); then, where racing's or halving's pick differs from
# exhaustive's, both picks re-measured side by side (remeasure.sh). The exhaustive wall time
# extrapolated to the whole space: wall x valid configs / N (an extrapolation, not a measurement).
#   bench/search/sample.sh OUT_DIR N [tune options: --model/--shape, --tp, --batch-sizes]
# Env: BACKEND (default cuda; sim for a dry run), MT_BIN_DIR (the binaries; default from PATH).
# Writes OUT_DIR/{exhaustive,racing,halving}.{db,err,time}, OUT_DIR/compare.txt,
# OUT_DIR/rm-{racing,halving}/score.txt and OUT_DIR/extrapolated.txt.
set -uo pipefail
out=${1:?usage: bench/search/sample.sh OUT_DIR N [tune options]}
n=${2:?the sample size N}
shift 2
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
[ $# -eq 0 ] && set -- --model qwen3-30b-a3b --tp 1
STRATEGIES="exhaustive racing halving" bash "$here/run.sh" "$out" "$@" --sample "$n" | tee "$out/compare.txt"
[ "${PIPESTATUS[0]}" = 0 ] || exit 1
python3 - "$out" "$n" <<'PY' | tee "$out/extrapolated.txt"
import re, sys
out, n = sys.argv[1], int(sys.argv[2])
err = open(f"{out}/exhaustive.err").read()
m = re.search(r"(\d+) configs valid \(a sample: (\d+) more valid configs left out", err)
valid = int(m.group(1)) + int(m.group(2)) if m else n  # a sample as large as the space leaves none out
wall = float(re.search(r"wall ([\d.]+) s", open(f"{out}/exhaustive.time").read()).group(1))
print(f"exhaustive without racing: {wall:.1f} s on {n} of {valid} valid configs; extrapolated to all "
      f"{valid}: {wall * valid / n:.0f} s ({wall * valid / n / 60:.1f} min), by the sample's mean per config")
PY
for s in racing halving; do
  echo "== $s against exhaustive, differing picks side by side"
  bash "$here/remeasure.sh" "$out/rm-$s" "$out/exhaustive.db" "$out/$s.db" "$@" || exit 1
done
