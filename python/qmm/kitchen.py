"""qmm.kitchen — qmm as a comfy-kitchen backend for CPU tensors.

    import qmm.kitchen
    qmm.kitchen.register()     # backend "qmm", first in the kitchen's priority list

After register(), the kitchen's INT8 functions on CPU tensors (comfy_kitchen.int8_linear, the
torch.ops.comfy_kitchen.* custom ops ComfyUI's INT8 layers call, ...) run on qmm's integer
matrix engines. Everything qmm does not run is declined by the backend's constraints and goes
to the next backend (eager): the kitchen decides per call by validating FunctionConstraints,
a backend cannot hand a call on once it runs, so every refusal happens here, in the call rules.
A refusal is logged on the kitchen's own dispatch logger ("comfy_kitchen.dispatch"): DEBUG
every time, INFO the first time per reason; declines() returns the counts.

Numerics: every linear call uses QMM_EPILOGUE_KITCHEN and the kitchen's input stage
(SPEC §1a), so outputs are those of the kitchen's eager backend (bit-identical where SPEC
§1a says so; tests/python/test_kitchen_parity.py states each case). Calls qmm would run
W8A16 on a float engine (no int8 engine admits them) are declined, so the kitchen's eager
path keeps its own numerics for them.

Weights are packed once: the packed qmm weight is cached per weight tensor (WeightCache);
an in-place change (copy_, a LoRA patch: the tensor's _version), a new scale or bias, or the
tensor being freed drops it.
"""
import ctypes
import logging
import os
import tempfile
import threading
import weakref

import torch

import qmm
from qmm import _lib as L

from comfy_kitchen.constraints import FunctionConstraints, ParamConstraint, ValidationResult
from comfy_kitchen.registry import registry

__all__ = ["register", "unregister", "is_registered", "declines", "reset_declines", "cache",
           "WeightCache", "probe", "int8_linear", "int8_linear_modulated",
           "int8_linear_rms_modulated", "quantize_int8_rowwise", "quantize_int8_tensorwise",
           "quantize_and_rotate_rowwise", "quantize_int8_convrot_weight",
           "dequantize_int8_simple", "dequantize_int8_simple_dtype",
           "dequantize_int8_convrot_weight", "dequantize_int8_convrot_weight_dtype"]

BACKEND = "qmm"
dispatch_log = logging.getLogger("comfy_kitchen.dispatch")
log = logging.getLogger("qmm.kitchen")

_FLOATS = frozenset({torch.float32, torch.float16, torch.bfloat16})
_QDT = {torch.float32: L.F32, torch.float16: L.F16, torch.bfloat16: L.BF16, torch.int8: L.I8}
_CODE_DT = {0: torch.float32, 1: torch.float16, 2: torch.bfloat16}
_ACTS = {None: L.ACT_NONE, "none": L.ACT_NONE, "gelu_tanh": L.ACT_GELU_TANH,
         "swiglu": L.ACT_SWIGLU, "rms_norm": L.ACT_RMS_NORM, "situ": L.ACT_SITU}
_PAIR_ACTS = ("swiglu", "situ")


def _ptr(t):
    return ctypes.c_void_p(t.data_ptr()) if t is not None else None


def _is_pow4(g):
    return isinstance(g, int) and not isinstance(g, bool) and g >= 4 and (g & (g - 1)) == 0 \
        and (g.bit_length() - 1) % 2 == 0


# ---------------------------------------------------------------- refusals, logged
_decl_lock = threading.Lock()
_declines = {}          # (function, reason) -> count; bounded
_DECLINES_MAX = 512


def _decline(func, param, reason):
    with _decl_lock:
        key = (func, "%s: %s" % (param, reason))
        first = key not in _declines
        if first and len(_declines) >= _DECLINES_MAX:
            key = (func, "(other reasons)")
            first = key not in _declines
        _declines[key] = _declines.get(key, 0) + 1
    msg = "Backend qmm declines %s (%s: %s); the next backend in priority runs it"
    dispatch_log.debug(msg, func, param, reason)
    if first:
        dispatch_log.info(msg, func, param, reason)
    return ValidationResult.fail(param, reason)


def declines():
    """{(function, "param: reason"): count} of the calls qmm declined since the last reset."""
    with _decl_lock:
        return dict(_declines)


def reset_declines():
    with _decl_lock:
        _declines.clear()


# ---------------------------------------------------------------- what the loaded library runs
_probe_lock = threading.Lock()
_probed = {}


def probe(feature):
    """None if the loaded libqmm runs `feature` on an int8 engine, else the reason (its error
    message). Features: "act:<name>", "modulation", "residual", "gs:<g>", "quantize_rows".
    Each is tried once per process on a tiny layer and remembered."""
    with _probe_lock:
        if feature in _probed:
            return _probed[feature]
    try:
        why = _probe_one(feature)
    except qmm.QmmError as e:
        why = str(e)
    with _probe_lock:
        _probed[feature] = why
    return why


def _probe_one(feature):
    if feature == "quantize_rows":
        return None if qmm.has_quantize_rows() else "libqmm lacks qmm_quantize_rows"
    gs, K, act, extra = 0, 16, "none", None
    if feature.startswith("gs:"):
        gs = int(feature[3:])
        K = gs
    elif feature.startswith("act:"):
        act = feature[4:]
    else:
        extra = feature
    N = 16
    ctx = qmm.Context(n_threads=1)   # its own context: the caller's counters stay untouched
    w8 = torch.ones((N, K), dtype=torch.int8)
    sc = torch.full((N,), 0.5, dtype=torch.float32)
    w = qmm.Weight.int8(w8.data_ptr(), N, K, sc.data_ptr(), N, convrot_gs=gs,
                        name="probe(%s)" % feature, ctx=ctx)
    kin = 2 * K if act in _PAIR_ACTS else K
    x = torch.linspace(-1, 1, kin, dtype=torch.bfloat16).reshape(1, kin)
    y = torch.empty((1, N), dtype=torch.bfloat16)
    a = qmm.linear_args(1, L.BF16, L.BF16, act, "kitchen")
    a.x, a.y = x.data_ptr(), y.data_ptr()
    keep = []
    if act == "rms_norm":
        aw = torch.ones(K, dtype=torch.bfloat16)
        keep.append(aw)
        a.act_weight, a.act_weight_dtype, a.act_eps = aw.data_ptr(), L.BF16, 1e-6
    if extra == "modulation":
        m = torch.zeros(K, dtype=torch.bfloat16)
        keep.append(m)
        a.modulation = m.data_ptr()
    elif extra == "residual":
        r = torch.ones((1, N), dtype=torch.bfloat16)
        keep.append(r)
        a.residual, a.residual_scale = r.data_ptr(), r.data_ptr()
    p = qmm.plan(w, args=a, ctx=ctx)
    if p.status != "QMM_OK" or p.is_fallback:
        return "no int8 engine runs it: " + "; ".join("%s: %s" % kv for kv in p.reasons.items()
                                                      if kv[0] != "ref")
    w.linear(a, ctx=ctx)
    return None


# ---------------------------------------------------------------- packed weights, cached
class _Entry:
    __slots__ = ("weight", "sig", "gs", "scale", "bias", "nbytes", "spilled", "spill_tried",
                 "hits")

    def __init__(self, weight, sig, gs, scale, bias, spilled=False):
        self.weight, self.sig, self.gs, self.scale, self.bias = weight, sig, gs, scale, bias
        self.nbytes = weight.info()["packed_bytes"]
        self.spilled = spilled
        self.spill_tried = spilled
        self.hits = 0


class WeightCache:
    """The packed qmm weight of each int8 weight tensor. An entry is found by the tensor's
    identity and is valid while the tensor's (data_ptr, _version, shape, stride, dtype), the
    ConvRot group and the contents of its scale and bias are those it was packed from (the
    scale and bias snapshots are N values each, compared on every call: a new scale tensor
    with the same values does not repack). A changed tensor is repacked; a freed tensor drops
    its entry (weakref.finalize), so the cache holds at most one entry per live weight tensor.
    Thread-safe."""

    def __init__(self, spill_dir=None):
        self._lock = threading.Lock()
        self._d = {}
        self.packs = 0      # qmm weights created (a test of "packed once" counts these)
        self.spill_dir = spill_dir
        self.spilled_bytes = 0

    @staticmethod
    def _sig(w):
        """What must be unchanged for a packed copy to stay valid. An inference tensor (made
        under torch.inference_mode, as ComfyUI loads models) has no version counter: its
        in-place changes are found by a sample of up to 17 x 17 values spread over its rows and
        columns instead (a LoRA patch changes nearly every value)."""
        if w.is_inference():
            N, K = w.shape
            sample = w[::max(1, N // 16), ::max(1, K // 16)].clone()
            return (w.data_ptr(), None, tuple(w.shape), tuple(w.stride()), w.dtype), sample
        return (w.data_ptr(), w._version, tuple(w.shape), tuple(w.stride()), w.dtype), None

    def get(self, weight, scale, bias, gs):
        key = id(weight)
        sig = self._sig(weight)
        s32 = scale.detach().to(torch.float32).reshape(-1)
        b = bias.detach().reshape(-1) if bias is not None else None
        with self._lock:
            e = self._d.get(key)
        if e is not None and e.sig[0] == sig[0] and e.gs == gs and \
                (sig[1] is None or torch.equal(e.sig[1], sig[1])) and \
                torch.equal(e.scale, s32) and (b is None) == (e.bias is None) and \
                (b is None or (b.dtype == e.bias.dtype and torch.equal(b, e.bias))):
            e.hits += 1
            if self.spill_dir and not e.spill_tried and e.hits >= 3:
                # a second kitchen call (each consults the cache twice: the call rule, then the
                # call) proves the tensor lives on; a per-call temporary, such as the kitchen's
                # mm path's weight.t().contiguous(), is never moved
                e.spill_tried = True
                if self._spill(weight):
                    e.spilled = True
                    e.sig = self._sig(weight)
            return e.weight
        return self._pack(key, weight, sig, s32, bias, gs, e)

    def _pack(self, key, weight, sig, s32, bias, gs, old):
        N, K = weight.shape
        scale = s32.clone().contiguous()
        b = None
        if bias is not None:
            b = bias.detach().reshape(-1).clone().contiguous()
        w = qmm.Weight.int8(weight.data_ptr(), N, K, scale.data_ptr(), scale.numel(),
                            ld=weight.stride(0) if N > 1 else K,
                            bias=b.data_ptr() if b is not None else None,
                            bias_dtype=_QDT[b.dtype] if b is not None else L.F32,
                            convrot_gs=gs, name="int8[%d,%d]" % (N, K))
        spilled = old is not None and old.spilled and old.sig[0][0] == sig[0][0]  # file-backed
        e = _Entry(w, sig, gs, scale, b, spilled)
        with self._lock:
            prev = self._d.get(key)
            self._d[key] = e
            self.packs += 1
        if prev is None:
            weakref.finalize(weight, self._drop, key)
        elif prev is not e:
            prev.weight.close()
        return w

    def _spill(self, weight):
        """Make the packed copy the only resident one (tried at a weight's second kitchen call): the
        int8 tensor's bytes move to a file
        in spill_dir (unlinked at once: it lives as long as the mapping) mapped back as the
        tensor's storage (shared, so writes reach it). Reading the tensor (a LoRA merge,
        dequantize, saving) faults its pages in from the page cache or the disk, writes work
        as before, and the process keeps no anonymous copy. Only a tensor that owns its whole
        storage alone (no other view, offset 0, contiguous, >= 1 MiB) is moved."""
        n = weight.numel()
        st = weight.untyped_storage()
        use_count = getattr(torch._C, "_storage_Use_Count", None)
        if n < (1 << 20) or not weight.is_contiguous() or weight.storage_offset() != 0 or \
                st.nbytes() != n or use_count is None or use_count(st._cdata) > 2:
            return False
        del st
        fd, path = tempfile.mkstemp(prefix="qmm-int8-", dir=self.spill_dir)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(memoryview(weight.detach().numpy()).cast("B"))
            mapped = torch.UntypedStorage.from_file(path, shared=True, nbytes=n)
        finally:
            os.unlink(path)
        with torch.inference_mode() if weight.is_inference() else torch.no_grad():
            weight.set_(mapped, 0, weight.shape, weight.stride())
        self.spilled_bytes += n
        return True

    def _drop(self, key):
        with self._lock:
            e = self._d.pop(key, None)
        if e is not None:
            e.weight.close()

    def clear(self):
        with self._lock:
            entries = list(self._d.values())
            self._d.clear()
        for e in entries:
            e.weight.close()

    def __len__(self):
        with self._lock:
            return len(self._d)

    def packed_bytes(self):
        with self._lock:
            return sum(e.nbytes for e in self._d.values())

    def weights(self):
        """The cached qmm.Weight objects (for plans and inspection)."""
        with self._lock:
            return [e.weight for e in self._d.values()]


cache = WeightCache()


# ---------------------------------------------------------------- the linear calls
def _rows(t, width):
    """t as a 2-D [M, width] view with unit column stride (copied only if it has none)."""
    t2 = t.reshape(-1, width)
    if t2.stride(1) != 1 or (t2.shape[0] > 1 and t2.stride(0) < width):
        t2 = t2.contiguous()
    return t2


def _linear(x, weight, weight_scale, bias, out_dtype, convrot, convrot_groupsize, input_act,
            act_weight, act_eps, residual, residual_scale, modulation):
    if out_dtype is None:
        out_dtype = torch.bfloat16
    N, K = weight.shape
    gs = int(convrot_groupsize) if convrot else 0
    w = cache.get(weight, weight_scale, bias, gs)
    k_in = x.shape[-1]
    x2 = _rows(x, k_in)
    M = x2.shape[0]
    y = torch.empty((M, N), dtype=out_dtype)
    a = qmm.linear_args(M, _QDT[x.dtype], _QDT[out_dtype], _ACTS[input_act], "kitchen")
    a.x, a.ldx, a.y, a.ldy = x2.data_ptr(), (x2.stride(0) if M > 1 else k_in), y.data_ptr(), N
    a.x_cols = k_in
    keep = []
    if input_act == "rms_norm":
        aw = act_weight.detach().reshape(-1).contiguous()
        keep.append(aw)
        a.act_weight, a.act_weight_dtype, a.act_eps = aw.data_ptr(), _QDT[aw.dtype], float(act_eps)
    if modulation is not None:
        m = modulation.detach().reshape(-1).contiguous()
        keep.append(m)
        a.modulation = m.data_ptr()
    if residual is not None:
        r = _rows(residual.to(out_dtype), N)
        rs = residual_scale.to(out_dtype).reshape(-1)
        rs = (rs.expand(N) if rs.numel() == 1 else rs).contiguous()
        keep += [r, rs]
        a.residual, a.ldr, a.residual_scale = r.data_ptr(), (r.stride(0) if M > 1 else N), rs.data_ptr()
    w.linear(a)
    return y.reshape(*x.shape[:-1], N)


def int8_linear(x, weight, weight_scale, bias=None, out_dtype=torch.bfloat16, convrot=False,
                convrot_groupsize=256, input_act=None, input_act_weight=None, input_act_eps=0.0,
                residual=None, residual_scale=None):
    """The kitchen's int8_linear on qmm (same signature and results as the eager backend)."""
    return _linear(x, weight, weight_scale, bias, out_dtype, convrot, convrot_groupsize, input_act,
                   input_act_weight, input_act_eps, residual, residual_scale, None)


def int8_linear_modulated(x, modulation_scale, weight, weight_scale, bias=None,
                          out_dtype=torch.bfloat16, convrot=False, convrot_groupsize=256):
    """x · (1 + modulation_scale) (one row for every token), then int8_linear; on qmm the
    modulation is applied in its input stage (no [M, K] temporary)."""
    return _linear(x, weight, weight_scale, bias, out_dtype, convrot, convrot_groupsize, None,
                   None, 0.0, None, None, modulation_scale)


def int8_linear_rms_modulated(x, norm_weight, norm_eps, modulation_scale, weight, weight_scale,
                              bias=None, out_dtype=torch.bfloat16, convrot=False,
                              convrot_groupsize=256):
    """rms_norm(x, norm_weight, norm_eps) · (1 + modulation_scale), then int8_linear."""
    return _linear(x, weight, weight_scale, bias, out_dtype, convrot, convrot_groupsize,
                   "rms_norm", norm_weight, norm_eps, None, None, modulation_scale)


# ---------------------------------------------------------------- quantize / dequantize
def _quantize_rows(x, gs, scale_in):
    K = x.shape[-1]
    x2 = _rows(x.detach(), K)
    M = x2.shape[0]
    q = torch.empty((M, K), dtype=torch.int8)
    s = torch.empty((M, 1), dtype=torch.float32)
    s_in = None
    if scale_in is not None:
        s_in = scale_in.reshape(1).expand(M).contiguous()
    ctx = qmm.context()
    qmm._check(L.qmm_quantize_rows(ctx.ptr, x2.data_ptr(), _QDT[x.dtype], M, K,
                                   x2.stride(0) if M > 1 else K, gs, _ptr(s_in), q.data_ptr(), K,
                                   s.data_ptr()), "qmm_quantize_rows")
    return q.reshape(x.shape), s.reshape(*x.shape[:-1], 1)


def quantize_int8_rowwise(x, stochastic_rounding=0):
    """Per-row int8 (the kitchen's rule: scale max(amax/127, 1e-30), x / T(scale) in x's
    dtype, round half to even, clamp [-128, 127]) → (q like x, scales [..., 1] f32)."""
    return _quantize_rows(x, 0, None)


def quantize_int8_tensorwise(x, scale=None, stochastic_rounding=0):
    """One scale for the whole tensor: computed (max(amax/127, 1e-30), in torch as the eager
    backend does) or given; → (q like x, the f32 scale as the eager backend returns it)."""
    if scale is None or (isinstance(scale, str) and scale == "recalculate"):
        scale = (x.abs().max().float() / 127.0).clamp(min=1e-30)
    elif not isinstance(scale, torch.Tensor):
        scale = torch.tensor(scale, device=x.device, dtype=torch.float32)
    else:
        scale = scale.to(device=x.device, dtype=torch.float32)
    q, _ = _quantize_rows(x, 0, scale)
    return q, scale


def quantize_and_rotate_rowwise(x, h, group_size, stochastic_rounding=0):
    """Rotate each group of group_size with H_g (the call rule checked h is the standard
    normalized regular Hadamard matrix), then quantize per row."""
    return _quantize_rows(x, int(group_size), None)


def quantize_int8_convrot_weight(weight, group_size, stochastic_rounding=0):
    """Offline ConvRot of a float weight [N, K] in its own dtype, then per-row int8."""
    return _quantize_rows(weight, int(group_size), None)


_DEQ_CHUNK = 1 << 22  # elements per chunk of the f32 intermediate of dequantize_int8_simple_dtype


def dequantize_int8_simple(q, scale):
    """q.float() · scale — one f32 multiply per element, as the eager backend does
    (bit-identical by construction)."""
    return q.float() * scale


def dequantize_int8_simple_dtype(q, scale, output_dtype_code):
    """(q.float() · scale).to(dtype), row block by row block: the same bits as the eager
    backend without its full-size f32 intermediate."""
    dt = _CODE_DT[output_dtype_code]
    if q.dim() < 2 or scale.numel() == 1 or scale.dim() > q.dim():
        return (q.float() * scale).to(dt)
    out = torch.empty(torch.broadcast_shapes(q.shape, scale.shape), dtype=dt)
    rows = max(1, _DEQ_CHUNK // max(1, q.shape[-1]))
    for i in range(0, q.shape[0], rows):
        sc = scale[i:i + rows] if scale.dim() == q.dim() and scale.shape[0] == q.shape[0] else scale
        out[i:i + rows] = (q[i:i + rows].float() * sc).to(dt)
    return out


def dequantize_int8_convrot_weight(q, scale, group_size):
    """q · s per row, rotated back with H_g by qmm_dequantize_weight (fp32 radix-4 transform).
    The eager backend rotates with a torch matmul by H_gᵀ: the same exact sum in another
    order, so outputs agree within a few f32 ulps of the row's magnitude (bound in the tests),
    not bit for bit."""
    N, K = q.shape
    qc = q.contiguous()
    sc = scale.detach().to(torch.float32).reshape(-1).contiguous()
    out = torch.empty((N, K), dtype=torch.float32)
    qmm._check(L.qmm_dequantize_weight(qc.data_ptr(), N, K, sc.data_ptr(), sc.numel(),
                                       int(group_size), out.data_ptr()), "qmm_dequantize_weight")
    return out


def dequantize_int8_convrot_weight_dtype(q, scale, group_size, output_dtype_code):
    return dequantize_int8_convrot_weight(q, scale, group_size).to(_CODE_DT[output_dtype_code])


# ---------------------------------------------------------------- call rules (what qmm admits)
def _cpu(t):
    return isinstance(t, torch.Tensor) and t.device.type == "cpu"


def _rule_linear(func):
    def rule(kw):
        x, weight, ws = kw.get("x"), kw.get("weight"), kw.get("weight_scale")
        bias = kw.get("bias")
        if not isinstance(x, torch.Tensor) or not isinstance(weight, torch.Tensor):
            return _decline(func, "x", "x and weight must be tensors")
        if x.requires_grad and torch.is_grad_enabled():
            return _decline(func, "x", "autograd: qmm runs inference only")
        if x.dim() < 1 or x.numel() == 0:
            return _decline(func, "x", "empty input %s" % (list(x.shape),))
        if weight.dim() != 2 or weight.stride(-1) != 1:
            return _decline(func, "weight", "needs a 2-D [N, K] int8 tensor with unit column "
                            "stride, got shape %s stride %s" % (list(weight.shape), weight.stride()))
        N, K = weight.shape
        partial = ws is None
        # a probe without weight_scale (the kitchen's _has_native_fusion asks "would a native
        # backend take this?" with x, weight and the fused operands only) is judged on those
        if not partial and (ws.numel() not in (1, N) or ws.dtype not in _FLOATS or not _cpu(ws)):
            return _decline(func, "weight_scale", "needs 1 or N=%d float values on the cpu, got "
                            "%s %s" % (N, list(ws.shape), ws.dtype))
        if bias is not None and (bias.numel() != N or not _cpu(bias)):
            return _decline(func, "bias", "needs N=%d values on the cpu, got %s" % (N, list(bias.shape)))
        out_dtype = kw.get("out_dtype") or torch.bfloat16
        if out_dtype not in _FLOATS:
            return _decline(func, "out_dtype", "%s (needs f32, f16 or bf16)" % (out_dtype,))
        act = kw.get("input_act")
        if func == "int8_linear_rms_modulated":
            act = "rms_norm"
        if act not in _ACTS:
            return _decline(func, "input_act", "%r unknown" % (act,))
        if act not in (None, "none"):
            why = probe("act:" + act)
            if why:
                return _decline(func, "input_act", "%s: %s" % (act, why))
        width = 2 if act in _PAIR_ACTS else 1
        if x.shape[-1] != width * K:
            return _decline(func, "x", "last dimension %d, weight [%d, %d] with input_act %s "
                            "needs %d" % (x.shape[-1], N, K, act, width * K))
        if act == "rms_norm":
            aw = kw.get("norm_weight") if func == "int8_linear_rms_modulated" \
                else kw.get("input_act_weight")
            eps = kw.get("norm_eps") if func == "int8_linear_rms_modulated" \
                else kw.get("input_act_eps")
            if not isinstance(aw, torch.Tensor) or aw.numel() != K or aw.dtype not in _FLOATS \
                    or not _cpu(aw):
                return _decline(func, "input_act_weight", "rms_norm needs a %d-value float "
                                "weight on the cpu" % K)
            if func == "int8_linear_rms_modulated" and aw.dtype != x.dtype:
                return _decline(func, "norm_weight", "dtype %s differs from x's %s (torch's "
                                "rms_norm then promotes)" % (aw.dtype, x.dtype))
            if (eps is not None or not partial) and (
                    not isinstance(eps, (int, float)) or isinstance(eps, bool) or
                    not (0.0 <= eps < 3.4e38)):
                return _decline(func, "input_act_eps", "needs a finite number >= 0, got %r" % (eps,))
        if func != "int8_linear":
            m = kw.get("modulation_scale")
            if not isinstance(m, torch.Tensor) or m.numel() != K or m.dtype != x.dtype or \
                    not _cpu(m):
                return _decline(func, "modulation_scale", "needs one row of K=%d values of x's "
                                "dtype %s on the cpu" % (K, x.dtype))
            why = probe("modulation")
            if why:
                return _decline(func, "modulation_scale", why)
        res, rs = kw.get("residual"), kw.get("residual_scale")
        if res is not None:
            out_shape = tuple(x.shape[:-1]) + (N,)
            if rs is None:
                return _decline(func, "residual_scale", "required with residual")
            if tuple(res.shape) != out_shape or res.dtype not in _FLOATS or not _cpu(res):
                return _decline(func, "residual", "needs the output's shape %s (float, cpu), got "
                                "%s" % (list(out_shape), list(res.shape)))
            if not isinstance(rs, torch.Tensor) or rs.numel() not in (1, N) or \
                    (rs.numel() == N and rs.shape[-1] != N) or rs.dim() > len(out_shape) or \
                    rs.dtype not in _FLOATS or not _cpu(rs):
                return _decline(func, "residual_scale", "needs 1 or N=%d float values along the "
                                "last dimension" % N)
            why = probe("residual")
            if why:
                return _decline(func, "residual", why)
        gs = 0
        if kw.get("convrot"):
            g = kw.get("convrot_groupsize", 256)
            if not _is_pow4(g):
                return _decline(func, "convrot_groupsize", "%r is not a power of 4 >= 4" % (g,))
            if K % g:
                return _decline(func, "convrot_groupsize", "%d does not divide K=%d" % (g, K))
            why = probe("gs:%d" % g)
            if why:
                return _decline(func, "convrot_groupsize", why)
            gs = g
        if partial:
            return ValidationResult.ok()
        # what qmm itself says: pack (once, cached) and plan this call
        try:
            w = cache.get(weight, ws, bias, gs)
            a = qmm.linear_args(max(1, x.numel() // x.shape[-1]), _QDT[x.dtype], _QDT[out_dtype],
                                _ACTS[act], "kitchen")
            a.x_cols = x.shape[-1]
            if act == "rms_norm":
                a.act_weight_dtype = _QDT[aw.dtype]
            p = qmm.plan(w, args=a)
        except qmm.QmmError as e:
            return _decline(func, "weight", str(e))
        if p.status != "QMM_OK" or p.is_fallback:
            why = "; ".join("%s: %s" % kv for kv in p.reasons.items() if kv[0] != "ref" and
                            L.qmm_engine_is_int8(L.qmm_engine_from_name(kv[0].encode())))
            return _decline(func, "x", "no int8 engine admits [%d, %d] M=%d (%s)" % (
                N, K, a.M, why))
        return ValidationResult.ok()
    return rule


def _rule_quantize(func):
    def rule(kw):
        x = kw.get("weight") if func == "quantize_int8_convrot_weight" else kw.get("x")
        why = probe("quantize_rows")
        if why:
            return _decline(func, "__function__", why)
        if not isinstance(x, torch.Tensor) or x.dim() < 1 or x.numel() == 0:
            return _decline(func, "x", "needs a non-empty tensor of at least 1 dimension")
        if x.requires_grad and torch.is_grad_enabled():
            return _decline(func, "x", "autograd: qmm runs inference only")
        sr = kw.get("stochastic_rounding")
        if sr is not None and sr > 0:
            return _decline(func, "stochastic_rounding", "qmm rounds half to even only")
        if func == "quantize_int8_tensorwise":
            s = kw.get("scale")
            if isinstance(s, str) and s != "recalculate":
                return _decline(func, "scale", "string must be 'recalculate'")
            if isinstance(s, torch.Tensor) and s.numel() != 1:
                return _decline(func, "scale", "needs exactly one value, got %s" % list(s.shape))
        if func in ("quantize_and_rotate_rowwise", "quantize_int8_convrot_weight"):
            g = kw.get("group_size")
            if not _is_pow4(g):
                return _decline(func, "group_size", "%r is not a power of 4 >= 4" % (g,))
            if x.shape[-1] % g:
                return _decline(func, "group_size", "%d does not divide %d" % (g, x.shape[-1]))
            if func == "quantize_int8_convrot_weight" and x.dim() != 2:
                return _decline(func, "weight", "needs a 2-D weight")
            why = probe("gs:%d" % g)
            if why:
                return _decline(func, "group_size", why)
            if func == "quantize_and_rotate_rowwise":
                h = kw.get("h", kw.get("H"))
                if not _is_standard_hadamard(h, g):
                    return _decline(func, "h", "not the standard normalized regular Hadamard "
                                    "matrix H_%d (qmm rotates with that one only)" % g)
        return ValidationResult.ok()
    return rule


_H_CHECKED = {}   # (id, data_ptr, _version, dtype, g) -> bool, for live tensors only
_H_LOCK = threading.Lock()


def _is_standard_hadamard(h, g):
    """Whether h is (H4 ⊗ ... ⊗ H4) / sqrt(g) of size g (exactly, in its own dtype: its
    entries ±2^-k are exact in every float dtype). Remembered per tensor while it lives."""
    if not isinstance(h, torch.Tensor) or tuple(h.shape) != (g, g) or h.dtype not in _FLOATS \
            or not _cpu(h):
        return False
    key = (id(h), h.data_ptr(), None if h.is_inference() else h._version, h.dtype, g)
    with _H_LOCK:
        hit = _H_CHECKED.get(key)
    if hit is not None:
        return hit
    from comfy_kitchen.tensor.int8_utils import _build_hadamard
    ok = bool(torch.equal(h.to(torch.float32), _build_hadamard(g, "cpu", torch.float32)))
    with _H_LOCK:
        if len(_H_CHECKED) > 64:
            _H_CHECKED.clear()
        _H_CHECKED[key] = ok
    try:
        weakref.finalize(h, _H_CHECKED.pop, key, None)
    except TypeError:
        pass
    return ok


def _rule_dequant_convrot(func):
    def rule(kw):
        q, s, g = kw.get("q"), kw.get("scale"), kw.get("group_size")
        if not isinstance(q, torch.Tensor) or q.dim() != 2 or q.numel() == 0:
            return _decline(func, "q", "needs a non-empty 2-D int8 tensor")
        N = q.shape[0]
        if not isinstance(s, torch.Tensor) or not (s.numel() == 1 or tuple(s.shape) == (N, 1)):
            return _decline(func, "scale", "needs a scalar or [N, 1] scale, got %s" % (
                list(s.shape) if isinstance(s, torch.Tensor) else type(s).__name__))
        if not _is_pow4(g) or q.shape[1] % g:
            return _decline(func, "group_size", "%r is not a power of 4 dividing K=%d" % (g, q.shape[1]))
        why = probe("gs:%d" % g)
        if why:
            return _decline(func, "group_size", why)
        if func.endswith("_dtype") and kw.get("output_dtype_code") not in _CODE_DT:
            return _decline(func, "output_dtype_code", "must select f32, f16 or bf16")
        return ValidationResult.ok()
    return rule


def _rule_dequant_simple(func):
    def rule(kw):
        if func.endswith("_dtype") and kw.get("output_dtype_code") not in _CODE_DT:
            return _decline(func, "output_dtype_code", "must select f32, f16 or bf16")
        q, s = kw.get("q"), kw.get("scale")
        if isinstance(q, torch.Tensor) and isinstance(s, torch.Tensor):
            try:
                torch.broadcast_shapes(q.shape, s.shape)
            except RuntimeError:
                return _decline(func, "scale", "shape %s does not broadcast to %s" % (
                    list(s.shape), list(q.shape)))
        return ValidationResult.ok()
    return rule


def _constraints():
    cpu = frozenset({"cpu"})
    fl = ParamConstraint(dtypes=_FLOATS)
    i8 = ParamConstraint(dtypes=frozenset({torch.int8}))
    intp = ParamConstraint(dtypes=frozenset({int}))
    boolp = ParamConstraint(dtypes=frozenset({bool}))
    flv = ParamConstraint(dtypes=frozenset({float, int}))
    linear = {"x": fl, "weight": i8, "weight_scale": fl, "bias": fl, "out_dtype": fl,
              "convrot": boolp, "convrot_groupsize": intp}

    def fc(params, rule):
        return FunctionConstraints(params=params, default_devices=cpu, call_rules=(rule,))

    c = {
        "int8_linear": fc(linear | {"input_act": ParamConstraint(dtypes=frozenset({str})),
                                    "input_act_weight": fl, "input_act_eps": flv,
                                    "residual": fl, "residual_scale": fl},
                          _rule_linear("int8_linear")),
        "int8_linear_modulated": fc(linear | {"modulation_scale": fl},
                                    _rule_linear("int8_linear_modulated")),
        "int8_linear_rms_modulated": fc(linear | {"modulation_scale": fl, "norm_weight": fl,
                                                  "norm_eps": flv},
                                        _rule_linear("int8_linear_rms_modulated")),
        "dequantize_int8_simple": fc({"q": i8, "scale": fl},
                                     _rule_dequant_simple("dequantize_int8_simple")),
        "dequantize_int8_simple_dtype": fc({"q": i8, "scale": fl, "output_dtype_code": intp},
                                           _rule_dequant_simple("dequantize_int8_simple_dtype")),
        "dequantize_int8_convrot_weight": fc(
            {"q": i8, "scale": fl, "group_size": intp},
            _rule_dequant_convrot("dequantize_int8_convrot_weight")),
        "dequantize_int8_convrot_weight_dtype": fc(
            {"q": i8, "scale": fl, "group_size": intp, "output_dtype_code": intp},
            _rule_dequant_convrot("dequantize_int8_convrot_weight_dtype")),
    }
    if qmm.has_quantize_rows():
        sr = ParamConstraint(dtypes=frozenset({int}))
        c.update({
            "quantize_int8_rowwise": fc({"x": fl, "stochastic_rounding": sr},
                                        _rule_quantize("quantize_int8_rowwise")),
            "quantize_int8_tensorwise": fc(
                {"x": fl, "stochastic_rounding": sr,
                 "scale": ParamConstraint(dtypes=_FLOATS | {float, int, str})},
                _rule_quantize("quantize_int8_tensorwise")),
            "quantize_and_rotate_rowwise": fc({"x": fl, "h": fl, "H": fl, "group_size": intp,
                                               "stochastic_rounding": sr},
                                              _rule_quantize("quantize_and_rotate_rowwise")),
            "quantize_int8_convrot_weight": fc({"weight": fl, "group_size": intp,
                                                "stochastic_rounding": sr},
                                               _rule_quantize("quantize_int8_convrot_weight")),
        })
    return c


# ---------------------------------------------------------------- registration
_reg_lock = threading.Lock()


def register(first=True, spill_dir=None):
    """Add backend "qmm" to the kitchen registry with the capabilities and constraints above
    (device cpu only) and, with first=True, put it first in the kitchen's priority list, so
    that CPU calls try qmm before eager and every declined call still reaches eager.
    Idempotent (also undoes unregister()). Returns the capability names.

    spill_dir (or $QMM_KITCHEN_SPILL_DIR): after packing a weight, move the int8 tensor's own
    bytes to an unlinked file there (a disk, not tmpfs) mapped back in, so that the packed copy
    is the only resident one (WeightCache._spill); None keeps both copies resident."""
    import sys
    with _reg_lock:
        cache.spill_dir = spill_dir or os.environ.get("QMM_KITCHEN_SPILL_DIR") or None
        caps = _constraints()
        registry.register(BACKEND, sys.modules[__name__], caps)
        registry.enable(BACKEND)
        if first:
            prio = [b for b in registry._priority if b != BACKEND]
            registry.set_priority([BACKEND] + prio)
        elif BACKEND not in registry._priority:
            registry.set_priority(list(registry._priority) + [BACKEND])
    log.info("comfy-kitchen backend qmm registered (%s; int8 engines here: %s)", qmm.library_path,
             ", ".join(qmm.int8_engines_available()) or "none")
    return sorted(caps)


def unregister():
    """Take qmm out of the kitchen's priority list and disable it (the registry has no removal);
    drops every cached packed weight."""
    with _reg_lock:
        registry.set_priority([b for b in registry._priority if b != BACKEND])
        registry.disable(BACKEND)
    cache.clear()


def is_registered():
    return registry.is_available(BACKEND) and BACKEND in registry._priority
