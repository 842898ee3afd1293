"""qmm's ComfyUI attention override under the newer ComfyUI's protocols (after v0.30), without
ComfyUI installed: AttentionTensorContainers with the override's container_function, and the
per-layer ComfyAttention request (comfy_kitchen_int8).

The stand-ins are written from Comfy-Org/ComfyUI comfy/ldm/modules/attention.py at commit
05080f6022b2572df36a0aa6bcba413209c3d265 (AttentionTensorContainer, wrap_attn, ComfyAttention,
CrossAttention.forward) and comfy/ldm/minimax/model.py at 01a56b76bba3f32021fa846104baf2e500adc0da
(MiniMax H3's Attention.forward); the containers alone came with attention.py at 82997188 and
minimax/model.py at 2c64d4aa. What they reproduce:
  AttentionTensorContainer: one tensor; peek() returns it, take() returns it and empties the
    container; either raises RuntimeError on an empty one.
  wrap_attn(func): pops preferred_attention (a ComfyAttention) from the kwargs; containers are
    args[:3] when args[0] is one (then all three must be). Without _inside_attn_wrapper it sets
    that keyword and: with transformer_options["optimized_attention_override"], calls
    override.container_function(*args, **kwargs) for containers where the override has one,
    else takes the tensors and calls override(func, *args, **kwargs); else, with a
    preferred_attention whose .function is not None, calls function(*args, **kwargs) (the
    containers untaken). Otherwise: containers go to wrapper.container_function where set, else
    their tensors to func. The keyword is removed again afterwards.
  ComfyAttention: a module with .config (the layer's "comfy_attention.config" JSON, kept only
    for {"attention": "comfy_kitchen_int8"}) and .function (attention_comfy_kitchen_int8 where
    the kitchen's int8 attention runs on ComfyUI's device — never a CPU — else None).
  The layers build q, k, v, put each in a container, keep no reference of their own, and call
    optimized_attention(q, k, v, heads, ..., preferred_attention=self.comfy_attention,
    transformer_options=...): CrossAttention with [B, S, heads·D] (no skip_reshape), MiniMax H3
    with skip_reshape=True and q, k, v [1, H, S, D] views of one qkv projection.
"""
import functools
import gc
import weakref

import pytest
import torch

import qmm
import qmm.comfy.attention as ca

from conftest import SEED

needs_attention = pytest.mark.skipif(not qmm.has_attention(),
                                     reason="the loaded libqmm lacks qmm_attention")


class AttentionTensorContainer:
    __slots__ = ("tensor",)

    def __init__(self, tensor):
        self.tensor = tensor

    def peek(self):
        if self.tensor is None:
            raise RuntimeError("attention tensor container has already been consumed")
        return self.tensor

    def take(self):
        t = self.peek()
        self.tensor = None
        return t


def newer_wrap_attn(func):
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        preferred = kwargs.pop("preferred_attention", None)
        containers = None
        if len(args) >= 3 and isinstance(args[0], AttentionTensorContainer):
            if not all(isinstance(a, AttentionTensorContainer) for a in args[1:3]):
                raise TypeError("q, k, and v must all be attention tensor containers")
            containers = args[:3]
        remove = False
        try:
            if "_inside_attn_wrapper" not in kwargs:
                to = kwargs.get("transformer_options", None)
                remove = True
                kwargs["_inside_attn_wrapper"] = True
                if to is not None and "optimized_attention_override" in to:
                    override = to["optimized_attention_override"]
                    if containers is not None:
                        if hasattr(override, "container_function"):
                            return override.container_function(*args, **kwargs)
                        args = tuple(c.take() for c in containers) + args[3:]
                    return override(func, *args, **kwargs)
                if preferred is not None and preferred.function is not None:
                    return preferred.function(*args, **kwargs)
            if containers is not None:
                if wrapper.container_function is not None:
                    return wrapper.container_function(*args, **kwargs)
                args = tuple(c.take() for c in containers) + args[3:]
            return func(*args, **kwargs)
        finally:
            if remove:
                del kwargs["_inside_attn_wrapper"]
    wrapper.container_function = None
    return wrapper


class ComfyAttention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.config = None
        self.function = None

    def load(self, config, kitchen_runs_here=False, kitchen_function=None):
        """What _load_from_state_dict does with the layer's config tensor."""
        self.config = self.function = None
        if config is not None and config.get("attention") == ca.KITCHEN_INT8:
            self.config = config
            if kitchen_runs_here:
                self.function = kitchen_function


CALLS = []


def _sub_quad(q, k, v, heads, mask=None, attn_precision=None, skip_reshape=False,
              skip_output_reshape=False, **kwargs):
    """The function ComfyUI would run on a CPU (attention_sub_quad), computed by SDPA."""
    CALLS.append(dict(kwargs, q=q))
    return ca.sdpa_attention(q, k, v, heads, mask=mask, skip_reshape=skip_reshape,
                             skip_output_reshape=skip_output_reshape,
                             **{n: x for n, x in kwargs.items() if n in ("scale", "enable_gqa")})


optimized_attention = newer_wrap_attn(_sub_quad)


class CrossAttentionStandIn(torch.nn.Module):
    """CrossAttention.forward: q, k, v [B, S, heads·D] in containers."""

    def __init__(self, dim, heads):
        super().__init__()
        self.comfy_attention = ComfyAttention()
        self.heads = heads
        self.to_q, self.to_k, self.to_v = (torch.nn.Linear(dim, dim, bias=False) for _ in range(3))
        self.to_out = torch.nn.Linear(dim, dim)
        self.refs = []                  # weakrefs to the q, k, v of the last call

    def forward(self, x, transformer_options={}):
        q, k, v = self.to_q(x), self.to_k(x), self.to_v(x)
        self.refs = [weakref.ref(t) for t in (q, k, v)]
        q, k, v = (AttentionTensorContainer(t) for t in (q, k, v))
        out = optimized_attention(q, k, v, self.heads, attn_precision=None,
                                  preferred_attention=self.comfy_attention,
                                  transformer_options=transformer_options)
        return self.to_out(out)


class H3AttentionStandIn(torch.nn.Module):
    """MiniMax H3 Attention.forward: x [S, hidden]; q, k, v [1, H, S, D] views of one qkv."""

    def __init__(self, heads, head_dim):
        super().__init__()
        self.comfy_attention = ComfyAttention()
        self.heads, self.head_dim = heads, head_dim
        self.qkv_proj = torch.nn.Linear(heads * head_dim, 3 * heads * head_dim, bias=False)
        self.out_proj = torch.nn.Linear(heads * head_dim, heads * head_dim, bias=False)

    def forward(self, x, transformer_options={}):
        s = x.shape[0]
        q, k, v = self.qkv_proj(x).split(self.heads * self.head_dim, dim=-1)
        q, k, v = (t.reshape(s, self.heads, self.head_dim) for t in (q, k, v))
        q = AttentionTensorContainer(q.transpose(0, 1).unsqueeze(0))
        k = AttentionTensorContainer(k.transpose(0, 1).unsqueeze(0))
        v = AttentionTensorContainer(v.transpose(0, 1).unsqueeze(0))
        out = optimized_attention(q, k, v, self.heads, preferred_attention=self.comfy_attention,
                                  mask=None, skip_reshape=True,
                                  transformer_options=transformer_options)
        return self.out_proj(out.squeeze(0))


@pytest.fixture(autouse=True)
def _clean():
    CALLS.clear()
    ca.reset_declines()
    yield


def _to(mode=None, previous=None):
    return {"optimized_attention_override": ca.chain(previous, mode)}


def _spy_modes(monkeypatch):
    """The modes qmm.attention is called with from now on (the calls still run)."""
    seen = []
    real = qmm.attention
    has = qmm.has_attention()

    def spy(*a, **kw):
        seen.append(kw.get("mode"))
        return real(*a, **kw) if has else kw["out"].zero_()
    monkeypatch.setattr(qmm, "attention", spy)
    monkeypatch.setattr(qmm, "has_attention", lambda: True)
    return seen


def _qkv(shape, dtype=torch.float32):
    g = torch.Generator().manual_seed(SEED)
    return [torch.randn(shape, generator=g).to(dtype) for _ in range(3)]


# ---------------------------------------------------------------- containers
@needs_attention
@pytest.mark.parametrize("mode", ["f32", "best", "int8"])
@pytest.mark.parametrize("layout", ["bhsd", "bhsd_out", "bsd", "bsd_out"])
def test_container_path_is_the_plain_paths_bits(mode, layout):
    """The same call through containers (container_function) and as tensors (0.30's protocol:
    override(func, ...)) gives the same bits."""
    skip_reshape = layout.startswith("bhsd")
    skip_out = layout.endswith("_out")
    B, H, S, D = 2, 4, 37, 64
    q, k, v = _qkv((B, H, S, D) if skip_reshape else (B, S, H * D), torch.bfloat16)
    to = _to(mode)
    kw = dict(skip_reshape=skip_reshape, skip_output_reshape=skip_out, transformer_options=to)
    plain = optimized_attention(q, k, v, H, **kw)
    cont = optimized_attention(*map(AttentionTensorContainer, (q, k, v)), H, **kw)
    assert torch.equal(plain, cont) and plain.dtype == cont.dtype == q.dtype
    assert CALLS == [] and ca.declines() == {}


@needs_attention
def test_container_path_frees_qkv_before_the_output_is_returned(monkeypatch):
    """A CrossAttention that keeps no reference to q, k, v: during the kernel the containers are
    empty (the kernel's arguments hold the tensors), and q, k, v are gone when the override's
    container_function hands the output back to wrap_attn."""
    layer = CrossAttentionStandIn(256, 4)
    override = ca.chain(None, "best")
    seen = {}
    real = qmm.attention

    def kernel(*a, **kw):
        seen["alive in kernel"] = [r() is not None for r in layer.refs]
        return real(*a, **kw)
    monkeypatch.setattr(qmm, "attention", kernel)

    class Observed:                     # the override, observed where wrap_attn gets the output
        def __call__(self, func, *a, **kw):
            return override(func, *a, **kw)

        def container_function(self, *a, **kw):
            out = override.container_function(*a, **kw)
            seen["emptied"] = [c.tensor is None for c in a[:3]]
            seen["alive at return"] = [r() is not None for r in layer.refs]
            return out
    x = torch.randn(2, 19, 256)
    with torch.no_grad():
        y = layer(x, transformer_options={"optimized_attention_override": Observed()})
        want = layer(x, transformer_options=_to("best"))    # the same layer, not observed
    assert seen == {"alive in kernel": [True] * 3, "emptied": [True] * 3,
                    "alive at return": [False] * 3}
    assert torch.equal(y, want) and CALLS == []


@needs_attention
def test_container_path_with_the_caller_keeping_references():
    """A caller that keeps its own q, k, v (and reads them afterwards) loses nothing: they stay
    alive and unchanged, only the containers are emptied."""
    q, k, v = _qkv((1, 2, 16, 32))
    keep = [t.clone() for t in (q, k, v)]
    cs = [AttentionTensorContainer(t) for t in (q, k, v)]
    out = optimized_attention(*cs, 2, skip_reshape=True, transformer_options=_to("f32"))
    assert all(c.tensor is None for c in cs)
    assert all(torch.equal(a, b) for a, b in zip((q, k, v), keep))
    assert torch.equal(out, optimized_attention(q, k, v, 2, skip_reshape=True,
                                                transformer_options=_to("f32")))


def test_declined_before_the_kernel_hands_on_full_containers(monkeypatch):
    """A call qmm does not take (D > 256) goes on with the containers untouched: to ComfyUI's
    optimized_attention (no func in this protocol), whose own container_function frees them its
    way; to a previous override's container_function."""
    got = []

    def kitchen_like(*args, **kwargs):   # a default with a container_function of its own
        got.append([c.tensor is not None for c in args[:3]])
        return _sub_quad(*(c.take() for c in args[:3]), *args[3:], **kwargs)
    default = newer_wrap_attn(_sub_quad)
    default.container_function = kitchen_like
    import sys
    import types
    mod = types.ModuleType("comfy.ldm.modules.attention")
    mod.optimized_attention = default
    monkeypatch.setitem(sys.modules, "comfy.ldm.modules.attention", mod)
    q, k, v = _qkv((1, 2, 5, 300))
    cs = [AttentionTensorContainer(t) for t in (q, k, v)]
    out = optimized_attention(*cs, 2, skip_reshape=True, transformer_options=_to())
    assert got == [[True] * 3] and all(c.tensor is None for c in cs)
    assert torch.equal(out, ca.sdpa_attention(q, k, v, 2, skip_reshape=True))
    assert "D = 300 > 256" in next(iter(ca.declines()))

    class Previous:
        def __call__(self, func, *a, **kw):
            raise AssertionError("the container protocol calls container_function")

        def container_function(self, *a, **kw):
            got.append(["previous"] + [c.tensor is not None for c in a[:3]])
            return _sub_quad(*(c.take() for c in a[:3]), *a[3:], **kw)
    cs = [AttentionTensorContainer(t) for t in (q, k, v)]
    optimized_attention(*cs, 2, skip_reshape=True, transformer_options=_to(None, Previous()))
    assert got[-1] == ["previous", True, True, True]


def test_declined_without_comfyui_and_by_the_library(monkeypatch):
    """Without ComfyUI loaded, a declined container call runs torch SDPA on the tensors; a
    refusal by the library (after the containers were emptied) hands the tensors on."""
    q, k, v = _qkv((1, 2, 5, 300))
    out = optimized_attention(*map(AttentionTensorContainer, (q, k, v)), 2, skip_reshape=True,
                              transformer_options=_to())
    assert torch.equal(out, ca.sdpa_attention(q, k, v, 2, skip_reshape=True)) and CALLS == []

    def refuse(*a, **kw):
        raise qmm.QmmError(qmm._lib.ERR_NO_ENGINE, "no engine admits attention D=16 here")
    monkeypatch.setattr(qmm, "attention", refuse)
    monkeypatch.setattr(qmm, "has_attention", lambda: True)
    q, k, v = _qkv((1, 2, 5, 16))
    cs = [AttentionTensorContainer(t) for t in (q, k, v)]
    out = optimized_attention(*cs, 2, skip_reshape=True, transformer_options=_to())
    assert all(c.tensor is None for c in cs)
    assert torch.equal(out, ca.sdpa_attention(q, k, v, 2, skip_reshape=True))
    assert any("QMM_ERR_NO_ENGINE" in r for r in ca.declines())


# ---------------------------------------------------------------- per-layer requests
def test_layer_request_comfy_kitchen_int8_runs_mode_int8(monkeypatch):
    """MiniMax H3 layers on a CPU model: the one whose ComfyAttention asks for
    comfy_kitchen_int8 (function None: the kitchen does not run on a CPU) runs qmm's mode int8,
    the other the override's own mode; int8 gives way as mode int8 does; a fixed mode wins."""
    monkeypatch.setattr(ca, "_INT8_HERE", [False])           # auto is "best" here
    seen = _spy_modes(monkeypatch)
    model = torch.nn.ModuleDict({"asks": H3AttentionStandIn(2, 32),
                                 "plain": H3AttentionStandIn(2, 32)})
    model["asks"].comfy_attention.load({"attention": "comfy_kitchen_int8", "version": 1})
    assert ca.layer_request(model["asks"].comfy_attention) == "comfy_kitchen_int8"
    assert model["asks"].comfy_attention.function is None
    assert ca.bind_layers(model) == 2 and ca.bind_layers(model) == 2
    assert len(model["asks"]._forward_pre_hooks) == 1          # hooked once
    x = torch.randn(9, 64)
    with torch.no_grad():
        model["asks"](x, transformer_options=_to())
        model["plain"](x, transformer_options=_to())
        model["asks"](x, transformer_options=_to("f32"))        # the node's / QMM_ATTENTION's
    assert seen == ["int8", "best", "f32"] and CALLS == []
    assert ca.current_layer() is None
    seen.clear()                        # the plain protocol (tensors, 0.30's call) alike
    with torch.no_grad():
        ca._enter_layer(model["asks"], ())
        try:
            q = torch.randn(1, 2, 9, 32)
            optimized_attention(q, q, q, 2, skip_reshape=True, transformer_options=_to())
            optimized_attention(q, q, q, 2, skip_reshape=True, transformer_options=_to(),
                                low_precision_attention=False)
        finally:
            ca._leave_layer(model["asks"], (), None)
    assert seen == ["int8", "best"]


def test_layer_hooks_pop_on_an_exception():
    layer = H3AttentionStandIn(2, 32)
    ca.bind_layers(layer)
    with pytest.raises(RuntimeError):
        layer(torch.randn(9, 65))                               # a wrong width
    assert ca.current_layer() is None


def test_layer_with_its_own_function(monkeypatch):
    """A layer whose ComfyAttention has a function: a request qmm has no kernel for goes to it
    (with the containers, as wrap_attn hands them to it); a comfy_kitchen_int8 call qmm
    declines (here: a head dim above 256) goes to it, where without override wrap_attn runs
    it; without qmm's override, the stand-in runs it (wrap_attn's rule)."""
    got = []

    def layer_fn(*args, **kwargs):
        got.append((type(args[0]).__name__, kwargs.get("_inside_attn_wrapper")))
        t = [a.take() if isinstance(a, AttentionTensorContainer) else a for a in args[:3]]
        return _sub_quad(*t, *args[3:], **kwargs)
    layer = H3AttentionStandIn(2, 32)
    ca.bind_layers(layer)
    layer.comfy_attention.config = {"attention": "some_future_method"}
    layer.comfy_attention.function = layer_fn
    x = torch.randn(9, 64)
    with torch.no_grad():
        layer(x, transformer_options=_to())
        assert got == [("AttentionTensorContainer", True)] and ca.declines() == {}
        layer(x, transformer_options={})                      # no override: ComfyUI's own rule
        assert got[-1] == ("AttentionTensorContainer", True)
    big = H3AttentionStandIn(2, 300)
    ca.bind_layers(big)
    big.comfy_attention.load({"attention": "comfy_kitchen_int8"}, kitchen_runs_here=True,
                             kitchen_function=layer_fn)
    with torch.no_grad():
        big(torch.randn(5, 600), transformer_options=_to())
    assert got[-1] == ("AttentionTensorContainer", True)
    (reason, n), = ca.declines().items()
    assert "D = 300 > 256" in reason and n == 1


# ---------------------------------------------------------------- the node on a newer ComfyUI
def test_node_binds_cpu_models_layers(monkeypatch):
    """The node's default on a newer ComfyUI stand-in: a CPU model's ComfyAttention layers are
    hooked when its ModelPatcher is made, and the node's patch hooks the model it enables."""
    import test_comfy_attention as t030
    monkeypatch.delenv("QMM_ATTENTION", raising=False)
    attn, mp = t030._fake_comfyui(monkeypatch)
    attn.wrap_attn = newer_wrap_attn
    attn.AttentionTensorContainer = AttentionTensorContainer
    attn.ComfyAttention = ComfyAttention
    node = t030._import_node("qmm_comfyui_newer1")

    class Base(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.diffusion_model = torch.nn.ModuleList([H3AttentionStandIn(2, 32)])
    cpu_model, gpu_model = Base(), Base()
    cpu = mp.ModelPatcher(cpu_model, torch.device("cpu"), torch.device("cpu"))
    f = cpu.model_options["transformer_options"][ca.KEY]
    assert ca.is_qmm(f) and callable(f.container_function)
    assert cpu_model in ca._BOUND and ca._BOUND[cpu_model] == 1
    gpu = mp.ModelPatcher(gpu_model, torch.device("cuda", 0), torch.device("cpu"))
    assert gpu_model not in ca._BOUND
    on, = node.NODE_CLASS_MAPPINGS["QmmAttention"]().patch(gpu, enabled=True)
    assert gpu_model in ca._BOUND
