"""qmm.comfy.attention and the ComfyUI node's attention part, without ComfyUI installed.

The calls are made as ComfyUI's attention call sites make them (comfy/ldm/flux/math.py:
optimized_attention(q, k, v, heads, skip_reshape=True, mask=mask, transformer_options=...);
comfy/ldm/modules/attention.py CrossAttention: optimized_attention(q, k, v, self.heads,
attn_precision=..., transformer_options=...) and, masked, (q, k, v, heads, mask, ...);
hidream_o1: skip_reshape=True, skip_output_reshape=True, enable_gqa=...; joyimage: heads=heads
by keyword), and through the transformer_options override as ComfyUI's wrap_attn consults it
(0.29 and 0.30 alike): when transformer_options has "optimized_attention_override", wrap_attn
returns override(func, *args, **kwargs) with func the undecorated function and
_inside_attn_wrapper=True added to the kwargs. comfy_wrap_attn below is that rule, written from
its description, and sub_quad_stand_in stands for the function ComfyUI would run (on a CPU,
attention_sub_quad): it records its calls and computes with torch's SDPA.
"""
import functools
import importlib.util
import logging
import os
import sys
import types

import pytest
import torch

import qmm
import qmm.comfy.attention as ca

from conftest import ROOT, SEED

needs_attention = pytest.mark.skipif(not qmm.has_attention(),
                                     reason="the loaded libqmm lacks qmm_attention")
F32_TOL = 2e-5          # mode f32 against SDPA f32 (see test_attention.py for the bounds)
BEST_TOL = 1.6e-2


def comfy_wrap_attn(func):
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        remove = False
        try:
            if "_inside_attn_wrapper" not in kwargs:
                to = kwargs.get("transformer_options", None)
                remove = True
                kwargs["_inside_attn_wrapper"] = True
                if to is not None and "optimized_attention_override" in to:
                    return to["optimized_attention_override"](func, *args, **kwargs)
            return func(*args, **kwargs)
        finally:
            if remove:
                del kwargs["_inside_attn_wrapper"]
    return wrapper


CALLS = []


def _sub_quad_stand_in(q, k, v, heads, mask=None, attn_precision=None, skip_reshape=False,
                       skip_output_reshape=False, **kwargs):
    CALLS.append(dict(kwargs, heads=heads, skip_reshape=skip_reshape))
    if mask is not None and mask.dtype != torch.bool and mask.dtype != q.dtype:
        mask = mask.to(q.dtype)          # sub_quad adds any mask to the scores
    return ca.sdpa_attention(q, k, v, heads, mask=mask, attn_precision=attn_precision,
                             skip_reshape=skip_reshape, skip_output_reshape=skip_output_reshape,
                             **{n: x for n, x in kwargs.items() if n in ("scale", "enable_gqa")})


optimized_attention = comfy_wrap_attn(_sub_quad_stand_in)


@pytest.fixture(autouse=True)
def _clean():
    CALLS.clear()
    ca.reset_declines()
    yield


def _err(a, b, v):
    return ((a.double() - b.double()).abs().max() / v.double().abs().max()).item()


def _to(mode=None):
    return {"optimized_attention_override": ca.chain(None, mode), "patches": {}}


# ---------------------------------------------------------------- layouts and kwargs
@needs_attention
@pytest.mark.parametrize("skip_output_reshape", [False, True])
def test_flux_layout_skip_reshape(skip_output_reshape):
    g = torch.Generator().manual_seed(SEED)
    B, H, S, D = 1, 6, 77, 128
    q, k, v = (torch.randn(B, H, S, D, generator=g) for _ in range(3))
    to = _to("f32")
    out = optimized_attention(q, k, v, H, skip_reshape=True, mask=None,
                              skip_output_reshape=skip_output_reshape, transformer_options=to)
    want = _sub_quad_stand_in(q, k, v, H, skip_reshape=True,
                              skip_output_reshape=skip_output_reshape)
    CALLS.clear()
    assert out.shape == want.shape == ((B, H, S, D) if skip_output_reshape else (B, S, H * D))
    assert out.dtype == q.dtype and _err(out, want, v) <= F32_TOL
    assert CALLS == [] and ca.declines() == {}


@needs_attention
@pytest.mark.parametrize("skip_output_reshape", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_cross_attention_layout(skip_output_reshape, dtype):
    """CrossAttention.forward: q [B, S, heads·D], k and v [B, Skv, heads·D] (context)."""
    g = torch.Generator().manual_seed(SEED)
    B, heads, D, S, Skv = 2, 5, 64, 33, 19
    q = torch.randn(B, S, heads * D, generator=g).to(dtype)
    kv = torch.randn(B, Skv, 2 * heads * D, generator=g).to(dtype)   # one fused projection
    k, v = kv.chunk(2, dim=-1)
    out = optimized_attention(q, k, v, heads, attn_precision=None,
                              skip_output_reshape=skip_output_reshape,
                              transformer_options=_to())
    want = ca.sdpa_attention(q.float(), k.float(), v.float(), heads,
                             skip_output_reshape=skip_output_reshape)
    assert out.shape == want.shape and out.dtype == dtype
    assert _err(out, want, v) <= BEST_TOL and CALLS == []


@needs_attention
def test_gqa_both_layouts_scale_and_heads_keyword():
    g = torch.Generator().manual_seed(SEED)
    B, H, Hkv, S, Skv, D = 1, 8, 2, 40, 40, 64
    q = torch.randn(B, H, S, D, generator=g)
    k, v = torch.randn(B, Hkv, Skv, D, generator=g), torch.randn(B, Hkv, Skv, D, generator=g)
    to = _to("f32")
    out = optimized_attention(q, k, v, H, mask=None, skip_reshape=True, skip_output_reshape=True,
                              transformer_options=to, enable_gqa=True, scale=0.07)
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=0.07, enable_gqa=True)
    assert _err(out, want, v) <= F32_TOL
    # the same without skip_reshape: [B, S, H·D] and [B, Skv, Hkv·D]; heads by keyword
    q3 = q.transpose(1, 2).reshape(B, S, H * D)
    k3, v3 = (t.transpose(1, 2).reshape(B, Skv, Hkv * D) for t in (k, v))
    out3 = optimized_attention(q3, k3, v3, heads=H, transformer_options=to, enable_gqa=True,
                               scale=0.07)
    assert out3.shape == (B, S, H * D)
    assert _err(out3, want.transpose(1, 2).reshape(B, S, H * D), v) <= F32_TOL
    assert CALLS == [] and ca.declines() == {}


@needs_attention
@pytest.mark.parametrize("kind", ["2d", "3d", "4d", "key"])
@pytest.mark.parametrize("dtype", [torch.bool, torch.float32, torch.bfloat16])
def test_masks_as_comfyui_passes_them(kind, dtype):
    """2-D [S, Skv] and 3-D [B, S, Skv] masks are broadcast as attention_pytorch does (a batch,
    then a heads dimension added in front), 4-D as is."""
    g = torch.Generator().manual_seed(SEED)
    B, H, S, Skv, D = 2, 3, 17, 23, 32
    q = torch.randn(B, H, S, D, generator=g)
    k, v = torch.randn(B, H, Skv, D, generator=g), torch.randn(B, H, Skv, D, generator=g)
    shape = {"2d": (S, Skv), "3d": (B, S, Skv), "4d": (B, 1, S, Skv), "key": (B, 1, 1, Skv)}[kind]
    if dtype == torch.bool:
        m = torch.rand(shape, generator=g) > 0.3
        m[..., 0] = True
    else:
        m = (torch.randn(shape, generator=g) * 3).to(dtype)
    out = optimized_attention(q, k, v, H, m, skip_reshape=True, transformer_options=_to("f32"))
    sm = m
    if sm.dim() == 2:
        sm = sm.unsqueeze(0)
    if sm.dim() == 3:
        sm = sm.unsqueeze(1)
    want = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=sm if dtype == torch.bool else sm.float())
    want = want.transpose(1, 2).reshape(B, S, H * D)
    assert _err(out, want, v) <= F32_TOL + (4e-3 if dtype == torch.bfloat16 else 0)
    assert CALLS == [] and ca.declines() == {}


def _spy_modes(monkeypatch):
    """The modes qmm.attention is called with from now on (the calls still run)."""
    seen = []
    real = qmm.attention

    def spy(*a, **kw):
        seen.append(kw.get("mode"))
        return real(*a, **kw) if has else kw["out"].zero_()
    has = qmm.has_attention()   # a library without qmm_attention: the spy answers zeros
    monkeypatch.setattr(qmm, "attention", spy)
    monkeypatch.setattr(qmm, "has_attention", lambda: True)
    return seen


def test_attn_precision_float32_selects_f32_mode(monkeypatch):
    seen = _spy_modes(monkeypatch)
    q = torch.randn(1, 4, 8, 16)
    to = _to()                                        # mode from attn_precision
    optimized_attention(q, q, q, 4, skip_reshape=True, attn_precision=torch.float32,
                        transformer_options=to)
    optimized_attention(q, q, q, 4, skip_reshape=True, attn_precision=None,
                        transformer_options=to, low_precision_attention=False)
    optimized_attention(q, q, q, 4, skip_reshape=True, attn_precision=torch.float32,
                        transformer_options=_to("best"))   # a fixed mode wins
    assert seen == ["f32", "best", "best"]


def test_int8_mode_gives_way_where_the_call_wants_precision(monkeypatch):
    """mode "int8" (QMM_ATTENTION=int8, the node's "int8"): int8 where the call allows low
    precision (ComfyUI's default), "best" where it passes low_precision_attention=False (the
    call sites that keep SageAttention away), "f32" where attn_precision is float32."""
    seen = _spy_modes(monkeypatch)
    q = torch.randn(1, 4, 8, 16)
    to = _to("int8")
    optimized_attention(q, q, q, 4, skip_reshape=True, transformer_options=to)
    optimized_attention(q, q, q, 4, skip_reshape=True, transformer_options=to, low_precision_attention=False)
    optimized_attention(q, q, q, 4, skip_reshape=True, transformer_options=to, attn_precision=torch.float32)
    assert seen == ["int8", "best", "f32"]


# ---------------------------------------------------------------- what goes to the fallback
def _declined(call, reason_part, n=2, caplog=None):
    before = len(CALLS)
    for _ in range(n):
        call()
    assert len(CALLS) == before + n                    # the function ComfyUI would have run
    (reason, count), = ca.declines().items()
    assert reason_part in reason and count == n, ca.declines()
    if caplog is not None:
        logged = [r for r in caplog.records if r.name == "qmm.comfyui" and r.levelno == logging.INFO]
        assert len(logged) == 1 and reason_part in logged[0].getMessage()   # once per reason
        assert "_sub_quad_stand_in" in logged[0].getMessage()
    ca.reset_declines()
    CALLS.clear()


def test_fallback_with_reason_logged_once(caplog):
    to = _to()
    q = torch.randn(1, 2, 5, 16)
    with caplog.at_level(logging.INFO, logger="qmm.comfyui"):
        _declined(lambda: optimized_attention(q.to("meta"), q.to("meta"), q.to("meta"), 2,
                                              skip_reshape=True, transformer_options=to),
                  "q is on meta", caplog=caplog)
    big = torch.randn(1, 2, 5, 512)
    _declined(lambda: optimized_attention(big, big, big, 2, skip_reshape=True,
                                          transformer_options=to), "D = 512 > 256")
    _declined(lambda: optimized_attention(q.double(), q.double(), q.double(), 2,
                                          skip_reshape=True, transformer_options=to),
              "q has dtype torch.float64")
    _declined(lambda: optimized_attention(q, q, q, 2, torch.ones(5, 5, dtype=torch.int64),
                                          skip_reshape=True, transformer_options=to),
              "mask has dtype torch.int64")

    def bad_mask():            # the fallback gets it, and fails on it as ComfyUI's own would
        with pytest.raises(RuntimeError):
            optimized_attention(q, q, q, 2, torch.zeros(3, 5, 5), skip_reshape=True,
                                transformer_options=to)
    _declined(bad_mask, "which does not broadcast")
    kv = torch.randn(1, 1, 5, 16)
    _declined(lambda: optimized_attention(q, kv, kv, 2, skip_reshape=True,
                                          transformer_options=to),
              "without enable_gqa")
    _declined(lambda: optimized_attention(q, q, q, 3, skip_reshape=True, transformer_options=to),
              "q has 2 heads but heads=3")
    _declined(lambda: optimized_attention(q, q, q, 2, skip_reshape=True, transformer_options=to,
                                          scale=float("nan")), "scale nan is not finite")
    qg = q.clone().requires_grad_()
    _declined(lambda: optimized_attention(qg, q, q, 2, skip_reshape=True, transformer_options=to),
              "requires grad")
    q3 = torch.randn(1, 5, 30)

    def bad_width():
        with pytest.raises(RuntimeError):
            optimized_attention(q3, q3, q3, 4, transformer_options=to)
    _declined(bad_width, "not a multiple of heads")


def test_library_refusal_falls_back(monkeypatch):
    def refuse(*a, **kw):
        raise qmm.QmmError(qmm._lib.ERR_NO_ENGINE, "no engine admits attention D=16 here")
    monkeypatch.setattr(qmm, "attention", refuse)
    monkeypatch.setattr(qmm, "has_attention", lambda: True)
    q = torch.randn(1, 2, 5, 16)
    _declined(lambda: optimized_attention(q, q, q, 2, skip_reshape=True, transformer_options=_to()),
              "QMM_ERR_NO_ENGINE: no engine admits")
    monkeypatch.setattr(qmm, "has_attention", lambda: False)
    _declined(lambda: optimized_attention(q, q, q, 2, skip_reshape=True, transformer_options=_to()),
              "lacks qmm_attention")


def test_fallback_result_is_the_fallbacks():
    q = torch.randn(1, 2, 5, 512)
    out = optimized_attention(q, q, q, 2, skip_reshape=True, transformer_options=_to())
    assert torch.equal(out, _sub_quad_stand_in(q, q, q, 2, skip_reshape=True))
    assert CALLS[0]["_inside_attn_wrapper"] is True          # as wrap_attn passes it on


def test_chain_falls_back_to_the_previous_override(caplog):
    seen = []

    def previous(func, *args, **kwargs):
        seen.append(func)
        return func(*args, **kwargs)
    to = {"optimized_attention_override": ca.chain(previous)}
    q = torch.randn(1, 2, 5, 512)
    with caplog.at_level(logging.INFO, logger="qmm.comfyui"):
        optimized_attention(q, q, q, 2, skip_reshape=True, transformer_options=to)
    assert seen == [_sub_quad_stand_in] and len(CALLS) == 1
    assert "D = 512 > 256" in next(iter(ca.declines()))
    assert "the previous override" in caplog.records[-1].getMessage()


def test_apply_sets_and_removes_keeping_the_previous():
    mo = {"transformer_options": {}}
    ca.apply(mo, True)
    f = mo["transformer_options"][ca.KEY]
    assert ca.is_qmm(f) and f.qmm_previous is None and f.qmm_mode is None
    ca.apply(mo, True, "f32")                         # re-applying replaces, never stacks
    f = mo["transformer_options"][ca.KEY]
    assert f.qmm_previous is None and f.qmm_mode == "f32"
    ca.apply(mo, False)
    assert ca.KEY not in mo["transformer_options"]

    def other(func, *a, **kw):
        return func(*a, **kw)
    mo = {"transformer_options": {ca.KEY: other}}
    ca.apply(mo, True, "auto")
    f = mo["transformer_options"][ca.KEY]
    assert ca.is_qmm(f) and f.qmm_previous is other and f.qmm_mode is None
    ca.apply(mo, False)
    assert mo["transformer_options"][ca.KEY] is other
    assert ca.apply({}, True)["transformer_options"][ca.KEY] is not None


def test_plain_function_without_comfyui_falls_back_to_sdpa():
    q = torch.randn(1, 2, 5, 300)
    out = ca.attention(q, q, q, 2, skip_reshape=True)
    assert torch.allclose(out, ca.sdpa_attention(q, q, q, 2, skip_reshape=True))
    assert "D = 300 > 256" in next(iter(ca.declines()))
    f = ca.make_attention(_sub_quad_stand_in)
    f(q, q, q, 2, skip_reshape=True)
    assert len(CALLS) == 1 and "_inside_attn_wrapper" not in CALLS[0]   # the caller's arguments


def test_bind_is_pythons():
    b, extra = ca._bind((1, 2, 3), {"heads": 4, "scale": 0.5, "transformer_options": {}})
    assert (b["q"], b["heads"], b["mask"], b["skip_reshape"]) == (1, 4, None, False)
    assert extra == {"scale": 0.5, "transformer_options": {}}
    b, _ = ca._bind((1, 2, 3, 4, "m", None, True, True), {})
    assert b["mask"] == "m" and b["skip_output_reshape"] is True
    with pytest.raises(TypeError):
        ca._bind((1, 2, 3, 4), {"heads": 4})
    with pytest.raises(TypeError):
        ca._bind((1, 2, 3), {})


# ---------------------------------------------------------------- the node, in a stand-in ComfyUI
class _PatcherStandIn:
    """What ModelPatcher does with model_options: made in __init__, copied by clone()."""

    def __init__(self, model, load_device, offload_device, size=0, weight_inplace_update=False):
        self.model = model
        self.load_device, self.offload_device = load_device, offload_device
        self.model_options = {"transformer_options": {}}

    def clone(self):
        n = self.__class__(self.model, self.load_device, self.offload_device)
        n.model_options = {"transformer_options": dict(self.model_options["transformer_options"])}
        return n


def _fake_comfyui(monkeypatch, with_wrap_attn=True):
    comfy = types.ModuleType("comfy")
    comfy.__path__ = []
    ldm = types.ModuleType("comfy.ldm")
    ldm.__path__ = []
    modules = types.ModuleType("comfy.ldm.modules")
    modules.__path__ = []
    attn = types.ModuleType("comfy.ldm.modules.attention")
    attn.optimized_attention = optimized_attention
    if with_wrap_attn:
        attn.wrap_attn = comfy_wrap_attn
        attn.REGISTERED_ATTENTION_FUNCTIONS = {}

        def register_attention_function(name, func):
            attn.REGISTERED_ATTENTION_FUNCTIONS.setdefault(name, func)
        attn.register_attention_function = register_attention_function
    mp = types.ModuleType("comfy.model_patcher")
    mp.ModelPatcher = type("ModelPatcher", (_PatcherStandIn,), {})
    for name, mod in (("comfy", comfy), ("comfy.ldm", ldm), ("comfy.ldm.modules", modules),
                      ("comfy.ldm.modules.attention", attn), ("comfy.model_patcher", mp)):
        monkeypatch.setitem(sys.modules, name, mod)
    comfy.ldm, ldm.modules, modules.attention, comfy.model_patcher = ldm, modules, attn, mp
    return attn, mp


def _import_node(name):
    path = os.path.join(ROOT, "comfyui", "__init__.py")
    spec = importlib.util.spec_from_file_location(name, path,
                                                  submodule_search_locations=[os.path.dirname(path)])
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_node_registers_and_defaults_cpu_models(monkeypatch, caplog):
    monkeypatch.delenv("QMM_ATTENTION", raising=False)
    attn, mp = _fake_comfyui(monkeypatch)
    with caplog.at_level(logging.INFO, logger="qmm.comfyui"):
        node = _import_node("qmm_comfyui_attn1")
    f = attn.REGISTERED_ATTENTION_FUNCTIONS["qmm"]
    assert f.__wrapped__ is ca.attention                    # registered through wrap_attn
    assert any("the default for diffusion models on the CPU" in r.getMessage()
               for r in caplog.records)
    cpu = mp.ModelPatcher(object(), torch.device("cpu"), torch.device("cpu"))
    gpu = mp.ModelPatcher(object(), torch.device("cuda", 0), torch.device("cpu"))
    assert ca.is_qmm(cpu.model_options["transformer_options"][ca.KEY])
    assert ca.KEY not in gpu.model_options["transformer_options"]
    # the node: off on a CPU model removes it (and clones keep that), on adds it anywhere
    Node = node.NODE_CLASS_MAPPINGS["QmmAttention"]
    assert Node.RETURN_TYPES == ("MODEL",) and "model" in Node.INPUT_TYPES()["required"]
    off, = Node().patch(cpu, enabled=False)
    assert off is not cpu and ca.KEY not in off.model_options["transformer_options"]
    assert ca.KEY not in off.clone().model_options["transformer_options"]
    assert ca.is_qmm(cpu.model_options["transformer_options"][ca.KEY])   # the input unchanged
    on, = Node().patch(gpu, enabled=True, mode="f32")
    f = on.model_options["transformer_options"][ca.KEY]
    assert ca.is_qmm(f) and f.qmm_mode == "f32"
    # a second import (ComfyUI reloading) neither registers twice nor wraps __init__ twice
    init = mp.ModelPatcher.__init__
    _import_node("qmm_comfyui_attn2")
    assert mp.ModelPatcher.__init__ is init


def test_node_default_off_with_env(monkeypatch):
    monkeypatch.setenv("QMM_ATTENTION", "0")
    attn, mp = _fake_comfyui(monkeypatch)
    node = _import_node("qmm_comfyui_attn3")
    assert "qmm" in attn.REGISTERED_ATTENTION_FUNCTIONS
    cpu = mp.ModelPatcher(object(), torch.device("cpu"), torch.device("cpu"))
    assert ca.KEY not in cpu.model_options["transformer_options"]
    on, = node.NODE_CLASS_MAPPINGS["QmmAttention"]().patch(cpu, enabled=True)
    assert ca.is_qmm(on.model_options["transformer_options"][ca.KEY])
    monkeypatch.setenv("QMM_ATTENTION", "f32")
    assert node.attention_mode_from_env() == "f32"


def test_node_on_comfyui_without_override(monkeypatch, caplog):
    monkeypatch.delenv("QMM_ATTENTION", raising=False)
    attn, mp = _fake_comfyui(monkeypatch, with_wrap_attn=False)
    with caplog.at_level(logging.INFO, logger="qmm.comfyui"):
        node = _import_node("qmm_comfyui_attn4")
    assert any("no attention override" in r.getMessage() for r in caplog.records)
    cpu = mp.ModelPatcher(object(), torch.device("cpu"), torch.device("cpu"))
    assert ca.KEY not in cpu.model_options["transformer_options"]
    out, = node.NODE_CLASS_MAPPINGS["QmmAttention"]().patch(cpu, enabled=True)
    assert out is cpu                                       # unchanged


# ---------------------------------------------------------------- fallbacks
def test_fallback_gets_exactly_the_callers_arguments():
    """make_attention(fallback=f): f is called with the caller's arguments and nothing else, so
    a fallback with an explicit signature (no **kwargs) works."""
    seen = []

    def strict(q, k, v, heads, mask=None, attn_precision=None, skip_reshape=False,
               skip_output_reshape=False, transformer_options=None):
        seen.append((heads, skip_reshape, transformer_options))
        return "strict's"
    f = ca.make_attention(strict)
    q = torch.randn(1, 2, 5, 300)                       # D > 256: declined
    to = {"patches": {}}
    assert f(q, q, q, 2, skip_reshape=True, transformer_options=to) == "strict's"
    assert seen == [(2, True, to)]
    assert f(q, q, q, heads=2, skip_reshape=True) == "strict's"
    assert seen[-1] == (2, True, None)


def _declined_calls():
    """One call of each kind qmm declines: float64, D > 256, a tensor requiring grad."""
    g = torch.randn(1, 2, 5, 16).requires_grad_()
    return [((torch.randn(1, 2, 5, 16, dtype=torch.float64),) * 3, "float64"),
            ((torch.randn(1, 2, 5, 300),) * 3, "D = 300 > 256"),
            ((g, g.detach(), g.detach()), "requires grad")]


@pytest.mark.parametrize("installed", ["plain", "wrap_attn"])
def test_installed_as_optimized_attention_never_falls_back_to_itself(monkeypatch, installed):
    """qmm installed as ComfyUI's optimized_attention (plain, or decorated by wrap_attn as
    register_attention_function does): a declined call goes to ComfyUI's CPU default,
    attention_sub_quad, once — not to qmm again (RecursionError)."""
    attn, _ = _fake_comfyui(monkeypatch)
    attn.attention_sub_quad = optimized_attention               # the wrapped stand-in
    attn.optimized_attention = ca.attention if installed == "plain" else \
        comfy_wrap_attn(ca.attention)
    for qkv, reason in _declined_calls():
        CALLS.clear()
        out = attn.optimized_attention(*qkv, 2, skip_reshape=True, transformer_options={})
        assert len(CALLS) == 1 and CALLS[0]["_inside_attn_wrapper"] is True
        want = _sub_quad_stand_in(*(t.detach() for t in qkv), 2, skip_reshape=True)
        assert torch.equal(out.detach(), want)
        assert any(reason in r for r in ca.declines()), ca.declines()
    assert sum(ca.declines().values()) == 3


def test_own_function_as_fallback_goes_to_the_default(monkeypatch):
    """make_attention(fallback=<a qmm function>) and a ComfyUI whose every attention function is
    qmm's: the fallback is torch SDPA (sdpa_attention), never qmm itself."""
    attn, _ = _fake_comfyui(monkeypatch)
    attn.optimized_attention = comfy_wrap_attn(ca.attention)
    f = ca.make_attention(fallback=attn.optimized_attention)
    q = torch.randn(1, 2, 5, 300)
    out = f(q, q, q, 2, skip_reshape=True)
    assert torch.equal(out, ca.sdpa_attention(q, q, q, 2, skip_reshape=True)) and CALLS == []
    assert sum(ca.declines().values()) == 1


def test_override_over_qmms_own_function_declines_once(monkeypatch):
    """ComfyUI runs wrap_attn(qmm's attention) with qmm's override set: a declined call goes to
    attention_sub_quad, declined once (func is qmm's own: not asked again)."""
    attn, _ = _fake_comfyui(monkeypatch)
    attn.attention_sub_quad = optimized_attention
    attn.optimized_attention = comfy_wrap_attn(ca.attention)
    q = torch.randn(1, 2, 5, 300)
    out = attn.optimized_attention(q, q, q, 2, skip_reshape=True, transformer_options=_to())
    assert torch.equal(out, _sub_quad_stand_in(q, q, q, 2, skip_reshape=True))
    assert len(CALLS) == 2 and sum(ca.declines().values()) == 1


def test_auto_mode_is_int8_where_an_int8_engine_runs_it(monkeypatch):
    """mode None ("auto", the node's default): "int8" where int8_attention_here() (an int8
    engine runs mode int8, no fallback), giving way as mode "int8" does; else "best"."""
    seen = _spy_modes(monkeypatch)
    q = torch.randn(1, 4, 8, 16)
    for here in (True, False):
        monkeypatch.setattr(ca, "_INT8_HERE", [here])
        optimized_attention(q, q, q, 4, skip_reshape=True, transformer_options=_to())
        optimized_attention(q, q, q, 4, skip_reshape=True, transformer_options=_to(),
                            low_precision_attention=False)
        optimized_attention(q, q, q, 4, skip_reshape=True, transformer_options=_to(),
                            attn_precision=torch.float32)
    assert seen == ["int8", "best", "f32", "best", "best", "f32"]
    monkeypatch.setattr(ca, "_INT8_HERE", [])
    p = qmm.attention_plan(q, q, q, mode="int8")
    assert ca.int8_attention_here() == (bool(p.engine) and not p.is_fallback)
