"""qmm.kitchen.quantize — the kitchen's quantize_int8_rowwise, quantize_int8_tensorwise,
quantize_and_rotate_rowwise and quantize_int8_convrot_weight on qmm_quantize_rows (SPEC §1a:
the kitchen's rule, round half to even).

check(func, kw) validates a call (raises Refused naming the argument); the call rule turns a
refusal into a logged decline, a direct call gets it as a ValueError. Stochastic rounding
(stochastic_rounding > 0, what ComfyUI's LoRA requantization passes) is declined: the eager
backend runs it (SR_REASON; docs/SPEC.md §1a has the measured cost of both ways).
"""
import threading
import weakref

import torch

import qmm
from qmm import _lib as L

from ._common import FLOATS, QDT, Refused, Tensor, is_pow4, need_tensor, no_grad_needed
from .probe import probe

SR_REASON = ("stochastic rounding runs on eager: a seed promises eager's bits, and with a "
             "ConvRot rotation qmm's fp32 transform sums in another order than torch's matmul, "
             "so floor(value + noise) can differ; qmm's quantizer rounds half to even only "
             "(docs/SPEC.md §1a)")


def _rows(t, width):
    t2 = t.reshape(-1, width)
    if t2.stride(1) != 1 or (t2.shape[0] > 1 and t2.stride(0) < width):
        t2 = t2.contiguous()
    return t2


def check(func, kw):
    x = kw.get("weight") if func == "quantize_int8_convrot_weight" else kw.get("x")
    xn = "weight" if func == "quantize_int8_convrot_weight" else "x"
    need_tensor(xn, x, FLOATS, "a float tensor (f32, f16 or bf16)")
    if x.dim() < 1 or x.numel() == 0:
        raise Refused(xn, "needs a non-empty tensor of at least 1 dimension, got %s" % (
            list(x.shape),))
    sr = kw.get("stochastic_rounding")
    if sr is not None and (not isinstance(sr, int) or isinstance(sr, bool)):
        raise Refused("stochastic_rounding", "needs an int seed or 0, got %r" % (sr,))
    if sr is not None and sr > 0:
        raise Refused("stochastic_rounding", SR_REASON)
    s = None
    if func == "quantize_int8_tensorwise":
        s = kw.get("scale")
        if isinstance(s, str) and s != "recalculate":
            raise Refused("scale", "string must be 'recalculate', got %r" % s)
        if isinstance(s, Tensor):
            need_tensor("scale", s, FLOATS, "one float value")
            if s.numel() != 1:
                raise Refused("scale", "needs exactly one value, got %s" % list(s.shape))
        elif s is not None and not isinstance(s, (str, int, float)) or isinstance(s, bool):
            raise Refused("scale", "needs None, 'recalculate', a number or a 1-value tensor")
    gs = 0
    if func in ("quantize_and_rotate_rowwise", "quantize_int8_convrot_weight"):
        g = kw.get("group_size")
        if not is_pow4(g):
            raise Refused("group_size", "%r is not a power of 4 >= 4" % (g,))
        if x.shape[-1] % g:
            raise Refused("group_size", "%d does not divide %d" % (g, x.shape[-1]))
        if func == "quantize_int8_convrot_weight" and x.dim() != 2:
            raise Refused("weight", "needs a 2-D weight, got %s" % list(x.shape))
        why = probe("gs:%d" % g)
        if why:
            raise Refused("group_size", why)
        if func == "quantize_and_rotate_rowwise":
            h = kw.get("h", kw.get("H"))
            if not _is_standard_hadamard(h, g):
                raise Refused("h", "not the standard normalized regular Hadamard matrix H_%d "
                              "(qmm rotates with that one only)" % g)
        gs = g
    no_grad_needed(func, (xn, x), ("scale", s))
    return x, gs


def _quantize_rows(x, gs, scale_in):
    K = x.shape[-1]
    x2 = _rows(x, K)
    M = x2.shape[0]
    q = torch.empty((M, K), dtype=torch.int8)
    s = torch.empty((M, 1), dtype=torch.float32)
    s_in = None
    if scale_in is not None:
        s_in = scale_in.reshape(1).expand(M).contiguous()
    with qmm.lock():
        st = L.qmm_quantize_rows(qmm.context(torch.get_num_threads()).ptr, x2.data_ptr(),
                                 QDT[x.dtype], M, K, x2.stride(0) if M > 1 else K, gs,
                                 s_in.data_ptr() if s_in is not None else None, q.data_ptr(), K,
                                 s.data_ptr())
    qmm._check(st, "qmm_quantize_rows")
    return q.reshape(x.shape), s.reshape(*x.shape[:-1], 1)


def quantize_int8_rowwise(x, stochastic_rounding=0):
    """Per-row int8 (the kitchen's rule: scale max(amax/127, 1e-30), x / T(scale) in x's
    dtype, round half to even, clamp [-128, 127]) → (q like x, scales [..., 1] f32)."""
    check("quantize_int8_rowwise", {"x": x, "stochastic_rounding": stochastic_rounding})
    return _quantize_rows(x, 0, None)


def quantize_int8_tensorwise(x, scale=None, stochastic_rounding=0):
    """One scale for the whole tensor: computed (max(amax/127, 1e-30), in torch as the eager
    backend does) or given; → (q like x, the f32 scale as the eager backend returns it)."""
    check("quantize_int8_tensorwise", {"x": x, "scale": scale,
                                       "stochastic_rounding": stochastic_rounding})
    if scale is None or (isinstance(scale, str) and scale == "recalculate"):
        scale = (x.abs().max().float() / 127.0).clamp(min=1e-30)
    elif not isinstance(scale, torch.Tensor):
        scale = torch.tensor(scale, device=x.device, dtype=torch.float32)
    else:
        scale = scale.to(device=x.device, dtype=torch.float32)
    q, _ = _quantize_rows(x, 0, scale)
    return q, scale


def quantize_and_rotate_rowwise(x, h, group_size, stochastic_rounding=0):
    """Rotate each group of group_size with H_g (h must be the standard normalized regular
    Hadamard matrix), then quantize per row."""
    _, gs = check("quantize_and_rotate_rowwise", {"x": x, "h": h, "group_size": group_size,
                                                  "stochastic_rounding": stochastic_rounding})
    return _quantize_rows(x, gs, None)


def quantize_int8_convrot_weight(weight, group_size, stochastic_rounding=0):
    """Offline ConvRot of a float weight [N, K] in its own dtype, then per-row int8."""
    _, gs = check("quantize_int8_convrot_weight", {"weight": weight, "group_size": group_size,
                                                   "stochastic_rounding": stochastic_rounding})
    return _quantize_rows(weight, gs, None)


_H_CHECKED = {}   # (id, data_ptr, _version, dtype, g) -> bool, for live tensors only
_H_LOCK = threading.Lock()


_H4 = ((1, 1, 1, -1), (1, 1, -1, 1), (1, -1, 1, 1), (-1, 1, 1, 1))


def convrot_hadamard(g):
    """ConvRot's regular Hadamard matrix of size g (a power of 4): H4 ⊗ ... ⊗ H4 / sqrt(g) in f32,
    H4 = the symmetric ±1 matrix with one -1 per row on the anti-diagonal — SPEC §1's rotation,
    the matrix comfy-kitchen's quantizers multiply by (its entries ±2^-k are exact)."""
    h4 = torch.tensor(_H4, dtype=torch.float32)
    h = h4
    while h.shape[0] < g:
        h = torch.kron(h, h4)
    return h / float(g) ** 0.5


def _is_standard_hadamard(h, g):
    """Whether h is (H4 ⊗ ... ⊗ H4) / sqrt(g) of size g (exactly, in its own dtype: its
    entries ±2^-k are exact in every float dtype). Remembered per tensor while it lives."""
    if not isinstance(h, Tensor) or tuple(h.shape) != (g, g) or h.dtype not in FLOATS \
            or h.device.type != "cpu":
        return False
    key = (id(h), h.data_ptr(), None if h.is_inference() else h._version, h.dtype, g)
    with _H_LOCK:
        hit = _H_CHECKED.get(key)
    if hit is not None:
        return hit
    ok = bool(torch.equal(h.to(torch.float32), convrot_hadamard(g)))
    with _H_LOCK:
        if len(_H_CHECKED) > 64:
            _H_CHECKED.clear()
        _H_CHECKED[key] = ok
    try:
        weakref.finalize(h, _H_CHECKED.pop, key, None)
    except TypeError:
        pass
    return ok
