"""qmm.kitchen.attention — a CPU kernel for the kitchen's own INT8 attention ops,
comfy_kitchen::int8_attention(q, k, v, scale) and comfy_kitchen::int8_attention_masked(q, k, v,
attn_mask, scale) (comfy-kitchen 0.2.40, sage_attention.py; CUDA/HIP only there, a CPU tensor
raises). After install(), comfy_kitchen.int8_attention(q, k, v, scale=, attn_mask=) on CPU
tensors runs qmm.attention(..., mode="int8") (SPEC §10: Q and K rotated by a block Hadamard and
int8, P u8, V int8 per channel); remove() takes the kernels out again.

Registration: torch.library.register_kernel on an op made by torch.library.custom_op writes into
the op's own Library and gives no handle to remove it (only a private "disabled" set), so the
kernels go to the same dispatcher entry — the op's CPU key — through torch.library.impl(...,
lib=) of a torch.library.Library("comfy_kitchen", "IMPL") this module owns; remove() destroys
that Library, which takes the CPU entries away, and a CPU call reaches the kitchen's own
function (and its error) again. Installed only for ops the kitchen defines and that have no CPU
kernel yet; status() says, per op, "installed" or why not.

The kitchen's argument rules, with its error types: q, k, v 4-D ([B, H, S, D], k and v
[B, Hkv, Skv, D]) of one dtype among float32, float16, bfloat16 (else TypeError), every size
>= 1, the last dimension contiguous, attn_mask bool or float32/float16/bfloat16 (else TypeError)
broadcastable to [B, H, S, Skv], scale None (D^-1/2) or finite (any sign, any magnitude).
Checked here: what the kitchen rules differently from qmm.attention (dtypes and their error
type, sizes of 0, the last stride, a 0-d mask, the scales qmm.attention does not take); shapes,
devices and mask broadcasting are qmm.attention's checks, GQA, D in [1, 256] and a finite scale
the library's (a ValueError naming the argument either way: qmm.ArgumentError where the library
refused it).

The scales qmm.attention does not take (it takes a float32 > 0), each run as the same scores
scale·(q·k): a negative one as |scale| on -q; zero as scale 1 on q·0 (0 where q is finite, NaN
where it is NaN or infinite, so a NaN query row stays NaN, as 0·NaN is); one below float32's
smallest normal (2^-126: subnormal in float32 or below its smallest subnormal, e.g. 1e-46,
1e-300) as scale 1 on q·scale, multiplied in float64 and rounded to float32 once (a product
below float32's range becomes 0: its scores are then below 1.4e-45·Σ|k|, nothing a softmax
resolves; the answer tends to the mean of v); one above float32's largest finite value
(3.4028235e38) as that value (the library takes scale in float32, as the kitchen's kernels do).
The result has q's shape and dtype (float32 for float32 input, as the kitchen returns). Where
this CPU has no int8 attention engine, qmm runs the call on its best float engine, a counted
fallback (refused under qmm.configure(fallback="strict")). No gradients: as the kitchen's CUDA
op, no autograd formula is registered.
"""
import threading

import torch

import qmm

NAMESPACE = "comfy_kitchen"
OPS = ("int8_attention", "int8_attention_masked")
_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_lock = threading.Lock()
_state = {"lib": None, "status": {}}


def _check(q, k, v, attn_mask):
    """The kitchen's rules that qmm.attention does not apply (or applies with another error
    type); the rest is left to qmm.attention."""
    ts = (q, k, v)
    if not all(isinstance(t, torch.Tensor) for t in ts) or any(t.dim() != 4 for t in ts):
        raise ValueError("int8_attention: q, k, v: 4-D tensors of shape [B, heads, tokens, D] expected")
    if q.dtype not in _DTYPES:
        raise TypeError("int8_attention: q dtype %s: needs float32, float16, or bfloat16" % q.dtype)
    if q.dtype != k.dtype or q.dtype != v.dtype:
        raise TypeError("int8_attention: q, k, v need the same dtype: %s, %s, %s"
                        % (q.dtype, k.dtype, v.dtype))
    if min(q.shape[:3]) == 0 or min(k.shape[1:3]) == 0:
        raise ValueError("int8_attention: sizes must be positive (B, heads and tokens of q, k)")
    if q.stride(-1) != 1 or k.stride(-1) != 1 or v.stride(-1) != 1:
        raise ValueError("int8_attention: q, k, v: the last dimension must be contiguous (stride 1)")
    if attn_mask is None:
        return None
    if not isinstance(attn_mask, torch.Tensor):
        raise TypeError("int8_attention: attn_mask must be a tensor, not %s" % type(attn_mask).__name__)
    if attn_mask.dtype not in (torch.bool,) + _DTYPES:
        raise TypeError("int8_attention: attn_mask must be bool, float32, float16 or bfloat16")
    return attn_mask.reshape(1) if attn_mask.dim() == 0 else attn_mask


F32_MIN = 2.0 ** -126                    # float32's smallest normal
F32_MAX = float.fromhex("0x1.fffffep+127")  # float32's largest finite value


def _scaled(q, scale):
    """(q', scale') with scale'·(q'·k) = scale·(q·k) and scale' a float32 qmm.attention takes
    (module doc), or a non-finite scale as it is (the library refuses it)."""
    if scale < 0:
        q, scale = -q, -scale
    if scale == 0:
        return q * 0.0, 1.0
    if scale < F32_MIN:
        return (q.double() * scale).float(), 1.0
    if F32_MAX < scale < float("inf"):
        return q, F32_MAX
    return q, scale


def run(q, k, v, attn_mask=None, scale=None):
    """softmax(scale · q·kᵀ + attn_mask) · v by qmm.attention(mode="int8"), under the kitchen's
    argument rules (module doc): any finite scale runs (_scaled), and out has q's dtype."""
    attn_mask = _check(q, k, v, attn_mask)
    dtype = q.dtype
    if scale is not None:
        q, scale = _scaled(q, float(scale))
    return qmm.attention(q, k, v, mask=attn_mask, scale=scale, mode="int8", out_dtype=dtype)


def int8_attention_cpu(q, k, v, scale):
    """The CPU kernel of comfy_kitchen::int8_attention."""
    return run(q, k, v, None, scale)


def int8_attention_masked_cpu(q, k, v, attn_mask, scale):
    """The CPU kernel of comfy_kitchen::int8_attention_masked."""
    return run(q, k, v, attn_mask, scale)


_KERNELS = {"int8_attention": int8_attention_cpu,
            "int8_attention_masked": int8_attention_masked_cpu}


def _why_not(name):
    """None if op NAMESPACE::name exists and has no CPU kernel, else the reason."""
    qualname = "%s::%s" % (NAMESPACE, name)
    try:
        import comfy_kitchen.sage_attention  # noqa: F401  (defines the ops)
    except ImportError as e:
        return "the installed comfy-kitchen has no sage_attention (%s)" % e
    if not torch._C._dispatch_has_kernel(qualname):
        return "the installed comfy-kitchen does not define %s" % qualname
    if torch._C._dispatch_has_kernel_for_dispatch_key(qualname, "CPU"):
        return "%s already has a CPU kernel" % qualname
    return None


def install():
    """Register the CPU kernels (idempotent). Returns status()."""
    with _lock:
        if _state["lib"] is not None:
            return dict(_state["status"])
        status, lib = {}, None
        for name in OPS:
            why = _why_not(name)
            if why is None:
                if lib is None:
                    lib = torch.library.Library(NAMESPACE, "IMPL")
                torch.library.impl("%s::%s" % (NAMESPACE, name), "cpu", _KERNELS[name],
                                   lib=lib)
                why = "installed"
            status[name] = why
        _state["lib"], _state["status"] = lib, status
        return dict(status)


def remove():
    """Take the CPU kernels away (a no-op when none are installed)."""
    with _lock:
        lib, _state["lib"] = _state["lib"], None
        if lib is not None:
            lib._destroy()
        _state["status"] = {name: "removed" if why == "installed" else why
                            for name, why in _state["status"].items()}


def status():
    """{op name: "installed", "removed", or why it was not installed}; {} before install()."""
    return dict(_state["status"])
