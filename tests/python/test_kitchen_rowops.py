"""comfy-kitchen's fused row ops on CPU tensors after qmm.kitchen.register()
(qmm.kitchen.rowops on qmm_rope and qmm_rms_mod, SPEC §13), each against the kitchen's eager
backend:
  - the rotation-only ops (apply_rope(1)(_), apply_rope_split_half(1)(_)): bit for bit, over every
    x dtype × freqs dtype, [B, H, S, D] with freqs broadcast over heads and [B, S, H, D] over batch
    and heads, D with vector tails, freqs longer than x on dim 2 (eager's trim), q/k strided
    slices of one packed qkv, in place;
  - the RMSNorm + rotation ops (rms_rope(1)(_), rms_rope_split_half(1)(_), rot_dim): within a
    bound, |qmm − eager| ≤ BOUND_ULPS ulps of the coarser of x's and freqs' dtypes at the row's
    largest |value| (torch sums the squares in its own order and has its own rsqrt);
  - rms_adaln and rms_gated_residual (scale/shift, gate broadcast over tokens or not): the same
    bound (the modulation after the RMSNorm is torch's ops, rounded as they round);
every call made through the registry with backend "qmm" named, so a decline fails the test.
Then what qmm declines (with the kitchen's reason logged, eager running it) and that the H3
shape runs in place.
"""
import pytest
import torch

from conftest import SEED  # noqa: F401

ck = pytest.importorskip("comfy_kitchen")
from comfy_kitchen.backends.eager import rope as E  # noqa: E402
from comfy_kitchen.registry import registry  # noqa: E402

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
BOUND_ULPS = 4
EPS_OF = {torch.float32: 2.0 ** -23, torch.bfloat16: 2.0 ** -7, torch.float16: 2.0 ** -10}


@pytest.fixture(scope="module")
def kit(kitchen):
    from qmm.kitchen import rowops
    if rowops.available():
        pytest.skip(rowops.available())
    return kitchen


def on_qmm(func, **kw):
    """func through the kitchen's registry with backend qmm named: a decline raises."""
    return registry.get_implementation(func, backend="qmm", kwargs=kw)(**kw)


def shapes(layout, B, H, S, D, rot=None):
    rot = rot or D
    if layout == "BHSD":
        return (B, H, S, D), (B, 1, S, rot // 2, 2, 2)
    return (B, S, H, D), (1, S, 1, rot // 2, 2, 2)


def same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.view(torch.uint8) if a.dtype == torch.float32 else a, b.view(torch.uint8) if b.dtype == torch.float32 else b) or \
        bool(((a == b) | (a.isnan() & b.isnan())).all())


def ulps(out, ref, x_dtype, f_dtype):
    """max over rows of max|out − ref| / (eps of the coarser dtype · max|ref| of the row)."""
    eps = max(EPS_OF[x_dtype], EPS_OF[f_dtype])
    d = (out.double() - ref.double()).abs().amax(-1)
    m = ref.double().abs().amax(-1).clamp_min(1e-30)
    return (d / (eps * m)).max().item()


ROT_CASES = [("BHSD", 2, 3, 5, 128), ("BSHD", 1, 7, 4, 64), ("BSHD", 2, 3, 3, 6), ("BHSD", 1, 2, 3, 130)]


@pytest.mark.parametrize("dt", DTYPES, ids=str)
@pytest.mark.parametrize("fdt", DTYPES, ids=str)
@pytest.mark.parametrize("split", [False, True], ids=["interleaved", "split_half"])
@pytest.mark.parametrize("case", ROT_CASES, ids=lambda c: "%s-%dx%dx%dx%d" % c)
def test_apply_rope_bit_identical(kit, dt, fdt, split, case):
    layout, B, H, S, D = case
    xs, fs = shapes(layout, B, H, S, D)
    q = torch.randn(xs).to(dt) * 3
    k = torch.randn(xs).to(dt)
    f = torch.randn(fs).to(fdt)
    base = "apply_rope_split_half" if split else "apply_rope"
    eq, ek = getattr(E, base)(q, k, f)
    oq, ok = on_qmm(base, xq=q, xk=k, freqs_cis=f)
    assert same_bits(oq, eq) and same_bits(ok, ek)
    o1 = on_qmm(base + "1", x=q, freqs_cis=f)
    assert same_bits(o1, eq)
    qi, ki = q.clone(), k.clone()
    on_qmm(base + "_", xq=qi, xk=ki, freqs_cis=f)
    assert same_bits(qi, eq) and same_bits(ki, ek)
    x1 = q.clone()
    on_qmm(base + "1_", x=x1, freqs_cis=f)
    assert same_bits(x1, eq)


def test_apply_rope_trim_and_packed_qkv(kit):
    """freqs longer than x on dim 2 (eager trims them); q and k strided views of one packed qkv
    [B, S, 3, H, D], in place (the rest of the buffer untouched)."""
    x = torch.randn(2, 4, 5, 64)
    f = torch.randn(2, 1, 9, 32, 2, 2)
    assert same_bits(on_qmm("apply_rope1", x=x, freqs_cis=f), E.apply_rope1(x, f))
    qkv = torch.randn(2, 6, 3, 4, 128)
    q, k, v = qkv.unbind(2)
    f2 = torch.randn(1, 6, 1, 64, 2, 2)
    eq, ek = E.apply_rope(q, k, f2)
    v0 = v.clone()
    on_qmm("apply_rope_", xq=q, xk=k, freqs_cis=f2)
    assert same_bits(q, eq) and same_bits(k, ek) and torch.equal(v, v0)
    assert same_bits(on_qmm("apply_rope_split_half1", x=eq, freqs_cis=f2),
                     E.apply_rope_split_half1(eq, f2))


RMS_CASES = [("BHSD", 1, 3, 5, 128, 0), ("BSHD", 2, 4, 3, 128, 0), ("BSHD", 1, 3, 4, 64, 32),
             ("BHSD", 1, 2, 3, 6, 0)]


@pytest.mark.parametrize("dt", DTYPES, ids=str)
@pytest.mark.parametrize("fdt", DTYPES, ids=str)
@pytest.mark.parametrize("wdt", ["same", torch.float32], ids=["w_same", "w_f32"])
@pytest.mark.parametrize("split", [False, True], ids=["interleaved", "split_half"])
@pytest.mark.parametrize("case", RMS_CASES, ids=lambda c: "%s-%dx%dx%dx%d-rot%d" % c)
def test_rms_rope_within_bound(kit, dt, fdt, wdt, split, case):
    layout, B, H, S, D, rot = case
    if rot and not split:
        pytest.skip("rot_dim: split-half ops only (the kitchen's signature)")
    xs, fs = shapes(layout, B, H, S, D, rot)
    wd = dt if wdt == "same" else wdt
    q = (torch.randn(xs) * 4).to(dt)
    k = torch.randn(xs).to(dt)
    f = torch.randn(fs).to(fdt)
    qs = (torch.rand(D) + 0.5).to(wd)
    ks = (torch.randn(D)).to(wd)
    base = "rms_rope_split_half" if split else "rms_rope"
    kw = {"rot_dim": rot} if split else {}
    eq, ek = getattr(E, base)(q, k, f, qs, ks, 1e-6, **kw)
    oq, ok = on_qmm(base, q=q, k=k, freqs_cis=f, q_scale=qs, k_scale=ks, epsilon=1e-6, **kw)
    worst = max(ulps(oq, eq, dt, fdt), ulps(ok, ek, dt, fdt))
    qi, ki = q.clone(), k.clone()
    on_qmm(base + "_", q=qi, k=ki, freqs_cis=f, q_scale=qs, k_scale=ks, epsilon=1e-6, **kw)
    assert torch.equal(qi, oq) and torch.equal(ki, ok), "in place differs from out of place"
    if not rot:
        e1 = getattr(E, base + "1")(q, f, qs, 1e-6)
        o1 = on_qmm(base + "1", x=q, freqs_cis=f, scale=qs, epsilon=1e-6)
        assert torch.equal(o1, oq)
        x1 = q.clone()
        on_qmm(base + "1_", x=x1, freqs_cis=f, scale=qs, epsilon=1e-6)
        assert torch.equal(x1, oq)
        worst = max(worst, ulps(o1, e1, dt, fdt))
    print("max |qmm - eager| / (eps · row max): %.3g" % worst)
    assert worst <= BOUND_ULPS


def test_rms_rope_k_scale_none(kit):
    q, k = torch.randn(1, 8, 3, 64), torch.randn(1, 8, 2, 64)  # GQA: fewer k heads
    f = torch.randn(1, 8, 1, 32, 2, 2)
    s = torch.rand(64) + 0.5
    eq, ek = E.rms_rope_split_half(q, k, f, s)
    oq, ok = on_qmm("rms_rope_split_half", q=q, k=k, freqs_cis=f, q_scale=s, k_scale=None,
                    epsilon=1e-6, rot_dim=0)
    assert ulps(oq, eq, q.dtype, f.dtype) <= BOUND_ULPS and ulps(ok, ek, k.dtype, f.dtype) <= BOUND_ULPS


def test_h3_shape_in_place(kit):
    """H3's call (q, k [1, S, 56, 128] f32, freqs [1, S, 1, 64, 2, 2], in place), at S = 64."""
    q, k = torch.randn(1, 64, 56, 128), torch.randn(1, 64, 56, 128)
    f = torch.randn(1, 64, 1, 64, 2, 2)
    s1, s2 = torch.rand(128) + 0.5, torch.rand(128) + 0.5
    eq, ek = E.rms_rope_split_half(q, k, f, s1, s2, 1e-6)
    kit.reset_declines()
    ck.rms_rope_split_half_(q, k, f, s1, s2, 1e-6)
    assert not kit.declines()
    assert ulps(q, eq, q.dtype, f.dtype) <= BOUND_ULPS and ulps(k, ek, k.dtype, f.dtype) <= BOUND_ULPS


def _declined(kit, func, why, **kw):
    kit.reset_declines()
    r = registry.validate_backend_for_call("qmm", func, kw)
    assert not r.success and why in "%s: %s" % (r.failed_param, r.failure_reason), r
    assert any(f == func for f, _ in kit.declines())


def test_declines(kit):
    x, f = torch.randn(1, 4, 2, 8), torch.randn(1, 4, 1, 4, 2, 2)
    s = torch.rand(8)
    _declined(kit, "apply_rope1", "head dim", x=torch.randn(1, 4, 2, 7), freqs_cis=f)
    _declined(kit, "apply_rope1", "needs shape", x=x, freqs_cis=torch.randn(1, 4, 1, 3, 2, 2))
    _declined(kit, "apply_rope1", "does not broadcast", x=x, freqs_cis=torch.randn(1, 3, 1, 4, 2, 2))
    _declined(kit, "apply_rope1", "contiguous last", x=torch.randn(1, 4, 8, 2).transpose(-1, -2),
              freqs_cis=f)
    _declined(kit, "apply_rope1", "more than 3", x=torch.randn(3, 4, 5, 6, 8).permute(1, 0, 3, 2, 4),
              freqs_cis=torch.randn(4, 2, 2))
    _declined(kit, "apply_rope1", "head dim", x=torch.randn(1, 2, 2048), freqs_cis=torch.randn(1024, 2, 2))
    _declined(kit, "rms_rope1", "needs shape [8]", x=x, freqs_cis=f, scale=torch.rand(4), epsilon=1e-6)
    _declined(kit, "rms_rope_split_half", "rot_dim", q=x, k=x, freqs_cis=f, q_scale=s, k_scale=s,
              epsilon=1e-6, rot_dim=3)
    g = x.clone().requires_grad_()
    _declined(kit, "apply_rope1", "requires grad", x=g, freqs_cis=f)
    _declined(kit, "apply_rope1_", "requires grad", x=g, freqs_cis=f)
    with torch.no_grad():
        assert registry.validate_backend_for_call("qmm", "apply_rope1", {"x": g, "freqs_cis": f}).success
    _declined(kit, "apply_rope_", "overlap", xq=x, xk=x, freqs_cis=f)
    # a declined call still runs, on eager: its result, and its errors
    y = torch.randn(1, 4, 2, 6)
    fy = torch.randn(1, 4, 1, 3, 2, 2).bfloat16()
    assert torch.equal(ck.apply_rope1(y.permute(3, 2, 1, 0).contiguous().permute(3, 2, 1, 0), fy), E.apply_rope1(y.permute(3, 2, 1, 0).contiguous().permute(3, 2, 1, 0), fy))
    with pytest.raises(ValueError):
        ck.apply_rope_(x, x, f)  # eager's own error


def test_direct_call_refuses(kit):
    with pytest.raises(ValueError, match="head dim"):
        kit.apply_rope1(torch.randn(2, 7), torch.randn(3, 2, 2))


MOD_CASES = [((2, 64, 3072), (2, 1, 3072)), ((1, 5, 7, 130), (130,)), ((3, 4, 9), (3, 4, 9)),
             ((2, 3, 4, 16), (2, 1, 4, 16)), ((4, 1), (1,))]


@pytest.mark.parametrize("dt", DTYPES, ids=str)
@pytest.mark.parametrize("case", MOD_CASES, ids=lambda c: "x%s-m%s" % (list(c[0]), list(c[1])))
def test_rms_adaln_and_gated_residual_within_bound(kit, dt, case):
    """rms_adaln and rms_gated_residual against eager: the modulation bit for bit, the RMSNorm
    within the rms_rope bound (the elements torch and qmm give the same x̂ are equal)."""
    from comfy_kitchen.backends.eager.adaln import rms_adaln
    from comfy_kitchen.backends.eager.residual import rms_gated_residual
    xs, ms = case
    x = (torch.randn(xs) * 3).to(dt)
    s, h = (torch.randn(ms) * 0.3).to(dt), torch.randn(ms).to(dt)
    out = on_qmm("rms_adaln", x=x, scale=s, shift=h, eps=1e-6)
    ref = rms_adaln(x, s, h, 1e-6)
    assert out.shape == ref.shape and out.dtype == ref.dtype
    w1 = ulps(out, ref, dt, dt)
    w = torch.randn(xs[-1]).to(dt)
    res, g = torch.randn(xs).to(dt), torch.randn(ms).to(dt)
    out2 = on_qmm("rms_gated_residual", activation=x, norm_weight=w, residual=res, gate=g, eps=1e-5)
    ref2 = rms_gated_residual(x, w, res, g, 1e-5)
    assert out2.shape == ref2.shape and out2.dtype == ref2.dtype
    w2 = ulps(out2, ref2, dt, dt)
    print("rms_adaln %.3g, rms_gated_residual %.3g (eps · row max)" % (w1, w2))
    assert w1 <= BOUND_ULPS and w2 <= BOUND_ULPS
    # with torch's own x̂, the modulation is eager's bit for bit
    n = torch.rms_norm(x, (xs[-1],), eps=1e-6)
    assert torch.equal(n * (1 + s) + h, ref)


def test_rms_mod_declines(kit):
    x = torch.randn(2, 4, 8)
    s, h = torch.randn(2, 1, 8), torch.randn(2, 1, 8)
    _declined(kit, "rms_adaln", "dtype", x=x, scale=s.bfloat16(), shift=h, eps=1e-6)
    _declined(kit, "rms_adaln", "last dimension", x=x, scale=torch.randn(2, 1, 1), shift=h, eps=1e-6)
    _declined(kit, "rms_adaln", "does not broadcast", x=x, scale=torch.randn(3, 1, 8), shift=h, eps=1e-6)
    _declined(kit, "rms_adaln", "requires grad", x=x.clone().requires_grad_(), scale=s, shift=h, eps=1e-6)
    _declined(kit, "rms_gated_residual", "norm_weight", activation=x, norm_weight=torch.randn(4),
              residual=x, gate=s, eps=1e-5)
    # declined calls run on eager
    from comfy_kitchen.backends.eager.adaln import rms_adaln
    s1 = torch.randn(2, 1, 1)
    assert torch.equal(ck.rms_adaln(x, s1, h, 1e-6), rms_adaln(x, s1, h, 1e-6))
