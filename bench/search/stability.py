"""Stability of a sweep's picks (bench/search/stability.sh): two runs of the same sweep, and where
their picks differ, the side-by-side re-measure of both picks decides whether they are equivalent.

  python3 bench/search/stability.py differ A.db B.db
      prints two lines: the configs picked differently (text form, comma-separated, for --configs)
      and the batch sizes where they differ (comma-separated); both empty when the runs agree.
      Then a line per group of those batch sizes whose two picks are the same pair: "SIZES CONFIGS"
      (one side-by-side sweep each re-measures a pick only where it is one).
  python3 bench/search/stability.py score A.db B.db [C.db ...]
      per (shape, batch size): each run's pick; where they differ, both picks' medians in the
      C databases (the re-measure, sweep 1 of each) and their ratio. A pick in several C databases
      (remeasure.sh with PROCESSES > 1: separate processes) reads as the median of its medians. A
      batch size agrees when both runs picked the same config or the re-measured picks are within
      1 % of each other. Prints the table and a summary line,
      with B's pick against A's side by side, worst and mean (A the reference: exhaustive's run).
  python3 bench/search/stability.py spread A.db B.db [...] | spread ONE.db
      the same configs measured in separate runs (bench/search/noise.sh), one database each or the
      done sweeps of one database (ONE_PROCESS=1): per (shape, batch size,
      config) the slowest run's median over the fastest's, and per batch size whether the runs
      ordered the configs alike; each run's median in run order shows whether the spread follows time.
  python3 bench/search/stability.py cross A.db B.db
      where the two runs picked differently, each pick's median in each run (both runs measure
      every config of the space): a check without a re-measure, two separate measurements each.
  python3 bench/search/stability.py ratios A.db B.db [...]
      every pair of runs (sweep 1 of each, e.g. a setting changed between them): over the (config,
      batch size) both measured ok, the median of A's median over B's and its 5th and 95th
      percentiles, for all batch sizes, M <= 64 and M > 64. A change that moves no median reads as
      pairs with the change spread like pairs without it.
  python3 bench/search/stability.py rounds A.db [B.db ...]
      per run and (shape, batch size) re-measured side by side (phase-2 rows whose detail lists
      "rounds ..."): the config with the fastest round (the stored median, what moetune picks) and
      the config with the lowest median of its rounds, each with both figures, "*" where the two
      rules pick differently; then, per run, at how many batch sizes the median and the
      second-fastest round pick otherwise than the fastest.
  Env PICK_RULE=median|second (differ, score): a run's picks by the median of rounds, or by the
      second-fastest round, where its rows list them (see picks), so that remeasure.sh scores that
      rule on the same two runs.
"""
import json
import os
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys

TOLERANCE = 0.01
CONFIG_KEYS = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages")


def cfg_text(c):
    return "x".join(str(v) for v in c)


def moetune_picks(db):
    """{(shape, M): (config, median)}: sweep 1's picks as moetune itself takes them (`moetune results
    --best`: where a decide step or halving re-measured finalists side by side, only those rows
    pick). The binary: MT_BIN_DIR/moetune, else moetune on PATH."""
    d = os.environ.get("MT_BIN_DIR")
    exe = os.path.join(d, "moetune") if d else shutil.which("moetune")
    if not exe:
        sys.exit("moetune not found: set MT_BIN_DIR or put it on PATH")
    run = subprocess.run([exe, "results", "--db", db, "--sweep", "1", "--best", "--json"],
                         capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"{db}: moetune results exited {run.returncode}: {run.stderr.strip()}")
    best = {}
    for line in run.stdout.splitlines():
        r = json.loads(line)
        s, c = r["shape"], r["config"]
        best[((s["E"], s["N"], s["K"], s["topk"]), r["batch_size"])] = (tuple(c[k] for k in CONFIG_KEYS), r["median_us"])
    return best


# PICK_RULE: the figure of a round_rows row that picks (fastest: moetune's rule, the stored median)
RULE_COLUMN = {"fastest": 1, "median": 2, "second": 3}


def round_rows(db):
    """{(shape, M): [(config, fastest round, median of rounds, second-fastest round)]}: sweep 1's
    OK phase-2 rows whose detail lists their side-by-side rounds."""
    c = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    by = {}
    for e, n, k, topk, m, bm, bn, bk, g, w, st, det in c.execute(
            "SELECT s.e, s.n, s.k, s.topk, r.batch_size, f.block_m, f.block_n, f.block_k, f.group_m,"
            " f.num_warps, f.num_stages, r.detail FROM results r JOIN shapes s ON s.id = r.shape_id"
            " JOIN configs f ON f.id = r.config_id WHERE r.sweep_id = 1 AND r.status = 'ok' AND r.phase = 2"):
        hit = re.search(r"rounds((?: [\d.e+-]+)+)", det or "")
        if hit:
            us = [float(x) for x in hit.group(1).split()]
            us.sort()
            by.setdefault(((e, n, k, topk), m), []).append(
                ((bm, bn, bk, g, w, st), us[0], statistics.median(us), us[1] if len(us) > 1 else us[0]))
    return by


def picks(db):
    """moetune_picks of a done sweep 1. Env PICK_RULE=median: where rows were re-measured side by
    side and list their rounds, the config with the lowest median of its rounds picks instead of
    the one with the fastest round (moetune's rule), with that median; PICK_RULE=second: the one
    with the fastest second-fastest round (one lucky round does not pick)."""
    c = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    state = c.execute("SELECT state FROM sweeps WHERE id = 1").fetchone()
    if not state or state[0] != "done":
        # a stopped sweep's lowest medians are not its strategy's picks
        sys.exit(f"{db}: sweep 1 is {state[0] if state else 'missing'}, not done: its picks are not comparable")
    best = moetune_picks(db)
    rule = os.environ.get("PICK_RULE", "fastest")
    if rule not in RULE_COLUMN:
        sys.exit(f"PICK_RULE={rule}: not fastest, median or second")
    if rule == "fastest":
        return best
    col = RULE_COLUMN[rule]
    by = round_rows(db)
    if not by:
        sys.exit(f"{db}: PICK_RULE={rule}, but no side-by-side row lists its rounds")
    for key, rows in by.items():
        r = min(rows, key=lambda r: r[col])
        best[key] = (r[0], r[col])
    return best


def medians(db, sweep=1):
    c = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    return {(((e, n, k, topk), m), (bm, bn, bk, g, w, st)): med for e, n, k, topk, m, bm, bn, bk, g, w, st, med in
            c.execute("SELECT s.e, s.n, s.k, s.topk, r.batch_size, f.block_m, f.block_n, f.block_k, f.group_m,"
                      " f.num_warps, f.num_stages, r.median_us FROM results r JOIN shapes s ON s.id = r.shape_id"
                      " JOIN configs f ON f.id = r.config_id WHERE r.sweep_id = ? AND r.status = 'ok'", (sweep,))}


def differ(a, b):
    pa, pb = picks(a), picks(b)
    keys = sorted(set(pa) | set(pb))
    missing = [k for k in keys if k not in pa or k not in pb]
    if missing:
        sys.exit(f"runs do not cover the same batch sizes: {missing[:4]}")
    diff = [k for k in keys if pa[k][0] != pb[k][0]]
    cfgs = sorted({pa[k][0] for k in diff} | {pb[k][0] for k in diff})
    print(",".join(cfg_text(c) for c in cfgs))
    print(",".join(str(m) for m in sorted({k[1] for k in diff})))
    groups = {}
    for k in diff:
        pair = tuple(sorted({pa[k][0], pb[k][0]}))
        groups.setdefault(pair, set()).add(k[1])
    for pair, sizes in sorted(groups.items(), key=lambda g: min(g[1])):
        print(",".join(str(m) for m in sorted(sizes)), ",".join(cfg_text(c) for c in pair))


def score(a, b, *cs):
    pa, pb = picks(a), picks(b)
    seen = {}
    for c in cs:
        for key, us in medians(c).items():
            seen.setdefault(key, []).append(us)
    re = {key: statistics.median(us) for key, us in seen.items()}
    agree, rows, ratios = 0, 0, []
    b_over_a = []  # B's pick against A's, side by side (1 where they picked the same)
    print(f"{'shape':<24} {'M':>5} {'run A':<22} {'run B':<22} {'A re-measured':>13} {'B re-measured':>13} {'ratio':>7}")
    for key in sorted(pa):
        (e, n, k, topk), m = key
        ca, cb = pa[key][0], pb[key][0]
        rows += 1
        if ca == cb:
            agree += 1
            b_over_a.append(1.0)
            print(f"E={e},N={n},K={k:<11} {m:>5} {cfg_text(ca):<22} {'(same)':<22}")
            continue
        ma, mb = re.get((key, ca)), re.get((key, cb))
        if ma is None or mb is None:
            print(f"E={e},N={n},K={k:<11} {m:>5} {cfg_text(ca):<22} {cfg_text(cb):<22} {'(not re-measured)':>27}")
            continue
        ratio = max(ma, mb) / min(ma, mb)
        ratios.append(ratio)
        b_over_a.append(mb / ma)
        agree += ratio <= 1 + TOLERANCE
        print(f"E={e},N={n},K={k:<11} {m:>5} {cfg_text(ca):<22} {cfg_text(cb):<22} {ma:>13.2f} {mb:>13.2f} "
              f"{ratio:>7.4f}")
    share = agree / rows if rows else 0.0
    print(f"\nagree {agree}/{rows} ({100 * share:.1f} %): same config, or within {100 * TOLERANCE:.0f} % side by side")
    print("summary " + json.dumps({"batch_sizes": rows, "agree": agree, "share": share,
                                   "re_measured": len(ratios),
                                   "processes": max((len(us) for us in seen.values()), default=0),
                                   "worst_ratio": max(ratios) if ratios else 1.0,
                                   "b_over_a_worst": max(b_over_a) if b_over_a else None,
                                   "b_over_a_mean": sum(b_over_a) / len(b_over_a) if b_over_a else None,
                                   "b_over_a_points": len(b_over_a)}))


def spread(dbs):
    """dbs: paths (sweep 1 of each), or one path and every sweep in it (one process, one after another)."""
    if len(dbs) == 1:
        c = sqlite3.connect(f"file:{dbs[0]}?mode=ro", uri=True)
        ids = [i for (i,) in c.execute("SELECT id FROM sweeps WHERE state = 'done' ORDER BY id")]
        runs = [medians(dbs[0], i) for i in ids]
        dbs = ids
    else:
        runs = [medians(db) for db in dbs]
    keys = sorted(set.intersection(*(set(r) for r in runs)))
    worst, flips = 1.0, 0
    print(f"{'shape':<24} {'M':>5} {'config':<22} {'fastest':>9} {'slowest':>9} {'ratio':>7}  each run, in run order")
    for key in keys:
        (e, n, k, topk), m = key[0]
        vals = [r[key] for r in runs]
        ratio = max(vals) / min(vals)
        worst = max(worst, ratio)
        print(f"E={e},N={n},K={k:<11} {m:>5} {cfg_text(key[1]):<22} {min(vals):>9.2f} {max(vals):>9.2f} {ratio:>7.4f}  "
              + " ".join(f"{v:.1f}" for v in vals))
    points = sorted({k[0] for k in keys})
    for p in points:
        orders = {tuple(sorted((c for (q, c) in keys if q == p), key=lambda c: r[(p, c)])) for r in runs}
        flips += len(orders) > 1
    print(f"\n{len(dbs)} runs, {len(keys)} (config, batch size) pairs: worst run-to-run ratio {worst:.4f}; "
          f"the runs ordered the configs differently at {flips} of {len(points)} batch sizes")
    print("summary " + json.dumps({"runs": len(dbs), "pairs": len(keys), "worst_ratio": worst,
                                   "order_differs": flips, "batch_sizes": len(points)}))


def cross(a, b):
    pa, pb = picks(a), picks(b)
    ma, mb = medians(a), medians(b)
    fmt = lambda v: f"{v:.4f}" if v else "     -"
    print(f"{'shape':<24} {'M':>5} {'A picked':<22} {'B picked':<22} {'in A: B/A':>10} {'in B: A/B':>10}")
    for key in sorted(pa):
        (e, n, k, topk), m = key
        ca, cb = pa[key][0], pb.get(key, (None,))[0]
        if cb is None or ca == cb:
            continue
        in_a = ma.get((key, cb), 0) / pa[key][1]
        in_b = mb.get((key, ca), 0) / pb[key][1]
        print(f"E={e},N={n},K={k:<11} {m:>5} {cfg_text(ca):<22} {cfg_text(cb):<22} {fmt(in_a):>10} {fmt(in_b):>10}")


def ratios(dbs):
    runs = {db: medians(db) for db in dbs}

    def stats(r):
        r = sorted(r)
        if not r:
            return "      (none)"
        pick = lambda q: r[min(len(r) - 1, int(q * len(r)))]
        return f"{pick(0.5):.4f} [{pick(0.05):.4f}, {pick(0.95):.4f}]"
    print(f"{'A / B':<24} {'pairs':>6}  {'all: median [p5, p95]':<26} {'M <= 64':<26} {'M > 64':<26}")
    for i, a in enumerate(dbs):
        for b in dbs[i + 1:]:
            keys = set(runs[a]) & set(runs[b])
            r = {k: runs[a][k] / runs[b][k] for k in keys}
            print(f"{a + ' / ' + b:<24} {len(keys):>6}  {stats(r.values()):<26} "
                  f"{stats(v for k, v in r.items() if k[0][1] <= 64):<26} "
                  f"{stats(v for k, v in r.items() if k[0][1] > 64):<26}")


def rounds(dbs):
    for db in dbs:
        by = round_rows(db)
        if not by:
            sys.exit(f"{db}: no side-by-side row lists its rounds (a build before rounds in the detail?)")
        otherwise = {"median": 0, "second": 0}  # batch sizes where the rule picks otherwise than the fastest
        print(f"{db}\n{'shape':<24} {'M':>5} {'fastest round':<22} {'fast':>9} {'median':>9}  "
              f"{'median of rounds':<22} {'fast':>9} {'median':>9}")
        for (shape, m), rows in sorted(by.items()):
            pick = {rule: min(rows, key=lambda r: r[col]) for rule, col in RULE_COLUMN.items()}
            f, md = pick["fastest"], pick["median"]
            for rule in otherwise:
                otherwise[rule] += pick[rule][0] != f[0]
            print(f"E={shape[0]},N={shape[1]},K={shape[2]:<8} {m:>5} {cfg_text(f[0]):<22} {f[1]:>9.2f} {f[2]:>9.2f}  "
                  f"{cfg_text(md[0]):<22} {md[1]:>9.2f} {md[2]:>9.2f}{' *' if f[0] != md[0] else ''}")
        print(f"{db}: of {len(by)} batch sizes, the median of rounds picks otherwise than the fastest round at "
              f"{otherwise['median']}, the second-fastest round at {otherwise['second']}\n")

if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "differ":
        differ(sys.argv[2], sys.argv[3])
    elif len(sys.argv) >= 4 and sys.argv[1] == "score":
        score(*sys.argv[2:])
    elif len(sys.argv) == 4 and sys.argv[1] == "cross":
        cross(sys.argv[2], sys.argv[3])
    elif len(sys.argv) >= 4 and sys.argv[1] == "ratios":
        ratios(sys.argv[2:])
    elif len(sys.argv) >= 3 and sys.argv[1] == "rounds":
        rounds(sys.argv[2:])
    elif len(sys.argv) >= 3 and sys.argv[1] == "spread":
        spread(sys.argv[2:])
    else:
        sys.exit(__doc__)
