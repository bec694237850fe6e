"""fp8 e4m3 quantization and the reference layer every config's output is checked against (pure
torch, any device)."""
import math


REL_TOL = 0.02                # see Measurer.check
FP8_REL_TOL = 0.03            # see Measurer.check
FP8_MAX = 448.0               # largest finite e4m3fn value
SCALE_EPS = 1e-10             # the scale of an all-zero group (as moetune_kernel.SCALE_EPS)


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


def cdiv(a, b):
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
    ng = cdiv(k, group)
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
    gn, gk = cdiv(n, bn), cdiv(k, bk)
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
        scale = torch.empty((e, cdiv(n_out, block[0]), cdiv(k_in, block[1])) if block else (e,),
                            device=device, dtype=torch.float32)
    for e0 in range(0, e, chunk):
        e1 = min(e, e0 + chunk)
        w = torch.randn(e1 - e0, n_out, k_in, generator=gen, device=device) / math.sqrt(k_in)
        if dtype == "bf16":
            out[e0:e1] = w.to(torch.bfloat16)
            continue
        if block:
            sp = spread(torch, (e1 - e0, cdiv(n_out, block[0]), cdiv(k_in, block[1])), gen, device)
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
