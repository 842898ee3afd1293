"""qmm.cancel() (SPEC §12): from another thread it stops a long qmm.attention / qmm linear call
through the process context (qmm.Cancelled, a QmmError with status QMM_ERR_CANCELLED), well
within a generous bound (1 s: machines are noisy; the latency is printed), and the next call
gives the bits of an uncancelled one; a call waiting for the context is cancelled without
running (its out untouched); a cancel with nothing in flight changes nothing; Cancelled passes
through qmm.comfy.attention (no fallback); the ComfyUI node links ComfyUI's interrupt to it (a
stub comfy.model_management)."""
import random
import sys
import threading
import time
import types

import pytest
import torch

import qmm
from qmm import _lib as L

from conftest import SEED
from test_comfyui_node import _import_node

pytestmark = pytest.mark.skipif(L.qmm_cancel is None or not qmm.has_attention(),
                                reason="the loaded libqmm lacks qmm_cancel or qmm_attention")

S, D = 6144, 128


def _qkv(S=S):
    g = torch.Generator().manual_seed(SEED)
    return [torch.randn(1, 1, S, D, generator=g) for _ in range(3)]


class _Runner(threading.Thread):
    """fn() on its own thread: .error (the exception it raised), .t_end (when it returned)."""

    def __init__(self, fn):
        super().__init__(daemon=True)
        self.fn, self.error, self.t_end, self.result = fn, None, None, None

    def run(self):
        try:
            self.result = self.fn()
        except BaseException as e:   # noqa: BLE001 — the test looks at it
            self.error = e
        self.t_end = time.monotonic()


def _cancel_during(fn, t_call, rng, cancel=qmm.cancel):
    """Runs fn on a thread, cancels it at a random moment of its first half; the runner and the
    cancel's time. A call that ended before the cancel (a noisy machine: it ran faster than
    t_call) must have given its whole result; then it is tried again, earlier."""
    for attempt in range(5):
        r = _Runner(fn)
        r.start()
        time.sleep(t_call * rng.uniform(0.05, 0.5) / (1 + attempt))
        t0 = time.monotonic()
        cancel()
        r.join(60)
        assert not r.is_alive()
        if r.error is not None or r.t_end > t0:
            return r, t0
    return r, t0


def _timed(fn):
    """fn's result and the shorter time of two runs."""
    t0 = time.monotonic()
    fn()
    t1 = time.monotonic()
    out = fn()
    return out, min(t1 - t0, time.monotonic() - t1)


def test_cancel_attention_from_another_thread():
    q, k, v = _qkv()
    want, t_call = _timed(lambda: qmm.attention(q, k, v, mode="int8"))
    assert qmm.cancel() is False                  # nothing in flight: nothing changes
    assert torch.equal(qmm.attention(q, k, v, mode="int8"), want)
    rng = random.Random(SEED)
    errors_before = qmm.counters()["attention"]["errors"]
    lat = []
    for _ in range(3):
        r, t0 = _cancel_during(lambda: qmm.attention(q, k, v, mode="int8"), t_call, rng)
        assert isinstance(r.error, qmm.Cancelled), r.error
        assert isinstance(r.error, qmm.QmmError) and r.error.status_name == "QMM_ERR_CANCELLED"
        lat.append((r.t_end - t0) * 1e3)
        assert lat[-1] < 1000, lat
        assert torch.equal(qmm.attention(q, k, v, mode="int8"), want)   # the next call: whole
    assert qmm.counters()["attention"]["errors"] - errors_before >= 1
    print("qmm.attention [1,1,%d,%d] mode int8, %d threads: %.0f ms a call; cancel latency %s ms"
          % (S, D, qmm.threads(), t_call * 1e3, ", ".join("%.2f" % x for x in lat)))


def test_cancel_linear_from_another_thread():
    N = K = 2048
    M = 1024
    w8 = torch.randint(-127, 128, (N, K), dtype=torch.int8)
    sc = torch.rand(N) * 0.01
    w = qmm.Weight.borrow_int8(w8, N, K, sc, N, name="cancel.fc")
    x = torch.randn(M, K)
    y = torch.empty(M, N)

    def run():
        a = qmm.linear_args(M, "f32", "f32", epilogue="fused")
        a.x, a.y = x.data_ptr(), y.data_ptr()
        w.linear(a)
        return y.clone()
    want, t_call = _timed(run)
    rng = random.Random(SEED + 1)
    r, t0 = _cancel_during(run, t_call, rng)
    assert isinstance(r.error, qmm.Cancelled), r.error
    print("qmm_linear [%d, %d] M=%d: %.0f ms a call; cancel latency %.2f ms"
          % (N, K, M, t_call * 1e3, (r.t_end - t0) * 1e3))
    assert (r.t_end - t0) < 1.0
    assert torch.equal(run(), want)


def test_waiting_call_is_cancelled_without_running():
    q, k, v = _qkv(256)
    out = torch.full((1, 1, 256, D), 7.0)
    entered = threading.Event()
    with qmm.lock():                              # a call in flight holds the context
        r = _Runner(lambda: (entered.set(), qmm.attention(q, k, v, out=out)))
        r.start()
        entered.wait(10)
        time.sleep(0.05)                          # it waits for the lock now
        assert qmm.cancel() is True
    r.join(10)
    assert isinstance(r.error, qmm.Cancelled) and "did not run" in str(r.error)
    assert torch.equal(out, torch.full_like(out, 7.0))     # untouched
    assert torch.equal(qmm.attention(q, k, v), qmm.attention(q, k, v))   # later calls run


def test_context_cancel_and_idle_cancel():
    ctx = qmm.Context(n_threads=1)
    assert ctx.cancel() is False                  # nothing in flight
    assert L.qmm_cancel(None) == -1 and b"ctx is NULL" in L.qmm_last_error()
    assert qmm.status_name(L.ERR_CANCELLED) == "QMM_ERR_CANCELLED"


def test_cancelled_passes_through_comfy_attention(monkeypatch):
    import qmm.comfy.attention as ca

    def cancelled(*a, **kw):
        raise qmm.Cancelled(L.ERR_CANCELLED, "cancelled by qmm.cancel() while it ran", "qmm_attention")
    monkeypatch.setattr(qmm, "attention", cancelled)
    q = torch.randn(1, 16, 2 * 64)
    with pytest.raises(qmm.Cancelled):
        ca.attention(q, q, q, 2)                  # no fallback to ComfyUI's / torch's attention
    assert not any("Cancelled" in why for why in ca.declines())


def test_set_cancelled_type():
    class Mine(qmm.Cancelled):
        pass
    with pytest.raises(TypeError):
        qmm.set_cancelled_type(RuntimeError)
    prev = qmm.set_cancelled_type(Mine)
    try:
        assert prev is qmm.Cancelled
        ctx = qmm.Context(n_threads=1)             # a C-level QMM_ERR_CANCELLED raises Mine
        with pytest.raises(Mine):
            qmm._check(L.ERR_CANCELLED, "qmm_linear")
        del ctx
    finally:
        qmm.set_cancelled_type(None)


def test_node_links_comfyui_interrupt(monkeypatch):
    class InterruptProcessingException(Exception):
        pass
    mm = types.ModuleType("comfy.model_management")
    mm.InterruptProcessingException = InterruptProcessingException
    mm.interrupt_processing = False

    def interrupt_current_processing(value=True):
        mm.interrupt_processing = value
    mm.interrupt_current_processing = interrupt_current_processing
    mm.processing_interrupted = lambda: mm.interrupt_processing
    comfy = types.ModuleType("comfy")
    comfy.model_management = mm
    monkeypatch.setitem(sys.modules, "comfy", comfy)
    monkeypatch.setitem(sys.modules, "comfy.model_management", mm)
    try:
        node = _import_node("qmm_comfyui_node_cancel")     # setup() links the interrupt
        assert getattr(mm.interrupt_current_processing, "_qmm_cancel", False)
        assert node.link_interrupt(mm) is True             # once: not wrapped twice
        assert mm.interrupt_current_processing.__wrapped__ is interrupt_current_processing
        q, k, v = _qkv()
        want, t_call = _timed(lambda: qmm.attention(q, k, v, mode="int8"))
        mm.interrupt_current_processing(False)             # ComfyUI clears it: cancels nothing
        assert mm.processing_interrupted() is False
        r, t0 = _cancel_during(lambda: qmm.attention(q, k, v, mode="int8"), t_call,
                               random.Random(SEED + 2), lambda: mm.interrupt_current_processing())
        assert mm.processing_interrupted() is True
        assert isinstance(r.error, qmm.Cancelled) and isinstance(r.error, InterruptProcessingException)
        print("ComfyUI interrupt → qmm.cancel(): latency %.2f ms" % ((r.t_end - t0) * 1e3))
        assert r.t_end - t0 < 1.0
        assert torch.equal(qmm.attention(q, k, v, mode="int8"), want)
    finally:
        qmm.set_cancelled_type(None)
