"""python -m qmm.bench.overhead — what one small INT8 linear call costs from Python, and how
much of it is qmm's own Python: layer [N, K] = 256 x 256, M = 1 row of f32 (ComfyUI's
modulation layers on a CPU), no rotation. Printed, in µs per call (best of --rounds rounds of
--n calls each, after a warm-up):

    torch f32 linear       F.linear on a float32 copy of the weight
    qmm kernel (ctypes)    qmm_linear called through ctypes with prepared arguments
    kitchen floor          comfy_kitchen.int8_linear with a backend that does nothing but
                           return a preallocated output (same declared constraints as qmm's, no
                           call rule): the kitchen's own dispatch
    kitchen + qmm          comfy_kitchen.int8_linear with backend qmm
    qmm's own Python       kitchen + qmm − kitchen floor − qmm kernel
    qmm's own, measured    qmm's call rule and function called directly as the kitchen calls
                           them (rule, then function) − qmm kernel: the same quantity without
                           the difference of two noisy totals
and the same through the custom op torch.ops.comfy_kitchen.int8_linear when this kitchen has it.
Both kitchen paths are selected with the kitchen's use_backend (same dispatch for both).

    python -m qmm.bench.overhead                  # 256 x 256, M = 1, 5 rounds of 3000 calls
    python -m qmm.bench.overhead --M 2 --N 3072 --K 3072
Not a test: no thresholds.
"""
import argparse
import ctypes
import sys
import time
import types


def _best_us(fn, n, rounds):
    for _ in range(min(n, 200)):
        fn()
    best = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t) / n)
    return best * 1e6


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m qmm.bench.overhead",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--N", type=int, default=256)
    ap.add_argument("--K", type=int, default=256)
    ap.add_argument("--M", type=int, default=1)
    ap.add_argument("--n", type=int, default=3000, help="calls per round")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=None, help="torch (and so qmm) threads")
    a = ap.parse_args(argv)

    import torch
    import torch.nn.functional as F
    import comfy_kitchen as ck
    from comfy_kitchen.constraints import FunctionConstraints
    from comfy_kitchen.registry import registry

    import qmm
    import qmm.kitchen as kitchen
    from qmm.bench import kitchen_backend
    from qmm import _lib as L
    from qmm.kitchen import linear as lin

    if not kitchen_backend(a.threads):
        return 1
    g = torch.Generator().manual_seed(0)
    w = torch.randint(-127, 128, (a.N, a.K), dtype=torch.int8, generator=g)
    s = torch.rand(a.N, 1, generator=g) * 0.01 + 1e-3
    x = torch.randn(a.M, a.K, generator=g)
    wf = w.float() * s
    out = torch.empty(a.M, a.N)

    noop = types.ModuleType("qmm_bench_noop")
    noop.int8_linear = lambda *args, **kw: out
    qc = kitchen._build_constraints()["int8_linear"]
    registry.register("qmm_noop", noop, {"int8_linear": FunctionConstraints(
        params=qc.params, default_devices=qc.default_devices)})

    c = lin.check("int8_linear", (x, w, s, None, torch.float32, False, 256, None, None, 0.0,
                                  None, None, None))
    args = L.LinearArgs.from_buffer_copy(c.tmpl)
    y = torch.empty(a.M, a.N)
    args.M, args.x, args.ldx, args.y = a.M, x.data_ptr(), a.K, y.data_ptr()
    ctx = qmm.context(torch.get_num_threads())
    wptr, cptr, aref = c.h.ptr, ctx.ptr, ctypes.byref(args)

    def kitchen_call(backend, op=False):
        def call():
            with ck.use_backend(backend):
                if op:
                    return torch.ops.comfy_kitchen.int8_linear(x, w, s, None, 0, False, 256)
                return ck.int8_linear(x, w, s, None, torch.float32)
        return call

    n, r = a.n, a.rounds
    rows = [("torch f32 linear", _best_us(lambda: F.linear(x, wf), n, r)),
            ("qmm kernel (ctypes)", _best_us(lambda: L.qmm_linear(cptr, wptr, aref), n, r))]
    floor = _best_us(kitchen_call("qmm_noop"), n, r)
    total = _best_us(kitchen_call("qmm"), n, r)
    rule = kitchen._build_constraints()["int8_linear"].call_rules[0]
    kw = {"x": x, "weight": w, "weight_scale": s, "bias": None, "out_dtype": torch.float32}

    def own():
        rule(kw)
        return kitchen.int8_linear(x, w, s, None, torch.float32)

    rows += [("kitchen floor (no-op backend)", floor), ("kitchen + qmm", total),
             ("qmm's own Python", total - floor - rows[1][1]),
             ("qmm's own, measured", _best_us(own, n, r) - rows[1][1])]
    has_op = hasattr(torch.ops.comfy_kitchen, "int8_linear")
    if has_op:
        opf = _best_us(kitchen_call("qmm_noop", True), n, r)
        opt = _best_us(kitchen_call("qmm", True), n, r)
        rows += [("custom op: kitchen floor", opf), ("custom op: kitchen + qmm", opt),
                 ("custom op: qmm's own Python", opt - opf - rows[1][1])]
    registry.disable("qmm_noop")
    info = qmm.info()
    print("qmm %s on %s; torch %s, %d threads; layer [%d, %d], M = %d, f32; best of %d rounds "
          "of %d calls" % (info["version"], info["cpu"], torch.__version__,
                           torch.get_num_threads(), a.N, a.K, a.M, r, n))
    for name, us in rows:
        print("  %-32s %8.2f µs" % (name, us))
    if not has_op:
        print("  (this comfy-kitchen has no torch.ops.comfy_kitchen.int8_linear)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
