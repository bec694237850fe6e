#!/usr/bin/env python3
"""The baseline for bench/triton/run.sh: tunes configs the way the engines' tuner scripts do, in
one process on one GPU: for every batch size, for every config, compile inside the loop (no
compile ahead), a CUDA graph of 10 layers, 5 warm-up replays, 10 timed replays, no L2 flush between
replays, skip what raises. Same kernel (moetune_kernel.py), inputs, shape and configs as the
moetune sweep it is compared with.

    python3 bench/triton/engine_style.py --space BM,..:BN,..:BK,..:G,..:W,..:S,.. --batch-sizes 1,8 \
        --out picks.json                                  (set TRITON_CACHE_DIR to an empty folder)
"""
import argparse
import itertools
import json
import time

from stack import open_bf16
from helper import device, protocol


def parse_space(text):
    parts = [[int(v) for v in p.split(",")] for p in text.split(":")]
    return [dict(zip(protocol.CFG_KEYS, c)) for c in itertools.product(*parts)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="128,768,2048,8")
    ap.add_argument("--space", required=True)
    ap.add_argument("--batch-sizes", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch, kernel, meas, shape = open_bf16(a.shape)
    cfgs = parse_space(a.space)
    bss = [int(v) for v in a.batch_sizes.split(",")]
    t0 = time.monotonic()
    picks = {}
    for bs in bss:
        L = meas.inputs(shape, bs, 1)
        best = None
        for cfg in cfgs:
            try:
                kernel.layer(L, cfg)
                torch.cuda.synchronize()
                g = meas.graph(lambda: kernel.layer(L, cfg))
                for _ in range(5):
                    g.replay()
                torch.cuda.synchronize()
                s, e_ = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                times = []
                for _ in range(10):
                    s.record()
                    g.replay()
                    e_.record()
                    e_.synchronize()
                    times.append(s.elapsed_time(e_) * 1000.0 / g.layers)
                us = sum(times) / len(times)
                del g
            except Exception:
                continue
            finally:
                meas.forget_aligns()
            if best is None or us < best[0]:
                best = (us, cfg)
        picks[str(bs)] = {"us": best[0], "config": best[1]}
        print("bs %d: best %.1f us %s (%.0f s so far)" % (bs, best[0], best[1], time.monotonic() - t0), flush=True)
    wall = time.monotonic() - t0
    with open(a.out, "w") as f:
        json.dump({"wall_s": wall, "configs": len(cfgs), "picks": picks, "peak_rss_kb": device.peak_rss_kb()}, f, indent=1)
    print("engine-style loop: %d configs x %d batch sizes in %.1f s" % (len(cfgs), len(bss), wall))


if __name__ == "__main__":
    main()
