"""qmm._autograd — the tensors qmm cannot run because autograd would need a derivative of the
call, judged in one place for qmm.attention and the kitchen backend. qmm computes none: such a
tensor is refused (qmm.attention: a ValueError naming it) or declined (the kitchen backend: the
next backend, eager, runs the call and keeps the derivative).

  - reverse mode: a tensor that requires grad while grad mode is on (needs_grad);
  - forward mode: a dual tensor, one that carries a tangent (is_dual): made by
    torch.autograd.forward_ad.make_dual inside a dual_level, and every input of torch.func.jvp,
    jacfwd and linearize (functorch opens a forward_ad.dual_level for them). A dual tensor does
    not require grad, so the first test misses it; a result computed without its tangent reads
    as a zero derivative.

A tensor carries a tangent only while a dual level is open (closing it drops every tangent), so
outside forward AD is_dual answers with one int read: forward_ad's module global _current_level
(-1 when no level is open) — a private name, read only here; torch has no public "is a dual
level open". Inside a level, forward_ad.unpack_dual(t).tangent is not None (public), which sees
through functorch's wrappers.
"""
import torch
from torch.autograd import forward_ad as _fwad

_Tensor = torch.Tensor
_unpack = _fwad.unpack_dual


def forward_level():
    """The innermost open dual level of forward AD, -1 when none is open (then no tensor is
    dual). Without the module global (another torch): 0, so that is_dual asks each tensor."""
    return getattr(_fwad, "_current_level", 0)


def is_dual(t):
    """Whether t is a tensor that carries a forward-mode tangent."""
    return isinstance(t, _Tensor) and forward_level() >= 0 and _unpack(t).tangent is not None


def first_dual(named):
    """The name of the first dual tensor of named ((name, tensor or None), ...), or None."""
    if forward_level() < 0:
        return None
    for name, t in named:
        if isinstance(t, _Tensor) and _unpack(t).tangent is not None:
            return name
    return None


def needs_grad(t):
    """Whether t is a tensor that requires grad while grad mode is on."""
    return isinstance(t, _Tensor) and t.requires_grad and torch.is_grad_enabled()


DUAL_WHY = ("is a dual tensor of forward-mode AD (torch.func.jvp / jacfwd, "
            "forward_ad.make_dual): qmm computes no tangent")
