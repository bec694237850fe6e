#!/usr/bin/env python3
"""The sim's latency model against a measured sweep of the same shape and space, per batch size:
Spearman rank correlation of the medians (ok and pruned rows: racing's 2-sample medians rank a
config as well as its full ones), where the measured winner ranks in the sim's order, and where the
sim's winner ranks in the measured order.

  sim_vs_measured.py MEASURED.db SIM.db
MEASURED.db: a table r (bm, bn, bk, gm, nw, ns, bs, status, median_us) or a moetune database;
SIM.db: a moetune database of `moetune tune --backend sim` over the same shape and space."""
import sqlite3
import sys

Q_MOETUNE = ("SELECT c.block_m, c.block_n, c.block_k, c.group_m, c.num_warps, c.num_stages, r.batch_size, "
             "r.median_us FROM results r JOIN configs c ON c.id = r.config_id WHERE r.status IN ('ok', 'pruned')")
Q_TABLE = "SELECT bm, bn, bk, gm, nw, ns, bs, median_us FROM r WHERE status IN ('ok', 'pruned')"


def load(path):
    db = sqlite3.connect(path)
    tables = {t for (t,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    out = {}
    for row in db.execute(Q_TABLE if "r" in tables and "results" not in tables else Q_MOETUNE):
        out.setdefault(row[6], {})[tuple(row[:6])] = row[7]
    return out


def ranks(vals):
    order = sorted(range(len(vals)), key=lambda i: vals[i])
    r = [0.0] * len(vals)
    for pos, i in enumerate(order):
        r[i] = float(pos)
    return r


def spearman(a, b):
    ra, rb = ranks(a), ranks(b)
    n = len(a)
    ma, mb = sum(ra) / n, sum(rb) / n
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    va = sum((x - ma) ** 2 for x in ra) ** 0.5
    vb = sum((y - mb) ** 2 for y in rb) ** 0.5
    return cov / (va * vb) if va and vb else float("nan")


def main():
    meas, sim = load(sys.argv[1]), load(sys.argv[2])
    print("%6s %7s %9s %22s %22s" % ("M", "configs", "spearman", "measured best: sim rank", "sim best: measured x"))
    for bs in sorted(meas):
        common = sorted(set(meas[bs]) & set(sim.get(bs, {})))
        if len(common) < 3:
            continue
        a = [meas[bs][c] for c in common]
        b = [sim[bs][c] for c in common]
        best_m = min(common, key=lambda c: meas[bs][c])
        best_s = min(common, key=lambda c: sim[bs][c])
        sim_order = sorted(common, key=lambda c: sim[bs][c])
        print("%6d %7d %9.2f %22d %22.3f" % (bs, len(common), spearman(a, b), sim_order.index(best_m) + 1,
                                            meas[bs][best_s] / meas[bs][best_m]))


if __name__ == "__main__":
    main()
