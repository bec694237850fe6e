"""Measuring one config: inputs, the reference check, graph timing, racing, settling and the stop
rule; the Session that serve() drives."""
import contextlib
import hashlib
import json
import math
import os
import sys
import time

from . import protocol
from .device import peak_rss_kb
from .kernels import Layer
from .protocol import Fatal, START, log, one_line, shape_block, shape_key
from .reference import FP8_REL_TOL, REL_TOL, make_weights, reference_layer, rel_error, spread
from .routing import Routing, RoutingError


def _read_rules():
    """The measurement rules C applies too (measure.json beside this file; worker/backend.h gets
    them as WRK_* at build time): {py name: value}, an int rule as int, a double one as float."""
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "measure.json"), encoding="utf-8") as f:
        rules = json.load(f)["rules"]
    return {r["py"]: int(r["value"]) if r["type"] == "int" else float(r["value"]) for r in rules}


RULES = _read_rules()
RACE_SAMPLES = RULES["RACE_SAMPLES"]  # racing judges the fastest of this many samples (wrk_race_lost)
RACE_FAR = RULES["RACE_FAR"]          # a first sample beyond the best by this many margins loses alone
CHECK_FAR = RULES["CHECK_FAR"]        # a timed check layer beyond the best by this many margins loses (wrk_check_lost)
CHECK_FLOOR = RULES["CHECK_FLOOR"]    # ... and by at least this share of it, whatever the margin
SEM_FRACTION = RULES["SEM_FRACTION"]  # the stop rule's standard-error arm (wrk_precise)
SETTLE_Z = RULES["SETTLE_Z"]          # settling: standard errors to spare (wrk_settled)
SETTLE_SAMPLES = RULES["SETTLE_SAMPLES"]  # settling looks from this many samples on
SETTLE_EARLY = RULES["SETTLE_EARLY"]  # ... and before min_samples asks this much more margin
LAYERS_PER_GRAPH = 10         # layers a timed replay runs, at most (layers_for)
SAMPLE_US = 500.0             # ... fewer where that many microseconds of layers make a sample (layers_for)
FLUSH_BYTES = 256 << 20       # the L2 flush when torch does not tell the device's L2 size (flush_bytes)
HOLD_CYCLES = 2_000_000       # GPU clocks the stream is held before a timed check layer (Measurer.check_sample)
SPLIT_MARGIN = 0.1            # halves timed within this fraction of the best median (Measurer.split_wanted)
SPLIT_MARGIN_ENV = "MOETUNE_SPLIT_MARGIN"


def layers_for(best_us):
    """Layers one timed replay runs, for a batch size whose best known layer takes best_us: as
    many as make a sample of SAMPLE_US, at most LAYERS_PER_GRAPH (all of them where no best is
    known). The layers amortize a replay's launch and the timer's resolution over short layers;
    beyond SAMPLE_US they add GPU time and no precision, which the samples' count gives."""
    if not best_us > 0:
        return LAYERS_PER_GRAPH
    return max(1, min(LAYERS_PER_GRAPH, math.ceil(SAMPLE_US / best_us)))


def seed_for(shape, m, seed):
    key = "%d,%d,%d,%d,%s,%d,%d" % (shape["e"], shape["n"], shape["k"], shape["topk"], shape["dtype"], m, seed)
    return int(hashlib.sha256(key.encode()).hexdigest()[:15], 16)


def flush_bytes(props):
    """Bytes the L2 flush before each timed replay writes: twice the device's L2 (as the cuda
    backend does: every line is evicted, and the flush, untimed GPU time paid per sample, costs
    no more than it must), else FLUSH_BYTES when torch's device properties do not say."""
    l2 = getattr(props, "L2_cache_size", 0)
    if isinstance(l2, bool) or not isinstance(l2, int) or l2 <= 0:
        return FLUSH_BYTES
    return 2 * l2


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


def can_settle(m, best_us):
    """Whether settling is on for this measurement: a settle margin, racing, a known best."""
    return m.get("settle_margin", 0) > 0 and racing(m, best_us)


def settled(m, best_us, st):
    """Racing's second check (worker/backend.h, wrk_settled): a config with SETTLE_SAMPLES samples
    (or min_samples, the fewer) whose mean lies above best_us by more than the settle margin plus
    SETTLE_Z standard errors (before min_samples, SETTLE_EARLY more) can be neither the pick nor a
    near-tie; the RSD rule's precision would be spent on it for nothing."""
    n = st["samples"]
    if not (can_settle(m, best_us) and n >= 2) or (n < SETTLE_SAMPLES and n < m["min_samples"]):
        return False
    se = st["stddev_us"] / math.sqrt(st["samples"])
    margin = m["settle_margin"] + (SETTLE_EARLY if n < m["min_samples"] else 0.0)
    return st["mean_us"] - SETTLE_Z * se > best_us * (1.0 + margin)


def mark(phase):
    """Books the measuring process's wall since the previous mark to phase (protocol.Phases)."""
    protocol.PHASES.mark(phase)


def stats(samples):
    n = len(samples)
    mean = sum(samples) / n
    var = sum((x - mean) ** 2 for x in samples) / (n - 1) if n > 1 else 0.0
    s = sorted(samples)
    med = s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])
    return {"median_us": med, "min_us": s[0], "mean_us": mean, "stddev_us": math.sqrt(var), "samples": n}


def layer_buffers(torch, shape, m, x, ids, w, w1, w2, w1s, w2s, device="cuda"):
    """One batch size's Layer: inputs, weights and the intermediates the kernels write."""
    n, k, topk = shape["n"], shape["k"], shape["topk"]
    return Layer(m=m, e=shape["e"], topk=topk, x=x, w1=w1, w2=w2, w1s=w1s, w2s=w2s,
                 fp8=shape["dtype"] == "fp8_w8a8", block=shape_block(shape),
                 topk_ids=ids.to(torch.int32).contiguous(), topk_w=w, w_flat=w.view(-1),
                 c1=torch.empty(m * topk, 2 * n, device=device, dtype=torch.bfloat16),
                 c2=torch.empty(m * topk, n, device=device, dtype=torch.bfloat16),
                 c3=torch.empty(m * topk, k, device=device, dtype=torch.bfloat16),
                 out=torch.empty(m, k, device=device, dtype=torch.bfloat16))


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


class Measurer:
    """Inputs, references and timing on one GPU, for one kernel."""

    def __init__(self, torch, kernel):
        self.torch = torch
        self.kernel = kernel
        self.shape_key = None
        self.per_bs = {}
        self.flush_bytes = flush_bytes(torch.cuda.get_device_properties(torch.cuda.current_device()))
        self.flush = torch.empty(self.flush_bytes // 4, dtype=torch.int32, device="cuda")
        self.ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
        self.ev_pool = []  # event pairs of samples queued together (_queued)
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
            L.ref = reference_layer(torch, x, L.topk_ids, w, self.w1, self.w2, self.w1s, self.w2s,
                                       L.block, fp8)
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
        return rel_error(self.torch, L.out, L.ref)

    # -- timing
    def graph(self, fn, layers=LAYERS_PER_GRAPH):
        """A CUDA graph of layers calls of fn; its layers attribute says how many (a sample is a
        replay's time over it)."""
        torch = self.torch
        g = torch.cuda.CUDAGraph()
        with torch.cuda.stream(self.stream):
            fn()  # a capture must not be the first launch of a kernel
        torch.cuda.current_stream().wait_stream(self.stream)
        with torch.cuda.graph(g, stream=self.stream):
            for _ in range(layers):
                fn()
        g.layers = layers
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
        self._book_timed(us)
        return us / g.layers

    def _book_timed(self, us):
        """Books us microseconds of timed GPU work: to the GPU-busy numerator (timed_s) and to the
        running phase's "timed" share (protocol.Phases)."""
        self.timed_s += us * 1e-6
        protocol.PHASES.timed(us * 1e-6)

    def _pairs(self, n):
        """n pairs of timing events for samples queued together, made once and reused."""
        while len(self.ev_pool) < n:
            self.ev_pool.append(tuple(self.torch.cuda.Event(enable_timing=True) for _ in range(2)))
        return self.ev_pool[:n]

    def _queued(self, g, n, first):
        """n timed replays of g, each after its L2 flush (filled with first, first + 1, ...), all
        queued before the host waits once: the same GPU work in the same order as n calls of
        _sample, without the GPU idling while the host turns around between them. Only for
        samples that are taken whatever they read (the stop rule looks from min_samples on).
        Microseconds per layer, in order."""
        pairs = self._pairs(n)
        for i, (a, b) in enumerate(pairs):
            self.flush.fill_(first + i)
            a.record()
            g.replay()
            b.record()
        pairs[-1][1].synchronize()
        out = []
        for a, b in pairs:
            us = a.elapsed_time(b) * 1000.0
            self._book_timed(us)
            out.append(us / g.layers)
        return out

    def _next_samples(self, g, n, min_n, settling):
        """The samples after the first n: below min_n those the stop rule cannot refuse, queued
        together (_queued), at most up to SETTLE_SAMPLES first when settling may look there;
        from min_n on one at a time, as the rule looks at each."""
        k = min_n - n
        if settling and n < SETTLE_SAMPLES:
            k = min(k, SETTLE_SAMPLES - n)
        if k > 1:
            return self._queued(g, k, n + 1)
        return [self._sample(g, n + 1)]

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
        self._book_timed(us)
        if launch_s[0] * 1e6 >= self.hold_us:
            self.counts["check_late"] += 1
            return None
        return us

    def time_graph(self, g, m, budget_s, min_n=None, max_n=None, best_us=0.0, of_mean=False, phase=None):
        """Samples of one graph replay per layer, to the stop rule (precise): (stats, how), how ""
        when the rule (or the budget) stopped it. With best_us and a race margin, a graph whose fastest of
        the first RACE_SAMPLES timed replays is slower than best_us by more than the margin stops
        there: how "pruned". With a settle margin too, a graph that stayed in the race stops once
        it has SETTLE_SAMPLES samples (or min_n, the fewer; looked at as they are queued,
        _next_samples) whose mean lies above best_us by more than the settle margin plus
        SETTLE_Z standard errors (worker/backend.h, wrk_settled): how "settled". of_mean: the
        rule asks the standard error of the mean alone to be under rsd_target (the up/down
        halves: see _one). phase: the phase its replays are booked to (default "samples" and
        "warmup"; the halves': "split").

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
                mark(phase or "samples")
                if race_lost(m, best_us, head):
                    return stats(head), "pruned"
            warm = max(0, warm - RACE_SAMPLES)
        for _ in range(warm):
            g.replay()
        mark(phase or "warmup")
        t_end = time.monotonic() + budget_s
        min_n = int(min_n or m["min_samples"])
        max_n = int(max_n or m["max_samples"])
        try:
            samples = []
            while True:
                n = len(samples)
                if n:
                    st = stats(samples)
                    if n >= min_n and precise(m, st, of_mean):
                        break
                    if settled(m, best_us, st):
                        return st, "settled"
                    if n >= min_n and time.monotonic() > t_end:
                        break
                if n >= max_n:
                    break
                samples += self._next_samples(g, n, min(min_n, max_n), can_settle(m, best_us))
            return stats(samples), ""
        finally:
            mark(phase or "samples")

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
        mark("inputs")
        try:
            self.kernel.layer(L, cfg)  # a compile here, else the kernels' load from Triton's disk cache
            torch.cuda.synchronize()
        except Exception as e:
            return self._failed(e)
        finally:
            mark("launch")
        try:
            # racing on the check's layer: only where a replay of the graph costs more than the
            # hold (a far loser then saves its capture and a replay for one layer and the hold)
            layers = layers_for(best_us)
            if judge and racing(m, best_us) and best_us * layers >= (self.hold_us or 0):
                us = self.check_sample(lambda: self.kernel.layer(L, cfg))
                mark("check_layer")
                if us is not None and check_lost(m, best_us, us):
                    self.counts["pruned"] += 1
                    self.counts["check_pruned"] += 1
                    res = stats([us])
                    res.update(status="pruned", up_us=0.0, down_us=0.0,
                               detail="pruned: the check's layer %.2fx the best %.4g us; not verified" % (
                                   us / best_us, best_us))
                    return res
            with self._timed("capture_s"):
                g = self.graph(lambda: self.kernel.layer(L, cfg), layers)
            L.out.fill_(float("nan"))
            mark("capture")
            res, how = self.time_graph(g, m, m["budget_ms"] / 1000.0, best_us=best_us)
            del g
            mark("capture")  # a graph's teardown is its capture's cost too
        except Exception as e:
            failed = self._failed(e)
            mark("other")
            return failed
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
        mark("check")
        self.counts["verified"] += 1
        tol = FP8_REL_TOL if L.fp8 else REL_TOL
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
                for key, half in (("up_us", self.kernel.up), ("down_us", self.kernel.down)):
                    gh = self.graph(lambda: half(L, cfg), layers)
                    res[key] = self.time_graph(gh, ms, m["budget_ms"] / 2000.0, of_mean=True,
                                               phase="split")[0]["median_us"]
                    del gh
                self.counts["split"] += 1
            except Exception as e:
                return self._failed(e)
            finally:
                mark("split")
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
            L.cache.clear()

    def _failed(self, exc):
        """The row of a config whose launch, capture or timing raised exc (its status and
        detail); a context-poisoning error ends the helper first (_sticky)."""
        self._sticky(exc)
        status, detail = classify(exc)
        return {"status": status, "detail": detail}

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
        mark("inputs")
        if self.pool and self.pool.pending(shape, cfg):
            # the inputs and references of every batch size while the compile ends (a sweep's
            # first config); one that fails here fails again below, in its batch size's place
            for bs in bss:
                try:
                    self.measurer.inputs(shape, bs, m["seed"])
                except Exception:
                    break
            mark("inputs")
        refused = self.pool.wait(shape, cfg) if self.pool else None
        mark("compile_wait")
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
        mark("cleanup")

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
        if getattr(self.measurer, "flush_bytes", None):
            out["flush_bytes"] = self.measurer.flush_bytes
        margin = getattr(self.measurer, "split_margin", SPLIT_MARGIN)
        out["split_margin"] = margin if math.isfinite(margin) else "inf"
        return out
