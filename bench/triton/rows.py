#!/usr/bin/env python3
"""Where a sweep's GPU time went, from `moetune results --json` rows: per batch size and outcome
(ok, ok but settled, pruned), the rows, their mean sample count and the GPU seconds of their
whole-layer samples (samples x median x 10 layers a replay; the up/down halves, warm-up replays
and the decide step's rounds are not in it). Then, per batch size, the fastest ok rows with their
samples, spread and detail.

    python3 bench/triton/rows.py results.json [--top N]
"""
import argparse
import collections
import json

LAYERS_PER_GRAPH = 10


def outcome(r):
    if r["status"] == "pruned":
        return "pruned"
    return "settled" if "settled" in (r.get("detail") or "") else "ok"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("--top", type=int, default=5)
    a = ap.parse_args()
    with open(a.results) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    agg = collections.defaultdict(lambda: [0, 0, 0.0])
    for r in rows:
        if r["status"] not in ("ok", "pruned"):
            continue
        g = agg[(r["batch_size"], outcome(r))]
        g[0] += 1
        g[1] += r["samples"]
        g[2] += r["samples"] * r["median_us"] * LAYERS_PER_GRAPH * 1e-6
    print("%6s %-8s %5s %8s %8s" % ("M", "outcome", "rows", "samples", "gpu_s"))
    total = 0.0
    for (bs, how), (n, samples, gpu) in sorted(agg.items()):
        total += gpu
        print("%6d %-8s %5d %8.1f %8.2f" % (bs, how, n, samples / n, gpu))
    print("whole-layer samples: %.1f GPU seconds" % total)
    for bs in sorted({r["batch_size"] for r in rows}):
        ok = sorted((r for r in rows if r["batch_size"] == bs and r["status"] == "ok"), key=lambda r: r["median_us"])
        if not ok:
            continue
        best = ok[0]["median_us"]
        for r in ok[:a.top]:
            rsd = 100.0 * r["stddev_us"] / r["mean_us"] if r["mean_us"] else 0.0
            print("M=%-5d %.3fx n=%3d rsd %.2f%% %s" % (bs, r["median_us"] / best, r["samples"], rsd,
                                                        (r.get("detail") or "")[:70]))


if __name__ == "__main__":
    main()
