"""qmm.kitchen.weights — the qmm weight handle of a kitchen int8 weight.

The backend runs on borrowed weights (qmm_weight_borrow_int8): a handle holds the addresses,
shapes and strides of the caller's int8 matrix, its fp32 scales and its bias, and nothing else;
every call reads that memory as it is then. So a handle is valid for whatever tensor lives at
those addresses with that layout, and it is found by exactly that:
    (data address, N, K, row stride, scale address, n_scale, bias address, bias dtype, group)
Nothing can go stale (a write by any means is read by the next call), a re-wrapped Parameter
over the same storage finds the same handle, creating one is O(1) (no copy, no repack), and
two threads asking at once at worst both make one (each uses its own; one is kept).

handle(...) takes the scales as fp32 and the bias as given only when their memory can be read
directly (fp32 scales, contiguous); otherwise the caller makes a per-call fp32 / contiguous copy
and a transient handle over it (transient(...)), which is not kept.

The table is bounded (MAX handles): past it the oldest entries go (a handle in use by a call
stays alive through that call's reference).
"""
import ctypes
import threading

import qmm
from qmm import _lib as L

MAX = 4096

_lock = threading.Lock()
_table = {}
_borrow = getattr(L, "qmm_weight_borrow_int8", None)


class Handle:
    """A borrowed qmm_weight (closed when collected)."""
    __slots__ = ("ptr", "key", "__weakref__")

    def __init__(self, key):
        data, N, K, ld, sptr, ns, bptr, bdt, gs = key
        d = L.qmm_weight_desc_default()
        d.name = b"kitchen.int8"
        d.N, d.K, d.ld = N, K, ld
        d.data, d.scale, d.n_scale = data, sptr, ns
        d.bias, d.bias_dtype = bptr, bdt
        d.convrot_gs = gs
        p = ctypes.c_void_p()
        with qmm.lock():
            st = _make(qmm.context().ptr, ctypes.byref(d), ctypes.byref(p))
        if st != L.OK:
            qmm._check(st, "qmm_weight_borrow_int8([%d, %d])" % (N, K))
        self.ptr = p.value
        self.key = key

    def __del__(self, _destroy=L.qmm_weight_destroy):
        if self.ptr:
            _destroy(self.ptr)
            self.ptr = None


def _make(ctx, desc, out):
    return (_borrow or L.qmm_weight_create_int8)(ctx, desc, out)


def available():
    """None if the loaded libqmm borrows weights, else the reason."""
    return None


def handle(key):
    """The handle of this key, made on first use."""
    h = _table.get(key)
    if h is not None:
        return h
    h = Handle(key)
    with _lock:
        old = _table.get(key)
        if old is not None:
            return old
        if len(_table) >= MAX:
            for k in list(_table)[:MAX // 4]:
                del _table[k]
        _table[key] = h
    return h


def transient(key):
    """A handle for one call only (per-call copies of the scale or the bias)."""
    return Handle(key)


def clear():
    with _lock:
        _table.clear()


def count():
    with _lock:
        return len(_table)
