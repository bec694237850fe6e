#!/usr/bin/env python3
"""moetune's triton helper: compiles, checks and times fused-MoE Triton kernels for moetune-worker.

The worker's child starts it and speaks the line protocol of worker/HELPER.md over stdin/stdout.
Nothing but protocol lines goes to stdout: everything else (warnings, tracebacks) goes to stderr.
"""
import argparse
import ast
import contextlib
import hashlib
import json
import logging
import math
import os
import sys
import time

T0 = time.monotonic()  # the helper's start: the start-up marks (mark, Session.stats) count from it
PROTO_OUT = sys.stdout
sys.stdout = sys.stderr  # whatever a library prints must not reach the protocol stream

HERE = os.path.dirname(os.path.abspath(__file__))
STATUSES = ("ok", "invalid", "compile_error", "launch_error", "wrong_result", "timeout")
CFG_KEYS = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages")
SHAPE_KEYS = ("e", "n", "k", "topk")
LAYERS_PER_GRAPH = 10
FLUSH_BYTES = 256 << 20       # twice and more the H100/H200 L2
REL_TOL = 0.02                # see Measurer.check
RACE_SAMPLES = 2              # racing judges the fastest of this many samples (worker/backend.h)
RACE_FAR = 2.0                # a first sample beyond the best by this many margins loses alone (WRK_RACE_FAR)
CHECK_FAR = 2.5               # a timed check layer beyond the best by this many margins loses alone (WRK_CHECK_FAR)
CHECK_FLOOR = 0.5             # ... and by at least this share of it, whatever the margin (WRK_CHECK_FLOOR)
HOLD_CYCLES = 2_000_000       # GPU clocks the stream is held before a timed check layer (Measurer.check_sample)
SETTLE_Z = 2.0                # settling: standard errors to spare (WRK_SETTLE_Z, worker/backend.h)
SEM_FRACTION = 0.5            # the stop rule's standard-error arm (WRK_SEM_FRACTION, worker/backend.h)
SPLIT_MARGIN = 0.1            # halves timed within this fraction of the best median (Measurer.split_wanted)
SPLIT_MARGIN_ENV = "MOETUNE_SPLIT_MARGIN"
FP8_REL_TOL = 0.03            # see Measurer.check
CUDA_WAIT_S = 60.0            # a compile process waits at most this long for the measuring one's CUDA (_pool_init)
FP8_MAX = 448.0               # largest finite e4m3fn value
SCALE_EPS = 1e-10             # the scale of an all-zero group (as moetune_kernel.SCALE_EPS)
DTYPES = ("bf16", "fp8_w8a8")
ENGINE_DIST = {"sglang": "sglang", "vllm": "vllm"}


class Fatal(Exception):
    """The helper cannot work at all: one line for the user, exit 1."""


class ProtocolError(Exception):
    """A request that cannot be parsed; answered with {"error": ...}."""


def emit(obj):
    PROTO_OUT.write(json.dumps(obj, separators=(",", ":"), allow_nan=False) + "\n")
    PROTO_OUT.flush()


def log(msg):
    sys.stderr.write("moetune_helper: %s\n" % msg)
    sys.stderr.flush()


def one_line(exc):
    text = ("%s: %s" % (type(exc).__name__, exc)).strip().replace("\n", " ")
    return text[:300]


# ---- requests -------------------------------------------------------------------------------

def _uint(obj, key, lo, hi, where):
    v = obj.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or v < lo or v > hi:
        raise ProtocolError("%s.%s must be an integer in %d..%d" % (where, key, lo, hi))
    return v


def parse_shape(obj):
    if not isinstance(obj, dict):
        raise ProtocolError("shape must be an object")
    s = {k: _uint(obj, k, 1, 1 << 20, "shape") for k in SHAPE_KEYS}
    s["dtype"] = obj.get("dtype", "bf16")
    if s["dtype"] not in DTYPES:
        raise ProtocolError("dtype %r is not one of %s" % (s["dtype"], ", ".join(DTYPES)))
    for k in ("block_n", "block_k"):
        s[k] = _uint(obj, k, 0, 1 << 16, "shape") if obj.get(k) is not None else 0
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


# ---- fp8 e4m3 quantization and the reference layer (pure torch, any device) -----------------

def e4m3_round(torch, t):
    """t (float32) clamped to +-448 and rounded to the nearest e4m3fn value, ties to even, as
    float32. torch's own float8_e4m3fn conversion where this torch has it; else the same
    rounding computed: 3 mantissa bits, so the spacing is 2^(e-3) in the binade [2^e, 2^(e+1)),
    and 2^-9 below the smallest normal 2^-6 (subnormals)."""
    t = t.float().clamp(-FP8_MAX, FP8_MAX)
    f8 = getattr(torch, "float8_e4m3fn", None)
    if f8 is not None:
        return t.to(f8).float()
    _, e = torch.frexp(t)  # t = m * 2^e, 0.5 <= |m| < 1: the binade starts at 2^(e-1)
    ulp = torch.pow(2.0, (e - 4).clamp(min=-9).float())
    return torch.round(t / ulp) * ulp


def _cdiv(a, b):
    return -(-a // b)


def quant_act(torch, x, group):
    """Run-time activation quantization, the kernel's rule: (q, scale) for x [rows, K] with
    scale = max(amax, eps) / 448 per tensor (group 0: scale [1]) or per row and group-wide column
    group (scale [rows, cdiv(K, group)]), q = e4m3(x / scale) as float32."""
    x = x.float()
    if not group:
        s = torch.clamp(x.abs().max(), min=SCALE_EPS) / FP8_MAX
        return e4m3_round(torch, x / s), s.reshape(1)
    rows, k = x.shape
    ng = _cdiv(k, group)
    xp = torch.nn.functional.pad(x, (0, ng * group - k)).view(rows, ng, group)
    s = xp.abs().amax(dim=2).clamp(min=SCALE_EPS) / FP8_MAX
    q = e4m3_round(torch, xp / s[:, :, None]).view(rows, ng * group)[:, :k]
    return q, s


def dequant_act(torch, q, s, group):
    if not group:
        return q * s
    return q * s.repeat_interleave(group, dim=1)[:, :q.shape[1]]


def quant_weight(torch, w, block):
    """Weights w [E, N, K] (float32) to e4m3: (q as float32, scale) with one scale per expert
    (block None: scale [E]) or per block_n x block_k block (scale [E, cdiv(N, bn), cdiv(K, bk)]),
    scale = max(amax, eps) / 448, as the fp8 checkpoints store them."""
    w = w.float()
    if not block:
        s = w.abs().amax(dim=(1, 2)).clamp(min=SCALE_EPS) / FP8_MAX
        return e4m3_round(torch, w / s[:, None, None]), s
    bn, bk = block
    e, n, k = w.shape
    gn, gk = _cdiv(n, bn), _cdiv(k, bk)
    wp = torch.nn.functional.pad(w, (0, gk * bk - k, 0, gn * bn - n)).view(e, gn, bn, gk, bk)
    s = wp.abs().amax(dim=(2, 4)).clamp(min=SCALE_EPS) / FP8_MAX
    q = e4m3_round(torch, wp / s[:, :, None, :, None]).view(e, gn * bn, gk * bk)[:, :n, :k]
    return q.contiguous(), s


def dequant_expert(torch, q, s, block):
    """One expert's weights [N, K] in float32 from e4m3 values q and its scale(s) s."""
    q = q.float()
    if not block:
        return q * s.float()
    bn, bk = block
    n, k = q.shape
    return q * s.float().repeat_interleave(bn, dim=0)[:n].repeat_interleave(bk, dim=1)[:, :k]


def spread(torch, shape, gen, device):
    """Magnitudes 2^U(-2, 2) of the given shape: weights and tokens whose blocks differ by up to
    16x, so a scale applied to the wrong block, row or expert is off by order 1, not by the few
    per cent a uniform Gaussian's blocks differ by."""
    return torch.pow(2.0, torch.rand(shape, generator=gen, device=device) * 4.0 - 2.0)


def make_weights(torch, e, n_out, k_in, dtype, block, gen, device, chunk=16):
    """Random expert weights [E, n_out, k_in]: bf16 (scale None), or e4m3 with scales. Built
    chunk experts at a time so the float32 intermediates stay small."""
    f8 = getattr(torch, "float8_e4m3fn", None) if dtype == "fp8_w8a8" else None
    out = torch.empty(e, n_out, k_in, device=device, dtype=f8 or (torch.bfloat16 if dtype == "bf16" else torch.float32))
    scale = None
    if dtype == "fp8_w8a8":
        scale = torch.empty((e, _cdiv(n_out, block[0]), _cdiv(k_in, block[1])) if block else (e,),
                            device=device, dtype=torch.float32)
    for e0 in range(0, e, chunk):
        e1 = min(e, e0 + chunk)
        w = torch.randn(e1 - e0, n_out, k_in, generator=gen, device=device) / math.sqrt(k_in)
        if dtype == "bf16":
            out[e0:e1] = w.to(torch.bfloat16)
            continue
        if block:
            sp = spread(torch, (e1 - e0, _cdiv(n_out, block[0]), _cdiv(k_in, block[1])), gen, device)
            w = w * sp.repeat_interleave(block[0], 1)[:, :n_out].repeat_interleave(block[1], 2)[:, :, :k_in]
        else:
            w = w * spread(torch, (e1 - e0, 1, 1), gen, device)
        q, s = quant_weight(torch, w, block)
        out[e0:e1] = q.to(out.dtype)
        scale[e0:e1] = s
    return out, scale


def reference_layer(torch, x, ids, w, w1, w2, w1s=None, w2s=None, block=None, fp8=False):
    """The layer in float32 on the kernels' inputs: x [M, K] bf16, ids/w [M, topk], w1 [E, 2N, K],
    w2 [E, K, N]. bf16: the intermediate is rounded to bf16 as the kernels store it. fp8: x and
    the intermediate are quantized by quant_act's rule (per tensor, or per token and block_k
    group), the weights are their e4m3 values times their scales (dequantized), and the sums
    are float32: what an exact kernel computes from the same quantized operands."""
    m, topk = ids.shape
    n = w2.shape[2]
    group = block[1] if block else 0
    xf = x.float()
    if fp8:
        xf = dequant_act(torch, *quant_act(torch, xf, group), group)
    flat = ids.reshape(-1).long()
    wf = w.reshape(-1).float()
    c2 = torch.zeros(m * topk, n, device=x.device, dtype=torch.float32)
    experts = torch.unique(flat).tolist()
    for ex in experts:
        rows = (flat == ex).nonzero(as_tuple=True)[0]
        w1e = dequant_expert(torch, w1[ex], w1s[ex], block) if fp8 else w1[ex].float()
        h = (xf[rows // topk] @ w1e.t()).to(torch.bfloat16).float()
        c2[rows] = (torch.nn.functional.silu(h[:, :n]) * h[:, n:]).to(torch.bfloat16).float()
    if fp8:
        c2 = dequant_act(torch, *quant_act(torch, c2, group), group)
    out = torch.zeros(m, x.shape[1], device=x.device, dtype=torch.float32)
    for ex in experts:
        rows = (flat == ex).nonzero(as_tuple=True)[0]
        w2e = dequant_expert(torch, w2[ex], w2s[ex], block) if fp8 else w2[ex].float()
        out.index_add_(0, rows // topk, (c2[rows] @ w2e.t()) * wf[rows][:, None])
    return out


def rel_error(torch, out, ref):
    """Max |out - ref| over the reference's range; inf when out is not finite."""
    scale = float(ref.abs().max()) or 1.0
    out = out.float()
    if not bool(torch.isfinite(out).all()):
        return float("inf")
    return float((out - ref).abs().max()) / scale


def parse_config(obj):
    if not isinstance(obj, dict):
        raise ProtocolError("config must be an object")
    return {k: _uint(obj, k, 1, 1024, "config") for k in CFG_KEYS}


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


def serve(lines, session):
    """Answers requests until quit or EOF. session measures; see Session."""
    for raw in lines:
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
                done = {"id": rid, "done": True, "regs": 0, "spills": 0, "peak_rss_kb": session.peak_rss_kb(),
                        "gpu_s": round(session.gpu_s(), 6), "stats": session.stats()}
                emit(done)
                mark("first_done")
            else:
                raise ProtocolError("unknown op %r" % (op,))
        except (ValueError, ProtocolError) as e:  # json.JSONDecodeError is a ValueError
            emit({"error": one_line(e) if not isinstance(e, ProtocolError) else str(e)})
    return 0


# ---- captured routing ----------------------------------------------------------------------

MASK64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


def draw_rows(tokens, m, seed):
    """The capture rows batch size m takes: m draws with replacement, splitmix64 seeded with
    seed ^ (m * golden ratio). common/routing.c draws the same rows (the sim backend, tests)."""
    state = (seed ^ ((m * GOLDEN) & MASK64)) & MASK64
    rows = []
    for _ in range(m):
        state = (state + GOLDEN) & MASK64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        rows.append((z ^ (z >> 31)) % tokens)
    return rows


class RoutingError(Exception):
    pass


def read_npy_ids(data):
    """(tokens, topk, flat ids) of a NumPy .npy holding int32 or int64 [tokens, topk], little
    endian, C order; RoutingError naming what is wrong for anything else."""
    import ast
    import array
    if len(data) < 10 or data[:6] != b"\x93NUMPY":
        raise RoutingError("not a .npy file (no \\x93NUMPY magic)")
    major = data[6]
    if major == 1:
        hlen, start = int.from_bytes(data[8:10], "little"), 10
    elif major in (2, 3):
        if len(data) < 12:
            raise RoutingError("truncated .npy header")
        hlen, start = int.from_bytes(data[8:12], "little"), 12
    else:
        raise RoutingError(".npy version %d is not 1, 2 or 3" % major)
    if hlen > 65536 or start + hlen > len(data):
        raise RoutingError(".npy header of %d bytes is truncated or too large" % hlen)
    try:
        hdr = ast.literal_eval(data[start:start + hlen].decode("latin1"))
    except (ValueError, SyntaxError) as e:
        raise RoutingError(".npy header is not a Python dict: %s" % one_line(e))
    if not isinstance(hdr, dict):
        raise RoutingError(".npy header is not a dict")
    descr, fortran, shape = hdr.get("descr"), hdr.get("fortran_order"), hdr.get("shape")
    if descr not in ("<i4", "<i8"):
        raise RoutingError("dtype %r: expert ids must be int32 or int64 (<i4, <i8)" % (descr,))
    if fortran is not False:
        raise RoutingError("fortran_order arrays are not read; save it C-ordered")
    if not isinstance(shape, tuple) or len(shape) != 2 or not all(isinstance(v, int) and v > 0 for v in shape):
        raise RoutingError("shape %r is not [tokens, topk]" % (shape,))
    size = 4 if descr == "<i4" else 8
    body = data[start + hlen:]
    if len(body) != shape[0] * shape[1] * size:
        raise RoutingError("data is %d bytes, [%d, %d] %s needs %d" % (len(body), shape[0], shape[1], descr,
                                                                      shape[0] * shape[1] * size))
    arr = array.array("i" if size == 4 else "q")
    if arr.itemsize != size:
        arr = array.array("l")
    arr.frombytes(body)
    if sys.byteorder != "little":
        arr.byteswap()
    return shape[0], shape[1], arr.tolist()


def read_pt_ids(torch, path):
    """(tokens, topk, flat ids) of a PyTorch file: a [tokens, topk] integer tensor, a list or tuple
    of them (concatenated, e.g. one per captured step), or a dict holding one under "topk_ids"."""
    obj = torch.load(path, map_location="cpu")
    if isinstance(obj, dict):
        if "topk_ids" not in obj:
            raise RoutingError("a dict without \"topk_ids\" (keys: %s)" % ", ".join(map(str, list(obj)[:8])))
        obj = obj["topk_ids"]
    if isinstance(obj, (list, tuple)):
        if not obj or not all(isinstance(t, torch.Tensor) for t in obj):
            raise RoutingError("a list that is not of tensors")
        obj = torch.cat([t.reshape(-1, t.shape[-1]) for t in obj], dim=0)
    if not isinstance(obj, torch.Tensor) or obj.dim() != 2 or obj.is_floating_point() or obj.numel() == 0:
        raise RoutingError("not an integer tensor [tokens, topk]")
    return obj.shape[0], obj.shape[1], obj.reshape(-1).long().tolist()


class Routing:
    """Expert ids captured from serving; each batch size draws its tokens with draw_rows()."""

    def __init__(self, path, sha256, torch=None):
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            raise RoutingError("cannot read: %s" % one_line(e))
        got = hashlib.sha256(data).hexdigest()
        if sha256 and got != sha256:
            raise RoutingError("sha256 %s..., the sweep was planned on %s...: the file changed" % (got[:12], sha256[:12]))
        if data[:6] == b"\x93NUMPY":
            self.tokens, self.topk, self.ids = read_npy_ids(data)
        elif torch is None:
            raise RoutingError("not a .npy file, and a PyTorch file needs torch")
        else:
            try:
                self.tokens, self.topk, self.ids = read_pt_ids(torch, path)
            except RoutingError:
                raise
            except Exception as e:
                raise RoutingError("not a .npy file nor a PyTorch file torch.load reads: %s" % one_line(e))
        self.key = got
        self.seed = 0

    def check(self, shape):
        if self.topk != shape["topk"]:
            raise RoutingError("%d experts per token, the shape has topk=%d" % (self.topk, shape["topk"]))
        lo, hi = min(self.ids), max(self.ids)
        if lo < 0 or hi >= shape["e"]:
            raise RoutingError("expert id %d is out of range 0..%d" % (lo if lo < 0 else hi, shape["e"] - 1))

    def draw(self, m):
        """The flat [m * topk] expert ids of batch size m."""
        out = []
        for r in draw_rows(self.tokens, m, self.seed):
            out.extend(self.ids[r * self.topk:(r + 1) * self.topk])
        return out


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


# ---- environment -----------------------------------------------------------------------------

START = {}  # start-up mark -> seconds after T0, each set once


def mark(name):
    """Records when a start-up step was first reached (stats()["start"], HELPER.md)."""
    if name not in START:  # called per request: the clock is read the first time only
        START[name] = round(time.monotonic() - T0, 3)


def import_stack():
    """torch and triton, or Fatal naming what is missing and which interpreter was asked."""
    try:
        import torch
    except Exception as e:  # ImportError, or a broken install raising something else
        raise Fatal("torch is not importable by %s: %s" % (sys.executable, one_line(e)))
    try:
        import triton
    except Exception as e:
        raise Fatal("triton is not importable by %s (torch %s): %s" %
                    (sys.executable, getattr(torch, "__version__", "?"), one_line(e)))
    return torch, triton


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


def versions_text(kernel, torch, triton, engine=None):
    parts = ["kernel=%s" % kernel, "triton=%s" % triton.__version__, "torch=%s" % torch.__version__.split("+")[0],
             "python=%d.%d.%d" % sys.version_info[:3]]
    if engine:
        parts.append("engine=%s-%s" % (engine, engine_version(engine) or "unknown"))
    return " ".join(parts)


def device_info(torch, gpu):
    if not torch.cuda.is_available():
        raise Fatal("no CUDA GPU visible to torch %s in %s" % (torch.__version__, sys.executable))
    if gpu >= torch.cuda.device_count():
        raise Fatal("GPU %d asked, torch in %s sees %d" % (gpu, sys.executable, torch.cuda.device_count()))
    torch.cuda.set_device(gpu)
    p = torch.cuda.get_device_properties(gpu)
    dev = {"name": torch.cuda.get_device_name(gpu), "uuid": str(getattr(p, "uuid", "")),
           "cc_major": p.major, "cc_minor": p.minor, "sm_count": p.multi_processor_count,
           "memory_bytes": p.total_memory, "driver_version": "", "cuda_version": str(torch.version.cuda or ""),
           "clock_khz": 0, "mem_clock_khz": 0,
           "smem_per_block": int(getattr(p, "shared_memory_per_block_optin", 0) or 0),
           "regs_per_block": int(getattr(p, "regs_per_multiprocessor", 0) or 0)}
    if dev["uuid"] and not dev["uuid"].startswith("GPU-"):
        dev["uuid"] = "GPU-" + dev["uuid"]
    try:
        import ctypes
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
        buf = ctypes.create_string_buffer(96)
        if nvml.nvmlInit_v2() == 0 and nvml.nvmlSystemGetDriverVersion(buf, 96) == 0:
            dev["driver_version"] = buf.value.decode()
    except OSError:
        pass
    return dev


def peak_rss_kb():
    import resource
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def file_hash(paths, extra):
    h = hashlib.sha256(extra.encode())
    for p in paths:
        try:
            with open(p, "rb") as f:
                h.update(f.read())
        except OSError:
            h.update(p.encode())
    return h.hexdigest()[:16]


# ---- kernels ---------------------------------------------------------------------------------

class Kernel:
    """What both kernels share: one layer is the align step, the up GEMM, the activation, the
    down GEMM and the top-k sum, each kernel with its own align() (start_layer), up, act and down."""

    def layer(self, L, cfg):
        self.start_layer(L, cfg)
        self.up(L, cfg)
        self.act(L)
        self.down(L, cfg)
        self.torch.sum(L["c3"].view(L["m"], L["topk"], -1), dim=1, out=L["out"])


class MoetuneKernel(Kernel):
    """moetune's own Triton layer (moetune_kernel.py)."""
    name = "moetune"
    engine = None

    def __init__(self, torch, triton):
        sys.path.insert(0, HERE)
        import moetune_kernel as mk
        self.mk = mk
        self.torch = torch
        self.sources = [os.path.join(HERE, "moetune_kernel.py")]

    def jit_functions(self):
        return self.mk.JIT_FUNCTIONS

    def config_jit_functions(self):
        """The kernels compiled anew for each config (the rest depend on BLOCK_SIZE_M at most)."""
        return (self.mk.moe_gemm_kernel,)

    def align(self, L, cfg):
        key = ("align", cfg["BLOCK_SIZE_M"])
        if key not in L:
            L[key] = self.mk.Align(L["topk_ids"], L["e"], cfg["BLOCK_SIZE_M"])
        return L[key]

    def quant(self, L, name):
        """The run-time quantizer of activation L[name] (fp8 only), made once per batch size."""
        key = ("quant", name)
        if key not in L:
            block = L["block"]
            L[key] = self.mk.ActQuant(L[name], block[1] if block else 0)
        return L[key]

    def up(self, L, cfg, warmup=False):
        al = self.align(L, cfg)
        if not L["fp8"]:
            self.mk.gemm(L["x"], L["w1"], L["c1"], L["w_flat"], al, L["topk"], False, cfg, warmup)
            return
        aq = self.quant(L, "x")
        aq.run(warmup)  # inside the timed layer, as the engines quantize per call
        self.mk.gemm(aq.q, L["w1"], L["c1"], L["w_flat"], al, L["topk"], False, cfg, warmup, aq.scale, L["w1s"],
                     L["block"])

    def act(self, L, warmup=False):
        self.mk.silu_mul(L["c1"], L["c2"], warmup)

    def down(self, L, cfg, warmup=False):
        al = self.align(L, cfg)
        if not L["fp8"]:
            self.mk.gemm(L["c2"], L["w2"], L["c3"], L["w_flat"], al, 1, True, cfg, warmup)
            return
        aq = self.quant(L, "c2")
        aq.run(warmup)
        self.mk.gemm(aq.q, L["w2"], L["c3"], L["w_flat"], al, 1, True, cfg, warmup, aq.scale, L["w2s"], L["block"])

    def start_layer(self, L, cfg):
        self.align(L, cfg).run()

    @classmethod
    def load(cls, name, torch, triton):
        return cls(torch, triton)

    @staticmethod
    def compile_parts(cfg):
        """What warm() compiles, as parts that compile apart, in the order a layer needs them:
        (part, shared key), the key naming a part every config of that key shares (the align step
        per BLOCK_SIZE_M, the activation), None for the config's own GEMMs."""
        return [("align", ("align", cfg["BLOCK_SIZE_M"])), ("act", ("act",)), ("up", None), ("down", None)]

    def warm(self, L, cfg, part=None):
        """Compiles the layer's kernels for cfg without launching them; part: only that one of
        compile_parts()."""
        if part in (None, "align"):
            self.align(L, cfg).run(warmup=True)
        if part in (None, "up"):
            self.up(L, cfg, True)
        if part in (None, "act"):
            self.act(L, True)
        if part in (None, "down"):
            self.down(L, cfg, True)


# ---- engines: where each release keeps its fused-MoE pieces ----------------------------------

LAUNCHER_NAMES = ("invoke_fused_moe_kernel", "invoke_fused_moe_triton_kernel")
KERNEL_NAME = "fused_moe_kernel"
# Where each layout keeps each piece, newest first (docs/engines.md names the releases). A piece
# in none of these places is searched for in the installed package (find_in_package).
ENGINE_PLACES = {
    "sglang": {
        "launcher": ["sglang.kernels.ops.moe.fused_moe_triton_kernels",
                     "sglang.srt.layers.moe.moe_runner.triton_utils.fused_moe_triton_kernels",
                     "sglang.srt.layers.moe.fused_moe_triton.fused_moe_triton_kernels",
                     "sglang.srt.layers.moe.fused_moe_triton.fused_moe"],
        "align": ["sglang.srt.layers.moe.moe_runner.triton_utils.moe_align_block_size",
                  "sglang.srt.layers.moe.fused_moe_triton.moe_align_block_size",
                  "sglang.srt.layers.moe.fused_moe_triton.fused_moe"],
        "lookup": ["sglang.srt.layers.moe.moe_runner.triton_utils.fused_moe_triton_config",
                   "sglang.srt.layers.moe.fused_moe_triton.fused_moe_triton_config",
                   "sglang.srt.layers.moe.fused_moe_triton.fused_moe"],
        "prepare": [],
    },
    "vllm": {
        "launcher": ["vllm.model_executor.layers.fused_moe.fused_moe"],
        "align": ["vllm.model_executor.layers.fused_moe.moe_align_block_size",
                  "vllm.model_executor.layers.fused_moe.fused_moe"],
        "lookup": ["vllm.model_executor.layers.fused_moe.fused_moe"],
        "prepare": ["vllm.model_executor.layers.fused_moe.fused_moe"],
    },
}
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
        if hit is None and (piece != "prepare" or self.name == "vllm"):
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


# The launcher parameters moetune fills, by name; any other must have a default.
LAUNCH_NEEDS = ("A", "B", "C", "sorted_token_ids", "expert_ids", "num_tokens_post_padded", "mul_routed_weight",
                "top_k", "config", "compute_type")
LAUNCH_KNOWN = LAUNCH_NEEDS + ("A_scale", "B_scale", "B_zp", "topk_weights", "topk_ids", "use_fp8_w8a8",
                               "use_int8_w8a8", "use_int8_w8a16", "use_int4_w4a16", "per_channel_quant",
                               "block_shape", "B_bias", "bias")
PREPARE_KNOWN = ("topk_ids", "config", "num_tokens", "top_k_num", "global_num_experts", "expert_map")


def _required(params):
    import inspect
    return [n for n, p in params.items() if p.default is inspect.Parameter.empty and
            p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


class EngineKernel(Kernel):
    """An engine's own fused_moe_kernel, launched through the engine's launcher and align step,
    found by EngineLayout in whichever layout the installed release has.

    The launcher is called by parameter name (inspect.signature): what it lacks is left out
    (vLLM's invoke_fused_moe_triton_kernel has no topk_ids, B_zp or bias), a parameter moetune
    does not know must have a default, and one moetune needs must be there: else one line naming
    the engine version and the function. Outputs are (M, top_k, N) views: vLLM's launchers pass
    C.stride(1), C.stride(2) to the kernel, SGLang's C.stride(-2), C.stride(-1), so both run on
    them. Where the engine has vLLM's _prepare_expert_assignment, alignment goes through it as
    in serving (it skips the align step for sparse batches: the kernel then reads topk_ids)."""

    def __init__(self, name, torch, triton):
        import inspect
        self.name = self.engine = name
        self.torch = torch
        self.layout = lay = EngineLayout(name)
        self.where = lay.where
        mod, fname, self.invoke, _ = lay.require("launcher")
        self.launcher = "%s.%s" % (mod, fname)
        self.align_fn = lay.require("align")[2]
        self.params = inspect.signature(self.invoke).parameters
        missing = [p for p in LAUNCH_NEEDS if p not in self.params]
        if missing:
            raise Fatal("%s: %s has no parameter %s that moetune needs (signature %s)" % (
                self.where, self.launcher, ", ".join("'%s'" % p for p in missing), inspect.signature(self.invoke)))
        for pname in _required(self.params):
            if pname not in LAUNCH_KNOWN:
                raise Fatal("%s: %s has a required parameter '%s' moetune does not know (signature %s)" % (
                    self.where, self.launcher, pname, inspect.signature(self.invoke)))
        self.kernel_global = KERNEL_NAME
        if KERNEL_NAME not in self.invoke.__globals__:
            raise Fatal("%s: %s launches no %s that moetune can find in its module" % (
                self.where, self.launcher, KERNEL_NAME))
        self.prepare = None
        hit = lay.get("prepare") if name == "vllm" else None
        if hit is not None:
            pp = inspect.signature(hit[2]).parameters
            if all(p in PREPARE_KNOWN for p in _required(pp)):
                self.prepare, self.prepare_params = hit[2], pp
            else:
                log("%s: %s.%s%s is not called (unknown required parameters); aligning with %s" % (
                    self.where, hit[0], hit[1], inspect.signature(hit[2]), "moe_align_block_size"))
        import triton.language as tl
        self.compute_type = tl.bfloat16
        srcs = [inspect.getsourcefile(f) for f in (self.invoke, self.align_fn, self.prepare) if f is not None]
        self.sources = sorted({s for s in srcs if s})

    def jit_functions(self):
        fn = self.invoke.__globals__.get(self.kernel_global)
        return (fn,) if fn is not None else ()

    def config_jit_functions(self):
        return self.jit_functions()

    def fp8_options(self, L, which):
        """The engine's own fp8 options for one GEMM: B is e4m3 with B_scale; A stays bf16 and
        A_scale None, so the launcher quantizes it (per tensor, or per token and block_k group when
        block_shape is given) inside the call, as in serving. A launcher without these parameters
        cannot run fp8: Unsupported, naming what is missing."""
        if not L["fp8"]:
            return {}
        need = ("use_fp8_w8a8", "A_scale", "B_scale") + (("block_shape",) if L["block"] else ())
        missing = [p for p in need if p not in self.params]
        if missing:
            raise Unsupported("%s: %s has no %s, so it cannot run fp8_w8a8" %
                              (self.where, self.launcher.rsplit(".", 1)[-1], ", ".join(missing)))
        return {"use_fp8_w8a8": True, "A_scale": None, "B_scale": L["w1s" if which == 1 else "w2s"],
                "block_shape": list(L["block"]) if L["block"] else None}

    def launch_args(self, A, B, C, L, al, mul, top_k, cfg, which=1):
        """The launcher's keyword arguments: moetune's values for the parameters it has."""
        vals = {"A": A, "B": B, "C": C, "A_scale": None, "B_scale": None, "B_zp": None,
                "topk_weights": L["topk_w"], "topk_ids": L["topk_ids"], "sorted_token_ids": al[0],
                "expert_ids": al[1], "num_tokens_post_padded": al[2], "mul_routed_weight": mul,
                "top_k": top_k, "config": dict(cfg), "compute_type": self.compute_type,
                "use_fp8_w8a8": False, "use_int8_w8a8": False, "use_int8_w8a16": False, "use_int4_w4a16": False,
                "per_channel_quant": False, "block_shape": None, "B_bias": None, "bias": None}
        vals.update(self.fp8_options(L, which))
        return {k: v for k, v in vals.items() if k in self.params}

    @staticmethod
    def out3(L, key):
        """Output L[key] as (M, top_k, N): see the class comment."""
        return L[key].view(L["m"], L["topk"], -1)

    def align(self, L, cfg):
        key = ("align", cfg["BLOCK_SIZE_M"])
        if key not in L:
            if self.prepare is not None:
                vals = {"topk_ids": L["topk_ids"], "config": dict(cfg), "num_tokens": L["m"], "top_k_num": L["topk"],
                        "global_num_experts": L["e"], "expert_map": None}
                L[key] = tuple(self.prepare(**{k: v for k, v in vals.items() if k in self.prepare_params}))[:3]
            else:
                L[key] = tuple(self.align_fn(L["topk_ids"], cfg["BLOCK_SIZE_M"], L["e"]))[:3]
        return L[key]

    def up(self, L, cfg):
        self.invoke(**self.launch_args(L["x"], L["w1"], self.out3(L, "c1"), L, self.align(L, cfg), False, L["topk"],
                                       cfg))

    def act(self, L):
        torch = self.torch
        n = L["c2"].shape[1]
        torch.mul(torch.nn.functional.silu(L["c1"][:, :n]), L["c1"][:, n:], out=L["c2"])

    def down(self, L, cfg):
        self.invoke(**self.launch_args(L["c2"], L["w2"], self.out3(L, "c3"), L, self.align(L, cfg), True, 1, cfg,
                                       which=2))

    def start_layer(self, L, cfg):
        L.pop(("align", cfg["BLOCK_SIZE_M"]), None)  # the engine aligns inside every layer (up's align())

    @classmethod
    def load(cls, name, torch, triton):
        return cls(name, torch, triton)

    @staticmethod
    def compile_parts(cfg):
        """As MoetuneKernel.compile_parts: the engine's align step is not Triton, so only the GEMMs."""
        return [("up", None), ("down", None)]

    def warm(self, L, cfg, part=None):
        g = self.invoke.__globals__
        real = g.get(self.kernel_global)
        if real is None or not hasattr(real, "warmup"):
            return

        class WarmOnly:
            def __getitem__(self, grid):
                return lambda *a, **kw: real.warmup(*a, grid=grid, **kw)
        g[self.kernel_global] = WarmOnly()
        try:
            if part in (None, "up"):
                self.up(L, cfg)
            if part in (None, "down"):
                self.down(L, cfg)
        finally:
            g[self.kernel_global] = real


# ---- the engine's own config-file answer ------------------------------------------------------

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
        s = {k: _uint(q, k, 1, 1 << 20, "names") for k in ("e", "n")}
        s["dtype"] = q.get("dtype") or "bf16"
        if not isinstance(s["dtype"], str):
            raise ProtocolError("--names: dtype must be a string")
        for k in ("block_n", "block_k"):
            s[k] = _uint(q, k, 0, 1 << 16, "names") if q.get(k) else 0
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


KERNELS = {"moetune": MoetuneKernel, "sglang": EngineKernel, "vllm": EngineKernel}


def load_kernel(name, torch, triton):
    return KERNELS[name].load(name, torch, triton)


# ---- measuring -------------------------------------------------------------------------------

def seed_for(shape, m, seed):
    key = "%d,%d,%d,%d,%s,%d,%d" % (shape["e"], shape["n"], shape["k"], shape["topk"], shape["dtype"], m, seed)
    return int(hashlib.sha256(key.encode()).hexdigest()[:15], 16)


def drop_jit_caches(fns):
    """Forgets the compiled kernels a JITFunction keeps in memory (they are on disk): long sweeps
    otherwise grow without bound. Returns how many entries were dropped."""
    dropped = 0
    for fn in fns:
        caches = getattr(fn, "device_caches", None)
        if caches is not None:
            for v in list(caches.values()):
                c = v[0] if isinstance(v, tuple) else v
                if hasattr(c, "clear"):
                    dropped += len(c)
                    c.clear()
        elif hasattr(getattr(fn, "cache", None), "clear"):
            for c in fn.cache.values():
                dropped += len(c)
                c.clear()
    return dropped


def classify(exc):
    """(status, detail) for an exception raised while compiling or launching a config."""
    name = type(exc).__name__
    text = one_line(exc)
    if name in ("OutOfResources", "Unsupported") or "out of resource" in text.lower():
        return "invalid", text
    if name in ("CompilationError", "CompileTimeAssertionFailure") or "compil" in name.lower():
        return "compile_error", text
    return "launch_error", text


def racing(m, best_us):
    """Whether a batch size races (worker/backend.h, wrk_racing): racing on and a best known."""
    return m["race_margin"] > 0 and best_us > 0


def race_lost(m, best_us, head):
    """Racing (worker/backend.h, wrk_race_lost): after the timed replays in head, whether the
    fastest is beyond best_us by the race margin, or by RACE_FAR margins while fewer than
    RACE_SAMPLES were taken."""
    margin = m["race_margin"] * (RACE_FAR if len(head) < RACE_SAMPLES else 1.0)
    return racing(m, best_us) and min(head) > best_us * (1.0 + margin)


def check_lost(m, best_us, check_us):
    """Racing on the check's layer (wrk_check_lost): whether one timed layer is beyond best_us by
    CHECK_FAR race margins, and by CHECK_FLOOR of it at least (a check layer read up to 1.26x its
    graph's median on an H200: a smaller margin must not let it prune a winner alone). The caller
    judges only from a config's second batch size on (its first launch may carry a compile or a
    module's loading)."""
    return racing(m, best_us) and check_us > best_us * (1.0 + max(CHECK_FAR * m["race_margin"], CHECK_FLOOR))


def precise(m, st, of_mean=False):
    """The stop rule (worker/backend.h, wrk_precise): the samples' RSD is under rsd_target, or the
    standard error of their mean under SEM_FRACTION of it. of_mean (the up/down halves): the
    standard error alone, under rsd_target itself."""
    n, mean, sd = st["samples"], st["mean_us"], st["stddev_us"]
    if n < 2 or not mean > 0:
        return False
    se = sd / math.sqrt(n) / mean
    if of_mean:
        return se < m["rsd_target"]
    return sd / mean < m["rsd_target"] or se < SEM_FRACTION * m["rsd_target"]


def settled(m, best_us, st):
    """Racing's second check (worker/backend.h, wrk_settled): a config with its min_samples whose
    mean lies above best_us by more than the settle margin plus SETTLE_Z standard errors can be
    neither the pick nor a near-tie; the RSD rule's precision would be spent on it for nothing."""
    if not (m.get("settle_margin", 0) > 0 and racing(m, best_us) and st["samples"] >= 2):
        return False
    se = st["stddev_us"] / math.sqrt(st["samples"])
    return st["mean_us"] - SETTLE_Z * se > best_us * (1.0 + m["settle_margin"])


def stats(samples):
    n = len(samples)
    mean = sum(samples) / n
    var = sum((x - mean) ** 2 for x in samples) / (n - 1) if n > 1 else 0.0
    s = sorted(samples)
    med = s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])
    return {"median_us": med, "min_us": s[0], "mean_us": mean, "stddev_us": math.sqrt(var), "samples": n}


def layer_buffers(torch, shape, m, x, ids, w, w1, w2, w1s, w2s, device="cuda"):
    """One batch size's layer: inputs, weights and the intermediates the kernels write."""
    n, k, topk = shape["n"], shape["k"], shape["topk"]
    return {"m": m, "e": shape["e"], "topk": topk, "x": x, "w1": w1, "w2": w2, "w1s": w1s, "w2s": w2s,
            "fp8": shape["dtype"] == "fp8_w8a8", "block": shape_block(shape),
            "topk_ids": ids.to(torch.int32).contiguous(), "topk_w": w, "w_flat": w.view(-1),
            "c1": torch.empty(m * topk, 2 * n, device=device, dtype=torch.bfloat16),
            "c2": torch.empty(m * topk, n, device=device, dtype=torch.bfloat16),
            "c3": torch.empty(m * topk, k, device=device, dtype=torch.bfloat16),
            "out": torch.empty(m, k, device=device, dtype=torch.bfloat16)}


# What the measuring process did since it started, sent with every done as "stats" (HELPER.md):
# reference checks, configs pruned unchecked (and of them those pruned on the check's layer alone),
# check layers not judged because their launches outlasted the hold, configs settled, halves timed
# and skipped, configs compiled in the measuring process while the pool started, and seconds spent
# in checks, graph captures, waiting for the compile pool and making inputs.
COUNT_KEYS = ("verified", "pruned", "check_pruned", "check_late", "settled", "split", "split_skipped",
              "compiled_here", "check_s", "capture_s", "compile_wait_s", "inputs_s")


def new_counts():
    return dict.fromkeys(COUNT_KEYS, 0)


def split_margin_from_env(environ):
    """The split margin: MOETUNE_SPLIT_MARGIN (a number >= 0; "inf" times every verified
    config's halves), else SPLIT_MARGIN. Fatal for anything else."""
    text = environ.get(SPLIT_MARGIN_ENV)
    if text is None or text.strip() == "":
        return SPLIT_MARGIN
    try:
        v = float(text)
    except ValueError:
        v = -1.0
    if not v >= 0:  # also NaN
        raise Fatal("%s=%r is not a number >= 0 (the fraction of the best median within which the "
                    "up/down halves are timed; inf: always)" % (SPLIT_MARGIN_ENV, text))
    return v


class ContextLost(Exception):
    pass


class Unsupported(Exception):
    """A config or kernel that cannot run this shape's dtype or block scales (stored invalid)."""


class Measurer:
    """Inputs, references and timing on one GPU, for one kernel."""

    def __init__(self, torch, kernel):
        self.torch = torch
        self.kernel = kernel
        self.shape_key = None
        self.per_bs = {}
        self.flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
        self.ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
        self.stream = torch.cuda.Stream()
        self.timed_s = 0.0  # seconds of timed graph replays: the GPU-busy numerator
        self.hold_us = None  # how long HOLD_CYCLES hold the stream, measured once (check_sample)
        self.split_margin = SPLIT_MARGIN
        self.counts = new_counts()

    @contextlib.contextmanager
    def _timed(self, key):
        """Adds the seconds the with-block took to counts[key] (not when it raised)."""
        t0 = time.monotonic()
        yield
        self.counts[key] += time.monotonic() - t0

    # -- inputs
    def set_shape(self, shape, seed, routing=None):
        key = (shape_key(shape), seed, routing.key if routing else None)
        if key == self.shape_key:
            return
        torch = self.torch
        self.per_bs.clear()
        self.shape_key = key
        self.routing = routing
        e, n, k = shape["e"], shape["n"], shape["k"]
        with self._timed("inputs_s"):
            g = torch.Generator(device="cuda").manual_seed(seed_for(shape, 0, seed))
            block = shape_block(shape)
            self.w1, self.w1s = make_weights(torch, e, 2 * n, k, shape["dtype"], block, g, "cuda")
            self.w2, self.w2s = make_weights(torch, e, k, n, shape["dtype"], block, g, "cuda")
            torch.cuda.synchronize()

    def inputs(self, shape, m, seed):
        L = self.per_bs.get(m)
        if L is not None:
            return L
        with self._timed("inputs_s"):
            torch = self.torch
            e, topk = shape["e"], shape["topk"]
            g = torch.Generator(device="cuda").manual_seed(seed_for(shape, m, seed))
            fp8 = shape["dtype"] == "fp8_w8a8"
            x = torch.randn(m, shape["k"], device="cuda", generator=g)
            if fp8:  # tokens of different norms, so a per-token scale on the wrong row shows
                x = x * spread(torch, (m, 1), g, "cuda")
            x = x.to(torch.bfloat16)
            logits = torch.randn(m, e, device="cuda", generator=g)
            w, ids = torch.topk(torch.softmax(logits, dim=-1), topk, dim=-1)
            w = (w / w.sum(dim=-1, keepdim=True)).float().contiguous()
            if self.routing is not None:  # captured expert ids; the weights stay softmax-shaped
                ids = torch.tensor(self.routing.draw(m), device="cuda", dtype=torch.int32).view(m, topk)
            L = layer_buffers(torch, shape, m, x, ids, w, self.w1, self.w2, self.w1s, self.w2s)
            L["ref"] = reference_layer(torch, x, L["topk_ids"], w, self.w1, self.w2, self.w1s, self.w2s,
                                       L["block"], fp8)
            self.per_bs[m] = L
            torch.cuda.synchronize()
        return L

    def check(self, L):
        """Relative max error against the reference. bf16 keeps 8 significant bits (2^-8 = 0.4 %
        per rounding); the output is rounded three times (GEMM1, SiLU*up, GEMM2) and the order of
        fp32 accumulation differs, so a right kernel stays well under 2 % of the output's range,
        while a wrong expert, a lost routing weight or a skipped block is off by order 1.

        fp8 (FP8_REL_TOL, 3 %): the reference quantizes x and the intermediate by the kernel's own
        rule and uses the weights' exact e4m3 values and scales, so quantization itself is not an
        error. What differs is what differs for bf16, plus this: where the kernel's bf16
        intermediate differs from the reference's by an ulp (accumulation order), its e4m3
        rounding can land one e4m3 step (2^-3 of the value) away; that hits a small share of the
        N terms of a GEMM2 sum, with random signs, which is well under 1 % of the output range. A
        scale applied to the wrong block, token or expert is off by up to 16x (the inputs' blocks
        are spread 2^-2..2^2 on purpose, see spread()), a missing scale by orders of magnitude."""
        return rel_error(self.torch, L["out"], L["ref"])

    # -- timing
    def graph(self, fn):
        torch = self.torch
        g = torch.cuda.CUDAGraph()
        with torch.cuda.stream(self.stream):
            fn()  # a capture must not be the first launch of a kernel
        torch.cuda.current_stream().wait_stream(self.stream)
        with torch.cuda.graph(g, stream=self.stream):
            for _ in range(LAYERS_PER_GRAPH):
                fn()
        return g

    def _gpu_us(self, fn):
        """What fn queued took the GPU, between two events: microseconds."""
        self.ev[0].record()
        fn()
        self.ev[1].record()
        self.ev[1].synchronize()
        return self.ev[0].elapsed_time(self.ev[1]) * 1000.0

    def _sample(self, g, i):
        """One timed replay of g after an L2 flush: microseconds per layer."""
        self.flush.fill_(i)
        us = self._gpu_us(g.replay)
        self.timed_s += us * 1e-6
        return us / LAYERS_PER_GRAPH

    def check_sample(self, fn):
        """One timed layer, fn, for racing on the check's layer: microseconds, or None when its
        launches took the host longer than the hold. After an L2 flush, as a replay; the stream
        is held for HOLD_CYCLES first, so that every launch of the layer is queued before the GPU
        starts it and the host's launch gaps do not count (with Python launching each kernel
        they would, at small batch sizes, be most of the layer)."""
        torch = self.torch
        if self.hold_us is None:  # measured once; a PyTorch without the private hold judges no check layer
            has_hold = hasattr(torch.cuda, "_sleep")
            self.hold_us = self._gpu_us(lambda: torch.cuda._sleep(HOLD_CYCLES)) if has_hold else math.inf
        if math.isinf(self.hold_us):
            return None
        self.flush.fill_(0)
        torch.cuda._sleep(HOLD_CYCLES)
        launch_s = []

        def launch():
            t0 = time.monotonic()
            fn()
            launch_s.append(time.monotonic() - t0)
        us = self._gpu_us(launch)
        self.timed_s += us * 1e-6
        if launch_s[0] * 1e6 >= self.hold_us:
            self.counts["check_late"] += 1
            return None
        return us

    def time_graph(self, g, m, budget_s, min_n=None, max_n=None, best_us=0.0, of_mean=False):
        """Samples of one graph replay per layer, to the stop rule (precise): (stats, how), how ""
        when the rule (or the budget) stopped it. With best_us and a race margin, a graph whose fastest of
        the first RACE_SAMPLES timed replays is slower than best_us by more than the margin stops
        there: how "pruned". With a settle margin too, a graph that stayed in the race stops once
        it has min_n samples whose mean lies above best_us by more than the settle margin plus
        SETTLE_Z standard errors (worker/backend.h, wrk_settled): how "settled". of_mean: the
        rule asks the standard error of the mean alone to be under rsd_target (the up/down
        halves: see _one).

        Racing times the first RACE_SAMPLES replays and judges the fastest of them (the first
        replay of a graph may carry its upload; a first replay beyond the best by RACE_FAR
        margins loses alone: race_lost): a config that loses pays those replays alone,
        not the warmup ones too; one that stays in the race counts them as warmup replays and is
        sampled afresh after as many replays as without racing (warmup >= 2), so what is
        measured for a winner does not change."""
        warm = int(m["warmup"])
        if racing(m, best_us):
            head = []
            while len(head) < RACE_SAMPLES:
                head.append(self._sample(g, len(head)))
                if race_lost(m, best_us, head):
                    return stats(head), "pruned"
            warm = max(0, warm - RACE_SAMPLES)
        for _ in range(warm):
            g.replay()
        samples = []
        t_end = time.monotonic() + budget_s
        min_n = int(min_n or m["min_samples"])
        max_n = int(max_n or m["max_samples"])
        while len(samples) < max_n:
            samples.append(self._sample(g, len(samples) + 1))
            if len(samples) >= min_n:
                st = stats(samples)
                if precise(m, st, of_mean):
                    break
                if settled(m, best_us, st):
                    return st, "settled"
                if time.monotonic() > t_end:
                    break
        return stats(samples), ""

    def split_wanted(self, median_us, best_us):
        """Whether a verified config's halves are timed: only for a config whose whole-layer
        median is within split_margin of the best known median (or when none is known). The
        halves only choose the _down file's pair (up, down), and a pair's half can only beat the
        whole-layer best's by what the other half loses: on the H200 every chosen half came from
        a config within 8 % of the best whole layer (HELPER.md, "Split")."""
        return best_us <= 0 or median_us <= best_us * (1.0 + self.split_margin)

    def one(self, shape, cfg, bs, m, split, best_us=0.0, judge=False):
        """One (config, batch size): a reply line without id and bs. ok and pruned replies carry
        timed_us, the GPU time of their timed replays. judge: race on the check's layer too
        (check_lost; not at a config's first batch size)."""
        t0 = self.timed_s
        res = self._one(shape, cfg, bs, m, split, best_us, judge)
        if res.get("status") in ("ok", "pruned"):
            res["timed_us"] = round((self.timed_s - t0) * 1e6, 3)
        return res

    def _one(self, shape, cfg, bs, m, split, best_us, judge=False):
        """First launch (compile and launch errors), graph, racing, then the reference check for
        a config that stayed in the race, then its halves when split_wanted(). A pruned config
        is never a winner, so it is not checked; every ok reply was checked, on the output of
        the graph it was timed with (poisoned before the replays, so a graph that writes
        nothing fails)."""
        torch = self.torch
        L = self.inputs(shape, bs, m["seed"])
        try:
            self.kernel.layer(L, cfg)
            torch.cuda.synchronize()
        except Exception as e:
            self._sticky(e)
            status, detail = classify(e)
            return {"status": status, "detail": detail}
        try:
            # racing on the check's layer: only where a replay of the graph costs more than the
            # hold (a far loser then saves its capture and a replay for one layer and the hold)
            if judge and racing(m, best_us) and best_us * LAYERS_PER_GRAPH >= (self.hold_us or 0):
                us = self.check_sample(lambda: self.kernel.layer(L, cfg))
                if us is not None and check_lost(m, best_us, us):
                    self.counts["pruned"] += 1
                    self.counts["check_pruned"] += 1
                    res = stats([us])
                    res.update(status="pruned", up_us=0.0, down_us=0.0,
                               detail="pruned: the check's layer %.2fx the best %.4g us; not verified" % (
                                   us / best_us, best_us))
                    return res
            with self._timed("capture_s"):
                g = self.graph(lambda: self.kernel.layer(L, cfg))
            L["out"].fill_(float("nan"))
            res, how = self.time_graph(g, m, m["budget_ms"] / 1000.0, best_us=best_us)
            del g
        except Exception as e:
            self._sticky(e)
            status, detail = classify(e)
            return {"status": status, "detail": detail}
        res["up_us"] = res["down_us"] = 0.0
        if how == "pruned":
            # out of the race: neither checked nor split (a pruned row is never exported)
            self.counts["pruned"] += 1
            res["status"] = "pruned"
            res["detail"] = "pruned: fastest of %d samples %.2fx the best %.4g us; not verified" % (
                res["samples"], res["min_us"] / best_us, best_us)
            return res
        with self._timed("check_s"):
            err = self.check(L)
        self.counts["verified"] += 1
        tol = FP8_REL_TOL if L["fp8"] else REL_TOL
        if not err <= tol:
            return {"status": "wrong_result", "detail": "max error %.3g of the output range (limit %.3g)" % (err, tol)}
        if split and not self.split_wanted(res["median_us"], best_us):
            self.counts["split_skipped"] += 1
        elif split:
            try:
                # The halves only choose the _down file's pairs, by their sums: fewer samples,
                # and each half stops once its mean is known to rsd_target (standard error),
                # not when its samples' spread is under it, which where the clock moves under
                # the power cap (3-4 % at 4096 tokens on an H200) never happens before the budget.
                ms = dict(m, warmup=1, min_samples=min(3, m["min_samples"]))
                gu = self.graph(lambda: self.kernel.up(L, cfg))
                res["up_us"] = self.time_graph(gu, ms, m["budget_ms"] / 2000.0, of_mean=True)[0]["median_us"]
                del gu
                gd = self.graph(lambda: self.kernel.down(L, cfg))
                res["down_us"] = self.time_graph(gd, ms, m["budget_ms"] / 2000.0, of_mean=True)[0]["median_us"]
                del gd
                self.counts["split"] += 1
            except Exception as e:
                self._sticky(e)
                status, detail = classify(e)
                return {"status": status, "detail": detail}
        res["status"] = "ok"
        res["detail"] = "rel_err=%.2e" % err
        if how == "settled":
            self.counts["settled"] += 1
            res["detail"] += "; settled: mean %.3fx the best after %d samples" % (res["mean_us"] / best_us,
                                                                                 res["samples"])
        return res

    def forget_aligns(self):
        """Align buffers are per (batch size, BLOCK_SIZE_M); a config's are not kept past it."""
        for L in self.per_bs.values():
            for key in [k for k in L if isinstance(k, tuple)]:
                del L[key]

    def _sticky(self, exc):
        """A CUDA error that poisons the context ends the helper once its line is out (the C side
        then stores the rest of the config as crashed and starts a new helper)."""
        try:
            self.torch.cuda.synchronize()
        except Exception:
            raise ContextLost(one_line(exc))


class Session:
    """What serve() drives: prepare() and measure()."""

    def __init__(self, kernel, measurer, pool):
        self.kernel = kernel
        self.measurer = measurer
        self.pool = pool
        self.routings = {}

    def prepare(self, shape, cfgs, bss):
        if self.pool:
            self.pool.submit(shape, cfgs, bss)

    def routing(self, shape, spec, seed):
        """The Routing of (path, sha256) for shape, loaded once; RoutingError when unusable."""
        if spec is None:
            return None
        key = spec + (seed,)
        r = self.routings.get(key)
        if r is None:
            r = Routing(spec[0], spec[1], self.kernel.torch)
            r.seed = seed
            self.routings = {key: r}  # one sweep's file at a time
        r.check(shape)
        return r

    def measure(self, shape, cfg, bss, m, split, routing=None):
        try:
            rt = self.routing(shape, routing, int(m["seed"]))
        except RoutingError as e:
            for _ in bss:
                yield {"status": "launch_error", "detail": "routing %s: %s" % (routing[0], e)}
            return
        self.measurer.set_shape(shape, m["seed"], rt)
        if self.pool and self.pool.pending(shape, cfg):
            # the inputs and references of every batch size while the compile ends (a sweep's
            # first config); one that fails here fails again below, in its batch size's place
            for bs in bss:
                try:
                    self.measurer.inputs(shape, bs, m["seed"])
                except Exception:
                    break
        refused = self.pool.wait(shape, cfg) if self.pool else None
        best = m.get("best_us") or [0.0] * len(bss)
        for i, (bs, best_us) in enumerate(zip(bss, best)):
            if refused:  # the compiler's verdict on a config holds for every batch size
                yield {"status": refused[0], "detail": refused[1]}
                continue
            try:
                res = self.measurer.one(shape, cfg, bs, m, split, best_us, judge=i > 0)
                if res["status"] in ("invalid", "compile_error"):
                    refused = (res["status"], res["detail"])
            except ContextLost as e:
                yield {"status": "launch_error", "detail": "CUDA context lost: %s" % e}
                log("CUDA context lost (%s); exiting so the worker starts a new helper" % e)
                sys.exit(3)
            yield res
        # only the config's own kernels: the align, activation and quantize kernels are the
        # same few for every config, and loading them again from disk costs each config time
        drop_jit_caches(self.kernel.config_jit_functions())
        self.measurer.forget_aligns()

    def peak_rss_kb(self):
        return max(peak_rss_kb(), self.pool.peak_kb if self.pool else 0)

    def gpu_s(self):
        return getattr(self.measurer, "timed_s", 0.0)

    def stats(self):
        """The "stats" object of done: COUNT_KEYS since the helper started, the split margin, and
        the start-up marks ("start": seconds after the helper's start, see mark())."""
        out = dict(getattr(self.measurer, "counts", None) or new_counts())
        if self.pool:
            out["compiled_here"] = self.pool.compiled_here
            out["compile_wait_s"] = self.pool.wait_s
        out = {k: round(v, 3) if isinstance(v, float) else v for k, v in out.items()}
        out["start"] = dict(START)
        margin = getattr(self.measurer, "split_margin", SPLIT_MARGIN)
        out["split_margin"] = margin if math.isfinite(margin) else "inf"
        return out


# ---- compiling ahead -------------------------------------------------------------------------

_W = {}


def _pool_init(kernel_name, gpu, cuda_up=None):
    """A compile process's start: torch, triton and the kernel, then its CUDA context once the
    measuring process has its own (cuda_up is set; at most CUDA_WAIT_S): contexts are made one
    at a time by the driver, and the measuring process's is the one the hello waits for (on an
    H200, 0.35 s alone and 2.3 s beside 14 others; docs/performance.md)."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6").prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL: never outlive the helper
    except OSError:
        pass
    sys.stdout = sys.stderr
    torch, triton = import_stack()
    if cuda_up is not None:
        cuda_up.wait(CUDA_WAIT_S)
    torch.cuda.set_device(gpu)
    _W["torch"] = torch
    _W["kernel"] = load_kernel(kernel_name, torch, triton)
    _W["shape"] = None


def _pool_compile(shape, cfg, bss, part=None):
    """Compiles one config (part: one of its kernel's compile_parts) for every batch size's launch
    signature, without launching; the compiled kernels land in Triton's on-disk cache, where the
    measuring process finds them."""
    torch = _W["torch"]
    kernel = _W["kernel"]
    t0 = time.monotonic()
    key = shape_key(shape)
    if _W["shape"] != key:
        e, n, k = shape["e"], shape["n"], shape["k"]
        fp8 = shape["dtype"] == "fp8_w8a8"
        wdt = torch.float8_e4m3fn if fp8 else torch.bfloat16
        block = shape_block(shape)
        _W["w1"] = torch.empty(e, 2 * n, k, device="cuda", dtype=wdt)
        _W["w2"] = torch.empty(e, k, n, device="cuda", dtype=wdt)
        _W["w1s"] = _W["w2s"] = None
        if fp8:
            _W["w1s"] = torch.ones((e, _cdiv(2 * n, block[0]), _cdiv(k, block[1])) if block else (e,), device="cuda")
            _W["w2s"] = torch.ones((e, _cdiv(k, block[0]), _cdiv(n, block[1])) if block else (e,), device="cuda")
        _W["shape"] = key
    err = None
    seen = set()
    for m in bss:
        sig = (m % 16 == 0, m == 1) if kernel.name != "moetune" else ()
        if sig in seen:
            continue
        seen.add(sig)
        topk, k, e = shape["topk"], shape["k"], shape["e"]
        ids = torch.randint(0, e, (m, topk), device="cuda", dtype=torch.int32)
        w = torch.rand(m, topk, device="cuda")
        x = torch.empty(m, k, device="cuda", dtype=torch.bfloat16)
        L = layer_buffers(torch, shape, m, x, ids, w, _W["w1"], _W["w2"], _W["w1s"], _W["w2s"])
        try:
            kernel.warm(L, cfg, part)
        except Exception as e:
            status, detail = classify(e)
            # only what the compiler says about the config itself is trusted; anything else the
            # measuring process meets again and reports
            err = (status, detail) if status in ("invalid", "compile_error") else None
            break
    drop_jit_caches(kernel.config_jit_functions())
    return time.monotonic() - t0, err, peak_rss_kb()


def _pool_ping():
    """A task that returns once its process has started (its initializer ran): the pool is ready."""
    return os.getpid()


class CompilePool:
    """Processes that compile announced configs ahead, on all CPU cores but the measuring one.

    It is started before the measuring process imports torch, so both start-ups overlap. While
    none of its processes is ready, the measuring process waits at most ready_wait_s for one
    before it compiles a config it needs itself (its first launch does), which is sooner than a
    process still starting.

    A config is compiled as its kernel's compile_parts(), one task each, so the first config's
    kernels compile side by side in several processes instead of one after the other in one
    (at a sweep's start every process is idle and the measuring process waits for that config);
    a part every config of a key shares (moetune's align step per BLOCK_SIZE_M) is one task per
    shape and key."""

    def __init__(self, kernel_name, gpu, workers, executor=None):
        self.cuda_ev = None
        if executor is None:
            import concurrent.futures as cf
            import multiprocessing as mp
            ctx = mp.get_context("spawn")
            self.cuda_ev = ctx.Event()
            executor = cf.ProcessPoolExecutor(max_workers=workers, mp_context=ctx,
                                              initializer=_pool_init, initargs=(kernel_name, gpu, self.cuda_ev),
                                              max_tasks_per_child=256)
        self.ex = executor
        self.parts = KERNELS[kernel_name].compile_parts
        self.futures = {}        # (shape, config) -> its parts, (future, shared key or None)
        self.shared = {}         # (shape, shared key) -> the future of that part
        self.counted = set()     # the shared keys whose compile is in compile_s already
        self.peak_kb = 0
        self.compile_s = 0.0
        self.wait_s = 0.0        # the measuring process's time waiting for compiles
        self.compiled_here = 0   # configs it compiled itself because the pool was not ready
        self.ready = False
        # at the first measure the pool's processes have imported torch (they started with the
        # measuring process) and make their CUDA contexts: worth this wait before compiling here
        self.ready_wait_s = 1.0
        self.broken = None       # why the pool cannot take work, once it cannot
        # one task per process: submitting starts the processes now
        self.pings = [self._submit(_pool_ping) for _ in range(workers)]
        for p in self.pings:
            if p is not None:
                p.add_done_callback(lambda _: mark("pool_ready"))

    @staticmethod
    def _key(shape, cfg):
        return shape_key(shape) + tuple(cfg[k] for k in CFG_KEYS)

    def _submit(self, fn, *args):
        if self.broken:
            return None
        try:
            return self.ex.submit(fn, *args)
        except Exception as e:  # BrokenProcessPool, or shut down: only the head start is lost
            self.broken = one_line(e)
            log("compile pool unusable (%s); compiling in the measuring process" % self.broken)
            return None

    def await_ready(self, timeout):
        """Waits up to timeout seconds for a pool process to be ready."""
        import concurrent.futures as cf
        pings = [p for p in self.pings if p is not None]
        if pings:
            cf.wait(pings, timeout=timeout, return_when=cf.FIRST_COMPLETED)

    def cuda_up(self):
        """The measuring process has its CUDA context: the compile processes make theirs now."""
        if self.cuda_ev is not None:
            self.cuda_ev.set()

    def is_ready(self):
        """True once a pool process has started (a ping or a compile came back)."""
        if not self.ready:
            self.ready = any(p is not None and p.done() and not p.cancelled() and p.exception() is None
                             for p in self.pings)
        return self.ready

    def submit(self, shape, cfgs, bss):
        for cfg in cfgs:
            key = self._key(shape, cfg)
            if key in self.futures:
                continue
            parts = []
            for part, shared in self.parts(cfg):
                skey = shape_key(shape) + shared if shared else None
                f = self.shared.get(skey) if skey else None
                if f is None:
                    f = self._submit(_pool_compile, shape, cfg, list(bss), part)
                    if f is None:
                        return
                    if skey:
                        self.shared[skey] = f
                parts.append((f, skey))
            self.futures[key] = parts
        # forget finished ones past a bound; their kernels are on disk
        if len(self.futures) > 8192:
            for k in [k for k, parts in self.futures.items() if self._done(parts)]:
                del self.futures[k]
        if len(self.shared) > 8192:
            for k in [k for k, f in self.shared.items() if f.done()]:
                del self.shared[k]
                self.counted.discard(k)

    @staticmethod
    def _done(parts):
        return all(f.done() for f, _ in parts)

    def pending(self, shape, cfg):
        """True while a part of the config's announced compile is not done."""
        return not self._done(self.futures.get(self._key(shape, cfg), ()))

    def wait(self, shape, cfg):
        """Waits for the config's compile (all its parts); (status, detail) when the compiler
        refused it. Returns None, and the measuring process compiles the config itself, when the
        compile is not done and no pool process has started within ready_wait_s."""
        parts = self.futures.pop(self._key(shape, cfg), None)
        if not parts:
            return None
        if not self._done(parts) and not self.is_ready():
            self.await_ready(self.ready_wait_s)
            if not self._done(parts) and not self.is_ready():
                for f, skey in parts:  # its own parts, when they have not reached a process yet
                    if skey is None:
                        f.cancel()
                self.compiled_here += 1
                return None
        t0 = time.monotonic()
        refused = None
        try:
            for f, skey in parts:
                secs, err, kb = f.result()
                self.ready = True
                if skey not in self.counted:  # a shared part counts once
                    if skey:
                        self.counted.add(skey)
                    self.compile_s += secs
                    self.peak_kb = max(self.peak_kb, kb)
                refused = refused or err
            return refused
        except Exception as e:  # a broken pool only costs the head start
            log("compile ahead failed (%s); compiling in the measuring process" % one_line(e))
            return None
        finally:
            self.wait_s += time.monotonic() - t0

    def kill(self):
        """Ends the pool's processes now (the helper is leaving without measuring)."""
        for p in list((getattr(self.ex, "_processes", None) or {}).values()):
            try:
                p.kill()
            except Exception:
                pass
        try:
            self.ex.shutdown(wait=False, cancel_futures=True)
        except Exception:
            pass


# ---- probe -----------------------------------------------------------------------------------

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
    """The folder the engine's lookup module lives in (SGLang: the one holding
    configs/triton_X_Y_Z/; vLLM: its flat configs/ folder), or None."""
    hit = layout.get("lookup") if layout else None
    mod = hit[2] if hit else None
    if mod is not None and getattr(mod, "__file__", None):
        d = os.path.dirname(os.path.realpath(mod.__file__))
        return d if engine == "sglang" else os.path.join(d, "configs")
    import importlib
    mods = (["sglang.srt.layers.moe.moe_runner.triton_utils", "sglang.srt.layers.moe.fused_moe_triton"]
            if engine == "sglang" else ["vllm.model_executor.layers.fused_moe"])
    for m in mods:
        try:
            spec = importlib.util.find_spec(m)
        except Exception:
            spec = None
        if spec and spec.submodule_search_locations:
            d = list(spec.submodule_search_locations)[0]
            return d if engine == "sglang" else os.path.join(d, "configs")
    return None


def probe(engine, names=None):
    """One {"probe": ...} line (HELPER.md "Probe"): the interpreter, torch, Triton, the device,
    and the engine: its version, layout, config folder and, for --names, its own answers."""
    out = {"python": sys.executable, "python_version": "%d.%d.%d" % sys.version_info[:3],
           "torch": None, "triton": None, "error": None, "device": None,
           "engine": {"name": engine, "version": None, "config_dir": None, "env": {}, "error": None,
                      "layout": None, "own": None}}
    eng = out["engine"]
    var = "SGLANG_MOE_CONFIG_DIR" if engine == "sglang" else "VLLM_TUNED_CONFIG_FOLDER"
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


# ---- main ------------------------------------------------------------------------------------

def main(argv):
    ap = argparse.ArgumentParser(prog="moetune_helper.py", description=__doc__.splitlines()[0])
    ap.add_argument("--kernel", choices=("sglang", "vllm", "moetune"), default="moetune")
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--cache-dir")
    ap.add_argument("--compile-workers", type=int, default=-1, help="0: compile in the measuring process")
    ap.add_argument("--probe", action="store_true")
    ap.add_argument("--engine", choices=("sglang", "vllm"), default="sglang")
    ap.add_argument("--names", help="with --probe: a JSON list of shapes to ask the engine's own lookup about")
    a = ap.parse_args(argv)
    if a.probe:
        try:
            names = parse_names(a.names) if a.names is not None else None
        except ProtocolError as e:
            emit({"fatal": str(e)})
            return 1
        return probe(a.engine, names)
    pool = None
    try:
        if a.cache_dir:
            os.environ.setdefault("TRITON_CACHE_DIR", os.path.join(a.cache_dir, "triton"))
        split_margin = split_margin_from_env(os.environ)
        workers = a.compile_workers
        if workers < 0:
            workers = max(1, (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 2) - 2)
        # the pool's processes import torch and triton while this one does
        pool = CompilePool(a.kernel, a.gpu, workers) if workers > 0 else None
        torch, triton = import_stack()
        mark("imported")
        dev = device_info(torch, a.gpu)
        kernel = load_kernel(a.kernel, torch, triton)
        measurer = Measurer(torch, kernel)
        measurer.split_margin = split_margin
        mark("device")
        if pool:
            pool.cuda_up()
        compiler = "triton_" + triton.__version__.split("+")[0].replace(".", "_")
        vers = versions_text(a.kernel, torch, triton, kernel.engine)
        hello = {"kernel": a.kernel, "compiler": compiler, "versions": vers, "device": dev,
                 "kernel_hash": file_hash([os.path.abspath(__file__)] + kernel.sources, vers)}
    except Fatal as e:
        emit({"fatal": str(e)})
        if pool:
            pool.kill()
        return 1
    except Exception as e:  # anything else at start is still one line, with the traceback on stderr
        import traceback
        traceback.print_exc()
        emit({"fatal": "%s: cannot start the %s kernel: %s" % (sys.executable, a.kernel, one_line(e))})
        if pool:
            pool.kill()
        return 1
    mark("hello")
    emit({"hello": hello})
    session = Session(kernel, measurer, pool)
    rc = serve(sys.stdin, session)
    log("done: peak rss %d MiB (measuring process %d MiB, compile processes %d MiB), %.0f s compiling ahead; %s" %
        (session.peak_rss_kb() >> 10, peak_rss_kb() >> 10, (pool.peak_kb if pool else 0) >> 10,
         pool.compile_s if pool else 0, json.dumps(session.stats(), separators=(",", ":"))))
    if pool:
        # nothing is left to compile; an orderly shutdown would join each process through its
        # CUDA context's teardown, one after another (about 2 s on an H200), while the worker waits
        pool.kill()
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
