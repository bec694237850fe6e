"""The engine's own loader against files moetune exported (tests/gpu/e2e_engines.sh).

    python3 engine_loader_check.py ENGINE LOOKUP_MODULE FOLDER E N K TOPK M,M,...

Runs in an interpreter where the engine (or a snapshot of it) imports, with the engine's folder
variable (SGLANG_MOE_CONFIG_DIR / VLLM_TUNED_CONFIG_FOLDER) pointing at FOLDER. Asks the engine's
get_moe_configs for the shape (SGLang: the main and the _down file) and try_get_optimal_moe_config
for each batch size M, and checks that every entry of the exported file comes back as written.
Prints one JSON line; exit 0 when every entry matched.
"""
import glob
import importlib
import inspect
import json
import os
import sys


def entries(path):
    with open(path) as f:
        d = json.load(f)
    return {int(k): v for k, v in d.items() if k.isdigit()}


def main(argv):
    engine, modname, folder = argv[0], argv[1], argv[2]
    e, n, k, topk = (int(x) for x in argv[3:7])
    ms = [int(x) for x in argv[7].split(",")]
    mod = importlib.import_module(modname)
    getc = getattr(mod.get_moe_configs, "__wrapped__", mod.get_moe_configs)  # no lru_cache between runs
    name = mod.get_config_file_name(e, n, None)
    if engine == "sglang":
        files = glob.glob(os.path.join(folder, "configs", "triton_*", name))
    else:
        files = [os.path.join(folder, name)]
    res = {"engine": engine, "module": modname, "file": name, "files": files, "checked": 0, "bad": []}
    if len(files) != 1 or not os.path.isfile(files[0]):
        res["bad"].append("no single exported file %s under %s" % (name, folder))
        print(json.dumps(res))
        return 1
    want = entries(files[0])
    got = getc(e, n, None)
    pairs = [("main", want, got)]
    if engine == "sglang":
        down_path = files[0][:-5] + "_down.json"
        want_down = entries(down_path) if os.path.isfile(down_path) else None
        got_down = getc(e, n, None, down_moe=True)
        if want_down is None:
            res["bad"].append("no _down file beside %s" % files[0])
        else:
            pairs.append(("down", want_down, got_down))
    for what, w, g in pairs:
        if g is None:
            res["bad"].append("%s: the engine's get_moe_configs found no file" % what)
            continue
        for m, cfg in w.items():
            res["checked"] += 1
            if g.get(m) != cfg:
                res["bad"].append("%s M=%d: file %s, engine %s" % (what, m, cfg, g.get(m)))
    # the pick per batch size, through the engine's own entry point
    opt = mod.try_get_optimal_moe_config
    kw = {"return_down_config": True} if "return_down_config" in inspect.signature(opt).parameters else {}
    for m in ms:
        r = opt((e, 2 * n, k), (e, k, n), topk, None, m, **kw)
        cfg = r[0] if kw else r
        res["checked"] += 1
        if cfg != want.get(m):
            res["bad"].append("try_get_optimal_moe_config M=%d: %s, file %s" % (m, cfg, want.get(m)))
        if kw and len(pairs) > 1:
            down = r[1][0]
            res["checked"] += 1
            if down != pairs[1][1].get(m):
                res["bad"].append("down config M=%d: %s, file %s" % (m, down, pairs[1][1].get(m)))
    print(json.dumps(res))
    return 0 if not res["bad"] and res["checked"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
