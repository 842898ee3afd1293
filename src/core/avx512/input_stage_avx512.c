/*
 * input_stage_avx512.c — the AVX-512 row function of the kitchen input stage (input_stage.c):
 * rms_norm, situ, the other acts and the modulation on 16 values at a time, bit-identical to
 * qmm_input_stage_row_ref for every dtype including NaN / Inf:
 *   rms_norm   Σ x² in one zmm accumulator (lane i: k ≡ i mod 16, masked tail lanes add +0), folded
 *              i + 8, i + 4, i + 2, i + 1 as qmm_sumsq16; the factor is the scalar
 *              qmm_rms_norm_factor; then T((x · r) · T(w)) per lane;
 *   situ       qmm_z_tanh / qmm_z_sigmoid (simd_avx512.h), each step rounded to T;
 *   others     qmm_z_act16 (the pre-pass's own act);
 *   modulation T(a · T(1 + m)).
 */
#include "input_stage.h"
#include "numerics.h"
#include "simd_avx512.h"

#include <immintrin.h>

/* lanes folded i + 8, i + 4, i + 2, i + 1: qmm_sumsq16's order */
static float fold16(__m512 v) {
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    __m128 d = _mm_add_ps(q, _mm_movehl_ps(q, q));
    __m128 s = _mm_add_ss(d, _mm_shuffle_ps(d, d, 1));
    return _mm_cvtss_f32(s);
}

static void stage_row_avx512(const qmm_call *c, const void *x, void *out, float *tmp) {
    (void)tmp;
    const qmm_dtype t = c->x_dtype;
    const int64_t K = c->K;
    const size_t es = qmm_dtype_size(t);
    float r = 0.0f;
    if (c->act == QMM_ACT_RMS_NORM) {
        __m512 acc = _mm512_setzero_ps();
        for (int64_t k = 0; k < K; k += 16) {
            __m512 v = qmm_z_load16(x, t, k, qmm_z_tail_mask(K - k));
            acc = _mm512_add_ps(acc, _mm512_mul_ps(v, v));
        }
        r = qmm_rms_norm_factor(c, fold16(acc));
    }
    const __m512 vr = _mm512_set1_ps(r), one = _mm512_set1_ps(1.0f);
    for (int64_t k = 0; k < K; k += 16) {
        const __mmask16 m = qmm_z_tail_mask(K - k);
        __m512 a;
        switch (c->act) {
        case QMM_ACT_RMS_NORM: {
            __m512 w = qmm_z_round_to(qmm_z_load16(c->act_weight, c->act_weight_dtype, k, m), t);
            a = qmm_z_round_to(_mm512_mul_ps(_mm512_mul_ps(qmm_z_load16(x, t, k, m), vr), w), t);
            break;
        }
        case QMM_ACT_SITU: {
            __m512 h = qmm_z_load16(x, t, k, m), g = qmm_z_load16(x, t, K + k, m);
            __m512 tg = qmm_z_round_to(qmm_z_tanh(qmm_z_round_to(_mm512_div_ps(g, _mm512_set1_ps(4.0f)), t)), t);
            __m512 sg = qmm_z_round_to(qmm_z_sigmoid(g), t);
            __m512 gated = qmm_z_round_to(_mm512_mul_ps(qmm_z_round_to(_mm512_mul_ps(tg, _mm512_set1_ps(4.0f)), t), sg), t);
            __m512 th = qmm_z_round_to(qmm_z_tanh(qmm_z_round_to(_mm512_div_ps(h, _mm512_set1_ps(25.0f)), t)), t);
            a = qmm_z_round_to(_mm512_mul_ps(qmm_z_round_to(_mm512_mul_ps(th, _mm512_set1_ps(25.0f)), t), gated), t);
            break;
        }
        default: a = qmm_z_act16(x, t, K, c->act, k, m); break;
        }
        if (c->modulation) {
            __m512 mm = qmm_z_round_to(_mm512_add_ps(one, qmm_z_load16(c->modulation, t, k, m)), t);
            a = qmm_z_round_to(_mm512_mul_ps(a, mm), t);
        }
        qmm_z_store16((char *)out + (size_t)k * es, t, m, a);
    }
}

const qmm_input_stage_row_fn qmm_input_stage_row_avx512_ptr = stage_row_avx512;
