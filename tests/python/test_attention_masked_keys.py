"""qmm.attention with keys a mask excludes from every query row (key padding, as text encoders pad
their prompts; SPEC §10 "Masked keys") and with huge finite keys under a tiny scale (issue 47).

- Key padding: a bool mask [B, 1, 1, Skv] (broadcast over heads and queries), the same mask
  expanded to [B, H, S, Skv] with scattered masked entries besides, and an additive −inf mask;
  on every engine that admits the call by name and on dispatch, in modes best, f32 and int8: the
  output with the padded keys' k × 10⁴ and v × 100 is bit for bit the output with them as drawn,
  which is within the mode's bound of the f64 reference (the padded keys excluded).
- Huge keys: k × 2¹¹⁵ with the scale × 2⁻¹¹⁵ (the same scores: powers of two) gives a finite
  output within the mode's bound in every mode (mode int8 once multiplied the int32 sum by the
  key's scale first, past FLT_MAX: NaN).
"""
import pytest
import torch

import qmm

from conftest import SEED
from test_attention import bound, reference, rel_err

needs_attention = pytest.mark.skipif(not qmm.has_attention(),
                                     reason="the loaded libqmm lacks qmm_attention")
MODES = ("best", "f32", "int8")


def _engines(q, k, v, mask, mode):
    """every engine but the reference that admits the call by name, and None (dispatch)"""
    p = qmm.attention_plan(q, k, v, mask=mask, mode=mode)
    return [e for e in p.admitted if e != "ref"] + [None]


def _padding(g, B, Skv):
    pad = torch.rand(B, Skv, generator=g) < 0.3
    pad[:, 0] = False                     # every row attends some key
    pad[:, -1] = True
    return pad


@needs_attention
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", ["bool_broadcast", "bool_full", "additive"])
def test_padded_keys_move_no_output_bit(mode, kind):
    g = torch.Generator().manual_seed(SEED + 47)
    B, H, Hkv, S, Skv, D = 2, 4, 2, 37, 150, 64
    q = torch.randn(B, H, S, D, generator=g)
    k = torch.randn(B, Hkv, Skv, D, generator=g) + 3.0
    v = torch.randn(B, Hkv, Skv, D, generator=g)
    pad = _padding(g, B, Skv)
    keep = ~pad[:, None, None, :]                                   # [B, 1, 1, Skv]
    if kind == "bool_broadcast":
        mask = keep
    elif kind == "bool_full":
        mask = keep.expand(B, H, S, Skv) & (torch.rand(B, H, S, Skv, generator=g) < 0.8)
        mask[..., 0] = True
    else:
        mask = torch.zeros(B, 1, 1, Skv).masked_fill(~keep, float("-inf"))
    k2, v2 = k.clone(), v.clone()
    k2[pad[:, None, :, None].expand_as(k)] *= 1e4
    v2[pad[:, None, :, None].expand_as(v)] *= 100.0
    ref = reference(q, k, v, mask)
    for engine in _engines(q, k, v, mask, mode):
        kw = {"mode": mode} if engine is None else {"mode": mode, "engine": engine}
        a = qmm.attention(q, k, v, mask=mask, **kw)
        b = qmm.attention(q, k2, v2, mask=mask, **kw)
        assert torch.equal(a, b), (engine, mode, kind, (a - b).abs().max().item())
        err = rel_err(a, ref, v[pad[:, None, :, None].expand_as(v).logical_not()])
        assert err <= bound(mode, torch.float32), (engine, mode, kind, err)


@needs_attention
@pytest.mark.parametrize("mode", MODES)
def test_huge_keys_tiny_scale_stay_finite(mode):
    g = torch.Generator().manual_seed(SEED + 48)
    B, H, S, Skv, D = 1, 2, 20, 90, 128
    q = torch.randn(B, H, S, D, generator=g)
    k = torch.randn(B, H, Skv, D, generator=g)
    v = torch.randn(B, H, Skv, D, generator=g)
    scale = D ** -0.5
    ref = reference(q, k, v, scale=scale)
    kh = k * 2.0 ** 115                                              # |k| up to ~2^117: finite f32
    for engine in _engines(q, kh, v, None, mode):
        kw = {"mode": mode} if engine is None else {"mode": mode, "engine": engine}
        out = qmm.attention(q, kh, v, scale=scale * 2.0 ** -115, **kw)
        assert torch.isfinite(out).all(), (engine, mode)
        assert rel_err(out, ref, v) <= bound(mode, torch.float32), (engine, mode)
