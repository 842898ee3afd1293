"""The packed-weight cache: one pack per weight tensor, repacked when the tensor (copy_, a
LoRA-style add_), its scale or its bias change, dropped when the tensor is freed."""
import gc

import torch

import comfy_kitchen as ck

import qmm


def _eager(*a):
    with ck.use_backend("eager"):
        return ck.int8_linear(*a)


def _rss_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def test_packed_once_then_reused(kitchen):
    w = torch.randint(-127, 128, (64, 256), dtype=torch.int8)
    s = torch.rand(64, 1) * 0.01
    x = torch.randn(4, 256, dtype=torch.bfloat16)
    n0 = kitchen.cache.packs
    for _ in range(5):
        ck.int8_linear(x, w, s, None, torch.bfloat16)
    # same values in a new scale tensor (ComfyUI may re-create it): no repack
    ck.int8_linear(x, w, s.clone(), None, torch.bfloat16)
    assert kitchen.cache.packs - n0 == 1


def test_in_place_changes_give_new_results(kitchen):
    w = torch.randint(-127, 128, (64, 256), dtype=torch.int8)
    s = torch.rand(64) * 0.01
    b = torch.randn(64)
    x = torch.randn(4, 256, dtype=torch.bfloat16)
    y0 = ck.int8_linear(x, w, s, b, torch.bfloat16)
    assert torch.equal(y0, _eager(x, w, s, b, torch.bfloat16))
    n0 = kitchen.cache.packs
    w.copy_(torch.randint(-127, 128, (64, 256), dtype=torch.int8))     # weight.copy_()
    y1 = ck.int8_linear(x, w, s, b, torch.bfloat16)
    assert torch.equal(y1, _eager(x, w, s, b, torch.bfloat16)) and not torch.equal(y0, y1)
    w[3].add_(1).clamp_(-127, 127)                                       # a LoRA-style patch
    y2 = ck.int8_linear(x, w, s, b, torch.bfloat16)
    assert torch.equal(y2, _eager(x, w, s, b, torch.bfloat16)) and not torch.equal(y1, y2)
    s.mul_(2)                                                            # the scale changes
    y3 = ck.int8_linear(x, w, s, b, torch.bfloat16)
    assert torch.equal(y3, _eager(x, w, s, b, torch.bfloat16))
    b.add_(1)                                                            # the bias changes
    y4 = ck.int8_linear(x, w, s, b, torch.bfloat16)
    assert torch.equal(y4, _eager(x, w, s, b, torch.bfloat16))
    y5 = ck.int8_linear(x, w, s, None, torch.bfloat16)                   # no bias now
    assert torch.equal(y5, _eager(x, w, s, None, torch.bfloat16))
    assert kitchen.cache.packs - n0 == 5


def test_freed_weights_drop_their_handles(kitchen):
    x = torch.randn(2, 256, dtype=torch.bfloat16)
    gc.collect()
    base = len(kitchen.cache)

    def cycle(i):
        w = torch.randint(-127, 128, (64, 256), dtype=torch.int8)
        s = torch.rand(64, 1) * 0.01
        ck.int8_linear(x, w, s, None, torch.bfloat16)
        assert len(kitchen.cache) == base + 1
        del w, s

    for i in range(100):                 # warm up the allocators
        cycle(i)
    rss0 = _rss_kib()
    for i in range(1000):
        cycle(i)
        assert len(kitchen.cache) == base, "cycle %d left a cached handle" % i
    grown = _rss_kib() - rss0
    print("RSS growth over 1000 create/call/delete cycles: %d KiB" % grown)
    # each cycle packs 16 KiB; a leak of the packed copies alone would be ~16 MiB
    assert grown < 4096


def test_cache_bounded_by_live_weights(kitchen):
    ws = [torch.randint(-127, 128, (32, 64), dtype=torch.int8) for _ in range(10)]
    s = torch.rand(32) * 0.01
    x = torch.randn(1, 64, dtype=torch.bfloat16)
    base = len(kitchen.cache)
    for w in ws:
        ck.int8_linear(x, w, s, None, torch.bfloat16)
    assert len(kitchen.cache) == base + 10
    assert kitchen.cache.packed_bytes() >= 10 * 32 * 64
    del ws, w
    gc.collect()
    assert len(kitchen.cache) == base


def test_spill_leaves_the_packed_copy_the_only_resident_one(kitchen, tmp_path):
    # register(spill_dir=...): after packing, the int8 tensor's bytes live in an unlinked file
    # mapped back in; the values read back unchanged, writes still work and repack
    N, K = 8192, 8192                       # 64 MiB of int8
    x = torch.randn(3, K, dtype=torch.bfloat16)
    s = torch.rand(N, 1) * 1e-4
    kitchen.cache.spill_dir = str(tmp_path)
    try:
        gc.collect()
        rss0 = _rss_kib()
        w = torch.randint(-127, 128, (N, K), dtype=torch.int8)
        ref = w[::97].clone()
        spilled0 = kitchen.cache.spilled_bytes
        y = ck.int8_linear(x, w, s, None, torch.bfloat16)
        assert kitchen.cache.spilled_bytes == spilled0     # one call: maybe a temporary, kept
        y = ck.int8_linear(x, w, s, None, torch.bfloat16)  # the second call moves it
        grown = (_rss_kib() - rss0) * 1024 / (N * K)
        print("resident after pack with spill: %.2fx the int8 bytes" % grown)
        assert kitchen.cache.spilled_bytes - spilled0 == N * K
        assert list(tmp_path.iterdir()) == []            # unlinked: nothing left on disk
        assert torch.equal(w[::97], ref)                 # reads back the same values
        assert grown < 1.25
        assert torch.equal(y, _eager(x, w, s, None, torch.bfloat16))
        w[0].fill_(3)                                    # a write through the mapping
        y2 = ck.int8_linear(x, w, s, None, torch.bfloat16)
        assert torch.equal(y2, _eager(x, w, s, None, torch.bfloat16))
        assert kitchen.cache.spilled_bytes - spilled0 == N * K   # repacked, not moved again
        # a tensor whose storage has another view is not moved (the view would not follow)
        w2 = torch.randint(-127, 128, (1024, 2048), dtype=torch.int8)
        view = w2.view(-1)
        before = kitchen.cache.spilled_bytes
        for _ in range(2):
            ck.int8_linear(torch.randn(1, 2048, dtype=torch.bfloat16), w2, s[:1024], None,
                           torch.bfloat16)
        assert kitchen.cache.spilled_bytes == before and view.data_ptr() == w2.data_ptr()
    finally:
        kitchen.cache.spill_dir = None


def test_inference_tensors_changed_in_place_are_repacked(kitchen):
    # ComfyUI loads models under torch.inference_mode: such tensors have no version counter
    with torch.inference_mode():
        w = torch.randint(-127, 128, (64, 256), dtype=torch.int8)
        s = torch.rand(64, 1) * 0.01
        x = torch.randn(4, 256, dtype=torch.bfloat16)
        y0 = ck.int8_linear(x, w, s, None, torch.bfloat16)
        n0 = kitchen.cache.packs
        ck.int8_linear(x, w, s, None, torch.bfloat16)
        assert kitchen.cache.packs == n0                  # still packed once
        w.add_(1).clamp_(-127, 127)                        # a LoRA-style patch, in place
        y1 = ck.int8_linear(x, w, s, None, torch.bfloat16)
        assert kitchen.cache.packs == n0 + 1
        assert torch.equal(y1, _eager(x, w, s, None, torch.bfloat16)) and not torch.equal(y0, y1)
