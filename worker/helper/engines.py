"""Where each engine release keeps its fused-MoE pieces (found by table, else by search), and the
engine's own config-file answer (--probe --names)."""
import ast
import contextlib
import json
import logging
import os
import sys

from .protocol import Fatal, ProtocolError, get_uint, one_line


def _read_table():
    """The engine table (engines.json beside this file, which the C side is built from): name ->
    its object, in the file's order (the first is the default)."""
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "engines.json"), encoding="utf-8") as f:
        return {e["name"]: e for e in json.load(f)["engines"]}


ENGINES = _read_table()
ENGINE_NAMES = tuple(ENGINES)
ENGINE_DIST = {name: e["dist"] for name, e in ENGINES.items()}
# Where each layout keeps each piece, newest first (docs/engines.md names the releases). A piece
# in none of these places is searched for in the installed package (find_in_package).
ENGINE_PLACES = {name: e["places"] for name, e in ENGINES.items()}


def engine_version(name):
    """The installed engine's version, or None when the interpreter has no such engine."""
    try:
        from importlib import metadata
        return metadata.version(ENGINE_DIST[name])
    except Exception:
        pass
    try:
        import importlib
        return str(getattr(importlib.import_module(name), "__version__", "unknown"))
    except Exception:
        return None


LAUNCHER_NAMES = ("invoke_fused_moe_kernel", "invoke_fused_moe_triton_kernel")
KERNEL_NAME = "fused_moe_kernel"
# What each piece is called; the lookup is a module defining both functions.
PIECES = {"launcher": LAUNCHER_NAMES, "align": ("moe_align_block_size",),
          "lookup": ("get_config_file_name", "get_moe_configs"), "prepare": ("_prepare_expert_assignment",)}
PIECE_TEXT = {"launcher": "fused-MoE launcher (%s)" % " or ".join(LAUNCHER_NAMES),
              "align": "align step moe_align_block_size",
              "lookup": "config lookup (get_config_file_name with get_moe_configs)",
              "prepare": "expert-assignment step _prepare_expert_assignment"}
SEARCH_MAX_FILES = 20000
SEARCH_MAX_BYTES = 4 << 20


def _jit_decorated(fn):
    for d in fn.decorator_list:
        d = d.func if isinstance(d, ast.Call) else d
        if getattr(d, "attr", getattr(d, "id", "")) == "jit":
            return True
    return False


def _launches_kernel(fn):
    """Whether a function's body launches KERNEL_NAME[grid](...)."""
    for node in ast.walk(fn):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript) and \
                isinstance(node.func.value, ast.Name) and node.func.value.id == KERNEL_NAME:
            return True
    return False


def scan_module_source(text):
    """What one engine source file defines, parsed (not imported): {piece: [function name]} for
    the pieces of PIECES and "kernel" (a @triton.jit fused_moe_kernel)."""
    tree = ast.parse(text)
    found = {}
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    names = {n.name for n in defs}
    for fn in defs:
        jit = _jit_decorated(fn)
        if fn.name == KERNEL_NAME and jit:
            found.setdefault("kernel", []).append(fn.name)
        elif not jit and _launches_kernel(fn):
            found.setdefault("launcher", []).append(fn.name)
        elif fn.name == "moe_align_block_size" and not jit:
            found.setdefault("align", []).append(fn.name)
        elif fn.name == "_prepare_expert_assignment":
            found.setdefault("prepare", []).append(fn.name)
    if {"get_config_file_name", "get_moe_configs"} <= names:
        found["lookup"] = ["get_config_file_name"]
    return found


_SEARCHED = {}


def find_in_package(top):
    """The modules of the installed package top (every folder of its __path__) that define a
    fused-MoE piece, found by what they are: {piece: [(module, function)]}, each list ordered
    launcher names first, then by path. Files that do not mention a piece are not parsed."""
    if top in _SEARCHED:
        return _SEARCHED[top]
    import importlib.util
    out = {}
    try:
        spec = importlib.util.find_spec(top)
        roots = list(spec.submodule_search_locations or []) if spec else []
    except Exception:
        roots = []
    marks = (KERNEL_NAME, "moe_align_block_size", "get_moe_configs", "_prepare_expert_assignment")
    seen = 0
    for root in roots:
        for d, dirs, files in os.walk(root):
            dirs[:] = sorted(x for x in dirs if x != "__pycache__" and not x.startswith(("test", ".")))
            for f in sorted(files):
                if not f.endswith(".py") or seen >= SEARCH_MAX_FILES:
                    continue
                seen += 1
                path = os.path.join(d, f)
                try:
                    if os.path.getsize(path) > SEARCH_MAX_BYTES:
                        continue
                    with open(path, encoding="utf-8", errors="replace") as fh:
                        text = fh.read()
                    if not any(m in text for m in marks):
                        continue
                    found = scan_module_source(text)
                except (OSError, SyntaxError, ValueError):
                    continue
                rel = os.path.relpath(path, root)[:-3].split(os.sep)
                if rel[-1] == "__init__":
                    rel = rel[:-1]
                mod = ".".join([top] + rel)
                for piece, fns in found.items():
                    out.setdefault(piece, []).extend((mod, fn) for fn in fns)
    for piece, hits in out.items():
        hits.sort(key=lambda h: (h[1] not in LAUNCHER_NAMES, not h[1].startswith("invoke"), h[0]))
    _SEARCHED[top] = out
    return out


class EngineLayout:
    """Where one installed engine keeps its fused-MoE launcher, Triton kernel, align step (and
    vLLM's expert-assignment step that may skip it) and config lookup: first in the places of
    ENGINE_PLACES, then by searching the package (find_in_package). Importing is lazy and every
    failure is kept, so a missing piece is one line naming the engine version and the function."""

    def __init__(self, name):
        self.name = name
        self.version = engine_version(name)
        if self.version is None:
            raise Fatal("%s is not installed in %s (--kernel %s needs it; --kernel moetune does not)" %
                        (name, sys.executable, name))
        self.where = "%s %s" % (name, self.version)
        self.errors = []
        self.found = {}  # piece -> (module name, function name, object, "table" or "search")

    def _try(self, mod, piece, how, names=None):
        import importlib
        try:
            m = importlib.import_module(mod)
        except Exception as e:
            self.errors.append("%s: %s" % (mod, one_line(e)))
            return None
        if piece == "lookup":
            if all(callable(getattr(m, f, None)) for f in PIECES["lookup"]):
                return (mod, "get_config_file_name", m, how)
            return None
        for fname in names or PIECES[piece]:
            fn = getattr(m, fname, None)
            if callable(fn):
                return (mod, fname, fn, how)
        return None

    def get(self, piece):
        """(module, function, object, how) of a piece, or None when neither the table nor the
        search finds it (the lookup's object is its module)."""
        if piece in self.found:
            return self.found[piece]
        hit = None
        for mod in ENGINE_PLACES[self.name][piece]:
            hit = self._try(mod, piece, "table")
            if hit:
                break
        if hit is None and (piece != "prepare" or ENGINES[self.name]["prepare_step"]):
            for mod, fname in find_in_package(self.name).get(piece, []):
                hit = self._try(mod, piece, "search", (fname,))
                if hit:
                    break
        self.found[piece] = hit
        return hit

    def require(self, piece):
        """get(piece), or Fatal naming the engine version and what is missing."""
        hit = self.get(piece)
        if hit is None:
            places = ENGINE_PLACES[self.name][piece]
            raise Fatal("%s: no %s in %s, nor anywhere in the installed %s package%s" % (
                self.where, PIECE_TEXT[piece], ", ".join(places) or "(no known place)", self.name,
                (" (last import error: %s)" % self.errors[-1]) if self.errors else ""))
        return hit

    def describe(self):
        """{piece: "module.function" or null, "found_by": {piece: "table" or "search"}}."""
        out = {"found_by": {}}
        for piece in ("launcher", "align", "prepare", "lookup"):
            try:
                hit = self.get(piece)
            except Exception as e:  # an engine module that raises something odd on import
                self.errors.append(one_line(e))
                hit = None
            out[piece] = ("%s.%s" % hit[:2] if piece != "lookup" else hit[0]) if hit else None
            if hit:
                out["found_by"][piece] = hit[3]
        hit = self.found.get("launcher")
        if hit:
            out["kernel"] = "%s.%s" % (hit[0], KERNEL_NAME) if KERNEL_NAME in hit[2].__globals__ else None
        out["errors"] = self.errors[-3:]
        return out


@contextlib.contextmanager
def device_named(name, lookup):
    """Within the block, the engine's device-name sources answer name (None: left alone):
    torch.cuda.get_device_name (SGLang's get_device_name reads it, and so do vLLM's snapshots)
    and vLLM's current_platform.get_device_name (NVML in vLLM). The functools caches among the
    lookup module's globals (vLLM's get_device_name_as_file_name, get_moe_configs) are cleared
    before and after, so every name goes through the engine's own rules afresh."""
    def clear():
        for v in list(vars(lookup).values()):
            try:  # functools caches only: a module's other objects may raise on any attribute
                if callable(v) and hasattr(v, "__wrapped__") and callable(getattr(v, "cache_clear", None)):
                    v.cache_clear()
            except Exception:
                pass
    undo = []

    def patch(obj, attr, value):
        had = attr in getattr(obj, "__dict__", {})
        undo.append((obj, attr, had, getattr(obj, attr, None)))
        setattr(obj, attr, value)
    if name is not None:
        answer = lambda *a, **kw: name  # noqa: E731
        torch = sys.modules.get("torch")
        cuda = getattr(torch, "cuda", None)
        if cuda is not None:
            patch(cuda, "get_device_name", answer)
            patch(cuda, "is_available", lambda: True)
        vplat = sys.modules.get("vllm.platforms")
        if vplat is None and lookup.__name__.startswith("vllm."):
            try:  # vLLM imports it inside its device-name function: patch it before that
                import importlib
                vplat = importlib.import_module("vllm.platforms")
            except Exception:
                vplat = None
        plats = [getattr(vplat, "current_platform", None),
                 getattr(lookup, "current_platform", None)]
        for plat in {id(p): p for p in plats if p is not None}.values():
            patch(plat, "get_device_name", answer)
    clear()
    try:
        yield
    finally:
        for obj, attr, had, old in reversed(undo):
            if had:
                setattr(obj, attr, old)
            else:
                try:
                    delattr(obj, attr)
                except AttributeError:
                    setattr(obj, attr, old)
        clear()


class _Grab(logging.Handler):
    def __init__(self):
        super().__init__(0)
        self.lines = []

    def emit(self, rec):
        line = ("%s %s" % (rec.levelname, rec.getMessage()))[:300]
        if not self.lines or self.lines[-1] != line:  # a module logger's record reaches the root too
            self.lines.append(line)


def trace_lookup(lookup, e, n, dtype, block_n, block_k):
    """The engine's get_moe_configs for one shape on the running device, traced: the paths it
    tried (os.path.exists, in order), the one it read (the last that existed; None = defaults),
    the batch sizes it returned and what it logged."""
    import posixpath
    fn = lookup.get_moe_configs
    tried = []
    real = posixpath.exists

    def exists(p):
        r = real(p)
        tried.append((os.fspath(p), r))
        return r
    grab = _Grab()
    loggers = [logging.getLogger()] + [x for x in (getattr(lookup, "logger", None),) if isinstance(x, logging.Logger)]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.addHandler(grab)
        lg.setLevel(logging.INFO)
    posixpath.exists = exists
    try:
        if callable(getattr(fn, "cache_clear", None)):
            fn.cache_clear()
        got = fn(e, n, dtype, block_n, block_k)
    finally:
        posixpath.exists = real
        for lg, lv in zip(loggers, levels):
            lg.removeHandler(grab)
            lg.setLevel(lv)
    hits = [p for p, r in tried if r]
    return {"tried": [p for p, _ in tried][:8], "loaded": hits[-1] if got and hits else None,
            "entries": sorted(int(k) for k in got) if got else None, "logs": grab.lines[-4:]}


def parse_names(text):
    """--names: a JSON list of {"e", "n", "dtype", "block_n", "block_k", "device" (optional: the
    running GPU when absent), "lookup" (optional: trace the engine's lookup too)}."""
    try:
        qs = json.loads(text)
    except ValueError as e:
        raise ProtocolError("--names is not JSON: %s" % one_line(e))
    if not isinstance(qs, list) or len(qs) > 4096:
        raise ProtocolError("--names must be a list of at most 4096 shapes")
    out = []
    for q in qs:
        if not isinstance(q, dict):
            raise ProtocolError("--names: each shape is an object")
        s = {k: get_uint(q, k, 1, 1 << 20, "names") for k in ("e", "n")}
        s["dtype"] = q.get("dtype") or "bf16"
        if not isinstance(s["dtype"], str):
            raise ProtocolError("--names: dtype must be a string")
        for k in ("block_n", "block_k"):
            s[k] = get_uint(q, k, 0, 1 << 16, "names") if q.get(k) else 0
        dev = q.get("device")
        if dev is not None and not isinstance(dev, str):
            raise ProtocolError("--names: device must be a string")
        s["device"], s["lookup"] = dev, bool(q.get("lookup"))
        out.append(s)
    return out


def ask_engine(layout, queries):
    """The engine's own config file names (and, where asked, its traced lookup) for queries of
    parse_names: {"module": ..., "names": [{"file", "down_file", "tried", "loaded", ...}]} or
    {"error": one line}."""
    import inspect
    hit = layout.get("lookup")
    if hit is None:
        return {"error": "%s: no %s in %s, nor anywhere in the installed package" % (
            layout.where, PIECE_TEXT["lookup"], ", ".join(ENGINE_PLACES[layout.name]["lookup"]))}
    lookup = hit[2]
    fname = lookup.get_config_file_name
    down = "down_moe" in inspect.signature(fname).parameters
    res = {"module": hit[0], "found_by": hit[3], "names": []}
    for q in queries:
        a = {}
        dtype = None if q["dtype"] == "bf16" else q["dtype"]
        block = [q["block_n"], q["block_k"]] if q["block_n"] else None
        try:
            with device_named(q["device"], lookup):
                a["file"] = fname(q["e"], q["n"], dtype, block)
                a["down_file"] = fname(q["e"], q["n"], dtype, block, down_moe=True) if down else None
                if q["lookup"]:
                    try:
                        a.update(trace_lookup(lookup, q["e"], q["n"], dtype, q["block_n"], q["block_k"]))
                    except Exception as e:
                        a["lookup_error"] = "%s: %s.get_moe_configs raised %s" % (layout.where, hit[0], one_line(e))
        except Exception as e:
            a["error"] = "%s: %s.get_config_file_name raised %s" % (layout.where, hit[0], one_line(e))
        res["names"].append(a)
    return res
