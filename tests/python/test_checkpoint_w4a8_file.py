"""ComfyUI v0.30 W4A8 files (format asym_w4a8_int8) made with comfy-kitchen's own quantizer, run
by qmm's C reader through the CLI (`qmm inspect`, `qmm run`; SPEC §3, §11).

  FILE    AsymW4A8Int8Layout.quantize on random weights (4 bits with the frozen codebook, 4 bits
          uniform, 6 bits; s_rel fp8 e4m3 — also stored as uint8, the legacy form ComfyUI views
          back as fp8 — or fp32), the tensors under the keys QuantizedTensor.state_dict gives
          (L.weight, L.weight_s_rel, L.weight_s_channel, L.weight_codebook) with L.comfy_quant as
          ComfyUI's _quantized_weight_state_dict writes it and a bias, saved with safetensors.
  INSPECT qmm inspect --json reads every layer as w4a8 with the kitchen's bits, group and codebook.
  RUN     qmm run --epilogue kitchen against the kitchen's eager w4a8_int8_linear on the same
          tensors (out_dtype = x's dtype, as ComfyUI calls it), under SPEC §1a's rules as
          test_kitchen_w4a8.py states them: EXACT (bit-identical) where the activations' rotation
          is order-independent, else BOUND (exactness.linear_bound on the decoded weight, plus two
          output ulps of |eager| + |bias|).
Skips visibly when torch, comfy_kitchen, safetensors or the qmm CLI is missing.
"""
import json
import subprocess

import pytest

torch = pytest.importorskip("torch")
ck = pytest.importorskip("comfy_kitchen")
st = pytest.importorskip("safetensors.torch")

from comfy_kitchen.backends.eager import w4a8_int8 as E  # noqa: E402
from comfy_kitchen.tensor.base import QuantizedTensor  # noqa: E402
from comfy_kitchen.tensor.w4a8_int8 import AsymW4A8Int8Layout  # noqa: E402

from conftest import cli_or_skip  # noqa: E402
from exactness import linear_bound  # noqa: E402
from test_kitchen_parity import DT, check, exact_expected, row_scales  # noqa: E402

# name: (N, K, quantize kwargs, s_rel stored as uint8)
LAYERS = {
    "blocks.0.attn.qkv": (96, 512, dict(group_size=16, convrot_groupsize=256), False),
    "blocks.0.attn.out": (64, 256, dict(group_size=16, convrot_groupsize=64), True),
    "blocks.0.mlp.fc1": (80, 256, dict(group_size=8, convrot_groupsize=16, codebook=False), False),
    "blocks.0.mlp.fc2": (48, 256, dict(group_size=32, convrot_groupsize=64, bits=6, codebook=False), False),
    "blocks.0.mod": (40, 128, dict(group_size=16, convrot_groupsize=16, scale_dtype=torch.float32), False),
}


@pytest.fixture(scope="module")
def w4a8_file(tmp_path_factory):
    cli = cli_or_skip()
    torch.manual_seed(7)
    d = tmp_path_factory.mktemp("w4a8")
    sd, layers = {}, {}
    for name, (n, k, kw, as_u8) in LAYERS.items():
        qd, params = AsymW4A8Int8Layout.quantize(torch.randn(n, k), **kw)
        qt = QuantizedTensor(qd, "AsymW4A8Int8Layout", params)
        tensors = qt.state_dict(name + ".weight")
        if as_u8:
            tensors[name + ".weight_s_rel"] = tensors[name + ".weight_s_rel"].view(torch.uint8)
        sd.update(tensors)
        conf = {"format": "asym_w4a8_int8", "group_size": params.group_size,
                "convrot_groupsize": params.convrot_groupsize}
        sd[name + ".comfy_quant"] = torch.tensor(list(json.dumps(conf).encode("utf-8")), dtype=torch.uint8)
        bias = torch.randn(n)
        sd[name + ".bias"] = bias
        layers[name] = dict(qd=qd, s_rel=params.scale, s_ch=params.s_channel, cb=params.codebook,
                            gsz=params.group_size, gs=params.convrot_groupsize, bias=bias, n=n, k=k,
                            bits=kw.get("bits", 4))
    path = str(d / "w4a8.safetensors")
    st.save_file(sd, path)
    return cli, path, d, layers


def run_cli(cli, *args):
    p = subprocess.run([cli, *args], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, "qmm %s: exit %d\n%s%s" % (" ".join(args), p.returncode, p.stdout, p.stderr)
    return p


def test_inspect_kitchen_file(w4a8_file):
    cli, path, _, layers = w4a8_file
    info = json.loads(run_cli(cli, "inspect", path, "--json").stdout)
    got = {l["name"]: l for l in info["layers"]}
    assert set(got) == set(layers), sorted(got)
    for name, L in layers.items():
        g = got[name]
        assert g["kind"] == "w4a8" and g["format"] == "asym_w4a8_int8" and g["problem"] is None, g
        assert g["shape"] == [L["n"], L["k"]] and g["convrot_groupsize"] == L["gs"], g
        w = g["w4a8"]
        assert w["bits"] == L["bits"] and w["group_size"] == L["gsz"], (name, w)
        assert w["codebook"] == (L["cb"] is not None), (name, w)
        assert w["s_rel_dtype"] == ("F32" if L["s_rel"].dtype == torch.float32 else "F8_E4M3"), (name, w)
    assert info["totals"]["w4a8_layers"] == len(layers)


def eager(x, L):
    with ck.use_backend("eager"):
        return ck.w4a8_int8_linear(x, L["qd"], L["s_rel"], L["s_ch"], codebook=L["cb"], bias=L["bias"],
                                   group_size=L["gsz"], convrot_groupsize=L["gs"], out_dtype=x.dtype)


def qmm_run(cli, path, d, name, x, tag):
    xp, yp = str(d / ("x_%s.safetensors" % tag)), str(d / ("y_%s.safetensors" % tag))
    st.save_file({"x": x.contiguous()}, xp)
    p = run_cli(cli, "run", path, "--layer", name, "--input", xp, "--output", yp, "--epilogue", "kitchen")
    assert "W%dA8" % LAYERS[name][2].get("bits", 4) in p.stderr, p.stderr
    return st.load_file(yp)["output"], p.stderr.strip()


@pytest.mark.parametrize("name", sorted(LAYERS))
@pytest.mark.parametrize("x_dtype", ["f32", "bf16", "f16"])
@pytest.mark.parametrize("kind", ["exact", "random"])
def test_run_kitchen_file_against_eager(w4a8_file, name, x_dtype, kind):
    cli, path, d, layers = w4a8_file
    L = layers[name]
    dt = DT[x_dtype]
    M = 1 if kind == "exact" and x_dtype == "f16" else 9
    if kind == "exact":
        # small integers times a power of 2: the rotation is order-independent, the promise is bits
        x = (torch.randint(-8, 9, (M, L["k"])).float() * 0.25).to(dt)
    else:
        x = torch.randn(M, L["k"])
        x[:, 3] *= 40.0
        x = x.to(dt)
    y, ran = qmm_run(cli, path, d, name, x, "%s_%s_%s" % (name, x_dtype, kind))
    ye = eager(x, L)
    w8 = E._dequant_int4_grouped_to_int8(L["qd"], L["s_rel"], L["cb"], L["gsz"])
    exact = exact_expected(x, None, L["gs"])
    if kind == "exact":
        assert exact
    print(ran)
    check(y, ye, exact, row_scales(x, None, None, 0, L["gs"]), L["s_ch"],
          "qmm run %s %s (%s)" % (name, x_dtype, kind),
          rot=(linear_bound(x, L["gs"], w8, L["s_ch"]), L["bias"].to(dt).expand(M, -1)))
