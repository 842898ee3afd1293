"""python -m qmm.bench.w4a8 — a W4A8 layer against the INT8 layer of the same shape, both through
comfy-kitchen on backend qmm, as ComfyUI calls them on a CPU: f32 in and out, ConvRot (g 256),
the weight borrowed (the caller's tensors), a fresh output per call.

    W4A8   comfy_kitchen.w4a8_int8_linear(x, codes, s_rel, s_channel, codebook, group_size=G)
           (4-bit codes, e4m3 s_rel per group of G, the kitchen's fixed codebook unless --uniform)
    INT8   comfy_kitchen.int8_linear(x, w, s_channel) on an int8 weight [N, K]

The weights are random (their values do not change the work); C copies of each are alternated so
that no call finds the previous call's bytes in the last-level cache (C from the LLC size, at
least 2). The sides alternate call by call inside each round; each side keeps its best round.
Printed per M: both times, W4A8's speed against INT8's (INT8 time ÷ W4A8 time), and the bytes
each streams per second. Issue 36's targets on 28672 × 5376: ≥ 1.3× at M = 1, ≥ 0.85× at M = 16.

    python -m qmm.bench.w4a8                       # 28672 x 5376, M = 1 and 16, 5 rounds
    python -m qmm.bench.w4a8 --M 1,4,16 --N 5376 --K 5376 --group 32
Not a test: no thresholds.
"""
import argparse
import time


def _copies(nbytes):
    """weight copies of nbytes each that together pass twice the last-level cache (2 to 64)"""
    try:
        with open("/sys/devices/system/cpu/cpu0/cache/index3/size") as f:
            s = f.read().strip()
        llc = int(s[:-1]) * (1024 if s.endswith("K") else 1024 * 1024 if s.endswith("M") else 1)
    except (OSError, ValueError):
        llc = 32 << 20
    return min(64, max(2, -(-2 * llc // nbytes)))


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m qmm.bench.w4a8", description=__doc__.split("\n\n")[0])
    ap.add_argument("--N", type=int, default=28672)
    ap.add_argument("--K", type=int, default=5376)
    ap.add_argument("--M", default="1,16", help="comma-separated token counts")
    ap.add_argument("--group", type=int, default=16, help="W4A8 group size")
    ap.add_argument("--uniform", action="store_true", help="no codebook (levels c - 8)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=0, help="calls per side per round (default: ~0.5 s)")
    ap.add_argument("--threads", type=int, default=None, help="torch (and so qmm) threads")
    a = ap.parse_args(argv)

    import torch
    import comfy_kitchen as ck
    from comfy_kitchen.backends.eager import w4a8_int8 as E

    import qmm
    from qmm.bench import kitchen_backend

    if not kitchen_backend(a.threads):
        return 1
    N, K, G = a.N, a.K, a.group
    Ms = [int(m) for m in a.M.split(",") if m]
    g = torch.Generator().manual_seed(0)
    i8_bytes = N * K
    w4_bytes = N * K // 2 + N * (K // G)
    cb = None if a.uniform else torch.tensor(E._FIXED_LUT, dtype=torch.float32)
    s_ch = torch.rand(N, generator=g) * 1e-3 + 1e-4
    w4 = []
    for _ in range(_copies(w4_bytes)):
        codes = torch.randint(-128, 128, (N, K // 2), dtype=torch.int8, generator=g)
        s_rel = (torch.rand(N, K // G, generator=g) * 1.5 + 0.25).to(torch.float8_e4m3fn)
        w4.append((codes, s_rel))
    i8 = [torch.randint(-127, 128, (N, K), dtype=torch.int8, generator=g)
          for _ in range(_copies(i8_bytes))]

    def run_w4(x, j):
        codes, s_rel = w4[j % len(w4)]
        return ck.w4a8_int8_linear(x, codes, s_rel, s_ch, codebook=cb, group_size=G,
                                   convrot_groupsize=256, out_dtype=torch.float32)

    def run_i8(x, j):
        return ck.int8_linear(x, i8[j % len(i8)], s_ch, None, torch.float32, True, 256)

    info = qmm.info()
    print("qmm %s on %s; torch %s, %d threads; layer %d x %d, W4A8 group %d %s, e4m3 s_rel; "
          "%d / %d weight copies; f32 in and out, ConvRot 256; best of %d rounds, sides alternating"
          % (info["version"], info["cpu"], torch.__version__, torch.get_num_threads(), N, K, G,
             "uniform" if a.uniform else "codebook", len(w4), len(i8), a.rounds))
    print("%6s %12s %12s %10s %10s %10s" % ("M", "int8 ms", "w4a8 ms", "w4a8 is", "i8 GB/s", "w4 GB/s"))
    qmm.reset_counters()
    for M in Ms:
        x = torch.randn(M, K, generator=g)
        for j in range(2):   # warm-up: plans, pages, tables
            run_w4(x, j)
            run_i8(x, j)
        t = time.perf_counter()
        run_i8(x, 0)
        calls = a.calls or max(3, min(200, int(0.5 / max(time.perf_counter() - t, 1e-6))))
        best = {"i8": float("inf"), "w4": float("inf")}
        for _ in range(a.rounds):
            tot = {"i8": 0.0, "w4": 0.0}
            for j in range(calls):
                for side, fn in (("i8", run_i8), ("w4", run_w4)):
                    t = time.perf_counter()
                    fn(x, j)
                    tot[side] += time.perf_counter() - t
            for side in tot:
                best[side] = min(best[side], tot[side] / calls)
        print("%6d %12.3f %12.3f %9.2fx %10.1f %10.1f" % (
            M, best["i8"] * 1e3, best["w4"] * 1e3, best["i8"] / best["w4"],
            i8_bytes / best["i8"] / 1e9, w4_bytes / best["w4"] / 1e9))
    c = qmm.counters()["linear"]
    print("qmm calls %s, fallbacks %d" % (dict(c["calls"]), c["fallbacks"]))
    return 0 if c["fallbacks"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
