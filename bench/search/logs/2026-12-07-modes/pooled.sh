#!/usr/bin/env bash
# No GPU: the stored single-process re-measures of one pair of runs scored together, a pick read as
# the median of its processes' medians (stability.py score, as remeasure.sh PROCESSES=K scores):
# C against D over the 4 re-measures of this folder, A against B over the 3 of 2026-12-07-rescore.
# Prints both tables; run from the repository root with MT_BIN_DIR set (moetune reads the picks).
set -euo pipefail
L=bench/search/logs; t=$(mktemp -d); trap 'rm -rf "$t"' EXIT
for r in a:2026-12-06-pair/r1/a b:2026-12-06-pair/r2/b c:2026-12-07-rescore/c d:2026-12-07-modes/d-call2/d; do
  gunzip -c "$L/${r#*:}/racing.db.gz" >"$t/${r%%:*}.db"
done
unpack() { # OUT_NAME DIR...: each DIR's remeasure-N.db.gz as OUT_NAME-K-N.db
  local o=$1 k=0; shift
  for d in "$@"; do k=$((k + 1)); for f in "$d"/remeasure-*.db.gz; do
    n=${f##*/remeasure-}; gunzip -c "$f" >"$t/$o-$k-${n%.gz}"; done; done
}
M=$L/2026-12-07-modes
unpack cd "$M/d-call2/rm-c" "$M/rm-d/rm-c2" "$M/rm-d/rm-c3" "$M/rm-d/rm-c4"
unpack ab "$L/2026-12-07-rescore/rescore/rm1" "$L/2026-12-07-rescore/rescore/rm2" "$L/2026-12-07-rescore/rescore/rm3"
echo "== C against D, 4 processes"; python3 bench/search/stability.py score "$t/c.db" "$t/d.db" "$t"/cd-*.db
echo "== A against B, 3 processes"; python3 bench/search/stability.py score "$t/a.db" "$t/b.db" "$t"/ab-*.db
