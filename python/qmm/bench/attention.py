"""python -m qmm.bench.attention — attention alone, q/k/v [B, heads, S, D] f32 in and out (what
ComfyUI hands its attention on a CPU), in one process, on the same CPU threads:

    qmm <engine> <mode>   qmm.attention on each engine that admits it here, each mode (best:
                          bf16 operands and f32 accumulation where they pay; f32: f32 operands;
                          int8: the kitchen's int8 recipe, both products on int8 operands, on
                          the int8 engines)
    sdpa f32              torch's scaled_dot_product_attention on the f32 tensors
    sdpa bf16             torch's SDPA on bf16 copies made beforehand (not timed)
    sdpa bf16+casts       f32 → bf16, SDPA, → f32, all timed (what a bf16 attention costs a
                          caller holding f32): the reference of the ratios
    sub_quad              ComfyUI's CPU default attention_sub_quad: the real one with
                          --comfyui PATH (a ComfyUI checkout whose comfy package imports here),
                          else qmm.dit.sub_quad, this project's reproduction of its CPU path
                          (whole key length in one chunk, queries in chunks of 4096), labelled so

Rounds alternate (every variant once per round, in turn) after one warm-up call each; the best
round is kept. Printed per shape and variant: ms, T ops/s (4·B·H·S·Skv·D: flops, or int8 ops on
the int8 engines), for a qmm row the % of its engine's peak — the register loop of its core
instruction that `qmm bench` times (VPDPBUSD zmm for avx512_vnni, FMA for the f32 engines, ...),
run by `qmm bench --peaks` on the same threads before and after the shapes, the best kept (the
CLI: --cli, $QMM_CLI, `qmm` on PATH or build/qmm of this checkout; without it "-") — the speedup
against sdpa f32 and against sdpa bf16+casts (> 1: faster) and the error against sdpa f32
(max |out − ref| / max |v|).

    python -m qmm.bench.attention                    # S 1024, 4096; heads 24, 56; D 128; 3 rounds
    python -m qmm.bench.attention --quick            # S 1024, heads 24, 2 rounds
    python -m qmm.bench.attention --seq 4096 --heads 56 --rounds 5 --json
    python -m qmm.bench.attention --seq 79567 --heads 1 --modes int8 --peers sdpa-f32 --rounds 2
Not a test: no thresholds.
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time

PEERS = ("sdpa-f32", "sdpa-bf16", "sdpa-bf16-casts", "sub-quad")


def cli_path(cli=None):
    """The qmm CLI: --cli, $QMM_CLI, `qmm` on PATH, or build/qmm of the checkout this file is in;
    None if none exists."""
    here = os.path.dirname(os.path.abspath(__file__))
    for p in (cli, os.environ.get("QMM_CLI"), shutil.which("qmm"),
              os.path.normpath(os.path.join(here, "..", "..", "..", "build", "qmm"))):
        if p and os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    return None


def peaks(threads, cli=None, into=None):
    """{engine name: peak T ops/s} from `qmm bench --peaks --json` on `threads` threads, each the
    best of `into` (a dict from an earlier call) and this run; {} without the CLI."""
    into = {} if into is None else into
    p = cli_path(cli)
    if not p:
        return into
    r = subprocess.run([p, "bench", "--peaks", "--json", "--threads", str(threads)],
                       capture_output=True, text=True, timeout=600, check=False)
    for line in r.stdout.splitlines():
        try:
            o = json.loads(line)
        except ValueError:
            continue
        if o.get("peak_tops"):
            into[o["engine"]] = max(into.get(o["engine"], 0.0), float(o["peak_tops"]))
    return into


def _comfy_sub_quad(path):
    """ComfyUI's attention_sub_quad from a ComfyUI checkout, or (None, why)."""
    if path not in sys.path:
        sys.path.insert(0, path)
    saved = sys.argv
    try:
        sys.argv = [saved[0]]            # comfy.cli_args parses sys.argv at import
        import comfy.ldm.modules.attention as ca
    except Exception as e:   # noqa: BLE001 — ComfyUI's import, anything can fail
        return None, "%s: %s" % (type(e).__name__, e)
    finally:
        sys.argv = saved
    f = ca.attention_sub_quad

    def sub_quad(q, k, v):
        return f(q, k, v, q.shape[1], skip_reshape=True, skip_output_reshape=True)
    return sub_quad, ""


def variants(q, k, v, modes=("best", "f32", "int8"), comfyui=None, peers=PEERS):
    """[(name, fn, note)] for the inputs q, k, v (f32); qmm rows only for engines that admit;
    the peers named in `peers` (PEERS)."""
    import torch
    import torch.nn.functional as F

    import qmm
    from qmm import dit
    out = []
    notes = []
    if qmm.has_attention():
        for mode in modes:
            for e in qmm._lib.ENGINES:
                wanted = qmm._lib.KIND_INT8 if mode == "int8" else qmm._lib.KIND_FLOAT
                if e["kind"] != wanted or not qmm._lib.qmm_engine_available(e["id"], None, 0):
                    continue
                p = qmm.attention_plan(q, k, v, mode=mode, engine=e["name"])
                if p.status != "QMM_OK" or e["name"] not in p.admitted:
                    notes.append("qmm %s %s: refused (%s)" % (e["name"], mode, p.reasons.get(
                        e["name"], p.status)))
                    continue
                out.append(("qmm %s %s" % (e["name"], mode),
                            (lambda m, n: lambda: qmm.attention(q, k, v, mode=m, engine=n))(
                                mode, e["name"]), ""))
            p = qmm.attention_plan(q, k, v, mode=mode)
            notes.append("qmm auto %s: %s" % (mode, p.engine))
    else:
        notes.append("qmm: the loaded libqmm (%s) lacks qmm_attention" % qmm.library_path)
    if "sdpa-f32" in peers:
        out.append(("sdpa f32", lambda: F.scaled_dot_product_attention(q, k, v), ""))
    if "sdpa-bf16" in peers:
        qb, kb, vb = q.bfloat16(), k.bfloat16(), v.bfloat16()
        out.append(("sdpa bf16", lambda: F.scaled_dot_product_attention(qb, kb, vb), "bf16 in/out"))
    if "sdpa-bf16-casts" in peers:
        out.append(("sdpa bf16+casts", lambda: F.scaled_dot_product_attention(
            q.bfloat16(), k.bfloat16(), v.bfloat16()).float(), ""))
    if "sub-quad" not in peers:
        del torch
        return out, notes
    sq, why = (None, "")
    if comfyui:
        sq, why = _comfy_sub_quad(comfyui)
        if sq is None:
            notes.append("--comfyui %s: ComfyUI's attention does not import (%s); sub_quad is "
                         "qmm.dit's reproduction" % (comfyui, why))
    if sq is not None:
        out.append(("sub_quad (ComfyUI)", lambda: sq(q, k, v), ""))
    else:
        out.append(("sub_quad (qmm.dit repro)", lambda: dit.sub_quad(q, k, v), ""))
    del torch
    return out, notes


def bench(B, H, S, D, rounds, comfyui=None, modes=("best", "f32", "int8"), seed=0, peers=PEERS,
          peak=None):
    """Rows (dicts) and notes for one shape; peak: {engine: T ops/s} (peaks()) for the % columns."""
    import torch
    import torch.nn.functional as F
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, H, S, D, generator=g) for _ in range(3))
    vs, notes = variants(q, k, v, modes, comfyui, peers)
    ref = F.scaled_dot_product_attention(q, k, v).double()    # torch's flash path: no S × S scores
    vmax = v.abs().max().item()
    best = {}
    err = {}
    for name, fn, _ in vs:                          # warm-up, and the error
        o = fn()
        err[name] = ((o.double() - ref).abs().max().item() / vmax) if o.shape == ref.shape \
            else float("nan")
        del o
    for _ in range(rounds):
        for name, fn, _ in vs:
            t0 = time.perf_counter()
            o = fn()
            t = time.perf_counter() - t0
            del o
            best[name] = min(best.get(name, math.inf), t)
    flops = 4.0 * B * H * S * S * D
    base, f32 = best.get("sdpa bf16+casts"), best.get("sdpa f32")
    rows = []
    for name, _, note in vs:
        t = best[name]
        eng = name.split()[1] if name.startswith("qmm ") else None
        pk = (peak or {}).get(eng)
        rows.append({"B": B, "heads": H, "S": S, "Skv": S, "D": D, "variant": name,
                     "ms": t * 1e3, "tflops": flops / t / 1e12, "tops": flops / t / 1e12,
                     "engine": eng, "peak_tops": pk,
                     "pct_peak": (100.0 * flops / t / 1e12 / pk) if pk else None,
                     "vs_sdpa_f32": (f32 / t) if f32 else None,
                     "vs_sdpa_bf16_casts": (base / t) if base else None,
                     "err_vs_sdpa_f32": err[name], "rounds": rounds, "note": note,
                     "threads": torch.get_num_threads()})
    return rows, notes


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m qmm.bench.attention",
                                 description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seq", default=None, help="comma-separated S (= Skv): 1024,4096")
    ap.add_argument("--heads", default=None, help="comma-separated head counts: 24,56")
    ap.add_argument("--dim", type=int, default=128, help="head dim D (128)")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=None, help="timed rounds, best kept (3)")
    ap.add_argument("--threads", type=int, default=None, help="torch and qmm threads (torch's)")
    ap.add_argument("--modes", default="best,f32,int8", help="qmm modes (best,f32,int8)")
    ap.add_argument("--quick", action="store_true", help="S 1024, heads 24, 2 rounds")
    ap.add_argument("--comfyui", default=None, metavar="PATH",
                    help="a ComfyUI checkout: time its attention_sub_quad itself")
    ap.add_argument("--peers", default=",".join(PEERS),
                    help="the torch and ComfyUI rows: any of %s, or none" % ",".join(PEERS))
    ap.add_argument("--cli", default=None, metavar="PATH", help="the qmm CLI for the peaks")
    ap.add_argument("--json", action="store_true", help="one JSON object per shape and variant")
    a = ap.parse_args(argv)
    peers = tuple(p for p in a.peers.split(",") if p and p != "none")
    bad = [p for p in peers if p not in PEERS]
    if bad:
        ap.error("--peers: unknown %s (of %s)" % (",".join(bad), ",".join(PEERS)))
    import torch

    import qmm
    if a.threads:
        torch.set_num_threads(a.threads)
    qmm.configure(n_threads=torch.get_num_threads())
    seqs = [int(x) for x in (a.seq or ("1024" if a.quick else "1024,4096")).split(",")]
    heads = [int(x) for x in (a.heads or ("24" if a.quick else "24,56")).split(",")]
    rounds = a.rounds or (2 if a.quick else 3)
    modes = tuple(m for m in a.modes.split(",") if m)
    info = qmm.info()
    pk = peaks(torch.get_num_threads(), a.cli)
    if not a.json:
        print("qmm %s, %s, %d threads; CPU %s" % (info["version"], info["library"],
                                                  torch.get_num_threads(), info["cpu"]))
        print("peaks (qmm bench --peaks, %s): %s" % (cli_path(a.cli) or "no qmm CLI found", ", ".join(
            "%s %.3f T/s" % kv for kv in sorted(pk.items())) or "-"))
    results = []
    for S in seqs:
        for H in heads:
            results.append((S, H) + bench(a.batch, H, S, a.dim, rounds, a.comfyui, modes, peers=peers,
                                          peak=pk))
    pk = peaks(torch.get_num_threads(), a.cli, pk)     # again after the shapes: the best of the run
    for S, H, rows, notes in results:
        for r in rows:
            if r["engine"] and pk.get(r["engine"]):
                r["peak_tops"] = pk[r["engine"]]
                r["pct_peak"] = 100.0 * r["tops"] / pk[r["engine"]]
        if a.json:
            for r in rows:
                print(json.dumps(r))
            continue
        print("\nB=%d heads=%d S=Skv=%d D=%d, f32 in and out, best of %d rounds" % (
            a.batch, H, S, a.dim, rounds))
        for n in notes:
            print("  " + n)
        print("| variant | ms | T ops/s | % of peak | x sdpa f32 | x sdpa bf16+casts | err vs sdpa f32 |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        for r in rows:
            print("| %s | %.1f | %.3f | %s | %s | %s | %.1e |" % (
                r["variant"] + (" (%s)" % r["note"] if r["note"] else ""), r["ms"], r["tops"],
                "%.0f %%" % r["pct_peak"] if r["pct_peak"] else "-",
                "%.2fx" % r["vs_sdpa_f32"] if r["vs_sdpa_f32"] else "-",
                "%.2fx" % r["vs_sdpa_bf16_casts"] if r["vs_sdpa_bf16_casts"] else "-",
                r["err_vs_sdpa_f32"]))
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
