#!/usr/bin/env python3
"""bench/triton/routing.sh's measuring parts (bench/RESULTS.md, "Triton backend"):

  zipf OUT.npy --experts E --topk K --tokens T [--s 1.0] [--seed 7]
      a routing capture whose expert loads follow a Zipf law (expert i drawn with weight
      1 / (i + 1)^s, experts shuffled so the hot ones are not the first ids), written as NumPy
      writes .npy (int32 [tokens, topk]), without NumPy;
  compare --uniform U.json --skewed S.json --routing R.npy --shape E,N,K,topk --out J.json
      per batch size the config tuned on uniform routing (U) and the one tuned on the capture (S),
      both measured again on the capture in one process: which batch sizes changed their winner
      and by how much;
  fp8 --file F.json --shape E,N,K,topk --block BN,BK --out J.json
      per batch size the tuned fp8 config against the engines' fp8 block default config
      (SGLang and vLLM before PR 34846: 64/BN/BK GROUP 32, 4 warps, 3 stages; vLLM after it:
      BLOCK_SIZE_M 16 up to M 64 and GROUP 1 up to M 16), measured in one process.
"""
import argparse
import json
import os
import random
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "worker"))
from helper import device, kernels, measure, protocol, routing  # noqa: E402

M = {"warmup": 5, "min_samples": 20, "max_samples": 200, "rsd_target": 0.005, "budget_ms": 4000, "seed": 1}


def npy_bytes(ids, tokens, topk):
    """int32 [tokens, topk] as a version-1 .npy image (header padded to 64 bytes, as NumPy does)."""
    h = "{'descr': '<i4', 'fortran_order': False, 'shape': (%d, %d), }" % (tokens, topk)
    h += " " * (64 - (10 + len(h) + 1) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode("latin1") + struct.pack("<%di" % len(ids), *ids)


def zipf_ids(experts, topk, tokens, s=1.0, seed=7):
    """tokens x topk distinct expert ids per token, expert popularity Zipf(s) over a shuffled order."""
    rng = random.Random(seed)
    order = list(range(experts))
    rng.shuffle(order)
    weights = [1.0 / (i + 1) ** s for i in range(experts)]
    cum, acc = [], 0.0
    for w in weights:
        acc += w
        cum.append(acc)
    import bisect
    ids = []
    for _ in range(tokens):
        row = []
        while len(row) < topk:
            e = order[min(bisect.bisect_left(cum, rng.random() * acc), experts - 1)]
            if e not in row:
                row.append(e)
        ids.extend(row)
    return ids


def loads(ids, experts):
    n = [0] * experts
    for e in ids:
        n[e] += 1
    return n


def picks(path):
    """{batch size: config dict} of an exported config file (engine keys like triton_version skipped)."""
    data = json.load(open(path))
    return {int(k): {c: v[c] for c in protocol.CFG_KEYS} for k, v in data.items() if k.isdigit()}


def changed(uniform, skewed):
    """Batch sizes (both files have) whose winner differs, in order."""
    return [m for m in sorted(set(uniform) & set(skewed)) if uniform[m] != skewed[m]]


def fp8_defaults(m, block):
    """The engines' untuned fp8 block-scale configs for batch size m: (name, config) pairs."""
    bn, bk = block
    classic = {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": bn, "BLOCK_SIZE_K": bk, "GROUP_SIZE_M": 32,
               "num_warps": 4, "num_stages": 3}
    recent = dict(classic, BLOCK_SIZE_M=16 if m <= 64 else 64, GROUP_SIZE_M=1 if m <= 16 else 32)
    return [("sglang_default", classic), ("vllm_new_default", recent)]


def cfg_text(c):
    return "%dx%dx%dx%dx%dx%d" % tuple(c[k] for k in protocol.CFG_KEYS)


def parse_shape(text, block=None):
    e, n, k, topk = (int(v) for v in text.split(","))
    s = {"e": e, "n": n, "k": k, "topk": topk, "dtype": "bf16", "block_n": 0, "block_k": 0}
    if block:
        s.update(dtype="fp8_w8a8", block_n=block[0], block_k=block[1])
    return s


def cmd_zipf(a):
    ids = zipf_ids(a.experts, a.topk, a.tokens, a.s, a.seed)
    with open(a.out, "wb") as f:
        f.write(npy_bytes(ids, a.tokens, a.topk))
    ld = sorted(loads(ids, a.experts), reverse=True)
    mean = len(ids) / a.experts
    print("wrote %s: %d tokens x top-%d over %d experts, Zipf s=%.2f; hottest expert %.1fx the mean load, "
          "coldest %.2fx" % (a.out, a.tokens, a.topk, a.experts, a.s, ld[0] / mean, ld[-1] / mean))
    return 0


def measurer(shape, routing=None):
    torch, triton = device.import_stack()
    kernel = kernels.MoetuneKernel(torch, triton)
    meas = measure.Measurer(torch, kernel)
    rt = None
    if routing:
        rt = routing.Routing(routing, "", torch)
        rt.seed = M["seed"]
        rt.check(shape)
    meas.set_shape(shape, M["seed"], rt)
    return meas


def cmd_compare(a):
    shape = parse_shape(a.shape)
    uni, skw = picks(a.uniform), picks(a.skewed)
    meas = measurer(shape, a.routing)
    rows = []
    print("%6s %-22s %-22s %8s %12s %12s %8s" % ("M", "uniform pick", "skewed pick", "changed", "uniform_us",
                                               "skewed_us", "gain"))
    for m in sorted(set(uni) & set(skw)):
        ru = meas.one(shape, uni[m], m, M, False)
        rs = ru if uni[m] == skw[m] else meas.one(shape, skw[m], m, M, False)
        meas.forget_aligns()
        tu, ts = ru.get("median_us", float("nan")), rs.get("median_us", float("nan"))
        rows.append({"bs": m, "uniform_pick": uni[m], "skewed_pick": skw[m], "changed": uni[m] != skw[m],
                     "uniform_pick_on_skew": ru, "skewed_pick_on_skew": rs, "gain": tu / ts})
        print("%6d %-22s %-22s %8s %12.1f %12.1f %7.3fx" % (m, cfg_text(uni[m]), cfg_text(skw[m]),
                                                           "yes" if uni[m] != skw[m] else "-", tu, ts, tu / ts),
              flush=True)
    ch = [r for r in rows if r["changed"]]
    print("%d of %d batch sizes change their winner on the skewed routing%s" % (
        len(ch), len(rows), (": " + ", ".join("M=%d %.3fx" % (r["bs"], r["gain"]) for r in ch)) if ch else ""))
    json.dump(rows, open(a.out, "w"), indent=1)
    return 0


def cmd_fp8(a):
    block = tuple(int(v) for v in a.block.split(","))
    shape = parse_shape(a.shape, block)
    tuned = picks(a.file)
    meas = measurer(shape)
    rows = []
    print("%6s %-22s %10s %14s %8s %14s %8s" % ("M", "tuned", "tuned_us", "sglang_def_us", "speedup",
                                              "vllm_new_def_us", "speedup"))
    for m in sorted(tuned):
        r = {"bs": m, "tuned_config": tuned[m], "tuned": meas.one(shape, tuned[m], m, M, False)}
        for name, cfg in fp8_defaults(m, block):
            r[name] = meas.one(shape, cfg, m, M, False)
            r[name + "_config"] = cfg
        meas.forget_aligns()
        rows.append(r)
        t = r["tuned"].get("median_us", float("nan"))
        d1 = r["sglang_default"].get("median_us", float("nan"))
        d2 = r["vllm_new_default"].get("median_us", float("nan"))
        print("%6d %-22s %10.1f %14.1f %7.2fx %14.1f %7.2fx" % (m, cfg_text(tuned[m]), t, d1, d1 / t, d2, d2 / t),
              flush=True)
    json.dump(rows, open(a.out, "w"), indent=1)
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    z = sub.add_parser("zipf")
    z.add_argument("out")
    z.add_argument("--experts", type=int, required=True)
    z.add_argument("--topk", type=int, required=True)
    z.add_argument("--tokens", type=int, default=16384)
    z.add_argument("--s", type=float, default=1.0)
    z.add_argument("--seed", type=int, default=7)
    c = sub.add_parser("compare")
    c.add_argument("--uniform", required=True)
    c.add_argument("--skewed", required=True)
    c.add_argument("--routing", required=True)
    c.add_argument("--shape", required=True)
    c.add_argument("--out", required=True)
    f = sub.add_parser("fp8")
    f.add_argument("--file", required=True)
    f.add_argument("--shape", required=True)
    f.add_argument("--block", default="128,128")
    f.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    return {"zipf": cmd_zipf, "compare": cmd_compare, "fp8": cmd_fp8}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
