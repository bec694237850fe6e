"""--probe: what `moetune doctor` and export --engine ask about the interpreter, the device and an engine."""
import os
import sys

from .engines import ENGINES, EngineLayout, ask_engine, engine_version
from .protocol import emit, one_line


def probe_stack(out):
    """torch, then triton, each version into out, and the first thing missing into out["error"]:
    torch importing while triton does not is said so (not "torch is not importable")."""
    try:
        import torch
    except Exception as e:  # ImportError, or a broken install raising something else
        out["error"] = "torch is not importable by %s: %s" % (sys.executable, one_line(e))
        return None
    out["torch"] = str(getattr(torch, "__version__", "?")).split("+")[0]
    try:
        import triton
    except Exception as e:
        out["error"] = "triton is not importable by %s (torch %s): %s" % (sys.executable, out["torch"], one_line(e))
        return None
    out["triton"] = triton.__version__
    return torch


def probe_config_dir(engine, layout):
    """The engine's config folder: its config_subdir (engines.json) of the folder its lookup module
    lives in (SGLang: the folder itself, holding configs/triton_X_Y_Z/; vLLM: its flat configs/),
    else of the first of its config_modules' folders; or None."""
    sub = ENGINES[engine]["config_subdir"]
    hit = layout.get("lookup") if layout else None
    mod = hit[2] if hit else None
    if mod is not None and getattr(mod, "__file__", None):
        d = os.path.dirname(os.path.realpath(mod.__file__))
        return os.path.join(d, sub) if sub else d
    import importlib
    for m in ENGINES[engine]["config_modules"]:
        try:
            spec = importlib.util.find_spec(m)
        except Exception:
            spec = None
        if spec and spec.submodule_search_locations:
            d = list(spec.submodule_search_locations)[0]
            return os.path.join(d, sub) if sub else d
    return None


def probe(engine, names=None):
    """One {"probe": ...} line (HELPER.md "Probe"): the interpreter, torch, Triton, the device,
    and the engine: its version, layout, config folder and, for --names, its own answers."""
    out = {"python": sys.executable, "python_version": "%d.%d.%d" % sys.version_info[:3],
           "torch": None, "triton": None, "error": None, "device": None,
           "engine": {"name": engine, "version": None, "config_dir": None, "env": {}, "error": None,
                      "layout": None, "own": None}}
    eng = out["engine"]
    var = ENGINES[engine]["config_env"]
    eng["env"][var] = os.environ.get(var)
    torch = probe_stack(out)
    if torch is not None:
        try:
            if torch.cuda.is_available():
                out["device"] = torch.cuda.get_device_name(0)
            else:
                out["error"] = "no CUDA GPU visible to torch %s in %s" % (torch.__version__, sys.executable)
        except Exception as e:
            out["error"] = "torch %s in %s cannot list GPUs: %s" % (torch.__version__, sys.executable, one_line(e))
    eng["version"] = engine_version(engine)
    layout = None
    if eng["version"] is None:
        eng["error"] = "%s is not installed in %s" % (engine, sys.executable)
    else:
        layout = EngineLayout(engine)
        if torch is not None:  # the engine's modules import torch and triton
            eng["layout"] = layout.describe()
            if names is not None:
                eng["own"] = ask_engine(layout, names)
        eng["config_dir"] = probe_config_dir(engine, layout if torch is not None else None)
        if eng["config_dir"] is None:
            eng["error"] = "%s %s: no config lookup module found%s" % (
                engine, eng["version"], (" (%s)" % layout.errors[-1]) if layout.errors else "")
    emit({"probe": out})
    return 0
