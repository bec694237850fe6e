"""The cost model and the planner's order against measured medians (bench/search/order_eval.sh).

  python3 bench/search/order_eval.py ORDER_EVAL_BIN A.db E,N,K,TOPK [B.db E,N,K,TOPK ...]

Rows are a database's ok and pruned rows (a pruned row's median is what racing measured
before it stopped: enough to rank, never a pick)."""
import collections
import os
import sqlite3
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "triton"))
from sim_vs_measured import spearman  # noqa: E402  (the same rank correlation as the sim's check)


def run(binary, mode, shape, lines):
    out = subprocess.run([binary, mode] + shape.split(","), input="\n".join(lines), capture_output=True,
                         text=True, check=True).stdout
    return [tuple(line.split()) for line in out.splitlines() if line]


def evaluate(binary, db, shape):
    c = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    rows = c.execute("SELECT f.block_m, f.block_n, f.block_k, f.group_m, f.num_warps, f.num_stages, r.batch_size,"
                     " r.median_us, r.status FROM results r JOIN configs f ON f.id = r.config_id"
                     " WHERE r.sweep_id = 1 AND r.status IN ('ok', 'pruned') AND r.median_us > 0").fetchall()
    cost = {tuple(map(int, t[:7])): float(t[7])
            for t in run(binary, "cost", shape, [" ".join(map(str, r[:7])) for r in rows])}
    cfgs = sorted({r[:6] for r in rows})
    pos = {tuple(map(int, t)): i for i, t in enumerate(run(binary, "order", shape, [" ".join(map(str, x)) for x in cfgs]))}
    by = collections.defaultdict(list)
    for r in rows:
        by[r[6]].append(r)
    print(f"== {db} (E,N,K,topk = {shape}; {len(cfgs)} configs)")
    print(f"{'M':>5} {'spearman':>9} {'top-5/best':>11} {'first <=5%':>11} {'first <=2%':>11}")
    res = []
    for m in sorted(by):
        rs = by[m]
        ok = [r[7] for r in rs if r[8] == "ok"]
        if not ok:
            continue
        best = min(ok)
        sp = spearman([cost[r[:7]] for r in rs], [r[7] for r in rs])
        top = statistics.mean(r[7] / best for r in sorted(rs, key=lambda r: cost[r[:7]])[:5])
        p5 = min(pos[r[:6]] for r in rs if r[7] <= best * 1.05)
        p2 = min(pos[r[:6]] for r in rs if r[7] <= best * 1.02 and r[8] == "ok")
        res.append((m, sp, top, p5, p2, best))
        print(f"{m:>5} {sp:>9.2f} {top:>11.2f} {p5:>11} {p2:>11}")
    w = sum(r[5] for r in res)
    print(f"mean spearman {statistics.mean(r[1] for r in res):.3f}, mean top-5/best {statistics.mean(r[2] for r in res):.3f}; "
          f"first within 5 % / 2 %, weighted by the batch size's best median: "
          f"{sum(r[3] * r[5] for r in res) / w:.0f} / {sum(r[4] * r[5] for r in res) / w:.0f} of {len(cfgs)}")


if __name__ == "__main__":
    if len(sys.argv) < 4 or len(sys.argv) % 2:
        sys.exit(__doc__)
    for i in range(2, len(sys.argv), 2):
        evaluate(sys.argv[1], sys.argv[i], sys.argv[i + 1])
