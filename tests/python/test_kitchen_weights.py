"""Borrowed weights under ComfyUI's own mechanisms, with the kitchen's QuantizedTensor (no
ComfyUI needed): every way ComfyUI (or a user) writes an int8 weight is seen by the next call,
a Parameter re-wrap of the same storage makes no new qmm weight, a one-layer patch makes one,
two patchers alternate without growth, two threads on a fresh weight both get right results.
Each result is compared bit for bit with the kitchen's eager backend on the same tensors (f32
activations without rotation: EXACT, SPEC §1a)."""
import ctypes
import gc
import threading

import numpy as np
import torch
import torch.nn.functional as F

import comfy_kitchen as ck
from comfy_kitchen.tensor.base import QuantizedTensor
from comfy_kitchen.tensor.int8 import TensorWiseINT8Layout

import qmm


def _qt(q, s, gs=0):
    p = TensorWiseINT8Layout.Params(scale=s, orig_dtype=torch.float32, orig_shape=tuple(q.shape),
                                    convrot=gs > 0, convrot_groupsize=gs or 256)
    return QuantizedTensor(q, "TensorWiseINT8Layout", p)


def _param(q, s, gs=0):
    return torch.nn.Parameter(_qt(q, s, gs), requires_grad=False)


def _eager_linear(x, w, b=None):
    with ck.use_backend("eager"):
        return F.linear(x, w, b)


def _on_qmm(x, w, b=None):
    qmm.reset_counters()
    y = F.linear(x, w, b)
    c = qmm.counters()["linear"]
    assert sum(c["calls"].values()) == 1 and c["fallbacks"] == 0, c
    return y


def _layer(N=64, K=256):
    return torch.randint(-127, 128, (N, K), dtype=torch.int8), torch.rand(N, 1) * 0.01 + 1e-3


def _info(h):
    i = qmm._lib.WeightInfo()
    qmm._lib.qmm_weight_get_info(h.ptr, ctypes.byref(i))
    return i


def test_rewrap_of_the_same_storage_copies_nothing(kitchen):
    q, s = _layer()
    x = torch.randn(5, 256)
    p = _param(q, s)
    y0 = _on_qmm(x, p)
    gc.collect()
    n0 = kitchen.weights.count()
    for _ in range(5):              # unpatch / reload / patcher switch: a new Parameter each time
        p = torch.nn.Parameter(p.detach(), requires_grad=False)
        assert p._qdata.data_ptr() == q.data_ptr()
        assert torch.equal(_on_qmm(x, p), y0)
    gc.collect()
    assert kitchen.weights.count() == n0            # one handle per live layer
    for h in kitchen.weights.handles():             # borrowed: none holds a copy
        assert _info(h).packed_bytes == 0


def test_copy_to_param_is_seen(kitchen):
    # comfy.utils.copy_to_param: prev.data.copy_(value), on a Parameter(QuantizedTensor)
    q, s = _layer()
    x = torch.randn(3, 256)
    p = _param(q, s)
    y0 = _on_qmm(x, p)
    q2, s2 = _layer()
    p.data.copy_(_qt(q2, s2))
    assert p._qdata.data_ptr() == q.data_ptr()          # in place: same storage, new values
    y1 = _on_qmm(x, p)
    assert torch.equal(y1, _eager_linear(x, p)) and not torch.equal(y0, y1)


def test_inference_mode_writes_are_seen(kitchen):
    # ComfyUI loads and patches under torch.inference_mode: no version counter to watch
    with torch.inference_mode():
        q, s = _layer(96, 512)
        p = _param(q, s)
        x = torch.randn(4, 512)
        y0 = _on_qmm(x, p)
        q[37] = torch.randint(-127, 128, (512,), dtype=torch.int8)    # one row, in place
        y1 = _on_qmm(x, p)
        assert torch.equal(y1, _eager_linear(x, p)) and not torch.equal(y0[:, 37], y1[:, 37])
        q.add_(1).clamp_(-127, 127)                                     # a LoRA-style patch
        assert torch.equal(_on_qmm(x, p), _eager_linear(x, p))


def test_numpy_writes_are_seen(kitchen):
    q, s = _layer()
    p = _param(q, s)
    x = torch.randn(2, 256)
    y0 = _on_qmm(x, p)
    q.numpy()[5, 7:200] = np.int8(-3)                 # through numpy: torch sees no write at all
    y1 = _on_qmm(x, p)
    assert torch.equal(y1, _eager_linear(x, p)) and not torch.equal(y0, y1)


def test_data_index_write_is_seen(kitchen):
    q, s = _layer()
    p = _param(q, s)
    x = torch.randn(2, 256)
    y0 = _on_qmm(x, p)
    p._qdata.data[11, 3] = 100 if q[11, 3] != 100 else -100          # w.data[i, j] = v
    y1 = _on_qmm(x, p)
    assert torch.equal(y1, _eager_linear(x, p)) and not torch.equal(y0[:, 11], y1[:, 11])


def test_scale_and_bias_writes_are_seen(kitchen):
    q, s = _layer()
    b = torch.randn(64)
    p = _param(q, s)
    x = torch.randn(2, 256)
    y0 = _on_qmm(x, p, b)
    s.mul_(2)
    b[3] += 1
    y1 = _on_qmm(x, p, b)
    assert torch.equal(y1, _eager_linear(x, p, b)) and not torch.equal(y0, y1)


class _Model(torch.nn.Module):
    def __init__(self, n=4, N=64, K=64):
        super().__init__()
        self.layers = torch.nn.ModuleList()
        for _ in range(n):
            m = torch.nn.Linear(K, N, bias=False)
            m.weight = _param(*_layer(N, K))
            self.layers.append(m)

    def forward(self, x):
        for m in self.layers:
            x = F.linear(x, m.weight)
        return x


def test_one_layer_patch_makes_one_new_weight(kitchen):
    model = _Model()
    x = torch.randn(3, 64)
    model(x)
    gc.collect()
    n0 = kitchen.weights.count()
    old = model.layers[2].weight
    q2 = (old._qdata.to(torch.int16) + 1).clamp(-127, 127).to(torch.int8)   # the patched layer
    model.layers[2].weight = _param(q2, old._params.scale)
    y = model(x)
    gc.collect()
    assert kitchen.weights.count() == n0 + 1        # old is still referenced here
    with ck.use_backend("eager"):
        assert torch.equal(y, model(x))


def test_two_patchers_alternating(kitchen):
    # a base model and its LoRA clone sharing all layers but one, run in turn
    base = _Model()
    x = torch.randn(2, 64)
    lora_w = base.layers[1].weight
    lora_q = (lora_w._qdata.to(torch.int16) - 2).clamp(-127, 127).to(torch.int8)
    patched = {1: _param(lora_q, lora_w._params.scale)}
    originals = {i: m.weight for i, m in enumerate(base.layers)}
    base(x)
    counts = []
    for r in range(6):
        use_lora = r % 2 == 1
        for i, m in enumerate(base.layers):      # ComfyUI swaps whole Parameters in and out
            m.weight = torch.nn.Parameter((patched.get(i) if use_lora and i in patched
                                           else originals[i]).detach(), requires_grad=False)
        y = base(x)
        with ck.use_backend("eager"):
            assert torch.equal(y, base(x)), "round %d" % r
        gc.collect()
        counts.append(kitchen.weights.count())
    # one handle per live set of tensors (the kept originals and the layers' current wrappers):
    # switching makes no more of them, round after round
    assert counts[1:] == counts[1:2] * 5, counts


def test_two_threads_on_a_fresh_weight(kitchen):
    x = torch.randn(9, 512)
    wrong = []
    for r in range(40):
        q, s = _layer(128, 512)
        p = _param(q, s)
        want = _eager_linear(x, p)
        gate = threading.Barrier(2)
        out = [None, None]

        def go(i):
            gate.wait()
            out[i] = F.linear(x, p)

        ts = [threading.Thread(target=go, args=(i,)) for i in range(2)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        wrong += [(r, i) for i in range(2) if not torch.equal(out[i], want)]
    assert not wrong, "wrong outputs (round, thread): %s" % wrong


def test_no_copy_resident(kitchen):
    # borrowed: making a qmm weight for a 64 MiB int8 tensor allocates nothing of its size
    def rss_kib():
        with open("/proc/self/status") as f:
            return next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))
    q = torch.randint(-127, 128, (8192, 8192), dtype=torch.int8)
    s = torch.rand(8192, 1) * 1e-4
    x = torch.randn(1, 8192)
    p = _param(q, s)
    r0 = rss_kib()
    F.linear(x, p)                    # p stays alive: a copy made for it would stay resident
    grown = (rss_kib() - r0) * 1024 / q.numel()
    print("resident growth at the first call: %.3fx the int8 bytes" % grown)
    assert grown < 0.25               # a copy is >= 1.0
