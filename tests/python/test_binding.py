"""The ctypes binding itself: info, errors (QmmError with status name and qmm_last_error()),
plans, counters, last_engine, one context per process."""
import ctypes
import os
import re
import threading

import pytest
import torch

import qmm


def _weight(N=32, K=64, gs=0, name="t.fc"):
    w = torch.randint(-127, 128, (N, K), dtype=torch.int8)
    s = torch.rand(N) * 0.01 + 1e-3
    return qmm.Weight.int8(w.data_ptr(), N, K, s.data_ptr(), N, convrot_gs=gs, name=name), w, s


def _source_version():
    """The version pyproject.toml gives the package (the library's must agree)."""
    root = os.path.join(os.path.dirname(__file__), "..", "..")
    with open(os.path.join(root, "pyproject.toml")) as f:
        return re.search(r'^version = "([^"]+)"', f.read(), re.M).group(1)


def test_info_lists_engines_and_features():
    i = qmm.info()
    assert i["version"] == qmm.__version__ == _source_version()
    assert [e["name"] for e in qmm._lib.ENGINES] == list(i["engines"])   # the library's table
    assert "avx512_vnni" in i["engines"] and "ref" in i["engines"]
    for name, e in i["engines"].items():
        assert e["available"] or e["why"], name   # every unavailable engine says why
    assert i["threads"] >= 1


def test_error_carries_status_and_message():
    w8 = torch.zeros((4, 6), dtype=torch.int8)
    s = torch.ones(4)
    with pytest.raises(qmm.QmmError) as e:
        qmm.Weight.int8(w8.data_ptr(), 4, 6, s.data_ptr(), 4, convrot_gs=16, name="bad.layer")
    assert e.value.status_name == "QMM_ERR_UNSUPPORTED"
    assert "bad.layer" in e.value.message and "16" in e.value.message
    with pytest.raises(qmm.QmmError) as e:
        qmm.Weight.int8(None, 4, 6, s.data_ptr(), 4)
    assert e.value.status_name == "QMM_ERR_INVALID_ARGUMENT"


def test_plan_counters_last_engine():
    w, w8, s = _weight()
    p = qmm.plan(w, M=7, x_dtype="bf16")
    assert p.status == "QMM_OK" and not p.is_fallback
    assert p.engine in qmm.int8_engines_available()
    assert p.reasons["ref"]                      # the reference only runs by name
    assert "engine: %s" % p.engine in p.text
    qmm.reset_counters()
    x = torch.randn(7, 64, dtype=torch.bfloat16)
    y = torch.empty(7, 32, dtype=torch.bfloat16)
    a = qmm.linear_args(7, "bf16")
    a.x, a.y = x.data_ptr(), y.data_ptr()
    w.linear(a)
    c = qmm.counters()["linear"]
    assert c["calls"] == {p.engine: 1} and c["fallbacks"] == 0 and c["errors"] == 0
    assert qmm.last_engine() == p.engine
    a.y = None
    with pytest.raises(qmm.QmmError) as e:
        w.linear(a)
    assert "y is NULL" in e.value.message
    assert qmm.counters()["linear"]["errors"] == 1


def test_profile_phase_timers():
    """qmm.profile(): off unless asked, one call counted per linear, the phases named as the
    header's qmm_phase_name, their totals nested (not their values: no timing asserted)."""
    L = qmm._lib
    assert [L.qmm_phase_name(i).decode() for i in range(len(L.PHASES))] == L.PHASES
    w, _, _ = _weight(N=64, K=256)
    x = torch.randn(40, 256)
    y = torch.empty(40, 64)
    a = qmm.linear_args(40, "f32", "f32")
    a.x, a.y = x.data_ptr(), y.data_ptr()
    try:
        qmm.profile(enable=False, reset=True)
        w.linear(a)
        assert qmm.profile()["calls"] == 0
        p = qmm.profile(enable=True)
        assert p["enabled"] and p["calls"] == 0 and p["threads"] == qmm.threads()
        w.linear(a)
        w.linear(a)
        p = qmm.profile(reset=True)
        ns = p["ns"]
        assert p["calls"] == 2 and set(ns) == set(L.PHASES)
        assert ns["call"] >= ns["setup"] + ns["engine"] and ns["engine"] >= ns["prepass"] + ns["gemm"]
        assert ns["threads_tasks"] >= ns["threads_tiles"] + ns["threads_pack"]
        assert ns["threads_tiles"] >= ns["threads_epilogue"]
        assert qmm.profile()["calls"] == 0
    finally:
        qmm.profile(enable=False, reset=True)


def test_one_context_per_process():
    seen = []

    def work():
        seen.append(qmm.context().ptr)

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert seen[0] == qmm.context().ptr          # every thread uses the process's context
    with pytest.raises(ValueError):
        qmm.configure(n_threads=-1)


def test_weight_info_and_close():
    w, _, _ = _weight(N=48, K=128, gs=64, name="blocks.0.fc1")
    i = w.info()
    assert (i["N"], i["K"], i["convrot_gs"], i["name"]) == (48, 128, 64, "blocks.0.fc1")
    assert i["packed_bytes"] >= 48 * 128
    w.close()
    w.close()                                    # idempotent
    assert w.ptr is None


def test_borrowed_weight_reads_memory_at_each_call():
    N, K, M = 40, 70, 5
    wbuf = torch.randint(-127, 128, (N, K + 6), dtype=torch.int8)   # row stride ld = K + 6
    s = torch.rand(N) * 0.01 + 1e-3
    b = torch.randn(N, dtype=torch.bfloat16)
    wb = qmm.Weight.borrow_int8(wbuf, N, K, s, N, ld=K + 6, bias=b, bias_dtype="bf16", name="t.borrowed")
    assert wb.info()["packed_bytes"] == 0 and wb.info()["has_bias"]
    x = torch.randn(M, K, dtype=torch.bfloat16)

    def run(w):
        y = torch.empty(M, N, dtype=torch.bfloat16)
        a = qmm.linear_args(M, "bf16")
        a.x, a.y = x.data_ptr(), y.data_ptr()
        w.linear(a)
        return y

    def owned():
        wc = wbuf[:, :K].contiguous()
        return qmm.Weight.int8(wc.data_ptr(), N, K, s.data_ptr(), N, bias=b.data_ptr(), bias_dtype="bf16")

    assert torch.equal(run(wb), run(owned()))
    wbuf[N - 1, K - 1] = -wbuf[N - 1, K - 1] if wbuf[N - 1, K - 1] != 0 else 9   # in place, like copy_()
    s[0] *= 2
    y2 = run(wb)
    assert torch.equal(y2, run(owned()))
    del wbuf, s, b                                # the Weight keeps the memory alive
    assert torch.equal(run(wb), y2)
    wb.close()


def test_struct_layout_matches_header():
    # the defaults the library returns, read through our struct mirrors
    a = qmm._lib.qmm_linear_args_default()
    assert a.M == 0 and a.engine == 0 and a.epilogue == 0 and a.residual is None
    d = qmm._lib.qmm_weight_desc_default()
    assert d.bias_dtype == qmm._lib.F32 and d.convrot_gs == 0 and d.n_scale in (0, 1)
    o = qmm._lib.qmm_context_options_default()
    assert o.max_isa == -1 and o.verbose == -1 and o.disabled_engines == 0
    # the per-engine arrays: where the library's accessors find each engine's entry is where
    # our mirror has it (no sizes hard-coded here)
    L = qmm._lib
    w, _, _ = _weight()
    p = L.PlanInfo()
    a = qmm.linear_args(3, "bf16")
    assert L.qmm_plan(qmm.context().ptr, w.ptr, ctypes.byref(a), ctypes.byref(p)) == L.OK
    reason_at = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.POINTER(L.PlanInfo), ctypes.c_int)(
        ("qmm_plan_reason", L.lib))
    for e in L.ENGINES:
        assert e["id"] < L.ENGINE_MAX
        assert bool(L.qmm_plan_admits(ctypes.byref(p), e["id"])) == bool(p.admitted[e["id"]])
        if not p.admitted[e["id"]]:
            assert reason_at(ctypes.byref(p), e["id"]) == ctypes.addressof(p.reason[e["id"]])
    assert p.admitted[p.engine] and L.qmm_plan_admits(ctypes.byref(p), p.engine)
    # counters: one call lands on its engine's slot, one error on errors, nothing beyond
    ctx = qmm.Context(n_threads=1)
    x = torch.randn(3, 64, dtype=torch.bfloat16)
    y = torch.empty(3, 32, dtype=torch.bfloat16)
    a.x, a.y = x.data_ptr(), y.data_ptr()
    assert L.qmm_linear(ctx.ptr, w.ptr, ctypes.byref(a)) == L.OK
    a.y = None
    assert L.qmm_linear(ctx.ptr, w.ptr, ctypes.byref(a)) != L.OK
    buf = (ctypes.c_uint64 * (ctypes.sizeof(L.Counters) // 8 + 4))(*([7] * (ctypes.sizeof(L.Counters) // 8 + 4)))
    L.qmm_get_counters(ctx.ptr, ctypes.cast(buf, ctypes.POINTER(L.Counters)))
    c = ctypes.cast(buf, ctypes.POINTER(L.Counters)).contents.op[L.OP_LINEAR]
    assert c.calls[L.qmm_last_engine(ctx.ptr)] == 1 and sum(c.calls) == 1
    assert c.fallbacks == 0 and c.errors == 1
    assert list(buf[ctypes.sizeof(L.Counters) // 8:]) == [7] * 4   # the library wrote no more


def test_python_m_qmm_prints_engines():
    import subprocess
    import sys
    import os
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(qmm.__file__)))
    r = subprocess.run([sys.executable, "-m", "qmm"], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    for e in qmm.int8_engines_available():
        assert e in r.stdout
    assert "qmm %s" % qmm.__version__ in r.stdout


# ---------------------------------------------------------------- borrowed tensors
def _borrowed(kind, N=2048, K=2048):
    """A borrowed weight over 4 MiB CPU tensors (large enough that freed memory goes back to the
    OS): (weight, its main tensor — int8 data or W4A8 codes —, run(weight) → y of a call)."""
    if kind == "int8":
        t = torch.randint(-127, 128, (N, K), dtype=torch.int8)
        s = torch.rand(N) * 0.01 + 1e-3
        w = qmm.Weight.borrow_int8(t, N, K, s, N, name="t.borrow8")
    else:
        K = 4096
        t = torch.randint(0, 256, (N, K // 2), dtype=torch.uint8)
        s_rel = torch.rand(N, K // 16) + 0.5
        s = torch.rand(N) * 0.01 + 1e-3
        w = qmm.Weight.borrow_w4a8(t, N, K, 4, s_rel, "f32", 16, s, convrot_gs=0,
                                   name="t.borrow4")
    x = torch.randn(3, K, dtype=torch.bfloat16)

    def run(w):
        y = torch.empty(3, N, dtype=torch.bfloat16)
        a = qmm.linear_args(3, "bf16")
        a.x, a.y = x.data_ptr(), y.data_ptr()
        w.linear(a)
        return y
    return w, t, run


@pytest.mark.parametrize("kind", ["int8", "w4a8"])
@pytest.mark.parametrize("how", ["set_", "data", "resize0", "resize0_again"])
def test_borrowed_storage_replaced_is_an_error(kind, how):
    """A borrowed tensor whose storage is replaced (set_, .data =, as ComfyUI's low-memory paths
    do) or freed (untyped_storage().resize_(0)) is a QmmError at the next call, never a read of
    freed memory."""
    w, t, run = _borrowed(kind)
    run(w)
    p0 = t.data_ptr()
    if how == "set_":
        t.set_(torch.zeros_like(t))
    elif how == "data":
        t.data = torch.zeros_like(t)
    else:
        st = t.untyped_storage()
        n = st.nbytes()
        st.resize_(0)
        if how == "resize0_again":               # freed, then new memory of the same size
            st.resize_(n)
    import gc
    gc.collect()
    if how == "resize0_again" and t.data_ptr() == p0:
        run(w)                       # the same address again: the tensor's own, live memory
        return
    with pytest.raises(qmm.QmmError, match=r"the borrowed (data|codes) no longer holds"):
        run(w)
    with pytest.raises(qmm.QmmError, match=r"no longer holds"):
        w.int8_rows(0, 1)
    w.close()


@pytest.mark.parametrize("kind", ["int8", "w4a8"])
def test_borrowed_in_place_copy_is_seen(kind):
    """copy_ into a borrowed tensor keeps its memory: the next call reads the new values."""
    w, t, run = _borrowed(kind)
    y0 = run(w)
    rows0 = bytes(w.int8_rows(0, 2))
    t.copy_(torch.flip(t, [1]))
    y1 = run(w)
    assert bytes(w.int8_rows(0, 2)) != rows0 and not torch.equal(y0, y1)
    w.close()


def _w4(N=64, K=128, bits=4, gsz=16):
    return (torch.randint(0, 256, (N, K * bits // 8), dtype=torch.uint8),
            torch.rand(N, K // gsz) + 0.5, torch.rand(N) * 0.01 + 1e-3)


def test_borrow_w4a8_checks_what_it_is_given():
    N, K = 64, 128
    codes, s_rel, s_ch = _w4(N, K)

    def borrow(codes=codes, s_rel=s_rel, s_ch=s_ch, s_rel_dtype="f32", **kw):
        return qmm.Weight.borrow_w4a8(codes, N, K, 4, s_rel, s_rel_dtype, 16, s_ch,
                                      convrot_gs=0, name="t.w4", **kw)
    borrow().close()
    # sizes: the tensors' own go to the library, whose checks decide
    big_s_rel = torch.rand(4096, 4096 // 16) + 0.5
    with pytest.raises(qmm.QmmError, match=r"codes_bytes 16 \(needs N\*K\*bits/8 = 8388608"):
        qmm.Weight.borrow_w4a8(torch.zeros(16, dtype=torch.uint8), 4096, 4096, 4, big_s_rel,
                               "f32", 16, torch.ones(4096), convrot_gs=0)
    with pytest.raises(qmm.QmmError, match=r"1 s_rel values \(needs N\*K/group_size = 512\)"):
        borrow(s_rel=torch.ones(1))
    with pytest.raises(qmm.QmmError, match=r"n_codebook 1 "):
        borrow(codebook=torch.ones(1))
    # what the library cannot see: contiguity, dtype, the counts it has no field for
    with pytest.raises(ValueError, match=r"codes is not contiguous"):
        borrow(codes=torch.randint(0, 256, (K // 2, N), dtype=torch.uint8).t())
    with pytest.raises(ValueError, match=r"s_rel has dtype torch.float64, needs s_rel_dtype='f32'"):
        borrow(s_rel=s_rel.double())
    with pytest.raises(ValueError,
                       match=r"s_rel has dtype torch.float32, needs s_rel_dtype='f8_e4m3'"):
        borrow(s_rel_dtype="f8_e4m3")
    with pytest.raises(ValueError, match=r"s_channel has dtype torch.bfloat16, needs float32"):
        borrow(s_ch=s_ch.bfloat16())
    with pytest.raises(ValueError, match=r"s_channel has 1 values \(shape \[1\]\), needs 64"):
        borrow(s_ch=torch.ones(1))
    with pytest.raises(ValueError, match=r"codes has dtype torch.float32"):
        borrow(codes=codes.float())
    with pytest.raises(ValueError, match=r"bias has 3 values"):
        borrow(bias=torch.zeros(3))
    with pytest.raises(ValueError, match=r"bias has dtype torch.float32, needs bias_dtype='bf16'"):
        borrow(bias=torch.zeros(N), bias_dtype="bf16")
    with pytest.raises(ValueError, match=r"codes is on meta"):
        borrow(codes=torch.empty(N, K // 2, dtype=torch.uint8, device="meta"))
    with pytest.raises(ValueError, match=r"s_rel is not contiguous"):
        borrow(s_rel=torch.rand(K // 16, N).t())


def test_borrow_int8_checks_what_it_is_given():
    N, K = 40, 70
    w = torch.randint(-127, 128, (N, K), dtype=torch.int8)
    s = torch.rand(N) * 0.01 + 1e-3

    def borrow(data=w, scale=s, n_scale=N, **kw):
        return qmm.Weight.borrow_int8(data, N, K, scale, n_scale, name="t.i8", **kw)
    borrow().close()
    borrow(data=torch.randint(-127, 128, (N, K + 6), dtype=torch.int8)[:, :K], ld=K + 6).close()
    with pytest.raises(ValueError, match=r"data has 16 values, needs \(N-1\)·ld \+ K = 2800"):
        borrow(data=torch.zeros(16, dtype=torch.int8))
    with pytest.raises(ValueError,
                       match=r"data \(shape \[40, 70\], strides \[1, 40\]\) is neither"):
        borrow(data=torch.zeros(K, N, dtype=torch.int8).t())
    with pytest.raises(ValueError, match=r"data has dtype torch.uint8, needs int8"):
        borrow(data=w.view(torch.uint8))
    with pytest.raises(ValueError, match=r"scale has dtype torch.float64, needs float32"):
        borrow(scale=s.double())
    with pytest.raises(ValueError, match=r"scale has 1 values \(shape \[1\]\), needs 40"):
        borrow(scale=s[:1])
    with pytest.raises(ValueError, match=r"bias has dtype torch.float32, needs bias_dtype='f16'"):
        borrow(bias=torch.zeros(N), bias_dtype="f16")
    with pytest.raises(ValueError, match=r"scale is on meta"):
        borrow(scale=torch.empty(N, device="meta"))
    with pytest.raises(qmm.QmmError, match=r"3 scales \(needs 1 or N=40\)"):   # C's check
        borrow(scale=s[:3], n_scale=3)
