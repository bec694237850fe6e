"""Compares the picks of search strategies against the exhaustive run (bench/search/run.sh).

  python3 bench/search/compare.py OUT_DIR exhaustive racing [halving ...]

Reads OUT_DIR/<strategy>.db (sweep 1 of each). The first strategy is the reference: it measured
every config of the space. For each other strategy and each (shape, batch size), its pick (as
`moetune results --best` takes it; MT_BIN_DIR or PATH finds moetune) is looked up in the
reference's rows: ratio = reference median of that pick / reference best. Prints a table per
strategy, worst and mean ratio, the batch sizes where it picked another config than the reference
(other_config), rows by status and samples taken.
"""
import json
import sqlite3
import sys

from stability import medians, moetune_picks


def picks(db):
    c = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    status = dict(c.execute("SELECT status, count(*) FROM results WHERE sweep_id = 1 GROUP BY status").fetchall())
    samples = c.execute("SELECT coalesce(sum(samples), 0) FROM results WHERE sweep_id = 1").fetchone()[0]
    state = (c.execute("SELECT state FROM sweeps WHERE id = 1").fetchone() or ["missing"])[0]
    return moetune_picks(db), status, samples, state


def main():
    out, ref_name, others = sys.argv[1], sys.argv[2], sys.argv[3:]
    ref_best, ref_status, ref_samples, ref_state = picks(f"{out}/{ref_name}.db")
    if ref_state != "done":
        sys.exit(f"{ref_name}: the reference sweep is {ref_state}, not done")
    ref_all = medians(f"{out}/{ref_name}.db")
    print(f"{ref_name}: rows {ref_status}, samples {ref_samples}")
    summary = {}
    for name in others:
        best, status, samples, state = picks(f"{out}/{name}.db")
        ratios, other = [], 0
        print(f"\n{name}: rows {status}, samples {samples} ({samples / max(ref_samples, 1):.2f}x {ref_name}'s)"
              + ("" if state == "done" else f", SWEEP {state.upper()}, NOT DONE"))
        print(f"{'shape':<22} {'M':>5} {'pick':<22} {'ref best':<22} {'ratio':>7}")
        for key in sorted(ref_best):
            (e, n, k, topk), m = key
            rcfg, rmed = ref_best[key]
            if key not in best:
                print(f"E={e},N={n},K={k:<9} {m:>5} {'(none)':<22}")
                continue
            cfg = best[key][0]
            other += cfg != rcfg
            med = ref_all.get((key, cfg))
            ratio = med / rmed if med else float("nan")
            if med:
                ratios.append(ratio)
            fmt = lambda c: "x".join(map(str, c[:3])) + f" g{c[3]} w{c[4]} s{c[5]}"
            print(f"E={e},N={n},K={k:<9} {m:>5} {fmt(cfg):<22} {fmt(rcfg):<22} {ratio:>7.3f}")
        if state != "done":
            # a stopped sweep's picks are not its strategy's: left out of the summary
            print(f"{name}: not summarised, its sweep is not done")
        elif ratios:
            summary[name] = {"worst": max(ratios), "mean": sum(ratios) / len(ratios), "points": len(ratios),
                             "other_config": other, "samples_vs_ref": samples / max(ref_samples, 1)}
            print(f"{name}: worst {max(ratios):.4f}, mean {sum(ratios) / len(ratios):.4f} over {len(ratios)} points")
    print("\nsummary " + json.dumps(summary))


if __name__ == "__main__":
    main()
