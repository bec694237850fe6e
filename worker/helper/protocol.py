"""The line protocol of worker/HELPER.md: requests parsed and checked, replies written, start-up marks."""
import json
import math
import sys
import time


STATUSES = ("ok", "invalid", "compile_error", "launch_error", "wrong_result", "timeout")
CFG_KEYS = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages")
SHAPE_KEYS = ("e", "n", "k", "topk")
DTYPES = ("bf16", "fp8_w8a8")
T0 = time.monotonic()  # the helper's start: the start-up marks (mark, Session.stats) count from it
PROTO_OUT = None       # the protocol stream (the process's stdout), set by main(); None: sys.stdout


class Fatal(Exception):
    """The helper cannot work at all: one line for the user, exit 1."""


class ProtocolError(Exception):
    """A request that cannot be parsed; answered with {"error": ...}."""


def emit(obj):
    """Writes one protocol line: obj as compact JSON (NaN is refused)."""
    out = PROTO_OUT if PROTO_OUT is not None else sys.stdout
    out.write(json.dumps(obj, separators=(",", ":"), allow_nan=False) + "\n")
    out.flush()


def log(msg):
    sys.stderr.write("moetune_helper: %s\n" % msg)
    sys.stderr.flush()


def one_line(exc):
    text = ("%s: %s" % (type(exc).__name__, exc)).strip().replace("\n", " ")
    return text[:300]


# ---- requests -------------------------------------------------------------------------------

def get_uint(obj, key, lo, hi, where):
    """obj[key] as an integer in lo..hi (not a bool), else ProtocolError naming where.key."""
    v = obj.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or v < lo or v > hi:
        raise ProtocolError("%s.%s must be an integer in %d..%d" % (where, key, lo, hi))
    return v


def parse_shape(obj):
    if not isinstance(obj, dict):
        raise ProtocolError("shape must be an object")
    s = {k: get_uint(obj, k, 1, 1 << 20, "shape") for k in SHAPE_KEYS}
    s["dtype"] = obj.get("dtype", "bf16")
    if s["dtype"] not in DTYPES:
        raise ProtocolError("dtype %r is not one of %s" % (s["dtype"], ", ".join(DTYPES)))
    for k in ("block_n", "block_k"):
        s[k] = get_uint(obj, k, 0, 1 << 16, "shape") if obj.get(k) is not None else 0
    if (s["block_n"] == 0) != (s["block_k"] == 0):
        raise ProtocolError("shape: block_n and block_k are both set or both 0")
    if s["block_n"] and s["dtype"] != "fp8_w8a8":
        raise ProtocolError("shape: block scales need dtype fp8_w8a8")
    return s


def shape_block(shape):
    """(block_n, block_k) of an fp8 block-scale shape, else None."""
    return (shape["block_n"], shape["block_k"]) if shape.get("block_n") else None


def shape_key(shape):
    return tuple(shape[k] for k in SHAPE_KEYS) + (shape["dtype"], shape.get("block_n", 0), shape.get("block_k", 0))


def parse_config(obj):
    if not isinstance(obj, dict):
        raise ProtocolError("config must be an object")
    return {k: get_uint(obj, k, 1, 1024, "config") for k in CFG_KEYS}


def parse_batch_sizes(v):
    if not isinstance(v, list) or not v or len(v) > 4096:
        raise ProtocolError("batch_sizes must be a list of 1..4096 integers")
    for m in v:
        if isinstance(m, bool) or not isinstance(m, int) or m < 1 or m > 1 << 20:
            raise ProtocolError("batch size %r out of range" % (m,))
    return v


def parse_measure(obj):
    obj = obj or {}
    if not isinstance(obj, dict):
        raise ProtocolError("measure must be an object")
    m = {"warmup": obj.get("warmup") or 2, "min_samples": obj.get("min_samples") or 5,
         "max_samples": obj.get("max_samples") or 200, "rsd_target": obj.get("rsd_target") or 0.01,
         "budget_ms": obj.get("budget_ms") or 3000, "seed": obj.get("seed") or 0,
         "race_margin": obj.get("race_margin") or 0.0, "settle_margin": obj.get("settle_margin") or 0.0}
    for k, v in m.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise ProtocolError("measure.%s must be a finite number >= 0" % k)
    m["min_samples"] = min(m["min_samples"], m["max_samples"])
    best = obj.get("best_us")
    if best is not None:
        if not isinstance(best, list) or any(isinstance(b, bool) or not isinstance(b, (int, float)) or
                                             not math.isfinite(b) or b < 0 for b in best):
            raise ProtocolError("measure.best_us must be a list of finite numbers >= 0")
    m["best_us"] = best
    return m


def parse_routing(obj):
    """None (uniform random routing) or (path, sha256) of a request's "routing"."""
    if obj is None:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("path"), str) or not obj["path"]:
        raise ProtocolError("routing must be {\"path\": ..., \"sha256\": ...}")
    sha = obj.get("sha256") or ""
    if not isinstance(sha, str):
        raise ProtocolError("routing.sha256 must be a string")
    return obj["path"], sha


START = {}  # start-up mark -> seconds after T0, each set once


def mark(name):
    """Records when a start-up step was first reached (stats()["start"], HELPER.md)."""
    if name not in START:  # called per request: the clock is read the first time only
        START[name] = round(time.monotonic() - T0, 3)


# Where the measuring process's wall goes (HELPER.md, "phases"), in the order the worker logs them.
PHASE_KEYS = ("timed", "samples", "warmup", "capture", "launch", "compile_wait", "inputs", "check_layer", "check",
              "split", "cleanup", "idle", "other")


class Phases:
    """The measuring process's wall as a partition: mark(name) books the seconds since the
    previous mark to name, so no second is booked twice or lost. The GPU time of timed kernels,
    noted with timed() while a phase runs, is moved from that phase into "timed" when it ends
    (never more than the phase lasted). take() returns the seconds by phase since the previous
    take(), with "wall" their sum, and starts afresh."""

    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self.reset()

    def reset(self):
        """Starts the partition now, with nothing booked."""
        self.t = self.clock()
        self.s = dict.fromkeys(PHASE_KEYS, 0.0)
        self.pending = 0.0

    def mark(self, name):
        """Ends the running phase here and books it to name."""
        now = self.clock()
        dt = max(0.0, now - self.t)
        carve = min(self.pending, dt)
        self.s[name] += dt - carve
        self.s["timed"] += carve
        self.pending = 0.0
        self.t = now

    def timed(self, seconds):
        """Notes GPU seconds of timed kernels run in the running phase."""
        self.pending += seconds

    def take(self):
        """{phase: seconds} since the previous take(), plus "wall"; starts afresh (the running
        phase goes on)."""
        out = {k: round(v, 6) for k, v in self.s.items()}
        out["wall"] = round(sum(self.s.values()), 6)
        self.s = dict.fromkeys(PHASE_KEYS, 0.0)
        return out


PHASES = Phases()  # the measuring process's; serve() starts it


def serve(lines, session):
    """Answers requests until quit or EOF. session measures; see Session. Each done carries
    the phases of the measuring process's wall since the previous done ("idle": waiting for a
    request)."""
    phases = PHASES
    phases.reset()
    for raw in lines:
        phases.mark("idle")  # the wait for this line
        raw = raw.strip()
        if not raw:
            continue
        try:
            req = json.loads(raw)
            if not isinstance(req, dict):
                raise ProtocolError("a request must be a JSON object")
            op = req.get("op")
            if op == "quit":
                return 0
            if op == "prepare":
                mark("first_prepare")
                # The worker may not know the job's batch sizes yet: compile for batch size 1
                # then (moetune's kernel compiles once for all of them).
                session.prepare(parse_shape(req.get("shape")),
                                [parse_config(c) for c in (req.get("configs") or [])],
                                parse_batch_sizes(req.get("batch_sizes") or [1]))
            elif op == "measure":
                mark("first_measure")
                rid = req.get("id")
                if isinstance(rid, bool) or not isinstance(rid, int):
                    raise ProtocolError("measure needs an integer id")
                shape, cfg = parse_shape(req.get("shape")), parse_config(req.get("config"))
                bss = parse_batch_sizes(req.get("batch_sizes"))
                m = parse_measure(req.get("measure"))
                if m["best_us"] is not None and len(m["best_us"]) != len(bss):
                    raise ProtocolError("measure.best_us needs one value per batch size")
                split = bool(req.get("split"))
                routing = parse_routing(req.get("routing"))
                for bs, res in zip(bss, session.measure(shape, cfg, bss, m, split, routing)):
                    line = {"id": rid, "bs": bs}
                    line.update(res)
                    emit(line)
                    phases.mark("other")
                done = {"id": rid, "done": True, "regs": 0, "spills": 0, "peak_rss_kb": session.peak_rss_kb(),
                        "gpu_s": round(session.gpu_s(), 6), "stats": session.stats()}
                phases.mark("other")
                done["phases"] = phases.take()
                emit(done)
                mark("first_done")
            else:
                raise ProtocolError("unknown op %r" % (op,))
        except (ValueError, ProtocolError) as e:  # json.JSONDecodeError is a ValueError
            emit({"error": one_line(e) if not isinstance(e, ProtocolError) else str(e)})
        phases.mark("other")
    return 0
