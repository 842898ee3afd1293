"""Per-call work of the linear functions: the call rule's check is reused by the call that
follows it (not done twice), and a layer kind is planned once per M class (M.bit_length()),
not per call; a refusal's reason is formatted once per kind, not per call. Timing is a
benchmark's business (python -m qmm.bench.overhead), not a test's."""
import torch

import comfy_kitchen as ck

from qmm.kitchen import linear as lin


def test_checked_once_and_planned_once_per_kind(kitchen, monkeypatch):
    checks, plans = [], []
    real_check, real_kind = lin.check, lin._kind
    monkeypatch.setattr(lin, "check", lambda *a, **k: checks.append(1) or real_check(*a, **k))
    monkeypatch.setattr(lin, "_kind", lambda *a, **k: plans.append(a[0]) or real_kind(*a, **k))
    w = torch.randint(-127, 128, (48, 160), dtype=torch.int8)
    s = torch.rand(48, 1) * 0.01
    lin._kinds.clear()
    for M in (1, 2, 3, 4, 5, 6, 7, 5, 4, 1, 2):
        ck.int8_linear(torch.randn(M, 160), w, s, None, torch.float32)
    assert len(checks) == 11                       # the rule's check, reused by the call
    assert [k[-1] for k in plans] == [1, 2, 3]     # M classes 1, 2-3, 4-7: planned once each
    x = torch.randn(3, 160)
    ck.int8_linear(x, w, s, None, torch.float32)
    assert len(plans) == 3


def test_direct_call_checks_itself(kitchen, monkeypatch):
    checks = []
    real_check = lin.check
    monkeypatch.setattr(lin, "check", lambda *a, **k: checks.append(1) or real_check(*a, **k))
    w = torch.randint(-127, 128, (48, 160), dtype=torch.int8)
    s = torch.rand(48, 1) * 0.01
    x = torch.randn(2, 160)
    kitchen.int8_linear(x, w, s, None, torch.float32)
    assert len(checks) == 1
    # a rule check for other arguments is not taken for this call
    lin.rule("int8_linear")({"x": torch.randn(2, 160), "weight": w, "weight_scale": s})
    y = kitchen.int8_linear(x, w, s * 2, None, torch.float32)
    with ck.use_backend("eager"):
        assert torch.equal(y, ck.int8_linear(x, w, s * 2, None, torch.float32))
