"""qmm.kitchen.weights — the qmm weight handle of a kitchen int8 weight.

The backend runs on borrowed weights (qmm_weight_borrow_int8): a handle holds the addresses,
shapes and strides of the caller's int8 matrix, its fp32 scales and its bias, and nothing else;
every call reads that memory as it is then. So a handle is valid for whatever tensor lives at
those addresses with that layout, and it is found by exactly that:
    (data address, N, K, row stride, scale address, n_scale, bias address, bias dtype, group)
Nothing can go stale (a write by any means is read by the next call), creating a handle is O(1)
(no copy, no repack, whatever N·K), and two threads asking at once at worst both make one (each
uses its own; one is kept).

handle(...) takes the scales as fp32 and the bias as given only when their memory can be read
directly (fp32 scales, contiguous); otherwise the caller makes a per-call fp32 / contiguous copy
and a transient handle over it (transient(...)), which is not kept.

An entry lives while the tensor objects it was made for do (the int8 tensor, the scale, the
bias: weakref.finalize on each drops it), so the table holds about one handle per live layer;
a re-wrap (the kitchen's detach makes new tensor objects, and a new scale tensor) makes a new
handle, in O(1), and the old one goes with the old objects. The table is also bounded (MAX
handles): past it the oldest entries go. A handle in use by a call stays alive through that
call's reference.
"""
import threading
import weakref

import qmm
from qmm import _lib as L

MAX = 4096

_lock = threading.Lock()
_table = {}
_borrow = L.qmm_weight_borrow_int8


def _make(key):
    """A borrowed qmm.Weight for key (addresses only: it keeps no tensor alive)."""
    data, N, K, ld, sptr, ns, bptr, bdt, gs = key
    return qmm.Weight.borrow_int8(data, N, K, sptr, ns, ld=ld, bias=bptr, bias_dtype=bdt,
                                  convrot_gs=gs, name="kitchen.int8[%d,%d]" % (N, K))


def handle(key, owners, make=None):
    """The handle of this key, made on first use (by make(key); default: a borrowed int8 weight
    of the key); dropped when one of owners (the tensors whose memory it reads) is collected."""
    h = _table.get(key)
    if h is not None:
        return h
    h = (make or _make)(key)
    with _lock:
        old = _table.get(key)
        if old is not None:
            return old
        if len(_table) >= MAX:
            for k in list(_table)[:MAX // 4]:
                del _table[k]
        _table[key] = h
    for o in owners:
        if o is not None:
            weakref.finalize(o, _drop, key, h)
    return h


def _drop(key, h):
    with _lock:
        if _table.get(key) is h:
            del _table[key]


def transient(key, make=None):
    """A handle for one call only (per-call copies of the scale or the bias)."""
    return (make or _make)(key)


def clear():
    with _lock:
        _table.clear()


def count():
    """Handles in the table."""
    with _lock:
        return len(_table)


def handles():
    """The handles in the table (for inspection: each one's qmm info)."""
    with _lock:
        return list(_table.values())
