#!/usr/bin/env python3
"""The ship guard's check on a GPU (bench/triton/guard.sh): an exported SGLang file is re-measured
in one process, under compare.py's method (moetune's measurer: L2 flushed before each replay, a
graph of 10 layers, the RSD rule, the reference check), at every key of the file and every batch
size the manifest says the guard checked between the keys. At each such M, side by side in
--rounds rounds (the order rotated each round):
  - shipped: the entry the engine takes from the exported file, the key nearest to M (SGLang's
    min(keys, key=|key - M|), so a tie goes to the smaller key); with a _down file, the _down
    file's nearest entry runs the second GEMM, with the up entry's BLOCK_SIZE_M (the whole layer,
    as the engine runs the pair);
  - default: the engine's default config for M (compare.default_cfg; where the manifest's guard
    names another default at a key, that one too, and the faster of them is the one to beat);
  - incumbent: the --incumbent file's nearest entry (with its own _down file where it has one);
    without --incumbent, the file the manifest's guard names as the incumbent, where it is here.
--switch-points adds the batch sizes where the engine switches between two different entries of
the exported file as written (keys added included), which the guard did not itself measure.
A loss is a shipped median above the other's by more than THRESHOLD (3 %) of it plus the two
deviations (each the standard deviation of its round medians) added in quadrature. Exit 0 when
the shipped entry loses nowhere, 1 when it loses somewhere (or fails to run), 2 on bad input.

    python3 bench/triton/guard_check.py --file F.json [--incumbent I.json] [--kernel moetune|sglang|vllm]
        [--switch-points] [--rounds 3] [--budget-ms 1000] [--threshold 0.03] [--out check.json]
        [--dry-run [--json]]

--dry-run lists what would be measured (M, where it comes from, the three configs) without torch
or Triton; --json prints that list as one JSON object a line.
"""
import argparse
import functools
import json
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # compare.py and stack.py
from compare import M as COMPARE_M, default_cfg  # noqa: E402  (the engine's default: one rule for both scripts)
from helper.protocol import CFG_KEYS  # noqa: E402  (stack.py, which compare.py imports, puts worker/ on the path)

THRESHOLD = 0.03
# compare.py's measuring settings, but a 1 s budget per config: every point is measured in rounds
MEASURE = dict(COMPARE_M, budget_ms=1000)


class BadInput(Exception):
    """Input that cannot be checked: one line for the user, exit 2."""


def cfg_text(c):
    """A config as moetune writes it: BLOCK_SIZE_MxNxKxGROUP_SIZE_Mxnum_warpsxnum_stages."""
    return "x".join(str(c[k]) for k in CFG_KEYS)


def cfg_parse(text):
    parts = text.split("x")
    if len(parts) != len(CFG_KEYS) or not all(p.isdigit() for p in parts):
        raise BadInput("config '%s' is not BMxBNxBKxGMxWxS" % text)
    return dict(zip(CFG_KEYS, (int(p) for p in parts)))


def load_json(path, what):
    try:
        with open(path) as f:
            return json.load(f)
    except OSError as e:
        raise BadInput("%s %s: %s" % (what, path, e.strerror))
    except ValueError as e:
        raise BadInput("%s %s is not JSON: %s" % (what, path, e))


def load_configs(path, what):
    """An engine config file: its keys as ints in file order (the order the engine's min() sees)
    and its entries, each checked to hold the six config fields."""
    d = load_json(path, what)
    if not isinstance(d, dict):
        raise BadInput("%s %s is not an object of batch sizes" % (what, path))
    keys, ents = [], {}
    for k, v in d.items():
        if not k.isdigit():
            continue  # vLLM's "triton_version" and the like
        if not isinstance(v, dict) or not all(isinstance(v.get(c), int) for c in CFG_KEYS):
            raise BadInput("%s %s: entry %s lacks one of %s" % (what, path, k, ", ".join(CFG_KEYS)))
        keys.append(int(k))
        ents[int(k)] = {c: v[c] for c in CFG_KEYS}
    if not keys:
        raise BadInput("%s %s has no batch-size keys" % (what, path))
    return keys, ents


def nearest(keys, m):
    """The engine's key for batch size m: min over the file's keys of |key - m|, the first in file
    order on a tie (SGLang's and vLLM's min(configs.keys(), key=lambda x: abs(x - M)))."""
    return min(keys, key=lambda k: abs(k - m))


def down_beside(path):
    d = path[:-5] + "_down.json" if path.endswith(".json") else None
    return d if d and os.path.exists(d) else None


class Engine:
    """One config file as the engine reads it, with its _down file where there is one."""

    def __init__(self, path, down, what):
        self.path, self.what = path, what
        self.keys, self.ents = load_configs(path, what)
        self.down_path = down
        self.dkeys, self.dents = load_configs(down, what + "'s _down file") if down else (None, None)

    def at(self, m):
        """(key, up config, down key, down config) the engine runs at batch size m. Both GEMMs share
        one align step, so where the _down entry's BLOCK_SIZE_M differs from the up entry's, SGLang
        runs it with the up entry's (and warns): so does this."""
        k = nearest(self.keys, m)
        if not self.dkeys:
            return k, self.ents[k], k, self.ents[k]
        dk = nearest(self.dkeys, m)
        return k, self.ents[k], dk, dict(self.dents[dk], BLOCK_SIZE_M=self.ents[k]["BLOCK_SIZE_M"])

    def bm_differs(self, m):
        """Whether the _down entry the engine takes at m has another BLOCK_SIZE_M than the up entry."""
        if not self.dkeys:
            return False
        return self.dents[nearest(self.dkeys, m)]["BLOCK_SIZE_M"] != self.ents[nearest(self.keys, m)]["BLOCK_SIZE_M"]


def switch_points(eng):
    """Where the engine switches between neighbouring keys of the file whose entries (up, and down
    where split) differ: the last M that takes the smaller key's entry and the first that takes the
    larger's, where they lie strictly between the two."""
    keys, out = sorted(eng.keys), set()
    for k1, k2 in zip(keys, keys[1:]):
        if eng.at(k1)[1::2] == eng.at(k2)[1::2]:
            continue
        first = next(m for m in range(k1 + 1, k2 + 1) if nearest(eng.keys, m) != k1)
        out |= {m for m in (first - 1, first) if k1 < m < k2}
    return out


def read_manifest(path, name):
    """The file's manifest record, which must carry the guard's figures."""
    man = load_json(path, "manifest")
    rec = man.get(name) if isinstance(man, dict) else None
    if not isinstance(rec, dict):
        raise BadInput("manifest %s has no record for %s" % (path, name))
    g = rec.get("guard")
    if not isinstance(g, dict):
        raise BadInput("manifest %s: %s has no guard figures (a sweep without the guard?)" % (path, name))
    for f in ("between_keys_checked", "keys_added"):
        if not isinstance(g.get(f, []), list) or not all(isinstance(x, int) for x in g.get(f, [])):
            raise BadInput("manifest %s: %s's guard.%s is not a list of batch sizes" % (path, name, f))
    return rec


def manifest_incumbent(ents):
    """The incumbent file the guard measured, from the manifest entries' sources ("PATH, key K"),
    where they name one file and it is here; else None (and a line on stderr when it is not here)."""
    paths = set()
    for e in ents.values():
        src = (((e or {}).get("guard") or {}).get("incumbent") or {}).get("source")
        if isinstance(src, str) and ", key " in src:
            paths.add(src.rsplit(", key ", 1)[0])
    if len(paths) != 1:
        return None
    path = paths.pop()
    if not os.path.isfile(path):
        print("guard_check: the manifest's incumbent %s is not here: give --incumbent" % path, file=sys.stderr)
        return None
    return path


def shape_of(rec, text):
    """(e, "E,N,K,topk") from --shape, else from the manifest record (bf16 only)."""
    if text:
        parts = text.split(",")
        if len(parts) != 4 or not all(p.isdigit() for p in parts):
            raise BadInput("--shape '%s' is not E,N,K,topk" % text)
        return int(parts[0]), text
    sh = rec.get("shape") or {}
    if sh.get("dtype", "bf16") != "bf16":
        raise BadInput("the file's shape is %s: the check measures bf16 only" % sh.get("dtype"))
    try:
        return sh["E"], "%d,%d,%d,%d" % (sh["E"], sh["N"], sh["K"], sh["topk"])
    except (KeyError, TypeError):
        raise BadInput("the manifest record has no shape E, N, K, topk; give --shape")


def plan(a):
    """The points to measure: per M, where it comes from and the candidates (name, up, down)."""
    shipped = Engine(a.file, a.down or down_beside(a.file), "exported file")
    rec = read_manifest(a.manifest or os.path.join(os.path.dirname(os.path.abspath(a.file)), "manifest.json"),
                        os.path.basename(a.file))
    e, shape = shape_of(rec, a.shape)
    g, ents = rec["guard"], rec.get("entries") or {}
    if not a.incumbent:
        a.incumbent = manifest_incumbent(ents)
    inc = Engine(a.incumbent, a.incumbent_down or down_beside(a.incumbent), "incumbent") if a.incumbent else None
    between = set(g.get("between_keys_checked", []))
    switch = switch_points(shipped) - between - set(shipped.keys) if a.switch_points else set()
    points = []
    for m in sorted(set(shipped.keys) | between | switch):
        where = "key" if m in shipped.ents else "switch" if m in switch else "between"
        if m in shipped.ents and m in between:
            where = "added" if m in g.get("keys_added", []) else "key+between"
        k, up, dk, down = shipped.at(m)
        why = ((ents.get(str(k)) or {}).get("guard") or {}).get("shipped", "?")
        p = {"m": m, "where": where, "shipped_key": k, "shipped_as": why, "shipped": cfg_text(up),
             "shipped_down": cfg_text(down) if shipped.dkeys else None, "shipped_down_key": dk if shipped.dkeys else None,
             "notes": []}
        if shipped.bm_differs(m):
            p["notes"].append("the exported _down entry's BLOCK_SIZE_M differs from the up entry's: run with the up's")
        dflt = [cfg_text(default_cfg(m, e))]
        named = (((ents.get(str(m)) or {}).get("guard") or {}).get("default") or {}).get("config")
        if where != "between" and named and named not in dflt:
            dflt.append(named)  # the guard measured another rule's default here: the faster is the one to beat
        p["default"] = dflt
        eg = (ents.get(str(m)) or {}).get("guard") or {} if where != "between" else {}
        for role in ("default", "incumbent"):  # what the manifest says the entry buys, to set beside ours
            x = (eg.get(role) or {}).get("speedup")
            p["manifest_%s_speedup" % role] = x if isinstance(x, (int, float)) else None
        if inc:
            ik, iup, idk, idown = inc.at(m)
            p.update(incumbent_key=ik, incumbent=cfg_text(iup),
                     incumbent_down=cfg_text(idown) if inc.dkeys else None)
            if inc.bm_differs(m):
                p["notes"].append("the incumbent's _down entry's BLOCK_SIZE_M differs from its up entry's: run with the up's")
        points.append(p)
    missing = [k for k in g.get("keys_added", []) if k not in shipped.ents]
    if missing:
        raise BadInput("the manifest lists keys added %s that %s lacks" % (missing, a.file))
    return shape, points, rec


def candidates(p):
    """The distinct (role, up, down) pairs a point measures; a role whose pair is the shipped one
    reuses its measurement."""
    out = [("shipped", p["shipped"], p["shipped_down"] or p["shipped"])]
    for i, d in enumerate(p["default"]):
        out.append(("default" if i == 0 else "default%d" % i, d, d))
    if p.get("incumbent"):
        out.append(("incumbent", p["incumbent"], p["incumbent_down"] or p["incumbent"]))
    return out


def print_plan(points, as_json):
    if as_json:
        for p in points:
            print(json.dumps(p, sort_keys=True))
        return
    print("%6s %-11s %-30s %-18s %s" % ("M", "where", "shipped (key, as)", "default", "incumbent (key)"))
    for p in points:
        s = "%s@%d %s" % (p["shipped"], p["shipped_key"], p["shipped_as"])
        if p["shipped_down"]:
            s += " down %s@%d" % (p["shipped_down"], p["shipped_down_key"])
        inc = "%s@%d" % (p["incumbent"], p["incumbent_key"]) if p.get("incumbent") else "-"
        if p.get("incumbent_down"):
            inc += " down %s" % p["incumbent_down"]
        print("%6d %-11s %-30s %-18s %s" % (p["m"], p["where"], s, ",".join(p["default"]), inc))
        for n in p["notes"]:
            print("%6s note: %s" % ("", n))


# ---- measuring (torch and Triton from here on)

def measure_pair(torch, kernel, meas, shape, m, up, down):
    """One (up, down) pair at batch size m: compare.py's stats, or {"error": why}."""
    from helper import reference
    from helper.protocol import one_line
    L = meas.inputs(shape, m, MEASURE["seed"])
    # one layer as the engine runs it: the align and the first GEMM with up, the second with down
    run = functools.partial(kernel.layer, L, up, down)
    try:
        run()  # the first launch compiles (a hit in the tune's Triton cache where it shares it)
        torch.cuda.synchronize()
        g = meas.graph(run)
        L.out.fill_(float("nan"))
        st = meas.time_graph(g, MEASURE, MEASURE["budget_ms"] / 1000.0)[0]
        del g
        err = meas.check(L)
    except Exception as e:  # a config that does not run is data: the row says why
        return {"error": one_line(e)}
    finally:
        meas.forget_aligns()
    if not err <= reference.REL_TOL:
        return {"error": "wrong result: max error %.3g of the output range" % err}
    st["rel_err"] = err
    return st


def combine(rounds):
    """Round medians to one figure: their median, and their standard deviation (one round: the
    round's own sample deviation)."""
    bad = [r for r in rounds if "error" in r]
    if bad:
        return {"error": bad[0]["error"]}
    from helper.measure import stats
    meds = sorted(r["median_us"] for r in rounds)
    st = stats(meds)
    sd = st["stddev_us"] if len(meds) > 1 else rounds[0]["stddev_us"]
    return {"median_us": st["median_us"], "sd_us": sd, "rounds": meds}


def loses(s, o, threshold):
    """Whether shipped s is slower than o beyond the noise: by more than threshold of o's median
    plus the two deviations in quadrature."""
    return s["median_us"] - o["median_us"] > threshold * o["median_us"] + math.hypot(s["sd_us"], o["sd_us"])


def measure_point(torch, kernel, meas, shape, p, rounds):
    """All candidates of one point, side by side: each round measures every distinct pair once, the
    order rotated each round. Returns {role: combined figure}."""
    cands = candidates(p)
    pairs = []
    for _, up, down in cands:
        if (up, down) not in pairs:
            pairs.append((up, down))
    got = {pr: [] for pr in pairs}
    for r in range(rounds):
        for i in range(len(pairs)):
            up, down = pairs[(i + r) % len(pairs)]
            got[(up, down)].append(measure_pair(torch, kernel, meas, shape, p["m"], cfg_parse(up), cfg_parse(down)))
    return {role: dict(combine(got[(up, down)]), same_as_shipped=(up, down) == pairs[0]) for role, up, down in cands}


def verdict(p, res, threshold):
    """(row for the table and --out, list of losses)."""
    s = res["shipped"]
    row = dict(p, measured=res)
    if "error" in s:
        return row, ["M=%d: the shipped entry does not run: %s" % (p["m"], s["error"])]
    lost = []
    dflts = [v for k, v in res.items() if k.startswith("default") and "error" not in v]
    if dflts:
        d = min(dflts, key=lambda v: v["median_us"])
        row["default_us"], row["default_ratio"] = d["median_us"], d["median_us"] / s["median_us"]
        if not d["same_as_shipped"] and loses(s, d, threshold):
            lost.append("M=%d: shipped %.1f us, the default %.1f us" % (p["m"], s["median_us"], d["median_us"]))
    i = res.get("incumbent")
    if i and "error" not in i:
        row["incumbent_us"], row["incumbent_ratio"] = i["median_us"], i["median_us"] / s["median_us"]
        if not i["same_as_shipped"] and loses(s, i, threshold):
            lost.append("M=%d: shipped %.1f us, the incumbent %.1f us" % (p["m"], s["median_us"], i["median_us"]))
    return row, lost


def what_shipped(p, res):
    """Which config the shipped entry is at this M, by identity: the default's, the incumbent's or
    the searched pick's (and the key it comes from)."""
    if res["default"].get("same_as_shipped"):
        is_ = "=default"
    elif res.get("incumbent", {}).get("same_as_shipped"):
        is_ = "=incumbent"
    else:
        is_ = "pick"
    return "%s (key %d)" % (is_, p["shipped_key"])


def run_check(a, shape, points):
    from stack import open_bf16
    torch, kernel, meas, sh = open_bf16(shape, a.kernel)
    MEASURE["budget_ms"] = a.budget_ms
    print("kernel %s, shape E,N,K,topk %s, %d points, %d rounds side by side" % (kernel.name, shape, len(points),
                                                                              a.rounds))
    print("a loss: shipped median > other's x %.2f + sqrt(sd_shipped^2 + sd_other^2), sd = the spread of the "
          "round medians" % (1 + a.threshold))
    print("dflt/ship and inc/ship: re-measured here; mf: the manifest's figure at a key")
    print("%6s %-11s %10s %10s %10s %9s %6s %9s %6s  %-22s %s" % (
        "M", "where", "shipped_us", "default_us", "incumb_us", "dflt/ship", "mf", "inc/ship", "mf", "shipped",
        "verdict"), flush=True)
    rows, losses, unmeasured = [], [], []
    for p in points:
        res = measure_point(torch, kernel, meas, sh, p, a.rounds)
        row, lost = verdict(p, res, a.threshold)
        rows.append(row)
        losses += lost
        for role, v in res.items():
            if role != "shipped" and "error" in v:
                unmeasured.append("M=%d %s: %s" % (p["m"], role, v["error"]))
        f = lambda k: "%10.1f" % row[k] if k in row else "%10s" % "-"  # noqa: E731
        g = lambda k: "%8.3fx" % row[k] if k in row else "%9s" % "-"  # noqa: E731
        s = res["shipped"]
        mf = lambda k: "%6.3f" % p[k] if p.get(k) is not None else "%6s" % "-"  # noqa: E731
        print("%6d %-11s %s %s %s %s %s %s %s  %-22s %s" % (
            p["m"], p["where"], "%10.1f" % s["median_us"] if "error" not in s else "%10s" % "error",
            f("default_us"), f("incumbent_us"), g("default_ratio"), mf("manifest_default_speedup"),
            g("incumbent_ratio"), mf("manifest_incumbent_speedup"), what_shipped(p, res),
            "LOSS" if lost else "ok"), flush=True)
        for n in p["notes"]:
            print("%6s note: %s" % ("", n))
    for u in unmeasured:
        print("not measured: %s" % u)
    for x in losses:
        print("LOSS %s" % x)
    print("guard_check: %d points, %d losses beyond %.0f %% plus the deviations" % (len(points), len(losses),
                                                                                  100 * a.threshold))
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"kernel": kernel.name, "shape": shape, "threshold": a.threshold, "rounds": a.rounds,
                       "rows": rows, "losses": losses, "not_measured": unmeasured}, f, indent=1)
    return 1 if losses else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--file", required=True, help="the exported engine file (SGLang's, not its _down file)")
    ap.add_argument("--down", help="its _down file (default: the one beside it, if any)")
    ap.add_argument("--manifest", help="default: manifest.json beside --file")
    ap.add_argument("--incumbent", help="the file the engine would load otherwise (default: the one the manifest's "
                                        "guard names, where it is here)")
    ap.add_argument("--incumbent-down", help="the incumbent's _down file (default: the one beside it, if any)")
    ap.add_argument("--kernel", default="moetune", choices=("moetune", "sglang", "vllm"),
                    help="the kernel the file was tuned for (an engine's must be importable)")
    ap.add_argument("--shape", help="E,N,K,topk (default: the manifest record's)")
    ap.add_argument("--switch-points", action="store_true",
                    help="also where the exported file's nearest key changes between two different entries "
                         "(after the keys the guard added), where the guard did not measure")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--budget-ms", type=int, default=MEASURE["budget_ms"], help="per config and round")
    ap.add_argument("--threshold", type=float, default=THRESHOLD)
    ap.add_argument("--out", help="the measurements and verdicts as JSON")
    ap.add_argument("--dry-run", action="store_true", help="list what would be measured; no torch or Triton")
    ap.add_argument("--json", action="store_true", help="with --dry-run: one JSON object a point")
    a = ap.parse_args()
    if a.rounds < 1 or a.budget_ms < 1 or not a.threshold >= 0:
        print("guard_check: --rounds and --budget-ms must be positive, --threshold not negative", file=sys.stderr)
        return 2
    try:
        shape, points, _ = plan(a)
    except BadInput as e:
        print("guard_check: %s" % e, file=sys.stderr)
        return 2
    if a.dry_run:
        if not a.json:
            print("would measure kernel %s, shape E,N,K,topk %s, %d points x %d rounds" % (a.kernel, shape,
                                                                                        len(points), a.rounds))
        print_plan(points, a.json)
        return 0
    return run_check(a, shape, points)


if __name__ == "__main__":
    sys.exit(main())
