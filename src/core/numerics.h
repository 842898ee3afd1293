/*
 * numerics.h — the scalar definitions of every number qmm computes (SPEC §1, §2), used by the
 * reference engine and the float conversions of the whole library, and mirrored operation by
 * operation by the SIMD pre-passes and epilogues so that every int8 engine produces the same
 * bits as the reference:
 *
 *   conversions   f32 ↔ bf16 / f16, round-to-nearest-even, NaN stays NaN (quiet), ±Inf stays.
 *   exp           qmm_expf: range reduction + degree-6 polynomial with fmaf, ≤ 2 ulp on
 *                 [-87.3, 88.7]; below → 0, above → +Inf. Written to be reproduced exactly with
 *                 FMA vector instructions (no libm, so every engine gets the same bits).
 *   activations   sigmoid-form: silu(g) = g / (1 + exp(-g));
 *                 gelu_tanh(x) = x / (1 + exp(-2u)), u = sqrt(2/pi) * (x + 0.044715 x^3)
 *                 (= 0.5 x (1 + tanh u)); swiglu a = T(T(silu(gate)) * up).
 *   rotation      regular Hadamard H_g, radix-4 butterflies at strides 1, 4, 16, 64:
 *                 p = x0 + x1, q = x2 - x3, r = x0 - x1, t = x2 + x3;
 *                 y0 = p + q, y1 = p - q, y2 = r + t, y3 = t - r;
 *                 then × 1/sqrt(g) (exact: 1/4, 1/8, 1/16), then rounded to T.
 *   quantization  amax propagates NaN; s = amax/127 in fp32, max(s, 1e-30) (NaN stays NaN);
 *                 q = clamp(rne_int(T(a / T(s))), -128, 127), with NaN → 0; T(s) that underflows
 *                 to 0 (f16) is replaced by T's smallest normal (qmm_quant_divisor) (so a row holding
 *                 NaN or Inf gets a non-finite scale and an all-NaN output row).
 *   epilogue      fused (SPEC §1 step 5): y = out(((float)acc * s_r) * w_scale[n] + bias[n]) — three
 *                 fp32 operations in this order, no FMA contraction (the library builds with
 *                 -ffp-contract=off);
 *                 kitchen (SPEC §1a): y = out((float)acc * (s_r * w_scale[n])), then with a bias
 *                 y = out(y + out(bias[n]));
 *                 residual (either form): y = out(fmaf(y, residual_scale[n], residual[r][n])) —
 *                 torch.addcmul in the output dtype (exact product for bf16/f16, one fma for f32).
 */
#ifndef QMM_NUMERICS_H
#define QMM_NUMERICS_H

#include "qmm.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* ---------------------------------------------------------------- conversions */
static inline uint32_t qmm_f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float qmm_bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static inline uint16_t qmm_f32_to_bf16(float f) {
    uint32_t u = qmm_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static inline float qmm_bf16_to_f32(uint16_t h) { return qmm_bits_f32((uint32_t)h << 16); }

uint16_t qmm_f32_to_f16(float f);
static inline float qmm_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1f) return qmm_bits_f32(sign | 0x7f800000u | (m << 13));
    if (e == 0) {
        /* subnormal: m * 2^-24, exact in fp32 */
        float v = (float)m * 5.9604644775390625e-08f;
        return sign ? -v : v;
    }
    return qmm_bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

/* Value of element i of a float array of dtype t (F32, F16, BF16). */
static inline float qmm_load_f(const void *p, qmm_dtype t, int64_t i) {
    switch (t) {
    case QMM_F16: return qmm_f16_to_f32(((const uint16_t *)p)[i]);
    case QMM_BF16: return qmm_bf16_to_f32(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}
static inline void qmm_store_f(void *p, qmm_dtype t, int64_t i, float v) {
    switch (t) {
    case QMM_F16: ((uint16_t *)p)[i] = qmm_f32_to_f16(v); break;
    case QMM_BF16: ((uint16_t *)p)[i] = qmm_f32_to_bf16(v); break;
    default: ((float *)p)[i] = v; break;
    }
}
/* v rounded to dtype t (identity for F32). */
static inline float qmm_round_to(float v, qmm_dtype t) {
    switch (t) {
    case QMM_F16: return qmm_f16_to_f32(qmm_f32_to_f16(v));
    case QMM_BF16: return qmm_bf16_to_f32(qmm_f32_to_bf16(v));
    default: return v;
    }
}

/* ---------------------------------------------------------------- exp and activations */
#define QMM_EXP_LO (-87.3f)
#define QMM_EXP_HI (88.7f)
float qmm_expf(float x);
static inline float qmm_silu(float g) { return g / (1.0f + qmm_expf(-g)); }
static inline float qmm_gelu_tanh(float x) {
    const float k0 = 0.7978845608028654f, k1 = 0.044715f;
    float x3 = (x * x) * x;
    float u = k0 * (x + k1 * x3);
    return x / (1.0f + qmm_expf(-2.0f * u));
}

/* The kitchen input acts (SPEC §1a, input_stage.c), in forms the vector paths reproduce:
 *   sigmoid(g) = 1 / (1 + exp(-g));
 *   tanh(x)    = x + x·p·(c3 + p·(c5 + p·(c7 + p·c9))), p = x², for |x| < 1/8 (Taylor, < 1e-9
 *                relative), else sign(x)·(1 − 2 / (exp(2|x|) + 1)); NaN stays NaN. */
static inline float qmm_sigmoid(float g) { return 1.0f / (1.0f + qmm_expf(-g)); }
static inline float qmm_tanh(float x) {
    float ax = fabsf(x);
    if (ax < 0.125f) {
        float p = x * x;
        float t = p * 0.021869488536155203f;          /* 62/2835 */
        t = p * (-0.05396825396825397f + t);          /* -17/315 */
        t = p * (0.13333333333333333f + t);           /* 2/15 */
        t = p * (-0.3333333333333333f + t);           /* -1/3 */
        return x + x * t;
    }
    float r = 1.0f - 2.0f / (qmm_expf(2.0f * ax) + 1.0f);
    return x < 0.0f ? -r : r;                         /* NaN: ax < 0.125 false, r NaN, x < 0 false */
}
/* Σ_k x[k]² of K values of dtype t in fp32, in 16 lanes (lane i sums k ≡ i mod 16 in order) then
 * lanes folded i + 8, i + 4, i + 2, i + 1 — the order of a zmm accumulator (rms_norm's mean). */
float qmm_sumsq16(const void *x, qmm_dtype t, int64_t K);

/* ---------------------------------------------------------------- rotation */
/* The ConvRot group sizes: the powers of 4 from 4 up to QMM_MAX_CONVROT_GS (SPEC §1a). */
#define QMM_MAX_CONVROT_GS 65536
static inline int qmm_convrot_gs_valid(int g) {
    if (g < 4 || g > QMM_MAX_CONVROT_GS) return 0;
    while (g > 1 && g % 4 == 0) g /= 4;
    return g == 1;
}
/* 1/sqrt(g) for a power of 4: 2^-log4(g), exact */
static inline float qmm_convrot_scale(int g) {
    float s = 1.0f;
    for (int i = 1; i < g; i *= 4) s *= 0.5f;
    return s;
}
/* In place on a[0..K) (K % g == 0): each group of g ← group · H_g, in fp32 (no rounding):
 * radix-4 butterflies at strides 1, 4, 16, ... < g, then × 1/sqrt(g). */
void qmm_rotate_f32(float *a, int64_t K, int g);

/* ---------------------------------------------------------------- the activation pre-pass */
/* One row: x (K_in values of dtype t) → a[0..K), each value representable in t:
 * a = T(act(x)), then if gs: a = T(rotate(a)). */
void qmm_ref_act_rotate_row(const void *x, qmm_dtype t, int64_t K, qmm_act act, int gs, float *a);
/* max |a[k]|; NaN if any a[k] is NaN. */
float qmm_amax_f32(const float *a, int64_t K);
/* s → q: q[k] = clamp(rne_int(T(a[k] / T(s))), -128, 127), NaN → 0. */
void qmm_ref_quantize_row(const float *a, int64_t K, qmm_dtype t, float s, int8_t *q);

/* The divisor of the quantization: T(s), or the smallest normal of T when T(s) underflows to 0
 * (f16 scales below 2^-25: amax below about 3.8e-6) — the kitchen's rule (SPEC §1a): such rows
 * quantize to 0. */
static inline float qmm_quant_divisor(float s, qmm_dtype t) {
    float sT = qmm_round_to(s, t);
    if (sT == 0.0f) sT = t == QMM_F16 ? 6.103515625e-05f : 1.17549435e-38f;
    return sT;
}

static inline float qmm_scale_of(float amax) {
    float s = amax / 127.0f;
    if (s != s) return s;
    return s > 1e-30f ? s : 1e-30f;
}

/* ---------------------------------------------------------------- epilogue */
static inline float qmm_epilogue_f(int32_t acc, float s_r, float ws, float b) {
    float t = (float)acc * s_r;
    t = t * ws;
    return t + b;
}
/* kitchen form, before the bias: (float)acc * (s_r * ws) */
static inline float qmm_epilogue_kitchen_f(int32_t acc, float s_r, float ws) { return (float)acc * (s_r * ws); }

#endif /* QMM_NUMERICS_H */
