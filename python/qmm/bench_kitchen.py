"""python -m qmm.bench_kitchen — one video-DiT block (qmm.dit, SPEC §8 shapes) end to end in
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

    python -m qmm.bench_kitchen                 # 1024 and 4096 tokens, 2 threads, 3 reps
    python -m qmm.bench_kitchen --quick         # 1024 tokens, 2 reps (a few minutes)
    python -m qmm.bench_kitchen --dtype bf16    # bf16 activations on the INT8 paths
    python -m qmm.bench_kitchen --rounds 2      # each path twice, in turn; the faster round kept
Not a test: no thresholds; the numbers go to bench/NOTES.md and the README.
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


def _one(path, tokens, threads, reps, width, act_dtype, attention):
    import torch
    torch.set_num_threads(threads)
    import contextlib

    import comfy_kitchen as ck

    import qmm
    import qmm.kitchen
    from qmm import dit
    qmm.configure(n_threads=threads)
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
        times, lin = [], []
        for _ in range(reps):
            block.timer.linear_s = 0.0
            t = time.perf_counter()
            y = block(x)
            times.append(time.perf_counter() - t)
            lin.append(block.timer.linear_s)
    out = {"path": path, "tokens": tokens, "threads": threads, "times_s": times,
           "median_s": statistics.median(times),
           "outside_linears": statistics.median([1 - a / b for a, b in zip(lin, times)]),
           "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
           "weights_rss_mib": rss_weights, "resident_after_block_mib": rss_after,
           "int8_mib": int8_bytes / 2 ** 20, "finite": bool(torch.isfinite(y).all()),
           "act_dtype": str(dt).replace("torch.", ""), "attention": attention}
    if path == "qmm":
        c = qmm.counters()
        out["engines"] = c["calls"]
        out["fallbacks"] = c["fallbacks"]
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m qmm.bench_kitchen", description=__doc__.split(
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
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    width = (1536, 16, 128, 4096) if a.small else (5376, 56, 128, 14336)
    tokens = [int(t) for t in (a.tokens or ("1024" if a.quick else "1024,4096")).split(",")]
    reps = a.reps or (2 if a.quick else 3)
    if a.one:
        print(json.dumps(_one(a.one, tokens[0], a.threads, reps, width, a.dtype, a.attention)))
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
        cmd = [sys.executable, "-m", "qmm.bench_kitchen", "--one", p, "--tokens", str(T),
               "--threads", str(a.threads), "--reps", str(reps)] + \
              (["--small"] if a.small else []) + ["--dtype", a.dtype, "--attention", att]
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
