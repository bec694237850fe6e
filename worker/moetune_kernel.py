"""moetune's own Triton implementation of the fused-MoE layer the engines run.

The algorithm is the public one: tokens are sorted by expert and each expert's run is padded
to a multiple of BLOCK_SIZE_M (the align step); one grouped GEMM walks the padded blocks in
GROUP_SIZE_M tile order, each block reading the weights of its expert; SiLU(gate) * up between
the two GEMMs; the second GEMM multiplies by the routing weight; the top-k rows of a token are
summed. For fp8 w8a8 the weights are e4m3 with per-tensor (per expert) or block scales, and the
activations are quantized inside the layer (per tensor, or per token and block_k-wide group), as
the engines run their fp8 checkpoints. The meta-parameters (BLOCK_SIZE_M/N/K, GROUP_SIZE_M, num_warps, num_stages) and the grid
(cdiv(padded tokens, BLOCK_SIZE_M) * cdiv(N_out, BLOCK_SIZE_N)) mean what they mean in the
engines' kernels, so a config tuned here is a config for them.

Imported only by the helper (worker/helper/kernels.py) once torch and triton are known to import.
"""
import torch
import triton
import triton.language as tl


@triton.jit(do_not_specialize=["EM", "num_valid"])
def moe_gemm_kernel(a_ptr, b_ptr, c_ptr, w_ptr, a_scale_ptr, b_scale_ptr, sorted_ids_ptr, expert_ids_ptr, npad_ptr,
                    N, K, EM, num_valid,
                    stride_am, stride_ak, stride_be, stride_bn, stride_bk, stride_cm, stride_cn,
                    stride_asm, stride_ask, stride_bse, stride_bsn, stride_bsk,
                    BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,
                    GROUP_SIZE_M: tl.constexpr, A_ROWS_PER_TOKEN: tl.constexpr, MUL_WEIGHT: tl.constexpr,
                    FP8: tl.constexpr, GROUP_N: tl.constexpr, GROUP_K: tl.constexpr,
                    SUB_K: tl.constexpr, N_SUB: tl.constexpr):
    # C[t, :] = A[t // A_ROWS_PER_TOKEN, :] @ B[expert(t)].T  (x routing weight of t)
    # FP8 0: bf16. 1: e4m3 A and B, one scale for A and one per expert for B, applied to the
    # fp32 sum. 2: e4m3 with block scales: A per (row, GROUP_K columns), B per (expert, GROUP_N
    # rows, GROUP_K columns); each BLOCK_SIZE_K step is N_SUB dots of SUB_K columns that never
    # straddle a scale group, each scaled before it is added (as the engines' kernels do).
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(EM, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    in_group = GROUP_SIZE_M * num_pid_n
    group = pid // in_group
    first_m = group * GROUP_SIZE_M
    group_rows = min(num_pid_m - first_m, GROUP_SIZE_M)
    pid_m = first_m + ((pid % in_group) % group_rows)
    pid_n = (pid % in_group) // group_rows

    if pid_m * BLOCK_SIZE_M >= tl.load(npad_ptr):
        return
    offs_m = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    tok = tl.load(sorted_ids_ptr + offs_m)
    tmask = tok < num_valid
    expert = tl.load(expert_ids_ptr + pid_m).to(tl.int64)
    arow = tok // A_ROWS_PER_TOKEN

    offs_n = (pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)) % N
    acc = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for kb in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
        for sub in tl.static_range(N_SUB):
            k0 = kb * BLOCK_SIZE_K + sub * SUB_K
            offs_k = k0 + tl.arange(0, SUB_K)
            a = tl.load(a_ptr + arow[:, None] * stride_am + offs_k[None, :] * stride_ak,
                        mask=tmask[:, None] & (offs_k[None, :] < K), other=0.0)
            b = tl.load(b_ptr + expert * stride_be + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn,
                        mask=offs_k[:, None] < K, other=0.0)
            if FP8 == 2:
                kg = k0 // GROUP_K
                a_s = tl.load(a_scale_ptr + arow * stride_asm + kg * stride_ask, mask=tmask & (k0 < K), other=0.0)
                b_s = tl.load(b_scale_ptr + expert * stride_bse + (offs_n // GROUP_N) * stride_bsn + kg * stride_bsk,
                              mask=(offs_n < N) & (k0 < K), other=0.0)
                acc += tl.dot(a, b) * a_s[:, None] * b_s[None, :]
            else:
                acc += tl.dot(a, b)
    if FP8 == 1:
        acc = acc * tl.load(a_scale_ptr) * tl.load(b_scale_ptr + expert)
    if MUL_WEIGHT:
        w = tl.load(w_ptr + tok, mask=tmask, other=0.0)
        acc = acc * w[:, None]
    offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    c_ptrs = c_ptr + tok[:, None] * stride_cm + offs_cn[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=tmask[:, None] & (offs_cn[None, :] < N))


FP8_MAX = tl.constexpr(448.0)     # largest finite e4m3fn value (a constexpr: jit code reads only those globals)
SCALE_EPS = tl.constexpr(1e-10)   # a zero group gets this scale instead of 0 (no division by zero)


@triton.jit
def quant_group_kernel(x_ptr, q_ptr, s_ptr, K, stride_x, stride_q, stride_s, G, BLOCK: tl.constexpr):
    # Per row and G-wide column group: s = max(amax, eps) / 448, q = clamp(x / s) in e4m3.
    row = tl.program_id(0).to(tl.int64)
    g = tl.program_id(1)
    cols = g * G + tl.arange(0, BLOCK)
    m = (tl.arange(0, BLOCK) < G) & (cols < K)
    x = tl.load(x_ptr + row * stride_x + cols, mask=m, other=0.0).to(tl.float32)
    s = tl.maximum(tl.max(tl.abs(x), 0), SCALE_EPS) / FP8_MAX
    q = tl.clamp(x / s, -FP8_MAX, FP8_MAX)
    tl.store(q_ptr + row * stride_q + cols, q.to(q_ptr.dtype.element_ty), mask=m)
    tl.store(s_ptr + row * stride_s + g, s)


@triton.jit
def amax_kernel(x_ptr, numel, amax_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < numel, other=0.0).to(tl.float32)
    tl.atomic_max(amax_ptr, tl.max(tl.abs(x), 0))


@triton.jit
def quant_tensor_kernel(x_ptr, q_ptr, amax_ptr, s_ptr, numel, BLOCK: tl.constexpr):
    # One scale for the whole tensor, from the amax the previous launch reduced.
    pid = tl.program_id(0)
    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = offs < numel
    s = tl.maximum(tl.load(amax_ptr), SCALE_EPS) / FP8_MAX
    x = tl.load(x_ptr + offs, mask=m, other=0.0).to(tl.float32)
    q = tl.clamp(x / s, -FP8_MAX, FP8_MAX)
    tl.store(q_ptr + offs, q.to(q_ptr.dtype.element_ty), mask=m)
    if pid == 0:
        tl.store(s_ptr, s)


QUANT_BLOCK = 1024


class ActQuant:
    """Run-time fp8 quantization of a [rows, K] bf16 activation, as the engines do inside the
    layer: per tensor (group 0: one amax reduction, then the scaling) or per row and group-wide
    column group (the block-scale models: one launch)."""

    def __init__(self, x, group):
        self.x = x
        self.group = group
        rows, k = x.shape
        self.q = torch.empty(rows, k, device=x.device, dtype=torch.float8_e4m3fn)
        if group:
            self.scale = torch.empty(rows, triton.cdiv(k, group), device=x.device, dtype=torch.float32)
        else:
            self.scale = torch.empty(1, device=x.device, dtype=torch.float32)
            self.amax = torch.zeros(1, device=x.device, dtype=torch.float32)

    def run(self, warmup=False):
        x, q, s = self.x, self.q, self.scale
        if self.group:
            grid = (x.shape[0], s.shape[1])
            args = (x, q, s, x.shape[1], x.stride(0), q.stride(0), s.stride(0), self.group)
            kw = dict(BLOCK=triton.next_power_of_2(self.group))
            if warmup:
                quant_group_kernel.warmup(*args, grid=grid, **kw)
            else:
                quant_group_kernel[grid](*args, **kw)
            return
        numel = x.numel()
        grid = (triton.cdiv(numel, QUANT_BLOCK),)
        if warmup:
            amax_kernel.warmup(x, numel, self.amax, grid=grid, BLOCK=QUANT_BLOCK)
            quant_tensor_kernel.warmup(x, q, self.amax, s, numel, grid=grid, BLOCK=QUANT_BLOCK)
            return
        self.amax.zero_()
        amax_kernel[grid](x, numel, self.amax, BLOCK=QUANT_BLOCK)
        quant_tensor_kernel[grid](x, q, self.amax, s, numel, BLOCK=QUANT_BLOCK)


class Unsupported(Exception):
    """A config this kernel cannot run for the shape's block scales (stored invalid)."""


def sub_k(block_k, group_k):
    """(SUB_K, N_SUB) for a BLOCK_SIZE_K step over GROUP_K-wide scale groups: one dot when the
    step fits inside a group, else one dot per group; Unsupported when neither divides the other."""
    if not group_k:
        return block_k, 1
    if group_k % block_k == 0:
        return block_k, 1
    if block_k % group_k == 0 and group_k & (group_k - 1) == 0:
        return group_k, block_k // group_k
    raise Unsupported("BLOCK_SIZE_K=%d and the %d-wide scale groups: neither divides the other" %
                      (block_k, group_k))


@triton.jit
def silu_mul_kernel(x_ptr, out_ptr, N, stride_x, stride_o, BLOCK: tl.constexpr):
    # out[r, :] = silu(x[r, :N]) * x[r, N:2N]
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    m = cols < N
    g = tl.load(x_ptr + row * stride_x + cols, mask=m, other=0.0).to(tl.float32)
    u = tl.load(x_ptr + row * stride_x + N + cols, mask=m, other=0.0).to(tl.float32)
    y = g / (1.0 + tl.exp(-g)) * u
    tl.store(out_ptr + row * stride_o + cols, y.to(out_ptr.dtype.element_ty), mask=m)


SILU_BLOCK = 1024


@triton.jit
def align_count_kernel(ids_ptr, numel, E, cursor_ptr, counts_ptr, ends_ptr, npad_ptr,
                       BLOCK_SIZE_M: tl.constexpr, E_P2: tl.constexpr, CHUNK: tl.constexpr):
    # One program: tokens per expert, each expert's run padded to BLOCK_SIZE_M, where each run
    # starts (the scatter cursor) and ends, and the padded total.
    counts = tl.zeros((E_P2,), dtype=tl.int32)
    for start in range(0, numel, CHUNK):
        offs = start + tl.arange(0, CHUNK)
        ids = tl.load(ids_ptr + offs, mask=offs < numel, other=E_P2 - 1)
        counts += tl.histogram(ids, E_P2)
    eidx = tl.arange(0, E_P2)
    emask = eidx < E
    counts = tl.where(emask, counts, 0)
    padded = (counts + BLOCK_SIZE_M - 1) // BLOCK_SIZE_M * BLOCK_SIZE_M
    ends = tl.cumsum(padded, 0)
    tl.store(cursor_ptr + eidx, ends - padded, mask=emask)
    tl.store(counts_ptr + eidx, counts, mask=emask)
    tl.store(ends_ptr + eidx, ends, mask=emask)
    tl.store(npad_ptr, tl.sum(padded, 0))


@triton.jit
def align_place_kernel(ids_ptr, numel, E, cursor_ptr, counts_ptr, ends_ptr, sorted_ids_ptr, expert_ids_ptr,
                       n_blocks, BLOCK_SIZE_M: tl.constexpr, E_P2: tl.constexpr, CHUNK: tl.constexpr,
                       BLOCKS: tl.constexpr):
    # Each program scatters CHUNK token slots to their expert's run and fills BLOCKS blocks'
    # expert ids and padding slots. Real and padding slots are disjoint, so no ordering is needed.
    pid = tl.program_id(0)
    offs = pid * CHUNK + tl.arange(0, CHUNK)
    m = offs < numel
    ids = tl.load(ids_ptr + offs, mask=m, other=0)
    dest = tl.atomic_add(cursor_ptr + ids, 1, mask=m)
    tl.store(sorted_ids_ptr + dest, offs, mask=m)

    b = pid * BLOCKS + tl.arange(0, BLOCKS)
    bm = b < n_blocks
    eidx = tl.arange(0, E_P2)
    ends = tl.load(ends_ptr + eidx, mask=eidx < E, other=2147483647)
    ex = tl.sum((ends[None, :] <= (b * BLOCK_SIZE_M)[:, None]).to(tl.int32), axis=1)
    ex = tl.minimum(ex, E - 1)
    tl.store(expert_ids_ptr + b, ex, mask=bm)
    start = tl.load(ends_ptr + ex, mask=bm, other=0)  # the end of the block's run
    cnt = tl.load(counts_ptr + ex, mask=bm, other=0)
    run_first = start - (cnt + BLOCK_SIZE_M - 1) // BLOCK_SIZE_M * BLOCK_SIZE_M
    pos = b[:, None] * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)[None, :]
    is_pad = (pos - run_first[:, None] >= cnt[:, None]) & bm[:, None]
    tl.store(sorted_ids_ptr + pos, tl.full((BLOCKS, BLOCK_SIZE_M), 0, tl.int32) + numel, mask=is_pad)


ALIGN_CHUNK = 1024
ALIGN_BLOCKS = 8


def padded_len(numel, experts, block_m):
    """Slots the align step may fill: every expert's run rounded up to block_m."""
    n = numel + experts * (block_m - 1)
    return (n + block_m - 1) // block_m * block_m


class Align:
    """Sorted token ids, per-block expert ids and the padded count, for one (ids, block_m): two
    Triton launches, no host synchronisation, so the step is captured with the rest of the layer.
    Within an expert the order of tokens is that of the atomics, as in the engines' align."""

    def __init__(self, topk_ids, experts, block_m):
        dev = topk_ids.device
        self.flat = topk_ids.reshape(-1)
        self.numel = self.flat.numel()
        self.experts = experts
        self.block_m = block_m
        self.em = padded_len(self.numel, experts, block_m)
        self.n_blocks = self.em // block_m
        self.e_p2 = triton.next_power_of_2(experts + 1)
        self.sorted_ids = torch.empty(self.em, dtype=torch.int32, device=dev)
        self.expert_ids = torch.empty(self.n_blocks, dtype=torch.int32, device=dev)
        self.npad = torch.empty(1, dtype=torch.int32, device=dev)
        self.scratch = torch.empty(3, experts, dtype=torch.int32, device=dev)

    def run(self, warmup=False):
        cur, cnt, ends = self.scratch[0], self.scratch[1], self.scratch[2]
        a1 = (self.flat, self.numel, self.experts, cur, cnt, ends, self.npad)
        k1 = dict(BLOCK_SIZE_M=self.block_m, E_P2=self.e_p2, CHUNK=ALIGN_CHUNK)
        grid2 = (max(triton.cdiv(self.numel, ALIGN_CHUNK), triton.cdiv(self.n_blocks, ALIGN_BLOCKS)),)
        a2 = (self.flat, self.numel, self.experts, cur, cnt, ends, self.sorted_ids, self.expert_ids, self.n_blocks)
        k2 = dict(BLOCK_SIZE_M=self.block_m, E_P2=self.e_p2, CHUNK=ALIGN_CHUNK, BLOCKS=ALIGN_BLOCKS)
        if warmup:
            align_count_kernel.warmup(*a1, grid=(1,), **k1)
            align_place_kernel.warmup(*a2, grid=grid2, **k2)
        else:
            align_count_kernel[(1,)](*a1, **k1)
            align_place_kernel[grid2](*a2, **k2)


def gemm(a, b, c, topk_w, align, a_rows_per_token, mul_weight, cfg, warmup=False, a_scale=None, b_scale=None,
         block=None):
    """One grouped GEMM: c[t] = a[t // a_rows_per_token] @ b[expert(t)].T, weighted when asked.

    a: [rows, K]; b: [E, N, K]; c: [numel, N]. fp8: a and b e4m3 with a_scale and b_scale
    (per tensor: a_scale [1], b_scale [E]; block=(bn, bk): a_scale [rows, K/bk], b_scale
    [E, N/bn, K/bk]). With warmup=True only compiles (no launch)."""
    n, k = b.shape[1], b.shape[2]
    grid = (triton.cdiv(align.em, cfg["BLOCK_SIZE_M"]) * triton.cdiv(n, cfg["BLOCK_SIZE_N"]),)
    fp8 = 0 if a_scale is None else (2 if block else 1)
    gn, gk = block if fp8 == 2 else (0, 0)
    sk, nsub = sub_k(cfg["BLOCK_SIZE_K"], gk)
    if fp8 == 2:
        ss = (a_scale.stride(0), a_scale.stride(1), b_scale.stride(0), b_scale.stride(1), b_scale.stride(2))
    else:
        ss = (0, 0, 0, 0, 0)
    dummy = topk_w
    args = (a, b, c, topk_w, a_scale if fp8 else dummy, b_scale if fp8 else dummy,
            align.sorted_ids, align.expert_ids, align.npad, n, k, align.em, align.numel,
            a.stride(0), a.stride(1), b.stride(0), b.stride(1), b.stride(2), c.stride(0), c.stride(1)) + ss
    meta = dict(BLOCK_SIZE_M=cfg["BLOCK_SIZE_M"], BLOCK_SIZE_N=cfg["BLOCK_SIZE_N"],
                BLOCK_SIZE_K=cfg["BLOCK_SIZE_K"], GROUP_SIZE_M=cfg["GROUP_SIZE_M"],
                A_ROWS_PER_TOKEN=a_rows_per_token, MUL_WEIGHT=mul_weight, FP8=fp8, GROUP_N=max(gn, 1),
                GROUP_K=max(gk, 1), SUB_K=sk, N_SUB=nsub,
                num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
    if warmup:
        moe_gemm_kernel.warmup(*args, grid=grid, **meta)
    else:
        moe_gemm_kernel[grid](*args, **meta)


def silu_mul(x, out, warmup=False):
    n = out.shape[1]
    grid = (x.shape[0], triton.cdiv(n, SILU_BLOCK))
    args = (x, out, n, x.stride(0), out.stride(0))
    if warmup:
        silu_mul_kernel.warmup(*args, grid=grid, BLOCK=SILU_BLOCK)
    else:
        silu_mul_kernel[grid](*args, BLOCK=SILU_BLOCK)


JIT_FUNCTIONS = (moe_gemm_kernel, silu_mul_kernel, align_count_kernel, align_place_kernel, quant_group_kernel,
                 amax_kernel, quant_tensor_kernel)
