"""Launches every config of a rules_dump list once with moetune's Triton kernel on this GPU and
compares Triton's own answer with the static rule's verdict.

    python3 rules_check.py LIST.csv E N K TOPK [PROCS]      (ONLY=reject: launch only the rejected)

Prints one line per disagreement and a summary; exit 1 when the rule rejects a config that ran
(the rule must never do that), 0 otherwise (configs the rule lets through but Triton refuses are
only counted: the worker then stores them as compile errors)."""
import multiprocessing as mp
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "worker"))


def _init(e, n, k, topk):
    global G
    import torch
    import moetune_kernel as mk
    dev = torch.device("cuda")
    torch.manual_seed(0)
    m = 64
    ids = torch.randint(0, e, (m, topk), device=dev, dtype=torch.int32)
    G = dict(mk=mk, torch=torch, e=e, ids=ids, topk=topk,
             a=torch.randn(m, k, device=dev, dtype=torch.bfloat16) * 0.1,
             b=torch.randn(e, n, k, device=dev, dtype=torch.bfloat16) * 0.1,
             c=torch.empty(m * topk, n, device=dev, dtype=torch.bfloat16),
             w=torch.ones(m * topk, device=dev, dtype=torch.float32))


def _try(text):
    mk, torch = G["mk"], G["torch"]
    bm, bn, bk, gm, nw, ns = (int(x) for x in text.split("x"))
    cfg = dict(BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=bk, GROUP_SIZE_M=gm, num_warps=nw, num_stages=ns)
    try:
        al = mk.Align(G["ids"], G["e"], bm)
        al.run()
        mk.gemm(G["a"], G["b"], G["c"], G["w"], al, G["topk"], False, cfg)
        torch.cuda.synchronize()
        return text, "ok", ""
    except Exception as ex:  # OutOfResources and anything else Triton raises
        name = type(ex).__name__
        return text, ("oor" if "OutOfResources" in name or "out of resource" in str(ex).lower() else "error"), \
            str(ex).splitlines()[0][:160] if str(ex) else name


def main():
    path, e, n, k, topk = sys.argv[1], *(int(x) for x in sys.argv[2:6])
    procs = int(sys.argv[6]) if len(sys.argv) > 6 else 12
    verdict = {}
    for line in open(path):
        f = line.strip().split(",")
        if os.environ.get("ONLY", f[1]) == f[1]:
            verdict[f[0]] = f[1]
    ctx = mp.get_context("spawn")
    with ctx.Pool(procs, initializer=_init, initargs=(e, n, k, topk)) as pool:
        got = dict((t, (o, d)) for t, o, d in pool.imap_unordered(_try, sorted(verdict), chunksize=4))
    bad, missed, counts = 0, 0, {}
    for t, v in sorted(verdict.items()):
        o, d = got[t]
        counts[(v, o)] = counts.get((v, o), 0) + 1
        if v == "reject" and o == "ok":
            bad += 1
            print("RULE REJECTS A CONFIG THAT RAN: %s" % t)
        elif v == "ok" and o == "oor":
            missed += 1
        elif o == "error":
            print("other error: %s: %s" % (t, d))
    print("summary: %s" % ", ".join("rule %s / triton %s: %d" % (v, o, c) for (v, o), c in sorted(counts.items())))
    print("rule rejected a config that ran: %d; rule passed a config Triton refused: %d" % (bad, missed))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
