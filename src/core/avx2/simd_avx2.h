/*
 * simd_avx2.h — the AVX2 (+FMA, F16C) vector forms of the numerics.h definitions, shared by the
 * int8 pre-pass (prepass_avx2.c) and the float engines' activation pre-pass (float_act_avx2.c).
 * Static inline; include only from files built with the AVX2 flags. Every function gives the
 * bits of its scalar definition, lane by lane, for every input including NaN / Inf / denormals:
 *
 *   qmm_y_load8       x (dtype T) → f32 (bf16: shift; f16: vcvtph2ps with Inf/NaN lanes rebuilt
 *                     by integer ops as qmm_f16_to_f32 does)
 *   qmm_y_round_to    f32 → T → f32 (bf16: integer RNE as qmm_f32_to_bf16; f16: vcvtps2ph RNE)
 *   qmm_y_exp         qmm_expf: the same fmas; rintf = vroundps RNE; ldexpf(y, n) =
 *                     y · 2^(n>>1) · 2^(n - (n>>1)), two exact power-of-two products, one rounding
 *   qmm_y_act8/act1   a = T(act(x)), 8 lanes / one element (the scalar definition, for tails)
 *   qmm_y_rot_*       the radix-4 butterflies of qmm_rotate_f32: stride 1 inside each 128-bit
 *                     lane, 4 across the halves of two ymm, 16 and 64 across ymm
 *   qmm_y_act_rotate  qmm_ref_act_rotate_row on the k range [k0, k1) of one row, written to
 *                     a[0 .. k1 - k0), with the running max |a| and NaN flags for the amax.
 *   qmm_y_store8      8 f32 lanes stored as f32 / f16 / bf16 (RNE, NaN quiet)
 *   qmm_y_epilogue8   the int8 epilogue of 8 outputs of a call: qmm_epilogue_store_ref (epilogue.h)
 */
#ifndef QMM_SIMD_AVX2_H
#define QMM_SIMD_AVX2_H

#include "numerics.h"
#include "qmm_internal.h"

#include <immintrin.h>

#define QMM_Y_RNE (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

/* ---------------------------------------------------------------- conversions */
static inline __m256 qmm_y_f16_to_f32(__m128i h) {
    __m256i h32 = _mm256_cvtepu16_epi32(h);
    __m256 f = _mm256_cvtph_ps(h);
    __m256i special = _mm256_cmpeq_epi32(_mm256_and_si256(h32, _mm256_set1_epi32(0x7c00)), _mm256_set1_epi32(0x7c00));
    __m256i alt = _mm256_or_si256(_mm256_slli_epi32(_mm256_and_si256(h32, _mm256_set1_epi32(0x8000)), 16),
                                  _mm256_or_si256(_mm256_set1_epi32(0x7f800000),
                                                  _mm256_slli_epi32(_mm256_and_si256(h32, _mm256_set1_epi32(0x3ff)), 13)));
    return _mm256_blendv_ps(f, _mm256_castsi256_ps(alt), _mm256_castsi256_ps(special));
}

static inline __m256 qmm_y_load8(const void *x, qmm_dtype t, int64_t k) {
    if (t == QMM_F32) return _mm256_loadu_ps((const float *)x + k);
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)x + k));
    if (t == QMM_BF16) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    return qmm_y_f16_to_f32(h);
}

static inline __m256 qmm_y_round_bf16(__m256 v) {
    __m256i u = _mm256_castps_si256(v);
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
    __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff),
                                                     _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1))));
    r = _mm256_blendv_epi8(r, _mm256_or_si256(u, _mm256_set1_epi32(0x400000)), nan);
    return _mm256_castsi256_ps(_mm256_and_si256(r, _mm256_set1_epi32((int)0xffff0000u)));
}

static inline __m256 qmm_y_round_to(__m256 v, qmm_dtype t) {
    if (t == QMM_BF16) return qmm_y_round_bf16(v);
    if (t == QMM_F16) return _mm256_cvtph_ps(_mm256_cvtps_ph(v, QMM_Y_RNE));
    return v;
}

/* ---------------------------------------------------------------- exp and activations */
static inline __m256 qmm_y_pow2i(__m256i k) { /* 2^k, k in [-126, 127] */
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k, _mm256_set1_epi32(127)), 23));
}

static inline __m256 qmm_y_exp(__m256 x) {
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)), QMM_Y_RNE);
    __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-0.693145751953125f), x);
    r = _mm256_fmadd_ps(n, _mm256_set1_ps(-1.428606765330187045e-06f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    __m256 z = _mm256_mul_ps(r, r);
    __m256 y = _mm256_add_ps(_mm256_fmadd_ps(p, z, r), _mm256_set1_ps(1.0f));
    /* lanes outside [LO, HI] (and NaN) are replaced below; clamp n so the exponent math stays sane */
    __m256 nc = _mm256_min_ps(_mm256_max_ps(n, _mm256_set1_ps(-126.0f)), _mm256_set1_ps(128.0f));
    __m256i ni = _mm256_cvtps_epi32(nc);
    __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
    y = _mm256_mul_ps(_mm256_mul_ps(y, qmm_y_pow2i(n1)), qmm_y_pow2i(n2));
    __m256 hi = _mm256_cmp_ps(x, _mm256_set1_ps(QMM_EXP_HI), _CMP_GT_OQ);
    __m256 lo = _mm256_cmp_ps(x, _mm256_set1_ps(QMM_EXP_LO), _CMP_LT_OQ);
    __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
    y = _mm256_blendv_ps(y, _mm256_set1_ps(INFINITY), hi);
    y = _mm256_blendv_ps(y, _mm256_setzero_ps(), lo);
    return _mm256_blendv_ps(y, x, nan);
}

static inline __m256 qmm_y_neg(__m256 v) { return _mm256_xor_ps(v, _mm256_set1_ps(-0.0f)); }
static inline __m256 qmm_y_silu(__m256 g) { return _mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), qmm_y_exp(qmm_y_neg(g)))); }
static inline __m256 qmm_y_gelu(__m256 x) {
    __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
    __m256 u = _mm256_mul_ps(_mm256_set1_ps(0.7978845608028654f), _mm256_add_ps(x, _mm256_mul_ps(_mm256_set1_ps(0.044715f), x3)));
    __m256 e = qmm_y_exp(_mm256_mul_ps(_mm256_set1_ps(-2.0f), u));
    return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

/* a[k..k+8) = T(act(x)) */
static inline __m256 qmm_y_act8(const void *x, qmm_dtype t, int64_t K, qmm_act act, int64_t k) {
    switch (act) {
    case QMM_ACT_SWIGLU: {
        __m256 g = qmm_y_load8(x, t, k), u = qmm_y_load8(x, t, K + k);
        __m256 sg = qmm_y_round_to(qmm_y_silu(g), t);
        return qmm_y_round_to(_mm256_mul_ps(sg, u), t);
    }
    case QMM_ACT_GELU_TANH: return qmm_y_round_to(qmm_y_gelu(qmm_y_load8(x, t, k)), t);
    default: return qmm_y_load8(x, t, k);
    }
}

/* the scalar definition of one element (tails) */
static inline float qmm_y_act1(const void *x, qmm_dtype t, int64_t K, qmm_act act, int64_t k) {
    switch (act) {
    case QMM_ACT_SWIGLU: {
        float sg = qmm_round_to(qmm_silu(qmm_load_f(x, t, k)), t);
        return qmm_round_to(sg * qmm_load_f(x, t, K + k), t);
    }
    case QMM_ACT_GELU_TANH: return qmm_round_to(qmm_gelu_tanh(qmm_load_f(x, t, k)), t);
    default: return qmm_load_f(x, t, k);
    }
}

/* ---------------------------------------------------------------- rotation */
/* stride 1 inside each group of 4 lanes: position i takes y_i */
static inline __m256 qmm_y_rot_s1(__m256 v) {
    __m256 x0 = _mm256_permute_ps(v, 0x00), x1 = _mm256_permute_ps(v, 0x55);
    __m256 x2 = _mm256_permute_ps(v, 0xAA), x3 = _mm256_permute_ps(v, 0xFF);
    __m256 p = _mm256_add_ps(x0, x1), q = _mm256_sub_ps(x2, x3), r = _mm256_sub_ps(x0, x1), t = _mm256_add_ps(x2, x3);
    __m256 y = _mm256_add_ps(p, q);
    y = _mm256_blend_ps(y, _mm256_sub_ps(p, q), 0x22);
    y = _mm256_blend_ps(y, _mm256_add_ps(r, t), 0x44);
    return _mm256_blend_ps(y, _mm256_sub_ps(t, r), 0x88);
}
/* stride 4 over 16 values held in a (groups 0, 1) and b (groups 2, 3) */
static inline void qmm_y_rot_s4(__m256 *a, __m256 *b) {
    __m128 x0 = _mm256_castps256_ps128(*a), x1 = _mm256_extractf128_ps(*a, 1);
    __m128 x2 = _mm256_castps256_ps128(*b), x3 = _mm256_extractf128_ps(*b, 1);
    __m128 p = _mm_add_ps(x0, x1), q = _mm_sub_ps(x2, x3), r = _mm_sub_ps(x0, x1), t = _mm_add_ps(x2, x3);
    *a = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_add_ps(p, q)), _mm_sub_ps(p, q), 1);
    *b = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_add_ps(r, t)), _mm_sub_ps(t, r), 1);
}
/* butterflies at stride s (a multiple of 16) over v[0..g) in place */
static inline void qmm_y_rot_wide(float *v, int g, int s) {
    for (int b = 0; b < g; b += 4 * s) {
        for (int j = 0; j < s; j += 8) {
            float *p0 = v + b + j, *p1 = p0 + s, *p2 = p1 + s, *p3 = p2 + s;
            __m256 x0 = _mm256_loadu_ps(p0), x1 = _mm256_loadu_ps(p1), x2 = _mm256_loadu_ps(p2), x3 = _mm256_loadu_ps(p3);
            __m256 p = _mm256_add_ps(x0, x1), q = _mm256_sub_ps(x2, x3), r = _mm256_sub_ps(x0, x1), t = _mm256_add_ps(x2, x3);
            _mm256_storeu_ps(p0, _mm256_add_ps(p, q));
            _mm256_storeu_ps(p1, _mm256_sub_ps(p, q));
            _mm256_storeu_ps(p2, _mm256_add_ps(r, t));
            _mm256_storeu_ps(p3, _mm256_sub_ps(t, r));
        }
    }
}

static inline float qmm_y_hmax8(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
}

/* ---------------------------------------------------------------- act + rotation of a k range */
/* Running amax state: vector max and NaN lanes, and the scalar tail's max and NaN flag. The max
 * is meaningful only when no NaN was seen (else take qmm_amax_f32 for the reference's NaN). */
typedef struct qmm_y_amax {
    __m256 vmax, nan;
    float smax;
    int scalar_nan;
} qmm_y_amax;

static inline void qmm_y_amax_init(qmm_y_amax *m) {
    m->vmax = _mm256_setzero_ps();
    m->nan = _mm256_setzero_ps();
    m->smax = 0.0f;
    m->scalar_nan = 0;
}

/* a[k - k0] = qmm_ref_act_rotate_row(x)[k] for k in [k0, k1) of one row x (K_in values of dtype t).
 * With gs: k0 % gs == 0 and (k1 - k0) % gs == 0. Without: 8 lanes at a time, the scalar
 * definitions for the last (k1 - k0) % 8 values. */
static inline void qmm_y_act_rotate(const void *x, qmm_dtype t, int64_t K, qmm_act act, int gs, int64_t k0,
                                    int64_t k1, float *a, qmm_y_amax *m) {
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 vmax = m->vmax, nan = m->nan;
    if (!gs) {
        int64_t k = k0;
        for (; k + 8 <= k1; k += 8) {
            __m256 v = qmm_y_act8(x, t, K, act, k);
            _mm256_storeu_ps(a + (k - k0), v);
            nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
            vmax = _mm256_max_ps(vmax, _mm256_and_ps(v, absmask));
        }
        for (; k < k1; k++) {
            float v = qmm_y_act1(x, t, K, act, k);
            a[k - k0] = v;
            float f = fabsf(v);
            if (f != f) m->scalar_nan = 1;
            else if (f > m->smax) m->smax = f;
        }
    } else if (gs == 4) { /* one stage: two groups per ymm, the last group in scalar */
        int64_t k = k0;
        for (; k + 8 <= k1; k += 8) {
            __m256 v = qmm_y_round_to(_mm256_mul_ps(qmm_y_rot_s1(qmm_y_act8(x, t, K, act, k)), _mm256_set1_ps(0.5f)), t);
            _mm256_storeu_ps(a + (k - k0), v);
            nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
            vmax = _mm256_max_ps(vmax, _mm256_and_ps(v, absmask));
        }
        for (; k < k1; k += 4) {
            float *v = a + (k - k0);
            for (int i = 0; i < 4; i++) v[i] = qmm_y_act1(x, t, K, act, k + i);
            qmm_rotate_f32(v, 4, 4);
            for (int i = 0; i < 4; i++) {
                v[i] = qmm_round_to(v[i], t);
                float f = fabsf(v[i]);
                if (f != f) m->scalar_nan = 1;
                else if (f > m->smax) m->smax = f;
            }
        }
    } else {
        const __m256 scale = _mm256_set1_ps(qmm_convrot_scale(gs));
        for (int64_t base = k0; base < k1; base += gs) {
            float *v = a + (base - k0);
            for (int j = 0; j < gs; j += 16) {
                __m256 p = qmm_y_rot_s1(qmm_y_act8(x, t, K, act, base + j));
                __m256 q = qmm_y_rot_s1(qmm_y_act8(x, t, K, act, base + j + 8));
                qmm_y_rot_s4(&p, &q);
                _mm256_storeu_ps(v + j, p);
                _mm256_storeu_ps(v + j + 8, q);
            }
            for (int s = 16; s < gs; s *= 4) qmm_y_rot_wide(v, gs, s);
            for (int j = 0; j < gs; j += 8) {
                __m256 w = qmm_y_round_to(_mm256_mul_ps(_mm256_loadu_ps(v + j), scale), t);
                _mm256_storeu_ps(v + j, w);
                nan = _mm256_or_ps(nan, _mm256_cmp_ps(w, w, _CMP_UNORD_Q));
                vmax = _mm256_max_ps(vmax, _mm256_and_ps(w, absmask));
            }
        }
    }
    m->vmax = vmax;
    m->nan = nan;
}

/* ---------------------------------------------------------------- output */
static inline void qmm_y_store8(void *y, qmm_dtype t, __m256 v) {
    if (t == QMM_F32) {
        _mm256_storeu_ps(y, v);
    } else if (t == QMM_F16) {
        _mm_storeu_si128((__m128i *)y, _mm256_cvtps_ph(v, QMM_Y_RNE));
    } else {
        __m256i r = _mm256_srli_epi32(_mm256_castps_si256(qmm_y_round_bf16(v)), 16);
        r = _mm256_packus_epi32(r, r);         /* per 128-bit lane: [0..3,0..3 | 4..7,4..7] */
        r = _mm256_permute4x64_epi64(r, 0x08); /* lanes 0, 2 → low 128 bits */
        _mm_storeu_si128((__m128i *)y, _mm256_castsi256_si128(r));
    }
}

/* The int8 epilogue of outputs y[r][n .. n+8) of call c from the exact sums acc, the same
 * operations as qmm_epilogue_store_ref: fused or kitchen form, bias, residual. */
static inline void qmm_y_epilogue8(const qmm_call *c, __m256i acc, int64_t r, int64_t n, float s_r) {
    const qmm_weight *w = c->w;
    const qmm_dtype yt = c->y_dtype;
    if (yt == QMM_I32) {
        _mm256_storeu_si256((__m256i *)((int32_t *)c->y + r * c->ldy + n), acc);
        return;
    }
    __m256 v = _mm256_cvtepi32_ps(acc);
    const __m256 ws = _mm256_loadu_ps(w->scale + n);
    if (c->epilogue == QMM_EPILOGUE_KITCHEN) {
        v = _mm256_mul_ps(v, _mm256_mul_ps(_mm256_set1_ps(s_r), ws));
        if (w->bias) v = _mm256_add_ps(qmm_y_round_to(v, yt), qmm_y_round_to(_mm256_loadu_ps(w->bias + n), yt));
    } else {
        v = _mm256_mul_ps(_mm256_mul_ps(v, _mm256_set1_ps(s_r)), ws);
        v = _mm256_add_ps(v, w->bias ? _mm256_loadu_ps(w->bias + n) : _mm256_setzero_ps());
    }
    if (c->residual)
        v = _mm256_fmadd_ps(qmm_y_round_to(v, yt), qmm_y_load8(c->residual_scale, yt, n),
                            qmm_y_load8(c->residual, yt, r * c->ldr + n));
    qmm_y_store8((char *)c->y + (size_t)(r * c->ldy + n) * qmm_dtype_size(yt), yt, v);
}

#endif /* QMM_SIMD_AVX2_H */
