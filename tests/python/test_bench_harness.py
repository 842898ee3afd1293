"""The benchmark harnesses run end to end on tiny shapes (a check of the harness; no timing is
asserted): python -m qmm.bench_kitchen (every path finite, qmm's path on qmm with zero fallbacks,
its table), python -m qmm.bench_overhead, bench/layouts.py (a row per engine and shape, W8A16 too)."""
import json
import os
import subprocess
import sys

import pytest

import qmm

from conftest import ROOT, cli_path


def test_bench_kitchen_small_runs():
    cmd = [sys.executable, "-m", "qmm.bench_kitchen", "--small", "--tokens", "16", "--reps", "1",
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
    cmd = [sys.executable, "-m", "qmm.bench_kitchen", "--small", "--tokens", "16", "--reps", "1",
           "--paths", "eager,qmm"]
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(qmm.__file__)))
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [line for line in r.stdout.splitlines() if line.startswith("| 16 |")]
    assert len(rows) == 2 and all("x int8) | +" in x or "x int8) | -" in x for x in rows), r.stdout


def test_bench_overhead_runs():
    cmd = [sys.executable, "-m", "qmm.bench_overhead", "--n", "50", "--rounds", "1"]
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(qmm.__file__)))
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    for row in ("torch f32 linear", "qmm kernel (ctypes)", "kitchen floor (no-op backend)",
                "kitchen + qmm", "qmm's own Python", "qmm's own, measured"):
        assert row in r.stdout, r.stdout


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
    """python -m qmm.bench_attention on a tiny shape: every variant timed, finite, its ratio."""
    cmd = [sys.executable, "-m", "qmm.bench_attention", "--seq", "33", "--heads", "2", "--dim",
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


def test_bench_kitchen_qmm_attention_rows():
    """--attention qmm adds ComfyUI today (eager INT8 + sub_quad), eager INT8 + torch SDPA (the
    best a user configures today) and torch bf16 + SDPA rows and the "vs ComfyUI today" and "vs
    eager + SDPA" columns."""
    cmd = [sys.executable, "-m", "qmm.bench_kitchen", "--small", "--tokens", "16", "--reps", "1",
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

