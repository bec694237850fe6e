"""The kernels a layer runs: moetune's own (moetune_kernel.py) and an engine's, through its launcher."""
import dataclasses
import os
import sys

from .engines import ENGINE_NAMES, ENGINES, EngineLayout, KERNEL_NAME
from .protocol import Fatal, log

WORKER_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # moetune_kernel.py's folder


@dataclasses.dataclass
class Layer:
    """One batch size's MoE layer, what a kernel's align, up, act and down read and write: the
    inputs (x [m, k] bf16, topk_ids [m, topk] int32, topk_w [m, topk] float32 and w_flat, its flat
    view), the weights (w1 [e, 2n, k], w2 [e, k, n]; with fp8 their scales w1s, w2s and, for block
    scales, block = (block_n, block_k)), the intermediates c1, c2, c3, the output out and the
    reference output ref. cache holds what a kernel makes per config and keeps for the batch size
    (align buffers by ("align", BLOCK_SIZE_M), quantizers by ("quant", name)); Measurer clears it
    after each config."""
    m: int = 0
    e: int = 0
    topk: int = 0
    x: object = None
    w1: object = None
    w2: object = None
    w1s: object = None
    w2s: object = None
    fp8: bool = False
    block: tuple = None
    topk_ids: object = None
    topk_w: object = None
    w_flat: object = None
    c1: object = None
    c2: object = None
    c3: object = None
    out: object = None
    ref: object = None
    cache: dict = dataclasses.field(default_factory=dict)


class Kernel:
    """What both kernels share: one layer is the align step, the up GEMM, the activation, the
    down GEMM and the top-k sum, each kernel with its own align() (start_layer), up, act and down."""

    def layer(self, L, cfg, down=None):
        """One layer with cfg; down, where given, runs the second GEMM (SGLang's _down entry, on
        the one align cfg's BLOCK_SIZE_M made)."""
        self.start_layer(L, cfg)
        self.up(L, cfg)
        self.act(L)
        self.down(L, down or cfg)
        self.torch.sum(L.c3.view(L.m, L.topk, -1), dim=1, out=L.out)


class MoetuneKernel(Kernel):
    """moetune's own Triton layer (moetune_kernel.py)."""
    name = "moetune"
    engine = None

    def __init__(self, torch, triton):
        sys.path.insert(0, WORKER_DIR)
        import moetune_kernel as mk
        self.mk = mk
        self.torch = torch
        self.sources = [os.path.join(WORKER_DIR, "moetune_kernel.py")]

    def jit_functions(self):
        return self.mk.JIT_FUNCTIONS

    def config_jit_functions(self):
        """The kernels compiled anew for each config (the rest depend on BLOCK_SIZE_M at most)."""
        return (self.mk.moe_gemm_kernel,)

    def align(self, L, cfg):
        key = ("align", cfg["BLOCK_SIZE_M"])
        if key not in L.cache:
            L.cache[key] = self.mk.Align(L.topk_ids, L.e, cfg["BLOCK_SIZE_M"])
        return L.cache[key]

    def quant(self, L, name):
        """The run-time quantizer of activation L.<name> (fp8 only), made once per batch size."""
        key = ("quant", name)
        if key not in L.cache:
            block = L.block
            L.cache[key] = self.mk.ActQuant(getattr(L, name), block[1] if block else 0)
        return L.cache[key]

    def up(self, L, cfg, warmup=False):
        al = self.align(L, cfg)
        if not L.fp8:
            self.mk.gemm(L.x, L.w1, L.c1, L.w_flat, al, L.topk, False, cfg, warmup)
            return
        aq = self.quant(L, "x")
        aq.run(warmup)  # inside the timed layer, as the engines quantize per call
        self.mk.gemm(aq.q, L.w1, L.c1, L.w_flat, al, L.topk, False, cfg, warmup, aq.scale, L.w1s,
                     L.block)

    def act(self, L, warmup=False):
        self.mk.silu_mul(L.c1, L.c2, warmup)

    def down(self, L, cfg, warmup=False):
        al = self.align(L, cfg)
        if not L.fp8:
            self.mk.gemm(L.c2, L.w2, L.c3, L.w_flat, al, 1, True, cfg, warmup)
            return
        aq = self.quant(L, "c2")
        aq.run(warmup)
        self.mk.gemm(aq.q, L.w2, L.c3, L.w_flat, al, 1, True, cfg, warmup, aq.scale, L.w2s, L.block)

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
        hit = lay.get("prepare") if ENGINES[name]["prepare_step"] else None
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
        if not L.fp8:
            return {}
        need = ("use_fp8_w8a8", "A_scale", "B_scale") + (("block_shape",) if L.block else ())
        missing = [p for p in need if p not in self.params]
        if missing:
            raise Unsupported("%s: %s has no %s, so it cannot run fp8_w8a8" %
                              (self.where, self.launcher.rsplit(".", 1)[-1], ", ".join(missing)))
        return {"use_fp8_w8a8": True, "A_scale": None, "B_scale": L.w1s if which == 1 else L.w2s,
                "block_shape": list(L.block) if L.block else None}

    def launch_args(self, A, B, C, L, al, mul, top_k, cfg, which=1):
        """The launcher's keyword arguments: moetune's values for the parameters it has."""
        vals = {"A": A, "B": B, "C": C, "A_scale": None, "B_scale": None, "B_zp": None,
                "topk_weights": L.topk_w, "topk_ids": L.topk_ids, "sorted_token_ids": al[0],
                "expert_ids": al[1], "num_tokens_post_padded": al[2], "mul_routed_weight": mul,
                "top_k": top_k, "config": dict(cfg), "compute_type": self.compute_type,
                "use_fp8_w8a8": False, "use_int8_w8a8": False, "use_int8_w8a16": False, "use_int4_w4a16": False,
                "per_channel_quant": False, "block_shape": None, "B_bias": None, "bias": None}
        vals.update(self.fp8_options(L, which))
        return {k: v for k, v in vals.items() if k in self.params}

    @staticmethod
    def out3(L, key):
        """Output L.<key> as (M, top_k, N): see the class comment."""
        return getattr(L, key).view(L.m, L.topk, -1)

    def align(self, L, cfg):
        key = ("align", cfg["BLOCK_SIZE_M"])
        if key not in L.cache:
            if self.prepare is not None:
                vals = {"topk_ids": L.topk_ids, "config": dict(cfg), "num_tokens": L.m, "top_k_num": L.topk,
                        "global_num_experts": L.e, "expert_map": None}
                L.cache[key] = tuple(self.prepare(**{k: v for k, v in vals.items() if k in self.prepare_params}))[:3]
            else:
                L.cache[key] = tuple(self.align_fn(L.topk_ids, cfg["BLOCK_SIZE_M"], L.e))[:3]
        return L.cache[key]

    def up(self, L, cfg):
        self.invoke(**self.launch_args(L.x, L.w1, self.out3(L, "c1"), L, self.align(L, cfg), False, L.topk,
                                       cfg))

    def act(self, L):
        torch = self.torch
        n = L.c2.shape[1]
        torch.mul(torch.nn.functional.silu(L.c1[:, :n]), L.c1[:, n:], out=L.c2)

    def down(self, L, cfg):
        self.invoke(**self.launch_args(L.c2, L.w2, self.out3(L, "c3"), L, self.align(L, cfg), True, 1, cfg,
                                       which=2))

    def start_layer(self, L, cfg):
        L.cache.pop(("align", cfg["BLOCK_SIZE_M"]), None)  # the engine aligns inside every layer (up's align())

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


class Unsupported(Exception):
    """A config or kernel that cannot run this shape's dtype or block scales (stored invalid)."""


KERNELS = dict({"moetune": MoetuneKernel}, **{name: EngineKernel for name in ENGINE_NAMES})


def load_kernel(name, torch, triton):
    return KERNELS[name].load(name, torch, triton)
