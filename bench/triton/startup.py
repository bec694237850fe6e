#!/usr/bin/env python3
"""Where the triton helper's start-up goes, step by step, in fresh processes:

  import torch, import triton, CUDA up (torch.cuda.set_device and a first allocation),

once alone and once beside N-1 processes doing the same at the same time (as the helper's compile
pool does while the measuring process starts). The first alone run may find the libraries outside
the page cache: it is reported on its own line ("first").

  python3 bench/triton/startup.py [--others N] [--repeat R]      (prints one JSON line per run)
"""
import argparse
import json
import subprocess
import sys
import time

STEP = r"""
import json, sys, time
t0 = time.monotonic()
import torch
t1 = time.monotonic()
import triton
t2 = time.monotonic()
torch.cuda.set_device(0)
torch.empty(1, device="cuda")
torch.cuda.synchronize()
t3 = time.monotonic()
print(json.dumps({"torch_s": round(t1 - t0, 3), "triton_s": round(t2 - t1, 3), "cuda_s": round(t3 - t2, 3)}))
"""


def one(others):
    """Runs the steps in one process while `others` more run them too; that process's times."""
    procs = [subprocess.Popen([sys.executable, "-c", STEP], stdout=subprocess.DEVNULL) for _ in range(others)]
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-c", STEP], stdout=subprocess.PIPE, check=True, text=True).stdout
    wall = time.monotonic() - t0
    for p in procs:
        p.wait()
    r = json.loads(out.strip().splitlines()[-1])
    r["wall_s"] = round(wall, 3)
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--others", type=int, default=14, help="processes starting beside the timed one (the pool)")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    print(json.dumps(dict(run="first", others=0, **one(0))))
    for i in range(a.repeat):
        print(json.dumps(dict(run="alone", others=0, **one(0))))
    for i in range(a.repeat):
        print(json.dumps(dict(run="beside", others=a.others, **one(a.others))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
