"""qmm.comfy.attention — qmm.attention behind ComfyUI's attention interface (needs torch; not
ComfyUI: everything ComfyUI-specific is looked up at call time, so this module is tested
without it).

ComfyUI (comfy/ldm/modules/attention.py, since 0.3.60 — both 0.29 and 0.30 have it) calls every
attention function as

    optimized_attention(q, k, v, heads, mask=None, attn_precision=None, skip_reshape=False,
                        skip_output_reshape=False, transformer_options=..., **kwargs)

and its decorator wrap_attn, when transformer_options has "optimized_attention_override",
calls instead

    transformer_options["optimized_attention_override"](func, q, k, v, heads, ..., **kwargs)

with func the undecorated function ComfyUI would have run (attention_sub_quad on a CPU) and
_inside_attn_wrapper=True among the kwargs (so func(*args, **kwargs) does not recurse).

Here:
  attention(q, k, v, heads, ...)    ComfyUI's signature; falls back to ComfyUI's
                                    optimized_attention (or torch SDPA without ComfyUI);
  make_attention(fallback)          the same with your fallback, called with exactly the
                                    caller's arguments;
  override(func, q, k, v, heads, ...)
                                    the transformer_options override: what qmm does not
                                    take goes to func;
  chain(previous)                   an override that falls back to another override (the
                                    one a model already had) instead of func;
  apply(model_options, enabled, mode)
                                    set / remove it in a MODEL's model_options;
  declines(), reset_declines()      {reason: count} of the calls qmm passed on.
qmm.Cancelled (qmm.cancel(), ComfyUI's interrupt through the node) is raised, never passed on.

Layouts as ComfyUI's own functions take them: without skip_reshape q is [B, S, heads·D] and k,
v [B, Skv, heads·D] ([B, Skv, Hkv·D] with enable_gqa=True); with it [B, H, S, D] and
[B, Hkv, Skv, D]. The output is [B, S, heads·D] unless skip_output_reshape ([B, heads, S, D]),
in q's dtype. A mask is broadcast as attention_pytorch does (2-D [S, Skv] → [1, 1, S, Skv],
3-D [B, S, Skv] → [B, 1, S, Skv], 4-D as is): bool (True = attend) or additive float.
kwargs: scale (None = D^-1/2), enable_gqa; attn_precision=torch.float32 (after ComfyUI's
get_attn_precision when ComfyUI is loaded) → qmm mode "f32"; low_precision_attention=False
(what ComfyUI's call sites pass where a low-precision attention such as SageAttention must not
run) turns mode "int8" into "best" for that call. mode None ("auto") is "int8" where an int8
engine of this CPU runs it (int8_attention_here(): AMX-INT8, AVX512-VNNI or AVX-VNNI), else "best" — measured
(bench/NOTES.md, "Attention"): the fastest mode, and the DiT block with it stays within 10 % of
the block with f32 SDPA against the fp32 block (tests/python/test_dit_attention.py). Everything else ComfyUI passes
(transformer_options, ...) is ignored, as ComfyUI's functions ignore it.

What qmm does not take — a tensor on another device, a dtype other than float32/bfloat16/
float16, a head dim above 256, a mask of another dtype or one that does not broadcast, heads
that do not match without enable_gqa, autograd, a library without qmm_attention, anything the
library refuses — goes to the fallback unchanged. Checked here is only what ComfyUI's signature
adds (heads, the layouts, enable_gqa); the rest is qmm.attention's refusal (its ValueError, or
the library's QmmError / ArgumentError naming the argument), whose message is the reason. Each
reason is logged once (INFO, logger
"qmm.comfyui"; DEBUG every time) and counted (declines(); the store, qmm._declines, is the
one the kitchen backend's declines share).

The default fallback is ComfyUI's optimized_attention unless that is qmm's own function (a
node may install attention(), or wrap_attn(attention), as optimized_attention): then ComfyUI's
CPU default attention_sub_quad (else attention_pytorch, attention_basic), never qmm itself.
ComfyUI's functions are called with _inside_attn_wrapper=True added (as wrap_attn calls the
function it decorates), so that they do not consult the override again; a fallback given to
make_attention gets exactly the caller's arguments.
"""
import logging
import operator
import sys
import weakref

import torch

import qmm
from qmm import _declines as _store

log = logging.getLogger("qmm.comfyui")

_MSG = "qmm attention passes a call on to %s: %s"
_SIG = ("q", "k", "v", "heads", "mask", "attn_precision", "skip_reshape", "skip_output_reshape")
SOURCE = "comfyui"          # this adapter's part of qmm._declines, the store the kitchen shares


class Declined(Exception):
    """qmm does not take this call; str() is the reason (one per kind of call, no sizes that
    change from call to call where avoidable)."""


def _decline(reason, fallback_name):
    _store.record(SOURCE, reason, "(other reasons)", log, _MSG, fallback_name, reason)


def declines():
    """{reason: count} of the calls passed on to the fallback since the last reset."""
    return _store.counts(SOURCE)


def reset_declines():
    _store.reset(SOURCE)


def _bind(args, kwargs):
    """ComfyUI's (q, k, v, heads, mask=None, attn_precision=None, skip_reshape=False,
    skip_output_reshape=False, **kwargs) bound as Python would: a dict of those eight, and the
    other kwargs."""
    if len(args) > len(_SIG):
        raise TypeError("attention() takes at most %d positional arguments (%d given)" % (
            len(_SIG), len(args)))
    b = dict(zip(_SIG, args))
    extra = {}
    for name, value in kwargs.items():
        if name in _SIG:
            if name in b:
                raise TypeError("attention() got multiple values for argument %r" % name)
            b[name] = value
        else:
            extra[name] = value
    for name in _SIG[:4]:
        if name not in b:
            raise TypeError("attention() missing required argument %r" % name)
    b.setdefault("mask", None)
    b.setdefault("attn_precision", None)
    b.setdefault("skip_reshape", False)
    b.setdefault("skip_output_reshape", False)
    return b, extra


def _attn_precision(attn_precision, dtype):
    """ComfyUI's get_attn_precision when ComfyUI is loaded (--dont-upcast-attention, the forced
    upcast of some devices), else attn_precision as given."""
    mod = sys.modules.get("comfy.ldm.modules.attention")
    f = getattr(mod, "get_attn_precision", None)
    if f is not None:
        try:
            return f(attn_precision, dtype)
        except Exception:   # noqa: BLE001 — ComfyUI's, not ours: keep the caller's value
            return attn_precision
    return attn_precision


_INT8_HERE = []


def int8_attention_here():
    """Whether an int8 engine of this CPU runs qmm.attention's mode int8 (amx_int8, avx512_vnni, avx_vnni), not its
    counted fallback to mode best; asked of the library once per process."""
    if not _INT8_HERE:
        try:
            q = torch.zeros(1, 1, 1, 64)
            p = qmm.attention_plan(q, q, q, mode="int8")
            _INT8_HERE.append(bool(p.engine) and not p.is_fallback)
        except Exception:   # noqa: BLE001 — a library without attention: no int8 here
            _INT8_HERE.append(False)
    return _INT8_HERE[0]


def _run(b, extra, mode=None):
    """qmm for one bound call, or Declined. Checked here: what ComfyUI's signature adds (heads,
    skip_reshape and its layouts, enable_gqa, the 2-D / 3-D mask); every other argument is
    qmm.attention's to check (its ValueError, or the library's refusal as QmmError, is the
    reason)."""
    q, k, v, heads = b["q"], b["k"], b["v"], b["heads"]
    mask = b["mask"]
    for name, t in (("q", q), ("k", k), ("v", v), ("mask", mask)):
        if not isinstance(t, torch.Tensor) and not (t is None and name == "mask"):
            raise Declined("%s is a %s, not a tensor" % (name, type(t).__name__))
    try:
        heads = operator.index(heads)
    except TypeError:
        heads = -1
    if heads < 1:
        raise Declined("heads=%r is not a positive int" % (b["heads"],))
    gqa = bool(extra.get("enable_gqa", False))
    if b["skip_reshape"]:
        if q.dim() != 4:
            raise Declined("skip_reshape with q of %d dims (4 expected)" % q.dim())
        B, H, S, D = q.shape
        if H != heads:
            raise Declined("skip_reshape: q has %d heads but heads=%d" % (H, heads))
        q4, k4, v4 = q, k, v
    else:
        if q.dim() != 3 or k.dim() != 3 or v.dim() != 3:
            raise Declined("q, k, v of %d, %d, %d dims without skip_reshape (3 expected)"
                           % (q.dim(), k.dim(), v.dim()))
        B, S, inner = q.shape
        if inner % heads:
            raise Declined("q's width is not a multiple of heads")
        D = inner // heads
        H = heads
        if gqa:
            if D == 0 or k.shape[-1] % D or v.shape[-1] % D:
                raise Declined("enable_gqa: k or v width is not a multiple of the head dim")
            hk, hv = k.shape[-1] // D, v.shape[-1] // D
        else:
            hk = hv = heads
            if k.shape[-1] != inner or v.shape[-1] != inner:
                raise Declined("k or v width differs from q's without enable_gqa")
        q4 = q.unflatten(-1, (H, D)).transpose(1, 2)
        k4 = k.unflatten(-1, (hk, D)).transpose(1, 2)
        v4 = v.unflatten(-1, (hv, D)).transpose(1, 2)
    if not gqa and k4.dim() == 4 and k4.shape[1] != H:
        raise Declined("k has %d heads, q %d, without enable_gqa" % (k4.shape[1], H))
    if mask is not None:
        if mask.dim() == 2:
            mask = mask.unsqueeze(0)
        if mask.dim() == 3:
            mask = mask.unsqueeze(1)
    prec = _attn_precision(b["attn_precision"], q.dtype)
    if mode is None:                                        # auto: int8 where it runs here
        mode = "f32" if prec == torch.float32 else "int8" if int8_attention_here() else "best"
    if mode == "int8" and (extra.get("low_precision_attention", True) is False or prec == torch.float32):
        mode = "f32" if prec == torch.float32 else "best"   # the call site asks for full precision
    if not qmm.has_attention():
        raise Declined("the loaded libqmm lacks qmm_attention (%s)" % qmm.library_path)
    if b["skip_output_reshape"]:
        out = torch.empty((B, H, S, D), dtype=q.dtype)
        view = out
    else:
        out = torch.empty((B, S, H * D), dtype=q.dtype)
        view = out.view(B, S, H, D).transpose(1, 2)
    try:
        qmm.attention(q4, k4, v4, mask=mask, scale=extra.get("scale", None), mode=mode, out=view)
    except qmm.Cancelled:                         # qmm.cancel(): the user asked to stop, no fallback
        raise
    except qmm.QmmError as e:                     # the library's (ArgumentError included)
        raise Declined("%s: %s" % (e.status_name, e.message)) from None
    except ValueError as e:                       # qmm.attention's own checks
        raise Declined(str(e)) from None
    return out


def _name(f):
    return getattr(f, "__qualname__", None) or getattr(f, "__name__", None) or repr(f)


_OWN = weakref.WeakSet()    # the functions make_attention made


def _is_own(f):
    """Whether f is a function make_attention made, or wraps one (__wrapped__, as wrap_attn and
    functools.wraps set it)."""
    for _ in range(32):
        if f is None:
            return False
        try:
            if f in _OWN:
                return True
        except TypeError:            # not hashable, not weak-referenceable: not ours
            pass
        f = getattr(f, "__wrapped__", None)
    return False


def _comfy_default():
    """What ComfyUI would have run: its optimized_attention when ComfyUI is loaded — unless
    that is qmm's own function, then ComfyUI's CPU default (attention_sub_quad, else
    attention_pytorch, attention_basic) — else None."""
    mod = sys.modules.get("comfy.ldm.modules.attention")
    if mod is None:
        return None
    for name in ("optimized_attention", "attention_sub_quad", "attention_pytorch",
                 "attention_basic"):
        f = getattr(mod, name, None)
        if callable(f) and not _is_own(f):
            return f
    return None


def sdpa_attention(q, k, v, heads, mask=None, attn_precision=None, skip_reshape=False,
                   skip_output_reshape=False, **kwargs):
    """torch's scaled_dot_product_attention in ComfyUI's signature and layouts: the fallback of
    attention() when ComfyUI is not loaded."""
    b, extra = _bind((q, k, v, heads), dict(mask=mask, attn_precision=attn_precision,
                                            skip_reshape=skip_reshape,
                                            skip_output_reshape=skip_output_reshape, **kwargs))
    gqa = bool(extra.get("enable_gqa", False))
    if skip_reshape:
        B, H, S, D = q.shape
    else:
        B, S, inner = q.shape
        H, D = heads, inner // heads
        q = q.unflatten(-1, (H, D)).transpose(1, 2)
        k = k.unflatten(-1, (k.shape[-1] // D, D)).transpose(1, 2)
        v = v.unflatten(-1, (v.shape[-1] // D, D)).transpose(1, 2)
    if mask is not None:
        if mask.dim() == 2:
            mask = mask.unsqueeze(0)
        if mask.dim() == 3:
            mask = mask.unsqueeze(1)
    sdpa = {}
    if "scale" in extra:
        sdpa["scale"] = extra["scale"]
    if gqa:
        sdpa["enable_gqa"] = True
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, **sdpa)
    if not skip_output_reshape:
        out = out.transpose(1, 2).reshape(B, -1, H * D)
    return out


def make_attention(fallback=None, mode=None):
    """A function of ComfyUI's attention signature that runs qmm and passes what qmm does not
    take to fallback, called with exactly the caller's arguments (None, or a function qmm made:
    ComfyUI's optimized_attention when ComfyUI is loaded and it is not qmm's own — else its
    attention_sub_quad — called as wrap_attn calls the function it decorates; sdpa_attention
    without ComfyUI). mode None: from attn_precision (float32 → "f32"), else "int8" where it
    runs on an int8 engine here (as "int8" below), else "best"; "best",
    "f32" or "int8" to fix it ("int8" gives way to "best" where the call says
    low_precision_attention=False, and to "f32" where attn_precision is float32)."""
    own = fallback is None or _is_own(fallback)

    def attention(*args, **kwargs):
        b, extra = _bind(args, kwargs)
        try:
            return _run(b, extra, mode)
        except Declined as e:
            f = (_comfy_default() or sdpa_attention) if own else fallback
            _decline(str(e), _name(f))
            if own and f is not sdpa_attention and "_inside_attn_wrapper" not in kwargs:
                # ComfyUI's decorated functions would consult the override (maybe us) again
                kwargs = dict(kwargs, _inside_attn_wrapper=True)
            return f(*args, **kwargs)
    _OWN.add(attention)
    attention.__name__ = attention.__qualname__ = "qmm_attention"
    attention.__doc__ = ("qmm attention in ComfyUI's signature (qmm.comfy.attention); falls back "
                         "to %s" % (_name(fallback) if fallback else "ComfyUI's optimized_attention"))
    return attention


attention = make_attention()
attention.__doc__ = ("attention(q, k, v, heads, mask=None, attn_precision=None, skip_reshape="
                     "False, skip_output_reshape=False, **kwargs): qmm attention in ComfyUI's "
                     "signature; what qmm does not take goes to ComfyUI's optimized_attention "
                     "(torch SDPA when ComfyUI is not loaded)")


def chain(previous=None, mode=None):
    """An optimized_attention_override for transformer_options: called by ComfyUI's wrap_attn as
    override(func, *args, **kwargs); runs qmm, and passes what qmm does not take to
    previous(func, *args, **kwargs) (an override the model already had) or, without one, to
    func(*args, **kwargs) — the function ComfyUI would have run, unless that is qmm's own (then
    the default of make_attention). mode as in make_attention."""
    def qmm_attention_override(func, *args, **kwargs):
        b, extra = _bind(args, kwargs)
        try:
            return _run(b, extra, mode)
        except Declined as e:
            if previous is not None:
                _decline(str(e), "the previous override %s" % _name(previous))
                return previous(func, *args, **kwargs)
            if _is_own(func):            # qmm's own function selected in ComfyUI: its default
                func = _comfy_default() or sdpa_attention
            _decline(str(e), _name(func))
            return func(*args, **kwargs)
    qmm_attention_override.qmm_previous = previous
    qmm_attention_override.qmm_mode = mode
    return qmm_attention_override


override = chain()
KEY = "optimized_attention_override"


def is_qmm(f):
    """Whether f is an override made by chain()."""
    return callable(f) and hasattr(f, "qmm_previous") and hasattr(f, "qmm_mode")


def apply(model_options, enabled=True, mode=None):
    """Set (enabled) or remove qmm's override in a MODEL's model_options (model.clone()'s, as a
    node does): model_options["transformer_options"]["optimized_attention_override"]. An
    override already there that is not qmm's stays the fallback; removing qmm's puts it back.
    Returns model_options."""
    to = model_options.setdefault("transformer_options", {})
    cur = to.get(KEY)
    prev = cur.qmm_previous if is_qmm(cur) else cur
    if enabled:
        to[KEY] = chain(prev, None if mode in (None, "auto") else mode)
    elif prev is not None:
        to[KEY] = prev
    else:
        to.pop(KEY, None)
    return model_options
