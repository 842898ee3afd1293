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
  declines(), reset_declines()      {reason: count} of the calls qmm passed on;
  bind_layers(model), current_layer(), layer_request(layer)
                                    the newer ComfyUI's per-layer requests (below).

The newer ComfyUI (after 0.30; read in Comfy-Org/ComfyUI comfy/ldm/modules/attention.py at
05080f60 and comfy/ldm/minimax/model.py at 01a56b76, the containers alone at 82997188 / 2c64d4aa):
  Containers. A call site (CrossAttention, MiniMax H3's Attention, ...) may pass q, k, v each in
  an AttentionTensorContainer (.peek(); .take() hands the tensor over and empties it) and keep
  no reference itself. wrap_attn then calls override.container_function(*args, **kwargs) — no
  func, the containers as args[:3], _inside_attn_wrapper=True among the kwargs — where the
  override has that attribute, else takes the tensors and calls override(func, ...) as before.
  The override of chain() has one: it peeks, makes the checks of the plain path and
  qmm.attention_plan's (the library's: a plan reads no memory), empties the containers once the
  call is qmm's and before it allocates the output, and runs the kernel, so
  that the kernel's own arguments are the last references to q, k, v and they are freed as the
  kernel returns. Not before: qmm_attention reads q, k, v until it returns and writes into an
  output that must not overlap them (SPEC §10) — where ComfyUI's kitchen int8 frees them before
  the output exists, it has quantized them into copies first. Bit for bit the plain path's
  result. A declined call hands the containers on still full, so that a function with a
  container_function of its own frees them its way (only a refusal of the kernel itself, after
  the plan admitted the call, finds them empty: then the tensors go on); where the plain path
  would call func, this one calls ComfyUI's optimized_attention.
  Per-layer requests. A layer may keep a ComfyAttention as .comfy_attention (config: the
  "<prefix>comfy_attention.config" tensor of its checkpoint, JSON {"attention":
  "comfy_kitchen_int8", ...}; function: ComfyUI's kernel for it where the kitchen runs on
  ComfyUI's device, else None) and pass it as preferred_attention=; wrap_attn pops that keyword
  first and runs preferred_attention.function only where no override is set. qmm's override
  learns the layer from bind_layers' forward hooks (current_layer()): a request for
  comfy_kitchen_int8 runs qmm's mode "int8" (with int8's give-way rules below) unless the
  override's mode is fixed; a request qmm has no kernel for goes to the layer's function; a
  declined call goes to the layer's function where it has one (as wrap_attn without override).
  ComfyUI 0.30 has neither: no containers reach the override, no layer has a ComfyAttention.
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
import threading
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


def _run(b, extra, mode=None, release=None):
    """qmm for one bound call, or Declined. Checked here: what ComfyUI's signature adds (heads,
    skip_reshape and its layouts, enable_gqa, the 2-D / 3-D mask); every other argument is
    qmm.attention's to check (its ValueError, or the library's refusal as QmmError, is the
    reason). release(), when given, is called once the call passed every check — those made
    here and qmm.attention_plan's, the library's own — and before the output is allocated (the
    container protocol empties ComfyUI's containers then)."""
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
    scale = extra.get("scale", None)
    try:
        if release is not None:
            # the library's and qmm.attention's checks first (a plan reads no memory), so that
            # a call qmm declines leaves the caller's holders as they were; then they let go
            qmm.attention_plan(q4, k4, v4, mask=mask, scale=scale, mode=mode)
            release()
        if b["skip_output_reshape"]:
            out = torch.empty((B, H, S, D), dtype=q.dtype)
            view = out
        else:
            out = torch.empty((B, S, H * D), dtype=q.dtype)
            view = out.view(B, S, H, D).transpose(1, 2)
        qmm.attention(q4, k4, v4, mask=mask, scale=scale, mode=mode, out=view)
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


# ---------------------------------------------------------------- the newer ComfyUI's protocols
def _is_container(x):
    """Whether x is one of ComfyUI's AttentionTensorContainers (peek(), take())."""
    return not isinstance(x, torch.Tensor) and hasattr(x, "take") and hasattr(x, "peek")


def _taken(args):
    """args with ComfyUI's containers among the first three replaced by their tensors (taken:
    the containers are empty afterwards)."""
    return tuple(a.take() if i < 3 and _is_container(a) else a for i, a in enumerate(args))


_LAYERS = threading.local()     # .stack: the ComfyAttention of each layer being run, innermost last


def _enter_layer(module, args):
    st = _LAYERS.__dict__.setdefault("stack", [])
    st.append(getattr(module, "comfy_attention", None))


def _leave_layer(module, args, output):
    st = _LAYERS.__dict__.get("stack")
    if st:
        st.pop()


def current_layer():
    """The ComfyAttention of the layer whose forward runs now (bind_layers' hooks), else None."""
    st = _LAYERS.__dict__.get("stack")
    return st[-1] if st else None


def _is_comfy_attention(x):
    """Whether x is a ComfyAttention (comfy.ldm.modules.attention, the newer ComfyUI): the
    module a layer keeps as .comfy_attention, with .config and .function."""
    return isinstance(x, torch.nn.Module) and hasattr(x, "config") and hasattr(x, "function")


_BOUND = weakref.WeakKeyDictionary()   # model: its number of ComfyAttention layers


def bind_layers(model):
    """Hooks on every module of model (a torch module, or an object whose .model is one) that
    carries a ComfyAttention as .comfy_attention, so that qmm's override knows the layer it runs
    for (current_layer()): the newer ComfyUI passes the layer's ComfyAttention to its attention
    function as preferred_attention=, which wrap_attn removes before it calls an override. A
    forward pre-hook pushes it, a forward hook (always_call) pops it; each module is hooked once,
    each model walked once. Returns the number of such modules in model (0 on ComfyUI 0.30)."""
    root = getattr(model, "model", model) if not isinstance(model, torch.nn.Module) else model
    if not isinstance(root, torch.nn.Module):
        return 0
    if root in _BOUND:
        return _BOUND[root]
    n = 0
    for m in root.modules():
        if not _is_comfy_attention(getattr(m, "comfy_attention", None)):
            continue
        n += 1
        if _enter_layer in m._forward_pre_hooks.values():     # hooked (a copy of a hooked model)
            continue
        m.register_forward_pre_hook(_enter_layer)
        m.register_forward_hook(_leave_layer, always_call=True)
    _BOUND[root] = n
    return n


KITCHEN_INT8 = "comfy_kitchen_int8"     # the one method the newer ComfyUI's ComfyAttention reads


def layer_request(layer):
    """The attention method a layer's ComfyAttention asks for ("comfy_kitchen_int8"), else None.
    ComfyAttention._load_from_state_dict keeps a config ({"attention": method, ...} from the
    layer's "<prefix>comfy_attention.config" tensor) only for that method, and sets .function
    to ComfyUI's attention_comfy_kitchen_int8 only where the kitchen's kernel runs on ComfyUI's
    torch device (CUDA: never on a CPU)."""
    cfg = getattr(layer, "config", None)
    return cfg.get("attention") if isinstance(cfg, dict) else None


def _layer_choice(layer, mode):
    """(the mode for this call, a function to hand the call to instead): a request for
    comfy_kitchen_int8 is qmm's mode "int8" unless the override's mode is fixed (an override is
    the user's choice and beats a layer's, as in wrap_attn); a request qmm has no kernel for
    goes to the function ComfyUI loaded for it."""
    req = layer_request(layer)
    if req is None:
        return mode, None
    if req == KITCHEN_INT8:
        return (mode if mode is not None else "int8"), None
    fn = getattr(layer, "function", None)
    return mode, fn


def _fallback(reason, previous, func, layer, args, kwargs):
    """Where a call qmm declines goes: the previous override; else the layer's own function
    (what wrap_attn runs for a layer with one when no override is set); else func, the function
    ComfyUI would have run (None in the container protocol, which does not pass it: ComfyUI's
    optimized_attention then) — unless that is qmm's own (then make_attention's default).
    args keep ComfyUI's containers where they are still full; a function that cannot take them
    gets their tensors."""
    if previous is not None:
        if func is None:
            if hasattr(previous, "container_function") and any(map(_is_container, args[:3])):
                _decline(reason, "the previous override %s" % _name(previous))
                return previous.container_function(*args, **kwargs)
            args, func = _taken(args), _comfy_default() or sdpa_attention
        _decline(reason, "the previous override %s" % _name(previous))
        return previous(func, *args, **kwargs)
    fn = getattr(layer, "function", None)
    if fn is not None:
        _decline(reason, "the layer's %s" % _name(fn))
        return fn(*args, **kwargs)
    if func is None or _is_own(func):   # no func, or qmm's own function selected in ComfyUI
        func = _comfy_default() or sdpa_attention
    if func is sdpa_attention:
        args = _taken(args)
    _decline(reason, _name(func))
    return func(*args, **kwargs)


def chain(previous=None, mode=None):
    """An optimized_attention_override for transformer_options: called by ComfyUI's wrap_attn as
    override(func, *args, **kwargs); runs qmm, and passes what qmm does not take to
    previous(func, *args, **kwargs) (an override the model already had) or, without one, to
    func(*args, **kwargs) — the function ComfyUI would have run, unless that is qmm's own (then
    the default of make_attention). mode as in make_attention.

    The newer ComfyUI (module doc): wrap_attn calls override.container_function(*args, **kwargs)
    instead where q, k, v come in AttentionTensorContainers; that one takes the tensors out of
    the containers once the call is qmm's (before the output is allocated), so that the kernel's
    arguments are the last references (module doc, "Containers"). Both honour the request of
    the layer being run (current_layer(), bind_layers): comfy_kitchen_int8 runs mode "int8"."""
    def qmm_attention_override(func, *args, **kwargs):
        layer = current_layer()
        call_mode, handoff = _layer_choice(layer, mode)
        if handoff is not None:
            return handoff(*args, **kwargs)
        b, extra = _bind(args, kwargs)
        try:
            return _run(b, extra, call_mode)
        except Declined as e:
            return _fallback(str(e), previous, func, layer, args, kwargs)

    def container_function(*args, **kwargs):
        layer = current_layer()
        call_mode, handoff = _layer_choice(layer, mode)
        if handoff is not None:         # containers, as wrap_attn hands them to a layer's function
            return handoff(*args, **kwargs)
        conts = args[:3]
        b, extra = _bind(tuple(c.peek() for c in conts) + tuple(args[3:]), kwargs)
        taken = []

        def release():
            for c in conts:
                c.take()
            taken.append(True)
        try:
            return _run(b, extra, call_mode, release)
        except Declined as e:
            if taken:                   # the containers are empty: hand on the tensors
                args = (b["q"], b["k"], b["v"]) + tuple(args[3:])
            del b
            return _fallback(str(e), previous, None, layer, args, kwargs)

    container_function.__name__ = container_function.__qualname__ = "qmm_attention_containers"
    qmm_attention_override.container_function = container_function
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
