"""python -m qmm.bench_kitchen runs end to end (a tiny block: a check of the harness, no timing
is asserted): every path reports a finite output, qmm's path ran on qmm with zero fallbacks."""
import json
import os
import subprocess
import sys

import qmm

from conftest import ROOT


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
