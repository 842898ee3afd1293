"""comfy_kitchen.int8_attention on CPU tensors after qmm.kitchen.register() (the kitchen's own
ops comfy_kitchen::int8_attention / int8_attention_masked, given a CPU kernel by
qmm.kitchen.attention): f32/f16/bf16, GQA, cross-attention, bool and additive masks broadcast
from [S, Skv] and [B, 1, 1, Skv], scale given / None / negative; the result has q's shape and
dtype. Fidelity against SDPA in float64 (relative L2 over the whole output, printed): ≤ 2e-2 on
Gaussian q/k/v; on outlier keys (a few of D channels ×20 — 4 of 128 — and a common offset
+200 on every key) within OUTLIER_RATIO (3×) of the Gaussian case (measured, QMM_TEST_SEED 1234,
1, 2: 1.9-2.6×, the worst a 7-query bf16 case). Bad input gets the
kitchen's error types (ValueError /
TypeError); unregister() removes the kernels (a CPU call raises the kitchen's error again) and
register() brings them back. Skipped where the installed kitchen lacks the ops.
"""
import pytest
import torch

import qmm

from conftest import SEED

ck = pytest.importorskip("comfy_kitchen")
GAUSS_BOUND = 2e-2
OUTLIER_RATIO = 3.0
DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@pytest.fixture(scope="module")
def kit(kitchen):
    st = kitchen.attention_status()
    if st.get("int8_attention") != "installed":
        pytest.skip("kitchen INT8 attention not installed on the CPU: %s" % st)
    return kitchen


def ref64(q, k, v, mask=None, scale=None):
    """SDPA in float64 (torch's math, GQA by repeating the kv heads)."""
    rep = q.shape[1] // k.shape[1]
    kd = k.double().repeat_interleave(rep, dim=1)
    vd = v.double().repeat_interleave(rep, dim=1)
    m = mask if mask is None or mask.dtype == torch.bool else mask.double()
    return torch.nn.functional.scaled_dot_product_attention(q.double(), kd, vd, attn_mask=m,
                                                            scale=scale)


def rel_l2(out, ref):
    return ((out.double() - ref).norm() / ref.norm()).item()


def _qkv(B, H, Hkv, S, Skv, D, dtype, outlier=False, g=None):
    q = torch.randn(B, H, S, D, generator=g)
    k = torch.randn(B, Hkv, Skv, D, generator=g)
    v = torch.randn(B, Hkv, Skv, D, generator=g)
    if outlier:
        ch = torch.randperm(D, generator=g)[:min(4, max(1, D // 32))]
        k[..., ch] *= 20.0          # most of every key's norm in a few of D channels
        k += 200.0                  # a common offset on every key
    return q.to(dtype), k.to(dtype), v.to(dtype)


# B, H, Hkv, S, Skv, D, mask kind, scale
CASES = [
    (1, 4, 4, 64, 64, 64, None, None),
    (2, 8, 2, 37, 53, 128, None, 0.1),            # GQA, cross-attention, a given scale
    (1, 6, 3, 130, 77, 64, "bool_s_skv", None),   # bool mask [S, Skv]
    (2, 4, 1, 16, 200, 128, "add_b11skv", None),  # additive mask [B, 1, 1, Skv]
    (1, 2, 2, 96, 96, 256, "add_s_skv", 0.05),
    (1, 3, 1, 7, 300, 64, "bool_b11skv", None),
    (1, 6, 3, 130, 77, 40, "bool_s_skv", None),
    (2, 4, 1, 16, 200, 72, "add_b11skv", None),
    (1, 3, 1, 7, 300, 16, "bool_b11skv", None),
]


def _mask(kind, B, S, Skv, dtype, g):
    if kind is None:
        return None
    shape = (S, Skv) if kind.endswith("s_skv") else (B, 1, 1, Skv)
    if kind.startswith("bool"):
        m = torch.rand(shape, generator=g) < 0.7
        m[..., 0] = True            # no fully masked row (SDPA gives NaN there, qmm 0)
        return m
    return (torch.randn(shape, generator=g) * 2.0).to(dtype)


def _call(q, k, v, mask, scale):
    out = ck.int8_attention(q, k, v, scale=scale, attn_mask=mask)
    assert out.shape == q.shape and out.dtype == q.dtype and out.device.type == "cpu"
    assert torch.isfinite(out).all()
    return out


def _sweep(cases, outlier):
    """The worst relative L2 against fp64 SDPA over cases × (f32, f16, bf16), each printed."""
    g = torch.Generator().manual_seed(SEED + (1 if outlier else 0))
    worst = 0.0
    for dtype in DTYPES:
        for B, H, Hkv, S, Skv, D, mk, scale in cases:
            q, k, v = _qkv(B, H, Hkv, S, Skv, D, dtype, outlier, g)
            mask = _mask(mk, B, S, Skv, dtype, g)
            e = rel_l2(_call(q, k, v, mask, scale), ref64(q, k, v, mask, scale))
            print("%s %s B%d H%d/%d S%d Skv%d D%d mask=%s scale=%s: rel L2 %.3e" % (
                "outlier" if outlier else "gauss", dtype, B, H, Hkv, S, Skv, D, mk, scale, e))
            worst = max(worst, e)
    return worst


@pytest.fixture(scope="module")
def gauss(kit):
    q, k, v = _qkv(1, 2, 2, 64, 64, 128, torch.float32)
    print("mode int8 runs on: %r" % qmm.attention_plan(q, k, v, mode="int8"))
    return _sweep(CASES, False)


def test_gaussian_fidelity(gauss):
    print("worst relative L2 vs float64 SDPA, gaussian q/k/v: %.3e" % gauss)
    assert gauss <= GAUSS_BOUND


def test_outlier_keys_fidelity(gauss):
    """Held: OUTLIER_RATIO × the Gaussian worst (the scores of outlier keys spread wider and
    their int8 error grows with them; the rotation spreads the channels, it cannot narrow the
    scores)."""
    outl = _sweep(CASES, True)
    print("worst relative L2 vs float64 SDPA: gaussian %.3e, outlier keys %.3e (%.2fx)"
          % (gauss, outl, outl / gauss))
    assert outl <= OUTLIER_RATIO * gauss


def test_masked_op_and_direct_op(kit):
    """torch.ops.comfy_kitchen.* directly (as compiled graphs call them), a 0-d and a bool
    mask, and a negative scale (the kitchen accepts any finite scale)."""
    q, k, v = _qkv(1, 2, 2, 24, 24, 32, torch.float32)
    ref = ref64(q, k, v)
    out = torch.ops.comfy_kitchen.int8_attention(q, k, v, None)
    assert rel_l2(out, ref) <= GAUSS_BOUND
    out = torch.ops.comfy_kitchen.int8_attention_masked(q, k, v, torch.tensor(True), None)
    assert rel_l2(out, ref) <= GAUSS_BOUND
    e = rel_l2(ck.int8_attention(q, k, v, scale=-0.2), ref64(q, k, v, scale=-0.2))
    assert e <= GAUSS_BOUND, e
    e = rel_l2(ck.int8_attention(q, k, v, scale=0.0), ref64(q, k, v, scale=0.0))
    assert e <= GAUSS_BOUND, e


def test_bad_input_gets_the_kitchens_errors(kit):
    q, k, v = _qkv(1, 4, 2, 8, 8, 16, torch.float32)
    cases = [
        (ValueError, "4-D", dict(q=q[0])),
        (TypeError, "needs float32, float16, or bfloat16", dict(q=q.double(), k=k.double(),
                                                          v=v.double())),
        (TypeError, "same dtype", dict(k=k.half(), v=v.half())),
        (ValueError, "positive", dict(q=q[:, :, :0])),
        (ValueError, "contiguous", dict(q=q.transpose(2, 3).contiguous().transpose(2, 3))),
        (ValueError, "v has shape", dict(v=v[:, :, :4])),
        (ValueError, "multiple of Hkv", dict(k=k[:, :1].expand(1, 3, 8, 16).contiguous(),
                                             v=v[:, :1].expand(1, 3, 8, 16).contiguous())),
        (ValueError, "D = 300 > 256", dict(q=torch.randn(1, 4, 8, 300), k=torch.randn(1, 2, 8, 300),
                                      v=torch.randn(1, 2, 8, 300))),
        (TypeError, "attn_mask must be", dict(attn_mask=torch.zeros(8, 8, dtype=torch.int32))),
        (ValueError, "broadcast", dict(attn_mask=torch.zeros(3, 8, dtype=torch.bool))),
        (ValueError, "not finite", dict(scale=float("inf"))),
    ]
    for err, text, kw in cases:
        a = dict(q=q, k=k, v=v) | kw
        with pytest.raises(err, match=text):
            ck.int8_attention(a["q"], a["k"], a["v"], scale=kw.get("scale"),
                              attn_mask=kw.get("attn_mask"))


def test_unregister_removes_the_cpu_kernel(kit):
    q, k, v = _qkv(1, 2, 2, 8, 8, 16, torch.float32)
    try:
        kit.unregister()
        assert kit.attention_status()["int8_attention"] == "removed"
        for mask in (None, torch.ones(8, 8, dtype=torch.bool)):
            with pytest.raises((ValueError, RuntimeError), match="CUDA"):
                ck.int8_attention(q, k, v, attn_mask=mask)
    finally:
        kit.register()
    assert kit.attention_status() == {"int8_attention": "installed",
                                      "int8_attention_masked": "installed"}
    assert rel_l2(ck.int8_attention(q, k, v), ref64(q, k, v)) <= GAUSS_BOUND


F32_TINY = 2.0 ** -126            # float32's smallest normal


def _nan_rows_alike(out, ref):
    """out's NaN rows (query rows with a NaN) are ref's, and the others are finite."""
    rows, rrows = out.isnan().any(-1), ref.isnan().any(-1)
    assert torch.equal(rows, rrows), (rows, rrows)
    assert torch.isfinite(out[~rows]).all()
    return rows


def test_any_finite_scale_runs(kit):
    """The kitchen's rule takes any finite scale: one below float32's smallest normal (a
    float32 subnormal, or below its smallest subnormal: 1e-46, 1e-300, 5e-324) runs — its
    scores are ~0, so out is the mean of v over the keys each query attends to — and so does
    one above float32's largest finite value (run at that value)."""
    q, k, v = _qkv(1, 4, 2, 24, 40, 32, torch.float32)
    mask = torch.rand(24, 40) < 0.6
    mask[:, 0] = True
    for scale in (1e-39, 2.0 ** -140, 1e-46, 1e-300, 5e-324, -1e-46, -1e-300):
        for m in (None, mask):
            out = ck.int8_attention(q, k, v, scale=scale, attn_mask=m)
            ref = ref64(q, k, v, m, scale)
            mean = (v.double().repeat_interleave(2, 1).unsqueeze(2) *
                    (m if m is not None else torch.ones(24, 40, dtype=torch.bool))
                    .unsqueeze(-1)).sum(3) / (m.sum(-1, keepdim=True) if m is not None else 40)
            assert torch.allclose(ref, mean, atol=1e-12)
            e = rel_l2(out, ref)
            print("scale %r mask %s: rel L2 %.3e" % (scale, m is not None, e))
            assert e <= GAUSS_BOUND, (scale, e)
    for scale in (1e39, 1e300, -1e300):
        out = ck.int8_attention(q, k, v, scale=scale)
        assert out.shape == q.shape and out.dtype == q.dtype


def test_zero_scale_keeps_nan_rows(kit):
    """scale = 0: every score is 0·(q·k) — 0 where q·k is finite (out: the mean of v), NaN where
    the query row holds a NaN or an infinity (0·inf): those rows are NaN, as SDPA's in float64;
    q is never replaced by zeros."""
    for dtype in DTYPES:
        q, k, v = _qkv(1, 2, 2, 6, 9, 16, dtype)
        q[0, 0, 1, 3] = float("nan")
        q[0, 1, 4, 0] = float("inf")
        q[0, 1, 2, 5] = -float("inf")
        out = ck.int8_attention(q, k, v, scale=0.0)
        ref = ref64(q, k, v, scale=0.0)
        rows = _nan_rows_alike(out, ref)
        assert rows.sum() == 3
        assert rel_l2(out[~rows], ref[~rows]) <= GAUSS_BOUND
        out = ck.int8_attention(q, k, v, scale=-0.0)
        assert torch.equal(out.isnan(), ref.isnan())


def test_huge_values_with_tiny_scales_property(kit):
    """Property (seeded): q and k of magnitude 10^eq and 10^ek (up to float32's and bfloat16's
    largest, 3e38; eq + ek >= 39), with the scale that brings the scores back to O(1) —
    10^-(eq+ek)·D^-1/2 times a random factor in [1, 3] and sign, below float32's smallest
    normal (down to 1e-77), which the kernel runs as scale 1 on q·scale — give SDPA's float64
    answer within the Gaussian bound, with or without a mask; the same with a NaN in one query
    row keeps that row, and only it, NaN. (A float32 scale with q·k beyond float32's range is
    the engines' score overflow, not this kernel's: qmm.attention's own tests.)"""
    g = torch.Generator().manual_seed(SEED + 47)
    worst, below = 0.0, 0
    for i in range(24):
        dtype = (torch.float32, torch.bfloat16)[i % 2]
        B, H, Hkv = 1, 2 * (1 + i % 2), 1 + i % 2
        S, Skv, D = int(torch.randint(1, 40, (1,), generator=g)), \
            int(torch.randint(1, 70, (1,), generator=g)), (16, 32, 64, 128)[i % 4]
        eq = float(torch.randint(0, 39, (1,), generator=g))
        ek = float(torch.randint(int(39 - eq), 39, (1,), generator=g))   # eq + ek >= 39
        q = torch.randn(B, H, S, D, generator=g) * 10.0 ** eq
        k = torch.randn(B, Hkv, Skv, D, generator=g) * 10.0 ** ek
        v = torch.randn(B, Hkv, Skv, D, generator=g)
        q, k, v = (t.clamp(-3e38, 3e38).to(dtype) for t in (q, k, v))
        sign = -1.0 if i % 5 == 4 else 1.0
        scale = sign * 10.0 ** -(eq + ek) * D ** -0.5 * (1 + 2 * float(torch.rand(1, generator=g)))
        below += abs(scale) < F32_TINY
        mask = _mask("bool_s_skv", B, S, Skv, dtype, g) if i % 3 == 0 else None
        out = ck.int8_attention(q, k, v, scale=scale, attn_mask=mask)
        ref = ref64(q, k, v, mask, scale)
        assert torch.isfinite(out).all(), (i, eq, ek, scale)
        e = rel_l2(out, ref)
        print("%s q 1e%d k 1e%d scale %.3e S%d Skv%d D%d mask %s: rel L2 %.3e" % (
            dtype, eq, ek, scale, S, Skv, D, mask is not None, e))
        worst = max(worst, e)
        qn = q.clone()
        qn[0, 0, S // 2, D // 3] = float("nan")
        outn = ck.int8_attention(qn, k, v, scale=scale, attn_mask=mask)
        rows = _nan_rows_alike(outn, ref64(qn, k, v, mask, scale))
        assert rows.sum() == 1
    print("worst relative L2 vs float64 SDPA, huge values and tiny scales: %.3e (%d of 24 "
          "scales below float32's smallest normal)" % (worst, below))
    assert below == 24
    assert worst <= GAUSS_BOUND
