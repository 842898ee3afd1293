"""qmm.kitchen._common — what the backend's modules share: dtype and activation codes, and the
refusal every check raises (Refused: the call rules turn it into a logged decline, a direct call
gets it as a ValueError naming the parameter)."""
import torch

from qmm import _autograd as _ad
from qmm import _lib as L

FLOATS = frozenset({torch.float32, torch.float16, torch.bfloat16})
QDT = {torch.float32: L.F32, torch.float16: L.F16, torch.bfloat16: L.BF16, torch.int8: L.I8}
CODE_DT = {0: torch.float32, 1: torch.float16, 2: torch.bfloat16}
ACTS = {None: L.ACT_NONE, "none": L.ACT_NONE, "gelu_tanh": L.ACT_GELU_TANH,
        "swiglu": L.ACT_SWIGLU, "rms_norm": L.ACT_RMS_NORM, "situ": L.ACT_SITU}
PAIR_ACTS = ("swiglu", "situ")
Tensor = torch.Tensor


class Refused(ValueError):
    """A call qmm does not run: .param names the argument, .reason says why."""

    def __init__(self, param, reason):
        self.param, self.reason = param, reason
        super().__init__("qmm.kitchen: %s: %s" % (param, reason))


def is_pow4(g):
    return isinstance(g, int) and not isinstance(g, bool) and g >= 4 and (g & (g - 1)) == 0 \
        and (g.bit_length() - 1) % 2 == 0


def need_tensor(param, t, dtypes, what, contiguous=False):
    """t is a CPU tensor of one of dtypes, contiguous if asked (else Refused naming param and
    `what`). On every call's path: the exact-type test first."""
    if type(t) is not Tensor and not isinstance(t, Tensor):
        raise Refused(param, "needs %s, got %s" % (what, type(t).__name__))
    if t.dtype not in dtypes:
        raise Refused(param, "needs %s, got dtype %s" % (what, t.dtype))
    if not t.is_cpu:
        raise Refused(param, "needs a cpu tensor, got device %s" % t.device)
    if contiguous and not t.is_contiguous():
        raise Refused(param, "needs a contiguous tensor, got stride %s" % (t.stride(),))


def no_grad_needed(func, *tensors):
    """Refused when grad mode is on and an input requires grad, or when an input is a dual
    tensor of forward-mode AD (qmm._autograd): qmm computes no derivatives, so eager must run
    the call to keep them."""
    if torch.is_grad_enabled():
        for name, t in tensors:
            if isinstance(t, Tensor) and t.requires_grad:
                raise Refused(name, "requires grad under grad mode (autograd: qmm runs inference "
                              "only)")
    name = _ad.first_dual(tensors)
    if name:
        raise Refused(name, _ad.DUAL_WHY)
