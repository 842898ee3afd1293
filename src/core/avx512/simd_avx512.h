/*
 * simd_avx512.h — the AVX-512 (F/BW/VL/DQ) vector forms of the numerics.h definitions, shared by
 * the int8 pre-pass (prepass_avx512.c) and the float engines' activation pre-pass
 * (float_act_avx512.c). Static inline; include only from files built with the AVX-512 flags.
 * Every function gives the bits of its scalar definition, lane by lane, for every input
 * including NaN / Inf / denormals:
 *
 *   qmm_z_load16      x (dtype T) → f32: bf16 shift; f16 vcvtph2ps with Inf/NaN lanes rebuilt by
 *                     integer ops as qmm_f16_to_f32 (a signalling NaN stays signalling)
 *   qmm_z_round_to    f32 → T → f32 (bf16: integer RNE as qmm_f32_to_bf16, NaN quieted;
 *                     f16: vcvtps2ph RNE, which keeps denormals and NaN payloads as qmm_f32_to_f16)
 *   qmm_z_exp         qmm_expf: the same fmas, roundscale = rintf, scalef = ldexpf
 *   qmm_z_silu/gelu   qmm_silu / qmm_gelu_tanh; qmm_z_act16: a = T(act(x)) (swiglu rounds twice)
 *   qmm_z_rot_*       the radix-4 butterflies of qmm_rotate_f32: strides 1 and 4 inside a zmm by
 *                     broadcast + masked butterflies, 16 and 64 across zmms
 *   qmm_z_act_rotate  qmm_ref_act_rotate_row on the k range [k0, k1) of one row, written to
 *                     a[0 .. k1 - k0), with the running max |a| and NaN mask for the amax.
 *   qmm_z_store16     16 f32 lanes stored as f32 / f16 / bf16 (RNE, NaN quiet), masked
 *   qmm_z_epilogue16  the int8 epilogue of 16 outputs of a call: qmm_epilogue_store_ref (epilogue.h)
 */
#ifndef QMM_SIMD_AVX512_H
#define QMM_SIMD_AVX512_H

#include "numerics.h"
#include "qmm_internal.h"

#include <immintrin.h>

#define QMM_Z_RNE (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

static inline __mmask16 qmm_z_tail_mask(int64_t n) { return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1u); }

/* ---------------------------------------------------------------- conversions */
static inline __m512 qmm_z_f16_to_f32(__m256i h) {
    __m512i h32 = _mm512_cvtepu16_epi32(h);
    __m512 f = _mm512_cvtph_ps(h);
    __mmask16 special = _mm512_cmpeq_epi32_mask(_mm512_and_si512(h32, _mm512_set1_epi32(0x7c00)),
                                                _mm512_set1_epi32(0x7c00));
    __m512i alt = _mm512_or_si512(_mm512_slli_epi32(_mm512_and_si512(h32, _mm512_set1_epi32(0x8000)), 16),
                                  _mm512_or_si512(_mm512_set1_epi32(0x7f800000),
                                                  _mm512_slli_epi32(_mm512_and_si512(h32, _mm512_set1_epi32(0x3ff)), 13)));
    return _mm512_mask_mov_ps(f, special, _mm512_castsi512_ps(alt));
}

static inline __m512 qmm_z_load16(const void *x, qmm_dtype t, int64_t k, __mmask16 m) {
    if (t == QMM_F32) return _mm512_maskz_loadu_ps(m, (const float *)x + k);
    __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)x + k);
    if (t == QMM_BF16) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    return qmm_z_f16_to_f32(h);
}

static inline __m512 qmm_z_round_bf16(__m512 v) {
    __m512i u = _mm512_castps_si512(v);
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                            _mm512_set1_epi32(0x7f800000));
    __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff),
                                                     _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1))));
    r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(u, _mm512_set1_epi32(0x400000)));
    return _mm512_castsi512_ps(_mm512_and_si512(r, _mm512_set1_epi32((int)0xffff0000u)));
}

static inline __m512 qmm_z_round_f16(__m512 v) { return _mm512_cvtph_ps(_mm512_cvtps_ph(v, QMM_Z_RNE)); }

static inline __m512 qmm_z_round_to(__m512 v, qmm_dtype t) {
    if (t == QMM_BF16) return qmm_z_round_bf16(v);
    if (t == QMM_F16) return qmm_z_round_f16(v);
    return v;
}

/* ---------------------------------------------------------------- exp and activations */
/* exp(x) = y · 2^n before the scaling: n = round(x · log2 e), y the polynomial of the rest */
static inline __m512 qmm_z_exp_core(__m512 x, __m512 *n_out) {
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)), QMM_Z_RNE);
    __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-0.693145751953125f), x);
    r = _mm512_fmadd_ps(n, _mm512_set1_ps(-1.428606765330187045e-06f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    __m512 z = _mm512_mul_ps(r, r);
    *n_out = n;
    return _mm512_add_ps(_mm512_fmadd_ps(p, z, r), _mm512_set1_ps(1.0f));
}

static inline __m512 qmm_z_exp(__m512 x) {
    __m512 n;
    __m512 y = qmm_z_exp_core(x, &n);
    y = _mm512_scalef_ps(y, n);
    __mmask16 hi = _mm512_cmp_ps_mask(x, _mm512_set1_ps(QMM_EXP_HI), _CMP_GT_OQ);
    __mmask16 lo = _mm512_cmp_ps_mask(x, _mm512_set1_ps(QMM_EXP_LO), _CMP_LT_OQ);
    __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    y = _mm512_mask_mov_ps(y, hi, _mm512_set1_ps(INFINITY));
    y = _mm512_mask_mov_ps(y, lo, _mm512_setzero_ps());
    return _mm512_mask_mov_ps(y, nan, x);
}

static inline __m512 qmm_z_neg(__m512 v) { return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(v), _mm512_set1_epi32((int)0x80000000u))); }

static inline __m512 qmm_z_silu(__m512 g) { return _mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), qmm_z_exp(qmm_z_neg(g)))); }

static inline __m512 qmm_z_gelu(__m512 x) {
    __m512 x3 = _mm512_mul_ps(_mm512_mul_ps(x, x), x);
    __m512 u = _mm512_mul_ps(_mm512_set1_ps(0.7978845608028654f), _mm512_add_ps(x, _mm512_mul_ps(_mm512_set1_ps(0.044715f), x3)));
    __m512 e = qmm_z_exp(_mm512_mul_ps(_mm512_set1_ps(-2.0f), u));
    return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

static inline __m512 qmm_z_sigmoid(__m512 g) {
    const __m512 one = _mm512_set1_ps(1.0f);
    return _mm512_div_ps(one, _mm512_add_ps(one, qmm_z_exp(qmm_z_neg(g))));
}
/* qmm_tanh (numerics.h) lane by lane */
static inline __m512 qmm_z_tanh(__m512 x) {
    const __m512 one = _mm512_set1_ps(1.0f), two = _mm512_set1_ps(2.0f);
    __m512 ax = _mm512_abs_ps(x);
    __m512 p = _mm512_mul_ps(x, x);
    __m512 t = _mm512_mul_ps(p, _mm512_set1_ps(0.021869488536155203f));
    t = _mm512_mul_ps(p, _mm512_add_ps(_mm512_set1_ps(-0.05396825396825397f), t));
    t = _mm512_mul_ps(p, _mm512_add_ps(_mm512_set1_ps(0.13333333333333333f), t));
    t = _mm512_mul_ps(p, _mm512_add_ps(_mm512_set1_ps(-0.3333333333333333f), t));
    __m512 small = _mm512_add_ps(x, _mm512_mul_ps(x, t));
    __m512 r = _mm512_sub_ps(one, _mm512_div_ps(two, _mm512_add_ps(qmm_z_exp(_mm512_mul_ps(two, ax)), one)));
    r = _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ), qmm_z_neg(r));
    return _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask(ax, _mm512_set1_ps(0.125f), _CMP_LT_OQ), small);
}

/* a[k..k+16) = T(act(x)) (masked lanes read as 0) */
static inline __m512 qmm_z_act16(const void *x, qmm_dtype t, int64_t K, qmm_act act, int64_t k, __mmask16 m) {
    switch (act) {
    case QMM_ACT_SWIGLU: {
        __m512 g = qmm_z_load16(x, t, k, m), u = qmm_z_load16(x, t, K + k, m);
        __m512 sg = qmm_z_round_to(qmm_z_silu(g), t);
        return qmm_z_round_to(_mm512_mul_ps(sg, u), t);
    }
    case QMM_ACT_GELU_TANH: return qmm_z_round_to(qmm_z_gelu(qmm_z_load16(x, t, k, m)), t);
    default: return qmm_z_load16(x, t, k, m);
    }
}

/* ---------------------------------------------------------------- rotation */
/* y0 = p + q, y1 = p - q, y2 = r + t, y3 = t - r with p = x0 + x1, q = x2 - x3, r = x0 - x1, t = x2 + x3,
 * the result of lane position i taken from y_i (masks m1, m2, m3 select positions 1, 2, 3). */
static inline __m512 qmm_z_bfly_lanes(__m512 x0, __m512 x1, __m512 x2, __m512 x3, __mmask16 m1, __mmask16 m2, __mmask16 m3) {
    __m512 p = _mm512_add_ps(x0, x1), q = _mm512_sub_ps(x2, x3), r = _mm512_sub_ps(x0, x1), t = _mm512_add_ps(x2, x3);
    __m512 y = _mm512_add_ps(p, q);
    y = _mm512_mask_sub_ps(y, m1, p, q);
    y = _mm512_mask_add_ps(y, m2, r, t);
    return _mm512_mask_sub_ps(y, m3, t, r);
}
static inline __m512 qmm_z_rot_s1(__m512 v) {
    return qmm_z_bfly_lanes(_mm512_permute_ps(v, 0x00), _mm512_permute_ps(v, 0x55), _mm512_permute_ps(v, 0xAA),
                      _mm512_permute_ps(v, 0xFF), 0x2222, 0x4444, 0x8888);
}
static inline __m512 qmm_z_rot_s4(__m512 v) {
    return qmm_z_bfly_lanes(_mm512_shuffle_f32x4(v, v, 0x00), _mm512_shuffle_f32x4(v, v, 0x55),
                      _mm512_shuffle_f32x4(v, v, 0xAA), _mm512_shuffle_f32x4(v, v, 0xFF), 0x00F0, 0x0F00, 0xF000);
}
/* butterflies at stride s (a multiple of 16) over v[0..g) in place */
static inline void qmm_z_rot_wide(float *v, int g, int s) {
    for (int b = 0; b < g; b += 4 * s) {
        for (int j = 0; j < s; j += 16) {
            float *p0 = v + b + j, *p1 = p0 + s, *p2 = p1 + s, *p3 = p2 + s;
            __m512 x0 = _mm512_loadu_ps(p0), x1 = _mm512_loadu_ps(p1), x2 = _mm512_loadu_ps(p2), x3 = _mm512_loadu_ps(p3);
            __m512 p = _mm512_add_ps(x0, x1), q = _mm512_sub_ps(x2, x3), r = _mm512_sub_ps(x0, x1), t = _mm512_add_ps(x2, x3);
            _mm512_storeu_ps(p0, _mm512_add_ps(p, q));
            _mm512_storeu_ps(p1, _mm512_sub_ps(p, q));
            _mm512_storeu_ps(p2, _mm512_add_ps(r, t));
            _mm512_storeu_ps(p3, _mm512_sub_ps(t, r));
        }
    }
}

/* ---------------------------------------------------------------- act + rotation of a k range */
/* a[k - k0] = qmm_ref_act_rotate_row(x)[k] for k in [k0, k1) of one row x (K_in values of dtype t).
 * With gs: k0 % gs == 0 and (k1 - k0) % gs == 0. Returns the lane-wise max |a| and ORs the
 * lanes holding a NaN into *nan; the max is meaningful only when no NaN was seen (else the caller
 * takes qmm_amax_f32 over a, which returns the reference's NaN). */
static inline __m512 qmm_z_act_rotate(const void *x, qmm_dtype t, int64_t K, qmm_act act, int gs, int64_t k0,
                                      int64_t k1, float *a, __mmask16 *nan) {
    __m512 vmax = _mm512_setzero_ps();
    __mmask16 n = 0;
    if (!gs) {
        for (int64_t k = k0; k < k1; k += 16) {
            __mmask16 m = qmm_z_tail_mask(k1 - k);
            __m512 v = qmm_z_act16(x, t, K, act, k, m);
            _mm512_mask_storeu_ps(a + (k - k0), m, v);
            n |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
            vmax = _mm512_max_ps(vmax, _mm512_abs_ps(v));
        }
    } else if (gs == 4) { /* one stage, 4 groups per zmm; the tail mask covers whole groups */
        const __m512 scale = _mm512_set1_ps(0.5f);
        for (int64_t k = k0; k < k1; k += 16) {
            __mmask16 m = qmm_z_tail_mask(k1 - k);
            __m512 v = qmm_z_round_to(_mm512_mul_ps(qmm_z_rot_s1(qmm_z_act16(x, t, K, act, k, m)), scale), t);
            _mm512_mask_storeu_ps(a + (k - k0), m, v);
            n |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q); /* masked lanes are 0 */
            vmax = _mm512_max_ps(vmax, _mm512_abs_ps(v));
        }
    } else {
        const __m512 scale = _mm512_set1_ps(qmm_convrot_scale(gs));
        for (int64_t base = k0; base < k1; base += gs) {
            float *v = a + (base - k0);
            for (int j = 0; j < gs; j += 16)
                _mm512_storeu_ps(v + j, qmm_z_rot_s4(qmm_z_rot_s1(qmm_z_act16(x, t, K, act, base + j, 0xffff))));
            for (int s = 16; s < gs; s *= 4) qmm_z_rot_wide(v, gs, s);
            for (int j = 0; j < gs; j += 16) {
                __m512 w = qmm_z_round_to(_mm512_mul_ps(_mm512_loadu_ps(v + j), scale), t);
                _mm512_storeu_ps(v + j, w);
                n |= _mm512_cmp_ps_mask(w, w, _CMP_UNORD_Q);
                vmax = _mm512_max_ps(vmax, _mm512_abs_ps(w));
            }
        }
    }
    *nan |= n;
    return vmax;
}

/* ---------------------------------------------------------------- output */
static inline void qmm_z_store16(void *y, qmm_dtype t, __mmask16 m, __m512 v) {
    if (t == QMM_F32) {
        _mm512_mask_storeu_ps(y, m, v);
    } else if (t == QMM_F16) {
        _mm256_mask_storeu_epi16(y, m, _mm512_cvtps_ph(v, QMM_Z_RNE));
    } else {
        __m512i r = _mm512_srli_epi32(_mm512_castps_si512(qmm_z_round_bf16(v)), 16);
        _mm256_mask_storeu_epi16(y, m, _mm512_cvtepi32_epi16(r));
    }
}

/* The int8 epilogue of outputs y[r][n .. n+16) (lanes in m) of call c from the exact sums acc,
 * the same operations as qmm_epilogue_store_ref: fused or kitchen form, bias, residual. */
static inline void qmm_z_epilogue16(const qmm_call *c, __m512i acc, int64_t r, int64_t n, float s_r, __mmask16 m) {
    const qmm_weight *w = c->w;
    const qmm_dtype yt = c->y_dtype;
    if (yt == QMM_I32) {
        _mm512_mask_storeu_epi32((int32_t *)c->y + r * c->ldy + n, m, acc);
        return;
    }
    __m512 v = _mm512_cvtepi32_ps(acc);
    const __m512 ws = _mm512_maskz_loadu_ps(m, w->scale + n);
    if (c->epilogue == QMM_EPILOGUE_KITCHEN) {
        v = _mm512_mul_ps(v, _mm512_mul_ps(_mm512_set1_ps(s_r), ws));
        if (w->bias) v = _mm512_add_ps(qmm_z_round_to(v, yt), qmm_z_round_to(_mm512_maskz_loadu_ps(m, w->bias + n), yt));
    } else {
        v = _mm512_mul_ps(_mm512_mul_ps(v, _mm512_set1_ps(s_r)), ws);
        v = _mm512_add_ps(v, w->bias ? _mm512_maskz_loadu_ps(m, w->bias + n) : _mm512_setzero_ps());
    }
    if (c->residual)
        v = _mm512_fmadd_ps(qmm_z_round_to(v, yt), qmm_z_load16(c->residual_scale, yt, n, m),
                            qmm_z_load16(c->residual, yt, r * c->ldr + n, m));
    qmm_z_store16((char *)c->y + (size_t)(r * c->ldy + n) * qmm_dtype_size(yt), yt, m, v);
}

#endif /* QMM_SIMD_AVX512_H */
