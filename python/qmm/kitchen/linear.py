"""qmm.kitchen.linear — the kitchen's int8_linear, int8_linear_modulated and
int8_linear_rms_modulated on qmm (same signatures and results as the eager backend, SPEC §1a).

One check serves the kitchen's call rule and a direct call: check(func, kw) validates every
argument (types, dtypes, devices, shapes, strides incl. 0, lengths, grad) and raises Refused
naming the first one qmm does not take; the call rule turns that into a logged decline (eager
runs the call), a direct call gets it as a ValueError. What the check finds is kept for the call
that follows it on the same thread (the kitchen validates, then calls with the same arguments):
the work is done once.

Per call, what depends only on the layer's kind is computed once and kept (_kinds): the key
    (N, K, group, x dtype, out dtype, act, act weight dtype, modulation, residual, M class)
with M class = M.bit_length() (admission can depend on M, e.g. amx_int8's smallest M, never
within a power of two) maps to a prepared qmm_linear_args template, or to the reason no int8
engine takes it. Calls qmm would run W8A16 on a float engine are refused (eager keeps its own
numerics for them). Reasons are formatted only for refused calls.

The weight is borrowed (weights.py): no copy is made, every call reads the int8 tensor, the
scales and the bias as they are at that moment.
"""
import ctypes
import threading

import torch

import qmm
from qmm import _lib as L

from . import weights
from ._common import ACTS, FLOATS, PAIR_ACTS, QDT, Refused, Tensor, is_pow4, need_tensor, \
    no_grad_needed
from .probe import probe

_tls = threading.local()
_kinds = {}
_kinds_lock = threading.Lock()
_F32 = torch.float32
_linear = L.qmm_linear
_byref = ctypes.byref


class _Call:
    """What check() found for one call; run() executes it."""
    __slots__ = ("ids", "keep", "x2", "M", "N", "kin", "shape", "out_dtype", "h", "tmpl",
                 "act_weight", "modulation", "residual", "rscale")


def _rows(t, width):
    """t as a 2-D [M, width] view whose rows are width contiguous elements apart or more
    (copied when its strides are anything else: 0, overlapping, or a column stride != 1)."""
    t2 = t.reshape(-1, width)
    s0, s1 = t2.stride()
    if s1 != 1 or (t2.shape[0] > 1 and s0 < width):
        t2 = t2.contiguous()
    return t2


def _flat(t, n):
    """t's n values as a 1-D contiguous tensor (a view when it already is one)."""
    v = t.reshape(-1)
    if n > 1 and v.stride(0) != 1:
        v = v.contiguous()
    return v


def _weight_key(weight, ws, bias, gs, N, K, call):
    """The borrowed handle's key (weights.py), or a transient handle when the scale or the bias
    must be copied for this call."""
    s = _flat(ws, ws.numel())
    own = True
    if s.dtype is not _F32:
        s = s.to(_F32)
        own = False
    elif s.numel() > 1 and s.data_ptr() != ws.data_ptr():
        own = False
    bptr, bdt = None, L.F32
    if bias is not None:
        b = _flat(bias, N)
        if b.data_ptr() != bias.data_ptr() or (N > 1 and b.stride(0) != 1):
            own = False
        bptr, bdt = b.data_ptr(), QDT[b.dtype]
        call.keep = (s, b)
    else:
        call.keep = (s,)
    ld = weight.stride(0) if N > 1 else K
    key = (weight.data_ptr(), N, K, ld, s.data_ptr(), s.numel(), bptr, bdt, gs)
    return weights.handle(key, (weight, ws, bias)) if own else weights.transient(key)


def _kind(key, h, M, xdt, odt, act, awdt, has_mod, has_res, kin, N):
    """The qmm_linear_args template of a layer kind, or Refused: planned once per key."""
    k = _kinds.get(key)
    if k is not None:
        if isinstance(k, Refused):
            raise k
        return k
    a = L.qmm_linear_args_default()
    a.M = M
    a.x_dtype, a.y_dtype, a.act = QDT[xdt], QDT[odt], ACTS[act]
    a.epilogue = L.EPILOGUE_KITCHEN
    a.x_cols = kin
    a.ldy = N
    if act == "rms_norm":
        a.act_weight_dtype = QDT[awdt]
    p = L.PlanInfo()
    with qmm.lock():
        st = L.qmm_plan(qmm.context().ptr, h.ptr, _byref(a), _byref(p))
    if st != L.OK:
        k = Refused("weight", (L.qmm_last_error() or b"").decode(errors="replace"))
    elif p.status != L.OK or p.is_fallback:
        why = "; ".join("%s: %s" % (qmm.engine_name(e), p.reason[e].value.decode(errors="replace"))
                        for e in range(L.ENGINE_COUNT)
                        if p.reason[e].value and L.qmm_engine_is_int8(e))
        k = Refused("x", "no int8 engine admits [%d, %d] M=%d (%s)" % (N, key[1], M, why))
    else:
        k = a
    with _kinds_lock:
        if len(_kinds) > 4096:
            _kinds.clear()
        _kinds[key] = k
    if isinstance(k, Refused):
        raise k
    return k


def check(func, kw, partial=False):
    """Validate a call of func (kwargs kw); return a _Call, or raise Refused. partial: the
    kitchen's _has_native_fusion probe (no weight_scale): judged on what it gives."""
    x, weight, ws, bias = kw.get("x"), kw.get("weight"), kw.get("weight_scale"), kw.get("bias")
    need_tensor("x", x, FLOATS, "a float tensor (f32, f16 or bf16)")
    need_tensor("weight", weight, (torch.int8,), "an int8 [N, K] tensor")
    if weight.dim() != 2:
        raise Refused("weight", "needs a 2-D [N, K] int8 tensor, got shape %s" % list(weight.shape))
    N, K = weight.shape
    if N == 0 or K == 0:
        raise Refused("weight", "empty weight %s" % list(weight.shape))
    ws0, ws1 = weight.stride()
    if ws1 != 1 or (N > 1 and ws0 < K):
        raise Refused("weight", "needs rows of K=%d contiguous int8 values (column stride 1, row "
                      "stride >= K), got shape %s stride %s" % (K, list(weight.shape),
                                                                weight.stride()))
    if x.dim() < 1 or x.numel() == 0:
        raise Refused("x", "empty input %s" % list(x.shape))
    if ws is not None:
        need_tensor("weight_scale", ws, FLOATS, "1 or N float values")
        if ws.numel() not in (1, N):
            raise Refused("weight_scale", "needs 1 or N=%d values, got shape %s" % (
                N, list(ws.shape)))
    elif not partial:
        raise Refused("weight_scale", "required")
    if bias is not None:
        need_tensor("bias", bias, FLOATS, "N float values")
        if bias.numel() != N:
            raise Refused("bias", "needs N=%d values, got shape %s" % (N, list(bias.shape)))
    out_dtype = kw.get("out_dtype", torch.bfloat16)
    if out_dtype is None:
        out_dtype = torch.bfloat16
    if out_dtype not in FLOATS:
        raise Refused("out_dtype", "%s (needs torch.float32, float16 or bfloat16)" % (out_dtype,))
    rms_mod = func == "int8_linear_rms_modulated"
    act = "rms_norm" if rms_mod else kw.get("input_act")
    if act not in ACTS:
        raise Refused("input_act", "%r unknown (qmm runs none, gelu_tanh, swiglu, situ, "
                      "rms_norm)" % (act,))
    if act == "none":
        act = None
    kin = 2 * K if act in PAIR_ACTS else K
    if x.shape[-1] != kin:
        raise Refused("x", "last dimension %d, weight [%d, %d] with input_act %s needs %d" % (
            x.shape[-1], N, K, act, kin))
    aw = mod = res = rs = None
    awdt = None
    if act is not None:
        why = probe("act:" + act)
        if why:
            raise Refused("input_act", "%s: %s" % (act, why))
    if act == "rms_norm":
        pn, pe = ("norm_weight", "norm_eps") if rms_mod else ("input_act_weight", "input_act_eps")
        aw, eps = kw.get(pn), kw.get(pe)
        need_tensor(pn, aw, FLOATS, "K=%d float values" % K)
        if aw.numel() != K:
            raise Refused(pn, "needs K=%d values, got shape %s" % (K, list(aw.shape)))
        if rms_mod and aw.dtype != x.dtype:
            raise Refused(pn, "dtype %s differs from x's %s (torch's rms_norm then promotes)" % (
                aw.dtype, x.dtype))
        if (eps is not None or not partial) and (
                not isinstance(eps, (int, float)) or isinstance(eps, bool) or
                not (0.0 <= eps < 3.4e38)):
            raise Refused(pe, "needs a finite number >= 0, got %r" % (eps,))
        awdt = aw.dtype
    if func != "int8_linear":
        mod = kw.get("modulation_scale")
        need_tensor("modulation_scale", mod, (x.dtype,), "K=%d values of x's dtype %s" % (
            K, x.dtype))
        if mod.numel() != K:
            raise Refused("modulation_scale", "needs one row of K=%d values, got shape %s" % (
                K, list(mod.shape)))
        why = probe("modulation")
        if why:
            raise Refused("modulation_scale", why)
    else:
        res, rs = kw.get("residual"), kw.get("residual_scale")
        if res is not None:
            out_shape = tuple(x.shape[:-1]) + (N,)
            need_tensor("residual", res, FLOATS, "a float tensor of the output's shape")
            if tuple(res.shape) != out_shape:
                raise Refused("residual", "needs the output's shape %s, got %s" % (
                    list(out_shape), list(res.shape)))
            need_tensor("residual_scale", rs, FLOATS, "1 or N=%d float values" % N)
            if rs.numel() not in (1, N) or (rs.numel() == N and N > 1 and rs.shape[-1] != N) \
                    or rs.dim() > len(out_shape):
                raise Refused("residual_scale", "needs 1 or N=%d values along the last "
                              "dimension, got shape %s" % (N, list(rs.shape)))
            why = probe("residual")
            if why:
                raise Refused("residual", why)
        elif rs is not None:
            raise Refused("residual_scale", "given without residual")
    gs = 0
    if kw.get("convrot"):
        g = kw.get("convrot_groupsize", 256)
        if not is_pow4(g):
            raise Refused("convrot_groupsize", "%r is not a power of 4 >= 4" % (g,))
        if K % g:
            raise Refused("convrot_groupsize", "%d does not divide K=%d" % (g, K))
        why = probe("gs:%d" % g)
        if why:
            raise Refused("convrot_groupsize", why)
        gs = g
    no_grad_needed(func, ("x", x), ("weight", weight), ("weight_scale", ws), ("bias", bias),
                   ("input_act_weight", aw), ("modulation_scale", mod), ("residual", res),
                   ("residual_scale", rs))
    if partial:
        return None
    c = _Call()
    x2 = _rows(x, kin)
    M = x2.shape[0]
    c.h = _weight_key(weight, ws, bias, gs, N, K, c)
    c.tmpl = _kind((N, K, gs, x.dtype, out_dtype, act, awdt, mod is not None, res is not None,
                    M.bit_length()), c.h, M, x.dtype, out_dtype, act, awdt, mod is not None,
                   res is not None, kin, N)
    c.x2, c.M, c.N, c.kin, c.shape, c.out_dtype = x2, M, N, kin, x.shape, out_dtype
    c.act_weight = c.modulation = c.residual = c.rscale = None
    if aw is not None:
        c.act_weight = (_flat(aw, K), float(eps))
    if mod is not None:
        c.modulation = _flat(mod, K)
    if res is not None:
        r = res
        if r.dtype != out_dtype:
            r = r.to(out_dtype)
        c.residual = _rows(r, N)
        r2 = rs.reshape(-1)
        if r2.dtype != out_dtype:
            r2 = r2.to(out_dtype)
        c.rscale = (r2.expand(N) if r2.numel() == 1 else r2).contiguous()
    return c


def run(c):
    a = type(c.tmpl).from_buffer_copy(c.tmpl)
    M, N = c.M, c.N
    x2 = c.x2
    y = torch.empty((M, N), dtype=c.out_dtype)
    a.M = M
    a.x = x2.data_ptr()
    a.ldx = x2.stride(0) if M > 1 else c.kin
    a.y = y.data_ptr()
    if c.act_weight is not None:
        a.act_weight, a.act_eps = c.act_weight[0].data_ptr(), c.act_weight[1]
    if c.modulation is not None:
        a.modulation = c.modulation.data_ptr()
    if c.residual is not None:
        r = c.residual
        a.residual, a.ldr, a.residual_scale = r.data_ptr(), (r.stride(0) if M > 1 else N), \
            c.rscale.data_ptr()
    lk = qmm._lock
    with lk:
        ctx = qmm._proc
        want = qmm._options["n_threads"] or torch.get_num_threads()
        if ctx is None or ctx.threads != want:
            ctx = qmm.context(want)
        st = _linear(ctx.ptr, c.h.ptr, _byref(a))
    if st != L.OK:
        qmm._check(st, "qmm_linear")
    return y.view(*c.shape[:-1], N)


def rule(func):
    """The kitchen call rule of func: check() and remember the result for the call."""
    def call_rule(kw):
        try:
            c = check(func, kw, partial=kw.get("weight_scale") is None)
        except Refused as e:
            _tls.last = None
            from ._declines import decline
            return decline(func, e.param, e.reason)
        if c is not None:
            c.ids = _sig(kw)
            _tls.last = c
        from comfy_kitchen.constraints import ValidationResult
        return ValidationResult.ok()
    return call_rule


def _sig(kw):
    """Which call kw is: the identity of each tensor argument and the values of the others,
    with the kitchen's defaults for those left out (the rule sees the caller's kwargs, the
    function its own parameters)."""
    g = kw.get
    conv = bool(g("convrot"))
    return (id(g("x")), id(g("weight")), id(g("weight_scale")), id(g("bias")),
            id(g("modulation_scale")), id(g("norm_weight")), id(g("input_act_weight")),
            id(g("residual")), id(g("residual_scale")), g("out_dtype") or torch.bfloat16, conv,
            g("convrot_groupsize", 256) if conv else 0, g("input_act"), g("input_act_eps", 0.0),
            g("norm_eps"))


def _prepared(func, kw):
    c = getattr(_tls, "last", None)
    if c is not None:
        _tls.last = None
        if c.ids == _sig(kw):
            return c
    return check(func, kw)


def int8_linear(x, weight, weight_scale, bias=None, out_dtype=torch.bfloat16, convrot=False,
                convrot_groupsize=256, input_act=None, input_act_weight=None, input_act_eps=0.0,
                residual=None, residual_scale=None):
    """The kitchen's int8_linear on qmm (same signature and results as the eager backend)."""
    return run(_prepared("int8_linear", dict(
        x=x, weight=weight, weight_scale=weight_scale, bias=bias, out_dtype=out_dtype,
        convrot=convrot, convrot_groupsize=convrot_groupsize, input_act=input_act,
        input_act_weight=input_act_weight, input_act_eps=input_act_eps, residual=residual,
        residual_scale=residual_scale)))


def int8_linear_modulated(x, modulation_scale, weight, weight_scale, bias=None,
                          out_dtype=torch.bfloat16, convrot=False, convrot_groupsize=256):
    """x · (1 + modulation_scale) (one row for every token), then int8_linear; on qmm the
    modulation is applied in its input stage (no [M, K] temporary)."""
    return run(_prepared("int8_linear_modulated", dict(
        x=x, modulation_scale=modulation_scale, weight=weight, weight_scale=weight_scale,
        bias=bias, out_dtype=out_dtype, convrot=convrot, convrot_groupsize=convrot_groupsize)))


def int8_linear_rms_modulated(x, norm_weight, norm_eps, modulation_scale, weight, weight_scale,
                              bias=None, out_dtype=torch.bfloat16, convrot=False,
                              convrot_groupsize=256):
    """rms_norm(x, norm_weight, norm_eps) · (1 + modulation_scale), then int8_linear."""
    return run(_prepared("int8_linear_rms_modulated", dict(
        x=x, norm_weight=norm_weight, norm_eps=norm_eps, modulation_scale=modulation_scale,
        weight=weight, weight_scale=weight_scale, bias=bias, out_dtype=out_dtype,
        convrot=convrot, convrot_groupsize=convrot_groupsize)))


def plan(weight, weight_scale, bias=None, convrot_groupsize=0, M=1, x_dtype=torch.float32,
         out_dtype=None):
    """The engine qmm runs an int8_linear of this layer on for M rows of x_dtype (its name), or
    Refused with the reason it is declined (the kitchen's eager backend runs it then)."""
    out_dtype = out_dtype or x_dtype
    x = torch.empty((1, weight.shape[-1] if weight.dim() == 2 else 1), dtype=x_dtype)
    kw = dict(x=x, weight=weight, weight_scale=weight_scale, bias=bias, out_dtype=out_dtype,
              convrot=convrot_groupsize > 0, convrot_groupsize=convrot_groupsize or 256)
    c = check("int8_linear", kw)
    N, K = weight.shape
    _kind((N, K, convrot_groupsize, x_dtype, out_dtype, None, None, False, False,
           int(M).bit_length()), c.h, int(M), x_dtype, out_dtype, None, None, False, False, K, N)
    a = L.qmm_linear_args_default()
    a.M, a.x_dtype, a.y_dtype, a.epilogue = int(M), QDT[x_dtype], QDT[out_dtype], \
        L.EPILOGUE_KITCHEN
    p = L.PlanInfo()
    with qmm.lock():
        qmm._check(L.qmm_plan(qmm.context().ptr, c.h.ptr, _byref(a), _byref(p)), "qmm_plan")
    return qmm.engine_name(p.engine)
