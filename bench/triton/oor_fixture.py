#!/usr/bin/env python3
"""Distills the Triton rows recorded in the repository's history into tests/fixtures/triton_oor.csv.

Usage: bench/triton/oor_fixture.py [COMMIT] > tests/fixtures/triton_oor.csv

Reads, at COMMIT (default 9a784aa, the last tree that held the recorded logs), every file under
bench/triton/logs and tests/gpu/logs: the helper's per-config lines ("cfg 6 256x256x256x1x4x5
bs=1 invalid ... Required: 1310720, Hardware limit: 232448") and the config files a triton sweep
exported (each exported config ran: ok). A row is one (device, dtype, block shape, config,
outcome), each once. The recorded databases of that tree are cuda sweeps only; the triton
sweeps' own rows survive only in these logs.
"""
import json
import re
import subprocess
import sys

LIMITS = {"NVIDIA H200": (232448, "9.0"), "NVIDIA H100 80GB HBM3": (232448, "9.0")}
CFG_LINE = re.compile(r"^cfg \d+ (\d+x\d+x\d+x\d+x\d+x\d+) bs=\d+ (\w+)(.*)$")
REQUIRED = re.compile(r"Required: (\d+), Hardware limit: (\d+)")
WROTE = re.compile(r"^wrote .*device_name=([A-Za-z0-9_]+?)(,dtype=(\w+))?(,block_shape=\[(\d+), (\d+)\])?(_down)?\.json")


def git(*args):
    return subprocess.run(["git", *args], check=True, capture_output=True, text=True).stdout


def json_blocks(lines, start):
    """The JSON objects printed from lines[start] on, one after another."""
    text, depth, out = "", 0, []
    for line in lines[start:]:
        if depth == 0 and not line.startswith("{"):
            if out:
                break
            continue
        text += line + "\n"
        depth += line.count("{") - line.count("}")
        if depth == 0:
            out.append(json.loads(text))
            text = ""
    return out


def rows_of(path, text):
    lines = text.splitlines()
    device = next((d for d in LIMITS if d in text), None)
    if device is None:
        return
    limit, cc = LIMITS[device]
    hello = re.search(r'"smem_per_block": (\d+)', text)
    if hello:
        limit = int(hello.group(1))
    for i, line in enumerate(lines):
        m = CFG_LINE.match(line)
        if m and "triton_" in text:  # the triton helper's own lines
            req = REQUIRED.search(m.group(3))
            outcome = m.group(2) if m.group(2) != "invalid" or not req else "Required %s" % req.group(1)
            if req:
                limit = int(req.group(2))
            if outcome in ("ok",) or outcome.startswith("Required"):
                yield device, cc, limit, "bf16", "", m.group(1), outcome, path
            continue
        w = WROTE.match(line)
        if not w or "/triton_" not in line:  # a cuda or sim sweep's files
            continue
        dtype = w.group(3) or "bf16"
        block = "%sx%s" % (w.group(5), w.group(6)) if w.group(4) else ""
        for obj in json_blocks(lines, i + 1)[:1]:
            for cfg in obj.values():
                if not isinstance(cfg, dict) or "BLOCK_SIZE_M" not in cfg:
                    continue
                text_cfg = "x".join(str(cfg[k]) for k in ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M",
                                                           "num_warps", "num_stages"))
                yield device, cc, limit, dtype, block, text_cfg, "ok", path


def main():
    commit = sys.argv[1] if len(sys.argv) > 1 else "9a784aa"
    paths = [p for p in git("ls-tree", "-r", "--name-only", commit, "bench/triton/logs", "tests/gpu/logs").split("\n")
             if p.endswith((".log", ".txt"))]
    seen = {}
    for p in paths:
        for row in rows_of(p, git("show", "%s:%s" % (commit, p))):
            seen.setdefault(row[:7], row[7])
    print("# Triton 3.6 rows recorded at %s (bench/triton/oor_fixture.py): device, compute capability," % commit)
    print("# opt-in shared memory per block (bytes), dtype, fp8 block shape, config BMxBNxBKxGMxWxS, outcome")
    print("# (ok: it ran; Required N: OutOfResources, Triton's own shared-memory figure), first source")
    print("device,cc,smem_limit,dtype,block_shape,config,outcome,source")
    for key in sorted(seen):
        print(",".join(str(v) for v in key) + "," + seen[key])


if __name__ == "__main__":
    main()
