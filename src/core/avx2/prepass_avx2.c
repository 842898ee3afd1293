/*
 * prepass_avx2.c — the AVX2 (+FMA, F16C) activation pre-pass row kernel (SPEC §1 steps 1–3) for
 * CPUs without AVX-512, bit-identical to qmm_prepass_row_ref / qmm_amax_row_ref (numerics.h) for
 * every dtype, act and group size, including NaN / Inf / denormal inputs. It mirrors
 * prepass_avx512.c with 8 lanes:
 *
 *   pass 1, per 8 values (per group of g with convrot):
 *     x → f32 (bf16: shift; f16: vcvtph2ps with Inf/NaN lanes rebuilt by integer ops as
 *     qmm_f16_to_f32 does) → act (vector qmm_expf: the same fmas; rintf = vroundps RNE;
 *     ldexpf(y, n) = y · 2^(n>>1) · 2^(n - (n>>1)), two exact power-of-two products then one
 *     rounding, as ldexpf rounds once) rounded to T → radix-4 rotation (stride 1 inside each
 *     128-bit lane by vpermilps + blends, stride 4 across the halves of two ymm, 16 and 64 across
 *     ymm; the same butterflies as qmm_rotate_f32) → × 1/sqrt(g) → rounded to T (bf16: integer
 *     RNE as qmm_f32_to_bf16; f16: vcvtps2ph RNE and back) → a in tmp, max |a|.
 *   amax: a row holding a NaN takes the scalar qmm_amax_f32 over tmp (first NaN, as the reference).
 *   pass 2: q = clamp(rne_int(T(a / T(s))), -128, 127), NaN → 0, XOR flip (0, or 0x80: the u8
 *   form) after the saturating packs; columns K..qcols hold flip (the value of q = 0).
 *   Tails (K % 8 without rotation) use the scalar definitions element by element.
 *   The vector primitives are shared with the float engines' pre-pass: simd_avx2.h.
 */
#include "numerics.h"
#include "prepass.h"
#include "simd_avx2.h"

#include <immintrin.h>
#include <string.h>

/* ---------------------------------------------------------------- pass 1: a into tmp, amax */
static float act_rotate_amax(const void *x, qmm_dtype t, int64_t K, qmm_act act, int gs, float *tmp) {
    qmm_y_amax m;
    qmm_y_amax_init(&m);
    qmm_y_act_rotate(x, t, K, act, gs, 0, K, tmp, &m);
    if (m.scalar_nan || _mm256_movemask_ps(m.nan)) return qmm_amax_f32(tmp, K);
    float v = qmm_y_hmax8(m.vmax);
    return m.smax > v ? m.smax : v;
}

/* ---------------------------------------------------------------- the row kernels */
static void prepass_row_avx2(const void *x, qmm_dtype t, int64_t K, qmm_act act, int gs, const float *s_in, int8_t *q,
                             int64_t qcols, uint8_t flip, float *s_out, float *tmp) {
    float amax = act_rotate_amax(x, t, K, act, gs, tmp);
    float s = s_in ? *s_in : qmm_scale_of(amax);
    const float sT = qmm_quant_divisor(s, t);
    const __m256 vs = _mm256_set1_ps(sT);
    const __m256 lo = _mm256_set1_ps(-128.0f), hi = _mm256_set1_ps(127.0f);
    const __m128i vflip = _mm_set1_epi8((char)flip);
    int64_t k = 0;
    for (; k + 8 <= K; k += 8) {
        __m256 v = qmm_y_round_to(_mm256_div_ps(_mm256_loadu_ps(tmp + k), vs), t);
        __m256 ok = _mm256_cmp_ps(v, v, _CMP_ORD_Q);
        v = _mm256_min_ps(_mm256_max_ps(_mm256_round_ps(v, QMM_Y_RNE), lo), hi);
        __m256i i = _mm256_and_si256(_mm256_cvtps_epi32(v), _mm256_castps_si256(ok));
        __m128i w16 = _mm_packs_epi32(_mm256_castsi256_si128(i), _mm256_extracti128_si256(i, 1));
        _mm_storel_epi64((__m128i *)(q + k), _mm_xor_si128(_mm_packs_epi16(w16, w16), vflip));
    }
    for (; k < K; k++) {
        float v = qmm_round_to(tmp[k] / sT, t);
        if (v != v) { q[k] = (int8_t)flip; continue; }
        v = rintf(v);
        if (v > 127.0f) v = 127.0f;
        if (v < -128.0f) v = -128.0f;
        q[k] = (int8_t)((uint8_t)(int8_t)v ^ flip);
    }
    if (qcols > K) memset(q + K, flip, (size_t)(qcols - K));
    *s_out = s;
}

static float amax_row_avx2(const void *x, qmm_dtype t, int64_t K, qmm_act act, int gs, float *tmp) {
    return act_rotate_amax(x, t, K, act, gs, tmp);
}

const qmm_prepass_row_fn qmm_prepass_row_avx2_ptr = prepass_row_avx2;
const qmm_amax_row_fn qmm_amax_row_avx2_ptr = amax_row_avx2;
