"""python -m qmm.bench.kitchen — one video-DiT block (qmm.dit, SPEC §8 shapes) end to end in
torch, four ways, on the same CPU threads:

    eager   ComfyUI INT8 layers (ConvRot g=256) through comfy-kitchen's eager backend
    qmm     the same layers through comfy-kitchen with the qmm backend registered
    bf16    torch bf16, everything (weights and activations)
    fp32    torch fp32, everything

--dtype is the activations' dtype of the two INT8 paths: f32 (the default) is what ComfyUI sends
to every INT8 layer on a CPU (also with --bf16-unet); bf16 for comparison. Attention is the one
ComfyUI runs on a CPU (qmm.dit.sub_quad: its attention_sub_quad), or --attention sdpa (torch's),
qmm (qmm.attention in the ComfyUI node's default mode: int8 where an int8 engine runs it) or
sdpa_bf16.

Each path runs in its own process (clean peak RSS): weights are made from a fixed seed (INT8
weights directly as int8 + per-row scales: timing does not depend on their values), one
warm-up block, then --reps timed blocks. Printed per path and token count: the median time
per block, the speedups, the peak RSS, the share of time spent outside the four linears
(attention, norms, modulation, residual glue), and the resident memory: the weights' (RSS growth
over their creation, against their int8 bytes) and what two one-token blocks add to it (torch's
and qmm's run-time state, and any copy of a weight made on a first call; the eager path, the
same tensors without qmm, is the control).

    python -m qmm.bench.kitchen                 # 1024 and 4096 tokens, 2 threads, 3 reps
    python -m qmm.bench.kitchen --quick         # 1024 tokens, 2 reps (a few minutes)
    python -m qmm.bench.kitchen --dtype bf16    # bf16 activations on the INT8 paths
    python -m qmm.bench.kitchen --rounds 2      # each path twice, in turn; the faster round kept
    python -m qmm.bench.kitchen --split --tokens 4096   # where the INT8 linears' time goes
Not a test: no thresholds; the numbers go to bench/NOTES.md and the README.

--split (the qmm path only) times each INT8 layer of the block three ways, with qmm's phase
timers on (qmm.profile(); qmm.h qmm_profile):
    in block        the layer's call inside --reps timed block runs (median over the runs);
    alone           right after the layer's call in one more block run, the same call again
                    (same input tensor, weight and arguments, through the kitchen, a fresh output
                    each time as in the block), --alone times, the fastest kept;
    alone, y reused the same qmm_linear again on the output of the last "alone" call (its pages
                    already written), --alone times, the fastest kept.
Each is split into: Python + dispatch (the layer's wall time from Python minus qmm_linear's own
time: the kitchen's dispatch, argument checks, the output's allocation, ctypes), C set-up
(validation, plan, a borrowed weight's per-call scales and bias, the madvise of y, and any C
time outside the phases below), pre-pass + rotation (the int8 driver's pre-pass, wall), and the
GEMM run's wall time shared out by the worker threads' sums (each sum / threads): panel packing
(the borrowed weight packed per call), kernels (the tiles without their stores), epilogue (the
tiles' output stores: with the first touch of y's pages), and GEMM idle (threads waiting: load
imbalance, wake-up). First touch of y = qmm_linear with a fresh output minus qmm_linear on an
output already written (alone − alone y reused, C call time; the page faults of a fresh y land
in the epilogue column of the first). T int-ops/s = 2·M·N·K / the layer's wall time.
Where the int8 driver's tile kernels do not time their stores (the rows regime at small M, engines
other than avx512_vnni) the stores count in the kernels column; an engine with a driver of its
own (amx_int8) shows its whole qmm_linear as C set-up.
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

PATHS = ("eager", "qmm", "bf16", "fp32")


def _rss_mib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


class _Split:
    """--split: each INT8 layer of the block behind a probe that times its calls (module
    docstring). The kitchen backend's qmm_linear call (qmm.kitchen.linear._call_planned) is
    wrapped to keep the last call's weight, arguments, thread count and options' generation
    for the y-reused runs."""

    def __init__(self, block, tokens, shapes, alone):
        import qmm.kitchen.linear as kl
        self.kl, self.orig, self.alone = kl, kl._call_planned, alone
        self.tokens, self.shapes = tokens, shapes
        self.replay = False     # the alone runs after each call (the last block run)
        self.last = None
        self.rows = {name: {"in_block": [], "alone": None, "alone_y_reused": None}
                     for name in shapes}
        kl._call_planned = self._hook
        for name in shapes:
            block.layers[name] = self._probe(name, block.layers[name])

    def close(self):
        self.kl._call_planned = self.orig

    def _hook(self, ptr, a, n, gen):
        self.last = (ptr, a.__class__.from_buffer_copy(a), n, gen)
        return self.orig(ptr, a, n, gen)

    def _timed(self, fn):
        import qmm
        qmm.profile(reset=True)
        t = time.perf_counter()
        y = fn()
        wall = time.perf_counter() - t
        p = qmm.profile()
        return y, dict(wall_s=wall, qmm_calls=p["calls"], threads=p["threads"],
                       ns=p["ns"])

    def _probe(self, name, layer):
        def call(x, **kw):
            y, r = self._timed(lambda: layer(x, **kw))
            if not self.replay:
                self.rows[name]["in_block"].append(r)
                return y
            best = None
            for _ in range(self.alone):
                y2, r2 = self._timed(lambda: layer(x, **kw))
                if best is None or r2["wall_s"] < best["wall_s"]:
                    best = r2
            self.rows[name]["alone"] = best
            ptr, a, n, gen = self.last     # the last alone call, on y2 (alive here)
            best = None
            for _ in range(self.alone):
                _, r3 = self._timed(lambda: self.orig(ptr, a, n, gen))
                if best is None or r3["wall_s"] < best["wall_s"]:
                    best = r3
            self.rows[name]["alone_y_reused"] = best
            del y2
            return y
        return call

    def result(self):
        """[{layer, M, N, K, in_block, alone, alone_y_reused}], each run's split in ms."""
        out = []
        for name, (N, K) in self.shapes.items():
            r = self.rows[name]
            ib = sorted(r["in_block"], key=lambda d: d["wall_s"])
            row = {"layer": name, "M": self.tokens, "N": N, "K": K,
                   "in_block": _split_ms(ib[len(ib) // 2], N, K, self.tokens) if ib else None}
            for k in ("alone", "alone_y_reused"):
                row[k] = _split_ms(r[k], N, K, self.tokens) if r[k] else None
            if row["alone"] and row["alone_y_reused"]:
                row["first_touch_ms"] = row["alone"]["qmm_ms"] - row["alone_y_reused"]["qmm_ms"]
            out.append(row)
        return out


SPLIT = ("python", "setup", "prepass", "pack", "kernels", "epilogue", "idle")


def _split_ms(r, N, K, M):
    """One timed call (wall + qmm.profile) → its split in ms (module docstring)."""
    ns, th = r["ns"], max(r["threads"], 1)
    ms = {k: v / 1e6 for k, v in ns.items()}
    wall = r["wall_s"] * 1e3
    gemm = ms["gemm"]
    d = {"wall_ms": wall, "qmm_ms": ms["call"], "qmm_calls": r["qmm_calls"],
         "tops": 2.0 * M * N * K / (wall * 1e-3) / 1e12 if wall > 0 else 0.0,
         "python": wall - ms["call"] if r["qmm_calls"] else wall,
         "prepass": ms["prepass"], "pack": ms["threads_pack"] / th,
         "kernels": (ms["threads_tiles"] - ms["threads_epilogue"]) / th,
         "epilogue": ms["threads_epilogue"] / th, "idle": gemm - ms["threads_tasks"] / th}
    d["setup"] = ms["call"] - ms["prepass"] - gemm
    d["ns"] = ns
    return d


def _split_table(rows, threads):
    print("\nper INT8 layer (%d threads; ms; T = 10^12 int-ops/s; ratio = in block / alone):" % threads)
    print("| layer | M x N x K | in block | alone | ratio | T in block | T alone | first touch of y |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        ib, al = r["in_block"], r["alone"]
        print("| %s | %dx%dx%d | %.2f | %.2f | %.2fx | %.3f | %.3f | %s |" % (
            r["layer"], r["M"], r["N"], r["K"], ib["wall_ms"], al["wall_ms"],
            ib["wall_ms"] / al["wall_ms"], ib["tops"], al["tops"],
            "%.2f" % r["first_touch_ms"] if "first_touch_ms" in r else "-"))
    print("\nsplit (ms): Python + dispatch | C set-up | pre-pass + rotation | panel packing | "
          "GEMM kernels | epilogue stores (+ first touch) | GEMM idle")
    print("| layer | run | wall | qmm_linear | %s |" % " | ".join(
        ("python+dispatch", "C set-up", "pre-pass+rotation", "packing", "kernels", "epilogue",
         "GEMM idle")))
    print("| --- | --- | --- | --- |%s" % (" --- |" * len(SPLIT)))
    for r in rows:
        for run, label in (("in_block", "in block"), ("alone", "alone"),
                           ("alone_y_reused", "alone, y reused")):
            d = r[run]
            if d is None:
                continue
            print("| %s | %s | %.2f | %.2f | %s |" % (
                r["layer"], label, d["wall_ms"], d["qmm_ms"],
                " | ".join("%.2f" % d[k] for k in SPLIT)))


def _one(path, tokens, threads, reps, width, act_dtype, attention, split=0):
    import torch
    torch.set_num_threads(threads)
    import contextlib

    import comfy_kitchen as ck

    import qmm
    import qmm.kitchen
    from qmm import dit
    qmm.configure(n_threads=threads)
    if split:
        qmm.profile(enable=True)
    hidden, heads, head_dim, ffn = width
    shapes = dit.shapes(hidden, heads, head_dim, ffn)
    g = torch.Generator().manual_seed(1)
    rss0 = _rss_mib()
    int8_bytes = sum(N * K for N, K in shapes.values())
    layers = {}
    for name, (N, K) in shapes.items():
        if path in ("eager", "qmm"):
            q = torch.randint(-127, 128, (N, K), dtype=torch.int8, generator=g)
            s = torch.full((N, 1), 1.0 / (127 * K ** 0.5)) * (1 + torch.rand(N, 1, generator=g))
            layers[name] = dit.KitchenInt8Linear(q, s, None, True, 256)
        else:
            dt = torch.bfloat16 if path == "bf16" else torch.float32
            layers[name] = dit.TorchLinear((torch.randn(N, K, generator=g) / K ** 0.5).to(dt))
    rss_weights = _rss_mib() - rss0
    ctx = contextlib.nullcontext()
    if path == "qmm":
        qmm.kitchen.register()
    elif path == "eager":
        ctx = ck.use_backend("eager")
    dt = {"fp32": torch.float32, "bf16": torch.bfloat16}.get(
        path, torch.float32 if act_dtype == "f32" else torch.bfloat16)
    block = dit.Block(layers, hidden, heads, head_dim, dt, attention=attention)
    x = torch.randn(1, tokens, hidden, generator=g).to(dt)
    with ctx, torch.inference_mode():
        for _ in range(2):     # one token: plans each layer once, allocates next to nothing
            block(x[:, :1])
        rss_after = _rss_mib() - rss0
        block(x)               # warm-up
        probe = _Split(block, tokens, shapes, split) if split else None
        times, lin = [], []
        for _ in range(reps):
            block.timer.linear_s = 0.0
            t = time.perf_counter()
            y = block(x)
            times.append(time.perf_counter() - t)
            lin.append(block.timer.linear_s)
        if probe:
            probe.replay = True
            block(x)           # each layer's call, then the same call alone
            probe.close()
    out = {"path": path, "tokens": tokens, "threads": threads, "times_s": times,
           "median_s": statistics.median(times),
           "outside_linears": statistics.median([1 - a / b for a, b in zip(lin, times)]),
           "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
           "weights_rss_mib": rss_weights, "resident_after_block_mib": rss_after,
           "int8_mib": int8_bytes / 2 ** 20, "finite": bool(torch.isfinite(y).all()),
           "act_dtype": str(dt).replace("torch.", ""), "attention": attention}
    if path == "qmm":
        c = qmm.counters()["linear"]
        out["engines"] = c["calls"]
        out["fallbacks"] = c["fallbacks"]
    if probe:
        out["split"] = probe.result()
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m qmm.bench.kitchen", description=__doc__.split(
        "\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="1024 tokens, 2 reps")
    ap.add_argument("--tokens", default=None, help="comma-separated token counts (1024,4096)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--paths", default=",".join(PATHS))
    ap.add_argument("--rounds", type=int, default=1, help="run every path this many times, "
                    "in turn, and keep each path's fastest round (steadier on a shared machine)")
    ap.add_argument("--small", action="store_true", help="hidden 1536 instead of 5376 (a check "
                    "of the harness, not the SPEC shapes)")
    ap.add_argument("--dtype", choices=("f32", "bf16"), default="f32", help="activations of the "
                    "INT8 paths (f32: what ComfyUI sends on a CPU)")
    ap.add_argument("--attention", choices=("sub_quad", "sdpa", "qmm", "sdpa_bf16"),
                    default="sub_quad",
                    help="sub_quad: ComfyUI's CPU attention (default); sdpa: torch's; qmm: "
                    "qmm.attention; sdpa_bf16: torch's in bf16 (casts included)")
    ap.add_argument("--json", action="store_true", help="one JSON object per path and size")
    ap.add_argument("--split", action="store_true", help="the qmm path only: each INT8 layer's "
                    "time in the block against the same call alone, split into Python + "
                    "dispatch, C set-up, pre-pass + rotation, panel packing, GEMM kernels, "
                    "epilogue stores, GEMM idle, and the first touch of the output (fresh y "
                    "minus reused y); see the module docstring")
    ap.add_argument("--alone", type=int, default=None, help="--split: runs of each call alone, "
                    "the fastest kept (default 5, --quick 3)")
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    width = (1536, 16, 128, 4096) if a.small else (5376, 56, 128, 14336)
    tokens = [int(t) for t in (a.tokens or ("1024" if a.quick else "1024,4096")).split(",")]
    reps = a.reps or (2 if a.quick else 3)
    split = (a.alone or (3 if a.quick else 5)) if a.split else 0
    if a.split:
        a.paths = "qmm"
    if a.one:
        print(json.dumps(_one(a.one, tokens[0], a.threads, reps, width, a.dtype, a.attention,
                              split)))
        return 0
    import qmm
    info = qmm.info()
    print("qmm %s on %s (%s); %d threads; block hidden %d, %d heads x %d, FFN %d (SwiGLU), "
          "ConvRot g=256; INT8 paths with %s activations; attention %s" % (
              info["version"], info["cpu"], ", ".join(qmm.int8_engines_available()), a.threads,
              *width, a.dtype, a.attention))
    rows = []
    # (path, attention): the paths with --attention; with qmm's attention also the two figures it
    # is measured against — ComfyUI today (eager INT8 + sub_quad) and torch bf16 with torch's SDPA
    runs = [(p, a.attention) for p in a.paths.split(",")]
    if a.attention == "qmm":
        runs += [(p, att) for p, att in (("eager", "sub_quad"), ("eager", "sdpa"), ("bf16", "sdpa"))
                 if p in a.paths.split(",")]
    for T, rnd, (p, att) in [(T, rnd, r) for T in tokens for rnd in range(a.rounds) for r in runs]:
        cmd = [sys.executable, "-m", "qmm.bench.kitchen", "--one", p, "--tokens", str(T),
               "--threads", str(a.threads), "--reps", str(reps)] + \
              (["--small"] if a.small else []) + ["--dtype", a.dtype, "--attention", att] + \
              (["--split", "--alone", str(split)] if split else [])
        r = subprocess.run(cmd, capture_output=True, text=True,
                           env=dict(os.environ, OMP_NUM_THREADS=str(a.threads)))
        if r.returncode != 0:
            print("path %s, %d tokens failed:\n%s" % (p, T, r.stderr[-2000:]), file=sys.stderr)
            return 1
        res = json.loads(r.stdout.strip().splitlines()[-1])
        res["round"] = rnd
        key = p if att == a.attention else p + "@" + att
        res["key"] = key
        best = [x for x in rows if x["key"] == key and x["tokens"] == T]
        if best and best[0]["median_s"] <= res["median_s"]:
            res["kept"] = False
        else:
            rows = [x for x in rows if not (x["key"] == key and x["tokens"] == T)] + [res]
        if a.json:
            print(json.dumps(res))
        else:
            print("  ran %-5s %5d tokens, attention %s, round %d: %.3f s" % (
                p, T, att, rnd + 1, res["median_s"]), flush=True)
    if not a.json:
        print()
        today, best_today = "eager@sub_quad", "eager@sdpa"
        print("| tokens | path | median / block | vs eager INT8 | vs torch bf16 | vs torch fp32 | "
              "%soutside linears | peak RSS | weights resident | + first calls |" % (
                  "vs ComfyUI today | vs eager + SDPA | " if a.attention == "qmm" else ""))
        print("| --- | --- | --- | --- | --- | --- | %s--- | --- | --- | --- |" % (
            "--- | --- | " if a.attention == "qmm" else ""))
        names = {"eager": "kitchen eager INT8 (%s)" % a.dtype, "qmm": "kitchen + qmm INT8 (%s)" % a.dtype,
                 "bf16": "torch bf16", "fp32": "torch fp32"}
        for T in tokens:
            by = {r["key"]: r for r in rows if r["tokens"] == T}
            for key in [k for k in list(PATHS) + [today, best_today, "bf16@sdpa"] if k in by]:
                r = by[key]
                p = r["path"]
                def sp(ref):
                    return "%.2fx" % (by[ref]["median_s"] / r["median_s"]) if ref in by else "-"
                wr, wa = r["weights_rss_mib"], r["resident_after_block_mib"]
                extra = " (%.2fx int8)" % (wr / r["int8_mib"]) if p in ("eager", "qmm") else ""
                label = names[p] + (" + %s" % r["attention"] if "@" in key else "")
                print("| %d | %s | %.3f s | %s | %s | %s | %s%.0f%% | %.0f MiB | %.0f MiB%s | "
                      "%+.0f MiB |" % (
                          T, label, r["median_s"], sp("eager"), sp("bf16"), sp("fp32"),
                          sp(today) + " | " + sp(best_today) + " | " if a.attention == "qmm" else "",
                          100 * r["outside_linears"], r["peak_rss_mib"], wr, extra, wa - wr))
        q = [r for r in rows if r["path"] == "qmm"]
        if q:
            print("\nqmm engines: %s, fallbacks %d; %.0f MiB of int8 weights, borrowed (no copy)" % (
                q[0]["engines"], q[0]["fallbacks"], q[0]["int8_mib"]))
        for r in q:
            if "split" in r:
                print("\n%d tokens:" % r["tokens"], end="")
                _split_table(r["split"], r["threads"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
