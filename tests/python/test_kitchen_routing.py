"""Routing: with the backend registered, the kitchen's own entry points on CPU tensors run on
qmm (its counters move, zero fallbacks); a call qmm declines runs on eager, and the reason is
in the kitchen's dispatch log (logger comfy_kitchen.dispatch)."""
import logging

import pytest
import torch

import comfy_kitchen as ck
from comfy_kitchen.registry import registry
from comfy_kitchen.tensor.base import QuantizedTensor
from comfy_kitchen.tensor.int8 import TensorWiseINT8Layout

import qmm
from exactness import linear_bound, rotation_is_exact


def _layer(N=64, K=256):
    w = torch.randint(-127, 128, (N, K), dtype=torch.int8)
    s = torch.rand(N, 1) * 0.01 + 1e-3
    return w, s


def test_registered_first_for_cpu(kitchen):
    assert registry.get_capable_backend("int8_linear") == "qmm"     # first for the function
    assert kitchen.is_registered()
    caps = ck.list_backends()["qmm"]["capabilities"]
    for f in ("int8_linear", "int8_linear_modulated", "int8_linear_rms_modulated",
              "dequantize_int8_convrot_weight"):
        assert f in caps


def test_public_int8_linear_runs_on_qmm(kitchen):
    w, s = _layer()
    x = torch.randn(2, 9, 256, dtype=torch.bfloat16)
    qmm.reset_counters()
    y = ck.int8_linear(x, w, s, None, torch.bfloat16)
    y2 = torch.ops.comfy_kitchen.int8_linear(x, w, s, None, 2, False, 256)
    c = qmm.counters()["linear"]
    assert sum(c["calls"].values()) == 2 and c["fallbacks"] == 0 and c["errors"] == 0
    assert set(c["calls"]) <= set(qmm.int8_engines_available())
    assert y.shape == (2, 9, 64) and torch.equal(y, y2)


def test_comfyui_int8_layer_runs_on_qmm(kitchen):
    # what ComfyUI does: F.linear with a TensorWiseINT8Layout weight, convrot g = 64
    w, s = _layer(96, 512)
    params = TensorWiseINT8Layout.Params(scale=s, orig_dtype=torch.bfloat16, orig_shape=(96, 512),
                                         convrot=True, convrot_groupsize=64)
    qt = QuantizedTensor(w, "TensorWiseINT8Layout", params)
    x = torch.randn(1, 33, 512, dtype=torch.bfloat16)
    bias = torch.randn(96, dtype=torch.bfloat16)
    qmm.reset_counters()
    y = torch.nn.functional.linear(x, qt, bias)
    y_act = TensorWiseINT8Layout.linear_input_act(qt, torch.randn(1, 33, 1024).bfloat16(),
                                                  input_act="swiglu")
    c = qmm.counters()["linear"]
    assert sum(c["calls"].values()) == 2 and c["fallbacks"] == 0
    with ck.use_backend("eager"):
        ye = torch.nn.functional.linear(x, qt, bias)
    assert y_act.shape == (1, 33, 96)
    if rotation_is_exact(x, 64):             # SPEC §1a: bits only where no fp32 order matters
        assert torch.equal(y, ye)
    else:
        bound = linear_bound(x, 64, w, s) + 2 ** -6 * (ye.float().abs() + bias.float().abs())
        assert ((y.float() - ye.float()).abs() <= bound.reshape(ye.shape)).all()


def test_declined_call_goes_to_eager_with_reason_logged(kitchen, caplog):
    w, s = _layer()
    wt = w.t().contiguous().t()            # same values, column stride 64: qmm declines it
    x = torch.randn(5, 256, dtype=torch.bfloat16)
    kitchen.reset_declines()
    qmm.reset_counters()
    with caplog.at_level(logging.DEBUG, logger="comfy_kitchen.dispatch"):
        y = ck.int8_linear(x, wt, s, None, torch.bfloat16)
    assert sum(qmm.counters()["linear"]["calls"].values()) == 0
    text = caplog.text
    assert "Backend qmm declines int8_linear (weight: needs rows of K=256 contiguous int8 " \
           "values (column stride 1, row stride >= K, not empty)" in text
    assert "Backend eager selected for int8_linear" in text
    assert any("weight" in r for (_, r) in kitchen.declines())
    with ck.use_backend("eager"):
        assert torch.equal(y, ck.int8_linear(x, w, s, None, torch.bfloat16))


def test_layer_no_int8_engine_admits_is_declined(kitchen, caplog):
    # K beyond the int8 engines' exact-accumulator limit: qmm would run it W8A16 (a fallback),
    # so the kitchen's eager backend gets it, with qmm's own reasons in the log
    N, K = 8, 131072
    w = torch.randint(-127, 128, (N, K), dtype=torch.int8)
    s = torch.rand(N) * 1e-4
    x = torch.randn(1, K, dtype=torch.bfloat16)
    qmm.reset_counters()
    with caplog.at_level(logging.DEBUG, logger="comfy_kitchen.dispatch"):
        y = ck.int8_linear(x, w, s, None, torch.bfloat16)
    assert qmm.counters()["linear"]["calls"] == {} and qmm.counters()["linear"]["fallbacks"] == 0
    assert "no int8 engine admits [8, 131072]" in caplog.text
    assert y.shape == (1, N)


def test_decline_logged_at_info_once(kitchen, caplog):
    w, s = _layer()
    x = torch.randn(3, 256, dtype=torch.bfloat16, requires_grad=True)
    kitchen.reset_declines()
    with caplog.at_level(logging.INFO, logger="comfy_kitchen.dispatch"):
        for _ in range(3):
            ck.int8_linear(x, w, s, None, torch.bfloat16)
    infos = [r for r in caplog.records if "qmm declines" in r.getMessage()]
    assert len(infos) == 1 and "autograd" in infos[0].getMessage()
    assert list(kitchen.declines().values()) == [3]


def test_unregister_and_register_again(kitchen):
    w, s = _layer()
    x = torch.randn(2, 256, dtype=torch.bfloat16)
    kitchen.unregister()
    try:
        qmm.reset_counters()
        ck.int8_linear(x, w, s, None, torch.bfloat16)
        assert qmm.counters()["linear"]["calls"] == {}
    finally:
        kitchen.register()
    ck.int8_linear(x, w, s, None, torch.bfloat16)
    assert sum(qmm.counters()["linear"]["calls"].values()) == 1


def test_fused_rms_modulated_layout_path_runs_on_qmm(kitchen):
    # ComfyUI's TensorWiseINT8Layout.fused_rms_modulated first asks the registry whether a
    # native backend would take int8_linear_rms_modulated (kwargs without weight_scale), then
    # calls it: with qmm registered the answer is qmm, and the call runs there
    from comfy_kitchen.tensor.int8 import _has_native_fusion
    w, s = _layer(64, 256)
    params = TensorWiseINT8Layout.Params(scale=s, orig_dtype=torch.bfloat16, orig_shape=(64, 256),
                                         convrot=True, convrot_groupsize=16)
    qt = QuantizedTensor(w, "TensorWiseINT8Layout", params)
    x = torch.randn(1, 12, 256, dtype=torch.bfloat16)
    nw = (torch.rand(256) + 0.5).bfloat16()
    mod = (torch.randn(256) * 0.2).bfloat16()
    assert _has_native_fusion("int8_linear_rms_modulated", {
        "x": x, "norm_weight": nw, "modulation_scale": mod, "weight": w, "out_dtype": x.dtype})
    qmm.reset_counters()
    y = TensorWiseINT8Layout.fused_rms_modulated(x, qt, None, nw, 1e-6, mod)
    assert y is not NotImplemented and y.shape == (1, 12, 64)
    assert sum(qmm.counters()["linear"]["calls"].values()) == 1


def test_register_keeps_the_users_priority(kitchen):
    """register() puts qmm first and leaves the other backends in the order in force (the
    user's set_backend_priority(), not a copy of the kitchen's default); priority= gives one."""
    try:
        ck.set_backend_priority(["eager", "triton"])      # a user's order
        kitchen.register()
        assert kitchen._current_priority() == ["qmm", "eager", "triton"]
        kitchen.register(first=False)
        assert kitchen._current_priority() == ["eager", "triton", "qmm"]
        kitchen.register(priority=["triton", "cuda", "eager"])
        assert kitchen._current_priority() == ["qmm", "triton", "cuda", "eager"]
        kitchen.unregister()
        assert kitchen._current_priority() == ["triton", "cuda", "eager"]
        with pytest.raises(ValueError, match="priority"):
            kitchen.register(priority="eager")
    finally:
        ck.set_backend_priority(list(kitchen.KITCHEN_ORDER))
        kitchen.register()


def test_convrot_hadamard_is_the_kitchens():
    """The rotation qmm recognizes (qmm.kitchen.quantize.convrot_hadamard) is the matrix the
    kitchen's quantizers build (its private _build_hadamard, read here in the test only)."""
    from comfy_kitchen.tensor.int8_utils import _build_hadamard
    from qmm.kitchen.quantize import convrot_hadamard
    for g in (4, 16, 64, 256, 1024):
        assert torch.equal(convrot_hadamard(g), _build_hadamard(g, "cpu", torch.float32)), g


def test_linear_call_is_the_public_hot_path(kitchen):
    """qmm.linear_call runs a filled LinearArgs on the process context (what the kitchen's hot
    path calls) and raises QmmError on a refused call."""
    N, K, M = 32, 64, 3
    w8 = torch.randint(-127, 128, (N, K), dtype=torch.int8)
    sc = torch.full((N,), 0.01)
    w = qmm.Weight.int8(w8.data_ptr(), N, K, sc.data_ptr(), N, name="lc")
    x = torch.randn(M, K, dtype=torch.bfloat16)
    y = torch.empty(M, N, dtype=torch.bfloat16)
    a = qmm.linear_args(M, "bf16", "bf16")
    a.x, a.y = x.data_ptr(), y.data_ptr()
    qmm.linear_call(w, a, torch.get_num_threads())
    ref = torch.empty_like(y)
    a.y = ref.data_ptr()
    w.linear(a)
    assert torch.equal(y, ref)
    a.M = 0
    with pytest.raises(qmm.QmmError):
        qmm.linear_call(w.ptr, a)


# ---------------------------------------------------------------- qmm.configure() after a plan
def _int8_engine_mask():
    return sum(1 << e["id"] for e in qmm._lib.ENGINES if e["kind"] == qmm._lib.KIND_INT8)


@pytest.fixture
def reconfigured():
    """Runs the test, then puts the process context's options back to the defaults."""
    yield
    qmm.configure(max_isa=-1, fallback="allow", disabled_engines=0)


def test_configure_moves_the_generation_only_on_a_change(reconfigured):
    g = qmm.generation()
    qmm.configure(max_isa=-1, fallback="allow", disabled_engines=0)   # the defaults: no change
    assert qmm.generation() == g
    qmm.configure(max_isa=0)
    assert qmm.generation() == g + 1
    qmm.configure(max_isa=0)
    assert qmm.generation() == g + 1


@pytest.mark.parametrize("options", [{"disabled_engines": "int8"}, {"max_isa": 0},
                                     {"max_isa": 0, "fallback": "strict"},
                                     {"disabled_engines": "int8", "fallback": "strict"}])
def test_configure_after_a_kind_was_planned_declines_to_eager(kitchen, reconfigured, options,
                                                              caplog):
    """A layer kind planned (and run) before qmm.configure() took the int8 engines away is
    planned again: the call is declined to eager (eager's bits, no qmm call, no W8A16 float
    fallback) — never a QMM_ERR_NO_ENGINE / FALLBACK_REFUSED out of the kitchen — and runs on
    qmm again once the options are back."""
    w, s = _layer()
    x = torch.randn(3, 256)
    with ck.use_backend("eager"):
        ye = ck.int8_linear(x, w, s, None, torch.float32)
    assert torch.equal(ck.int8_linear(x, w, s, None, torch.float32), ye)   # planned, on qmm
    opts = dict(options)
    if opts.get("disabled_engines") == "int8":
        opts["disabled_engines"] = _int8_engine_mask()
    qmm.configure(**opts)
    qmm.reset_counters()
    kitchen.reset_declines()
    with caplog.at_level(logging.DEBUG, logger="comfy_kitchen.dispatch"):
        y = ck.int8_linear(x, w, s, None, torch.float32)
    c = qmm.counters()["linear"]
    assert c["calls"] == {} and c["fallbacks"] == 0 and c["errors"] == 0, c
    assert torch.equal(y, ye)
    assert "no int8 engine admits [64, 256]" in caplog.text
    qmm.configure(max_isa=-1, fallback="allow", disabled_engines=0)
    assert torch.equal(ck.int8_linear(x, w, s, None, torch.float32), ye)
    assert sum(qmm.counters()["linear"]["calls"].values()) == 1


def test_configure_between_the_rule_and_the_call_hands_the_call_on(kitchen, reconfigured):
    """The kitchen validates (qmm's call rule accepts), then calls: a qmm.configure() in
    between is seen by the call (checked under the lock configure takes), which is planned
    again, declined, and run by eager — the caller gets eager's result, not a qmm error."""
    from comfy_kitchen.registry import registry
    w, s = _layer()
    x = torch.randn(3, 256)
    kw = {"x": x, "weight": w, "weight_scale": s, "bias": None, "out_dtype": torch.float32}
    with ck.use_backend("eager"):
        ye = ck.int8_linear(**kw)
    for opts in ({"max_isa": 0, "fallback": "strict"},
                 {"disabled_engines": _int8_engine_mask()}):
        impl = registry.get_implementation("int8_linear", kwargs=kw)        # the rule: qmm
        assert impl is kitchen.int8_linear
        qmm.configure(**opts)
        qmm.reset_counters()
        kitchen.reset_declines()
        y = impl(**kw)
        assert torch.equal(y, ye)
        assert qmm.counters()["linear"]["calls"] == {}
        assert any("no int8 engine admits" in r for _, r in kitchen.declines()), kitchen.declines()
        qmm.configure(max_isa=-1, fallback="allow", disabled_engines=0)


def test_library_error_at_call_time_goes_to_eager(kitchen, monkeypatch):
    """A qmm error of the call itself (here: a QmmError the library would raise) on a call the
    kitchen gave qmm is a decline: eager runs it; a direct call of qmm.kitchen.int8_linear gets
    the QmmError."""
    from qmm.kitchen import linear as lin
    w, s = _layer()
    x = torch.randn(3, 256)

    def failing(*a):
        raise qmm.QmmError(qmm._lib.ERR_NO_ENGINE, "no engine (test)", "qmm_linear")
    monkeypatch.setattr(lin, "_call_planned", failing)
    with ck.use_backend("eager"):
        ye = ck.int8_linear(x, w, s, None, torch.float32)
    kitchen.reset_declines()
    assert torch.equal(ck.int8_linear(x, w, s, None, torch.float32), ye)
    assert list(kitchen.declines()) == [("int8_linear",
                                         "qmm_linear: QMM_ERR_NO_ENGINE: no engine (test)")]
    with pytest.raises(qmm.QmmError, match="no engine"):
        kitchen.int8_linear(x, w, s, None, torch.float32)
