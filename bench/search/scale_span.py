"""The GPU work of a scale.sh run, and where its wall time went.

gpu_work(db, warmup) is what scale.sh counts as the ideal's work, per worker: each result row's
timed samples (results.timed_us, racing's first samples included) and its warm-up replays (warmup x
median for a row measured before a best was known; warmup - 2 for a racing survivor, whose first 2
timed samples were its warm-up; none for a pruned row; warmup per round for a decide row, measured
in 5 rounds).

  python3 bench/search/scale_span.py /tmp/moetune-scale.XXXXXX [WARMUP]
splits a run kept with KEEP_LOGS=1: per worker, its GPU work against the time from the submit to
its last job done, and when each shape's first pass ended (the coordinator's log at info). With
the workers' own logs (WORKER_LOGS=1: w1.log .. wN.log at debug), also where each worker's wall
time went, on its own clock (breakdown), and per shape how long after its last first-pass
Result its phase 2 was planned (lag). With the coordinator's log at debug (COORD_LOG_LEVEL=debug), also
the commit backlog (backlog).
"""
import collections
import datetime
import glob
import re
import sqlite3
import sys


def row_seconds(status, med, tu, ns, phase, warmup):
    """(timed s, warm-up s) of one result row, as the sim slept them."""
    timed = (tu or 0) / 1e6
    if status == "pruned" or not med or med <= 0:
        return timed, 0.0
    raced = (tu or 0) / med - ns > 1.0  # its timed samples hold 2 more than its stored ones: racing's
    # a decide row was measured in 5 rounds, each with its own warm-up replays
    return timed, (5 * warmup if phase == 2 else max(warmup - 2, 0) if raced else warmup) * med / 1e6


def sweep_jobs(c):
    """{job: (shape, phase)} of sweep 1, from connection c."""
    return {j: (sh, ph) for j, sh, ph in c.execute("SELECT id, shape_id, phase FROM jobs WHERE sweep_id = 1")}


def worker_logs(run):
    """The workers' own logs of a run (WORKER_LOGS=1: w1.log .. wN.log; not workers.log)."""
    return sorted(glob.glob(f"{run}/w[0-9]*.log"))


def gpu_work(db, warmup):
    """{worker: (timed s, warm-up s)} of sweep 1."""
    timed, warm = collections.defaultdict(float), collections.defaultdict(float)
    c = sqlite3.connect(db)
    for w, *row in c.execute(
            "SELECT worker_id, status, median_us, timed_us, samples, phase FROM results WHERE sweep_id = 1"):
        t, u = row_seconds(*row, warmup)
        timed[w] += t
        warm[w] += u
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


def row_work(db, warmup):
    """{(worker, job, config): GPU seconds} of sweep 1's rows, as gpu_work counts them; and
    {job: (shape, phase)}."""
    c = sqlite3.connect(db)
    work = collections.defaultdict(float)
    for w, j, cfg, *row in c.execute(
            "SELECT worker_id, job_id, config_id, status, median_us, timed_us, samples, phase FROM results "
            "WHERE sweep_id = 1"):
        work[(w, j, cfg)] += sum(row_seconds(*row, warmup))
    return work, sweep_jobs(c)


def breakdown(run, warmup):
    """Per worker, on its own log's clock, from the submit to the sweep's end: start (until its
    first job came), work (its stored rows' GPU work), over (the rest of the time from a job's
    arrival or its previous Result to a Result: compile waits, overheads), not stored (time to a
    Result whose rows are not in the database: measured twice, the other copy kept), idle
    (holding no job before its last Result), end (its last Result to the sweep's end); the mean
    over workers. Then per shape: its last first-pass Result, and how much later its phase 2
    was planned."""
    work, jobs = row_work(f"{run}/scale.db", warmup)
    t_sub = t_done = None
    planned = {}
    for line in open(f"{run}/coord.log"):
        if "'scale' submitted" in line:
            t_sub = ts(line)
        elif "'scale' done" in line:
            t_done = ts(line)
        elif m := re.search(r"shape (\d+): (racing over|halving phase 1 over)", line):
            planned[int(m.group(1))] = ts(line)
    logs = worker_logs(run)
    cat = collections.Counter()
    last = {}
    for path in logs:
        w = "s" + re.search(r"w(\d+)\.log$", path).group(1)
        prev, held = t_sub, 0
        for line in open(path):
            if not line[:4].isdigit():
                continue
            t = ts(line)
            if re.search(r"job \d+: \d+ configs x", line):
                held += 1
                if held == 1:
                    cat["start" if prev == t_sub else "idle"] += t - prev
                    prev = t
            elif re.search(r"job \d+ done \(", line):
                held -= 1
            elif m := re.search(r"job (\d+) config (\d+): result", line):
                j = int(m.group(1))
                x = work.get((w, j, int(m.group(2))))
                if x is None:
                    cat["not stored"] += t - prev
                else:
                    cat["work"] += x
                    cat["over"] += t - prev - x
                sh, ph = jobs.get(j, (0, 0))
                last[(sh, ph)] = max(last.get((sh, ph), t_sub), t)
                prev = t
        cat["end"] += t_done - prev
    n = len(logs)
    print(f"per worker ({n}), mean s: " + ", ".join(f"{k} {cat[k] / n:.3f}" for k in
                                                    ("start", "work", "over", "not stored", "idle", "end")))
    print("per shape, last first-pass Result + lag to its phase 2: " + ", ".join(
        f"{sh}: {last.get((sh, 1), t_sub) - t_sub:.2f}+{t - last.get((sh, 1), t_sub):.2f}"
        for sh, t in sorted(planned.items(), key=lambda kv: kv[1])))


def backlog(run):
    """With the coordinator's log at debug (COORD_LOG_LEVEL=debug scale.sh): the commit backlog,
    results the coordinator has taken (its 'result seq .. from ..: job' line, where a Result joins
    the queue for the writer) and not yet committed (its 'batch of N results committed' lines).
    A shape's phase 2 is planned, and a job is done, only once their results are committed, so a
    backlog at a sweep's end is time every worker waits. Prints its peak, its size at each shape's
    last first-pass Result, and at the end (0: every taken Result committed)."""
    c = sqlite3.connect(f"{run}/scale.db")
    jobs = sweep_jobs(c)
    t_sub = None
    n, peak, peak_t, last = 0, 0, 0.0, {}
    for line in open(f"{run}/coord.log"):
        if "'scale' submitted" in line:
            t_sub = ts(line)
        elif t_sub is None:
            continue
        elif m := re.search(r"result seq \d+ from \S+: job (\d+) config", line):
            n += 1
            sh, ph = jobs.get(int(m.group(1)), (0, 0))
            if ph == 1:
                last[sh] = (ts(line) - t_sub, n)
        elif m := re.search(r"batch of (\d+) results committed", line):
            n -= int(m.group(1))
        if n > peak:
            peak, peak_t = n, ts(line) - t_sub
    if t_sub is None or not last:
        return
    print(f"commit backlog (results taken, not committed): peak {peak} at {peak_t:.2f} s; at each shape's last "
          "first-pass Result: " + ", ".join(f"{sh}: {k} at {t:.2f}" for sh, (t, k) in sorted(last.items(), key=lambda kv: kv[1]))
          + f"; at the end {n}")


if __name__ == "__main__":
    wu = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    span(sys.argv[1], wu)
    if worker_logs(sys.argv[1]):
        breakdown(sys.argv[1], wu)
    backlog(sys.argv[1])
