#!/usr/bin/python3
"""A stand-in for worker/moetune_helper.py that needs neither torch nor a GPU.

It speaks the line protocol of worker/HELPER.md and misbehaves on request, for the
tests of the triton backend's C side. Environment:

  FAKE_HELPER_MODE   ok (default) | die | hang | flood | garbage | wrongid | grow | fatal | silent
                     (in every mode, a batch size whose median is beyond measure.best_us by more than
                     measure.race_margin is answered pruned with 2 samples, as the real helper races,
                     and one still in the race but beyond it by more than measure.settle_margin is
                     answered ok with 5 samples, "settled")
  FAKE_HELPER_BM     misbehave only for configs with this BLOCK_SIZE_M (default: every config)
  FAKE_HELPER_PIDS   a file this helper appends its pid to when it starts
  FAKE_HELPER_HANG   a file the helper writes its pid to when it starts hanging
  FAKE_HELPER_PHASES ok (default): every done carries phases of 100 s (timed 60, samples 10,
                     compile_wait 20, idle 6, other 4); bad: a negative one; none: no phases
  FAKE_HELPER_DONE_MS milliseconds to wait before each done (default 0)

Latencies are exact in binary: median = BLOCK_SIZE_M + bs/2, up = median/2, down = median/4.
"""
import json
import os
import sys
import time

MODE = os.environ.get("FAKE_HELPER_MODE", "ok")
BM = int(os.environ.get("FAKE_HELPER_BM", "0"))


def say(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main():
    args = sys.argv[1:]
    kernel = args[args.index("--kernel") + 1] if "--kernel" in args else "?"
    gpu = args[args.index("--gpu") + 1] if "--gpu" in args else "?"
    pids = os.environ.get("FAKE_HELPER_PIDS")
    if pids:
        with open(pids, "a") as f:
            f.write("%d\n" % os.getpid())
    sys.stderr.write("fake helper %d: kernel %s gpu %s mode %s\n" % (os.getpid(), kernel, gpu, MODE))
    sys.stderr.flush()
    if MODE == "fatal":
        sys.stderr.write("Traceback (most recent call last):\n  File \"x\", line 1\nModuleNotFoundError: No module named 'torch'\n")
        say({"fatal": "torch is not importable: No module named 'torch'"})
        sys.exit(1)
    say({"hello": {"kernel": kernel, "kernel_hash": "0123456789abcdef", "compiler": "triton_3_6_0",
                   "versions": "kernel=%s triton=3.6.0 torch=2.11.0 python=3.12.3" % kernel,
                   "device": {"name": "Fake H200", "uuid": "GPU-fake-%s" % gpu, "cc_major": 9, "cc_minor": 0,
                              "sm_count": 132, "memory_bytes": 150754820096, "driver_version": "580.159.04",
                              "cuda_version": "13.0", "clock_khz": 1980000, "mem_clock_khz": 3201000,
                              "smem_per_block": 232448, "regs_per_block": 65536}}})
    configs = 0
    for line in sys.stdin:
        req = json.loads(line)
        op = req.get("op")
        if op == "quit":
            return
        if op == "prepare":
            continue
        if op != "measure":
            say({"error": "unknown op %r" % op})
            continue
        reqs = os.environ.get("FAKE_HELPER_REQS")
        if reqs:  # what the worker asked, for the test to check
            with open(reqs, "a") as f:
                f.write(json.dumps({"shape": req["shape"], "routing": req.get("routing")}) + "\n")
        cfg = req["config"]
        bad = BM == 0 or cfg["BLOCK_SIZE_M"] == BM
        mode = MODE if bad else "ok"
        rid = req["id"]
        if mode == "hang":
            hang = os.environ.get("FAKE_HELPER_HANG")
            if hang:
                with open(hang, "w") as f:
                    f.write("%d\n" % os.getpid())
            time.sleep(3600)
        if mode == "silent":
            continue
        if mode == "grow":
            hog = []
            for _ in range(64):
                hog.append(bytearray(b"\x01") * (32 << 20))
                time.sleep(0.05)
            time.sleep(3600)
        for i, bs in enumerate(req["batch_sizes"]):
            if mode == "die" and i == 1:
                sys.stderr.write("fake: dying on purpose\n")
                sys.stderr.flush()
                os._exit(3)
            if mode == "flood":
                while True:
                    sys.stdout.write("x" * 65536)
                    sys.stdout.flush()
            if mode == "garbage" and i == 1:
                sys.stdout.write("this is not json\n")
                sys.stdout.flush()
                time.sleep(3600)
            if mode == "wrongid" and i == 1:
                rid += 100
            median = cfg["BLOCK_SIZE_M"] + bs / 2.0
            m = req.get("measure") or {}
            best, margin = (m.get("best_us") or [0.0] * len(req["batch_sizes"]))[i], m.get("race_margin") or 0.0
            if margin > 0 and best > 0 and median > best * (1 + margin):
                say({"id": rid, "bs": bs, "status": "pruned", "median_us": median, "min_us": median,
                     "mean_us": median, "stddev_us": 0.0, "samples": 2, "detail": "pruned: fake"})
                continue
            settle = m.get("settle_margin") or 0.0
            settled = margin > 0 and settle > 0 and best > 0 and median > best * (1 + settle)
            say({"id": rid, "bs": bs, "status": "ok", "median_us": median, "min_us": median - 0.5,
                 "mean_us": median + 0.25, "stddev_us": 0.125, "samples": 5 if settled else 20,
                 "up_us": median / 2, "down_us": median / 4,
                 "detail": "rel_err=1.00e-03" + ("; settled: fake" if settled else "")})
        configs += 1
        done = {"id": rid, "done": True, "regs": 0, "spills": 0, "peak_rss_kb": 1000, "gpu_s": 0.05 * configs,
                "stats": {"verified": configs, "split_margin": 0.1}}
        phases = os.environ.get("FAKE_HELPER_PHASES", "ok")
        if phases != "none":
            done["phases"] = {"timed": 60.0, "samples": 10.0, "compile_wait": 20.0, "idle": 6.0, "other": 4.0,
                              "wall": 100.0}
            if phases == "bad":
                done["phases"]["timed"] = -1.0
        time.sleep(int(os.environ.get("FAKE_HELPER_DONE_MS", "0")) / 1000.0)
        say(done)


if __name__ == "__main__":
    main()
