"""qmm.kitchen.linear — the kitchen's int8_linear, int8_linear_modulated and
int8_linear_rms_modulated on qmm (same signatures and results as the eager backend, SPEC §1a).

One check serves the kitchen's call rule and a direct call: check(func, args) validates every
argument (types, dtypes, devices, shapes, strides incl. 0, lengths, grad) and raises Refused
naming the first one qmm does not take; the call rule turns that into a logged decline (eager
runs the call), a direct call gets it as a ValueError. args is the canonical tuple
    (x, weight, weight_scale, bias, out_dtype, convrot, convrot_groupsize, input_act,
     act_weight, act_eps, residual, residual_scale, modulation_scale)
of all three functions. What the check finds is kept for the call that follows it on the same
thread with the very same arguments (the kitchen validates, then calls): the work is done once.

Per call, what depends only on the layer's kind is computed once and kept (_kinds): the key
    (N, K, group, x dtype, out dtype, act, act weight dtype, modulation, residual, W4A8, M class)
with M class = M.bit_length() (admission can depend on M, e.g. amx_int8's smallest M, never
within a power of two) maps to (the options' generation it was planned under, a prepared
qmm_linear_args template or the reason no int8 engine takes it). Calls qmm would run W8A16 on a
float engine are refused (eager keeps its own numerics for them). Reasons are formatted only for
refused calls.

qmm.configure() (max_isa, disabled_engines, fallback, ...) moves qmm.generation() on: a kind
planned under another generation is planned again at its next check, and the call itself runs
through qmm.linear_call_planned, which runs it only if the options are still those it was
planned under (checked under the lock configure() takes, so a configure() between the check and
the call is seen); else the call is checked and planned again. A call the kitchen handed to qmm
(its call rule accepted it) that qmm then cannot run — the new plan refuses it, or the library
fails at call time — goes on to the next backend in the kitchen's priority (_declines.hand_on,
counted and logged as a decline): no qmm error reaches a kitchen caller. A direct call gets the
Refused (a ValueError) or the QmmError.

Autograd: an input that requires grad under grad mode, or a dual tensor of forward-mode AD
(torch.func.jvp, jacfwd, forward_ad.make_dual: qmm._autograd), is refused — eager keeps the
derivative.

The weight is borrowed (weights.py): no copy is made, every call reads the int8 tensor, the
scales and the bias as they are at that moment.
"""
import ctypes
import threading

import torch

import qmm
from qmm import _autograd as _ad
from qmm import _lib as L

from . import weights
from ._common import ACTS, FLOATS, PAIR_ACTS, QDT, Refused, Tensor, is_pow4, need_tensor
from .probe import probe

_tls = threading.local()
_kinds = {}
_kinds_lock = threading.Lock()
_gs_ok = {}             # convrot group -> None or the Refused for it
_F32 = torch.float32
_BF16 = torch.bfloat16
_EPS0 = 0.0
_call_planned = qmm.linear_call_planned
_fwd_level = _ad.forward_level
_byref = ctypes.byref
_empty = torch.empty
_grad_on = torch.is_grad_enabled
_nthreads = torch.get_num_threads
_is = __import__("operator").is_


class _Call:
    """What check() found for one call; run() executes it."""
    __slots__ = ("args", "keep", "x", "ldx", "M", "N", "kin", "out_shape", "out_dtype", "h",
                 "tmpl", "gen", "act_weight", "act_eps", "modulation", "residual", "rscale",
                 "w4args", "func", "kw")


def _rows(t, width):
    """t as a 2-D [M, width] view whose rows are width contiguous elements apart or more
    (copied when its strides are anything else: 0, overlapping, or a column stride != 1)."""
    t2 = t.reshape(-1, width)
    s0, s1 = t2.stride()
    if s1 != 1 or (t2.shape[0] > 1 and s0 < width):
        t2 = t2.contiguous()
    return t2


def _flat(t, n):
    """t's n values contiguous in memory: t itself when it is contiguous, else a 1-D view or
    copy."""
    if t.is_contiguous():
        return t
    v = t.reshape(-1)
    if n > 1 and v.stride(0) != 1:
        v = v.contiguous()
    return v


def _handle(weight, ws, bias, gs, N, K, c):
    """The borrowed handle of this call (weights.py): kept per address and layout when the scale
    (fp32) and the bias are read in place, else a transient one over this call's copies."""
    own = True
    s = ws
    if s.dtype is not _F32 or not s.is_contiguous():
        s = _flat(ws, ws.numel()).to(_F32).contiguous()
        own = False
    bptr, bdt = None, L.F32
    b = bias
    if b is not None:
        if not b.is_contiguous():
            b = b.contiguous()
            own = False
        bptr, bdt = b.data_ptr(), QDT[b.dtype]
    c.keep = (s, b)
    key = (weight.data_ptr(), N, K, weight.stride(0) if N > 1 else K, s.data_ptr(), s.numel(),
           bptr, bdt, gs)
    return weights.handle(key, (weight, ws, bias)) if own else weights.transient(key)


def _kind(key, h, M, xdt, odt, act, awdt, kin, N):
    """(generation, the qmm_linear_args template of a layer kind or Refused): planned once per
    key and generation of the options (qmm.generation(), read under the lock the plan holds)."""
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
        gen = qmm._generation
        st = L.qmm_plan(qmm.context(_nthreads()).ptr, h.ptr, _byref(a), _byref(p))
    if st != L.OK:
        k = Refused("weight", (L.qmm_last_error() or b"").decode(errors="replace"))
    elif p.status != L.OK or p.is_fallback:
        pp = _byref(p)
        why = "; ".join("%s: %s" % (e["name"], L.qmm_plan_reason(pp, e["id"]).decode(
            errors="replace")) for e in L.ENGINES
            if e["kind"] == L.KIND_INT8 and L.qmm_plan_reason(pp, e["id"]))
        k = Refused("x", "no int8 engine admits [%d, %d] M=%d (%s)" % (N, key[1], M, why))
    else:
        k = a
    e = (gen, k)
    with _kinds_lock:
        if len(_kinds) > 4096:
            _kinds.clear()
        _kinds[key] = e
    return e


def _group(g, K):
    r = _gs_ok.get(g, 0)
    if r == 0:
        if not is_pow4(g):
            r = Refused("convrot_groupsize", "%r is not a power of 4 >= 4" % (g,))
        else:
            why = probe("gs:%d" % g)
            r = Refused("convrot_groupsize", why) if why else None
        if isinstance(g, int) and not isinstance(g, bool):
            _gs_ok[g] = r
    if r is not None:
        raise r
    if K % g:
        raise Refused("convrot_groupsize", "%d does not divide K=%d" % (g, K))


_GRAD_NAMES = ("x", "weight", "weight_scale", "bias", None, None, None, None, "act_weight", None,
               "residual", "residual_scale", "modulation_scale")


def _grad(args):
    for name, t in zip(_GRAD_NAMES, args):
        if name and isinstance(t, Tensor) and t.requires_grad:
            raise Refused(name, "requires grad under grad mode (autograd: qmm runs inference "
                          "only)")


def _dual(args):
    name = _ad.first_dual((n, t) for n, t in zip(_GRAD_NAMES, args) if n)
    if name:
        raise Refused(name, _ad.DUAL_WHY)


def check(func, args, partial=False, w4=None):
    """Validate a call of func (args: the canonical tuple above); return a _Call, or raise
    Refused. partial: the kitchen's _has_native_fusion probe (no weight_scale): judged on what
    it gives. w4: a W4A8 weight (w4a8.py: .N, .K, .handle(bias, call)) instead of weight and
    weight_scale (both None then)."""
    x, weight, ws, bias, out_dtype, convrot, g, act, aw, eps, res, rs, mod = args
    need_tensor("x", x, FLOATS, "a float tensor (f32, f16 or bf16)")
    if w4 is None:
        need_tensor("weight", weight, (torch.int8,), "an int8 [N, K] tensor")
        if weight.dim() != 2:
            raise Refused("weight", "needs a 2-D [N, K] int8 tensor, got shape %s" % list(weight.shape))
        N, K = weight.shape
        w0, w1 = weight.stride()
        if w1 != 1 or (N > 1 and w0 < K) or N == 0 or K == 0:
            raise Refused("weight", "needs rows of K=%d contiguous int8 values (column stride 1, row "
                          "stride >= K, not empty), got shape %s stride %s" % (
                              K, list(weight.shape), weight.stride()))
        if ws is not None:
            need_tensor("weight_scale", ws, FLOATS, "1 or N float values")
            ns = ws.numel()
            if ns != N and ns != 1:
                raise Refused("weight_scale", "needs 1 or N=%d values, got shape %s" % (
                    N, list(ws.shape)))
        elif not partial:
            raise Refused("weight_scale", "required")
    else:
        N, K = w4.N, w4.K
    xdim = x.dim()
    if xdim < 1 or x.numel() == 0:
        raise Refused("x", "empty input %s" % list(x.shape))
    if bias is not None:
        need_tensor("bias", bias, FLOATS, "N float values")
        if bias.numel() != N:
            raise Refused("bias", "needs N=%d values, got shape %s" % (N, list(bias.shape)))
    if out_dtype is None:
        out_dtype = _BF16
    if not isinstance(out_dtype, torch.dtype) or out_dtype not in FLOATS:
        raise Refused("out_dtype", "%s (needs torch.float32, float16 or bfloat16)" % (out_dtype,))
    if act is not None:
        if act == "none":
            act = None
        elif not isinstance(act, str) or act not in ACTS:
            raise Refused("input_act", "%r unknown (qmm runs none, gelu_tanh, swiglu, situ, "
                          "rms_norm)" % (act,))
        else:
            why = probe("act:" + act)
            if why:
                raise Refused("input_act", "%s: %s" % (act, why))
    kin = 2 * K if act in PAIR_ACTS else K
    if x.shape[-1] != kin:
        raise Refused("x", "last dimension %d, weight [%d, %d] with input_act %s needs %d" % (
            x.shape[-1], N, K, act, kin))
    rms_mod = func == "int8_linear_rms_modulated"
    awdt = None
    if act == "rms_norm":
        pn, pe = ("norm_weight", "norm_eps") if rms_mod else ("input_act_weight", "input_act_eps")
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
    elif aw is not None:
        raise Refused("input_act_weight", "given without input_act rms_norm")
    if func != "int8_linear":
        need_tensor("modulation_scale", mod, (x.dtype,), "K=%d values of x's dtype %s" % (K, x.dtype))
        if mod.numel() != K:
            raise Refused("modulation_scale", "needs one row of K=%d values, got shape %s" % (
                K, list(mod.shape)))
        why = probe("modulation")
        if why:
            raise Refused("modulation_scale", why)
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
    if convrot:
        _group(g, K)
        gs = g
    if _grad_on() and (x.requires_grad or (weight is not None and weight.requires_grad) or
                       (ws is not None and ws.requires_grad) or
                       (bias is not None and bias.requires_grad) or
                       aw is not None or res is not None or mod is not None):
        _grad(args)
    if _fwd_level() >= 0:
        _dual(args)
    if partial:
        return None
    c = _Call()
    c.args = args
    c.func, c.kw, c.w4args = func, None, None
    # x: read in place when its rows are kin contiguous values >= kin apart, else copied
    if x.is_contiguous():
        M = x.numel() // kin
        ldx = kin
    elif xdim == 2 and x.stride(1) == 1 and (x.shape[0] == 1 or x.stride(0) >= kin):
        M = x.shape[0]
        ldx = x.stride(0) if M > 1 else kin
    else:
        x = x.contiguous()
        M = x.numel() // kin
        ldx = kin
    c.x, c.ldx, c.M, c.N, c.kin = x, ldx, M, N, kin
    c.out_shape = x.shape[:-1] + (N,)
    c.out_dtype = out_dtype
    c.h = h = _handle(weight, ws, bias, gs, N, K, c) if w4 is None else w4.handle(bias, c)
    key = (N, K, gs, x.dtype, out_dtype, act, awdt, mod is not None, res is not None,
           w4 is not None, M.bit_length())
    e = _kinds.get(key)
    if e is None or e[0] != qmm._generation:
        e = _kind(key, h, M, x.dtype, out_dtype, act, awdt, kin, N)
    c.gen, t = e
    if type(t) is Refused:
        raise t
    c.tmpl = t
    c.act_weight = c.modulation = c.residual = c.rscale = None
    if aw is not None:
        c.act_weight = _flat(aw, K).contiguous()
        c.act_eps = float(eps)
    if mod is not None:
        c.modulation = _flat(mod, K).contiguous()
    if res is not None:
        r = res if res.dtype == out_dtype else res.to(out_dtype)
        c.residual = _rows(r, N)
        r2 = rs.reshape(-1)
        if r2.dtype != out_dtype:
            r2 = r2.to(out_dtype)
        c.rscale = (r2.expand(N) if r2.numel() == 1 else r2).contiguous()
    return c


def run(c):
    """The output of the checked call c, or None (nothing run) when qmm.configure() changed an
    option since c was planned."""
    a = c.tmpl.__class__.from_buffer_copy(c.tmpl)
    M = c.M
    y = _empty(c.out_shape, dtype=c.out_dtype)
    a.M = M
    a.x = c.x.data_ptr()
    a.ldx = c.ldx
    a.y = y.data_ptr()
    if c.act_weight is not None:
        a.act_weight, a.act_eps = c.act_weight.data_ptr(), c.act_eps
    if c.modulation is not None:
        a.modulation = c.modulation.data_ptr()
    if c.residual is not None:
        r = c.residual
        a.residual, a.ldr, a.residual_scale = r.data_ptr(), (r.stride(0) if M > 1 else c.N), \
            c.rscale.data_ptr()
    if not _call_planned(c.h.ptr, a, _nthreads(), c.gen):
        return None
    return y


def execute(c):
    """run(c); when configure() changed an option since c's check, c checked and planned again
    and run. A call the kitchen handed over (c.kw: its arguments) that qmm cannot run after all
    (a Refused of the new check, a QmmError of the library) goes to the next backend
    (_declines.hand_on); a direct call gets the error."""
    try:
        y = run(c)
        if y is None:
            y = run(_recheck(c))
            if y is None:
                raise Refused("x", "qmm.configure() changed the options while the call was "
                              "being planned")
        return y
    except (Refused, qmm.QmmError) as e:
        if c.kw is None:
            raise
        from ._declines import hand_on
        return hand_on(c.func, c.kw, e)


def _recheck(c):
    """c's call checked again (under the options in force), keeping its kitchen arguments."""
    if c.w4args is not None:
        from . import w4a8
        c2 = w4a8.check(c.w4args)
    else:
        c2 = check(c.func, c.args)
    c2.kw = c.kw
    return c2


def _args(func, kw):
    """The canonical argument tuple of a kitchen call's kwargs (the functions' defaults for the
    ones left out)."""
    g = kw.get
    if func == "int8_linear":
        return (g("x"), g("weight"), g("weight_scale"), g("bias"), g("out_dtype", _BF16),
                g("convrot", False), g("convrot_groupsize", 256), g("input_act"),
                g("input_act_weight"), g("input_act_eps", _EPS0), g("residual"),
                g("residual_scale"), None)
    if func == "int8_linear_modulated":
        return (g("x"), g("weight"), g("weight_scale"), g("bias"), g("out_dtype", _BF16),
                g("convrot", False), g("convrot_groupsize", 256), None, None, _EPS0, None, None,
                g("modulation_scale"))
    return (g("x"), g("weight"), g("weight_scale"), g("bias"), g("out_dtype", _BF16),
            g("convrot", False), g("convrot_groupsize", 256), "rms_norm", g("norm_weight"),
            g("norm_eps"), None, None, g("modulation_scale"))


def rule(func):
    """The kitchen call rule of func: check() and remember the result for the call."""
    from comfy_kitchen.constraints import ValidationResult
    from ._declines import decline
    ok = ValidationResult.ok()

    def call_rule(kw):
        try:
            c = check(func, _args(func, kw), partial=kw.get("weight_scale") is None)
        except Refused as e:
            _tls.last = None
            return decline(func, e.param, e.reason)
        if c is not None:
            c.kw = kw
        _tls.last = c
        return ok
    return call_rule


def _prepared(func, args):
    c = getattr(_tls, "last", None)
    if c is not None:
        _tls.last = None
        if all(map(_is, c.args, args)):
            return c
    return check(func, args)


def int8_linear(x, weight, weight_scale, bias=None, out_dtype=_BF16, convrot=False,
                convrot_groupsize=256, input_act=None, input_act_weight=None, input_act_eps=_EPS0,
                residual=None, residual_scale=None):
    """The kitchen's int8_linear on qmm (same signature and results as the eager backend)."""
    return execute(_prepared("int8_linear", (
        x, weight, weight_scale, bias, out_dtype, convrot, convrot_groupsize, input_act,
        input_act_weight, input_act_eps, residual, residual_scale, None)))


def int8_linear_modulated(x, modulation_scale, weight, weight_scale, bias=None,
                          out_dtype=_BF16, convrot=False, convrot_groupsize=256):
    """x · (1 + modulation_scale) (one row for every token), then int8_linear; on qmm the
    modulation is applied in its input stage (no [M, K] temporary)."""
    return execute(_prepared("int8_linear_modulated", (
        x, weight, weight_scale, bias, out_dtype, convrot, convrot_groupsize, None, None, _EPS0,
        None, None, modulation_scale)))


def int8_linear_rms_modulated(x, norm_weight, norm_eps, modulation_scale, weight, weight_scale,
                              bias=None, out_dtype=_BF16, convrot=False,
                              convrot_groupsize=256):
    """rms_norm(x, norm_weight, norm_eps) · (1 + modulation_scale), then int8_linear."""
    return execute(_prepared("int8_linear_rms_modulated", (
        x, weight, weight_scale, bias, out_dtype, convrot, convrot_groupsize, "rms_norm",
        norm_weight, norm_eps, None, None, modulation_scale)))


def plan(weight, weight_scale, bias=None, convrot_groupsize=0, M=1, x_dtype=torch.float32,
         out_dtype=None):
    """The engine qmm runs an int8_linear of this layer on for M rows of x_dtype (its name), or
    Refused with the reason it is declined (the kitchen's eager backend runs it then)."""
    out_dtype = out_dtype or x_dtype
    x = torch.empty((1, weight.shape[-1] if weight.dim() == 2 else 1), dtype=x_dtype)
    c = check("int8_linear", (x, weight, weight_scale, bias, out_dtype, convrot_groupsize > 0,
                              convrot_groupsize or 256, None, None, _EPS0, None, None, None))
    N, K = weight.shape
    key = (N, K, convrot_groupsize, x_dtype, out_dtype, None, None, False, False, False,
           int(M).bit_length())
    e = _kinds.get(key)
    if e is None or e[0] != qmm._generation:
        e = _kind(key, c.h, int(M), x_dtype, out_dtype, None, None, K, N)
    t = e[1]
    if type(t) is Refused:
        raise t
    a = L.qmm_linear_args_default()
    a.M, a.x_dtype, a.y_dtype, a.epilogue = int(M), QDT[x_dtype], QDT[out_dtype], \
        L.EPILOGUE_KITCHEN
    p = L.PlanInfo()
    with qmm.lock():
        qmm._check(L.qmm_plan(qmm.context(_nthreads()).ptr, c.h.ptr, _byref(a), _byref(p)), "qmm_plan")
    return qmm.engine_name(p.engine)
