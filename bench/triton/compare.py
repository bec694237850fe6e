#!/usr/bin/env python3
"""Part (b) and the pick check of bench/triton/run.sh: per batch size, measures under one method
(moetune's: L2 flushed before each replay, RSD 0.5 %, at least 20 samples) in one process
  - the config moetune's sweep picked for the whole layer (--whole: its exported vLLM file; else
    the SGLang file, whose entries are the up halves of the split pairs when a _down file exists),
  - the config the engine-style loop picked (engine_style.py's picks),
  - the engines' untuned default (SGLang/vLLM bf16: 64/64/32 GROUP 8, or 16/32/64 GROUP 1 when
    M <= E; no warps or stages given, so Triton's 4 warps and 3 stages),
  - the split, what SGLang runs when the _down file exists: the SGLang file's config for GEMM1
    and the _down file's for GEMM2.

    python3 bench/triton/compare.py --file F.json --down F_down.json [--whole V.json] --baseline picks.json [--shape E,N,K,topk]
"""
import argparse
import functools
import json

from stack import open_bf16
from helper import protocol

M = {"warmup": 5, "min_samples": 20, "max_samples": 200, "rsd_target": 0.005, "budget_ms": 4000, "seed": 1, "race_margin": 0.0}


def default_cfg(m, e):
    if m <= e:
        return {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1,
                "num_warps": 4, "num_stages": 3}
    return {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 8,
            "num_warps": 4, "num_stages": 3}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="128,768,2048,8")
    ap.add_argument("--file", required=True)
    ap.add_argument("--down")
    ap.add_argument("--whole", help="the whole-layer picks (the vLLM file); default --file")
    ap.add_argument("--baseline")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch, kernel, meas, shape = open_bf16(a.shape)
    e = shape["e"]
    up_file = json.load(open(a.file))
    tuned = json.load(open(a.whole)) if a.whole else up_file
    down = json.load(open(a.down)) if a.down else {}
    base = json.load(open(a.baseline))["picks"] if a.baseline else {}
    rows = []
    print("%6s %10s %10s %8s %10s %8s %10s %8s %10s" % ("M", "tuned_us", "default_us", "speedup", "engine_us",
                                                        "tuned/eng", "split_us", "split", "split/dflt"))
    for key in sorted((k_ for k_ in tuned if k_.isdigit()), key=int):
        m = int(key)
        cfg = {c: tuned[key][c] for c in protocol.CFG_KEYS}
        r = {"bs": m, "tuned": meas.one(shape, cfg, m, M, True)}
        r["default"] = meas.one(shape, default_cfg(m, e), m, M, False)
        if key in base:
            r["engine_pick"] = meas.one(shape, base[key]["config"], m, M, False)
        meas.forget_aligns()
        if key in down and key in up_file:
            cfg = {c: up_file[key][c] for c in protocol.CFG_KEYS}
            dcfg = {c: down[key][c] for c in protocol.CFG_KEYS}
            L = meas.inputs(shape, m, 1)
            kernel.layer(L, cfg)
            # the engine runs GEMM1 with the file's config and GEMM2 with the _down file's, both
            # on one align (BLOCK_SIZE_M agrees)
            split_layer = functools.partial(kernel.layer, L, cfg, dcfg)
            split_layer()
            torch.cuda.synchronize()
            r["split_err"] = meas.check(L)
            g = meas.graph(split_layer)
            r["split"] = meas.time_graph(g, M, 4.0)[0]
            del g
            meas.forget_aligns()
        rows.append(r)
        t, d = r["tuned"], r["default"]
        eng = r.get("engine_pick", {}).get("median_us", float("nan"))
        sp = r.get("split", {}).get("median_us", float("nan"))
        tm, dm = t.get("median_us", float("nan")), d.get("median_us", float("nan"))
        print("%6d %10.1f %10.1f %7.2fx %10.1f %8.3f %10.1f %8.3f %9.2fx" % (
            m, tm, dm, dm / tm, eng, tm / eng, sp, sp / tm, dm / sp), flush=True)
    json.dump(rows, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
