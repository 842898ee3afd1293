"""qmm._attention — qmm_attention (qmm.h, SPEC §10) on torch CPU tensors: what qmm.attention and
qmm.attention_plan run. Imported at the first such call, so that `import qmm` needs no torch.

(The module is not called qmm.attention: importing a submodule of that name would replace the
function qmm.attention on the package.)

The contract. Checked here, before the library is called (a ValueError naming the argument): what
the C call cannot see or represent — the types, devices, layouts and torch dtypes of the tensors,
autograd, the shapes of q, k, v, out and mask against each other (qmm_attention_args has one B,
one D, one kv dtype and no shapes of out or mask), out's last stride, an inference out outside
inference mode, the names of mode, engine and out_dtype, and scale > 0 (0 is C's "D^-1/2").
Both ways of calling qmm.attention (with and without out) and qmm.attention_plan judge their
arguments by this one check (prepare), before anything is converted. Checked by the library
(qmm_attention_args, SPEC §10): the sizes (>= 1, D <= 256), H a multiple of Hkv, a finite scale,
the strides, out's elements and its overlap with the inputs; its refusal
(QMM_ERR_INVALID_ARGUMENT, or QMM_ERR_UNSUPPORTED: D > 256, extents past int64, a named engine
that refuses) raises qmm.ArgumentError, a QmmError that is also a ValueError, whose message names
the argument.
  q [B, H, S, D], k and v [B, Hkv, Skv, D] (H a multiple of Hkv), 1 <= D <= 256, CPU tensors of
  float32, bfloat16 or float16 (k and v of one dtype; q's may differ). Zero sizes are answered
  as torch's scaled_dot_product_attention answers them, without running the library: B, H or
  S = 0 an empty out, Skv = 0 (nothing to attend to) an out of zeros; attention_plan gives a Plan
  with no engine and status QMM_OK for them (the other arguments are still checked by the
  library's qmm_attention_plan, with each zero size replaced by one it takes). Any strides: they
  are passed to the library as they are (a stride of 0, as expand makes, included); a tensor whose
  last dimension is not contiguous (stride != 1, with D > 1) is copied into a contiguous one
  first — nothing else is ever copied.
  out: a tensor [B, H, S, D] to write (any strides with the last one 1 and no two elements
  sharing memory, e.g. y.view(B, S, H, D).transpose(1, 2) of a [B, S, H·D] tensor y), or
  None for a new contiguous [B, H, S, D] tensor of out_dtype (q's dtype unless given). The
  library checks out's strides and overlaps when it runs the call; a plan reads no memory, so for
  attention_plan they are checked here.
  mask: None, a bool tensor (True = attend) or an additive float tensor (float32, bfloat16,
  float16) broadcastable to [B, H, S, Skv] as torch's scaled_dot_product_attention broadcasts
  attn_mask; broadcasting is passed as strides of 0, never materialized. A query whose every
  key is masked gets 0 (torch's SDPA gives NaN there).
  scale: None (D^-1/2) or a finite real number > 0 in float32 (not a bool, not a string; one
  that does not fit a float, e.g. 10**400, or rounds to 0 in float32 is refused naming scale).
  autograd: qmm computes no derivatives (qmm._autograd). Under grad mode q, k, v or a float
  mask that requires grad is refused, and so is an out that requires grad; a dual tensor of
  forward-mode AD (torch.func.jvp, jacfwd, forward_ad.make_dual) among q, k, v, mask and out is
  refused in any mode (it requires no grad, and a result without its tangent would read as a
  zero derivative; torch's own SDPA raises NotImplementedError there). out is written in place
  and its version counter is bumped as an in-place torch operation bumps it (a tensor autograd
  saved and then overwritten through out= fails at backward, as torch's own check does); an
  inference tensor (made under inference_mode, it has no version counter) is refused as out
  outside inference_mode, with torch's words for every in-place and out= operation. Under
  torch.no_grad or inference_mode nothing else is refused.
  mode: None or "best" (bf16 operands, f32 accumulation, where the CPU has the instructions;
  else f32), "f32" (f32 operands only), "int8" (comfy-kitchen's int8 recipe: rotated int8 q and
  k, u8 P, int8 V, on an int8 engine; without one a counted fallback to "best", refused in
  strict mode).
  The call without out runs as the torch custom op qmm::attention (end of this file): what
  torch.compile traces (fullgraph=True included); with out it is a plain call.
  engine: None or "auto" (dispatch chooses), or an engine name ("ref" for tests).
Other library failures raise qmm.QmmError. The call holds qmm's context lock; ctypes releases the
GIL during it.
"""
import ctypes
import numbers

import torch

from . import _autograd as _ad
from . import _lib as L

_TORCH_DTYPES = {torch.float32: L.F32, torch.bfloat16: L.BF16, torch.float16: L.F16}
_NAMED_DTYPES = {"f32": torch.float32, "float32": torch.float32, "bf16": torch.bfloat16,
                 "bfloat16": torch.bfloat16, "f16": torch.float16, "float16": torch.float16}
MODES = {None: L.ATTN_BEST, "best": L.ATTN_BEST, "f32": L.ATTN_F32, "int8": L.ATTN_INT8}
MAX_D = L.ATTN_MAX_D
F32_ZERO = 2.0 ** -150       # the largest double that rounds to 0 in float32 (to nearest even)
# torch's refusal of every in-place and out= write into an inference tensor outside
# inference_mode (c10's "Inplace update to inference tensor outside InferenceMode"), verbatim
INFERENCE_OUT = ("Inplace update to inference tensor outside InferenceMode is not allowed.You can "
                 "make a clone to get a normal tensor before doing inplace update.See "
                 "https://github.com/pytorch/rfcs/pull/17 for more details.")


def _tensor(name, t, fn):
    if not isinstance(t, torch.Tensor):
        raise ValueError("%s: %s is %s, not a torch tensor" % (fn, name, type(t).__name__))
    if t.device.type != "cpu":
        raise ValueError("%s: %s is on %s (qmm runs CPU tensors)" % (fn, name, t.device))
    if t.layout != torch.strided:
        raise ValueError("%s: %s has layout %s (strided tensors only)" % (fn, name, t.layout))
    if t.dtype not in _TORCH_DTYPES:
        raise ValueError("%s: %s has dtype %s (float32, bfloat16 or float16)" % (fn, name,
                                                                                  t.dtype))
    return t


def _last_contiguous(t):
    return t if t.shape[-1] <= 1 or t.stride(-1) == 1 else t.contiguous()


def _out_dtype(out_dtype, q, fn):
    if out_dtype is None:
        return q.dtype
    if isinstance(out_dtype, str):
        if out_dtype not in _NAMED_DTYPES:
            raise ValueError("%s: out_dtype=%r (float32, bfloat16 or float16)" % (fn, out_dtype))
        return _NAMED_DTYPES[out_dtype]
    if out_dtype not in _TORCH_DTYPES:
        raise ValueError("%s: out_dtype=%r (float32, bfloat16 or float16)" % (fn, out_dtype))
    return out_dtype


def _mode(mode, fn):
    if isinstance(mode, str):
        mode = mode.lower()
    if mode in MODES:
        return MODES[mode]
    raise ValueError("%s: mode=%r (None/'best', 'f32' or 'int8')" % (fn, mode))


def _engine(engine, fn):
    if engine is None:
        return L.ENGINE_AUTO
    if isinstance(engine, int) and not isinstance(engine, bool):
        return engine
    if isinstance(engine, str):
        e = L.qmm_engine_from_name(engine.encode())
        if e != L.ENGINE_UNKNOWN:
            return e
    names = ", ".join(["auto"] + [e["name"] for e in L.ENGINES])
    raise ValueError("%s: engine=%r is no engine (%s)" % (fn, engine, names))


def _scale(scale, fn):
    """scale as the float C gets: 0.0 for None (C's D^-1/2); a real number that does not fit a
    float, or is not > 0 in float32, is refused here (C would read 0 as D^-1/2); C refuses a
    non-finite one. Plain Python (no ctypes), so that torch.compile traces it."""
    if scale is None:
        return 0.0
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise ValueError("%s: scale=%r is not a real number (a float > 0, or None for D^-1/2)"
                         % (fn, scale))
    try:
        s = float(scale)
    except (TypeError, ValueError, OverflowError):
        text = repr(scale)
        raise ValueError("%s: scale=%s does not fit a float (a finite number > 0 in float32, "
                         "or None for D^-1/2)" % (fn, text if len(text) <= 40 else
                                                 text[:20] + "..." + text[-8:])) from None
    if s <= F32_ZERO:
        raise ValueError("%s: scale=%r (a finite number > 0 in float32, or None for D^-1/2)"
                         % (fn, scale))
    return s


def _overlaps_itself(t):
    """Whether two elements of t share memory (expand, as_strided...)."""
    dims = sorted((t.stride(i), t.shape[i]) for i in range(t.dim()) if t.shape[i] > 1)
    reach = 0            # the furthest element offset reached by the smaller dims
    for stride, size in dims:
        if stride <= reach:
            return True
        reach += (size - 1) * stride
    return False


def _span(t):
    """[first byte, one past the last byte] of t's storage that t can touch."""
    if t.numel() == 0:
        return (0, 0)
    start = t.data_ptr()
    last = sum((s - 1) * st for s, st in zip(t.shape, t.stride()))
    return (start, start + (last + 1) * t.element_size())


def _disjoint(a, b):
    (a0, a1), (b0, b1) = _span(a), _span(b)
    return a1 <= a0 or b1 <= b0 or a1 <= b0 or b1 <= a0


class _Call:
    """The checked arguments of one call: .args (L.AttentionArgs), .out, and the tensors the
    pointers in .args point into (kept alive as long as this object)."""


def prepare(q, k, v, mask=None, scale=None, mode=None, out_dtype=None, engine=None, out=None,
            fn="qmm.attention", allocate=True):
    _tensor("q", q, fn)
    _tensor("k", k, fn)
    _tensor("v", v, fn)
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            raise ValueError("%s: %s has shape %s; q is [B, H, S, D], k and v [B, Hkv, Skv, D]"
                             % (fn, name, list(t.shape)))
    B, H, S, D = q.shape
    Bk, Hkv, Skv, Dk = k.shape
    if k.dtype != v.dtype:
        raise ValueError("%s: k is %s but v is %s (k and v share one dtype)" % (fn, k.dtype,
                                                                                v.dtype))
    if Bk != B:
        raise ValueError("%s: k has batch %d but q has %d (k %s, q %s)" % (
            fn, Bk, B, list(k.shape), list(q.shape)))
    if Dk != D:
        raise ValueError("%s: k has head dim %d but q has %d (k %s, q %s)" % (
            fn, Dk, D, list(k.shape), list(q.shape)))
    if tuple(v.shape) != tuple(k.shape):
        raise ValueError("%s: v has shape %s but k has %s (v is [B, Hkv, Skv, D] as k)" % (
            fn, list(v.shape), list(k.shape)))
    named = (("q", q), ("k", k), ("v", v), ("mask", mask), ("out", out))
    if torch.is_grad_enabled():
        for name, t in named:
            if isinstance(t, torch.Tensor) and t.requires_grad:
                raise ValueError("%s: %s requires grad under grad mode (qmm has no backward: "
                                 "run it under torch.no_grad() or inference_mode(), or use "
                                 "torch's scaled_dot_product_attention)" % (fn, name))
    dual = _ad.first_dual(named)
    if dual:
        raise ValueError("%s: %s %s (torch's scaled_dot_product_attention has none either: "
                         "it raises NotImplementedError)" % (fn, dual, _ad.DUAL_WHY))
    c = _Call()
    c.mode = _mode(mode, fn)
    c.engine = _engine(engine, fn)
    c.scale = _scale(scale, fn)
    if out is not None:
        _tensor("out", out, fn)
        if out.is_inference() and not torch.is_inference_mode_enabled():
            raise ValueError("%s: out is an inference tensor outside inference_mode: %s"
                             % (fn, INFERENCE_OUT))
        if tuple(out.shape) != (B, H, S, D):
            raise ValueError("%s: out has shape %s, needs [B, H, S, D] = %s" % (
                fn, list(out.shape), [B, H, S, D]))
        if out_dtype is not None and _out_dtype(out_dtype, q, fn) != out.dtype:
            raise ValueError("%s: out is %s but out_dtype=%r" % (fn, out.dtype, out_dtype))
        if D > 1 and out.stride(-1) != 1:
            raise ValueError("%s: out's last dimension is not contiguous (strides %s)" % (
                fn, list(out.stride())))
        if not allocate:                # a plan: C reads no memory, so checks no overlap
            if _overlaps_itself(out):
                raise ValueError("%s: out has elements that share memory (strides %s)" % (
                    fn, list(out.stride())))
            for name, t in (("q", q), ("k", k), ("v", v), ("mask", mask)):
                if isinstance(t, torch.Tensor) and not _disjoint(out, t):
                    raise ValueError("%s: out overlaps %s in memory" % (fn, name))
    elif allocate:
        out = torch.empty((B, H, S, D), dtype=_out_dtype(out_dtype, q, fn))
    c.out = out
    c.out_dtype = out.dtype if out is not None else _out_dtype(out_dtype, q, fn)
    m = None
    if mask is not None:
        if not isinstance(mask, torch.Tensor):
            raise ValueError("%s: mask is %s, not a torch tensor" % (fn, type(mask).__name__))
        if mask.device.type != "cpu":
            raise ValueError("%s: mask is on %s (qmm runs CPU tensors)" % (fn, mask.device))
        if mask.layout != torch.strided:
            raise ValueError("%s: mask has layout %s (strided tensors only)" % (fn, mask.layout))
        if mask.dtype != torch.bool and mask.dtype not in _TORCH_DTYPES:
            raise ValueError("%s: mask has dtype %s (bool: True = attend, or an additive "
                             "float32, bfloat16 or float16)" % (fn, mask.dtype))
        if mask.dim() > 4 or mask.dim() < 1:
            raise ValueError("%s: mask has shape %s, which does not broadcast to [B, H, S, Skv] "
                             "= %s" % (fn, list(mask.shape), [B, H, S, Skv]))
        try:
            m = mask.expand(B, H, S, Skv)
        except RuntimeError:
            raise ValueError("%s: mask has shape %s, which does not broadcast to [B, H, S, Skv] "
                             "= %s" % (fn, list(mask.shape), [B, H, S, Skv])) from None
    c.B, c.H, c.Hkv, c.S, c.Skv, c.D = B, H, Hkv, S, Skv, D
    c.empty = B == 0 or H == 0 or S == 0 or Skv == 0      # answered here, not by the library
    if c.empty:
        c.q, c.k, c.v, c.mask, c.args = q, k, v, m, None
        _check_empty(c, fn)
        return c
    c.q, c.k, c.v, c.mask = _last_contiguous(q), _last_contiguous(k), _last_contiguous(v), m
    c.args = _args(c)
    return c


def _check_empty(c, fn):
    """A call of zero size is answered here, but its other arguments are the library's to judge:
    qmm_attention_plan on the same arguments with each zero size replaced by one it takes (B, S,
    Skv: 1; H: Hkv; Hkv stays 0 where H > 0, which the library refuses). Nothing is checked
    when the loaded library lacks attention (the call then raises that)."""
    if L.qmm_attention_plan is None:
        return
    from . import context, lock
    z = _Call()
    z.__dict__.update(c.__dict__)
    z.B, z.S, z.Skv = max(c.B, 1), max(c.S, 1), max(c.Skv, 1)
    z.Hkv = c.Hkv if c.Hkv or c.H else 1
    z.H = c.H or z.Hkv
    z.out = None                         # the plan's contiguous layout
    a = _args(z)
    a.q = a.k = a.v = None               # a plan reads no memory
    a.mask = 1 if c.mask is not None else None
    p = L.PlanInfo()
    with lock():
        st = L.qmm_attention_plan(context(torch.get_num_threads()).ptr, ctypes.byref(a),
                                  ctypes.byref(p))
    if st != L.OK:
        _fail(st, fn)


def _fail(st, call):
    """The library's refusal as an exception: qmm.ArgumentError (a ValueError) for
    QMM_ERR_INVALID_ARGUMENT and QMM_ERR_UNSUPPORTED (the message names the argument), else
    qmm.QmmError."""
    from . import _check, _check_arguments
    (_check_arguments if st in (L.ERR_INVALID_ARGUMENT, L.ERR_UNSUPPORTED) else _check)(st, call)


def _written(out):
    """Bump out's version counter, as an in-place torch operation does (inference tensors
    have none)."""
    if not out.is_inference():
        torch.autograd.graph.increment_version(out)


def _args(c):
    a = L.qmm_attention_args_default() if L.qmm_attention_args_default else L.AttentionArgs()
    a.B, a.H, a.Hkv, a.S, a.Skv, a.D = c.B, c.H, c.Hkv, c.S, c.Skv, c.D
    a.q, a.q_dtype = c.q.data_ptr(), _TORCH_DTYPES[c.q.dtype]
    a.q_stride[:] = c.q.stride()[:3]
    a.k, a.v, a.kv_dtype = c.k.data_ptr(), c.v.data_ptr(), _TORCH_DTYPES[c.k.dtype]
    a.k_stride[:] = c.k.stride()[:3]
    a.v_stride[:] = c.v.stride()[:3]
    a.out_dtype = _TORCH_DTYPES[c.out_dtype]
    if c.out is not None:
        a.out = c.out.data_ptr()
        a.out_stride[:] = c.out.stride()[:3]
    else:                                   # a plan: the contiguous [B, H, S, D] layout
        a.out = None
        a.out_stride[:] = (c.H * c.S * c.D, c.S * c.D, c.D)
    a.scale = c.scale
    if c.mask is not None:
        a.mask = c.mask.data_ptr()
        a.mask_dtype = L.U8 if c.mask.dtype == torch.bool else _TORCH_DTYPES[c.mask.dtype]
        a.mask_stride[:] = c.mask.stride()
    else:
        a.mask = None
        a.mask_dtype = L.U8
        a.mask_stride[:] = (0, 0, 0, 0)
    a.mode = c.mode
    a.engine = c.engine
    return a


def _missing(call):
    from . import QmmError
    return QmmError(L.ERR_UNSUPPORTED, "the loaded library %s lacks %s (older than this package)"
                    % (L.PATH, call), call)


def attention(q, k, v, mask=None, scale=None, mode=None, out_dtype=None, engine=None, out=None):
    """qmm.attention: without out, the custom op qmm::attention (so torch.compile, fullgraph
    included, keeps the call in its graph); with out, the call itself. Both judge the arguments
    by prepare: the op's kernel runs it on the very mode, engine and out_dtype given (None
    spelled "best" / "auto"), and scale is judged by _scale before it becomes the op's float."""
    if out is None:
        if isinstance(out_dtype, str) and out_dtype in _NAMED_DTYPES:
            out_dtype = _NAMED_DTYPES[out_dtype]
        if _op_types(q, k, v, mask, scale, mode, out_dtype, engine):
            return torch.ops.qmm.attention(
                q, k, v, mask, None if scale is None else _scale(scale, "qmm.attention"),
                "best" if mode is None else mode, out_dtype, "auto" if engine is None else engine)
    return _run(q, k, v, mask, scale, mode, out_dtype, engine, out)


def _op_types(q, k, v, mask, scale, mode, out_dtype, engine):
    """Whether the arguments have the custom op's types, tensors on the CPU, none requiring grad
    under grad mode and none a dual tensor (else the plain call names the bad one: inside the op
    grad mode is off and functorch's wrappers are gone)."""
    ts = (q, k, v) if mask is None else (q, k, v, mask)
    if torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in ts):
        return False
    if _ad.forward_level() >= 0 and _ad.first_dual(zip(("q", "k", "v", "mask"), ts)):
        return False
    return (all(isinstance(t, torch.Tensor) and t.device.type == "cpu" for t in (q, k, v)) and
            (mask is None or isinstance(mask, torch.Tensor) and mask.device.type == "cpu") and
            (scale is None or isinstance(scale, numbers.Real) and not isinstance(scale, bool)) and
            (mode is None or isinstance(mode, str)) and (engine is None or isinstance(engine, str)) and
            (out_dtype is None or isinstance(out_dtype, torch.dtype)))


def _run(q, k, v, mask=None, scale=None, mode=None, out_dtype=None, engine=None, out=None):
    from . import _process_call
    c = prepare(q, k, v, mask, scale, mode, out_dtype, engine, out)
    if L.qmm_attention is None:
        raise _missing("qmm_attention")
    if c.empty:
        if c.out.numel():                  # Skv = 0: every row attends to nothing, as torch
            c.out.zero_()                  # (zero_ bumps the version itself)
        return c.out
    try:                                   # cancel() makes it raise Cancelled (out undefined)
        st = _process_call(L.qmm_attention, torch.get_num_threads(), "qmm_attention",
                           ctypes.byref(c.args))
    finally:
        _written(c.out)
    if st != L.OK:
        _fail(st, "qmm_attention")
    return c.out


def attention_plan(q, k, v, mask=None, scale=None, mode=None, out_dtype=None, engine=None,
                   out=None):
    from . import Plan, context, lock
    c = prepare(q, k, v, mask, scale, mode, out_dtype, engine, out,
                fn="qmm.attention_plan", allocate=False)
    if L.qmm_attention_plan is None:
        raise _missing("qmm_attention_plan")
    p = L.PlanInfo()
    if c.empty:
        return Plan(_empty_plan(p, c))
    with lock():
        st = L.qmm_attention_plan(context(torch.get_num_threads()).ptr, ctypes.byref(c.args),
                                  ctypes.byref(p))
    if st != L.OK:
        _fail(st, "qmm_attention_plan")
    return Plan(p)


def _empty_plan(p, c):
    """p filled for a call of zero size: no engine, status QMM_OK, every engine's reason saying
    that nothing runs."""
    what = ("an empty call (B=%d, H=%d, S=%d): nothing to compute" % (c.B, c.H, c.S)
            if c.B == 0 or c.H == 0 or c.S == 0 else
            "Skv=0: nothing to attend to, out is zeros")
    p.engine, p.is_fallback, p.status = L.ENGINE_AUTO, 0, L.OK
    why = ("not called: " + what).encode()[:L.REASON_MAX - 1]
    for e in L.ENGINES:
        p.admitted[e["id"]] = 0
        p.reason[e["id"]].value = why
    p.weight = ("attention " + what).encode()[:L.REASON_MAX - 1]
    return p


# ---------------------------------------------------------------- the custom op
# qmm::attention(q, k, v, mask, scale, mode, out_dtype, engine) -> out: _run without out (a new
# [B, H, S, D] tensor of out_dtype, q's dtype when None); its fake gives the shape and dtype
# from q alone, so torch.compile traces through it. Arguments of other types than the schema's
# take the plain path (attention above), where _run names them in its ValueError.
@torch.library.custom_op("qmm::attention", mutates_args=())
def _attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
                  scale: float | None, mode: str, out_dtype: torch.dtype | None,
                  engine: str) -> torch.Tensor:
    return _run(q, k, v, mask, scale, mode, out_dtype, None if engine == "auto" else engine)


@_attention_op.register_fake
def _attention_fake(q, k, v, mask, scale, mode, out_dtype, engine):
    return q.new_empty(q.shape, dtype=out_dtype if out_dtype is not None else q.dtype)
