#!/usr/bin/env python3
"""torch_compare.py — qmm beside PyTorch on the same machine, one command.

For each shape (M x N x K, SPEC §8) it runs, with the same thread count:
  qmm    `qmm bench --json` (its best int8 engine, pre-pass and epilogue included; its bf16 engine)
  torch  torch._int_mm (oneDNN s8s8s32: the int8 matmul alone, no quantization, no epilogue) and
         torch.nn.functional.linear in bf16,
and prints the medians side by side with the ratios. torch's int8 time leaves out what qmm's
includes (quantizing x, the rotation, the epilogue), so a ratio above 1 is qmm's advantage
despite doing more. Needs torch (e.g. the venv that scripts/test-python.sh makes); no timing here
is asserted anywhere.

    python3 bench/torch_compare.py [--qmm build/qmm] [--threads 2] [--shape 256x5376x5376:g256 ...]
"""
import argparse
import json
import statistics
import subprocess
import sys
import time

DEFAULT_SHAPES = ["4096x21504x5376:g256", "4096x5376x14336:swiglu:g256", "256x5376x5376", "16x28672x5376",
                  "1x28672x5376"]


def parse_shape(s):
    dims = s.split(":")[0].split("x")
    return int(dims[0]), int(dims[1]), int(dims[2])


def median_ms(fn, repeats, budget_s=6.0):
    fn()  # warm up
    times = []
    start = time.perf_counter()
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
        if time.perf_counter() - start > budget_s and len(times) >= 1:
            break
    return statistics.median(times)


def qmm_rows(qmm, shape, threads):
    out = subprocess.run([qmm, "bench", "--json", "--shape", shape, "--threads", str(threads)],
                         capture_output=True, text=True, check=True).stdout
    rows = json.loads(out)
    best = {}
    for r in rows:
        if r.get("status") == "ok" and r.get("median_ms") is not None:
            k = r["kind"]
            if k not in best or r["median_ms"] < best[k]["median_ms"]:
                best[k] = r
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--qmm", default="build/qmm")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--shape", action="append")
    a = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("torch_compare: torch is not installed here (see scripts/test-python.sh for a venv)", file=sys.stderr)
        return 2
    torch.set_num_threads(a.threads)
    shapes = a.shape or DEFAULT_SHAPES
    print(f"threads {a.threads}, torch {torch.__version__} ({torch.backends.cpu.get_cpu_capability()}), medians in ms")
    hdr = f"{'shape':28} {'qmm int8':>10} {'engine':>12} {'torch _int_mm':>14} {'x':>6} {'qmm bf16':>10} {'torch bf16':>11} {'x':>6}"
    print(hdr)
    for s in shapes:
        M, N, K = parse_shape(s)
        q = qmm_rows(a.qmm, s, a.threads)
        g = torch.Generator().manual_seed(0)
        xi = torch.randint(-127, 128, (M, K), dtype=torch.int8, generator=g)
        wi = torch.randint(-127, 128, (K, N), dtype=torch.int8, generator=g)
        try:
            t_int = median_ms(lambda: torch._int_mm(xi, wi), a.repeats)
        except RuntimeError as e:  # torch refuses some shapes (e.g. small M)
            t_int = float("nan")
            print(f"  torch._int_mm {s}: {e}".splitlines()[0], file=sys.stderr)
        xb = torch.randn(M, K, generator=g).to(torch.bfloat16)
        wb = torch.randn(N, K, generator=g).to(torch.bfloat16)
        t_bf = median_ms(lambda: torch.nn.functional.linear(xb, wb), a.repeats)
        qi, qb = q.get("int8"), q.get("bf16")
        qi_ms = qi["median_ms"] if qi else float("nan")
        qb_ms = qb["median_ms"] if qb else float("nan")
        print(f"{s:28} {qi_ms:10.2f} {qi['engine'] if qi else '-':>12} {t_int:14.2f} {t_int / qi_ms:6.2f} "
              f"{qb_ms:10.2f} {t_bf:11.2f} {t_bf / qb_ms:6.2f}")
    print("x = torch time / qmm time (above 1: qmm faster); torch._int_mm excludes quantization and epilogue")
    return 0


if __name__ == "__main__":
    sys.exit(main())
