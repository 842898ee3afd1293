"""qmm.dit — one video-DiT block in torch (SPEC §8), for the end-to-end test and the benchmark.

The block (pre-norm, gated residuals, as the video DiTs ComfyUI runs):
    h = rms_norm(x) · (1 + scale1) + shift1
    q, k, v = qkv_proj(h)                          [T, 3·H·hd] → 3 × [H, T, hd]
    x = x + gate1 · out_proj(attn(q, k, v))        residual fused into the linear where possible
    h = rms_norm(x) · (1 + scale2) + shift2
    x = x + gate2 · fc2(swiglu(fc1(h)))            swiglu fused into fc2 (input_act)
attn is the attention ComfyUI runs on a CPU (comfy/ldm/modules/attention.py picks
attention_sub_quad for a CPU device: with the memory to spare, the whole key/value length in one
chunk and queries in chunks of 4096 — scores by baddbmm, softmax, then bmm; sub_quad() here), or
torch's scaled_dot_product_attention (attention="sdpa"; "sdpa_bf16": in bf16, cast from and back to
the block's dtype), or qmm's (attention="qmm": qmm.attention in the ComfyUI node's default mode).
Its four linears are layers of one of three kinds:
    KitchenInt8Linear  a ComfyUI INT8 layer: comfy-kitchen's TensorWiseINT8Layout weight, run
                       through the kitchen's dispatch (eager, or qmm once registered);
    TorchLinear        a float weight run by torch (F.linear) — the bf16/fp32 baselines.
Shapes (full width): hidden 5376, 56 heads × 128, FFN 14336: qkv_proj [21504, 5376],
out_proj [5376, 7168], fc1 [28672, 5376], fc2 [5376, 14336] on swiglu(28672).
"""
import json
import time

import torch
import torch.nn.functional as F

LAYERS = ("attn.qkv_proj", "attn.out_proj", "mlp.fc1", "mlp.fc2")


def shapes(hidden=5376, heads=56, head_dim=128, ffn=14336):
    """{layer: (N, K)} of one block."""
    a = heads * head_dim
    return {"attn.qkv_proj": (3 * a, hidden), "attn.out_proj": (hidden, a),
            "mlp.fc1": (2 * ffn, hidden), "mlp.fc2": (hidden, ffn)}


class Timer:
    """Accumulates the wall time spent inside the linears (torch CPU ops are synchronous)."""

    def __init__(self):
        self.linear_s = 0.0

    def wrap(self, fn, *a, **kw):
        t = time.perf_counter()
        y = fn(*a, **kw)
        self.linear_s += time.perf_counter() - t
        return y


class KitchenInt8Linear:
    """A ComfyUI INT8 layer (int8_tensorwise, optional ConvRot) over comfy-kitchen."""

    def __init__(self, qdata, scale, bias=None, convrot=False, groupsize=256,
                 orig_dtype=torch.bfloat16):
        from comfy_kitchen.tensor.base import QuantizedTensor
        from comfy_kitchen.tensor.int8 import TensorWiseINT8Layout
        self.layout = TensorWiseINT8Layout
        params = TensorWiseINT8Layout.Params(scale=scale, orig_dtype=orig_dtype,
                                             orig_shape=tuple(qdata.shape), convrot=convrot,
                                             convrot_groupsize=groupsize)
        self.weight = QuantizedTensor(qdata, "TensorWiseINT8Layout", params)
        self.bias = bias

    def __call__(self, x, input_act=None, residual=None, residual_scale=None):
        if input_act is None and residual is None:
            return F.linear(x, self.weight, self.bias)
        return self.layout.linear_input_act(self.weight, x, self.bias, input_act=input_act,
                                            residual=residual, residual_scale=residual_scale)


class TorchLinear:
    """A float layer run by torch (the baselines); the same fusions, done unfused."""

    def __init__(self, weight, bias=None):
        self.weight, self.bias = weight, bias

    def __call__(self, x, input_act=None, residual=None, residual_scale=None):
        if input_act == "swiglu":
            gate, up = x.chunk(2, dim=-1)
            x = F.silu(gate) * up
        y = F.linear(x, self.weight, self.bias)
        if residual is not None:
            y = torch.addcmul(residual, y, residual_scale.to(y.dtype))
        return y


def sub_quad(q, k, v, query_chunk=4096):
    """Attention as ComfyUI's attention_sub_quad computes it on a CPU with memory to spare:
    q, k, v [B, H, T, hd] → [B, H, T, hd]; per chunk of query_chunk queries, scores =
    baddbmm(q, kᵀ, alpha=hd^-0.5), softmax over all keys, then bmm with v."""
    B, H, T, hd = q.shape
    q3, k3, v3 = q.reshape(B * H, T, hd), k.reshape(B * H, -1, hd), v.reshape(B * H, -1, hd)
    kt = k3.transpose(1, 2)
    out = torch.empty_like(q3)
    for i in range(0, T, query_chunk):
        qc = q3[:, i:i + query_chunk]
        s = torch.baddbmm(torch.empty(qc.shape[0], qc.shape[1], kt.shape[2], dtype=q.dtype),
                          qc, kt, beta=0, alpha=hd ** -0.5)
        p = s.softmax(dim=-1)
        del s
        torch.bmm(p, v3, out=out[:, i:i + query_chunk])
    return out.reshape(B, H, T, hd)


def qmm_attention(q, k, v):
    """qmm.attention (SPEC §10) in the ComfyUI node's default mode (int8 where an int8 engine runs
    it, else best: qmm.comfy.attention) writing [B, T, H·hd] directly: returned as its
    [B, H, T, hd] view, so the block's transpose + reshape back is free."""
    import qmm
    from qmm.comfy import attention as comfy_attention
    B, H, T, hd = q.shape
    y = torch.empty(B, T, H * hd, dtype=q.dtype)
    mode = "int8" if comfy_attention.int8_attention_here() else "best"
    return qmm.attention(q, k, v, mode=mode, out=y.view(B, T, H, hd).transpose(1, 2))


def sdpa_bf16(q, k, v):
    """torch's SDPA in bf16 for f32 tensors: the casts there and back included."""
    return F.scaled_dot_product_attention(q.bfloat16(), k.bfloat16(), v.bfloat16()).to(q.dtype)


ATTENTION = {"sub_quad": sub_quad, "sdpa": F.scaled_dot_product_attention, "qmm": qmm_attention,
             "sdpa_bf16": sdpa_bf16}


class Block:
    """The DiT block above over four layers {name: layer}; mod holds the modulation vectors."""

    def __init__(self, layers, hidden, heads, head_dim, dtype, seed=0, attention="sub_quad"):
        self.layers, self.hidden, self.heads, self.head_dim = layers, hidden, heads, head_dim
        self.attention = ATTENTION[attention]
        g = torch.Generator().manual_seed(seed)

        def vec(s=0.1, base=0.0):
            return (torch.randn(hidden, generator=g) * s + base).to(dtype)

        self.norm1, self.norm2 = vec(0.1, 1.0), vec(0.1, 1.0)
        self.scale1, self.shift1, self.gate1 = vec(), vec(), vec(0.1, 0.5)
        self.scale2, self.shift2, self.gate2 = vec(), vec(), vec(0.1, 0.5)
        self.timer = Timer()

    def __call__(self, x):
        L, t = self.layers, self.timer
        T = x.shape[-2]
        h = F.rms_norm(x, (self.hidden,), self.norm1, 1e-6) * (1 + self.scale1) + self.shift1
        qkv = t.wrap(L["attn.qkv_proj"], h)
        q, k, v = qkv.reshape(-1, T, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        a = self.attention(q, k, v)
        a = a.transpose(1, 2).reshape(-1, T, self.heads * self.head_dim)
        x = t.wrap(L["attn.out_proj"], a, residual=x, residual_scale=self.gate1)
        h = F.rms_norm(x, (self.hidden,), self.norm2, 1e-6) * (1 + self.scale2) + self.shift2
        u = t.wrap(L["mlp.fc1"], h)
        return t.wrap(L["mlp.fc2"], u, input_act="swiglu", residual=x, residual_scale=self.gate2)


def load_int8_layers(path, prefix="blocks.0."):
    """The block's layers from a ComfyUI INT8 checkpoint (L.weight I8, L.weight_scale,
    L.comfy_quant JSON, optional L.bias), as KitchenInt8Linear layers."""
    from safetensors.torch import load_file
    sd = load_file(path)
    layers = {}
    for name in LAYERS:
        L = prefix + name
        cq = json.loads(bytes(sd[L + ".comfy_quant"].tolist()).decode())
        cq = cq.get("params", cq) | {k: v for k, v in cq.items() if k != "params"}
        if cq.get("format") != "int8_tensorwise":
            raise ValueError("layer %s: format %s is not int8_tensorwise" % (L, cq.get("format")))
        convrot = bool(cq.get("convrot", False))
        layers[name] = KitchenInt8Linear(sd[L + ".weight"], sd[L + ".weight_scale"],
                                         sd.get(L + ".bias"), convrot,
                                         int(cq.get("convrot_groupsize", 256)))
    return layers
