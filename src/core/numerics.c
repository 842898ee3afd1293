/*
 * numerics.c — scalar definitions of qmm's numbers: f16 rounding, exp, the regular-Hadamard
 * rotation, and the reference activation pre-pass (SPEC §1 steps 1–3). See numerics.h for the
 * exact operation order that every SIMD path reproduces.
 */
#include "numerics.h"

#include <math.h>

uint16_t qmm_f32_to_f16(float f) {
    uint32_t x = qmm_f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu)); /* NaN */
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 → Inf (RNE) */
    if (ax < 0x38800000u) {                                    /* below 2^-14: subnormal */
        uint32_t e = ax >> 23;
        uint32_t mant = (ax & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - e; /* result = rne(mant * 2^-shift) */
        if (e == 0 || shift > 24u) return sign; /* < 2^-25: rounds to 0 */
        uint32_t m = mant >> shift, rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (m & 1u))) m++;
        return (uint16_t)(sign | m);
    }
    uint32_t r = ax - 0x38000000u; /* rebias exponent 127 → 15 */
    r += 0xfffu + ((r >> 13) & 1u);
    return (uint16_t)(sign | (r >> 13));
}

float qmm_expf(float x) {
    if (x != x) return x;
    if (x > QMM_EXP_HI) return INFINITY;
    if (x < QMM_EXP_LO) return 0.0f;
    float n = rintf(x * 1.44269504088896341f);
    float r = fmaf(n, -0.693145751953125f, x);
    r = fmaf(n, -1.428606765330187045e-06f, r);
    float p = 1.9875691500e-4f;
    p = fmaf(p, r, 1.3981999507e-3f);
    p = fmaf(p, r, 8.3334519073e-3f);
    p = fmaf(p, r, 4.1665795894e-2f);
    p = fmaf(p, r, 1.6666665459e-1f);
    p = fmaf(p, r, 5.0000001201e-1f);
    float z = r * r;
    float y = fmaf(p, z, r) + 1.0f;
    return ldexpf(y, (int)n);
}

float qmm_sumsq16(const void *x, qmm_dtype t, int64_t K) {
    float acc[16] = {0};
    for (int64_t k = 0; k < K; k++) {
        float v = qmm_load_f(x, t, k);
        acc[k % 16] = acc[k % 16] + v * v;
    }
    for (int w = 8; w >= 1; w /= 2)
        for (int i = 0; i < w; i++) acc[i] = acc[i] + acc[i + w];
    return acc[0];
}

void qmm_rotate_f32(float *a, int64_t K, int g) {
    const float scale = qmm_convrot_scale(g);
    for (int64_t base = 0; base < K; base += g) {
        float *v = a + base;
        for (int s = 1; s < g; s *= 4) {
            for (int b = 0; b < g; b += 4 * s) {
                for (int j = 0; j < s; j++) {
                    float *x0 = v + b + j, *x1 = x0 + s, *x2 = x1 + s, *x3 = x2 + s;
                    float p = *x0 + *x1, q = *x2 - *x3, r = *x0 - *x1, t = *x2 + *x3;
                    *x0 = p + q;
                    *x1 = p - q;
                    *x2 = r + t;
                    *x3 = t - r;
                }
            }
        }
        for (int i = 0; i < g; i++) v[i] *= scale;
    }
}

void qmm_ref_act_rotate_row(const void *x, qmm_dtype t, int64_t K, qmm_act act, int gs, float *a) {
    switch (act) {
    case QMM_ACT_SWIGLU:
        for (int64_t k = 0; k < K; k++) {
            float g = qmm_load_f(x, t, k), u = qmm_load_f(x, t, K + k);
            float sg = qmm_round_to(qmm_silu(g), t);
            a[k] = qmm_round_to(sg * u, t);
        }
        break;
    case QMM_ACT_GELU_TANH:
        for (int64_t k = 0; k < K; k++) a[k] = qmm_round_to(qmm_gelu_tanh(qmm_load_f(x, t, k)), t);
        break;
    default:
        for (int64_t k = 0; k < K; k++) a[k] = qmm_load_f(x, t, k);
        break;
    }
    if (gs) {
        qmm_rotate_f32(a, K, gs);
        for (int64_t k = 0; k < K; k++) a[k] = qmm_round_to(a[k], t);
    }
}

float qmm_amax_f32(const float *a, int64_t K) {
    float m = 0.0f;
    for (int64_t k = 0; k < K; k++) {
        float v = fabsf(a[k]);
        if (v != v) return v;
        if (v > m) m = v;
    }
    return m;
}

void qmm_ref_quantize_row(const float *a, int64_t K, qmm_dtype t, float s, int8_t *q) {
    float sT = qmm_quant_divisor(s, t);
    for (int64_t k = 0; k < K; k++) {
        float v = qmm_round_to(a[k] / sT, t);
        if (v != v) { q[k] = 0; continue; }
        v = rintf(v);
        if (v > 127.0f) v = 127.0f;
        if (v < -128.0f) v = -128.0f;
        q[k] = (int8_t)v;
    }
}
