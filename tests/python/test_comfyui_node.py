"""The ComfyUI custom node folder (comfyui/), imported as ComfyUI imports a custom node (a
package loaded from its folder) with a stub model: ComfyUI itself is not installed here, and
its contract with the kitchen is the registry, which this checks."""
import importlib.util
import logging
import os
import sys

import torch

from comfy_kitchen.registry import registry
from comfy_kitchen.tensor.base import QuantizedTensor
from comfy_kitchen.tensor.int8 import TensorWiseINT8Layout

import qmm

from conftest import ROOT


def _import_node(name="qmm_comfyui_node"):
    path = os.path.join(ROOT, "comfyui", "__init__.py")
    spec = importlib.util.spec_from_file_location(name, path,
                                                  submodule_search_locations=[os.path.dirname(path)])
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


class _Int8Linear(torch.nn.Module):
    def __init__(self, N, K, gs):
        super().__init__()
        q = torch.randint(-127, 128, (N, K), dtype=torch.int8)
        p = TensorWiseINT8Layout.Params(scale=torch.rand(N, 1) * 0.01, orig_dtype=torch.bfloat16,
                                        orig_shape=(N, K), convrot=gs > 0,
                                        convrot_groupsize=gs or 256)
        self.weight = torch.nn.Parameter(QuantizedTensor(q, "TensorWiseINT8Layout", p),
                                         requires_grad=False)
        self.bias = None


class _StubModelPatcher:            # ComfyUI's MODEL: .model (BaseModel) .diffusion_model
    class _Base:
        pass

    def __init__(self, dm):
        self.model = self._Base()
        self.model.diffusion_model = dm


def test_import_registers_and_logs_engines_once(caplog):
    registry.set_priority(["cuda", "triton", "eager"])
    with caplog.at_level(logging.INFO, logger="qmm.comfyui"):
        node = _import_node()
        node.setup()                   # a second setup (ComfyUI reloads) logs nothing more
    assert registry.get_capable_backend("int8_linear") == "qmm"
    msgs = [r.getMessage() for r in caplog.records if r.name == "qmm.comfyui"]
    assert len(msgs) == 1 and "int8 engines here: " in msgs[0]
    for e in qmm.int8_engines_available():
        assert e in msgs[0]
    assert "QmmPlan" in node.NODE_CLASS_MAPPINGS
    assert node.NODE_CLASS_MAPPINGS["QmmPlan"].RETURN_TYPES == ("STRING",)


def test_plan_node_lists_int8_layers():
    node = _import_node("qmm_comfyui_node2")
    dm = torch.nn.Sequential()
    dm.add_module("qkv", _Int8Linear(96, 512, 64))
    dm.add_module("fc2", _Int8Linear(64, 256, 0))
    dm.add_module("deep", _Int8Linear(4, 131072, 0))     # no int8 engine admits K > 131071
    dm.add_module("norm", torch.nn.LayerNorm(64))
    out = node.NODE_CLASS_MAPPINGS["QmmPlan"]().plan(_StubModelPatcher(dm), 1024, "bf16")
    text = out["result"][0]
    engine = qmm.int8_engines_available()[0]
    lines = text.splitlines()
    assert lines[0].startswith("qkv") and "[96, 512] g=64" in lines[0] and lines[0].endswith(engine)
    assert lines[1].startswith("fc2") and "g=0" in lines[1] and lines[1].endswith(engine)
    assert lines[2].startswith("deep") and "declined -> eager" in lines[2]
    assert "qmm counters" in text
