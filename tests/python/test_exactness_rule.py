"""The rule that decides when qmm promises bits for a ConvRot rotation against torch
(exactness.rotation_is_exact, SPEC §1a), tested on inputs built to sit on each side of it:

  exact side  values on a coarse grid (multiples of 1/8 up to 8): every partial sum of a group is
              exact in fp32, so the rule says EXACT, and qmm's rotate-and-quantize equals the
              kitchen's in every torch order (exactness.TORCH_ORDERS);
  bound side  one group built so that a rotated value is a rounding tie of its dtype plus less
              than the fp32 error of a sequential sum: summing big-first loses the small terms
              (tie, rounds to even), small-first keeps them (rounds up). The rule says BOUND, the
              two orders really give different values, and qmm and eager stay inside the rule's
              interval in every order.
"""
import pytest
import torch

import comfy_kitchen as ck
from comfy_kitchen.registry import registry
from comfy_kitchen.tensor.int8_utils import _build_hadamard

from exactness import (TORCH_ORDERS, quantized_interval, rotate_in_order, rotation_interval,
                       rotation_is_exact, use_torch_order)

DT = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
HALF_ULP_AT_256 = {torch.bfloat16: 1.0, torch.float16: 0.125, torch.float32: 2.0 ** -16}


def rotate_and_quantize(x, gs, backend):
    h = _build_hadamard(gs, dtype=x.dtype)
    kw = {"x": x, "h": h, "group_size": gs}
    if backend == "qmm":
        assert registry.get_capable_backend("quantize_and_rotate_rowwise", kw) == "qmm"
        return registry.get_implementation("quantize_and_rotate_rowwise", kwargs=kw)(x, h, gs)
    with ck.use_backend("eager"):
        return registry.get_implementation("quantize_and_rotate_rowwise")(x, h, gs)


def tie_group(dt, gs=16):
    """One row of gs values whose rotated column 0 is 256 + (a tie of dt) + 8·2^-17: the terms
    x_i·h_i0 are 256, the half ulp of dt at 256, eight times 2^-17 (a quarter of fp32's ulp at
    256: lost one by one after 256, kept when summed first), and zeros."""
    h = _build_hadamard(gs, dtype=torch.float64)
    terms = torch.zeros(gs, dtype=torch.float64)
    terms[0], terms[1], terms[2:10] = 256.0, HALF_ULP_AT_256[dt], 2.0 ** -17
    x = terms / h[:, 0]                      # h_i0 = ±1/sqrt(gs): exact
    assert torch.equal(x.to(dt).double(), x), "the built values are not exact in %s" % dt
    return x.to(dt).reshape(1, gs)


@pytest.mark.parametrize("x_dtype", ["bf16", "f16", "f32"])
@pytest.mark.parametrize("gs", [16, 256])
@pytest.mark.parametrize("order", TORCH_ORDERS)
def test_rule_exact_side(kitchen, monkeypatch, x_dtype, gs, order):
    dt = DT[x_dtype]
    x = (torch.randint(-64, 65, (9, 512)).float() / 8).to(dt)
    assert rotation_is_exact(x, gs), "a grid of 1/8 up to 8 must be exact for g=%d" % gs
    use_torch_order(monkeypatch, order)
    q, s = rotate_and_quantize(x, gs, "qmm")
    qe, se = rotate_and_quantize(x, gs, "eager")
    assert torch.equal(q, qe) and torch.equal(s, se), "%s g=%d %s" % (x_dtype, gs, order)


@pytest.mark.parametrize("x_dtype", ["bf16", "f16", "f32"])
def test_rule_bound_side(kitchen, monkeypatch, x_dtype):
    dt = DT[x_dtype]
    gs = 16
    x = tie_group(dt, gs)
    assert not rotation_is_exact(x, gs)
    lo, hi = rotation_interval(x, gs)
    assert lo[0, 0] != hi[0, 0]
    # the order really matters: big-first rounds the tie to even, small-first rounds up
    h = _build_hadamard(gs, dtype=dt)
    fwd = rotate_in_order("f32_forward")[0](x, h, gs)[0, 0]
    bwd = rotate_in_order("f32_backward")[0](x, h, gs)[0, 0]
    assert fwd != bwd, (fwd, bwd)
    assert lo[0, 0] <= min(fwd, bwd) and max(fwd, bwd) <= hi[0, 0]
    # and both sides stay inside the rule's interval, whatever order torch takes
    q_min, q_max, s_lo, s_hi = quantized_interval(x, gs)
    for order in TORCH_ORDERS:
        with monkeypatch.context() as mp:
            use_torch_order(mp, order)
            for backend in ("qmm", "eager"):
                q, s = rotate_and_quantize(x, gs, backend)
                q = q.to(torch.int16)
                assert ((q >= q_min) & (q <= q_max)).all(), (backend, order)
                assert ((s >= s_lo) & (s <= s_hi)).all(), (backend, order)


def test_rule_sees_one_unsafe_value_among_many(kitchen):
    # 511 grid groups and one tie group: the whole tensor is BOUND, its grid rows alone EXACT
    grid = (torch.randint(-64, 65, (4, 256)).float() / 8).to(torch.bfloat16)
    tie = torch.cat([tie_group(torch.bfloat16)] * 16, dim=1)
    assert rotation_is_exact(grid, 16)
    assert not rotation_is_exact(torch.cat([grid, tie]), 16)
