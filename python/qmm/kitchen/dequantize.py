"""qmm.kitchen.dequantize — the kitchen's dequantize_int8_simple(_dtype),
dequantize_int8_convrot_weight(_dtype) and dequantize_int8_embedding on qmm.

check(func, kw) validates a call (raises Refused naming the argument). Results:
  simple      q.float() · scale, one f32 multiply per element as eager (bit-identical);
  convrot     q · s per row, rotated back with H_g by qmm_dequantize_weight (fp32 radix-4):
              the same exact sum as eager's matmul by H_gᵀ in another order, so a few f32
              ulps of the row's magnitude apart (bound in the tests), not bit for bit;
  embedding   the rows of indices gathered first (int8, no full-table dequantization), then
              as convrot (group_size <= 0: no rotation, bit-identical to eager).
"""
import torch

from qmm import _check
from qmm import _lib as L

from ._common import CODE_DT, FLOATS, Refused, Tensor, is_pow4, need_tensor, no_grad_needed
from .probe import probe

_DEQ_CHUNK = 1 << 22  # elements per chunk of the f32 intermediate of dequantize_int8_simple_dtype
_INDEX = (torch.int64, torch.int32)


def check(func, kw):
    q, s = kw.get("q"), kw.get("scale")
    need_tensor("q", q, (torch.int8,), "an int8 tensor")
    need_tensor("scale", s, FLOATS, "a float scale tensor")
    if func.endswith("_dtype") or func == "dequantize_int8_embedding":
        c = kw.get("output_dtype_code")
        if isinstance(c, bool) or c not in CODE_DT:
            raise Refused("output_dtype_code", "%r must be 0 (f32), 1 (f16) or 2 (bf16)" % (c,))
    if func.startswith("dequantize_int8_simple"):
        try:
            torch.broadcast_shapes(q.shape, s.shape)
        except RuntimeError:
            raise Refused("scale", "shape %s does not broadcast to %s" % (
                list(s.shape), list(q.shape))) from None
    elif func.startswith("dequantize_int8_convrot_weight"):
        if q.dim() != 2 or q.numel() == 0:
            raise Refused("q", "needs a non-empty 2-D int8 tensor, got %s" % list(q.shape))
        N = q.shape[0]
        if not (s.numel() == 1 or tuple(s.shape) == (N, 1)):
            raise Refused("scale", "needs a scalar or [N, 1] scale, got %s" % list(s.shape))
        _group(kw.get("group_size"), q.shape[1], required=True)
    else:  # dequantize_int8_embedding
        if q.dim() != 2 or q.numel() == 0:
            raise Refused("q", "needs a non-empty 2-D [vocab, dim] int8 table, got %s" % (
                list(q.shape),))
        V = q.shape[0]
        if not (s.numel() == 1 or tuple(s.shape) == (V, 1)):
            raise Refused("scale", "needs a scalar or [vocab, 1] scale, got %s" % list(s.shape))
        ix = kw.get("indices")
        need_tensor("indices", ix, _INDEX, "an int64 or int32 index tensor")
        if ix.numel() and (int(ix.min()) < 0 or int(ix.max()) >= V):
            raise Refused("indices", "values must be in [0, %d), got [%d, %d]" % (
                V, int(ix.min()), int(ix.max())))
        g = kw.get("group_size")
        if not isinstance(g, int) or isinstance(g, bool):
            raise Refused("group_size", "needs an int, got %r" % (g,))
        if g > 0:
            _group(g, q.shape[1], required=True)
    no_grad_needed(func, ("q", q), ("scale", s))


def _group(g, K, required):
    if not is_pow4(g) or K % g:
        raise Refused("group_size", "%r is not a power of 4 dividing K=%d" % (g, K))
    why = probe("gs:%d" % g)
    if why:
        raise Refused("group_size", why)


def dequantize_int8_simple(q, scale):
    """q.float() · scale — one f32 multiply per element, as the eager backend does."""
    check("dequantize_int8_simple", {"q": q, "scale": scale})
    return q.float() * scale


def dequantize_int8_simple_dtype(q, scale, output_dtype_code):
    """(q.float() · scale).to(dtype), row block by row block: the same bits as the eager
    backend without its full-size f32 intermediate."""
    check("dequantize_int8_simple_dtype", {"q": q, "scale": scale,
                                           "output_dtype_code": output_dtype_code})
    dt = CODE_DT[output_dtype_code]
    if q.dim() < 2 or scale.numel() == 1 or scale.dim() > q.dim():
        return (q.float() * scale).to(dt)
    out = torch.empty(torch.broadcast_shapes(q.shape, scale.shape), dtype=dt)
    rows = max(1, _DEQ_CHUNK // max(1, q.shape[-1]))
    for i in range(0, q.shape[0], rows):
        sc = scale[i:i + rows] if scale.dim() == q.dim() and scale.shape[0] == q.shape[0] else scale
        out[i:i + rows] = (q[i:i + rows].float() * sc).to(dt)
    return out


def _unrotate(q, scale, gs):
    """qmm_dequantize_weight of a 2-D int8 q with a scalar or per-row scale → f32."""
    N, K = q.shape
    qc = q.contiguous()
    sc = scale.to(torch.float32).reshape(-1).contiguous()
    out = torch.empty((N, K), dtype=torch.float32)
    _check(L.qmm_dequantize_weight(qc.data_ptr(), N, K, sc.data_ptr(), sc.numel(), int(gs),
                                   out.data_ptr()), "qmm_dequantize_weight")
    return out


def dequantize_int8_convrot_weight(q, scale, group_size):
    """q · s per row, rotated back with H_g by qmm_dequantize_weight."""
    check("dequantize_int8_convrot_weight", {"q": q, "scale": scale, "group_size": group_size})
    return _unrotate(q, scale, group_size)


def dequantize_int8_convrot_weight_dtype(q, scale, group_size, output_dtype_code):
    check("dequantize_int8_convrot_weight_dtype", {"q": q, "scale": scale,
                                                   "group_size": group_size,
                                                   "output_dtype_code": output_dtype_code})
    return _unrotate(q, scale, group_size).to(CODE_DT[output_dtype_code])


def dequantize_int8_embedding(q, scale, indices, group_size, output_dtype_code):
    """The rows of an int8 embedding table [vocab, dim] at indices, dequantized (and rotated
    back when group_size > 0) → [*indices.shape, dim] of the output dtype."""
    check("dequantize_int8_embedding", {"q": q, "scale": scale, "indices": indices,
                                        "group_size": group_size,
                                        "output_dtype_code": output_dtype_code})
    dim = q.shape[1]
    flat = indices.reshape(-1)
    if flat.numel() == 0:
        return torch.empty((*indices.shape, dim), dtype=CODE_DT[output_dtype_code])
    rows = q.index_select(0, flat)
    s = scale.index_select(0, flat) if scale.numel() > 1 else scale
    out = _unrotate(rows, s, group_size if group_size > 0 else 0)
    return out.reshape(*indices.shape, dim).to(CODE_DT[output_dtype_code])
