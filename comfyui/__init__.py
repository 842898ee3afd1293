"""qmm for ComfyUI — a custom node folder (copy or link it into ComfyUI/custom_nodes/).

On import it registers qmm as a comfy-kitchen backend (qmm.kitchen.register()), so every INT8
layer (int8_tensorwise, with or without ConvRot) that ComfyUI runs on CPU tensors goes to
qmm's integer matrix engines, and logs once which engines this CPU has. Calls qmm declines
go to the kitchen's eager backend; each reason is logged once (logger comfy_kitchen.dispatch).
Set QMM_KITCHEN=0 to load the node without registering the backend.

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


def setup():
    """Register the backend (unless QMM_KITCHEN=0) and log the engines, once per process."""
    global _registered
    if _registered:
        return
    _registered = True
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
        if isinstance(w, QuantizedTensor) and w._layout_cls == "TensorWiseINT8Layout":
            p = w._params
            gs = int(p.convrot_groupsize) if getattr(p, "convrot", False) else 0
            out.append((name, w._qdata, p.scale, gs, getattr(sub, "bias", None)))
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
    c = qmm.counters()
    lines.append("qmm counters (process): calls %s, fallbacks %d, errors %d" % (
        c["calls"] or "{}", c["fallbacks"], c["errors"]))
    for (func, why), n in sorted(_kitchen.declines().items()):
        lines.append("declined %dx %s: %s" % (n, func, why))
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


NODE_CLASS_MAPPINGS = {"QmmPlan": QmmPlan}
NODE_DISPLAY_NAME_MAPPINGS = {"QmmPlan": "qmm plan (INT8 engines)"}

setup()
