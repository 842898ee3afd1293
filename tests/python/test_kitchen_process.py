"""The process side of the backend: register() and creating a qmm.Weight make no qmm context; a fork()ed child and a
multiprocessing 'fork' pool run qmm (the parent's worker threads do not exist there) without
hanging, also after qmm.configure(); one qmm context per process, sized by torch's thread count
at call time; counters count every thread's calls. Scripts run in subprocesses with a timeout,
so a hang is a failure, never a stuck test. The expected output is computed by eager before any
fork and compared as bytes: torch's own OpenMP pool does not survive fork() (a child's parallel
torch op can hang once the parent ran one), which is torch's matter, not qmm's."""
import os
import subprocess
import sys
import textwrap
import threading

import torch

import comfy_kitchen as ck

import qmm

from conftest import ROOT

_PRELUDE = """
import os, sys, torch
import comfy_kitchen as ck
import qmm, qmm.kitchen
torch.set_num_threads(2)
w = torch.randint(-127, 128, (512, 1024), dtype=torch.int8)
s = torch.rand(512, 1) * 1e-3
x = torch.randn(64, 1024)
with ck.use_backend("eager"):
    want = ck.int8_linear(x, w, s, None, torch.float32).numpy().tobytes()
def call():
    qmm.reset_counters()
    y = ck.int8_linear(x, w, s, None, torch.float32)
    assert sum(qmm.counters()["linear"]["calls"].values()) == 1, qmm.counters()["linear"]
    assert y.numpy().tobytes() == want, "differs from eager"
"""


def _run(body, timeout=90):
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(qmm.__file__)))
    src = _PRELUDE + textwrap.dedent(body)
    r = subprocess.run([sys.executable, "-c", src], capture_output=True, text=True, env=env,
                       cwd=ROOT, timeout=timeout)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    return r.stdout


def test_register_makes_no_context():
    out = _run("""
        n0 = len(os.listdir("/proc/self/task"))
        qmm.kitchen.register()
        assert qmm._proc is None, "register() made a qmm context"
        assert len(os.listdir("/proc/self/task")) == n0
        call()
        assert qmm._proc is not None and qmm._proc.threads == 2
        print("ok")
    """)
    assert "ok" in out


def test_weights_make_no_context():
    # every kind of qmm.Weight is made with no qmm context (the library takes ctx NULL); the
    # first call makes the process context, and the weights made before it run there
    out = _run("""
        n0 = len(os.listdir("/proc/self/task"))
        sc = torch.full((512,), 1e-3)
        ws = [qmm.Weight.int8(w.data_ptr(), 512, 1024, sc.data_ptr(), 512, name="own"),
              qmm.Weight.borrow_int8(w, 512, 1024, sc, 512, name="borrowed"),
              qmm.Weight.borrow_w4a8(torch.zeros((512, 512), dtype=torch.uint8), 512, 1024, 4,
                                     torch.ones((512, 64)), "f32", 16, sc, name="w4a8")]
        assert qmm._proc is None, "creating a weight made a qmm context"
        assert len(os.listdir("/proc/self/task")) == n0
        xb = x.to(torch.bfloat16)
        for h in ws:
            y = torch.empty((64, 512), dtype=torch.bfloat16)
            a = qmm.linear_args(64, "bf16", "bf16")
            a.x, a.y = xb.data_ptr(), y.data_ptr()
            h.linear(a)
        assert qmm._proc is not None
        print("ok")
    """)
    assert "ok" in out


def test_os_fork_child_runs_and_configures():
    _run("""
        qmm.kitchen.register()
        call()                              # the parent's pool has its workers now
        pid = os.fork()
        if pid == 0:
            try:
                call()                      # the first multi-task call in the child
                qmm.configure(n_threads=2)  # re-makes the context: destroys the inherited one
                call()
                os._exit(0)
            except BaseException as e:
                print("child:", repr(e), flush=True)
                os._exit(1)
        _, st = os.waitpid(pid, 0)
        assert os.WIFEXITED(st) and os.WEXITSTATUS(st) == 0, st
        call()                              # the parent is untouched
    """)


def test_multiprocessing_fork_pool():
    _run("""
        import multiprocessing as mp
        qmm.kitchen.register()
        call()
        def job(i):
            call()
            return i
        with mp.get_context("fork").Pool(2) as pool:
            assert pool.map(job, range(4), chunksize=1) == list(range(4))
        print("ok")
    """)


def test_fork_while_another_thread_is_in_a_call():
    _run("""
        import threading
        qmm.kitchen.register()
        call()
        stop = False
        def busy():
            while not stop:
                ck.int8_linear(x, w, s, None, torch.float32)
        t = threading.Thread(target=busy)
        t.start()
        kids = []
        for _ in range(5):
            pid = os.fork()
            if pid == 0:
                try:
                    call()
                    os._exit(0)
                except BaseException as e:
                    print("child:", repr(e), flush=True)
                    os._exit(1)
            kids.append(pid)
        stop = True
        t.join()
        for pid in kids:
            _, st = os.waitpid(pid, 0)
            assert os.WIFEXITED(st) and os.WEXITSTATUS(st) == 0, st
    """)


def _tasks():
    return len(os.listdir("/proc/self/task"))


def test_one_pool_per_process_sized_by_torch(kitchen):
    w = torch.randint(-127, 128, (256, 512), dtype=torch.int8)
    s = torch.rand(256, 1) * 1e-3
    x = torch.randn(32, 512)
    ck.int8_linear(x, w, s, None, torch.float32)
    before = torch.get_num_threads()
    assert qmm._proc.threads == before
    ctx = qmm._proc.ptr
    n0 = _tasks()
    errors = []

    def work():
        try:
            for _ in range(20):
                ck.int8_linear(x, w, s, None, torch.float32)
        except BaseException as e:
            errors.append(e)

    qmm.reset_counters()
    ts = [threading.Thread(target=work) for _ in range(4)]
    for t in ts:
        t.start()
    peak = _tasks()
    for t in ts:
        t.join()
    assert not errors, errors
    assert qmm._proc.ptr == ctx                     # the same context for every thread
    # the 4 Python threads themselves, nothing more: no pool per calling thread
    assert peak <= n0 + 4, (n0, peak)
    c = qmm.counters()["linear"]
    assert sum(c["calls"].values()) == 80            # process-wide: every thread's calls
    try:
        torch.set_num_threads(1)
        ck.int8_linear(x, w, s, None, torch.float32)
        assert qmm._proc.threads == 1
        assert sum(qmm.counters()["linear"]["calls"].values()) == 81   # counters carried over
    finally:
        torch.set_num_threads(before)
    ck.int8_linear(x, w, s, None, torch.float32)
    assert qmm._proc.threads == before


def test_configured_threads_win_over_torch(kitchen):
    w = torch.randint(-127, 128, (64, 128), dtype=torch.int8)
    s = torch.rand(64, 1) * 1e-3
    x = torch.randn(2, 128)
    try:
        qmm.configure(n_threads=3)
        ck.int8_linear(x, w, s, None, torch.float32)
        assert qmm._proc.threads == 3
    finally:
        qmm.configure(n_threads=0)
    ck.int8_linear(x, w, s, None, torch.float32)
    assert qmm._proc.threads == torch.get_num_threads()


def test_no_int8_engine_marks_the_backend_unavailable():
    # QMM_MAX_ISA=none: no engine runs here; register() marks qmm unavailable with the reason
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(qmm.__file__)),
               QMM_MAX_ISA="none")
    src = textwrap.dedent("""
        import torch, comfy_kitchen as ck, qmm.kitchen
        from comfy_kitchen.registry import registry
        assert qmm.kitchen.register() == []
        info = ck.list_backends()["qmm"]
        assert not info["available"] and "no int8 engine" in info["unavailable_reason"], info
        assert not qmm.kitchen.is_registered()
        w = torch.randint(-127, 128, (8, 16), dtype=torch.int8)
        assert registry.get_capable_backend("int8_linear", {"x": torch.randn(1, 16), "weight": w,
                                            "weight_scale": torch.ones(1)}) == "eager"
        print(info["unavailable_reason"])
    """)
    r = subprocess.run([sys.executable, "-c", src], capture_output=True, text=True, env=env,
                       cwd=ROOT, timeout=90)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert "QMM_MAX_ISA" in r.stdout or "capped" in r.stdout, r.stdout
