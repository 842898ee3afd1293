"""qmm — INT8 (W8A8) linear layers on the CPU's integer matrix engines (AMX-INT8, AVX512-VNNI,
AVX-VNNI, AVX2), from Python. A thin ctypes binding over include/qmm.h (see qmm._lib):

    import qmm
    qmm.info()                       # version, CPU, which engines run here and why not
    w = qmm.Weight.int8(ptr, N, K, scale_ptr, n_scale, convrot_gs=256, name="fc1")
    p = qmm.plan(w, M=1024, x_dtype="bf16")   # which engine would run, every engine's reason
    qmm.counters(); qmm.reset_counters(); qmm.last_engine()

Rules kept here:
  - every failing library call raises qmm.QmmError carrying the status name and
    qmm_last_error() (the message names the layer, the shape and the reason);
  - one qmm_context per calling thread (created on first use, destroyed with the thread), as
    qmm.h asks: a context is used by one thread at a time; weights are shared by all;
  - the GIL is released during every library call (ctypes does so for foreign calls);
  - no copies of caller memory here: callers pass pointers (torch: data_ptr()); the library
    copies and packs a weight once, at Weight creation.

The torch-facing parts are qmm.kitchen (the comfy-kitchen backend) and qmm.bench_kitchen.
"""
import ctypes
import threading

from . import _lib as L

__version__ = L.qmm_version_string().decode()

__all__ = ["QmmError", "Weight", "Plan", "info", "plan", "counters", "reset_counters",
           "last_engine", "configure", "context", "library_path", "dtype_code", "act_code",
           "engine_name", "has_quantize_rows"]

library_path = L.PATH

_DTYPES = {"f32": L.F32, "float32": L.F32, "f16": L.F16, "float16": L.F16, "bf16": L.BF16,
           "bfloat16": L.BF16, "i8": L.I8, "int8": L.I8, "i32": L.I32, "int32": L.I32}
_ACTS = {None: L.ACT_NONE}
_ACTS.update({L.qmm_act_name(a).decode(): a for a in range(L.ACT_COUNT)})   # the library's names


class QmmError(RuntimeError):
    """A libqmm call failed: .status (int), .status_name ("QMM_ERR_UNSUPPORTED"), .message
    (qmm_last_error() of the calling thread at the time of the failure)."""

    def __init__(self, status, message, call=""):
        self.status = int(status)
        self.status_name = status_name(status)
        self.message = message
        self.call = call
        super().__init__("%s%s: %s" % (call + ": " if call else "", self.status_name, message))


def status_name(status):
    return L.qmm_status_name(int(status)).decode()


def _check(status, call):
    if status != L.OK:
        raise QmmError(status, (L.qmm_last_error() or b"").decode(errors="replace"), call)


def dtype_code(t):
    """qmm_dtype of a name ("bf16", "float16", ...) or of a code (returned unchanged)."""
    if isinstance(t, int):
        return t
    try:
        return _DTYPES[str(t)]
    except KeyError:
        raise ValueError("qmm: unknown dtype %r" % (t,)) from None


def act_code(a):
    if isinstance(a, int):
        return a
    try:
        return _ACTS[a]
    except KeyError:
        raise ValueError("qmm: unknown input activation %r" % (a,)) from None


def engine_name(e):
    return L.qmm_engine_name(int(e)).decode()


def has_quantize_rows():
    """Whether the loaded library has qmm_quantize_rows (the kitchen's quantize_* functions)."""
    return L.qmm_quantize_rows is not None


# ---------------------------------------------------------------- contexts: one per thread
_options_lock = threading.Lock()
_options = {"n_threads": 0, "max_isa": -1, "fallback": L.FALLBACK_ALLOW, "verbose": -1,
            "disabled_engines": 0}
_generation = 0  # bumped by configure(): contexts of an older generation are recreated
_tls = threading.local()


class Context:
    """One qmm_context (worker threads, scratch arena, counters). Use context() to get the
    calling thread's; a Context must not be used by two threads at once."""

    def __init__(self, n_threads=0, max_isa=-1, fallback=L.FALLBACK_ALLOW, verbose=-1,
                 disabled_engines=0):
        o = L.qmm_context_options_default()
        o.n_threads = int(n_threads)
        o.max_isa = int(max_isa)
        o.fallback = int(fallback)
        o.verbose = int(verbose)
        o.disabled_engines = int(disabled_engines)
        p = ctypes.c_void_p()
        _check(L.qmm_context_create(ctypes.byref(o), ctypes.byref(p)), "qmm_context_create")
        self.ptr = p.value
        self._destroy = L.qmm_context_destroy

    def __del__(self):
        if getattr(self, "ptr", None):
            self._destroy(self.ptr)
            self.ptr = None

    @property
    def threads(self):
        return L.qmm_context_threads(self.ptr)

    def counters(self):
        c = L.Counters()
        L.qmm_get_counters(self.ptr, ctypes.byref(c))
        calls = {e["name"]: int(c.calls[e["id"]]) for e in L.ENGINES if c.calls[e["id"]]}
        return {"calls": calls, "fallbacks": int(c.fallbacks), "errors": int(c.errors)}

    def reset_counters(self):
        L.qmm_reset_counters(self.ptr)

    def last_engine(self):
        return engine_name(L.qmm_last_engine(self.ptr))


def configure(n_threads=None, max_isa=None, fallback=None, verbose=None, disabled_engines=None):
    """Options of the contexts created from now on (each thread's context is recreated on its
    next use). n_threads 0: QMM_NUM_THREADS or every online CPU; max_isa: a qmm_isa level or
    -1; fallback: "allow" or "strict"; verbose: 1 turns dispatch logging (stderr) on."""
    global _generation
    with _options_lock:
        if n_threads is not None:
            _options["n_threads"] = int(n_threads)
        if max_isa is not None:
            _options["max_isa"] = int(max_isa)
        if fallback is not None:
            _options["fallback"] = {"allow": L.FALLBACK_ALLOW, "strict": L.FALLBACK_STRICT}.get(
                fallback, fallback)
        if verbose is not None:
            _options["verbose"] = int(verbose)
        if disabled_engines is not None:
            _options["disabled_engines"] = int(disabled_engines)
        _generation += 1


def context():
    """The calling thread's Context (created on first use with the configure() options)."""
    ctx = getattr(_tls, "ctx", None)
    if ctx is None or _tls.generation != _generation:
        with _options_lock:
            opts = dict(_options)
            gen = _generation
        _tls.ctx = None
        ctx = Context(**opts)
        _tls.ctx = ctx
        _tls.generation = gen
    return ctx


def counters():
    """Calls per engine, fallbacks and errors of this thread's context since creation/reset."""
    return context().counters()


def reset_counters():
    context().reset_counters()


def last_engine():
    """The engine that ran the last successful linear call of this thread ("auto" if none)."""
    return context().last_engine()


# ---------------------------------------------------------------- weights and plans
class Plan:
    """What qmm_linear would do: .engine (name), .is_fallback, .status (name), .reasons
    {engine: why it refused} for every refusing engine, .text (qmm_plan_format)."""

    def __init__(self, p):
        self.engine = engine_name(p.engine)
        self.is_fallback = bool(p.is_fallback)
        self.status = status_name(p.status)
        pp = ctypes.byref(p)
        self.admitted = [e["name"] for e in L.ENGINES if L.qmm_plan_admits(pp, e["id"])]
        self.reasons = {e["name"]: L.qmm_plan_reason(pp, e["id"]).decode(errors="replace")
                        for e in L.ENGINES if L.qmm_plan_reason(pp, e["id"])}
        n = L.qmm_plan_format(ctypes.byref(p), None, 0)
        buf = ctypes.create_string_buffer(n + 1)
        L.qmm_plan_format(ctypes.byref(p), buf, n + 1)
        self.text = buf.value.decode(errors="replace")

    def __repr__(self):
        return "Plan(engine=%r, is_fallback=%r, status=%r)" % (self.engine, self.is_fallback,
                                                                self.status)


def _address(obj):
    """The address of obj's memory: an int as is, a ctypes object's, a numpy array's (any object
    with the array interface) or a torch tensor's (data_ptr()); None stays None."""
    if obj is None or isinstance(obj, int):
        return obj
    if isinstance(obj, (ctypes._SimpleCData, ctypes.Array, ctypes.Structure)):
        return ctypes.addressof(obj)
    ai = getattr(obj, "__array_interface__", None)
    if ai is not None:
        return ai["data"][0]
    data_ptr = getattr(obj, "data_ptr", None)  # torch tensors
    if callable(data_ptr):
        return data_ptr()
    raise TypeError("qmm: cannot take the address of %r (an int, a ctypes object, a numpy array or a "
                    "torch tensor)" % type(obj))


class Weight:
    """A qmm_weight. int8() copies and packs the caller's memory at creation; borrow_int8() copies
    nothing and reads the caller's memory at every call. The handle is freed by close() or when
    the object is collected."""

    def __init__(self, ptr, name=None):
        self.ptr = ptr
        self.name = name
        self._destroy = L.qmm_weight_destroy

    @staticmethod
    def _desc(data, N, K, scale, n_scale, ld, bias, bias_dtype, convrot_gs, name, full_precision):
        d = L.qmm_weight_desc_default()
        bname = name.encode() if name else None
        d.name = bname
        d.N, d.K, d.ld = int(N), int(K), int(ld)
        d.data = data
        d.scale = scale
        d.n_scale = int(n_scale)
        d.bias = bias
        d.bias_dtype = dtype_code(bias_dtype)
        d.convrot_gs = int(convrot_gs)
        d.full_precision = int(bool(full_precision))
        return d

    @classmethod
    def int8(cls, data, N, K, scale, n_scale, ld=0, bias=None, bias_dtype="f32", convrot_gs=0,
             name=None, full_precision=False, ctx=None):
        """An int8 weight [N, K] (row stride ld, 0 = K) at address data, fp32 scales (n_scale =
        1 or N values) at address scale, optional bias (N values of bias_dtype) at address
        bias; convrot_gs 0 or the ConvRot group size the weight was rotated with."""
        d = cls._desc(data, N, K, scale, n_scale, ld, bias, bias_dtype, convrot_gs, name, full_precision)
        p = ctypes.c_void_p()
        _check(L.qmm_weight_create_int8((ctx or context()).ptr, ctypes.byref(d), ctypes.byref(p)),
               "qmm_weight_create_int8")
        return cls(p.value, name)

    @classmethod
    def borrow_int8(cls, data, N, K, scale, n_scale, ld=0, bias=None, bias_dtype="f32", convrot_gs=0,
                    name=None, full_precision=False, ctx=None):
        """qmm_weight_borrow_int8: a weight over the caller's memory, nothing copied. data, scale
        and bias are each an address (int), a ctypes object, an object with the numpy array
        interface or a torch tensor (rows contiguous, row stride ld); the Weight keeps a reference to
        every object passed until close(), so that memory lives as long as the handle. Every call
        reads the memory as it is then: change it between calls (the next call sees the change),
        never during one."""
        keep = [o for o in (data, scale, bias) if o is not None and not isinstance(o, int)]
        d = cls._desc(_address(data), N, K, _address(scale), n_scale, ld, _address(bias), bias_dtype,
                         convrot_gs, name, full_precision)
        p = ctypes.c_void_p()
        _check(L.qmm_weight_borrow_int8((ctx or context()).ptr, ctypes.byref(d), ctypes.byref(p)),
               "qmm_weight_borrow_int8")
        w = cls(p.value, name)
        w._borrowed = keep
        return w

    def close(self):
        if getattr(self, "ptr", None):
            self._destroy(self.ptr)
            self.ptr = None
        self._borrowed = None

    __del__ = close

    def info(self):
        i = L.WeightInfo()
        L.qmm_weight_get_info(self.ptr, ctypes.byref(i))
        return {"name": i.name.decode() if i.name else None, "N": i.N, "K": i.K,
                "is_int8": bool(i.is_int8), "dtype": L.qmm_dtype_name(i.dtype).decode(),
                "convrot_gs": i.convrot_gs, "per_tensor_scale": bool(i.per_tensor_scale),
                "has_bias": bool(i.has_bias), "full_precision": bool(i.full_precision),
                "packed_bytes": int(i.packed_bytes)}

    def linear(self, args, ctx=None):
        """qmm_linear with a filled _lib.LinearArgs (pointers already set by the caller)."""
        _check(L.qmm_linear((ctx or context()).ptr, self.ptr, ctypes.byref(args)),
               "qmm_linear(%s)" % (self.name or "?"))


def linear_args(M, x_dtype="bf16", y_dtype=None, act="none", epilogue="kitchen"):
    """A _lib.LinearArgs from qmm_linear_args_default() with the common fields set."""
    a = L.qmm_linear_args_default()
    a.M = int(M)
    a.x_dtype = dtype_code(x_dtype)
    a.y_dtype = dtype_code(y_dtype if y_dtype is not None else x_dtype)
    a.act = act_code(act)
    a.epilogue = {"fused": L.EPILOGUE_FUSED, "kitchen": L.EPILOGUE_KITCHEN}.get(epilogue, epilogue)
    return a


def plan(weight, M=1, x_dtype="bf16", y_dtype=None, act="none", epilogue="kitchen", args=None,
         ctx=None):
    """Which engine would run `weight` for M tokens (qmm_plan); raises QmmError only when the
    arguments themselves are invalid; a layer no engine admits comes back with .status set."""
    a = args if args is not None else linear_args(M, x_dtype, y_dtype, act, epilogue)
    p = L.PlanInfo()
    _check(L.qmm_plan((ctx or context()).ptr, weight.ptr, ctypes.byref(a), ctypes.byref(p)),
           "qmm_plan(%s)" % (weight.name or "?"))
    return Plan(p)


def info():
    """Version, library path, CPU brand and features, and for every engine whether it is
    available here and why not; threads of this thread's context."""
    feats = L.qmm_cpu_features()
    names = []
    for bit in range(32):
        if feats & (1 << bit):
            n = L.qmm_cpu_feature_name(1 << bit)
            if n:
                names.append(n.decode())
    engines = {}
    for e in L.ENGINES:
        why = ctypes.create_string_buffer(256)
        ok = bool(L.qmm_engine_available(e["id"], why, 256))
        engines[e["name"]] = {"available": ok, "int8": e["kind"] == L.KIND_INT8,
                              "why": "" if ok else why.value.decode(errors="replace")}
    return {"version": L.qmm_version_string().decode(), "library": L.PATH,
            "cpu": L.qmm_cpu_brand().decode(errors="replace").strip(), "features": names,
            "engines": engines, "threads": context().threads,
            "quantize_rows": has_quantize_rows()}


def int8_engines_available():
    """Names of the int8 engines this CPU/OS/build runs (best first)."""
    return [n for n, e in info()["engines"].items() if e["available"] and e["int8"]]

