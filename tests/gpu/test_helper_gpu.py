#!/usr/bin/env python3
"""GPU test of the triton helper on its own (no worker): the protocol over real pipes, every
config checked against the reference, an over-large config stored invalid, compile-ahead used.

    python3 tests/gpu/test_helper_gpu.py [--kernel moetune]      exit 77 (skipped) without a GPU
    (MOETUNE_HELPER=PATH tests another helper file, as it does for the worker)
"""
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
HELPER = os.environ.get("MOETUNE_HELPER") or os.path.join(HERE, "..", "..", "worker", "moetune_helper.py")
SHAPE = {"e": 128, "n": 768, "k": 2048, "topk": 8, "dtype": "bf16"}
BSS = [1, 64, 1024]
QUIT_S = 2.0  # worker/backend_triton.c TR_QUIT_MS


def cfg(m, n, k, g, w, s):
    return {"BLOCK_SIZE_M": m, "BLOCK_SIZE_N": n, "BLOCK_SIZE_K": k, "GROUP_SIZE_M": g, "num_warps": w,
            "num_stages": s}


def main():
    kernel = sys.argv[sys.argv.index("--kernel") + 1] if "--kernel" in sys.argv else "moetune"
    cache = tempfile.mkdtemp(prefix="mt-helper-")
    p = subprocess.Popen([sys.executable, HELPER, "--kernel", kernel, "--cache-dir", cache],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    first = json.loads(p.stdout.readline())
    if "fatal" in first:
        print("skipped: %s" % first["fatal"])
        return 77
    print("hello", json.dumps(first["hello"]))
    good = [cfg(16, 64, 128, 1, 4, 3), cfg(64, 128, 64, 16, 4, 3), cfg(128, 128, 64, 1, 8, 4),
            cfg(32, 64, 128, 16, 4, 4), cfg(64, 64, 128, 1, 4, 3), cfg(128, 256, 64, 16, 8, 3)]
    huge = cfg(256, 256, 256, 1, 4, 5)  # needs far more shared memory than 227 KiB
    allc = good + [huge]
    p.stdin.write(json.dumps({"op": "prepare", "shape": SHAPE, "configs": allc, "batch_sizes": BSS}) + "\n")
    fails = 0
    t0 = time.monotonic()
    for i, c in enumerate(allc):
        t = time.monotonic()
        req = {"op": "measure", "id": i, "shape": SHAPE, "config": c, "batch_sizes": BSS,
               "measure": {"warmup": 2, "min_samples": 5, "max_samples": 50, "rsd_target": 0.01,
                           "budget_ms": 1000, "seed": 1}, "split": True}
        p.stdin.write(json.dumps(req) + "\n")
        p.stdin.flush()
        rows = [json.loads(p.stdout.readline()) for _ in BSS]
        done = json.loads(p.stdout.readline())
        assert done.get("done") and done["id"] == i, done
        for r in rows:
            print("cfg %d %s bs=%d %s %.1f us (up %.1f down %.1f) n=%s %s" % (
                i, "x".join(str(c[k]) for k in c), r["bs"], r["status"], r.get("median_us", 0),
                r.get("up_us", 0), r.get("down_us", 0), r.get("samples"), r.get("detail", "")))
        want = "invalid" if c is huge else "ok"
        bad = [r for r in rows if r["status"] != want]
        if bad:
            print("FAIL: config %d expected %s, got %s" % (i, want, [r["status"] for r in bad]))
            fails += 1
        print("  config %d took %.2f s, peak rss %d MiB" % (i, time.monotonic() - t, done["peak_rss_kb"] >> 10))
    print("total %.2f s for %d configs; start-up marks %s" % (time.monotonic() - t0, len(allc),
                                                             json.dumps(done["stats"].get("start"))))
    start = done["stats"].get("start") or {}
    if not start.get("device", 0) <= start.get("pool_ready", -1) <= start.get("first_done", -1):
        # the compile processes make their CUDA contexts after the measuring process's
        print("FAIL: start-up marks out of order: %s" % start)
        fails += 1
    p.stdin.write('{"op":"quit"}\n')
    p.stdin.close()
    t = time.monotonic()
    rc = p.wait(timeout=60)
    quit_s = time.monotonic() - t
    print("exit status %d, %.2f s after quit" % (rc, quit_s))
    if rc != 0:
        print("FAIL: helper exit status %d" % rc)
        fails += 1
    if quit_s >= QUIT_S:  # the worker waits this long (TR_QUIT_MS), then kills the group
        print("FAIL: the helper took %.2f s to quit (at most %.1f s)" % (quit_s, QUIT_S))
        fails += 1
    print("PASS" if not fails else "FAIL (%d)" % fails)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
