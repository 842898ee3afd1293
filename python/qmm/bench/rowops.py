"""python -m qmm.bench.rowops — comfy-kitchen's RoPE row ops (qmm.kitchen.rowops, SPEC §13) at a
DiT's attention shapes, eager backend against qmm, on the same CPU threads.

Default: H3's (q, k [1, 4096, 56, 128] f32 in the [B, S, H, D] layout, freqs [1, 4096, 1, 64, 2, 2]
f32 — real rotations, so the in-place ops can run again on their own output — scales [128]);
rms_adaln and rms_gated_residual on x [1, 4096, 56·128] with [1, 1, 56·128] modulation.
Per op it prints the median of --reps calls (after one warm-up) of eager (the kitchen's eager
function itself) and of qmm (the kitchen's public function with backend qmm registered: dispatch
included), the speedup, the bytes the op must move at least (each x read once and its output
written once, the freqs and scales read once) and what qmm reaches of it: GB/s and the ratio
of its time to the time those bytes take at the DRAM read rate `qmm bench` measures (--dram-gbps
to give it; else measured with the qmm CLI, $QMM_CLI or build/qmm, when there is one).

    python -m qmm.bench.rowops                       # every op, 2 threads, 3 reps
    python -m qmm.bench.rowops --ops rms_rope_split_half_,apply_rope --tokens 1024
    python -m qmm.bench.rowops --layout bhsd --heads 24 --tokens 4352    # Flux's layout
Not a test: no thresholds.
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import time

import torch

DT = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
OPS = ["rms_rope_split_half_", "rms_rope_split_half", "apply_rope", "apply_rope1", "apply_rope_",
       "apply_rope1_", "rms_rope", "rms_rope1", "rms_rope_", "rms_rope1_", "apply_rope_split_half",
       "apply_rope_split_half1", "apply_rope_split_half_", "apply_rope_split_half1_",
       "rms_rope_split_half1", "rms_rope_split_half1_", "rms_adaln", "rms_gated_residual"]
MOD = ("rms_adaln", "rms_gated_residual")  # on x [1, tokens, heads · dim], modulation [1, 1, heads · dim]


def dram_gbps(threads):
    """The DRAM read rate of `qmm bench` (its dram_gbps), or None without the CLI."""
    here = os.path.dirname(os.path.abspath(__file__))
    cli = os.environ.get("QMM_CLI") or os.path.normpath(os.path.join(here, "..", "..", "..", "build", "qmm"))
    if not os.path.exists(cli):
        return None
    out = subprocess.run([cli, "bench", "--shape", "1x256x256", "--json", "--no-float", "--threads",
                          str(threads)], capture_output=True, text=True, timeout=600).stdout
    for line in out.splitlines():
        try:
            rows = json.loads(line)
        except ValueError:
            continue
        for r in rows if isinstance(rows, list) else [rows]:
            if isinstance(r, dict) and r.get("dram_gbps"):
                return float(r["dram_gbps"])
    try:
        data = json.loads(out)
        rows = data if isinstance(data, list) else data.get("rows", [])
        return max(float(r["dram_gbps"]) for r in rows if r.get("dram_gbps"))
    except (ValueError, AttributeError, KeyError, TypeError):
        return None


def inputs(a):
    B, S, H, D = 1, a.tokens, a.heads, a.dim
    shape = (B, S, H, D) if a.layout == "bshd" else (B, H, S, D)
    fshape = (1, S, 1, D // 2, 2, 2) if a.layout == "bshd" else (1, 1, S, D // 2, 2, 2)
    g = torch.Generator().manual_seed(0)
    q = torch.randn(shape, generator=g).to(DT[a.dtype])
    k = torch.randn(shape, generator=g).to(DT[a.dtype])
    ang = torch.rand(S, D // 2, generator=g) * 2 * math.pi
    c, s = ang.cos(), ang.sin()
    f = torch.stack([torch.stack([c, -s], -1), torch.stack([s, c], -1)], -2).reshape(fshape)
    f = f.to(DT[a.freqs_dtype])
    sc = (torch.rand(D, generator=g) + 0.5).to(DT[a.dtype])
    return q, k, f, sc


def call_args(op, q, k, f, sc):
    if op in MOD:
        x = q.reshape(1, -1, q.shape[-2] * q.shape[-1]) if q.dim() == 4 else q
        D = x.shape[-1]
        g = torch.Generator().manual_seed(1)
        m1 = (torch.randn(1, 1, D, generator=g) * 0.1).to(x.dtype)
        m2 = torch.randn(1, 1, D, generator=g).to(x.dtype)
        if op == "rms_adaln":
            return (x, m1, m2, 1e-6)
        return (x, torch.ones(D, dtype=x.dtype), k.reshape(x.shape), m1, 1e-5)
    paired = not op.rstrip("_").endswith("1")
    if op.startswith("rms"):
        return (q, k, f, sc, sc, 1e-6) if paired else (q, f, sc, 1e-6)
    return (q, k, f) if paired else (q, f)


def moved_bytes(op, q, k, f, sc):
    if op in MOD:  # x read, out written (+ the residual read); the [D] vectors are negligible
        return (3 if op == "rms_gated_residual" else 2) * q.numel() * q.element_size()
    paired = not op.rstrip("_").endswith("1")
    xs = [q, k] if paired else [q]
    return sum(2 * x.numel() * x.element_size() for x in xs) + f.numel() * f.element_size() + \
        (sc.numel() * sc.element_size() if op.startswith("rms") else 0)


def timed(fn, args, reps):
    fn(*args)
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn(*args)
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ops", default=",".join(OPS))
    p.add_argument("--tokens", type=int, default=4096)
    p.add_argument("--heads", type=int, default=56)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--layout", choices=("bshd", "bhsd"), default="bshd")
    p.add_argument("--dtype", choices=tuple(DT), default="f32")
    p.add_argument("--freqs-dtype", choices=tuple(DT), default="f32")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--dram-gbps", type=float, default=None)
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    import comfy_kitchen as ck
    from types import SimpleNamespace
    import importlib
    _ad, _res, _rope = (importlib.import_module("comfy_kitchen.backends.eager." + m)
                        for m in ("adaln", "residual", "rope"))  # the modules (the package shadows them)
    E = SimpleNamespace(**{o: getattr(_rope, o, None) for o in OPS})
    E.rms_adaln, E.rms_gated_residual = _ad.rms_adaln, _res.rms_gated_residual
    import qmm.kitchen
    qmm.kitchen.register()
    dram = a.dram_gbps or dram_gbps(a.threads)
    q, k, f, sc = inputs(a)
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = float("nan")
    print("row ops: x %s %s, freqs %s %s, %d threads, median of %d, load %.2f; DRAM read rate %s" % (
        list(q.shape), a.dtype, list(f.shape), a.freqs_dtype, a.threads, a.reps, load,
        "%.1f GB/s (qmm bench)" % dram if dram else "unknown (no qmm CLI; --dram-gbps)"))
    print("%-26s %10s %10s %8s %9s %8s %10s" % ("op", "eager ms", "qmm ms", "speedup", "MB moved",
                                                "qmm GB/s", "x DRAM t"))
    for op in [o for o in a.ops.split(",") if o]:
        args = call_args(op, q, k, f, sc)
        qmm.kitchen.reset_declines()
        te = timed(getattr(E, op), args, a.reps)
        tq = timed(getattr(ck, op), args, a.reps)
        nb = moved_bytes(op, q, k, f, sc)
        declined = qmm.kitchen.declines()
        print("%-26s %10.2f %10.2f %7.1fx %9.1f %8.1f %10s%s" % (
            op, te * 1e3, tq * 1e3, te / tq, nb / 1e6, nb / tq / 1e9,
            "%.2f" % (tq / (nb / (dram * 1e9))) if dram else "-",
            "  (declined: %s)" % declined if declined else ""))


if __name__ == "__main__":
    main()
