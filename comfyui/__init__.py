"""qmm for ComfyUI — a custom node folder (copy or link it into ComfyUI/custom_nodes/).

On import it registers qmm as a comfy-kitchen backend (qmm.kitchen.register()), so every INT8
layer (int8_tensorwise, with or without ConvRot) that ComfyUI runs on CPU tensors goes to
qmm's integer matrix engines, and logs once which engines this CPU has. Calls qmm declines
go to the kitchen's eager backend; each reason is logged once (logger comfy_kitchen.dispatch).
Set QMM_KITCHEN=0 to load the node without registering the backend.

Attention (ComfyUI 0.3.60 and later, 0.29 and 0.30 included): qmm's attention
(qmm.comfy.attention) is registered as ComfyUI attention function "qmm"
(register_attention_function) and, by default, set as the attention override
(transformer_options["optimized_attention_override"], which ComfyUI's wrap_attn consults at every
attention call) of every diffusion model ComfyUI loads onto the CPU. Calls qmm does not take
(another device, dtype, mask kind, head dim above 256, ...) go to the function ComfyUI would have
run (on a CPU: attention_sub_quad); each reason is logged once (logger qmm.comfyui).
QMM_ATTENTION=0 turns that default off; QMM_ATTENTION=f32 makes it run f32 operands only,
QMM_ATTENTION=best bf16 operands with f32 accumulation (where the CPU has them), QMM_ATTENTION=int8
comfy-kitchen's int8 recipe where the call allows low precision. The default "auto" is int8 on
a CPU whose int8 engine runs it (AMX-INT8, AVX512-VNNI or AVX-VNNI: the fastest mode, and the block's output stays
within the fidelity rule; README), else best; f32 where the model asks for attn_precision
float32.
Node "qmm attention": MODEL in, MODEL out, applies (enabled) or removes (disabled) qmm attention
on that model, whatever its device or the default.
An older ComfyUI (no wrap_attn) never consults the override: the node then says so and returns
the model unchanged. The newer ComfyUI (after 0.30): q, k, v may come in AttentionTensorContainers,
which the override's container_function takes (qmm.comfy.attention, "Containers"); a layer whose
ComfyAttention asks for comfy_kitchen_int8 runs qmm's mode int8 (unless QMM_ATTENTION or the
node fixes the mode): the node hooks those layers (qmm.comfy.attention.bind_layers) where it sets
the override, since wrap_attn does not pass the layer's request to an override.

Cancel: ComfyUI's interrupt (comfy.model_management.interrupt_current_processing(True), what the
Cancel button and /interrupt call) also calls qmm.cancel(), so the qmm call running stops within
one key block or panel (SPEC §12) instead of running to its end; the cancelled call raises a
qmm.Cancelled that is also ComfyUI's InterruptProcessingException, so the prompt ends as
interrupted, not as an error (link_interrupt).

Node "qmm plan": for the loaded model's INT8 layers, the engine qmm picks for a given number
of tokens (and every engine's reason when none admits), qmm's counters and the declined calls.

The package `qmm` comes from the Python environment (pip install <qmm repository>), or, when
this folder is a link into the repository, from the repository's python/ folder.
"""
import logging
import os
import sys

log = logging.getLogger("qmm.comfyui")

try:
    import qmm  # noqa: F401
except ImportError:
    _repo_python = os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(__file__))),
                                "python")
    sys.path.insert(0, _repo_python)
    import qmm  # noqa: F401

import qmm.kitchen as _kitchen

_registered = False
_attention = {"registered": False, "default": None, "why": ""}


def _comfy_attention_module():
    """ComfyUI's comfy.ldm.modules.attention if this process runs ComfyUI, else None."""
    mod = sys.modules.get("comfy.ldm.modules.attention")
    if mod is None and "comfy" in sys.modules:
        try:
            import comfy.ldm.modules.attention as mod
        except Exception as e:   # noqa: BLE001 — ComfyUI's import, not ours
            log.debug("qmm: comfy.ldm.modules.attention does not import: %s", e)
            return None
    return mod


def attention_mode_from_env():
    """QMM_ATTENTION: "0" → None (no default), "f32" / "best" / "int8" → that mode, else "auto"."""
    v = os.environ.get("QMM_ATTENTION", "1").strip().lower()
    if v in ("0", "off", "false", "no"):
        return None
    return v if v in ("f32", "best", "int8") else "auto"


def _is_cpu_diffusion_model(patcher):
    try:
        import torch
        if torch.device(patcher.load_device).type != "cpu":
            return False
    except Exception:   # noqa: BLE001
        return False
    try:
        from comfy.model_base import BaseModel
    except Exception:   # noqa: BLE001 — no ComfyUI model classes: any CPU model
        return True
    return isinstance(getattr(patcher, "model", None), BaseModel)


def install_attention_default(mode, model_patcher_cls=None):
    """Make every ModelPatcher of a CPU diffusion model start with qmm's attention override
    in its model_options (ComfyUI copies model_options into every clone, so a node's change —
    the qmm attention node switched off — carries on). Returns True if installed."""
    import qmm.comfy.attention as ca
    if model_patcher_cls is None:
        import comfy.model_patcher
        model_patcher_cls = comfy.model_patcher.ModelPatcher
    orig = model_patcher_cls.__init__
    if getattr(orig, "_qmm_attention_default", False):
        return True

    def __init__(self, *args, **kwargs):
        orig(self, *args, **kwargs)
        try:
            if _is_cpu_diffusion_model(self):
                to = self.model_options.setdefault("transformer_options", {})
                if to.get(ca.KEY) is None:
                    ca.apply(self.model_options, True, mode)
                ca.bind_layers(self.model)  # the layers' ComfyAttention requests
        except Exception as e:   # noqa: BLE001 — never break model loading
            log.debug("qmm: attention default not applied: %s", e)
    __init__._qmm_attention_default = True
    __init__.__wrapped__ = orig
    __init__.__doc__ = orig.__doc__
    model_patcher_cls.__init__ = __init__
    return True


def setup_attention():
    """Register "qmm" with ComfyUI's attention functions and install the default for CPU
    models (unless QMM_ATTENTION=0), once per process; silent outside ComfyUI."""
    if _attention["registered"] or _attention["why"]:
        return
    import qmm.comfy.attention as ca
    mod = _comfy_attention_module()
    if mod is None:
        _attention["why"] = "ComfyUI is not loaded in this process"
        return
    if not hasattr(mod, "wrap_attn") or not hasattr(mod, "register_attention_function"):
        _attention["why"] = ("this ComfyUI has no attention override (wrap_attn and "
                             "register_attention_function come with ComfyUI 0.3.60)")
        log.info("qmm: %s: qmm attention is not applied; attention stays ComfyUI's",
                 _attention["why"])
        return
    if not qmm.has_attention():
        log.info("qmm: the loaded libqmm (%s) lacks qmm_attention: every attention call would "
                 "fall back; qmm attention registered anyway", qmm.library_path)
    funcs = getattr(mod, "REGISTERED_ATTENTION_FUNCTIONS", {})
    if "qmm" not in funcs:
        mod.register_attention_function("qmm", mod.wrap_attn(ca.attention))
    _attention["registered"] = True
    mode = attention_mode_from_env()
    if mode is None:
        log.info("qmm: attention function \"qmm\" registered; QMM_ATTENTION=0: not the default "
                 "for CPU models (the node \"qmm attention\" applies it to a model)")
        return
    try:
        install_attention_default(mode)
        _attention["default"] = mode
        log.info("qmm: attention function \"qmm\" registered and the default for diffusion "
                 "models on the CPU (mode %s; QMM_ATTENTION=0 turns this off)", mode)
    except Exception as e:   # noqa: BLE001
        log.info("qmm: attention function \"qmm\" registered; no default for CPU models (%s)", e)


def _comfy_model_management():
    """ComfyUI's comfy.model_management if this process runs ComfyUI, else None."""
    mm = sys.modules.get("comfy.model_management")
    if mm is None and "comfy" in sys.modules:
        try:
            import comfy.model_management as mm
        except Exception as e:   # noqa: BLE001 — ComfyUI's import, not ours
            log.debug("qmm: comfy.model_management does not import: %s", e)
            return None
    return mm


def link_interrupt(mm=None):
    """Link ComfyUI's interrupt to qmm.cancel(): mm.interrupt_current_processing (mm: ComfyUI's
    comfy.model_management, by default the loaded one) is wrapped so that setting the flag
    (value True) also cancels the qmm calls in flight, and cancelled calls raise a class that
    is both qmm.Cancelled and mm.InterruptProcessingException (qmm.set_cancelled_type). Once
    per process (a wrapped function is left as it is). Returns True if linked."""
    mm = mm if mm is not None else _comfy_model_management()
    orig = getattr(mm, "interrupt_current_processing", None) if mm is not None else None
    if not callable(orig):
        return False
    if getattr(orig, "_qmm_cancel", False):
        return True

    def interrupt_current_processing(value=True, *args, **kwargs):
        r = orig(value, *args, **kwargs)
        if value:
            try:
                qmm.cancel()
            except Exception as e:   # noqa: BLE001 — never break ComfyUI's interrupt
                log.debug("qmm: qmm.cancel() failed: %s", e)
        return r
    interrupt_current_processing._qmm_cancel = True
    interrupt_current_processing.__wrapped__ = orig
    interrupt_current_processing.__doc__ = orig.__doc__
    exc = getattr(mm, "InterruptProcessingException", None)
    if isinstance(exc, type) and issubclass(exc, BaseException):
        qmm.set_cancelled_type(type("Interrupted", (qmm.Cancelled, exc), {
            "__module__": __name__,
            "__doc__": "A qmm call cancelled by ComfyUI's interrupt: qmm.Cancelled and "
                       "ComfyUI's InterruptProcessingException."}))
    mm.interrupt_current_processing = interrupt_current_processing
    return True


def setup():
    """Register the backend (unless QMM_KITCHEN=0) and log the engines, once per process;
    then qmm attention (setup_attention) and the interrupt's link to qmm.cancel()."""
    global _registered
    if _registered:
        return
    _registered = True
    try:
        setup_attention()
    except Exception as e:   # noqa: BLE001 — attention is optional; the kitchen backend is not
        log.info("qmm: attention not set up: %s", e)
    try:
        link_interrupt()
    except Exception as e:   # noqa: BLE001 — cancelling is optional
        log.info("qmm: ComfyUI's interrupt not linked to qmm.cancel(): %s", e)
    engines = qmm.int8_engines_available()
    if os.environ.get("QMM_KITCHEN", "1") == "0":
        log.info("qmm: QMM_KITCHEN=0, comfy-kitchen backend not registered")
        return
    if not _kitchen.register():
        log.info("qmm: comfy-kitchen backend unavailable here (%s); INT8 layers keep running on "
                 "comfy-kitchen's eager backend", _kitchen.unavailable_reason())
        return
    info = qmm.info()
    log.info("qmm %s: comfy-kitchen backend registered first for CPU tensors; CPU %s; int8 "
             "engines here: %s", info["version"], info["cpu"], ", ".join(engines))


def _diffusion_module(model):
    m = getattr(model, "model", model)
    return getattr(m, "diffusion_model", m)


def int8_layers(module):
    """(name, qdata, scale, convrot group) of every TensorWiseINT8Layout weight in module."""
    from comfy_kitchen.tensor.base import QuantizedTensor
    out = []
    for name, sub in module.named_modules():
        w = getattr(sub, "weight", None)
        if isinstance(w, QuantizedTensor) and w.layout_cls.__name__ == "TensorWiseINT8Layout":
            p = w.params
            gs = int(p.convrot_groupsize) if getattr(p, "convrot", False) else 0
            qdata = w.layout_cls.get_plain_tensors(w)[0]
            out.append((name, qdata, p.scale, gs, getattr(sub, "bias", None)))
    return out


_DTYPES = {"f32": "float32", "bf16": "bfloat16", "f16": "float16"}


def plan_text(model, tokens=4096, dtype="f32"):
    """One line per INT8 layer: name, shape, ConvRot group, the engine qmm picks for `tokens`
    rows of `dtype` (f32: what ComfyUI sends on a CPU), or why qmm declines it; then qmm's
    counters (the whole process) and the declined calls."""
    import torch
    from qmm.kitchen.linear import plan
    lines = []
    dt = getattr(torch, _DTYPES[dtype])
    for name, q, scale, gs, bias in int8_layers(_diffusion_module(model)):
        N, K = q.shape
        try:
            what = plan(q, scale, bias if hasattr(bias, "dtype") else None, gs, tokens, dt)
        except (_kitchen.Refused, qmm.QmmError) as e:
            what = "declined -> eager (%s)" % e
        lines.append("%-48s [%d, %d] g=%-4d %s" % (name, N, K, gs, what))
    if not lines:
        lines.append("no INT8 (TensorWiseINT8Layout) layers in this model")
    for op, c in qmm.counters().items():
        lines.append("qmm counters (process), %s: calls %s, fallbacks %d, errors %d" % (
            op, c["calls"] or "{}", c["fallbacks"], c["errors"]))
    for (func, why), n in sorted(_kitchen.declines().items()):
        lines.append("declined %dx %s: %s" % (n, func, why))
    try:
        import qmm.comfy.attention as ca
        for why, n in sorted(ca.declines().items()):
            lines.append("attention passed on %dx: %s" % (n, why))
    except ImportError:
        pass
    return "\n".join(lines)


class QmmPlan:
    """Shows which qmm engine runs each INT8 layer of the model."""

    @classmethod
    def INPUT_TYPES(cls):  # noqa: N802 (ComfyUI's name)
        return {"required": {"model": ("MODEL",),
                             "tokens": ("INT", {"default": 4096, "min": 1, "max": 1 << 20}),
                             "dtype": (["f32", "bf16", "f16"],)}}

    RETURN_TYPES = ("STRING",)
    RETURN_NAMES = ("plan",)
    FUNCTION = "plan"
    CATEGORY = "qmm"
    OUTPUT_NODE = True

    def plan(self, model, tokens=4096, dtype="f32"):
        text = plan_text(model, tokens, dtype)
        log.info("qmm plan:\n%s", text)
        return {"ui": {"text": [text]}, "result": (text,)}


class QmmAttention:
    """Applies (enabled) or removes (disabled) qmm's attention on a MODEL, through the
    attention override ComfyUI's wrap_attn consults (transformer_options)."""

    @classmethod
    def INPUT_TYPES(cls):  # noqa: N802 (ComfyUI's name)
        return {"required": {"model": ("MODEL",),
                             "enabled": ("BOOLEAN", {"default": True}),
                             "mode": (["auto", "best", "f32", "int8"],)}}

    RETURN_TYPES = ("MODEL",)
    FUNCTION = "patch"
    CATEGORY = "qmm"
    DESCRIPTION = ("qmm attention on the CPU's matrix engines: auto = bf16 operands with f32 "
                   "accumulation unless the model asks for float32 attention; f32 = f32 "
                   "operands only. Calls qmm does not take (another device, ...) run "
                   "ComfyUI's attention.")

    def patch(self, model, enabled=True, mode="auto"):
        import qmm.comfy.attention as ca
        mod = _comfy_attention_module()
        if mod is not None and not hasattr(mod, "wrap_attn"):
            log.warning("qmm attention: this ComfyUI has no attention override (ComfyUI >= "
                        "0.3.60): model returned unchanged")
            return (model,)
        m = model.clone()
        ca.apply(m.model_options, bool(enabled), mode)
        if enabled:
            ca.bind_layers(getattr(m, "model", None))
        return (m,)


NODE_CLASS_MAPPINGS = {"QmmPlan": QmmPlan, "QmmAttention": QmmAttention}
NODE_DISPLAY_NAME_MAPPINGS = {"QmmPlan": "qmm plan (INT8 engines)",
                              "QmmAttention": "qmm attention"}

setup()
