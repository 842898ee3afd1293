"""Parity: backend qmm vs backend eager of comfy-kitchen on the same CPU tensors, for every
capability qmm registers. Each case states what it promises, by a rule that does not depend on the
CPU (SPEC §1a; torch's own kernels differ between CPUs, qmm's promise must hold on all of them):

  EXACT  bit-identical outputs: input_act none (optionally modulated), any input dtype, and either
         no rotation or a rotation that `exactness.rotation_is_exact` finds order-independent (no
         fp32 summation order of a group can move a rotated value across a rounding boundary of
         x's dtype). The int8 values, the scales and the kitchen epilogue (scales multiplied
         first, bias added in the output dtype, residual by addcmul in the output dtype) are then
         the same operations in qmm and in torch's AVX2 and AVX-512 kernels.
  BOUND  within  |qmm - eager| <= ulp(out dtype)·|eager| + 4·127·s_r·max|w_scale|  per row r
         (one output ulp of rounding plus four int8 values off by one in the row), where
           - a rotation the rule does not find exact: torch's matmul by H_g sums in another
             order than qmm's fp32 radix-4 transform, and which order depends on the CPU (oneDNN's
             f16 matmul with AVX512-FP16 is an fp32 matmul rounded once; other CPUs differ), so a
             rotated value near a rounding boundary of its dtype can round to the other neighbour;
             f32 inputs with a rotation are nearly always here;
           - swiglu, gelu_tanh, situ, rms_norm: torch's exp/tanh/rsqrt and mean are not qmm's (and
             torch's own differ between its kernels), so an activation may differ in its last bit
             and move one int8 value by 1.
Every rotation case runs the eager side in each of exactness.TORCH_ORDERS (torch's own, the fp32
upcast that AVX512-FP16 CPUs compute, the reversed fp32 sum), so both kinds of CPU are checked on
any machine. The measured worst case and the share of identical elements are printed per case.
f32 comes first in every matrix: ComfyUI sends f32 activations to every INT8 layer on a CPU (also
with --bf16-unet); test_comfyui_cpu_path_f32 is that path on model-sized layers, printing the
measured relative L2 error of qmm and of eager against the float model and qmm's against eager.
"""
import pytest
import torch

import comfy_kitchen as ck
from comfy_kitchen.backends._activations import apply_input_act
from comfy_kitchen.tensor.int8_utils import _build_hadamard, _rotate_activation

import qmm
from exactness import (TORCH_ORDERS, linear_bound, quantized_interval, rotation_is_exact,
                       use_torch_order)

DT = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
ULP = {torch.bfloat16: 2.0 ** -7, torch.float16: 2.0 ** -10, torch.float32: 2.0 ** -23}
N = 80


def exact_expected(a, act, gs):
    """EXACT (True) or BOUND for one case; a is the activation entering the rotation."""
    if act not in (None, "none"):
        return False
    return gs == 0 or rotation_is_exact(a, gs)


def groups_and_orders(groups):
    """(gs, torch order) pairs: every order for a rotation, torch's own without one."""
    return [(g, o) for g in groups for o in (TORCH_ORDERS if g else ["native"])]


def eager(fn, *a, **kw):
    with ck.use_backend("eager"):
        return getattr(ck, fn)(*a, **kw)


def on_qmm(fn, *a, **kw):
    qmm.reset_counters()
    y = getattr(ck, fn)(*a, **kw)
    c = qmm.counters()["linear"]
    assert sum(c["calls"].values()) == 1 and c["fallbacks"] == 0, (fn, c)
    return y


def row_scales(x, act, aw, eps, gs, modulation=None):
    """s_r as the kitchen computes it, for the bound."""
    a = apply_input_act(x, act, aw, eps) if act == "rms_norm" or act not in (None, "none") else x
    if modulation is not None:
        a = a * (1.0 + modulation)
    if gs:
        a = _rotate_activation(a, _build_hadamard(gs, dtype=a.dtype), gs)
    a2 = a.reshape(-1, a.shape[-1])
    return (a2.abs().amax(dim=-1).float() / 127.0).clamp(min=1e-30)


def check(y, ye, exact, s_r, ws, label, rot=None):
    """rot: for a rotation without input_act, (bound, mass): exactness.linear_bound (times the
    residual scale) and what the output adds after it (bias or residual); the promise is then
    that bound plus two output ulps of |eager| + |mass|. Otherwise the module docstring's bound."""
    assert y.shape == ye.shape and y.dtype == ye.dtype, label
    d = (y.float() - ye.float()).abs().reshape(-1, y.shape[-1])
    same = (d == 0).float().mean().item()
    print("%s: max|diff| %.3g, identical %.4f%%, promise %s" % (label, d.max().item(),
                                                               100 * same,
                                                               "EXACT" if exact else "BOUND"))
    if exact:
        assert torch.equal(y, ye), "%s: not bit-identical (max %g)" % (label, d.max().item())
        return
    if rot is not None:
        lin, mass = rot
        mass = 0 if mass is None else mass.float().abs().reshape(-1, d.shape[1])
        bound = lin.reshape(d.shape) + 2 * ULP[y.dtype] * (ye.float().abs().reshape(d.shape) + mass)
    else:
        bound = ULP[y.dtype] * ye.float().abs().reshape(d.shape) + \
            (4 * 127 * s_r * ws.float().abs().max()).unsqueeze(1)
    bad = d > bound
    assert not bad.any(), "%s: %d elements past the bound, first at %s" % (
        label, int(bad.sum()), tuple(bad.nonzero()[0].tolist()))


def make(x_dtype, M, K, act, scale_shape, bias, outliers=True):
    w = torch.randint(-127, 128, (N, K), dtype=torch.int8)
    ws = torch.rand(N) * 0.02 + 1e-3
    ws = {"N1": ws.reshape(N, 1), "N": ws, "scalar": ws[0].clone().reshape(())}[scale_shape]
    b = torch.randn(N) if bias else None
    kin = 2 * K if act in ("swiglu", "situ") else K
    x = torch.randn(M, kin)
    if outliers:
        x[:, 5] *= 60.0
        x[:, kin // 3] *= -25.0
    return x.to(x_dtype), w, ws, b


@pytest.mark.parametrize("gs,order", groups_and_orders([0, 4, 16, 64, 256, 1024]))
@pytest.mark.parametrize("x_dtype", ["f32", "bf16", "f16"])
@pytest.mark.parametrize("M", [1, 7, 64, 300])
def test_int8_linear_shapes_groups(kitchen, monkeypatch, x_dtype, M, gs, order):
    use_torch_order(monkeypatch, order)
    dt = DT[x_dtype]
    K = 1024 if gs == 1024 else 256
    for scale_shape, bias in (("N1", True), ("N", False), ("scalar", True)):
        x, w, ws, b = make(dt, M, K, None, scale_shape, bias)
        kw = dict(convrot=gs > 0, convrot_groupsize=gs or 256)
        for out in (dt, None):           # ComfyUI passes x's dtype; the kitchen's default is bf16
            y = on_qmm("int8_linear", x, w, ws, b, out, **kw)
            ye = eager("int8_linear", x, w, ws, b, out, **kw)
            check(y, ye, exact_expected(x, None, gs), row_scales(x, None, None, 0, gs), ws,
                  "int8_linear %s M=%d gs=%d (%s) scale %s bias %s out %s" % (
                      x_dtype, M, gs, order, scale_shape, bias, out),
                  rot=(linear_bound(x, gs, w, ws), b) if gs else None)


@pytest.mark.parametrize("gs,order", groups_and_orders([0, 64, 256]))
@pytest.mark.parametrize("M", [1, 2, 256, 1024])
def test_comfyui_cpu_path_f32(kitchen, monkeypatch, M, gs, order):
    # ComfyUI on a CPU: f32 activations and outputs, a bias, per-row scales, K = 3072
    use_torch_order(monkeypatch, order)
    Nl, K = 96, 3072
    x, w, ws, b = make(torch.float32, M, K, None, "N1", True)
    w = torch.randint(-127, 128, (Nl, K), dtype=torch.int8)
    ws, b = ws[:1].expand(Nl, 1).contiguous() * (1 + torch.rand(Nl, 1)), torch.randn(Nl)
    kw = dict(convrot=gs > 0, convrot_groupsize=gs or 256)
    y = on_qmm("int8_linear", x, w, ws, b, torch.float32, **kw)
    ye = eager("int8_linear", x, w, ws, b, torch.float32, **kw)
    # the float model: the dequantized weight (rotated back) times x in f64
    wf = w.double() * ws.double()
    if gs:
        h = _build_hadamard(gs, dtype=torch.float64)
        wf = (wf.reshape(Nl, K // gs, gs) @ h.T).reshape(Nl, K)
    yf = x.double() @ wf.T + b.double()

    def rel(a, ref):
        return ((a.double() - ref).norm() / ref.norm()).item()
    print("f32 M=%d gs=%d (%s): rel L2 qmm-eager %.3g, qmm-float %.3g, eager-float %.3g" % (
        M, gs, order, rel(y, ye.double()), rel(y, yf), rel(ye, yf)))
    check(y, ye, exact_expected(x, None, gs), row_scales(x, None, None, 0, gs), ws,
          "int8_linear f32 (ComfyUI CPU) M=%d gs=%d (%s)" % (M, gs, order),
          rot=(linear_bound(x, gs, w, ws), b) if gs else None)


@pytest.mark.parametrize("act", ["gelu_tanh", "swiglu", "situ", "rms_norm"])
@pytest.mark.parametrize("x_dtype", ["f32", "bf16", "f16"])
@pytest.mark.parametrize("gs,order", groups_and_orders([0, 16, 256]))
def test_int8_linear_input_acts(kitchen, monkeypatch, act, x_dtype, gs, order):
    use_torch_order(monkeypatch, order)
    dt = DT[x_dtype]
    for M in (1, 64):
        x, w, ws, b = make(dt, M, 256, act, "N1", M == 64)
        aw = (torch.rand(256) + 0.5).to(dt if M == 1 else torch.float32) if act == "rms_norm" \
            else None
        kw = dict(convrot=gs > 0, convrot_groupsize=gs or 256, input_act=act,
                  input_act_weight=aw, input_act_eps=1e-6)
        y = on_qmm("int8_linear", x, w, ws, b, dt, **kw)
        ye = eager("int8_linear", x, w, ws, b, dt, **kw)
        check(y, ye, exact_expected(x, act, gs), row_scales(x, act, aw, 1e-6, gs), ws,
              "int8_linear act %s %s M=%d gs=%d (%s)" % (act, x_dtype, M, gs, order))


@pytest.mark.parametrize("x_dtype", ["f32", "bf16", "f16"])
@pytest.mark.parametrize("rs_shape", ["N", "1"])
@pytest.mark.parametrize("order", TORCH_ORDERS)
def test_int8_linear_residual(kitchen, monkeypatch, x_dtype, rs_shape, order):
    use_torch_order(monkeypatch, order)
    dt = DT[x_dtype]
    for M, gs, bias in ((7, 0, True), (64, 64, False), (1, 16, True)):
        x, w, ws, b = make(dt, M, 256, None, "N1", bias)
        x = x.reshape(1, M, 256)
        res = torch.randn(1, M, N).to(dt)
        rscale = (torch.rand(N) if rs_shape == "N" else torch.rand(1)).to(dt)
        kw = dict(convrot=gs > 0, convrot_groupsize=gs or 256, residual=res, residual_scale=rscale)
        y = on_qmm("int8_linear", x, w, ws, b, dt, **kw)
        ye = eager("int8_linear", x, w, ws, b, dt, **kw)
        check(y, ye, exact_expected(x, None, gs), row_scales(x, None, None, 0, gs), ws,
              "int8_linear residual %s M=%d gs=%d (%s) rs %s" % (x_dtype, M, gs, order, rs_shape),
              rot=(linear_bound(x, gs, w, ws) * rscale.float().abs(), res) if gs else None)


@pytest.mark.parametrize("x_dtype", ["f32", "bf16", "f16"])
@pytest.mark.parametrize("gs,order", groups_and_orders([0, 64]))
def test_int8_linear_modulated(kitchen, monkeypatch, x_dtype, gs, order):
    use_torch_order(monkeypatch, order)
    dt = DT[x_dtype]
    for M in (1, 7, 300):
        x, w, ws, b = make(dt, M, 256, None, "N", M != 7)
        mod = (torch.randn(256) * 0.3).to(dt)
        kw = dict(convrot=gs > 0, convrot_groupsize=gs or 256)
        y = on_qmm("int8_linear_modulated", x, mod, w, ws, b, dt, **kw)
        ye = eager("int8_linear_modulated", x, mod, w, ws, b, dt, **kw)
        xm = x * (1.0 + mod)                # the kitchen's modulation, in x's dtype
        check(y, ye, exact_expected(xm, None, gs), row_scales(x, None, None, 0, gs, modulation=mod),
              ws, "int8_linear_modulated %s M=%d gs=%d (%s)" % (x_dtype, M, gs, order),
              rot=(linear_bound(xm, gs, w, ws), b) if gs else None)


@pytest.mark.parametrize("x_dtype", ["f32", "bf16", "f16"])
@pytest.mark.parametrize("gs,order", groups_and_orders([0, 256]))
def test_int8_linear_rms_modulated(kitchen, monkeypatch, x_dtype, gs, order):
    use_torch_order(monkeypatch, order)
    dt = DT[x_dtype]
    for M in (1, 64):
        x, w, ws, b = make(dt, M, 256, None, "scalar", M == 1)
        nw = (torch.rand(256) + 0.5).to(dt)
        mod = (torch.randn(256) * 0.3).to(dt)
        kw = dict(convrot=gs > 0, convrot_groupsize=gs or 256)
        y = on_qmm("int8_linear_rms_modulated", x, nw, 1e-6, mod, w, ws, b, dt, **kw)
        ye = eager("int8_linear_rms_modulated", x, nw, 1e-6, mod, w, ws, b, dt, **kw)
        normed = torch.nn.functional.rms_norm(x, (256,), nw, 1e-6)
        check(y, ye, False, row_scales(normed, None, None, 0, gs, modulation=mod), ws,
              "int8_linear_rms_modulated %s M=%d gs=%d (%s)" % (x_dtype, M, gs, order))


def test_f16_tiny_rows_follow_the_kitchen(kitchen):
    # f16 rows whose scale underflows in f16 (amax < ~3.8e-6) quantize to 0: y = bias (SPEC §1a)
    x, w, ws, b = make(torch.float16, 8, 256, None, "N1", True, outliers=False)
    x[1] = (torch.randn(256) * 1e-7).half()
    x[2] = 0
    y = on_qmm("int8_linear", x, w, ws, b, torch.float16)
    ye = eager("int8_linear", x, w, ws, b, torch.float16)
    assert torch.equal(y, ye)
    assert torch.equal(y[1], b.half()) and torch.equal(y[2], b.half())


# ---------------------------------------------------------------- quantize / dequantize
def _quant_case(fn, *a):
    from comfy_kitchen.registry import registry
    kw = {"x": a[0]} if fn != "quantize_int8_convrot_weight" else {"weight": a[0]}
    assert registry.get_capable_backend(fn, kw | ({"group_size": a[1]} if len(a) > 1 else {})) \
        == "qmm", "%s is not routed to qmm" % fn


@pytest.mark.parametrize("x_dtype", ["f32", "bf16", "f16"])
def test_quantize_int8_rowwise(kitchen, x_dtype):
    dt = DT[x_dtype]
    x = (torch.randn(3, 37, 256) * 4).to(dt)
    x[0, 0] = 0
    _quant_case("quantize_int8_rowwise", x)
    q, s = ck.quantize_int8_rowwise(x)
    qe, se = eager("quantize_int8_rowwise", x)
    assert torch.equal(q, qe) and torch.equal(s, se)     # EXACT: the kitchen's rule


@pytest.mark.parametrize("x_dtype", ["f32", "bf16", "f16"])
@pytest.mark.parametrize("scale", [None, "recalculate", 0.05, "tensor"])
def test_quantize_int8_tensorwise(kitchen, x_dtype, scale):
    dt = DT[x_dtype]
    x = (torch.randn(64, 96) * 3).to(dt)
    sc = torch.tensor(0.02) if scale == "tensor" else scale
    _quant_case("quantize_int8_tensorwise", x)
    q, s = ck.quantize_int8_tensorwise(x, sc)
    qe, se = eager("quantize_int8_tensorwise", x, sc)
    assert torch.equal(q, qe) and torch.equal(s, se) and s.shape == se.shape


def check_quantized(q, s, qe, se, a, gs, label):
    """The kitchen's rotate-and-quantize of a (rows of its last dimension) on qmm and on eager:
    EXACT when the rotation is (the same int8 values and scales), else BOUND: both sides' int8
    values and scales inside exactness.quantized_interval."""
    exact = rotation_is_exact(a, gs)
    dq = (q.int() - qe.int()).abs().max().item()
    print("%s: max|dq| %d, scales max rel %.3g, promise %s" % (
        label, dq, ((s - se).abs() / se.abs().clamp(min=1e-30)).max().item(),
        "EXACT" if exact else "BOUND"))
    if exact:
        assert torch.equal(q, qe) and torch.equal(s, se), label
        return
    q_min, q_max, s_lo, s_hi = quantized_interval(a, gs)
    for side, (qq, ss) in (("qmm", (q, s)), ("eager", (qe, se))):
        qq, ss = qq.reshape(q_min.shape).to(torch.int16), ss.reshape(s_lo.shape)
        assert ((qq >= q_min) & (qq <= q_max)).all(), "%s: %s int8 values outside" % (label, side)
        assert ((ss >= s_lo) & (ss <= s_hi)).all(), "%s: %s scales outside" % (label, side)


@pytest.mark.parametrize("x_dtype", ["f32", "bf16", "f16"])
@pytest.mark.parametrize("gs", [4, 16, 64, 256, 1024])
@pytest.mark.parametrize("order", TORCH_ORDERS)
def test_quantize_and_rotate_rowwise(kitchen, monkeypatch, x_dtype, gs, order):
    from comfy_kitchen.registry import registry
    use_torch_order(monkeypatch, order)
    dt = DT[x_dtype]
    x = torch.randn(33, 1024)
    x[:, 7] *= 50
    x = x.to(dt)
    h = _build_hadamard(gs, dtype=dt)
    assert registry.get_capable_backend("quantize_and_rotate_rowwise",
                                        {"x": x, "h": h, "group_size": gs}) == "qmm"
    impl = registry.get_implementation("quantize_and_rotate_rowwise",
                                       kwargs={"x": x, "h": h, "group_size": gs})
    q, s = impl(x, h, gs)
    with ck.use_backend("eager"):
        qe, se = registry.get_implementation("quantize_and_rotate_rowwise")(x, h, gs)
    check_quantized(q, s, qe, se, x, gs,
                    "quantize_and_rotate_rowwise %s gs=%d (%s)" % (x_dtype, gs, order))
    # a matrix that is not H_g is declined
    bad = h.clone()
    bad[0, 0] = -bad[0, 0]
    assert registry.get_capable_backend("quantize_and_rotate_rowwise",
                                        {"x": x, "h": bad, "group_size": gs}) == "eager"


@pytest.mark.parametrize("w_dtype", ["bf16", "f16", "f32"])
@pytest.mark.parametrize("gs", [16, 64, 256])
@pytest.mark.parametrize("order", TORCH_ORDERS)
def test_quantize_int8_convrot_weight(kitchen, monkeypatch, w_dtype, gs, order):
    use_torch_order(monkeypatch, order)
    dt = DT[w_dtype]
    wf = (torch.randn(96, 512) * 0.05).to(dt)
    _quant_case("quantize_int8_convrot_weight", wf, gs)
    from comfy_kitchen.registry import registry
    q, s = registry.get_implementation("quantize_int8_convrot_weight",
                                       kwargs={"weight": wf, "group_size": gs})(wf, gs)
    with ck.use_backend("eager"):
        qe, se = registry.get_implementation("quantize_int8_convrot_weight")(wf, gs)
    check_quantized(q, s, qe, se, wf, gs,       # W·Hᵀ = W·H (symmetric): the same sums
                    "quantize_int8_convrot_weight %s gs=%d (%s)" % (w_dtype, gs, order))


@pytest.mark.parametrize("gs", [4, 16, 256])
@pytest.mark.parametrize("scale_kind", ["N1", "scalar"])
def test_dequantize_int8_convrot_weight(kitchen, gs, scale_kind):
    # BOUND: qmm un-rotates with the fp32 radix-4 transform, eager with a matmul by H_gᵀ: the
    # same sum of g terms of magnitude <= max|row|/sqrt(g) in another order, so each output is
    # within log2(g)·2^-23 · sqrt(g) · max|row| of eager's (f32 rounding per stage).
    from comfy_kitchen.registry import registry
    q = torch.randint(-127, 128, (64, 1024), dtype=torch.int8)
    s = torch.rand(64, 1) * 0.01 if scale_kind == "N1" else torch.tensor(0.01)
    kw = {"q": q, "scale": s, "group_size": gs}
    assert registry.get_capable_backend("dequantize_int8_convrot_weight", kw) == "qmm"
    y = ck.registry.get_implementation("dequantize_int8_convrot_weight", kwargs=kw)(q, s, gs)
    with ck.use_backend("eager"):
        ye = registry.get_implementation("dequantize_int8_convrot_weight")(q, s, gs)
    rowmax = (q.float() * s).abs().amax(dim=1, keepdim=True)
    bound = (gs.bit_length()) * 2.0 ** -23 * gs ** 0.5 * rowmax
    assert ((y - ye).abs() <= bound).all()
    y16 = torch.ops.comfy_kitchen.dequantize_int8_convrot_weight_dtype(q, s, gs, 2)
    assert y16.dtype == torch.bfloat16 and torch.equal(y16, y.to(torch.bfloat16))


@pytest.mark.parametrize("code", [0, 1, 2])
def test_dequantize_int8_simple(kitchen, code):
    # EXACT: one f32 multiply per element, then one cast, in both backends
    from comfy_kitchen.registry import registry
    q = torch.randint(-128, 128, (300, 70), dtype=torch.int8)
    for s in (torch.rand(300, 1), torch.tensor(0.37), torch.rand(70)):
        kw = {"q": q, "scale": s, "output_dtype_code": code}
        assert registry.get_capable_backend("dequantize_int8_simple_dtype", kw) == "qmm"
        y = torch.ops.comfy_kitchen.dequantize_int8_simple_dtype(q, s, code)
        with ck.use_backend("eager"):
            ye = torch.ops.comfy_kitchen.dequantize_int8_simple_dtype(q, s, code)
        assert torch.equal(y, ye)


@pytest.mark.parametrize("w_dtype", ["bf16", "f32"])
@pytest.mark.parametrize("how,order", [("convrot", o) for o in TORCH_ORDERS] +
                         [("per_channel", "native"), ("tensorwise", "native")])
def test_comfyui_weight_quantization_path(kitchen, monkeypatch, w_dtype, how, order):
    # what ComfyUI calls to quantize a float weight: QuantizedTensor.from_float with the
    # TensorWiseINT8Layout, which dispatches the kitchen's quantize_* functions
    from comfy_kitchen.tensor.base import QuantizedTensor
    use_torch_order(monkeypatch, order)
    wf = (torch.randn(128, 512) * 0.05).to(DT[w_dtype])
    kw = {"convrot": dict(per_channel=True, convrot=True, convrot_groupsize=64),
          "per_channel": dict(per_channel=True), "tensorwise": dict()}[how]
    qt = QuantizedTensor.from_float(wf, "TensorWiseINT8Layout", **kw)
    with ck.use_backend("eager"):
        qe = QuantizedTensor.from_float(wf, "TensorWiseINT8Layout", **kw)
    if how != "convrot":                             # EXACT: no rotation
        assert torch.equal(qt._qdata, qe._qdata)
        assert torch.equal(qt._params.scale, qe._params.scale)
        return
    check_quantized(qt._qdata, qt._params.scale.reshape(-1, 1), qe._qdata,
                    qe._params.scale.reshape(-1, 1), wf, 64,
                    "from_float %s %s (%s)" % (w_dtype, how, order))
