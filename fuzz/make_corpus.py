#!/usr/bin/env python3
"""make_corpus.py — regenerates the small committed seed corpus of the fuzz targets:
fuzz/corpus/safetensors/ (valid files of every dtype and each malformed class) and
fuzz/corpus/checkpoint/ (ComfyUI INT8 layers: every scale shape, convrot variants, the
_quantization_metadata alternative, unsupported formats and each broken-layer class; W4A8
(asym_w4a8_int8) layers of 4 and 6 bits, each s_rel dtype, and each broken W4A8 class).
Python standard library only. Usage: python3 fuzz/make_corpus.py (from the repository root)."""
import json, os, struct

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
SIZES = {"BOOL": 1, "U8": 1, "I8": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4,
         "F64": 8, "I64": 8, "U64": 8, "F8_E4M3": 1, "F8_E5M2": 1}


def build(tensors, metadata=None, raw_header=None, fake_len=None, cut=0, pad=True):
    """tensors: list of (name, dtype, shape, bytes) → safetensors bytes."""
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dt, shape, b in tensors:
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [len(data), len(data) + len(b)]}
        data += b
    h = raw_header if raw_header is not None else json.dumps(header, separators=(",", ":")).encode()
    if pad and raw_header is None:
        h += b" " * (-len(h) % 8)
    out = struct.pack("<Q", fake_len if fake_len is not None else len(h)) + h + data
    return out[: len(out) - cut] if cut else out


def t(name, dt, shape, fill=1):
    n = 1
    for s in shape:
        n *= s
    return (name, dt, shape, bytes((fill * 7 + i * 13) % 256 for i in range(n * SIZES[dt])))


def f32(vals):
    return struct.pack("<%df" % len(vals), *vals)


def layer(L, N, K, cq, scale_shape=None, bias=False, wdt="I8"):
    out = [t(L + ".weight", wdt, [N, K])]
    if scale_shape is not None:
        n = 1
        for s in scale_shape:
            n *= s
        out.append((L + ".weight_scale", "F32", scale_shape, f32([0.01 * (i + 1) for i in range(n)])))
    if bias:
        out.append(t(L + ".bias", "F16", [N]))
    if cq is not None:
        b = cq if isinstance(cq, bytes) else json.dumps(cq).encode()
        out.append((L + ".comfy_quant", "U8", [len(b)], b))
    return out


def w4a8_layer(L, N, K, cq, bits=4, gsz=16, srel="F8_E4M3", codebook=True, bias=False, drop=(), extra=()):
    """An asym_w4a8_int8 layer (SPEC §3, §11): codes [N, K*bits/8], s_rel [N, K/gsz] of dtype srel
    (finite e4m3 bytes 0x30..0x3f, or F32), s_channel F32 [N], optional codebook F32 [16]."""
    G = K // gsz
    sr = (bytes(0x30 + (i % 16) for i in range(N * G)) if srel != "F32"
          else f32([0.5 + 0.125 * (i % 8) for i in range(N * G)]))
    out = [t(L + ".weight", "I8", [N, K * bits // 8]), (L + ".weight_s_rel", srel, [N, G], sr),
           (L + ".weight_s_channel", "F32", [N], f32([0.01 * (i + 1) for i in range(N)]))]
    if codebook:
        out.append((L + ".weight_codebook", "F32", [16], f32([(i - 7.5) / 8 for i in range(16)])))
    if bias:
        out.append(t(L + ".bias", "F16", [N]))
    out = [x for x in out if not any(x[0].endswith(d) for d in drop)] + list(extra)
    if cq is not None:
        b = cq if isinstance(cq, bytes) else json.dumps(cq).encode()
        out.append((L + ".comfy_quant", "U8", [len(b)], b))
    return out


def write(sub, name, blob):
    d = os.path.join(ROOT, sub)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(blob)


def main():
    S = "safetensors"
    write(S, "valid_all_dtypes", build([t("t_" + dt.lower(), dt, [2, 3]) for dt in SIZES], {"format": "pt"}))
    write(S, "valid_scalar_empty", build([t("s", "F32", []), t("e", "F32", [0, 4]), t("v", "I8", [5])]))
    write(S, "valid_empty_header", build([]))
    write(S, "valid_unpadded", build([t("a", "U8", [3])], pad=False))
    write(S, "valid_gap", build([], raw_header=b'{"a":{"dtype":"U8","shape":[2],"data_offsets":[4,6]}}') + b"\0" * 8)
    write(S, "bad_truncated_5", b"\x10\0\0\0\0")
    write(S, "bad_truncated_data", build([t("a", "F32", [4, 4])], cut=7))
    write(S, "bad_header_beyond_file", build([t("a", "F32", [2])], fake_len=1 << 20))
    write(S, "bad_header_over_limit", build([t("a", "F32", [2])], fake_len=(100 << 20) + 8))
    write(S, "bad_overlap", build([], raw_header=b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},'
                                                 b'"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}') + b"\0" * 8)
    write(S, "bad_offset_past_end", build([], raw_header=b'{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}') + b"\0" * 8)
    write(S, "bad_count_mismatch", build([], raw_header=b'{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}') + b"\0" * 8)
    write(S, "bad_unknown_dtype", build([], raw_header=b'{"a":{"dtype":"F128","shape":[1],"data_offsets":[0,16]}}') + b"\0" * 16)
    write(S, "bad_json", build([], raw_header=b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}') + b"\0" * 4)
    write(S, "bad_utf8", build([], raw_header=b'{"\xed\xa0\x80":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}') + b"\0")
    write(S, "bad_shape_overflow", build([], raw_header=b'{"a":{"dtype":"F64","shape":[4294967296,4294967296,4],'
                                                        b'"data_offsets":[0,8]}}') + b"\0" * 8)
    write(S, "bad_metadata_type", build([], raw_header=b'{"__metadata__":{"k":[1]}}'))
    write(S, "bad_nul_in_header", build([], raw_header=b'{"a\0":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}') + b"\0")
    # what json-c accepts and the reference reader (serde_json) refuses: duplicate keys, lone
    # surrogates; and U+0000 where qmm's C strings would cut the text short
    U8 = b'{"dtype":"U8","shape":[1],"data_offsets":[0,1]}'
    write(S, "bad_duplicate_tensor", build([], raw_header=b'{"a":' + U8 + b',"a":' + U8 + b'}') + b"\0")
    write(S, "bad_duplicate_tensor_escaped", build([], raw_header=b'{"a":' + U8 + b',"\\u0061":' + U8 + b'}') + b"\0")
    write(S, "bad_duplicate_metadata", build([], raw_header=b'{"__metadata__":{"x":"1"},"__metadata__":{"y":"2"},"a":'
                                                           + U8 + b'}') + b"\0")
    write(S, "bad_duplicate_field", build([], raw_header=b'{"a":{"dtype":"U8","dtype":"U8","shape":[1],'
                                                        b'"data_offsets":[0,1]}}') + b"\0")
    write(S, "bad_dtype_nul", build([], raw_header=b'{"a":{"dtype":"F32\\u0000junk","shape":[1],"data_offsets":[0,4]}}')
          + b"\0" * 4)
    write(S, "bad_name_nul", build([], raw_header=b'{"a\\u0000b":' + U8 + b'}') + b"\0")
    write(S, "bad_lone_low_surrogate", build([], raw_header=b'{"\\udc00":' + U8 + b'}') + b"\0")
    write(S, "bad_lone_high_surrogate", build([], raw_header=b'{"\\ud800x":' + U8 + b'}') + b"\0")
    write(S, "bad_metadata_value_nul", build([], raw_header=b'{"__metadata__":{"k":"a\\u0000b"},"a":' + U8 + b'}') + b"\0")
    write(S, "valid_surrogate_pair", build([], raw_header=b'{"\\ud83d\\ude00":' + U8 + b'}') + b"\0")

    C = "checkpoint"
    tw = {"format": "int8_tensorwise"}
    cr = {"format": "int8_tensorwise", "convrot": True, "convrot_groupsize": 16}
    write(C, "int8_scale_n1", build(layer("blocks.0.attn.qkv_proj", 16, 32, cr, [16, 1], bias=True)))
    write(C, "int8_scale_n", build(layer("blocks.0.mlp.fc1", 8, 16, tw, [8])))
    write(C, "int8_scale_1", build(layer("a.b", 4, 16, {"format": "int8_tensorwise", "params": {"convrot": True,
                                                                                                "convrot_groupsize": 16}}, [1])))
    write(C, "int8_scale_scalar", build(layer("x", 4, 256, {"format": "int8_tensorwise", "convrot": True,
                                                            "full_precision_matrix_mult": True}, [])))
    write(C, "int8_quant_metadata", build(layer("q", 8, 64, None, [8, 1]),
                                          {"_quantization_metadata": json.dumps(
                                              {"format_version": "1.0", "layers": {"q": {"format": "int8_tensorwise",
                                                                                         "convrot": True,
                                                                                         "convrot_groupsize": 64}}})}))
    write(C, "float_layers", build([t("f.weight", "F32", [4, 8]), t("f.bias", "F32", [4]), t("g.weight", "BF16", [4, 8]),
                                    t("h.weight", "F16", [2, 8]), t("n.weight", "F32", [8])]))
    write(C, "mixed", build(layer("l0", 16, 64, cr, [16, 1]) + layer("l1", 16, 64, {"format": "nvfp4"}, None, wdt="U8")
                            + [t("l2.weight", "BF16", [16, 64])]))
    write(C, "unsupported_float8", build(layer("blocks.0.attn.out_proj", 8, 16, {"format": "float8_e4m3fn"}, [],
                                               wdt="F8_E4M3")))
    write(C, "bad_missing_scale", build(layer("a", 4, 16, tw, None)))
    write(C, "bad_scale_shape", build(layer("a", 4, 16, tw, [4, 2])))
    write(C, "bad_comfy_quant_not_json", build(layer("a", 4, 16, b'{"format": int8', [4, 1])))
    write(C, "bad_comfy_quant_array", build(layer("a", 4, 16, b'["int8_tensorwise"]', [4, 1])))
    write(C, "bad_k_not_multiple", build(layer("a", 4, 24, {"format": "int8_tensorwise", "convrot": True}, [4, 1])))
    write(C, "bad_group_32", build(layer("a", 4, 64, {"format": "int8_tensorwise", "convrot": True,
                                                      "convrot_groupsize": 32}, [4, 1])))
    write(C, "bad_weight_dtype", build(layer("a", 4, 16, tw, [4, 1], wdt="F16")))
    write(C, "bad_missing_weight", build([(n, d, s, b) for (n, d, s, b) in layer("a", 4, 16, tw, [4, 1])
                                          if not n.endswith(".weight")]))
    write(C, "bad_quant_metadata", build(layer("q", 8, 64, None, [8, 1]), {"_quantization_metadata": "{layers"}))
    write(C, "bad_comfy_quant_duplicate_key", build(layer("a", 4, 16, b'{"format": "nvfp4", "format": "int8_tensorwise"}',
                                                          [4, 1])))

    # asym_w4a8_int8 (comfy-kitchen's AsymW4A8Int8Layout, the keys ComfyUI v0.30 reads); a NaN s_rel
    # opens (its values are checked when the layer is packed): not a bad_ file
    w4 = {"format": "asym_w4a8_int8", "group_size": 16, "convrot_groupsize": 16}
    write(C, "w4a8_g16_codebook", build(w4a8_layer("blocks.0.mlp.fc1", 16, 64, w4, bias=True)))
    write(C, "w4a8_u8_srel_g4", build(w4a8_layer("a", 8, 64, {"format": "asym_w4a8_int8", "group_size": 4,
                                                              "convrot_groupsize": 64, "bits": 4}, gsz=4, srel="U8",
                                                 codebook=False)))
    write(C, "w4a8_f32_srel_params", build(w4a8_layer("a", 4, 32, {"format": "asym_w4a8_int8", "params": {
        "group_size": 8, "convrot_groupsize": 16}}, gsz=8, srel="F32")))
    write(C, "w6a8_g32", build(w4a8_layer("a", 8, 64, {"format": "asym_w4a8_int8", "group_size": 32,
                                                       "convrot_groupsize": 16}, bits=6, gsz=32, codebook=False)))
    write(C, "w4a8_quant_metadata", build(w4a8_layer("q", 8, 64, None),
                                          {"_quantization_metadata": json.dumps(
                                              {"format_version": "1.0", "layers": {"q": w4}})}))
    write(C, "w4a8_mixed_int8", build(w4a8_layer("l0", 16, 64, w4) + layer("l1", 16, 64, cr, [16, 1])))
    write(C, "bad_w4a8_width", build(w4a8_layer("a", 4, 64, w4, drop=(".weight",), extra=[t("a.weight", "I8", [4, 24])])))
    write(C, "bad_w4a8_group_12", build(w4a8_layer("a", 4, 48, {"format": "asym_w4a8_int8", "group_size": 12,
                                                                "convrot_groupsize": 16}, gsz=12)))
    write(C, "bad_w4a8_codebook_8", build(w4a8_layer("a", 4, 64, w4, codebook=False,
                                                     extra=[("a.weight_codebook", "F32", [8], f32([0.0] * 8))])))
    write(C, "w4a8_value_nan_s_rel", build(w4a8_layer("a", 4, 64, w4, drop=(".weight_s_rel",),
                                                    extra=[("a.weight_s_rel", "F8_E4M3", [4, 4], b"\x38" * 15 + b"\x7f")])))
    write(C, "bad_w4a8_missing_s_channel", build(w4a8_layer("a", 4, 64, w4, drop=(".weight_s_channel",))))
    write(C, "bad_w4a8_correction", build(w4a8_layer("a", 4, 64, w4, extra=[t("a.weight_correction", "F32", [4, 4])])))
    write(C, "bad_w6a8_codebook", build(w4a8_layer("a", 4, 64, {"format": "asym_w4a8_int8", "group_size": 16,
                                                                "convrot_groupsize": 16}, bits=6)))
    write(C, "bad_w4a8_bits_6", build(w4a8_layer("a", 4, 64, dict(w4, bits=6))))


if __name__ == "__main__":
    main()
