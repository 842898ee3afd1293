"""Every exported function of qmm.kitchen validates what it is given: called directly, a bad
argument raises a ValueError naming it (qmm.kitchen.Refused); through the kitchen, the same
check declines the call and eager runs it (or raises its own error). Never a read outside a
tensor, never a crash. Inputs requiring grad under grad mode are declined, so eager keeps the
autograd graph."""
import pytest
import torch
import torch.nn.functional as F

import comfy_kitchen as ck

import qmm
from qmm import kitchen as K


def _layer(N=64, K_=256):
    return torch.randint(-127, 128, (N, K_), dtype=torch.int8), torch.rand(N, 1) * 0.01 + 1e-3


def _refused(fn, *a, param, needle="", **kw):
    with pytest.raises(K.Refused) as e:
        fn(*a, **kw)
    assert e.value.param == param, (e.value.param, str(e.value))
    assert needle in str(e.value), str(e.value)
    assert isinstance(e.value, ValueError)


def test_direct_int8_linear_rejects_bad_arguments(kitchen):
    w, s = _layer()
    x = torch.randn(3, 256)
    _refused(K.int8_linear, x, w.int(), s, param="weight", needle="int8")
    _refused(K.int8_linear, x, w[:, ::2], s, param="weight", needle="stride")
    _refused(K.int8_linear, x, w, s, torch.randn(10), param="bias", needle="N=64")
    _refused(K.int8_linear, x.double(), w, s, param="x", needle="float64")
    _refused(K.int8_linear, x, w, s.double(), param="weight_scale", needle="float64")
    _refused(K.int8_linear, x, w, torch.rand(10), param="weight_scale", needle="N=64")
    _refused(K.int8_linear, x, w, s, None, torch.int32, param="out_dtype")
    _refused(K.int8_linear, x[:, :100], w, s, param="x", needle="last dimension 100")
    _refused(K.int8_linear, x, w, s, convrot=True, convrot_groupsize=48,
             param="convrot_groupsize")
    _refused(K.int8_linear, x, w, s, input_act="relu", param="input_act")
    _refused(K.int8_linear, torch.empty(0, 256), w, s, param="x", needle="empty")
    _refused(K.int8_linear, x, w, s, residual=torch.randn(3, 63),
             residual_scale=torch.ones(64), param="residual")
    _refused(K.int8_linear, x, w, s, residual_scale=torch.ones(64), param="residual_scale")
    _refused(K.int8_linear_modulated, x, torch.randn(255), w, s, param="modulation_scale")
    _refused(K.int8_linear_rms_modulated, x, torch.ones(256), -1.0, torch.zeros(256), w, s,
             param="norm_eps")


def test_expanded_weight_is_declined_never_read_as_rows(kitchen):
    # row stride 0: every row is the same 64 bytes; read as ld = K it would walk past them
    row = torch.randint(-127, 128, (1, 64), dtype=torch.int8)
    s = torch.rand(64, 1) * 0.01
    wexp = row.expand(64, 64)
    x = torch.randn(2, 64)
    _refused(K.int8_linear, x, wexp, s, param="weight", needle="stride (0, 1)")
    qmm.reset_counters()
    y = ck.int8_linear(x, wexp, s, None, torch.float32)               # eager runs it
    assert qmm.counters()["linear"]["calls"] == {}
    with ck.use_backend("eager"):
        assert torch.equal(y, ck.int8_linear(x, wexp.contiguous(), s, None, torch.float32))
    big = torch.zeros(1, 64, dtype=torch.int8).expand(1 << 24, 64)  # 1 GiB if read as rows
    _refused(K.int8_linear, x, big, torch.ones(1), param="weight")


def test_expanded_and_strided_inputs_are_read_as_torch_sees_them(kitchen):
    w, s = _layer(32, 128)
    xs = {"expanded rows": torch.randn(1, 128).expand(6, 128),
          "column slice": torch.randn(5, 256)[:, ::2],
          "transposed": torch.randn(128, 7).t()}
    sc = {"expanded scale": torch.rand(1, 1).expand(32, 1) * 0.01,
          "strided scale": (torch.rand(32, 2) * 0.01)[:, :1]}
    b = torch.randn(64)[::2]                                         # a strided bias
    for name, x in xs.items():
        for sname, s2 in sc.items():
            y = K.int8_linear(x, w, s2, b, torch.float32)
            with ck.use_backend("eager"):
                ye = ck.int8_linear(x, w, s2, b, torch.float32)
            assert torch.equal(y, ye), (name, sname)             # f32, no rotation: EXACT


def test_grad_inputs_are_declined_and_eager_keeps_the_graph(kitchen):
    w, s = _layer()
    x = torch.randn(3, 256)
    for what in ("bias", "weight_scale", "x"):
        b = torch.randn(64)
        s2, x2 = s.clone(), x.clone()
        {"bias": b, "weight_scale": s2, "x": x2}[what].requires_grad_(True)
        K.reset_declines()
        qmm.reset_counters()
        y = ck.int8_linear(x2, w, s2, b, torch.float32)
        assert qmm.counters()["linear"]["calls"] == {}, what
        assert y.requires_grad and y.grad_fn is not None, what
        assert any(p.startswith(what + ": requires grad") for _, p in K.declines()), K.declines()
        with torch.no_grad():                                   # no grad mode: qmm runs it
            ck.int8_linear(x2, w, s2, b, torch.float32)
        assert sum(qmm.counters()["linear"]["calls"].values()) == 1, what


def test_quantize_and_dequantize_validate(kitchen):
    x = torch.randn(4, 64)
    _refused(K.quantize_int8_rowwise, x.int(), param="x")
    _refused(K.quantize_int8_rowwise, torch.empty(0, 64), param="x", needle="non-empty")
    _refused(K.quantize_int8_rowwise, x, stochastic_rounding=1.5, param="stochastic_rounding")
    _refused(K.quantize_int8_tensorwise, x, "max", param="scale")
    _refused(K.quantize_int8_tensorwise, x, torch.ones(2), param="scale")
    _refused(K.quantize_and_rotate_rowwise, x, torch.eye(16), 16, param="h")
    _refused(K.quantize_int8_convrot_weight, x, 48, param="group_size")
    q = torch.randint(-127, 128, (8, 64), dtype=torch.int8)
    _refused(K.dequantize_int8_simple, q.int(), torch.ones(1), param="q")
    _refused(K.dequantize_int8_simple, q, torch.ones(3), param="scale", needle="broadcast")
    _refused(K.dequantize_int8_simple_dtype, q, torch.ones(1), 7, param="output_dtype_code")
    _refused(K.dequantize_int8_convrot_weight, q, torch.ones(8), 16, param="scale")
    _refused(K.dequantize_int8_convrot_weight, q, torch.ones(8, 1), 12, param="group_size")
    ix = torch.tensor([0, 7, 8])
    _refused(K.dequantize_int8_embedding, q, torch.ones(8, 1), ix, 0, 0, param="indices",
             needle="[0, 8)")
    _refused(K.dequantize_int8_embedding, q, torch.ones(8, 1), ix.float(), 0, 0,
             param="indices")
    _refused(K.dequantize_int8_embedding, q, torch.ones(4, 1), ix[:2], 0, 0, param="scale")


def _tangent_on_both(fn):
    """(tangent of fn() on the kitchen with qmm first, tangent of fn() on eager), both inside
    one forward_ad.dual_level; fn makes its own duals."""
    from torch.autograd import forward_ad as fwAD
    with fwAD.dual_level():
        t = fwAD.unpack_dual(fn()).tangent
        with ck.use_backend("eager"):
            te = fwAD.unpack_dual(fn()).tangent
    return t, te


def test_dual_inputs_are_declined_and_eager_keeps_the_tangent(kitchen):
    """A dual tensor of forward-mode AD requires no grad, so the grad test misses it: the call
    rule declines it by name (qmm computes no tangent) and eager's tangent comes back — through
    forward_ad.make_dual and through torch.func.jvp / jacfwd (functorch's wrappers)."""
    from torch.autograd import forward_ad as fwAD
    w, s = _layer()
    x = torch.randn(3, 256)
    b = torch.randn(64)
    res, rs = torch.randn(3, 64), torch.rand(64)
    for what in ("x", "weight_scale", "bias", "residual", "residual_scale"):
        args = {"x": x, "weight_scale": s, "bias": b, "residual": res, "residual_scale": rs}
        tangent = torch.randn_like(args[what])

        def call():
            a = dict(args)
            a[what] = fwAD.make_dual(a[what], tangent)
            return ck.int8_linear(a["x"], w, a["weight_scale"], a["bias"], torch.float32,
                                  residual=a["residual"], residual_scale=a["residual_scale"])
        K.reset_declines()
        qmm.reset_counters()
        t, te = _tangent_on_both(call)
        assert qmm.counters()["linear"]["calls"] == {}, what
        assert t is not None and torch.equal(t, te), what
        assert any(r.startswith(what + ": is a dual tensor") for _, r in K.declines()), \
            K.declines()
    # functorch: jvp and jacfwd of a function of x
    tx = torch.randn(3, 256)

    def f(x):
        return ck.int8_linear(x, w, s, b, torch.float32)
    qmm.reset_counters()
    y, t = torch.func.jvp(f, (x,), (tx,))
    jac = torch.func.jacfwd(f)(x[:1])
    assert qmm.counters()["linear"]["calls"] == {}
    with ck.use_backend("eager"):
        ye, te = torch.func.jvp(f, (x,), (tx,))
        jace = torch.func.jacfwd(f)(x[:1])
    assert torch.equal(y, ye) and torch.equal(t, te) and torch.equal(jac, jace)
    assert jac.abs().sum() > 0
    # a direct call names the dual argument; outside the dual level qmm runs it again
    with fwAD.dual_level():
        _refused(K.int8_linear, fwAD.make_dual(x, tx), w, s, param="x", needle="dual tensor")
    ck.int8_linear(x, w, s, b, torch.float32)
    assert sum(qmm.counters()["linear"]["calls"].values()) == 1
    # quantize / dequantize: the same rule (eager's dequantize is a custom op that keeps no
    # tangent either; what it does with one is eager's business)
    q8 = torch.randint(-127, 128, (8, 64), dtype=torch.int8)
    sc = torch.rand(8, 1)
    K.reset_declines()
    t, te = _tangent_on_both(lambda: ck.dequantize_int8_simple(
        q8, fwAD.make_dual(sc, torch.ones_like(sc))))
    assert (t is None) == (te is None) and (t is None or torch.equal(t, te))
    assert any(f == "dequantize_int8_simple" and r.startswith("scale: is a dual tensor")
               for f, r in K.declines()), K.declines()
    with fwAD.dual_level():
        _refused(K.dequantize_int8_simple, q8, fwAD.make_dual(sc, torch.ones_like(sc)),
                 param="scale", needle="dual tensor")
        _refused(K.quantize_int8_rowwise, fwAD.make_dual(x, tx), param="x",
                 needle="dual tensor")
