"""When qmm promises bits against torch for a ConvRot rotation (SPEC §1a), decided by a rule that
does not depend on the CPU — and the torch summation orders the promise must survive.

The kitchen rotates with torch.matmul(x_group, H_g) in x's dtype T; qmm with its fp32 radix-4
transform. Both sum the same g exact products x_i·h_ij (h = ±1/sqrt(g), a power of 2) in fp32, in
different orders, then round once to T. torch's order depends on the CPU: oneDNN's f16 matmul on a
CPU with AVX512-FP16 is an fp32 matmul of the upcast values rounded once to f16, elsewhere another
kernel; an order can also differ with M. So bits are promised only where no fp32 order can matter:

  rotation_is_exact(a, g)  every rotated value v = Σ_i a_i·h_ij, with the worst-case error of any
  fp32 summation of its g terms, e = γ_{g-1}·Σ_i |a_i·h_ij| (γ_n = n·2^-24 / (1 - n·2^-24)), plus
  g·2^-149 for subnormal partial sums, lies with all of [v - e, v + e] inside one rounding interval
  of T — or the group's partial sums are all exact in fp32 (every term a multiple of 2^L and
  Σ|terms| < 2^(L+24): the group's values span few enough binades), so e is 0. Rounding is
  monotone, so every fp32 order then gives the same value of T, and so does every later step
  (amax, scale, int8 values, GEMM, epilogue are CPU-independent in torch's AVX2 and AVX-512
  kernels). It fails when a sum lies within e of a rounding boundary of T: for f32 inputs nearly
  always, for bf16/f16 with outlier channels often.

TORCH_ORDERS are the fp32 orders the parity tests run the eager backend with, on any CPU:
  native       torch.matmul in T, as this CPU's torch computes it;
  f32_upcast   torch.matmul of the values upcast to fp32, rounded once to T: what oneDNN's f16
               matmul computes on a CPU with AVX512-FP16 (measured on Sapphire Rapids);
  f32_forward  a plain fp32 loop over the group, i = 0 .. g-1, one rounding per add (the order
               with the largest error), then rounded once to T;
  f32_backward the same loop from i = g-1 down to 0.
The loops use only elementwise fp32 operations, so they give the same bits on every CPU.
"""
import torch

from comfy_kitchen.tensor.int8_utils import _build_hadamard

TORCH_ORDERS = ["native", "f32_upcast", "f32_forward", "f32_backward"]


def _lowest_bit_exponent(t):
    """e such that each value of t (f64) is a multiple of 2^e (per value; +inf for zeros)."""
    m, ex = torch.frexp(t)                                 # t = m·2^ex, 0.5 <= |m| < 1
    mant = (m.abs() * 2.0 ** 53).to(torch.int64)           # an integer < 2^53
    low = (mant & -mant).double().log2()
    return torch.where(t == 0, torch.full_like(t, float("inf")), ex.double() - 53 + low)


def rotation_interval(a, gs):
    """(lo, hi) in a's dtype T, shaped like a: every fp32 order of the ConvRot rotation of a (the
    activation entering it, last dimension a multiple of gs) gives, for each value, a value of T
    in [lo, hi] (rounding is monotone). A group whose partial sums are all exact in fp32 (its
    terms are multiples of 2^L and Σ|terms| < 2^(L+24)) has lo = hi, the exact sum rounded."""
    g = int(gs)
    k = a.shape[-1]
    a64 = a.reshape(-1, k // g, g).double()
    h = _build_hadamard(g, dtype=torch.float64)           # ±1/sqrt(g): exact in f64
    v = a64 @ h
    mass = a64.abs().sum(-1, keepdim=True) / g ** 0.5     # Σ |a_i·h_ij|, the same for every j
    low = _lowest_bit_exponent(a64).amin(-1, keepdim=True) - 0.5 * torch.log2(
        torch.tensor(float(g), dtype=torch.float64))      # every term a multiple of 2^low
    exact_sums = (mass < torch.exp2(low + 24)) & (low >= -149)
    n = g - 1
    e = (n * 2.0 ** -24 / (1 - n * 2.0 ** -24)) * mass + g * 2.0 ** -149 \
        + g * 2.0 ** -52 * mass                            # + the f64 sum's own error
    e = torch.where(exact_sums, torch.zeros_like(e), e)
    lo = (v - e).float().to(a.dtype).reshape(a.shape)
    hi = (v + e).float().to(a.dtype).reshape(a.shape)
    return lo, hi


def rotation_is_exact(a, gs):
    """True when every rotated value of a is the same in its dtype whatever fp32 order sums it."""
    lo, hi = rotation_interval(a, gs)
    return bool(torch.equal(lo, hi))


def quantized_interval(a, gs):
    """What the kitchen's per-row quantization of the rotated a can give in any fp32 order:
    (q_min, q_max) int8 bounds per value [M, K] and (s_lo, s_hi) fp32 scales [M, 1]. q is
    monotone in the value and in the scale, so the corners bound it."""
    from comfy_kitchen.backends.eager.quantization import _int8_scale_for_math
    lo, hi = rotation_interval(a, gs)
    lo, hi = lo.reshape(-1, a.shape[-1]), hi.reshape(-1, a.shape[-1])
    same_sign = (lo >= 0) == (hi >= 0)
    abs_lo = torch.where(same_sign, torch.minimum(lo.abs(), hi.abs()), torch.zeros_like(lo))
    abs_hi = torch.maximum(lo.abs(), hi.abs())
    s_lo = (abs_lo.amax(-1, keepdim=True).float() / 127.0).clamp(min=1e-30)
    s_hi = (abs_hi.amax(-1, keepdim=True).float() / 127.0).clamp(min=1e-30)
    qs = [(v / _int8_scale_for_math(s, v)).round().clamp(-128, 127).to(torch.int16)
          for v in (lo, hi) for s in (s_lo, s_hi)]
    q_min = torch.minimum(torch.minimum(qs[0], qs[1]), torch.minimum(qs[2], qs[3]))
    q_max = torch.maximum(torch.maximum(qs[0], qs[1]), torch.maximum(qs[2], qs[3]))
    return q_min, q_max, s_lo, s_hi


def linear_bound(a, gs, w, ws):
    """|y_qmm - y_eager| bound [M, N] for y = acc·s·w_scale (before the output rounding) when the
    rotation of a is not exact: both sides' int8 values and scales lie in quantized_interval, so
    |Δ(acc·s)| <= 2·rad·s_hi + (|acc_mid| + rad)·(s_hi - s_lo), rad = Σ (q_max-q_min)/2·|w|."""
    q_min, q_max, s_lo, s_hi = quantized_interval(a, gs)
    wd = w.double()
    rad = ((q_max - q_min).double() / 2) @ wd.abs().T
    mid = ((q_max + q_min).double() / 2) @ wd.T
    width = 2 * rad * s_hi.double() + (mid.abs() + rad) * (s_hi - s_lo).double()
    return width * ws.double().abs().reshape(1, -1).expand(1, w.shape[0])


def _rotate_f32(x, h, g, order):
    """x [..., K] times the block-diagonal h [g, g] in fp32, summed in `order`, rounded to x's dtype."""
    shape = x.shape
    xg = x.reshape(-1, shape[-1] // g, g).float()
    hf = h.float()
    if order == "f32_upcast":
        y = torch.matmul(xg, hf)
    else:
        y = torch.zeros_like(xg)
        for i in (range(g) if order == "f32_forward" else range(g - 1, -1, -1)):
            y += xg[..., i:i + 1] * hf[i]          # exact product (h = ±2^-j), one rounded add
    return y.to(x.dtype).reshape(shape)


def rotate_in_order(order):
    """The kitchen's _rotate_activation / _rotate_weight computed in `order` (TORCH_ORDERS)."""
    def rotate_activation(x, h, group_size):
        return _rotate_f32(x, h.to(x.dtype), group_size, order)

    def rotate_weight(w, h, group_size):
        return _rotate_f32(w, h.T.to(w.dtype), group_size, order)
    return rotate_activation, rotate_weight


def use_torch_order(monkeypatch, order):
    """Makes the kitchen's eager backend rotate in `order` (no-op for 'native')."""
    if order == "native":
        return
    import comfy_kitchen.backends.eager.quantization as eq
    act, weight = rotate_in_order(order)
    monkeypatch.setattr(eq, "_rotate_activation", act)
    monkeypatch.setattr(eq, "_rotate_weight", weight)
