"""Racing on the check's layer (worker/backend.h, wrk_check_lost), read back from a sweep's database.

  python3 bench/search/check_layer.py DB [SWEEP]

Prints, for sweep SWEEP (default 1):
- rows by status: how many, how many were pruned on the check's layer alone, and the GPU seconds of
  their timed kernels (Result.timed_us);
- per batch size, for the verified (ok) rows whose check layer was timed (the cuda backend writes
  "; check X us" into their detail): the check layer's time over the row's median of the graph's
  layers, min / median / 99th percentile / max. The rule prunes at WRK_CHECK_FAR margins beyond
  the best (1.5x at the default margin 0.2), so a winner is safe while this ratio stays well
  under 1.5.
"""
import re
import sqlite3
import sys
from collections import defaultdict

CHECK = re.compile(r"; check ([0-9.eE+-]+) us")


def main(db, sweep=1):
    c = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    print("status   rows  on the check  timed GPU s")
    for status, n, on_check, timed in c.execute(
            "SELECT status, count(*), sum(detail LIKE '%check''s layer%'), coalesce(sum(timed_us), 0) / 1e6"
            " FROM results WHERE sweep_id = ? GROUP BY status ORDER BY status", (sweep,)):
        print(f"{status:8} {n:5} {on_check or 0:13} {timed:12.1f}")
    ratios = defaultdict(list)
    for bs, med, detail in c.execute(
            "SELECT batch_size, median_us, detail FROM results WHERE sweep_id = ? AND status = 'ok'", (sweep,)):
        m = CHECK.search(detail or "")
        if m and med and med > 0:
            ratios[bs].append(float(m.group(1)) / med)
    if not ratios:
        print("no verified row has a timed check layer")
        return
    def line(label, r):
        r = sorted(r)
        print(f"{label:>5} {len(r):5} {r[0]:6.3f} {r[len(r) // 2]:6.3f} {r[int(len(r) * 0.99)]:6.3f} {r[-1]:6.3f}")

    print("\ncheck layer / graph median, verified rows")
    print("    M  rows    min    p50    p99    max")
    for bs in sorted(ratios):
        line(bs, ratios[bs])
    line("all", [x for r in ratios.values() for x in r])


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) == 3 else 1)
