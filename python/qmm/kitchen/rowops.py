"""qmm.kitchen.rowops — the kitchen's fused row ops on qmm (qmm_rope, qmm_rms_mod, SPEC §13).

The functions (comfy_kitchen.backends.eager.rope's names and signatures):
  apply_rope1, apply_rope, apply_rope_split_half1, apply_rope_split_half   rotation only
  rms_rope1, rms_rope, rms_rope_split_half1, rms_rope_split_half           RMSNorm, then rotation
and the in-place form of each (name + "_"), which writes into its inputs. One C call per tensor:
one pass over its rows (RMSNorm and rotation fused), on the process context's threads.
Also rms_adaln (x̂ · (1 + scale) + shift) and rms_gated_residual (residual + gate · x̂), x̂ the
RMSNorm of x (qmm_rms_mod): every tensor of x's dtype, scale/shift or gate/residual broadcast to
x's shape with their last dimension D contiguous; each step rounded as torch's ops round it, so
bit-identical to eager but for the RMSNorm's sum and rsqrt (the same bound as rms_rope).

check(func, kw) validates a call as the kitchen's eager code would take it (raises Refused
naming the argument); the call rule turns a refusal into a logged decline, and eager runs it.
Taken: x (q, k) of f32/bf16/f16 with a contiguous last dimension, at most three leading
dimensions after merging the ones whose strides allow it (x's, out's and the broadcast freqs'),
an even head dim D <= 1024; freqs [..., rot/2, 2, 2] of f32/bf16/f16 whose leading dimensions
broadcast to x's (eager's own broadcast, freqs trimmed on dim 2 as eager's trim_rope_freqs for
the interleaved ops); an RMSNorm scale of shape [D]; rot_dim 0 or even <= D. In-place calls
also pass the kitchen's check_rope_inplace (else eager runs them and raises its error).
Declined: anything requiring grad under grad mode (in place: at all), other devices, empty
tensors, what the rules above leave out.

Numerics (SPEC §13): the rotation is eager's arithmetic in freqs' dtype (mul, then a fused
multiply-add, each rounded to that dtype), so apply_rope* are bit-identical to eager; the
RMSNorm's sum of squares and rsqrt are qmm's (16 lanes, 1/sqrtf), not torch's, so rms_rope* are
within a bound of eager (a few ulp of x's dtype; tests/python/test_kitchen_rowops.py).
"""
import torch
from comfy_kitchen._rope_utils import check_rope_inplace, trim_rope_freqs

import qmm
from qmm import _lib as L

from ._common import FLOATS, QDT, Refused, Tensor, need_tensor

_nthreads = torch.get_num_threads

# function → (split_half, rms, paired, in place)
FUNCS = {}
for _base, _split, _rms in (("apply_rope", False, False), ("apply_rope_split_half", True, False),
                            ("rms_rope", False, True), ("rms_rope_split_half", True, True)):
    FUNCS[_base] = (_split, _rms, True, False)
    FUNCS[_base + "_"] = (_split, _rms, True, True)
    FUNCS[_base + "1"] = (_split, _rms, False, False)
    FUNCS[_base + "1_"] = (_split, _rms, False, True)


def available():
    """None if the loaded library has qmm_rope, else why not."""
    return None if L.qmm_rope is not None else "the loaded libqmm lacks qmm_rope (older library)"


def _names(func):
    """(the names of func's tensors to rotate, of their RMSNorm scales) — the kitchen's."""
    split, rms, paired, _ = FUNCS[func]
    if rms:
        xs = ("q", "k") if paired else ("x",)
        return xs, ("q_scale", "k_scale") if paired else ("scale",)
    return (("xq", "xk") if paired else ("x",)), ()


def _coalesce(shape, strides_list):
    """Merge adjacent leading dimensions where every tensor's strides allow it; drop extent 1.
    Returns (shape, [strides per tensor]) or None when more than 3 dimensions remain."""
    dims = [(n, [s[i] for s in strides_list]) for i, n in enumerate(shape) if n != 1]
    out = []
    for n, st in dims:
        if out:
            pn, pst = out[-1]
            if all(ps == s * n for ps, s in zip(pst, st)):
                out[-1] = (pn * n, st)
                continue
        out.append((n, st))
    if len(out) > 3:
        return None
    while len(out) < 3:
        out.insert(0, (1, [0] * len(strides_list)))
    return [n for n, _ in out], [[st[i] for _, st in out] for i in range(len(strides_list))]


def _freqs_for(func, x, freqs, rot):
    """(freqs as eager reads it for x — trimmed for the interleaved ops —, its last three
    dimensions contiguous; its strides broadcast to x's leading dimensions, 0 where it repeats);
    Refused naming freqs when eager's broadcast would not give x's shape."""
    split = FUNCS[func][0]
    f = freqs
    if not split:
        f = trim_rope_freqs(x, f)
    elif f.ndim == 2:
        f = f.unsqueeze(0)
    fsh = tuple(f.shape)
    if len(fsh) < 3 or fsh[-3:] != (rot // 2, 2, 2):
        raise Refused("freqs_cis", "needs shape [..., %d, 2, 2] for head dim %d%s, got %s" % (
            rot // 2, x.shape[-1], " (rot_dim %d)" % rot if rot != x.shape[-1] else "", list(freqs.shape)))
    lead, flead = tuple(x.shape[:-1]), fsh[:-3]
    if len(flead) > len(lead) or any(a != b and a != 1 for a, b in zip(flead[::-1], lead[::-1])):
        raise Refused("freqs_cis", "leading shape %s does not broadcast to x's %s" % (
            list(flead), list(lead)))
    if f.stride()[-3:] != (4, 2, 1):
        f = f.contiguous()
    fst = f.stride()[:-3]
    pad = len(lead) - len(flead)
    strides = tuple(0 if i < pad or flead[i - pad] == 1 else fst[i - pad] for i in range(len(lead)))
    return f, strides


def _plan(func, name, x, freqs, scale, rot, out, build=True):
    """The RopeArgs of one tensor (x → out) and the freqs tensor it points into, or Refused;
    build=False: the checks only (None, None)."""
    D = x.shape[-1] if x.dim() else 0
    if x.dim() < 1 or x.numel() == 0:
        raise Refused(name, "needs a non-empty tensor, got shape %s" % list(x.shape))
    if D % 2 or D > L.ROPE_MAX_D:
        raise Refused(name, "head dim %d: qmm takes an even head dim up to %d" % (D, L.ROPE_MAX_D))
    xst = x.stride()
    if xst[-1] != 1:
        raise Refused(name, "needs a contiguous last dimension, got stride %s" % (xst,))
    f, fs = _freqs_for(func, x, freqs, rot)
    m = _coalesce(x.shape[:-1], [xst[:-1], out.stride()[:-1], fs])
    if m is None:
        raise Refused(name, "more than 3 leading dimensions that its strides do not merge: %s, stride %s" % (
            list(x.shape), xst))
    if not build:
        return None, None
    n, (xs, os_, fs) = m
    a = L.qmm_rope_args_default()
    a.n[:], a.x_stride[:], a.out_stride[:], a.freqs_stride[:] = n, xs, os_, fs
    a.D, a.x, a.x_dtype, a.out = D, x.data_ptr(), QDT[x.dtype], out.data_ptr()
    a.freqs, a.freqs_dtype = f.data_ptr(), QDT[f.dtype]
    a.rot_dim, a.split_half = rot if rot != D else 0, int(FUNCS[func][0])
    if scale is not None:
        a.norm_weight, a.norm_weight_dtype = scale.data_ptr(), QDT[scale.dtype]
    return a, f


def _args(func, kw):
    """(tensors [(name, x)], freqs, scales [per tensor], eps, rot_dim) of a call's kwargs."""
    split, rms, paired, inplace = FUNCS[func]
    xs, scales = _names(func)
    ts = [(n, kw.get(n)) for n in xs]
    freqs = kw.get("freqs_cis")
    sc = [(None, None)] * len(ts)
    eps, rot = 0.0, 0
    if rms:
        if paired:
            q_scale, k_scale = kw.get("q_scale"), kw.get("k_scale")
            sc = [("q_scale", q_scale), ("k_scale" if k_scale is not None else "q_scale",
                                          k_scale if k_scale is not None else q_scale)]
        else:
            sc = [("scale", kw.get("scale"))]
        eps = kw.get("epsilon", 1e-6)
        rot = kw.get("rot_dim", 0) or 0
    return ts, freqs, sc, eps, rot


def check(func, kw):
    """Refused (naming the parameter) unless qmm runs this call as eager would."""
    split, rms, paired, inplace = FUNCS[func]
    ts, freqs, sc, eps, rot = _args(func, kw)
    for n, t in ts:
        need_tensor(n, t, FLOATS, "a float tensor")
    need_tensor("freqs_cis", freqs, FLOATS, "a float tensor")
    tensors = [freqs] + [t for _, t in ts]
    if rms:
        if isinstance(eps, bool) or not isinstance(eps, (float, int)) or eps != eps or abs(eps) == float("inf"):
            raise Refused("epsilon", "needs a finite float, got %r" % (eps,))
        if isinstance(rot, bool) or not isinstance(rot, int):
            raise Refused("rot_dim", "needs an int, got %r" % (rot,))
        for (n, x), (sn, s) in zip(ts, sc):
            need_tensor(sn, s, FLOATS, "a float scale tensor")
            D = x.shape[-1] if x.dim() else 0
            if s.dim() != 1 or s.shape[0] != D:
                raise Refused(sn, "needs shape [%d], got %s" % (D, list(s.shape)))
            if rot and (rot < 0 or rot % 2 or rot > D):
                raise Refused("rot_dim", "%d: needs 0 or an even value up to head dim %d" % (rot, D))
            tensors.append(s)
    if any(t.requires_grad for t in tensors) and (inplace or torch.is_grad_enabled()):
        raise Refused(ts[0][0], "an input requires grad (autograd: qmm runs inference only; eager "
                      "keeps the graph, or raises for an in-place op)")
    if inplace:
        ro = (freqs,) + tuple(s for _, s in sc if s is not None and s is not freqs)
        try:
            check_rope_inplace(*[t for _, t in ts], readonly=ro)
        except (ValueError, RuntimeError) as e:
            raise Refused(ts[0][0], "eager's in-place check fails (%s)" % e) from None
    for (n, x), (_, s) in zip(ts, sc):
        r = rot or x.shape[-1]
        _plan(func, n, x, freqs, s, r, x, build=False)
    why = available()
    if why:
        raise Refused(ts[0][0], why)


def _run(func, kw):
    split, rms, paired, inplace = FUNCS[func]
    check(func, kw)
    ts, freqs, sc, eps, rot = _args(func, kw)
    outs = []
    with qmm.lock():
        ctx = qmm.context(_nthreads()).ptr
        for (n, x), (_, s) in zip(ts, sc):
            out = x if inplace else torch.empty(x.shape, dtype=x.dtype)
            if s is not None and not s.is_contiguous():
                s = s.contiguous()
            a, f = _plan(func, n, x, freqs, s, rot or x.shape[-1], out)
            a.eps = float(eps)
            qmm._check(L.qmm_rope(ctx, a), "qmm_rope")
            outs.append(out)
    return tuple(outs) if paired else outs[0]


def _make(func):
    split, rms, paired, inplace = FUNCS[func]
    xs, _ = _names(func)
    if rms and paired:
        def f(q, k, freqs_cis, q_scale, k_scale=None, epsilon=1e-6, rot_dim=0):
            return _run(func, {"q": q, "k": k, "freqs_cis": freqs_cis, "q_scale": q_scale,
                               "k_scale": k_scale, "epsilon": epsilon, "rot_dim": rot_dim})
    elif rms:
        def f(x, freqs_cis, scale, epsilon=1e-6):
            return _run(func, {"x": x, "freqs_cis": freqs_cis, "scale": scale, "epsilon": epsilon})
    elif paired:
        def f(xq, xk, freqs_cis):
            return _run(func, {"xq": xq, "xk": xk, "freqs_cis": freqs_cis})
    else:
        def f(x, freqs_cis):
            return _run(func, {"x": x, "freqs_cis": freqs_cis})
    f.__name__ = f.__qualname__ = func
    f.__doc__ = "comfy_kitchen's %s on qmm_rope (qmm.kitchen.rowops)." % func
    return f


for _f in FUNCS:
    globals()[_f] = _make(_f)

__all__ = sorted(FUNCS)


def params(func):
    """The kwargs names of func (for the backend's ParamConstraints)."""
    split, rms, paired, inplace = FUNCS[func]
    xs, scales = _names(func)
    p = list(xs) + ["freqs_cis"] + list(scales)
    if rms:
        p.append("epsilon")
        if paired and split:
            p.append("rot_dim")
    return p


# ---------------------------------------------------------------- RMSNorm + modulation
MOD_FUNCS = {"rms_adaln": ("x", "scale", "shift", None, "eps", L.RMS_ADALN),
             "rms_gated_residual": ("activation", "gate", "residual", "norm_weight", "eps",
                                    L.RMS_GATED_RESIDUAL)}


def _bstrides(name, t, shape):
    """t's strides broadcast to shape's leading dimensions (0 where it repeats); its last
    dimension must be shape's, contiguous. Refused naming name."""
    D, lead, tsh = shape[-1], tuple(shape[:-1]), tuple(t.shape)
    if len(tsh) < 1 or tsh[-1] != D or (D > 1 and t.stride(-1) != 1):
        raise Refused(name, "needs a last dimension of %d contiguous values, got shape %s stride %s" % (
            D, list(tsh), t.stride()))
    tl = tsh[:-1]
    if len(tl) > len(lead) or any(a != b and a != 1 for a, b in zip(tl[::-1], lead[::-1])):
        raise Refused(name, "shape %s does not broadcast to %s" % (list(tsh), list(shape)))
    st, pad = t.stride()[:-1], len(lead) - len(tl)
    return tuple(0 if i < pad or tl[i - pad] == 1 else st[i - pad] for i in range(len(lead)))


def check_mod(func, kw, build_out=None):
    """Refused unless qmm runs this call as eager would; with build_out (the output tensor) the
    RmsModArgs of the call."""
    xn, an, bn, wn, en, kind = MOD_FUNCS[func]
    x, a, b, w, eps = kw.get(xn), kw.get(an), kw.get(bn), kw.get(wn) if wn else None, kw.get(en, 1e-6)
    need_tensor(xn, x, FLOATS, "a float tensor")
    for n, t in ((an, a), (bn, b)) + (((wn, w),) if w is not None else ()):
        need_tensor(n, t, (x.dtype,), "a tensor of %s's dtype %s" % (xn, x.dtype))
    if isinstance(eps, bool) or not isinstance(eps, (float, int)) or eps != eps or abs(eps) == float("inf"):
        raise Refused(en, "needs a finite float, got %r" % (eps,))
    if x.dim() < 1 or x.numel() == 0:
        raise Refused(xn, "needs a non-empty tensor, got shape %s" % list(x.shape))
    D = x.shape[-1]
    if x.stride(-1) != 1 and D > 1:
        raise Refused(xn, "needs a contiguous last dimension, got stride %s" % (x.stride(),))
    if w is not None and (w.dim() != 1 or w.shape[0] != D or not w.is_contiguous()):
        raise Refused(wn, "needs a contiguous [%d], got shape %s" % (D, list(w.shape)))
    sa, sb = _bstrides(an, a, x.shape), _bstrides(bn, b, x.shape)
    tensors = [x, a, b] + ([w] if w is not None else [])
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        raise Refused(xn, "an input requires grad under grad mode (autograd: qmm runs inference only)")
    ostride, acc = [], D  # the output: a new contiguous tensor of x's shape
    for e in reversed(x.shape[:-1]):
        ostride.insert(0, acc)
        acc *= e
    m = _coalesce(x.shape[:-1], [x.stride()[:-1], tuple(ostride), sa, sb])
    if m is None:
        raise Refused(xn, "more than 3 leading dimensions that its strides and the broadcasts do not "
                      "merge: %s" % list(x.shape))
    if L.qmm_rms_mod is None:
        raise Refused(xn, "the loaded libqmm lacks qmm_rms_mod (older library)")
    if build_out is None:
        return None
    n, (xs, os_, as_, bs) = m
    r = L.qmm_rms_mod_args_default()
    r.n[:], r.x_stride[:], r.out_stride[:], r.a_stride[:], r.b_stride[:] = n, xs, os_, as_, bs
    r.D, r.dtype, r.kind, r.eps = D, QDT[x.dtype], kind, float(eps)
    r.x, r.out, r.a, r.b = x.data_ptr(), build_out.data_ptr(), a.data_ptr(), b.data_ptr()
    if w is not None:
        r.norm_weight = w.data_ptr()
    return r


def _run_mod(func, kw):
    check_mod(func, kw)
    x = kw[MOD_FUNCS[func][0]]
    out = torch.empty(x.shape, dtype=x.dtype)
    r = check_mod(func, kw, out)
    with qmm.lock():
        qmm._check(L.qmm_rms_mod(qmm.context(_nthreads()).ptr, r), "qmm_rms_mod")
    return out


def rms_adaln(x, scale, shift, eps=1e-6):
    """comfy_kitchen's rms_adaln on qmm_rms_mod: rms_norm(x) · (1 + scale) + shift."""
    return _run_mod("rms_adaln", {"x": x, "scale": scale, "shift": shift, "eps": eps})


def rms_gated_residual(activation, norm_weight, residual, gate, eps=1.0e-5):
    """comfy_kitchen's rms_gated_residual on qmm_rms_mod: residual + gate · rms_norm(activation, w)."""
    return _run_mod("rms_gated_residual", {"activation": activation, "norm_weight": norm_weight,
                                           "residual": residual, "gate": gate, "eps": eps})


__all__ = __all__ + sorted(MOD_FUNCS)
