"""The GPU work of a scale.sh run, and where its wall time went.

gpu_work(db, warmup) is what scale.sh counts as the ideal's work, per worker: each result row's
timed samples (results.timed_us, racing's first samples included) and its warm-up replays (warmup x
median for a row measured before a best was known; warmup - 2 for a racing survivor, whose first 2
timed samples were its warm-up; none for a pruned row; warmup per round for a decide row, measured
in 5 rounds).

  python3 bench/search/scale_span.py /tmp/moetune-scale.XXXXXX [WARMUP]
splits a run kept with KEEP_LOGS=1: per worker, its GPU work against the time from the submit to
its last job done, and when each shape's first pass ended (the coordinator's log at info).
"""
import collections
import datetime
import re
import sqlite3
import sys


def gpu_work(db, warmup):
    """{worker: (timed s, warm-up s)} of sweep 1."""
    timed, warm = collections.defaultdict(float), collections.defaultdict(float)
    c = sqlite3.connect(db)
    for w, st, med, tu, ns, ph in c.execute(
            "SELECT worker_id, status, median_us, timed_us, samples, phase FROM results WHERE sweep_id = 1"):
        timed[w] += (tu or 0) / 1e6
        if st == "pruned" or not med or med <= 0:
            continue
        raced = (tu or 0) / med - ns > 1.0  # its timed samples hold 2 more than its stored ones: racing's
        # a decide row was measured in 5 rounds, each with its own warm-up replays
        warm[w] += (5 * warmup if ph == 2 else max(warmup - 2, 0) if raced else warmup) * med / 1e6
    return {w: (timed[w], warm[w]) for w in timed}


def ts(line):
    return datetime.datetime.strptime(line[:23], "%Y-%m-%dT%H:%M:%S.%f").timestamp()


def span(run, warmup):
    work = {w: t + u for w, (t, u) in gpu_work(f"{run}/scale.db", warmup).items()}
    t_sub = t_done = None
    holder, last, first_pass = {}, {}, []
    for line in open(f"{run}/coord.log"):
        if "'scale' submitted" in line:
            t_sub = ts(line)
        elif "'scale' done" in line:
            t_done = ts(line)
        elif "racing over" in line:
            first_pass.append(ts(line))
        elif m := re.search(r"job (\d+) \(sweep 1\) leased to (s\d+)", line):
            holder[m.group(1)] = m.group(2)
        elif m := re.search(r"job (\d+) \(sweep 1\) done", line):
            last[holder[m.group(1)]] = ts(line)
    ws = sorted(work)
    W = [work[w] for w in ws]
    L = [last[w] - t_sub for w in ws]
    S = [l - w for l, w in zip(L, W)]
    q = lambda v, p: sorted(v)[int(p * (len(v) - 1))]
    print(f"wall {t_done - t_sub:.2f} ideal {sum(W) / len(W):.2f}; first passes over at "
          + ", ".join(f"{x - t_sub:.2f}" for x in first_pass))
    print(f"last done per worker: p10 {q(L, .1):.2f} med {q(L, .5):.2f} p90 {q(L, .9):.2f} max {max(L):.2f}")
    print(f"span - work per worker: p10 {q(S, .1):.2f} med {q(S, .5):.2f} p90 {q(S, .9):.2f}")


if __name__ == "__main__":
    span(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 2)
