"""qmm.kitchen — qmm as a comfy-kitchen backend for CPU tensors.

    import qmm.kitchen
    qmm.kitchen.register()     # backend "qmm", first in the kitchen's priority list

After register(), the kitchen's INT8 functions on CPU tensors (comfy_kitchen.int8_linear, the
torch.ops.comfy_kitchen.* custom ops ComfyUI's INT8 layers call, ...) run on qmm's integer
matrix engines. Laid out as the kitchen lays out its own backends (comfy_kitchen/backends/<name>):
this module holds _build_constraints() and _register(); the operations live in linear.py,
quantize.py and dequantize.py, the borrowed weight handles in weights.py.

Everything qmm does not run is declined by the backend's constraints and goes to the next
backend (eager): the kitchen decides per call by validating FunctionConstraints (declarative
ParamConstraints for dtypes and devices, then one call rule per function, which runs the same
check as a direct call of the function), and a backend cannot hand a call on once it runs, so
every refusal happens there. A refusal is logged on "comfy_kitchen.dispatch" (declines()).
Any input that requires grad under grad mode, and any dual tensor of forward-mode AD
(torch.func.jvp, jacfwd, forward_ad.make_dual), is declined (qmm computes no derivatives; eager
keeps them).

qmm.configure(): the linear layers' plans are made per layer kind and kept while the options
stay as they were (qmm.generation()); after a configure() that changes one (max_isa,
disabled_engines, fallback, ...) each kind is planned again, so a kind no int8 engine runs any
more is declined to eager, never run W8A16 nor failed with QMM_ERR_NO_ENGINE /
QMM_ERR_FALLBACK_REFUSED. A call qmm accepted that it cannot run after all (configure() between
the kitchen's validation and its call, or the library failing at call time) is declined then
and run by the next backend (linear.execute, _declines.hand_on): no qmm error reaches a kitchen
caller of the linear functions.

Numerics: every linear call uses QMM_EPILOGUE_KITCHEN and the kitchen's input stage (SPEC §1a),
so outputs are those of the eager backend (bit-identical where SPEC §1a says so). Calls qmm would
run W8A16 on a float engine are declined.

W4A8 / W6A8 (AsymW4A8Int8Layout, w4a8_int8_linear: w4a8.py): the layout's codes, s_rel,
s_channel and codebook are borrowed (qmm_weight_borrow_w4a8) and decoded inside qmm's per-call
weight panels, bit for bit the kitchen's _dequant_int4_grouped_to_int8 (SPEC §11); a correction
(asymmetric W4A8) is declined.

Weights are borrowed (qmm_weight_borrow_int8): qmm reads the kitchen's int8 tensor, scales and
bias in place at every call. No packed copy exists, so nothing is repacked on a Parameter
re-wrap, and any write to the tensor (copy_, indexing, numpy, under inference_mode or not) is
seen by the next call.

Row ops (rowops.py, SPEC §13): apply_rope(1)(_), apply_rope_split_half(1)(_), rms_rope(1)(_),
rms_rope_split_half(1)(_) — one fused pass per tensor in qmm_rope (RMSNorm, then the rotation in
freqs' dtype): the rotation bit for bit eager's, the RMSNorm within a bound of torch's; rms_adaln
and rms_gated_residual in qmm_rms_mod (the same RMSNorm, then the modulation bit for bit).

INT8 attention (attention.py): register() also gives the kitchen's own ops
comfy_kitchen::int8_attention and int8_attention_masked (CUDA/HIP only in the kitchen) a CPU
kernel, qmm.attention(mode="int8"), and unregister() removes it; only where the installed
kitchen defines them, with or without an int8 engine here (without one qmm's counted fallback
to a float engine runs them); attention_status() says, per op, whether it is installed or why not.
These ops have no other CPU kernel to hand a call on to: their errors are the caller's.

Cancel: qmm.cancel() makes a running or waiting call raise qmm.Cancelled, which propagates to
the kitchen's caller (nothing falls back to eager: the user asked to stop; SPEC §12).

Threads: calls run on the process's qmm context with torch.get_num_threads() workers at call
time (unless qmm.configure(n_threads=...) fixed the count); register() makes no context, nor
does making a weight handle (qmm weights need none).
Where this CPU has no int8 engine, or the loaded library cannot borrow weights, register()
marks the backend unavailable in the kitchen with the reason (registry.mark_unavailable).
"""
import logging
import sys
import threading

import torch
from comfy_kitchen.constraints import FunctionConstraints, ParamConstraint
from comfy_kitchen.registry import registry

import qmm

from . import attention as _attn
from . import dequantize as _dq
from . import linear as _lin
from . import quantize as _qz
from . import rowops as _rows
from . import w4a8 as _w4
from . import weights
from ._common import FLOATS, Refused
from ._declines import decline, declines, reset_declines
from .dequantize import (dequantize_int8_convrot_weight, dequantize_int8_convrot_weight_dtype,
                         dequantize_int8_embedding, dequantize_int8_simple,
                         dequantize_int8_simple_dtype)
from .linear import int8_linear, int8_linear_modulated, int8_linear_rms_modulated
from .probe import probe
from .w4a8 import w4a8_int8_linear
from .rowops import (apply_rope, apply_rope1, apply_rope1_, apply_rope_, apply_rope_split_half,
                     apply_rope_split_half1, apply_rope_split_half1_, apply_rope_split_half_,
                     rms_rope, rms_rope1, rms_rope1_, rms_rope_, rms_rope_split_half,
                     rms_rope_split_half1, rms_rope_split_half1_, rms_rope_split_half_,
                     rms_adaln, rms_gated_residual)
from .quantize import (quantize_and_rotate_rowwise, quantize_int8_convrot_weight,
                       quantize_int8_rowwise, quantize_int8_tensorwise)

__all__ = ["register", "unregister", "is_registered", "unavailable_reason", "attention_status",
           "declines",
           "reset_declines", "probe", "weights", "Refused", "int8_linear",
           "int8_linear_modulated", "int8_linear_rms_modulated", "w4a8_int8_linear",
           "quantize_int8_rowwise",
           "quantize_int8_tensorwise", "quantize_and_rotate_rowwise",
           "quantize_int8_convrot_weight", "dequantize_int8_simple",
           "dequantize_int8_simple_dtype", "dequantize_int8_convrot_weight",
           "dequantize_int8_convrot_weight_dtype", "dequantize_int8_embedding"] + _rows.__all__

BACKEND = "qmm"
log = logging.getLogger("qmm.kitchen")



def _rule(module, func):
    def call_rule(kw):
        try:
            module.check(func, kw)
        except Refused as e:
            return decline(func, e.param, e.reason)
        from comfy_kitchen.constraints import ValidationResult
        return ValidationResult.ok()
    return call_rule


def _mod_rule(func):
    def call_rule(kw):
        try:
            _rows.check_mod(func, kw)
        except Refused as e:
            return decline(func, e.param, e.reason)
        from comfy_kitchen.constraints import ValidationResult
        return ValidationResult.ok()
    return call_rule


def _build_constraints():
    """{function: FunctionConstraints} of backend qmm (device cpu): dtypes declared per
    parameter, everything else in each function's call rule."""
    cpu = frozenset({"cpu"})
    fl = ParamConstraint(dtypes=FLOATS)
    i8 = ParamConstraint(dtypes=frozenset({torch.int8}))
    intp = ParamConstraint(dtypes=frozenset({int}))
    boolp = ParamConstraint(dtypes=frozenset({bool}))
    flv = ParamConstraint(dtypes=frozenset({float, int}))
    linear = {"x": fl, "weight": i8, "weight_scale": fl, "bias": fl, "out_dtype": fl,
              "convrot": boolp, "convrot_groupsize": intp}

    def fc(params, rule):
        return FunctionConstraints(params=params, default_devices=cpu, call_rules=(rule,))

    c = {
        "int8_linear": fc(linear | {"input_act": ParamConstraint(dtypes=frozenset({str})),
                                    "input_act_weight": fl, "input_act_eps": flv,
                                    "residual": fl, "residual_scale": fl},
                          _lin.rule("int8_linear")),
        "int8_linear_modulated": fc(linear | {"modulation_scale": fl},
                                    _lin.rule("int8_linear_modulated")),
        "int8_linear_rms_modulated": fc(linear | {"modulation_scale": fl, "norm_weight": fl,
                                                  "norm_eps": flv},
                                        _lin.rule("int8_linear_rms_modulated")),
    }
    if _w4.available() is None:
        s_rel_dt = frozenset(t for t in (getattr(torch, "float8_e4m3fn", None), torch.float32)
                             if t is not None)
        c["w4a8_int8_linear"] = fc(
            {"x": fl, "qdata": i8, "s_rel": ParamConstraint(dtypes=s_rel_dt),
             "s_channel": ParamConstraint(dtypes=frozenset({torch.float32})),
             "codebook": ParamConstraint(dtypes=frozenset({torch.float32})),
             "correction": fl, "bias": fl, "group_size": intp, "convrot_groupsize": intp,
             "out_dtype": fl, "input_act": ParamConstraint(dtypes=frozenset({str})),
             "input_act_weight": fl, "input_act_eps": flv, "residual": fl, "residual_scale": fl},
            _w4.rule())
    for f, extra in (("dequantize_int8_simple", {}),
                     ("dequantize_int8_simple_dtype", {"output_dtype_code": intp}),
                     ("dequantize_int8_convrot_weight", {"group_size": intp}),
                     ("dequantize_int8_convrot_weight_dtype", {"group_size": intp,
                                                              "output_dtype_code": intp}),
                     ("dequantize_int8_embedding", {
                         "indices": ParamConstraint(dtypes=frozenset({torch.int64,
                                                                      torch.int32})),
                         "group_size": intp, "output_dtype_code": intp})):
        c[f] = fc({"q": i8, "scale": fl} | extra, _rule(_dq, f))
    sr = ParamConstraint(dtypes=frozenset({int}))
    for f, params in (
            ("quantize_int8_rowwise", {"x": fl, "stochastic_rounding": sr}),
            ("quantize_int8_tensorwise", {"x": fl, "stochastic_rounding": sr,
                                          "scale": ParamConstraint(
                                              dtypes=FLOATS | {float, int, str})}),
            ("quantize_and_rotate_rowwise", {"x": fl, "h": fl, "H": fl,
                                             "group_size": intp, "stochastic_rounding": sr}),
            ("quantize_int8_convrot_weight", {"weight": fl, "group_size": intp,
                                              "stochastic_rounding": sr})):
        c[f] = fc(params, _rule(_qz, f))
    if _rows.available() is None:  # the RoPE row ops (rowops.py, SPEC §13): tensors by dtype, the rest in the rule
        for f in _rows.FUNCS:
            c[f] = fc({p: fl for p in _rows.params(f) if p not in ("epsilon", "rot_dim")}, _rule(_rows, f))
        for f, names in _rows.MOD_FUNCS.items():
            c[f] = fc({p: fl for p in names[:4] if p}, _mod_rule(f))
    return c


_reg_lock = threading.Lock()
_state = {"registered": False, "unavailable": None}


def unavailable_reason():
    """Why backend qmm cannot run here (no int8 engine), or None."""
    engines = qmm.int8_engines_available()
    if not engines:
        why = [n + ": " + e["why"] for n, e in qmm.info()["engines"].items()
               if e["int8"] and not e["available"]]
        return "no int8 engine on this CPU (%s)" % "; ".join(why)
    return None


def _current_priority():
    """The kitchen's priority list in force: the user's set_backend_priority() order, or the
    kitchen's default.

    The one place qmm reads a private attribute of the kitchen (registry._priority). What
    comfy-kitchen 0.2.40 offers publicly cannot do it: set_priority() / set_backend_priority()
    only replace the whole list, list_backends() gives names without their order, and
    use_backend() puts one backend first only inside a with-block, on one thread. A public
    getter (registry.get_priority(), or comfy_kitchen.get_backend_priority()) — or a
    set_priority() that places one backend and keeps the others' order, e.g.
    registry.prefer("qmm", first=True) — would remove this read. Without the attribute: the
    backends list_backends() names (their order unknown, so by name), eager last."""
    cur = getattr(registry, "_priority", None)
    if isinstance(cur, (list, tuple)):
        return list(cur)
    names = sorted(n for n in registry.list_backends() if n not in ("eager", BACKEND))
    return names + ["eager"]


# The kitchen's order when qmm.kitchen is imported, qmm taken out: its default (as the kitchen
# set it: hip first under ROCm), unless the user had set another by then.
KITCHEN_ORDER = tuple(b for b in _current_priority() if b != BACKEND)


def _priority(first, priority=None):
    """priority (the user's list, or the one in force) with qmm first (or last) and every other
    backend where it was."""
    others = [b for b in (priority if priority is not None else _current_priority()) if b != BACKEND]
    return [BACKEND] + others if first else others + [BACKEND]


def attention_status():
    """{op: "installed", "removed", or why not} for the kitchen's INT8 attention ops
    (comfy_kitchen::int8_attention, int8_attention_masked) on the CPU; {} before register()."""
    return _attn.status()


def _register(first=True, priority=None):
    att = _attn.install()
    if any(why != "installed" for why in att.values()):
        log.info("comfy-kitchen INT8 attention on the CPU: %s", att)
    why = unavailable_reason()
    if why:
        registry.mark_unavailable(BACKEND, why)
        registry.disable(BACKEND)
        _state["registered"], _state["unavailable"] = False, why
        log.info("comfy-kitchen backend qmm unavailable: %s", why)
        return []
    caps = _build_constraints()
    registry.register(BACKEND, sys.modules[__name__], caps)
    registry.enable(BACKEND)
    registry.set_priority(_priority(first, priority))
    _state["registered"], _state["unavailable"] = True, None
    return sorted(caps)


def register(first=True, priority=None):
    """Add backend "qmm" to the kitchen registry (device cpu) and put it first in the kitchen's
    priority list (first=False: last), so CPU calls try qmm before eager and every declined call
    still reaches eager; the other backends keep their order — priority (a list of backend
    names) if given, else the order in force (the user's set_backend_priority(), or the
    kitchen's default). Also installs the CPU kernels of the kitchen's INT8 attention ops
    (attention_status()), whether or not the backend is available. Makes no qmm context.
    Idempotent (also undoes unregister()). Returns the capability names; [] when the backend is
    unavailable here (the reason is in the kitchen's list_backends() and in the log)."""
    if priority is not None and (isinstance(priority, str) or not all(isinstance(b, str) for b in priority)):
        raise ValueError("register: priority=%r: a list of backend names" % (priority,))
    with _reg_lock:
        caps = _register(first, priority)
    if caps:
        log.info("comfy-kitchen backend qmm registered (%s; int8 engines here: %s)",
                 qmm.library_path, ", ".join(qmm.int8_engines_available()))
    return caps


def unregister():
    """Take qmm out of the kitchen's priority list and disable it (the registry has no
    removal); removes the INT8 attention CPU kernels; drops the borrowed weight handles."""
    with _reg_lock:
        _attn.remove()
        registry.set_priority([b for b in _current_priority() if b != BACKEND])
        registry.disable(BACKEND)
        _state["registered"] = False
    weights.clear()


def is_registered():
    return _state["registered"] and registry.is_available(BACKEND)
