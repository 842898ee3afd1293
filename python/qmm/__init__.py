"""qmm — INT8 (W8A8) linear layers on the CPU's integer matrix engines (AMX-INT8, AVX512-VNNI,
AVX-VNNI, AVX2), from Python. A thin ctypes binding over include/qmm.h (see qmm._lib):

    import qmm
    qmm.info()                       # version, CPU, which engines run here and why not
    w = qmm.Weight.int8(ptr, N, K, scale_ptr, n_scale, convrot_gs=256, name="fc1")
    p = qmm.plan(w, M=1024, x_dtype="bf16")   # which engine would run, every engine's reason
    qmm.counters()["linear"]; qmm.reset_counters(); qmm.last_engine()   # counters per operation
    qmm.profile(enable=True); qmm.profile()  # phase timers: calls, nanoseconds per phase

Rules kept here:
  - every failing library call raises qmm.QmmError carrying the status name and
    qmm_last_error() (the message names the layer, the shape and the reason);
  - one qmm_context per process (made at the first call that runs, never at import nor by
    creating a Weight: weights need no context), its calls serialized by a lock as qmm.h asks (a
    context is used by one thread at a time); weights are shared by all;
    counters are process-wide; fork()ed children keep working (see context());
  - the GIL is released during every library call (ctypes does so for foreign calls);
  - qmm.cancel(), from any thread, makes every call through the process context that is
    running or waiting for it at that moment raise qmm.Cancelled (a QmmError; SPEC §12): a
    waiting one without running, a running one within one key block or panel, its outputs
    undefined; a call that starts after it runs normally, and with no call in flight it changes
    nothing (Context.cancel() does the same for a Context of your own, as qmm_cancel does);
  - no copies of caller memory here: callers pass pointers (torch: data_ptr()); Weight.int8
    makes the library copy and pack a weight once, Weight.borrow_int8 / borrow_w4a8 read the
    caller's memory at every call (what the kitchen backend uses);
  - a borrowed weight made over tensors (or arrays) checks here what the C descriptor cannot
    carry — device, contiguity, dtype, and the sizes the descriptor has no field for — and gives
    C the real sizes it has fields for (C's checks decide); it keeps each tensor's storage alive
    and, before every call through the Weight (linear, linear_call, int8_rows), checks that each
    tensor still holds that memory: a replaced or resized storage (set_, .data =,
    untyped_storage().resize_) is a QmmError, never a read of freed memory. A weight made over
    bare addresses (ints) is the caller's to keep valid.

Attention (SPEC §10) on torch CPU tensors, flash-attention style on the same engines:

    out = qmm.attention(q, k, v, mask=None, scale=None, mode=None, out_dtype=None)
    qmm.attention_plan(q, k, v)      # which engine would run it, every engine's reason

(torch is imported at the first such call; see qmm._attention for the contract.)

The torch-facing parts: the two framework adapters side by side, qmm.kitchen (the comfy-kitchen
backend) and qmm.comfy (ComfyUI's attention interface), and the benchmarks under qmm.bench
(python -m qmm.bench.kitchen, qmm.bench.attention, qmm.bench.overhead).
"""
import ctypes
import os
import threading
import time

from . import _lib as L

__version__ = L.qmm_version_string().decode()

__all__ = ["QmmError", "ArgumentError", "Cancelled", "cancel", "set_cancelled_type", "Weight", "Plan", "info", "plan", "counters",
           "reset_counters", "profile", "last_engine", "configure", "context", "lock", "threads",
           "library_path", "dtype_code", "act_code", "engine_name", "linear_call",
           "linear_call_planned", "generation", "attention", "attention_plan", "has_attention"]

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


class ArgumentError(QmmError, ValueError):
    """The library refused an argument (QMM_ERR_INVALID_ARGUMENT, or QMM_ERR_UNSUPPORTED for one
    it does not take, e.g. an attention head dim above 256): a QmmError that is also a
    ValueError, its message naming the argument (qmm.attention raises it)."""


class Cancelled(QmmError):
    """A call was cancelled (QMM_ERR_CANCELLED, SPEC §12): qmm.cancel() (the process context) or
    Context.cancel() came while it ran or waited for the context. Its outputs are undefined
    (partly written, or untouched when it had not started); the next call runs normally."""


_cancelled_type = Cancelled


def set_cancelled_type(cls=None):
    """The class cancelled calls raise from now on: Cancelled or a subclass of it (None:
    Cancelled). Returns the previous one. The ComfyUI node passes one that is also ComfyUI's
    InterruptProcessingException, so that a Cancel ends the prompt as an interrupt."""
    global _cancelled_type
    cls = Cancelled if cls is None else cls
    if not (isinstance(cls, type) and issubclass(cls, Cancelled)):
        raise TypeError("qmm.set_cancelled_type: %r is not a subclass of qmm.Cancelled" % (cls,))
    prev, _cancelled_type = _cancelled_type, cls
    return prev


def status_name(status):
    return L.qmm_status_name(int(status)).decode()


def _error(status, call, cls=QmmError):
    msg = (L.qmm_last_error() or b"").decode(errors="replace")
    return (_cancelled_type if status == L.ERR_CANCELLED else cls)(status, msg, call)


def _check(status, call):
    if status != L.OK:
        raise _error(status, call)


def _check_arguments(status, call):
    """_check, raising ArgumentError: for calls whose Python layer leaves the argument checks
    to the library."""
    if status != L.OK:
        raise _error(status, call, ArgumentError)


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


def has_attention():
    """Whether the loaded library has qmm_attention (SPEC §10)."""
    return L.qmm_attention is not None and L.qmm_attention_plan is not None


def attention(q, k, v, mask=None, scale=None, mode=None, out_dtype=None, engine=None, out=None):
    """softmax(scale · q·kᵀ + mask) · v on torch CPU tensors through qmm_attention: q [B, H, S,
    D], k and v [B, Hkv, Skv, D] (H a multiple of Hkv, 1 <= D <= 256; float32, bfloat16 or
    float16; any strides, a last dimension that is not contiguous is copied), mask None, bool
    (True = attend) or additive float, broadcast to [B, H, S, Skv] as torch's SDPA does (strides
    of 0, never copied); scale None (D^-1/2) or a finite real > 0; mode None/"best" (bf16
    operands with f32 accumulation where the CPU runs them faster, else f32), "f32", or "int8"
    (comfy-kitchen's int8 recipe: both products on int8 operands; less accurate: SPEC §10); out_dtype (q's unless
    given) or out, a [B, H, S, D] tensor to write, e.g. y.view(B, S, H, D).transpose(1, 2) of y
    [B, S, H·D]; engine None/"auto" or a name ("ref"). Returns out [B, H, S, D]. A bad
    argument raises a ValueError naming it (qmm.ArgumentError, also a QmmError, where the
    library refused it); another library failure QmmError; both paths (with and without
    out) judge the arguments by one check. Fully masked query rows
    give 0; zero sizes give what torch's SDPA gives (an empty out; zeros for Skv = 0). No
    derivatives: under grad mode an input or out that requires grad is a ValueError, and so is
    a dual tensor of forward-mode AD (torch.func.jvp, jacfwd) in any mode; out's version counter
    is bumped, and an inference tensor as out outside inference_mode is a ValueError (torch's
    words). Without out it runs as the torch custom op qmm::attention, so
    torch.compile (fullgraph=True too) keeps it in the graph."""
    from . import _attention
    return _attention.attention(q, k, v, mask, scale, mode, out_dtype, engine, out)


def attention_plan(q, k, v, mask=None, scale=None, mode=None, out_dtype=None, engine=None,
                   out=None):
    """The Plan of qmm.attention with these arguments (qmm_attention_plan): which engine would
    run it and every engine's reason; nothing is computed."""
    from . import _attention
    return _attention.attention_plan(q, k, v, mask, scale, mode, out_dtype, engine, out)


# ---------------------------------------------------------------- the process context
# One qmm_context per process, made at the first call that needs it (importing qmm or
# registering the kitchen backend makes none). qmm.h lets one thread at a time use a context:
# every call through it holds _lock (ctypes releases the GIL inside the call, so other Python
# threads run meanwhile; their qmm calls wait their turn, and each uses the whole pool anyway).
# Its worker count: configure(n_threads=N) if given, else the count a caller asks for at call
# time (the kitchen backend passes torch.get_num_threads()), else QMM_NUM_THREADS or every CPU.
# A different count re-makes the context; counters carry over. After os.fork() the child gets
# a fresh lock (one held by another parent thread would never be released there); the library
# starts the context's workers again itself (qmm.h, "Fork").
_lock = threading.RLock()
_options = {"n_threads": 0, "max_isa": -1, "fallback": L.FALLBACK_ALLOW, "verbose": -1,
            "disabled_engines": 0}
# The options' generation: configure() adds 1 (under _lock) whenever it changes an option, so a
# caller that keeps plans made under the options (the kitchen backend's layer kinds) compares
# one int per call instead of taking a lock, and re-plans when it moved (linear_call_planned).
_generation = 0
_proc = None               # the process Context, or None until first use
_profile_on = None         # profile(enable=...) for the process context (None: QMM_PROFILE decides)
_carried = L.Counters()    # counters of the process contexts re-made since the last reset


# Cancellation of the calls through the process context (qmm.cancel): each call takes a ticket
# (_cancels) at entry, before it waits for _lock; cancel() bumps _cancels, so a call that finds
# it changed once it holds the lock was waiting at the request (Cancelled, it does not run), and
# one that finds it changed when the library returns was running (Cancelled, whatever the
# library finished). The call in the library is _in_lib (its ticket and context), set and
# cleared under _cancel_mu; cancel() calls qmm_cancel under _cancel_mu for a call whose ticket
# is older than the request, and asks again while the library has not yet counted that call in
# flight (the moment between the ticket check and the library's entry: ctypes lets the GIL go
# there, so the cancelling thread often runs just then).
_cancel_mu = threading.RLock()      # re-entrant: cancel() may run in a signal handler
_cancels = 0
_in_lib = None             # (ticket, context pointer) of the call in the library, or None
_pending = 0               # calls between their entry and their return (running or waiting)


def _after_fork_in_child():
    global _lock, _cancel_mu, _in_lib, _pending
    _lock = threading.RLock()
    _cancel_mu = threading.RLock()
    _in_lib, _pending = None, 0


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class Context:
    """One qmm_context (worker threads, scratch arena, counters). context() is the process's;
    a Context of your own must not be used by two threads at once."""

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
        self.threads = L.qmm_context_threads(self.ptr)
        self._destroy = L.qmm_context_destroy

    def __del__(self):
        if getattr(self, "ptr", None):
            self._destroy(self.ptr)
            self.ptr = None

    def cancel(self):
        """qmm_cancel on this context (SPEC §12): its call in flight, if any, stops and raises
        Cancelled; thread-safe. Returns True if a call was in flight."""
        if L.qmm_cancel is None:
            raise QmmError(L.ERR_UNSUPPORTED, "the loaded libqmm (%s) lacks qmm_cancel" % L.PATH,
                           "qmm_cancel")
        return L.qmm_cancel(self.ptr) == 1

    def raw_counters(self):
        c = L.Counters()
        L.qmm_get_counters(self.ptr, ctypes.byref(c))
        return c

    def counters(self):
        return _counters_dict(self.raw_counters())

    def reset_counters(self):
        L.qmm_reset_counters(self.ptr)

    def last_engine(self):
        return engine_name(L.qmm_last_engine(self.ptr))


def _counters_dict(c):
    """{operation: {"calls": {engine: n}, "fallbacks": n, "errors": n}} for every operation."""
    out = {}
    for op, name in L.OPS:
        n = c.op[op]
        calls = {e["name"]: int(n.calls[e["id"]]) for e in L.ENGINES if n.calls[e["id"]]}
        out[name] = {"calls": calls, "fallbacks": int(n.fallbacks), "errors": int(n.errors)}
    return out


def _add_counters(dst, src):
    for op in range(L.OP_MAX):
        d, s = dst.op[op], src.op[op]
        for e in range(L.ENGINE_MAX):
            d.calls[e] += s.calls[e]
        d.fallbacks += s.fallbacks
        d.errors += s.errors


def _retire():
    """Drop the process context, adding its counters to _carried (caller holds _lock)."""
    global _proc
    if _proc is not None:
        _add_counters(_carried, _proc.raw_counters())
        _proc = None


def configure(n_threads=None, max_isa=None, fallback=None, verbose=None, disabled_engines=None):
    """Options of the process context (re-made at its next use; counters carry over).
    n_threads 0: the count the caller asks for at call time (the kitchen backend: torch's), else
    QMM_NUM_THREADS or every online CPU; max_isa: a qmm_isa level or -1; fallback: "allow" or
    "strict"; verbose: 1 turns dispatch logging (stderr) on. A call that changes an option
    moves generation() on (what the kitchen backend re-plans its layers by)."""
    global _generation
    with _lock:
        before = dict(_options)
        if n_threads is not None:
            if int(n_threads) < 0:
                raise ValueError("qmm.configure: n_threads=%r (needs >= 0)" % (n_threads,))
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
        if _options != before:
            _generation += 1
        _retire()


def generation():
    """How many times configure() has changed an option (0 before the first change): a plan
    made under generation g holds while generation() == g."""
    return _generation


def context(n_threads=0):
    """The process Context, made on first use. n_threads > 0 asks for that many workers unless
    configure(n_threads=...) fixed the count (a different count re-makes it). Use it while
    holding qmm.lock() (Weight.linear, plan, ... do)."""
    global _proc
    with _lock:
        want = _options["n_threads"] or n_threads
        c = _proc
        if c is None or (want and c.threads != want):
            _retire()
            c = _proc = Context(**dict(_options, n_threads=want))
            if _profile_on is not None:
                _check(L.qmm_context_set_profile(c.ptr, int(_profile_on)), "qmm_context_set_profile")
        return c


def _process_call(fn, n_threads, call, *args):
    """fn(context pointer, *args) -> status on the process context (made at first use;
    n_threads as in context()) under its lock, cancellable by cancel(): raises Cancelled where a
    cancel() came between this entry and fn's return (or fn returned QMM_ERR_CANCELLED), else
    returns fn's status."""
    global _in_lib, _pending
    with _cancel_mu:
        ticket = _cancels
        _pending += 1
    try:
        with _lock:
            c = _proc
            want = _options["n_threads"] or n_threads
            if c is None or (want and c.threads != want):
                c = context(n_threads)
            with _cancel_mu:
                if _cancels != ticket:
                    raise _cancelled_type(L.ERR_CANCELLED, "cancelled by qmm.cancel() while it "
                                          "waited for the context; it did not run", call)
                _in_lib = (ticket, c.ptr)
            st = L.ERR_CANCELLED
            try:
                st = fn(c.ptr, *args)
            finally:
                with _cancel_mu:
                    _in_lib = None
                    late = _cancels != ticket
    finally:
        with _cancel_mu:
            _pending -= 1
    if late and st in (L.OK, L.ERR_CANCELLED):
        raise _cancelled_type(L.ERR_CANCELLED, "cancelled by qmm.cancel() while it ran; its "
                              "outputs are undefined", call)
    if st == L.ERR_CANCELLED:
        raise _error(st, call)
    return st


def cancel():
    """Cancel every call through the process context that is running or waiting for it now
    (SPEC §12): each raises Cancelled (a QmmError) — a waiting one without running, a running
    one within one key block (attention) or panel (linear), 50 ms at most on the machines it was
    measured on, its outputs undefined. Thread-safe; it waits for no call. A call that starts
    after it runs normally; with no call in flight it changes nothing. Returns True if some call
    was running or waiting."""
    global _cancels
    with _cancel_mu:
        _cancels += 1
        mine, some = _cancels, _pending > 0
    while True:
        with _cancel_mu:
            cur = _in_lib
            if cur is None or cur[0] >= mine or L.qmm_cancel is None:
                break
            if L.qmm_cancel(cur[1]) != 0:
                return True
        time.sleep(20e-6)      # it has not entered the library yet (or has just left it)
    return some


def linear_call(weight, args, n_threads=0):
    """qmm_linear(ctx, weight, args) on the process context (made at first use; n_threads as in
    context()) under its lock, the GIL released during the call: the hot path of a caller that
    fills a _lib.LinearArgs itself (the kitchen backend). weight: a Weight or its handle's
    pointer. Raises QmmError."""
    if isinstance(weight, Weight):
        weight._still_borrowed("qmm_linear")
        ptr = weight.ptr
    else:
        ptr = weight
    st = _process_call(L.qmm_linear, n_threads, "qmm_linear", ptr, ctypes.byref(args))
    if st != L.OK:
        _check(st, "qmm_linear")


def linear_call_planned(weight_ptr, args, n_threads, generation):
    """linear_call(weight_ptr, args, n_threads) if the options are still those of generation
    (the generation the caller planned args under), checked under the lock configure() takes:
    True when the call ran, False (nothing run) when configure() changed an option since — the
    caller plans again. Raises QmmError as linear_call does."""
    with _lock:
        if _generation != generation:
            return False
        c = _proc
        want = _options["n_threads"] or n_threads
        if c is None or (want and c.threads != want):
            c = context(n_threads)
        st = L.qmm_linear(c.ptr, weight_ptr, ctypes.byref(args))
    if st != L.OK:
        _check(st, "qmm_linear")
    return True


def lock():
    """The lock every call through the process context holds (re-entrant)."""
    return _lock


def threads():
    """Workers of the process context if it exists, else how many it would get now."""
    with _lock:
        if _proc is not None:
            return _proc.threads
    return _options["n_threads"] or _default_threads()


def _default_threads():
    n = 0
    try:
        n = int(os.environ.get("QMM_NUM_THREADS", "0"))
    except ValueError:
        pass
    return n if n > 0 else (os.cpu_count() or 1)


def counters():
    """Per operation ("linear", "attention"), the calls per engine, fallbacks and errors of every
    call through the process context (all threads) since the last reset_counters():
    {"linear": {"calls": {engine: n}, "fallbacks": n, "errors": n}, "attention": {...}}."""
    with _lock:
        c = L.Counters()
        ctypes.memmove(ctypes.byref(c), ctypes.byref(_carried), ctypes.sizeof(c))
        if _proc is not None:
            _add_counters(c, _proc.raw_counters())
        return _counters_dict(c)


def reset_counters():
    with _lock:
        ctypes.memset(ctypes.byref(_carried), 0, ctypes.sizeof(_carried))
        if _proc is not None:
            _proc.reset_counters()


def profile(enable=None, reset=False):
    """The phase timers of the process context (qmm.h qmm_profile, SPEC §4): enable True/False
    turns them on/off (for a context re-made later too; None leaves them as QMM_PROFILE set them);
    returns {"calls", "threads", "enabled", "ns": {phase: nanoseconds}} of the successful linear
    calls since the last reset (a re-made context starts from zero); reset=True zeroes the totals
    after reading them."""
    global _profile_on
    with _lock:
        c = context()
        if enable is not None:
            _profile_on = bool(enable)
            _check(L.qmm_context_set_profile(c.ptr, int(_profile_on)), "qmm_context_set_profile")
        p = L.Profile()
        L.qmm_get_profile(c.ptr, ctypes.byref(p))
        if reset:
            L.qmm_reset_profile(c.ptr)
    return {"calls": int(p.calls), "threads": int(p.threads), "enabled": bool(p.enabled),
            "ns": {name: int(p.ns[i]) for i, name in enumerate(L.PHASES)}}


def last_engine():
    """The engine that ran the last successful linear call of the process ("auto" if none)."""
    with _lock:
        return _proc.last_engine() if _proc is not None else "auto"


# ---------------------------------------------------------------- weights and plans
class Plan:
    """What qmm_linear would do: .engine (name), .regime (the engine's descriptor for the call
    class by name, "" for most engines), .is_fallback, .status (name), .reasons {engine: why it
    refused} for every refusing engine, .text (qmm_plan_format)."""

    def __init__(self, p):
        self.engine = engine_name(p.engine)
        self.regime = p.regime.decode(errors="replace")
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


# qmm dtype codes of the dtypes a borrowed tensor (torch's names) or array (numpy's typestr
# without byte order) may have
_TORCH_DTYPE_CODES = {"torch.int8": L.I8, "torch.uint8": L.U8, "torch.float32": L.F32,
                      "torch.float16": L.F16, "torch.bfloat16": L.BF16,
                      "torch.float8_e4m3fn": L.F8_E4M3}
_TYPESTR_CODES = {"i1": L.I8, "u1": L.U8, "f4": L.F32, "f2": L.F16}


class _Buffer:
    """One object a borrowed weight reads. .address; for a torch tensor or an array-interface
    object also .dtype (a qmm dtype code, None if qmm has none; .dtype_text for messages),
    .numel, .nbytes, .shape, .strides (elements) and .contiguous, else those are None. .keep
    holds what keeps the memory alive (a tensor's storage: a later set_ or .data = on the
    tensor leaves it alive); .changed() says whether the object still covers the memory it
    covered at borrowing (None) or how it changed."""

    def __init__(self, obj, param, fn):
        self.obj, self.param = obj, param
        self.dtype = self.dtype_text = self.numel = self.nbytes = None
        self.shape = self.strides = self.contiguous = None
        self.keep = obj
        self._mark = self.mark0 = None
        if obj is None or isinstance(obj, int):
            self.address, self.keep = obj, None
            return
        if callable(getattr(obj, "untyped_storage", None)) and callable(getattr(obj, "data_ptr",
                                                                                None)):
            if obj.device.type != "cpu":
                raise ValueError("%s: %s is on %s (qmm reads CPU memory)" % (fn, param,
                                                                             obj.device))
            if str(obj.layout) != "torch.strided":
                raise ValueError("%s: %s has layout %s (strided tensors only)" % (
                    fn, param, obj.layout))
            self.dtype_text = str(obj.dtype)
            self.dtype = _TORCH_DTYPE_CODES.get(self.dtype_text)
            self.shape, self.strides = tuple(obj.shape), tuple(obj.stride())
            self.numel, self.nbytes = obj.numel(), obj.numel() * obj.element_size()
            self.contiguous = obj.is_contiguous()
            self.keep = (obj, obj.untyped_storage())
            self._mark = self._torch_mark
        elif getattr(obj, "__array_interface__", None) is not None:
            ai = obj.__array_interface__
            self.dtype_text = ai["typestr"]
            self.dtype = _TYPESTR_CODES.get(ai["typestr"][1:])
            item = int(ai["typestr"][2:])
            self.shape = tuple(ai["shape"])
            self.numel = 1
            for n in self.shape:
                self.numel *= n
            self.nbytes = self.numel * item
            st = ai.get("strides")
            self.contiguous = st is None
            if st is None:
                st, acc = [], 1
                for n in reversed(self.shape):
                    st.insert(0, acc)
                    acc *= n
            else:
                st = [x // item for x in st]
            self.strides = tuple(st)
            self._mark = self._array_mark
        self.address = _address(obj)
        if self._mark is not None:
            self.mark0 = self._mark()

    def _torch_mark(self):
        t = self.obj
        st = t.untyped_storage()
        return (t.data_ptr(), tuple(t.shape), tuple(t.stride()), st.data_ptr(), st.nbytes())

    def _array_mark(self):
        ai = self.obj.__array_interface__
        return (ai["data"][0], tuple(ai["shape"]), ai.get("strides"))

    def changed(self):
        if self._mark is None:
            return None
        now = self._mark()
        if now == self.mark0:
            return None
        if len(now) == 5 and now[4] != self.mark0[4]:
            return "its storage was resized from %d to %d bytes" % (self.mark0[4], now[4])
        if now[0] != self.mark0[0]:
            return "its memory is now at another address (set_, .data =, resize_)"
        return "its shape or strides changed (%s %s, borrowed as %s %s)" % (
            list(now[1]), list(now[2] or ()), list(self.mark0[1]), list(self.mark0[2] or ()))

    def need(self, fn, dtypes, what, numel=None, contiguous=True):
        """Check a tensor / array against what the weight reads (nothing to check for an
        address): dtype code in dtypes, contiguous, numel values if given."""
        if self.dtype_text is None:
            return self
        if self.dtype not in dtypes:
            raise ValueError("%s: %s has dtype %s, needs %s" % (fn, self.param, self.dtype_text,
                                                                 what))
        if contiguous and not self.contiguous:
            raise ValueError("%s: %s is not contiguous (shape %s, strides %s): qmm reads it as "
                             "packed rows" % (fn, self.param, list(self.shape),
                                              list(self.strides)))
        if numel is not None and self.numel != numel:
            raise ValueError("%s: %s has %d values (shape %s), needs %d" % (
                fn, self.param, self.numel, list(self.shape), numel))
        return self


class Weight:
    """A qmm_weight. int8() copies and packs the caller's memory at creation; borrow_int8() and
    borrow_w4a8() copy nothing and read the caller's memory at every call. Creating one uses no
    qmm context (the library takes ctx NULL; the process context is made at the first call); the
    handle serves every context. It is freed by close() or when the object is collected."""

    _watch = ()

    def __init__(self, ptr, name=None):
        self.ptr = ptr
        self.name = name
        self._destroy = L.qmm_weight_destroy

    @classmethod
    def _borrow(cls, fn, fname, d, bufs, name):
        # a borrowed Weight from descriptor d through fn (qmm_weight_borrow_*), keeping what
        # keeps the memory of every buffer in bufs alive until close(), and watching the tensors
        # and arrays among them
        p = ctypes.c_void_p()
        _check(fn(None, ctypes.byref(d), ctypes.byref(p)), fname)
        w = cls(p.value, name)
        w._borrowed = [b.keep for b in bufs if b.keep is not None]
        w._watch = tuple(b for b in bufs if b.mark0 is not None)
        return w

    def _still_borrowed(self, call):
        """QmmError if a borrowed tensor or array no longer covers the memory the handle reads
        (a replaced or resized storage): the call would read memory that is not the tensor's."""
        for b in self._watch:
            why = b.changed()
            if why is not None:
                raise QmmError(L.ERR_INVALID_ARGUMENT,
                               "weight %s: the borrowed %s no longer holds the memory the weight "
                               "reads: %s; borrow it again" % (self.name or "?", b.param, why),
                               call)

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
             name=None, full_precision=False):
        """An int8 weight [N, K] (row stride ld, 0 = K) at address data, fp32 scales (n_scale =
        1 or N values) at address scale, optional bias (N values of bias_dtype) at address
        bias; convrot_gs 0 or the ConvRot group size the weight was rotated with."""
        d = cls._desc(data, N, K, scale, n_scale, ld, bias, bias_dtype, convrot_gs, name, full_precision)
        p = ctypes.c_void_p()
        _check(L.qmm_weight_create_int8(None, ctypes.byref(d), ctypes.byref(p)),
               "qmm_weight_create_int8")
        return cls(p.value, name)

    @classmethod
    def borrow_int8(cls, data, N, K, scale, n_scale, ld=0, bias=None, bias_dtype="f32", convrot_gs=0,
                    name=None, full_precision=False):
        """qmm_weight_borrow_int8: a weight over the caller's memory, nothing copied. data, scale
        and bias are each an address (int), a ctypes object, an object with the numpy array
        interface or a CPU torch tensor: data int8, [N, >= K] with strides (ld, 1) or contiguous
        with at least (N-1)·ld + K values (ld 0 = K); scale n_scale float32 values; bias N values
        of bias_dtype; both contiguous (a ValueError naming the one that is not). The Weight keeps
        every object's memory alive until close(); every call reads it as it is then: change it
        in place between calls (the next call sees the change), never during one. A tensor whose
        storage is replaced or resized afterwards makes the next call a QmmError."""
        fn = "qmm.Weight.borrow_int8(%s)" % (name or "?")
        N, K, ld = int(N), int(K), int(ld)
        rows = ld or K
        bd = _Buffer(data, "data", fn)
        if bd.dtype_text is not None:
            if bd.dtype != L.I8:
                raise ValueError("%s: data has dtype %s, needs int8" % (fn, bd.dtype_text))
            if len(bd.shape) == 2 and bd.shape[0] == N and bd.shape[1] >= K and \
                    (bd.strides[1] == 1 or bd.shape[1] == 1) and (bd.strides[0] == rows or N == 1):
                pass                                   # [N, >= K] rows ld apart
            elif not bd.contiguous:
                raise ValueError("%s: data (shape %s, strides %s) is neither [N=%d, >= K=%d] with "
                                 "strides (ld=%d, 1) nor contiguous" % (
                                     fn, list(bd.shape), list(bd.strides), N, K, rows))
            elif N >= 1 and K >= 1 and bd.numel < (N - 1) * rows + K:
                raise ValueError("%s: data has %d values, needs (N-1)·ld + K = %d (N=%d, K=%d, "
                                 "ld=%d)" % (fn, bd.numel, (N - 1) * rows + K, N, K, rows))
        bs = _Buffer(scale, "scale", fn).need(fn, (L.F32,), "float32", int(n_scale))
        bb = _Buffer(bias, "bias", fn).need(fn, (dtype_code(bias_dtype),),
                                            "bias_dtype=%r" % (bias_dtype,), N)
        d = cls._desc(bd.address, N, K, bs.address, n_scale, ld, bb.address, bias_dtype,
                      convrot_gs, name, full_precision)
        return cls._borrow(L.qmm_weight_borrow_int8, "qmm_weight_borrow_int8", d, (bd, bs, bb),
                           name)

    @classmethod
    def borrow_w4a8(cls, codes, N, K, bits, s_rel, s_rel_dtype, group_size, s_channel,
                    codebook=None, bias=None, bias_dtype="f32", convrot_gs=256, name=None,
                    full_precision=False):
        """qmm_weight_borrow_w4a8: a W4A8 / W6A8 weight over the caller's memory (SPEC §11),
        nothing copied: codes [N, K*bits/8] bytes (int8 or uint8), s_rel [N, K/group_size] of
        s_rel_dtype ("f8_e4m3" or "f32"), s_channel [N] float32, optional codebook [16] float32
        and bias [N] of bias_dtype. Each is an address, a ctypes object, an array-interface
        object or a CPU torch tensor. Of a tensor or array, the contiguity, the dtype and the
        count of s_channel and bias are checked here (a ValueError naming it); the sizes of codes,
        s_rel and codebook go to the library as they are (codes_bytes, n_s_rel, n_codebook),
        whose checks decide (QmmError). Of a bare address, the sizes are the ones N, K, bits and
        group_size imply. The Weight keeps every object's memory alive until close(); a tensor
        whose storage is replaced or resized afterwards makes the next call a QmmError."""
        if L.qmm_weight_borrow_w4a8 is None:
            raise QmmError(L.ERR_UNSUPPORTED, "qmm: %s lacks qmm_weight_borrow_w4a8" % L.PATH)
        fn = "qmm.Weight.borrow_w4a8(%s)" % (name or "?")
        N, K, bits, group_size = int(N), int(K), int(bits), int(group_size)
        srd = L.F8_E4M3 if s_rel_dtype in ("f8_e4m3", "float8_e4m3fn") else dtype_code(s_rel_dtype)
        bc = _Buffer(codes, "codes", fn).need(fn, (L.I8, L.U8), "int8 or uint8 bytes")
        br = _Buffer(s_rel, "s_rel", fn).need(fn, (srd,), "s_rel_dtype=%r" % (s_rel_dtype,))
        bs = _Buffer(s_channel, "s_channel", fn).need(fn, (L.F32,), "float32", N)
        bk = _Buffer(codebook, "codebook", fn).need(fn, (L.F32,), "float32")
        bb = _Buffer(bias, "bias", fn).need(fn, (dtype_code(bias_dtype),),
                                            "bias_dtype=%r" % (bias_dtype,), N)
        d = L.qmm_w4a8_desc_default()
        bname = name.encode() if name else None
        d.name = bname
        d.N, d.K, d.bits = N, K, bits
        d.codes = bc.address
        d.codes_bytes = bc.nbytes if bc.nbytes is not None else N * K * bits // 8
        d.s_rel = br.address
        d.s_rel_dtype = srd
        d.group_size = group_size
        d.n_s_rel = br.numel if br.numel is not None else N * (K // max(group_size, 1))
        d.codebook = bk.address
        d.n_codebook = (bk.numel if bk.numel is not None else 16) if codebook is not None else 0
        d.s_channel = bs.address
        d.bias = bb.address
        d.bias_dtype = dtype_code(bias_dtype)
        d.convrot_gs = int(convrot_gs)
        d.full_precision = int(bool(full_precision))
        return cls._borrow(L.qmm_weight_borrow_w4a8, "qmm_weight_borrow_w4a8", d,
                           (bc, br, bs, bk, bb), name)

    def int8_rows(self, n0=0, rows=None):
        """qmm_weight_int8_rows: the int8 values every engine multiplies (a W4A8 weight's codes
        decoded), rows [n0, n0 + rows), as a bytearray of rows × K."""
        self._still_borrowed("qmm_weight_int8_rows")
        i = self.info()
        rows = i["N"] - n0 if rows is None else rows
        buf = (ctypes.c_int8 * max(rows * i["K"], 1))()
        _check(L.qmm_weight_int8_rows(self.ptr, n0, rows, buf, i["K"]), "qmm_weight_int8_rows")
        return bytearray(buf)[:rows * i["K"]]

    def close(self):
        if getattr(self, "ptr", None):
            self._destroy(self.ptr)
            self.ptr = None
        self._borrowed = None
        self._watch = ()

    __del__ = close

    def info(self):
        i = L.WeightInfo()
        L.qmm_weight_get_info(self.ptr, ctypes.byref(i))
        return {"name": i.name.decode() if i.name else None, "N": i.N, "K": i.K,
                "is_int8": bool(i.is_int8), "dtype": L.qmm_dtype_name(i.dtype).decode(),
                "convrot_gs": i.convrot_gs, "per_tensor_scale": bool(i.per_tensor_scale),
                "has_bias": bool(i.has_bias), "full_precision": bool(i.full_precision),
                "packed_bytes": int(i.packed_bytes), "code_bits": i.code_bits,
                "group_size": i.group_size, "has_codebook": bool(i.has_codebook)}

    def linear(self, args, ctx=None, n_threads=0):
        """qmm_linear with a filled _lib.LinearArgs (pointers already set by the caller), on ctx
        or the process context (n_threads as in context())."""
        self._still_borrowed("qmm_linear(%s)" % (self.name or "?"))
        if ctx is not None:
            st = L.qmm_linear(ctx.ptr, self.ptr, ctypes.byref(args))
        else:
            st = _process_call(L.qmm_linear, n_threads, "qmm_linear(%s)" % (self.name or "?"),
                               self.ptr, ctypes.byref(args))
        if st != L.OK:
            _check(st, "qmm_linear(%s)" % (self.name or "?"))


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
    with _lock:
        _check(L.qmm_plan((ctx or context()).ptr, weight.ptr, ctypes.byref(a), ctypes.byref(p)),
               "qmm_plan(%s)" % (weight.name or "?"))
    return Plan(p)


def info():
    """Version, library path, CPU brand and features, and for every engine whether it is
    available here and why not; the process context's workers (threads())."""
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
            "engines": engines, "threads": threads(),
}


def int8_engines_available():
    """Names of the int8 engines this CPU/OS/build runs (best first); makes no context."""
    return [e["name"] for e in L.ENGINES
            if e["kind"] == L.KIND_INT8 and L.qmm_engine_available(e["id"], None, 0)]

