#!/usr/bin/env python3
"""Which of racing's judges pruned a sweep's rows, and what each cost the GPU.

  python3 bench/search/judges.py A.db [B.db ...]

Per database: the rows by how they ended (the check's layer, the first replay, the fastest of 2,
halving's rank cut, measured in full) with their count and their GPU time in timed kernels
(results.timed_us). Then the far losers that a replay pruned at a config's later batch size in
its job, by how far behind they were: the check's layer judges those (WRK_CHECK_FAR, 2.5 margins)
and prunes them for one layer instead of a capture and a graph of ten; a far loser here is a check
the worker left unjudged (its launches outlasted the stream's hold) or one whose check layer read
faster than its graph. A config's first batch size in a job is never judged on its check layer
(its first launch may load the module), so those rows are counted apart.
"""
import collections
import re
import sqlite3
import sys


def judge(detail, samples):
    d = detail or ""
    if "check's layer" in d:
        return "check layer"
    if "fastest of" in d:
        return "first replay" if samples == 1 else "fastest of %d" % samples
    if d.startswith("halving: rank"):
        return "halving cut"
    return "measured in full"


def report(path):
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    first = {(c, j): bs for c, j, bs in db.execute(
        "SELECT config_id, job_id, min(batch_size) FROM results WHERE phase = 1 GROUP BY config_id, job_id")}
    n, t = collections.Counter(), collections.Counter()
    far = collections.Counter()
    far_t = collections.Counter()
    for detail, samples, timed, cfg, job, bs in db.execute(
            "SELECT detail, samples, timed_us, config_id, job_id, batch_size FROM results"):
        j = judge(detail, samples)
        n[j] += 1
        t[j] += (timed or 0) / 1e6
        if j == "first replay":
            x = float(re.search(r"samples ([\d.]+)x", detail).group(1))
            where = "first batch size" if first.get((cfg, job)) == bs else "later batch size"
            band = ">= 3x" if x >= 3 else "2x-3x" if x >= 2 else "< 2x"
            far[(where, band)] += 1
            far_t[(where, band)] += (timed or 0) / 1e6
    total = sum(t.values())
    print(f"{path}: {sum(n.values())} rows, {total:.1f} s in timed kernels")
    for j in ("check layer", "first replay", "fastest of 2", "halving cut", "measured in full"):
        if n[j]:
            share = f" ({100 * t[j] / total:4.1f} %)" if total > 0 else ""
            print(f"  {j:18s} {n[j]:6d} rows {t[j]:7.1f} s{share}")
    print("  pruned by the first replay, by how far behind the best:")
    for where in ("first batch size", "later batch size"):
        print("    at a config's %-17s" % where + "  ".join(
            f"{band}: {far[(where, band)]} rows {far_t[(where, band)]:.1f} s" for band in ("< 2x", "2x-3x", ">= 3x")))


def main():
    if len(sys.argv) < 2:
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        return 2
    rc = 0
    for p in sys.argv[1:]:
        try:
            report(p)
        except sqlite3.Error as e:
            print(f"judges.py: {p}: {e}", file=sys.stderr)
            rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
