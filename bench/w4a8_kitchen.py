"""w4a8_kitchen.py — a W4A8 layer through comfy-kitchen as ComfyUI calls it on a CPU: F.linear on a
QuantizedTensor of AsymW4A8Int8Layout (28672x5376, group 16, ConvRot 256) with f32 x under
torch.inference_mode, backend qmm (every call counted, no fallback) against the kitchen's eager
w4a8_int8_linear, alternated, best of 3 rounds, 2 threads.

    python bench/w4a8_kitchen.py [M ...]     # default M = 16 1024 (in the test venv)
"""
import sys, time, torch, comfy_kitchen as ck, qmm, qmm.kitchen
from comfy_kitchen.tensor.base import QuantizedTensor
torch.set_num_threads(2)
qmm.kitchen.register()
N, K = 28672, 5376
Ms = [int(a) for a in sys.argv[1:]] or [16, 1024]
torch.manual_seed(0)
w = torch.randn(N, K) * 0.02
qdata, params = ck.tensor.w4a8_int8.AsymW4A8Int8Layout.quantize(w, group_size=16, convrot_groupsize=256)
qt = QuantizedTensor(qdata, "AsymW4A8Int8Layout", params)
del w
with torch.inference_mode():
    for M in Ms:
        x = torch.randn(M, K)
        best = {"qmm": 1e9, "eager": 1e9}
        for r in range(3):
            for side in ("qmm", "eager"):
                t = time.perf_counter()
                if side == "eager":
                    with ck.use_backend("eager"):
                        torch.nn.functional.linear(x, qt)
                else:
                    qmm.reset_counters()
                    torch.nn.functional.linear(x, qt)
                    c = qmm.counters()["linear"]; assert sum(c["calls"].values()) == 1 and c["fallbacks"] == 0, c
                best[side] = min(best[side], (time.perf_counter() - t) * 1e3)
        print(f"M={M} {N}x{K} g16: qmm {best['qmm']:.1f} ms, kitchen eager {best['eager']:.1f} ms, "
              f"eager/qmm {best['eager']/best['qmm']:.1f}x", flush=True)
