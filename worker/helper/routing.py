"""Captured routing: a sweep's expert ids read from a .npy or PyTorch file, drawn per batch size."""
import ast
import hashlib
import sys

from .protocol import one_line


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
