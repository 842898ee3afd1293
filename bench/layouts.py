#!/usr/bin/env python3
"""bench/layouts.py — borrowed against packed weights, and each int8 engine against a reference
engine, taken side by side over alternating rounds of `qmm bench`.

    python3 bench/layouts.py                       # the default shapes, every int8 engine, 3 rounds
    python3 bench/layouts.py --rounds 5 --engines amx_int8,avx512_vnni
    python3 bench/layouts.py --shape 16x28672x5376:g256 --shape 256x5376x5376:g256 --json
    python3 bench/layouts.py --w8a16               # qmm bench's W8A16 rows too (the fallback)

Each round is one `qmm bench --json --no-float --layouts borrowed,packed` run over every shape and
engine (qmm bench calls the two layouts of an engine in turn, call by call, so that the machine's
slow moments fall on both); the engine order is reversed every other round, so neither engine
always runs first. Per shape, engine and layout the best round is kept: the lowest median time,
the highest %DRAM, the fastest call. Printed:
  1. per shape and engine: borrowed and packed ms, borrowed speed ÷ packed (packed ms ÷ borrowed
     ms: > 1 means borrowed is faster) of the best rounds, and %DRAM of both for M <= 32 (the rows
     judged by the bandwidth of the weight stream); then the same ratio taken within each round
     (its two medians, from interleaved calls) and the median of those over the rounds, and the
     ratio of the two fastest calls of the run;
  2. per shape and engine: its speed ÷ the reference engine's (--vs), per layout;
  3. the lowest of each against the int8 engines' targets of bench/NOTES.md (borrowed >= 0.95x
     packed at M = 16 and M >= 256, issue 36; M <= 16 at >= 85 % of DRAM; amx_int8 >= 3x
     avx512_vnni at M >= 256).
With --w8a16 the float engines' rows on the int8 weights (the fallback) join tables 1 and 2.
Not a test: it reports, it never fails on a number. Machines are noisy: quote the best of rounds,
and the rounds' spread (--json prints every round's rows).
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHAPES = ("8x28672x5376:g256", "16x28672x5376:g256", "32x28672x5376:g256", "256x5376x5376:g256",
          "1024x5376x5376:g256", "1024x21504x5376:g256", "4096x21504x5376:g256",
          "4096x5376x14336:swiglu:g256")
BW_M = 32      # qmm bench judges rows up to this M by the weight stream's bandwidth


def key(r):
    return (r["M"], r["N"], r["K"], r["act"], r["gs"])


def label(k):
    M, N, K, act, gs = k
    return "%dx%dx%d%s%s" % (M, N, K, "" if act == "none" else ":" + act, ":g%d" % gs if gs else "")


def run_round(qmm, shapes, engines, rnd, extra, w8a16):
    cmd = [qmm, "bench", "--json", "--layouts", "borrowed,packed"] + ([] if w8a16 else ["--no-float"]) + extra
    for s in shapes:
        cmd += ["--shape", s]
    if engines:
        cmd += ["--engines", ",".join(engines if rnd % 2 == 0 else engines[::-1])]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit("qmm bench failed (%d): %s\n%s" % (r.returncode, " ".join(cmd), r.stderr[-2000:]))
    return json.loads(r.stdout)


def engine_of(r):
    """the engine column: int8 rows by engine name, W8A16 rows (a float engine on the int8 weight)
    marked as such"""
    return r["engine"] + (" W8A16" if r["kind"] == "w8a16" else "")


def best_of(rounds):
    """{(shape key, engine, layout): best row}, {(shape key, engine): [per round: packed median ÷
    borrowed median]}, and {engine: reason} for the engines refused"""
    best, ratios, refused = {}, {}, {}
    for rows in rounds:
        ms = {(key(r), engine_of(r), r["layout"]): r["median_ms"] for r in rows
              if r["kind"] in ("int8", "w8a16") and r["status"] == "ok" and r["median_ms"]}
        for (k, e, lay), t in ms.items():
            if lay == "borrowed" and (k, e, "packed") in ms:
                ratios.setdefault((k, e), []).append(ms[(k, e, "packed")] / t)
        for r in rows:
            if r["kind"] not in ("int8", "w8a16"):
                continue
            if r["status"] != "ok" or r["median_ms"] is None:
                refused[engine_of(r)] = r["reason"] or r["status"]
                continue
            k = (key(r), engine_of(r), r["layout"])
            b = best.get(k)
            if b is None:
                best[k] = dict(r)
            else:
                b["median_ms"] = min(b["median_ms"], r["median_ms"])
                if r.get("min_ms") is not None:
                    b["min_ms"] = min(b.get("min_ms") or r["min_ms"], r["min_ms"])
                if r["pct_dram"] is not None:
                    b["pct_dram"] = max(b["pct_dram"] or 0.0, r["pct_dram"])
    return best, ratios, refused


def pct(v):
    return "-" if v is None else "%.0f%%" % v


def report(best, ratios, refused, vs, out=sys.stdout):
    shapes = sorted({k[0] for k in best})
    engines = sorted({k[1] for k in best})
    p = lambda *a: print(*a, file=out)
    p("| shape | engine | borrowed ms | packed ms | borrowed ÷ packed | borrowed %DRAM | packed %DRAM "
      "| ÷ per round (median of rounds) | ÷ fastest calls |")
    p("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    lo = {}  # target name -> (lowest value, where)
    def low(name, v, where):
        if name not in lo or v < lo[name][0]:
            lo[name] = (v, where)
    for s in shapes:
        for e in engines:
            b, q = best.get((s, e, "borrowed")), best.get((s, e, "packed"))
            if b is None or q is None:
                continue
            ratio = q["median_ms"] / b["median_ms"]
            bw = s[0] <= BW_M
            rr = sorted(ratios.get((s, e), []))
            per_round = "-" if not rr else "%s (%.2f)" % (" ".join("%.2f" % x for x in rr),
                                                          rr[len(rr) // 2] if len(rr) % 2 else
                                                          0.5 * (rr[len(rr) // 2 - 1] + rr[len(rr) // 2]))
            fastest = "%.2f" % (q["min_ms"] / b["min_ms"]) if b.get("min_ms") and q.get("min_ms") else "-"
            p("| %s | %s | %.3f | %.3f | %.2f | %s | %s | %s | %s |" % (
                label(s), e, b["median_ms"], q["median_ms"], ratio,
                pct(b["pct_dram"]) if bw else "-", pct(q["pct_dram"]) if bw else "-", per_round, fastest))
            if e.endswith(" W8A16"):
                continue   # the targets are the int8 engines'
            if s[0] >= 256 or s[0] == 16:
                low("borrowed ÷ packed at M = 16 and M >= 256 (target >= 0.95), " + e, ratio, label(s))
            if s[0] <= 16 and b["pct_dram"] is not None:
                low("borrowed %DRAM at M <= 16 (target >= 85%), " + e, b["pct_dram"], label(s))
    others = [e for e in engines if e != vs]
    if vs in engines and others:
        p("")
        p("| shape | engine | ÷ %s, packed | ÷ %s, borrowed |" % (vs, vs))
        p("| --- | --- | --- | --- |")
        for s in shapes:
            for e in others:
                cells = []
                for lay in ("packed", "borrowed"):
                    a, r = best.get((s, e, lay)), best.get((s, vs, lay))
                    if a is None or r is None:
                        cells.append("-")
                        continue
                    x = r["median_ms"] / a["median_ms"]
                    cells.append("%.2f" % x)
                    if e == "amx_int8" and vs == "avx512_vnni" and s[0] >= 256:
                        low("amx_int8 ÷ avx512_vnni at M >= 256 (target >= 3), " + lay, x, label(s))
                p("| %s | %s | %s | %s |" % (label(s), e, cells[0], cells[1]))
    if lo:
        p("")
        p("Lowest against the targets (best of the rounds):")
        for name, (v, where) in sorted(lo.items()):
            p("  %s: %s at %s" % (name, "%.0f%%" % v if "DRAM" in name else "%.2f" % v, where))
    for e, why in sorted(refused.items()):
        if e not in engines:
            p("not run: %s (%s)" % (e, why))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--qmm", default=os.environ.get("QMM_CLI") or os.path.join(ROOT, "build", "qmm"),
                    help="the qmm CLI ($QMM_CLI, else build/qmm)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--shape", action="append", help="as qmm bench --shape (repeatable)")
    ap.add_argument("--engines", default="", help="comma-separated (default: every int8 engine)")
    ap.add_argument("--vs", default="avx512_vnni", help="the reference engine of table 2")
    ap.add_argument("--repeats", type=int, default=None, help="passed to qmm bench")
    ap.add_argument("--threads", type=int, default=None, help="passed to qmm bench")
    ap.add_argument("--quick", action="store_true", help="qmm bench --quick (short peak and DRAM loops)")
    ap.add_argument("--w8a16", action="store_true", help="also the float engines on the int8 weights "
                    "(W8A16, the fallback), borrowed against packed")
    ap.add_argument("--json", action="store_true", help="every round's rows, then the best ones")
    a = ap.parse_args(argv)
    if a.rounds < 1:
        ap.error("--rounds must be >= 1")
    if not os.access(a.qmm, os.X_OK):
        ap.error("no qmm CLI at %s (build it, or give --qmm)" % a.qmm)
    extra = (["--repeats", str(a.repeats)] if a.repeats is not None else []) + \
            (["--threads", str(a.threads)] if a.threads is not None else []) + \
            (["--quick"] if a.quick else [])
    engines = [e for e in a.engines.split(",") if e]
    rounds = []
    for rnd in range(a.rounds):
        rounds.append(run_round(a.qmm, a.shape or SHAPES, engines, rnd, extra, a.w8a16))
        print("round %d of %d done" % (rnd + 1, a.rounds), file=sys.stderr, flush=True)
    best, ratios, refused = best_of(rounds)
    if a.json:
        print(json.dumps({"rounds": rounds,
                          "best": [dict(v, key=list(k[0])) for k, v in sorted(best.items())]}))
    else:
        report(best, ratios, refused, a.vs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
