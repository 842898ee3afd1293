"""W4A8 / W6A8 (comfy-kitchen's AsymW4A8Int8Layout, w4a8_int8_linear) on backend qmm (SPEC §11).

  DECODE  bit-identical: the int8 values qmm multiplies (qmm_weight_int8_rows of the borrowed
          weight) equal the kitchen's _dequant_int4_grouped_to_int8 on every element — the
          arithmetic (an fp32 product, round half to even, clamp) is CPU-independent; weights
          from the kitchen's own quantizer (4 bits with the frozen or a fitted codebook or none,
          6 bits) and raw random codes with every finite e4m3 scale byte.
  LINEAR  backend qmm vs backend eager on the same tensors, under SPEC §1a's rules exactly as
          test_kitchen_parity.py states them for int8_linear (W4A8 is int8_linear on the decoded
          weight with s_channel as its scale, always with ConvRot): EXACT where the rotation is
          order-independent and input_act is none, else BOUND (exactness.linear_bound on the
          decoded weight; the activation bound for input_act), every rotation case in each of
          exactness.TORCH_ORDERS.
  DECLINE a correction (asymmetric W4A8), NaN scales, s_channel not fp32: eager runs the call.
"""
import pytest
import torch

import comfy_kitchen as ck
from comfy_kitchen.backends.eager import w4a8_int8 as E
from comfy_kitchen.tensor.w4a8_packed import _pack_codes

import qmm
from exactness import TORCH_ORDERS, linear_bound, use_torch_order
from test_kitchen_parity import DT, check, exact_expected, row_scales

N = 80
F8 = torch.float8_e4m3fn


def eager(*a, **kw):
    with ck.use_backend("eager"):
        return ck.w4a8_int8_linear(*a, **kw)


def on_qmm(*a, **kw):
    qmm.reset_counters()
    y = ck.w4a8_int8_linear(*a, **kw)
    c = qmm.counters()["linear"]
    assert sum(c["calls"].values()) == 1 and c["fallbacks"] == 0, c
    return y


def decoded(qd, s_rel, s_ch, cb, gsz):
    K = s_rel.shape[1] * gsz
    bits = qd.shape[1] * 8 // K
    h = qmm.Weight.borrow_w4a8(qd, qd.shape[0], K, bits, s_rel,
                               "f32" if s_rel.dtype == torch.float32 else "f8_e4m3", gsz, s_ch,
                               codebook=cb, convrot_gs=0)
    return torch.frombuffer(h.int8_rows(), dtype=torch.int8).view(qd.shape[0], K).clone()


def quantized(K, bits=4, codebook=True, gsz=16, gs=256, heavy=False, scale_dtype=F8):
    w = torch.randn(N, K)
    if heavy:
        w = w * torch.rand(N, K).pow(8) * 10
    qd, s_rel, s_ch, corr, cb = E.quantize_w4a8_int8_weight(
        w, group_size=gsz, convrot_groupsize=gs, codebook=codebook, bits=bits,
        scale_dtype=scale_dtype)
    assert corr is None
    return qd, s_rel, s_ch, cb


@pytest.mark.parametrize("bits,codebook,heavy", [(4, True, False), (4, True, True),
                                                 (4, False, False), (6, False, False)])
@pytest.mark.parametrize("gsz", [4, 8, 16, 32, 64])
@pytest.mark.parametrize("scale_dtype", ["f8", "f32"])
def test_decode_bits_kitchen_quantizer(bits, codebook, heavy, gsz, scale_dtype):
    if bits == 6 and gsz % 16:
        pytest.skip("6-bit storage needs a group of a multiple of 16")
    qd, s_rel, s_ch, cb = quantized(512, bits, codebook, gsz, 256, heavy,
                                    F8 if scale_dtype == "f8" else torch.float32)
    ref = E._dequant_int4_grouped_to_int8(qd, s_rel, cb, gsz)
    got = decoded(qd, s_rel, s_ch, cb, gsz)
    diff = (got != ref).sum().item()
    print("W%dA8 group %d %s: %d of %d values differ" % (bits, gsz, scale_dtype, diff, ref.numel()))
    assert diff == 0


@pytest.mark.parametrize("bits", [4, 6])
def test_decode_bits_raw_codes(bits):
    # every code, every finite e4m3 scale byte (both signs), a codebook with x.5 products
    K, gsz = 256, 16
    codes = torch.randint(0, 1 << bits, (N, K), dtype=torch.int32)
    qd = _pack_codes(codes, bits)
    raw = torch.randint(0, 254, (N, K // gsz), dtype=torch.int32)
    raw = torch.where((raw & 0x7F) == 0x7F, raw - 1, raw).to(torch.uint8)
    s_rel = raw.view(F8)
    s_ch = torch.rand(N) + 0.1
    cbs = [None]
    if bits == 4:
        cbs.append(torch.linspace(-1, 1, 16) * 2.5 + torch.tensor([0.5, -0.5] * 8))
    for cb in cbs:
        ref = E._dequant_int4_grouped_to_int8(qd, s_rel, cb, gsz)
        got = decoded(qd, s_rel, s_ch, cb, gsz)
        assert torch.equal(got, ref), (bits, cb is not None, (got != ref).sum().item())


def groups_and_orders(groups):
    return [(g, o) for g in groups for o in TORCH_ORDERS]


def case(dt, M, K, act=None, outliers=True):
    kin = 2 * K if act in ("swiglu", "situ") else K
    x = torch.randn(M, kin)
    if outliers:
        x[:, 5] *= 60.0
        x[:, kin // 3] *= -25.0
    return x.to(dt)


@pytest.mark.parametrize("gs,order", groups_and_orders([16, 64, 256]))
@pytest.mark.parametrize("x_dtype", ["f32", "bf16", "f16"])
@pytest.mark.parametrize("M", [1, 7, 64, 300])
@pytest.mark.parametrize("bits", [4, 6])
def test_w4a8_linear_parity(kitchen, monkeypatch, bits, M, x_dtype, gs, order):
    use_torch_order(monkeypatch, order)
    dt = DT[x_dtype]
    K = 512
    qd, s_rel, s_ch, cb = quantized(K, bits, bits == 4, 16, gs)
    w8 = E._dequant_int4_grouped_to_int8(qd, s_rel, cb, 16)
    for bias, out in ((True, dt), (False, None)):  # ComfyUI passes x's dtype; the default is bf16
        x = case(dt, M, K)
        b = torch.randn(N) if bias else None
        kw = dict(codebook=cb, bias=b, group_size=16, convrot_groupsize=gs)
        if out is not None:
            kw["out_dtype"] = out
        y = on_qmm(x, qd, s_rel, s_ch, **kw)
        ye = eager(x, qd, s_rel, s_ch, **kw)
        check(y, ye, exact_expected(x, None, gs), row_scales(x, None, None, 0, gs), s_ch,
              "w4a8_int8_linear W%dA8 %s M=%d gs=%d (%s) bias %s out %s" % (
                  bits, x_dtype, M, gs, order, bias, out),
              rot=(linear_bound(x, gs, w8, s_ch), b))


@pytest.mark.parametrize("order", TORCH_ORDERS)
def test_w4a8_linear_exact_rotation(kitchen, monkeypatch, order):
    # activations whose rotation is order-independent (small integers times a power of 2): bits
    use_torch_order(monkeypatch, order)
    K = 256
    qd, s_rel, s_ch, cb = quantized(K, 4, True, 16, 64)
    for dt in (torch.bfloat16, torch.float16, torch.float32):
        x = (torch.randint(-8, 9, (9, K)).float() * 0.25).to(dt)
        assert exact_expected(x, None, 64)
        b = torch.randn(N)
        ye = eager(x, qd, s_rel, s_ch, codebook=cb, bias=b, group_size=16,
                   convrot_groupsize=64, out_dtype=dt)
        y = on_qmm(x, qd, s_rel, s_ch, codebook=cb, bias=b, group_size=16,
                   convrot_groupsize=64, out_dtype=dt)
        assert torch.equal(y, ye), (dt, order)


@pytest.mark.parametrize("act", ["swiglu", "rms_norm", "gelu_tanh"])
@pytest.mark.parametrize("x_dtype", ["f32", "bf16"])
def test_w4a8_linear_input_act_residual(kitchen, act, x_dtype):
    dt = DT[x_dtype]
    K = 256
    qd, s_rel, s_ch, cb = quantized(K, 4, True, 16, 256)
    for M in (1, 33):
        x = case(dt, M, K, act).reshape(1, M, -1)
        aw = (torch.rand(K) + 0.5).to(dt) if act == "rms_norm" else None
        res = torch.randn(1, M, N).to(dt)
        rs = torch.rand(N).to(dt)
        kw = dict(codebook=cb, group_size=16, convrot_groupsize=256, out_dtype=dt,
                  input_act=act, input_act_weight=aw, input_act_eps=1e-6, residual=res,
                  residual_scale=rs)
        y = on_qmm(x, qd, s_rel, s_ch, **kw)
        ye = eager(x, qd, s_rel, s_ch, **kw)
        # an activation's last bit, then the rotation: the activation bound, times the residual scale
        s_r = row_scales(x.reshape(M, -1), act, aw, 1e-6, 256)
        d = (y.float() - ye.float()).abs().reshape(M, N)
        bound = 2 * (2.0 ** -7 if dt == torch.bfloat16 else 2.0 ** -23) * (
            ye.float().abs().reshape(M, N) + res.float().abs().reshape(M, N)) + \
            (4 * 127 * s_r * s_ch.abs().max()).unsqueeze(1) * rs.float().abs().max() * 8
        print("w4a8 act %s %s M=%d: max|diff| %.3g" % (act, x_dtype, M, d.max().item()))
        assert (d <= bound).all()


def test_w4a8_declines(kitchen):
    K = 256
    qd, s_rel, s_ch, cb = quantized(K, 4, True, 16, 256)
    x = torch.randn(3, K)
    kitchen.reset_declines()
    # a correction term (asymmetric W4A8): eager dequantizes and runs F.linear
    corr = torch.randn(K // 16, N)
    qmm.reset_counters()
    y = ck.w4a8_int8_linear(x, qd, s_rel, s_ch, codebook=cb, correction=corr, group_size=16,
                            convrot_groupsize=256, out_dtype=torch.float32)
    assert sum(qmm.counters()["linear"]["calls"].values()) == 0
    ye = eager(x, qd, s_rel, s_ch, codebook=cb, correction=corr, group_size=16,
               convrot_groupsize=256, out_dtype=torch.float32)
    assert torch.equal(y, ye)
    # a NaN group scale: refused by qmm_weight_borrow_w4a8, eager runs it
    bad = s_rel.clone()
    bad.view(torch.uint8)[3, 2] = 0x7F
    qmm.reset_counters()
    ck.w4a8_int8_linear(x, qd, bad, s_ch, codebook=cb, group_size=16, convrot_groupsize=256,
                        out_dtype=torch.float32)
    assert sum(qmm.counters()["linear"]["calls"].values()) == 0
    reasons = " | ".join(r for (f, r) in kitchen.declines() if f == "w4a8_int8_linear")
    assert "correction" in reasons and "s_rel[3][2]" in reasons, reasons
    with pytest.raises(ValueError, match="correction"):
        kitchen.w4a8_int8_linear(x, qd, s_rel, s_ch, cb, corr)


def test_w4a8_quantized_tensor_and_in_place_change(kitchen):
    # ComfyUI's path: a QuantizedTensor of AsymW4A8Int8Layout through F.linear, and a write to
    # the codes between calls is seen by the next call (borrowed: no copy)
    from comfy_kitchen.tensor.base import QuantizedTensor
    K = 256
    w = torch.randn(N, K)
    qdata, params = ck.tensor.w4a8_int8.AsymW4A8Int8Layout.quantize(w, group_size=16,
                                                                    convrot_groupsize=64)
    qt = QuantizedTensor(qdata, "AsymW4A8Int8Layout", params)
    x = (torch.randint(-8, 9, (5, K)).float() * 0.25)
    qmm.reset_counters()
    y = torch.nn.functional.linear(x, qt)
    assert sum(qmm.counters()["linear"]["calls"].values()) == 1
    with ck.use_backend("eager"):
        ye = torch.nn.functional.linear(x, qt)
    assert torch.equal(y, ye)
    qdata[7].bitwise_not_()
    y2 = torch.nn.functional.linear(x, qt)
    with ck.use_backend("eager"):
        ye2 = torch.nn.functional.linear(x, qt)
    assert torch.equal(y2, ye2) and not torch.equal(y2, y)


def test_w4a8_configure_and_dual_inputs_go_to_eager(kitchen):
    """The int8 path's rules hold for W4A8 too: a kind planned before qmm.configure() took the
    int8 engines away is declined to eager afterwards (no QMM_ERR_NO_ENGINE /
    FALLBACK_REFUSED out of the kitchen), and a dual tensor of forward-mode AD (x, or the
    layout's s_channel) is declined so that eager keeps its tangent."""
    from torch.autograd import forward_ad as fwAD
    K = 256
    qd, s_rel, s_ch, cb = quantized(K, 4, True, 16, 256)
    x = torch.randn(3, K)
    kw = dict(codebook=cb, group_size=16, convrot_groupsize=256, out_dtype=torch.float32)
    ye = eager(x, qd, s_rel, s_ch, **kw)
    on_qmm(x, qd, s_rel, s_ch, **kw)                       # the kind is planned
    try:
        for opts in ({"max_isa": 0, "fallback": "strict"}, {"max_isa": 0},
                     {"disabled_engines": sum(1 << e["id"] for e in qmm._lib.ENGINES
                                              if e["kind"] == qmm._lib.KIND_INT8)}):
            qmm.configure(**opts)
            qmm.reset_counters()
            y = ck.w4a8_int8_linear(x, qd, s_rel, s_ch, **kw)
            assert qmm.counters()["linear"]["calls"] == {}, opts
            assert torch.equal(y, ye), opts
            qmm.configure(max_isa=-1, fallback="allow", disabled_engines=0)
    finally:
        qmm.configure(max_isa=-1, fallback="allow", disabled_engines=0)
    on_qmm(x, qd, s_rel, s_ch, **kw)
    tx, ts = torch.randn(3, K), torch.randn(N)
    for dual_x in (True, False):
        with fwAD.dual_level():
            xd = fwAD.make_dual(x, tx) if dual_x else x
            sd = s_ch if dual_x else fwAD.make_dual(s_ch, ts)
            kitchen.reset_declines()
            qmm.reset_counters()
            y = ck.w4a8_int8_linear(xd, qd, s_rel, sd, **kw)
            assert qmm.counters()["linear"]["calls"] == {}
            t = fwAD.unpack_dual(y).tangent
            with ck.use_backend("eager"):
                te = fwAD.unpack_dual(ck.w4a8_int8_linear(xd, qd, s_rel, sd, **kw)).tangent
        assert t is not None and torch.equal(t, te)
        assert any(r.startswith(("x" if dual_x else "s_channel") + ": is a dual tensor")
                   for _, r in kitchen.declines()), kitchen.declines()
