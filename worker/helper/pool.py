"""Compiling ahead: processes that compile announced configs into Triton's disk cache while the
measuring process measures."""
import os
import sys
import time

from .device import import_stack, peak_rss_kb
from .kernels import KERNELS, load_kernel
from .measure import classify, drop_jit_caches, layer_buffers
from .protocol import CFG_KEYS, log, mark, one_line, shape_block, shape_key
from .reference import cdiv


CUDA_WAIT_S = 60.0            # a compile process waits at most this long for the measuring one's CUDA (_pool_init)


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
            _W["w1s"] = torch.ones((e, cdiv(2 * n, block[0]), cdiv(k, block[1])) if block else (e,), device="cuda")
            _W["w2s"] = torch.ones((e, cdiv(k, block[0]), cdiv(n, block[1])) if block else (e,), device="cuda")
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
