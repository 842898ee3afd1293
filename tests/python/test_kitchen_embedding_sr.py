"""dequantize_int8_embedding on qmm (INT8 text encoders) against eager: without rotation EXACT
(one f32 multiply per element, then one cast), with rotation the dequantize_int8_convrot_weight
bound; routed to qmm through the kitchen's custom op. Stochastic-rounding requantization (what
ComfyUI's LoRA patching passes) is declined with its reason and runs on eager."""
import logging

import pytest
import torch

import comfy_kitchen as ck
from comfy_kitchen.registry import registry

from qmm.kitchen import quantize as qz


def _eager_op(*a):
    with ck.use_backend("eager"):
        return torch.ops.comfy_kitchen.dequantize_int8_embedding(*a)


@pytest.mark.parametrize("gs", [0, -1, 16, 256])
@pytest.mark.parametrize("scale_kind", ["V1", "scalar"])
@pytest.mark.parametrize("code", [0, 2])
def test_dequantize_int8_embedding(kitchen, gs, scale_kind, code):
    V, D = 300, 512
    q = torch.randint(-127, 128, (V, D), dtype=torch.int8)
    s = torch.rand(V, 1) * 0.01 if scale_kind == "V1" else torch.tensor(0.01)
    ix = torch.randint(0, V, (2, 37))
    kw = {"q": q, "scale": s, "indices": ix, "group_size": gs, "output_dtype_code": code}
    assert registry.get_capable_backend("dequantize_int8_embedding", kw) == "qmm"
    y = torch.ops.comfy_kitchen.dequantize_int8_embedding(q, s, ix, gs, code)
    ye = _eager_op(q, s, ix, gs, code)
    assert y.shape == ye.shape == (2, 37, D) and y.dtype == ye.dtype
    if gs <= 0:
        assert torch.equal(y, ye)
        return
    # BOUND (as dequantize_int8_convrot_weight): the same sum of g terms in another order
    rows = (q[ix.reshape(-1)].float() * (s[ix.reshape(-1)] if s.dim() else s)).abs()
    bound = gs.bit_length() * 2.0 ** -23 * gs ** 0.5 * rows.amax(dim=1, keepdim=True)
    y32 = torch.ops.comfy_kitchen.dequantize_int8_embedding(q, s, ix, gs, 0).reshape(-1, D)
    ye32 = _eager_op(q, s, ix, gs, 0).reshape(-1, D)
    assert ((y32 - ye32).abs() <= bound).all()
    if code != 0:
        assert torch.equal(y, y32.reshape(y.shape).to(y.dtype))


def test_embedding_empty_indices(kitchen):
    q = torch.randint(-127, 128, (8, 16), dtype=torch.int8)
    y = kitchen.dequantize_int8_embedding(q, torch.rand(8, 1), torch.empty(0, dtype=torch.int64),
                                          0, 2)
    assert y.shape == (0, 16) and y.dtype == torch.bfloat16


@pytest.mark.parametrize("fn", ["quantize_int8_convrot_weight", "quantize_int8_rowwise"])
def test_stochastic_rounding_declined_with_reason(kitchen, caplog, fn):
    from comfy_kitchen.backends.eager import quantization as E
    w = torch.randn(64, 256) * 0.02
    kw = {"weight": w, "group_size": 64} if fn.endswith("weight") else {"x": w}
    kw["stochastic_rounding"] = 1234
    kitchen.reset_declines()
    with caplog.at_level(logging.INFO, logger="comfy_kitchen.dispatch"):
        assert registry.get_capable_backend(fn, kw) == "eager"
    assert qz.SR_REASON in caplog.text
    impl = registry.get_implementation(fn, kwargs=kw)
    q, s = impl(**kw)
    qe, se = getattr(E, fn)(**kw)
    assert torch.equal(q, qe) and torch.equal(s, se)
    kw["stochastic_rounding"] = 0                      # no seed: qmm runs it
    assert registry.get_capable_backend(fn, kw) == "qmm"
