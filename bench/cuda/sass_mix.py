#!/usr/bin/env python3
"""sass_mix.py - instruction mix of the fused-MoE GEMM kernels from `cuobjdump -sass` text.

For each function of each file: its instruction count, whether wgmma (HGMMA) / TMA (UTMALDG)
appear, the global stores of the epilogue by width, and for the main loop (the backward
branch whose body holds the most HMMA) the count of each opcode class per trip, the trip's
order (runs of the classes, to see the interleaving), and the per-HMMA ratios.
    sass_mix.py FILE.sass...
"""
import re
import sys
from collections import Counter

INS = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)\s*([^;]*);")
FUNC = re.compile(r"Function : (\S+)")

CLASSES = [
    ("pad(@!PT)", lambda op: op == "PAD"),
    ("HMMA", lambda op: op.startswith("HMMA")),
    ("HGMMA", lambda op: op.startswith("HGMMA")),
    ("LDGSTS", lambda op: op.startswith("LDGSTS")),
    ("LDSM", lambda op: op.startswith("LDSM")),
    ("BAR", lambda op: op.startswith("BAR")),
    ("DEPBAR", lambda op: op.startswith("DEPBAR") or op.startswith("LDGDEPBAR")),
    ("LDS", lambda op: op.startswith("LDS") and not op.startswith("LDSM")),
    ("addr", lambda op: op.split(".")[0] in ("IMAD", "IADD3", "LEA", "SHF", "LOP3", "IABS", "SEL", "MOV", "IMNMX",
                                           "R2UR", "UIADD3", "ULEA", "USHF", "UIMAD", "ULOP3", "UMOV", "PRMT",
                                           "VIADD", "IADD", "I2F", "F2I", "MUFU") and not op.startswith("MUFU.EX2")),
    ("ISETP/branch", lambda op: op.split(".")[0] in ("ISETP", "UISETP", "BRA", "PLOP3", "BSSY", "BSYNC", "WARPSYNC")),
    ("other", lambda op: True),
]


def cls(op):
    for name, f in CLASSES:
        if f(op):
            return name
    return "other"


def parse(path):
    funcs, cur = {}, None
    for line in open(path):
        m = FUNC.search(line)
        if m:
            cur = m.group(1)
            funcs[cur] = []
            continue
        m = INS.search(line)
        if m and cur:
            pred = (m.group(2) or "").strip()
            # "@!PT" never executes: ptxas pads with it; count it apart
            op = "PAD" if pred == "@!PT" else m.group(3)
            funcs[cur].append((int(m.group(1), 16), op, m.group(4).strip()))
    return funcs


def main_loop(ins):
    best = None
    for addr, op, args in ins:
        if op.startswith("BRA"):
            t = re.search(r"0x([0-9a-f]+)", args)
            if not t:
                continue
            tgt = int(t.group(1), 16)
            if tgt < addr:
                body = [i for i in ins if tgt <= i[0] <= addr]
                n = sum(1 for i in body if i[1].startswith("HMMA"))
                if n and (best is None or n > best[0] or (n == best[0] and len(body) < len(best[1]))):
                    best = (n, body, tgt, addr)
    return best


def runs(body):
    out, last, n = [], None, 0
    for _, op, _ in body:
        c = cls(op)
        if c in ("addr", "ISETP/branch", "other", "pad(@!PT)"):
            c = "."
        if c == last:
            n += 1
        else:
            if last:
                out.append(last if n == 1 else "%s*%d" % (last, n))
            last, n = c, 1
    if last:
        out.append(last if n == 1 else "%s*%d" % (last, n))
    # collapse runs of scalar work to one dot
    return " ".join(out)


for path in sys.argv[1:]:
    for fn, ins in parse(path).items():
        ops = Counter(op for _, op, _ in ins)
        stg = Counter(op for _, op, _ in ins if op.startswith("STG") or op.startswith("ST.") or op == "ST")
        hgmma = sum(v for k, v in ops.items() if k.startswith("HGMMA") or k.startswith("WARPGROUP"))
        tma = sum(v for k, v in ops.items() if k.startswith("UTMA") or k.startswith("UBLKCP"))
        print("== %s %s: %d instructions; HMMA %d, HGMMA/WARPGROUP %d, TMA %d, MUFU.EX2 %d; stores %s" % (
            path.split("/")[-1].replace(".sass", ""), fn, len(ins),
            sum(v for k, v in ops.items() if k.startswith("HMMA")), hgmma, tma,
            sum(v for k, v in ops.items() if k.startswith("MUFU.EX2")), dict(stg)))
        hm = sorted({op for _, op, _ in ins if op.startswith("HMMA")})
        if hm:
            print("   HMMA forms: %s" % ", ".join(hm))
        loop = main_loop(ins)
        if not loop:
            continue
        n, body, lo, hi = loop
        c = Counter(cls(op) for _, op, _ in body)
        detail = Counter(op for _, op, _ in body if cls(op) in ("LDGSTS", "LDSM", "BAR", "DEPBAR"))
        print("   main loop 0x%x..0x%x: %d instructions per trip (one BLOCK_K k-tile): %s" % (
            lo, hi, len(body), ", ".join("%s %d" % (k, c[k]) for k, _ in CLASSES if c[k])))
        real = len(body) - c["pad(@!PT)"]
        print("   per HMMA (static, padding excluded): %.2f instructions, %.2f non-HMMA; forms %s" % (
            real / n, (real - n) / n, dict(detail)))
        print("   order: %s" % runs(body))
        div = sum(1 for _, op, _ in body if op.startswith("MUFU.RCP"))
        print("   integer divisions (MUFU.RCP) in the loop body: %d" % div)
