"""qmm.kitchen.w4a8 — the kitchen's w4a8_int8_linear (AsymW4A8Int8Layout, W4A8 and W6A8) on qmm,
same signature and results as the eager backend (SPEC §11, §1a).

The eager backend decodes the whole int8 weight at every call (_dequant_int4_grouped_to_int8)
and runs int8_linear(x, W8, s_channel, convrot=True); qmm borrows the layout's tensors in place
(qmm_weight_borrow_w4a8: codes, s_rel, s_channel, codebook, bias — nothing copied) and decodes
the codes inside its per-call weight panels: the decoded values are the kitchen's bit for bit,
the rest is the int8 layer of linear.py (the same checks, template cache and call).

Declined (eager runs the call): a correction (asymmetric W4A8: eager dequantizes to float and
runs F.linear; there is no int8 form of it), s_channel that is not fp32, s_rel not fp8 e4m3fn
or fp32, non-contiguous codes / s_rel / codebook, shapes the kitchen's validate_w4a8_operands
refuses, NaN or infinite scales (qmm_weight_borrow_w4a8 refuses them), a codes, scale or
codebook tensor that requires grad under grad mode or is a dual tensor of forward-mode AD
(qmm._autograd), and everything linear.check declines. The call runs through linear.execute:
re-planned after a qmm.configure() that changed an option, and handed on to the next backend when
qmm cannot run it after all (no qmm error reaches a kitchen caller).
"""
import threading

import torch

import qmm
from qmm import _autograd as _ad
from qmm import _lib as L

from . import linear as _lin
from . import weights
from ._common import QDT, Refused, Tensor, need_tensor

_F32 = torch.float32
_F8 = getattr(torch, "float8_e4m3fn", None)
_BF16 = torch.bfloat16
_tls = threading.local()


def available():
    """None if the loaded libqmm has W4A8 weights, else the reason."""
    return None if L.qmm_weight_borrow_w4a8 is not None else \
        "libqmm lacks qmm_weight_borrow_w4a8 (older library)"


class _W4:
    """The W4A8 weight of one call, for linear.check: its shape and the handle maker."""
    __slots__ = ("N", "K", "bits", "qdata", "s_rel", "s_channel", "codebook", "gsz", "gs")

    def handle(self, bias, c):
        b, bptr, bdt, own = bias, None, L.F32, True
        if b is not None:
            if not b.is_contiguous():
                b = b.contiguous()
                own = False
            bptr, bdt = b.data_ptr(), QDT[b.dtype]
        c.keep = (b,)
        cb = self.codebook
        key = ("w4a8", self.qdata.data_ptr(), self.N, self.K, self.bits, self.s_rel.data_ptr(),
               self.s_rel.dtype, self.gsz, self.s_channel.data_ptr(),
               cb.data_ptr() if cb is not None else None, bptr, bdt, self.gs)

        def make(key):
            try:
                return qmm.Weight.borrow_w4a8(
                    key[1], self.N, self.K, self.bits, key[5],
                    "f32" if self.s_rel.dtype == _F32 else "f8_e4m3", self.gsz, key[8],
                    codebook=key[9], bias=bptr, bias_dtype=bdt, convrot_gs=self.gs,
                    name="kitchen.w4a8[%d,%d]" % (self.N, self.K))
            except qmm.QmmError as e:
                raise Refused("qdata", e.message) from None
        if own:
            return weights.handle(key, (self.qdata, self.s_rel, self.s_channel, cb, bias), make)
        return weights.transient(key, make)


def _geometry(qdata, s_rel, s_channel, codebook, correction, group_size, convrot_groupsize):
    if correction is not None:
        raise Refused("correction", "asymmetric W4A8 (a correction term) is not run by qmm: it "
                      "has no int8 form (eager dequantizes the weight to float)")
    need_tensor("qdata", qdata, (torch.int8, torch.uint8), "an int8 [N, K*bits/8] tensor of codes",
                contiguous=True)
    if qdata.dim() != 2:
        raise Refused("qdata", "needs a 2-D tensor, got shape %s" % list(qdata.shape))
    need_tensor("s_rel", s_rel, tuple(t for t in (_F8, _F32) if t is not None),
                "a float8_e4m3fn or float32 [N, K/group_size] tensor", contiguous=True)
    need_tensor("s_channel", s_channel, (_F32,), "N float32 values", contiguous=True)
    if not isinstance(group_size, int) or isinstance(group_size, bool):
        raise Refused("group_size", "needs an int, got %r" % (group_size,))
    N, cols = qdata.shape
    if s_rel.dim() != 2 or s_rel.shape[0] != N:
        raise Refused("s_rel", "needs shape [N=%d, K/group_size], got %s" % (N, list(s_rel.shape)))
    K = s_rel.shape[1] * group_size
    bits = cols * 8 // K if K > 0 else 0
    if K <= 0 or bits not in (4, 6) or K * bits != cols * 8:
        raise Refused("qdata", "packed row width %d does not match K=%d at 4 or 6 bits" % (cols, K))
    if s_channel.numel() != N:
        raise Refused("s_channel", "needs N=%d values, got shape %s" % (N, list(s_channel.shape)))
    if codebook is not None:
        need_tensor("codebook", codebook, (_F32,), "16 float32 values", contiguous=True)
        if codebook.numel() != 16:
            raise Refused("codebook", "needs 16 values, got shape %s" % list(codebook.shape))
    w = _W4()
    w.N, w.K, w.bits, w.gsz = N, K, bits, group_size
    w.qdata, w.s_rel, w.s_channel, w.codebook = qdata, s_rel, s_channel, codebook
    w.gs = convrot_groupsize
    return w


def check(args, partial=False):
    """Validate a w4a8_int8_linear call (args: the tuple of _args); a linear._Call, or Refused."""
    (x, qdata, s_rel, s_channel, codebook, correction, bias, group_size, convrot_groupsize,
     out_dtype, act, aw, eps, res, rs) = args
    own = (("qdata", qdata), ("s_rel", s_rel), ("s_channel", s_channel), ("codebook", codebook))
    if torch.is_grad_enabled():
        for name, t in own:
            if isinstance(t, Tensor) and t.requires_grad:
                raise Refused(name, "requires grad under grad mode (autograd: qmm runs "
                              "inference only)")
    if _ad.forward_level() >= 0:
        name = _ad.first_dual(own)
        if name:
            raise Refused(name, _ad.DUAL_WHY)
    w4 = _geometry(qdata, s_rel, s_channel, codebook, correction, group_size, convrot_groupsize)
    c = _lin.check("int8_linear", (x, None, None, bias, out_dtype, True, convrot_groupsize,
                                   act, aw, eps, res, rs, None), partial=partial, w4=w4)
    if c is not None:
        c.w4args, c.func = args, "w4a8_int8_linear"
    return c


def _args(kw):
    g = kw.get
    return (g("x"), g("qdata"), g("s_rel"), g("s_channel"), g("codebook"), g("correction"),
            g("bias"), g("group_size", 16), g("convrot_groupsize", 256), g("out_dtype", _BF16),
            g("input_act"), g("input_act_weight"), g("input_act_eps", 0.0), g("residual"),
            g("residual_scale"))


def rule():
    """The kitchen call rule of w4a8_int8_linear: check() and remember the result for the call."""
    from comfy_kitchen.constraints import ValidationResult
    from ._declines import decline
    ok = ValidationResult.ok()

    def call_rule(kw):
        try:
            c = check(_args(kw))
        except Refused as e:
            _tls.last = None
            return decline("w4a8_int8_linear", e.param, e.reason)
        c.kw = kw
        _tls.last = c
        return ok
    return call_rule


def w4a8_int8_linear(x, qdata, s_rel, s_channel, codebook=None, correction=None, bias=None,
                     group_size=16, convrot_groupsize=256, out_dtype=_BF16, input_act=None,
                     input_act_weight=None, input_act_eps=0.0, residual=None,
                     residual_scale=None):
    """The kitchen's w4a8_int8_linear on qmm (same signature and results as the eager backend)."""
    args = (x, qdata, s_rel, s_channel, codebook, correction, bias, group_size,
            convrot_groupsize, out_dtype, input_act, input_act_weight, input_act_eps, residual,
            residual_scale)
    c = getattr(_tls, "last", None)
    _tls.last = None
    if c is None or not all(a is b for a, b in zip(c.w4args, args)):
        c = check(args)
    return _lin.execute(c)
