"""End to end: a DiT block (qmm.dit: SPEC §8 layer shapes at reduced width, SDPA, RMS norms,
SwiGLU MLP, gated residuals) whose four linears are ComfyUI INT8 layers loaded from a checkpoint
written by `qmm quantize` (ConvRot groups chosen per layer: 64 and 256), run by the kitchen's
eager backend and by qmm.

Promise: the block outputs of qmm and eager are bit-identical when every linear is (SPEC §1a), and
otherwise differ by far less than either differs from the float block: here the linears take bf16
activations with outlier channels under ConvRot, and the MLP's swiglu, which are BOUND cases of
test_kitchen_parity.py on any CPU, so the test asserts |qmm - eager| <= 1/8 of |qmm - fp32|
(Frobenius), for each torch rotation order (exactness.TORCH_ORDERS), and prints how many outputs
are identical. Quality against the fp32 block on the unquantized weights is reported and bounded
(rel. error < 5%)."""
import subprocess

import pytest
import torch
from safetensors.torch import save_file

import comfy_kitchen as ck

import qmm
from qmm import dit

from conftest import cli_or_skip
from exactness import TORCH_ORDERS, use_torch_order

HIDDEN, HEADS, HEAD_DIM, FFN, T = 384, 4, 128, 1024, 96


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    cli = cli_or_skip()
    d = tmp_path_factory.mktemp("ckpt")
    g = torch.Generator().manual_seed(7)
    sd = {}
    for name, (N, K) in dit.shapes(HIDDEN, HEADS, HEAD_DIM, FFN).items():
        w = torch.randn(N, K, generator=g) / K ** 0.5
        w[:, 3] *= 8.0                                   # outlier input channels
        sd["blocks.0.%s.weight" % name] = w.to(torch.bfloat16)
    sd["blocks.0.norm1.weight"] = torch.ones(HIDDEN, dtype=torch.bfloat16)
    src, out = d / "float.safetensors", d / "int8.safetensors"
    save_file(sd, str(src))
    r = subprocess.run([cli, "quantize", str(src), str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return out, sd


@pytest.mark.parametrize("order", TORCH_ORDERS)
def test_block_eager_vs_qmm(kitchen, monkeypatch, checkpoint, order):
    use_torch_order(monkeypatch, order)
    path, float_sd = checkpoint
    layers = dit.load_int8_layers(str(path))
    gs = {n: l.weight._params.convrot_groupsize for n, l in layers.items()}
    assert gs == {"attn.qkv_proj": 64, "attn.out_proj": 256, "mlp.fc1": 64, "mlp.fc2": 256}
    block = dit.Block(layers, HIDDEN, HEADS, HEAD_DIM, torch.bfloat16)
    x = torch.randn(1, T, HIDDEN)
    x[..., 11] *= 20.0
    x = x.to(torch.bfloat16)
    qmm.reset_counters()
    y = block(x)
    c = qmm.counters()["linear"]
    assert sum(c["calls"].values()) == 4 and c["fallbacks"] == 0, c
    with ck.use_backend("eager"):
        ye = block(x)
    d = (y.float() - ye.float()).abs()

    ref_layers = {n: dit.TorchLinear(float_sd["blocks.0.%s.weight" % n].float())
                  for n in dit.LAYERS}
    ref = dit.Block(ref_layers, HIDDEN, HEADS, HEAD_DIM, torch.float32)
    yr = ref(x.float())
    rel = ((y.float() - yr).norm() / yr.norm()).item()
    cos = torch.nn.functional.cosine_similarity(y.float().reshape(-1), yr.reshape(-1), 0).item()
    print("block INT8 (qmm) vs fp32 on the unquantized weights: rel. error %.3g, cosine %.6f" % (
        rel, cos))
    assert rel < 5e-2 and cos > 0.998
    rel_eager = (d.norm() / yr.norm()).item()
    print("block qmm vs eager (%s): max|diff| %g, rel. %.3g (%.3g of the quantization error), "
          "identical %.4f%%" % (order, d.max().item(), rel_eager, rel_eager / rel,
                                100 * (d == 0).float().mean().item()))
    assert rel_eager <= rel / 8
