"""The modes benchmark's picks and score, on stability.py's readers (run from the repository root).
  score.py picks W M   the configs the sweeps W/<n>-<build>/r.db picked at batch size M, comma-separated
  score.py score W     each sweep's picks at 128 and 256 against the fastest pick there, re-measured
                       side by side in W/rm-<M>.db
MT_BIN_DIR: the binaries whose `moetune results --best` reads the picks."""
import glob
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
import stability  # noqa: E402


def sweeps(w):
    return sorted(glob.glob(w + "/[0-9]*-*/"), key=lambda d: int(os.path.basename(d.rstrip("/")).split("-")[0]))


def picks_at(d, m):
    return {c: med for (_, bs), (c, med) in stability.moetune_picks(d + "r.db").items() if bs == m}


if sys.argv[1] == "picks":
    w, m = sys.argv[2], int(sys.argv[3])
    print(",".join(sorted({stability.cfg_text(c) for d in sweeps(w) for c in picks_at(d, m)})))
else:
    w = sys.argv[2]
    for m in (128, 256):
        db = f"{w}/rm-{m}.db"
        re = {c: med for (_, c), med in stability.medians(db).items()} if os.path.exists(db) else {}
        fastest = min(re.values()) if re else None
        for d in sweeps(w):
            done = "rc 0 " in open(d + "out").read()
            for c, med in picks_at(d, m).items():
                ratio = f"{re[c] / fastest:.4f}" if c in re else "-"
                print(f"M={m}", os.path.basename(d.rstrip("/")), "done" if done else "stopped", stability.cfg_text(c),
                      f"{med:.1f}", "side by side", ratio)
