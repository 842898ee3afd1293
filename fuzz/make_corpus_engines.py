#!/usr/bin/env python3
"""make_corpus_engines.py — writes the seed corpus of fuzz_engines (fuzz/corpus/engines/), in the
input layout documented at the top of fuzz/fuzz_engines.c: small layers over every dtype, act,
convrot group, bias and scale layout, with special values (NaN with payloads, +-Inf, -0,
denormals, +-3e38) in x, the scales and the bias. Deterministic (fixed seed); standard library
only. Usage: python3 fuzz/make_corpus_engines.py [OUT_DIR]"""
import os
import random
import sys

NAN, NNAN, PINF, NINF, NZERO, DENORM, HUGE, ZERO = range(8)


def header(N, gs_idx, kmul, M, act, xt, yt, bias, bt, per_tensor, keep128=0, pad=0):
    """gs_idx: 0 none (K = 1 + kmul), 1 none (K = 65 + 3 kmul), 2 -> 16, 3 -> 64 (K = gs * (1 + kmul % 3)).
    pad: ldx padding (bits 0-1), ldy padding (2-3), the borrowed twin's extra row stride / 3 (4-5),
    M up to 80 (bit 6), the borrowed base 1 byte off alignment (bit 7)."""
    h0 = N - 1
    h1 = (gs_idx & 3) | (kmul << 2)
    h2 = M - 1
    h3 = act + 3 * xt
    h4 = yt | (4 if bias else 0) | (bt << 3) | (32 if per_tensor else 0) | (64 if keep128 else 0)
    return bytes([h0 & 255, h1 & 255, h2 & 255, h3, h4, pad & 255])


def shape(N, gs_idx, kmul, M, act, per_tensor):
    gs = [0, 0, 16, 64][gs_idx]
    K = gs * (1 + kmul % 3) if gs else 65 + 3 * kmul if gs_idx == 1 else 1 + kmul
    kin = 2 * K if act == 1 else K
    return K, kin, (1 if per_tensor else N)


def val(rng, special=None):
    if special is not None:
        return bytes([special, rng.randrange(256)])
    return bytes([rng.randrange(16, 256), rng.randrange(256)])


def case(rng, N, gs_idx, kmul, M, act, xt, yt, bias, bt, per_tensor, keep128=0, pad=0, x_special=None,
         scale_special=None, bias_special=None):
    """x_special / scale_special / bias_special: {index: kind} of special values."""
    K, kin, ns = shape(N, gs_idx, kmul, M, act, per_tensor)
    b = bytearray(header(N, gs_idx, kmul, M, act, xt, yt, bias, bt, per_tensor, keep128, pad))
    b += bytes(rng.randrange(256) for _ in range(N * K))
    for i in range(ns):
        b += val(rng, (scale_special or {}).get(i))
    for i in range(N):
        b += val(rng, (bias_special or {}).get(i))
    for i in range(M * kin):
        b += val(rng, (x_special or {}).get(i))
    return bytes(b)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus", "engines")
    os.makedirs(out, exist_ok=True)
    rng = random.Random(13)
    c = {}
    # issue 13 item 7: a row holding +Inf (its token scale is Inf) and NaN biases with a payload,
    # M = 1 (single-row kernels) and M = 8 / 16 (tiles), every float out dtype
    for M in (1, 8, 16):
        for yt in (1, 2, 3):
            c["nan_bias_inf_row_m%d_y%d" % (M, yt)] = case(
                rng, 16, 0, 31, M, 0, 0, yt, 1, 0, 0, x_special={3: PINF},
                bias_special={i: NAN for i in range(0, 16, 2)})
    # non-finite / zero / negative weight scales, per row
    c["scales_nonfinite"] = case(rng, 9, 0, 20, 5, 0, 1, 1, 1, 2, 0,
                                 scale_special={0: NAN, 1: PINF, 2: NINF, 3: ZERO, 4: NZERO, 5: DENORM, 6: HUGE})
    c["scale_tensor_inf"] = case(rng, 7, 0, 10, 3, 0, 2, 3, 0, 0, 1, scale_special={0: PINF})
    # x specials in every position class, every x dtype, with and without act
    for xt in range(3):
        for act in range(3):
            specials = {0: NAN, 5: NNAN, 9: PINF, 13: NINF, 17: NZERO, 21: DENORM, 25: HUGE}
            c["x_specials_x%d_act%d" % (xt, act)] = case(rng, 5 + xt, 2 if act == 2 else 0, 7, 4 + act, act, xt,
                                                         (xt + act) % 4, act != 1, xt, act == 0, x_special=specials)
    # convrot 16 / 64 with NaN and Inf rows, i32 output, strided x and y
    c["gs16_i32_pad"] = case(rng, 12, 2, 1, 6, 0, 0, 0, 0, 0, 0, pad=0x0f, x_special={40: NAN, 70: PINF})
    c["gs64_swiglu_bf16"] = case(rng, 20, 3, 0, 9, 1, 2, 3, 1, 2, 0, pad=0x05, x_special={10: NINF})
    # plain cases (no specials), larger M and N, weights holding -128 (an engine may refuse them)
    c["plain_m20_n40"] = case(rng, 40, 0, 63, 20, 0, 0, 1, 1, 0, 0)
    c["plain_keep128"] = case(rng, 17, 0, 40, 3, 2, 1, 2, 1, 1, 1, keep128=1)
    c["huge_values"] = case(rng, 8, 0, 15, 2, 0, 0, 1, 1, 0, 0, x_special={i: HUGE for i in range(16)},
                            bias_special={0: HUGE, 1: NINF})
    # borrowed twins at row stride ld > K from an unaligned base, M across the regimes (1: rows
    # kernels and decode; 7, 17, 33: decode / panel; 64, 80: several row tiles and tasks), K tails
    # past one 64-byte k-step (K = 65 + 3 kmul) and several K chunks, every y dtype
    for i, (M, gs_idx, kmul) in enumerate([(1, 1, 0), (7, 1, 20), (17, 0, 40), (33, 1, 63), (64, 3, 2), (80, 1, 5),
                                           (48, 2, 1), (2, 1, 1)]):
        pad = 0x80 * (i % 2) | (((i % 3) + 1) << 4) | (0x40 if M > 20 else 0) | (i & 3) | ((i >> 1 & 3) << 2)
        c["borrowed_ld_m%d_k%d" % (M, shape(1, gs_idx, kmul, M, 0, 0)[0])] = case(
            rng, 1 + (i * 11) % 40, gs_idx, kmul, M, i % 3, i % 3, i % 4, i % 2, i % 3, i % 2, pad=pad,
            x_special={5: NAN} if i == 3 else None)
    c["empty"] = b""
    for name, data in sorted(c.items()):
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
    print("wrote %d files to %s" % (len(c), out))


if __name__ == "__main__":
    main()
