"""The benchmark harnesses run end to end on tiny shapes (a check of the harness; no timing is
asserted): python -m qmm.bench.kitchen (every path finite, qmm's path on qmm with zero fallbacks,
its table), python -m qmm.bench.overhead, python -m qmm.bench.w4a8 (a row per M, no fallback),
bench/layouts.py (a row per engine and shape, W8A16 too)."""
import json
import os
import subprocess
import sys

import pytest

import qmm

from conftest import ROOT, cli_path


def test_bench_kitchen_small_runs():
    cmd = [sys.executable, "-m", "qmm.bench.kitchen", "--small", "--tokens", "16", "--reps", "1",
           "--paths", "eager,qmm,bf16", "--json"]
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(qmm.__file__)))
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    assert [x["path"] for x in rows] == ["eager", "qmm", "bf16"]
    assert all(x["finite"] and x["median_s"] > 0 for x in rows)
    q = rows[1]
    assert q["fallbacks"] == 0 and sum(q["engines"].values()) == 4 * 4   # 2 x 1 token, warm-up, 1 rep
    assert q["weights_rss_mib"] >= 0.9 * q["int8_mib"]   # the measurement sees the weights


def test_bench_kitchen_table():
    cmd = [sys.executable, "-m", "qmm.bench.kitchen", "--small", "--tokens", "16", "--reps", "1",
           "--paths", "eager,qmm"]
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(qmm.__file__)))
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [line for line in r.stdout.splitlines() if line.startswith("| 16 |")]
    assert len(rows) == 2 and all("x int8) | +" in x or "x int8) | -" in x for x in rows), r.stdout


def test_bench_kitchen_split():
    """--split: the per-layer table (in block vs alone) and the phase split of each layer's three
    runs, in the table and in --json; the structure only, no timing."""
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(qmm.__file__)))
    base = [sys.executable, "-m", "qmm.bench.kitchen", "--small", "--tokens", "16", "--reps", "1",
            "--alone", "1", "--split"]
    r = subprocess.run(base, capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    layers = ("attn.qkv_proj", "attn.out_proj", "mlp.fc1", "mlp.fc2")
    lines = [x for x in r.stdout.splitlines() if x.startswith("| ")]
    head = [x for x in lines if x.startswith("| layer | M x N x K | in block | alone | ratio |")]
    assert len(head) == 1, r.stdout
    per_layer = [x for x in lines if x.split(" | ")[0][2:] in layers and "x" in x.split(" | ")[1]
                 and x.split(" | ")[1][0].isdigit()]
    assert [x.split(" | ")[0][2:] for x in per_layer] == list(layers), r.stdout
    assert all(len(x.strip("|").split("|")) == 8 for x in per_layer), r.stdout
    split_head = [x for x in lines if x.startswith("| layer | run | wall | qmm_linear |")]
    assert len(split_head) == 1 and len(split_head[0].strip("|").split("|")) == 11, r.stdout
    split = [x for x in lines if x.split(" | ")[1:2] and x.split(" | ")[1] in
             ("in block", "alone", "alone, y reused")]
    assert [(x.split(" | ")[0][2:], x.split(" | ")[1]) for x in split] == [
        (L, run) for L in layers for run in ("in block", "alone", "alone, y reused")], r.stdout
    assert all(len(x.strip("|").split("|")) == 11 for x in split), r.stdout
    r = subprocess.run(base + ["--json"], capture_output=True, text=True, cwd=ROOT, env=env,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    assert [x["path"] for x in rows] == ["qmm"] and rows[0]["fallbacks"] == 0
    sp = rows[0]["split"]
    assert [x["layer"] for x in sp] == list(layers)
    for x in sp:
        assert x["M"] == 16 and "first_touch_ms" in x
        for run in ("in_block", "alone", "alone_y_reused"):
            d = x[run]
            assert d["qmm_calls"] == 1 and d["wall_ms"] > 0 and d["qmm_ms"] > 0
            assert set(d["ns"]) == set(qmm._lib.PHASES)
            for k in ("python", "setup", "prepass", "pack", "kernels", "epilogue", "idle", "tops"):
                assert isinstance(d[k], float), (run, k)


def test_bench_overhead_runs():
    cmd = [sys.executable, "-m", "qmm.bench.overhead", "--n", "50", "--rounds", "1"]
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(qmm.__file__)))
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    for row in ("torch f32 linear", "qmm kernel (ctypes)", "kitchen floor (no-op backend)",
                "kitchen + qmm", "qmm's own Python", "qmm's own, measured"):
        assert row in r.stdout, r.stdout


def test_bench_w4a8_runs():
    """python -m qmm.bench.w4a8 on a tiny layer: a row per M with both times and their ratio, every
    call on qmm (the harness exits 1 on a fallback)."""
    cmd = [sys.executable, "-m", "qmm.bench.w4a8", "--N", "64", "--K", "512", "--M", "1,3,16",
           "--rounds", "1", "--calls", "2"]
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(qmm.__file__)))
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    rows = [l.split() for l in r.stdout.splitlines() if l.split() and l.split()[0].isdigit()]
    assert [int(w[0]) for w in rows] == [1, 3, 16], r.stdout
    for w in rows:
        i8, w4 = float(w[1]), float(w[2])
        assert i8 > 0 and w4 > 0 and w[3].endswith("x"), r.stdout
        assert abs(float(w[3][:-1]) - i8 / w4) <= 0.01 + 0.002 * (i8 / w4) / min(i8, w4), r.stdout


def test_bench_layouts_runs():
    """bench/layouts.py: every int8 engine this CPU runs gets a borrowed/packed row per shape, and
    the ratio table against the reference engine when there is a second engine."""
    cli = cli_path()
    if cli is None:
        pytest.skip("no qmm CLI (build/qmm or $QMM_CLI)")
    cmd = [sys.executable, os.path.join(ROOT, "bench", "layouts.py"), "--qmm", cli, "--quick",
           "--rounds", "2", "--repeats", "1", "--shape", "3x40x70", "--shape", "256x64x128:g64", "--w8a16"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    engines = qmm.int8_engines_available()
    lines = r.stdout.splitlines()
    for shape in ("3x40x70", "256x64x128:g64"):
        for e in engines:
            assert any(line.startswith("| %s | %s | " % (shape, e)) for line in lines), r.stdout
    assert "Lowest against the targets" in r.stdout
    floats = [n for n, e in qmm.info()["engines"].items()
              if e["available"] and not e["int8"] and n != "ref"]
    if floats:   # --w8a16: qmm bench's float engine on the int8 weights, borrowed against packed
        assert any(x.startswith("| 3x40x70 | ") and " W8A16 | " in x for x in lines), r.stdout
    if "avx512_vnni" in engines and len(engines) > 1:
        assert "÷ avx512_vnni, packed" in r.stdout


def test_bench_attention_tiny_runs():
    """python -m qmm.bench.attention on a tiny shape: every variant timed, finite, its ratio."""
    cmd = [sys.executable, "-m", "qmm.bench.attention", "--seq", "33", "--heads", "2", "--dim",
           "64", "--rounds", "1", "--json"]
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(qmm.__file__)))
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    names = [x["variant"] for x in rows]
    assert {"sdpa f32", "sdpa bf16", "sdpa bf16+casts"} <= set(names)
    assert any(n.startswith("sub_quad") for n in names)
    if qmm.has_attention():
        assert any(n.startswith("qmm ") and n.endswith(" f32") for n in names)
        assert any(n.startswith("qmm ") and n.endswith(" best") for n in names)
    for x in rows:
        assert x["ms"] > 0 and x["tflops"] > 0 and x["vs_sdpa_bf16_casts"] > 0, x
        assert x["err_vs_sdpa_f32"] < 2e-2, x
    r = subprocess.run(cmd[:-1], capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    assert r.returncode == 0 and "| sdpa bf16+casts | " in r.stdout and "1.00x" in r.stdout


def test_bench_attention_peaks_and_peers():
    """With the qmm CLI each qmm row carries its engine's register-loop peak (qmm bench --peaks)
    and the % of it; --peers none leaves the qmm rows alone."""
    from qmm.bench import attention as ba
    cli = ba.cli_path()
    if cli is None:
        pytest.skip("no qmm CLI (QMM_CLI, PATH, build/qmm)")
    pk = ba.peaks(2, cli)
    assert pk and all(v > 0 for v in pk.values()), pk
    cmd = [sys.executable, "-m", "qmm.bench.attention", "--seq", "40", "--heads", "1", "--dim", "32",
           "--rounds", "1", "--modes", "f32", "--peers", "none", "--json", "--cli", cli]
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(qmm.__file__)))
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    if not qmm.has_attention():
        return
    assert rows and all(x["variant"].startswith("qmm ") for x in rows), rows
    for x in rows:
        if x["engine"] in pk:
            assert x["peak_tops"] > 0 and x["pct_peak"] > 0, x
    bad = subprocess.run(cmd[:-5] + ["sdpa-f64"], capture_output=True, text=True, cwd=ROOT, env=env,
                         timeout=600)
    assert bad.returncode == 2 and "--peers" in bad.stderr


def test_bench_kitchen_qmm_attention_rows():
    """--attention qmm adds ComfyUI today (eager INT8 + sub_quad), eager INT8 + torch SDPA (the
    best a user configures today) and torch bf16 + SDPA rows and the "vs ComfyUI today" and "vs
    eager + SDPA" columns."""
    cmd = [sys.executable, "-m", "qmm.bench.kitchen", "--small", "--tokens", "16", "--reps", "1",
           "--paths", "eager,qmm,bf16", "--attention", "qmm"]
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(qmm.__file__)))
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "vs ComfyUI today" in r.stdout and "vs eager + SDPA" in r.stdout, r.stdout
    rows = [line for line in r.stdout.splitlines() if line.startswith("| 16 |")]
    labels = [x.split("|")[2].strip() for x in rows]
    assert labels == ["kitchen eager INT8 (f32)", "kitchen + qmm INT8 (f32)", "torch bf16",
                      "kitchen eager INT8 (f32) + sub_quad", "kitchen eager INT8 (f32) + sdpa",
                      "torch bf16 + sdpa"], labels

