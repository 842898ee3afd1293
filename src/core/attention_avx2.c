/*
 * attention_avx2.c — the frame's attention softmax ukernels for AVX2 + FMA (no F16C: f16 masks
 * are converted one by one, numerics.h), one per P kind it serves (qmm_attn_softmax_fn,
 * attention.h; declared in ukernels.h): f32 (avx2_f32) and u8 (avx_vnni's int8 mode). One score
 * row of a key block (nk a multiple of 8, <= 64) in base 2 → the block max bm and P = 2^(s − bm)
 * as f32 or u8 (round(255 · 2^(s − bm))); *sum = Σ P from the f32 values before rounding
 * (u8: / 255). The same numbers as attention_avx512.c's (its mask rules, its exp2 polynomial):
 * bool false → −inf; additive (base e) → s + mask·log2(e) in one FMA, kept finite where mask and
 * s are; lanes past nv −inf; a NaN score left by the mask → *sum NaN, P 0; every lane −inf →
 * bm = −inf, P 0, *sum 0.
 */
#include "attention.h"
#include "numerics.h"
#include "simd_avx2.h"
#include "ukernels.h"

#include <float.h>
#include <math.h>

#define NZ_MAX 8 /* 64 keys */

/* k · 2^x for x <= 0, −inf (0) or NaN (NaN): 2^n · q(x − n), n = round(x) */
static inline __m256 exp2_k(__m256 x, float k) {
    const __m256 n = _mm256_round_ps(x, QMM_Y_RNE), f = _mm256_sub_ps(x, n);
    __m256 q = _mm256_set1_ps(k * 0.001326697994954884f);
    q = _mm256_fmadd_ps(q, f, _mm256_set1_ps(k * 0.009675469249486923f));
    q = _mm256_fmadd_ps(q, f, _mm256_set1_ps(k * 0.05550742521882057f));
    q = _mm256_fmadd_ps(q, f, _mm256_set1_ps(k * 0.24022121727466583f));
    q = _mm256_fmadd_ps(q, f, _mm256_set1_ps(k * 0.6931469440460205f));
    q = _mm256_fmadd_ps(q, f, _mm256_set1_ps(k * 1.0000001192092896f));
    /* below 2^-126 (and −inf): 0; n in [-126, 0] elsewhere (a NaN x: q NaN) */
    const __m256 keep = _mm256_cmp_ps(x, _mm256_set1_ps(-126.0f), _CMP_NLT_UQ);
    const __m256 p2 = qmm_y_pow2i(_mm256_cvtps_epi32(_mm256_max_ps(n, _mm256_set1_ps(-126.0f))));
    return _mm256_and_ps(keep, _mm256_mul_ps(q, p2));
}

static inline float hmax8(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
}

static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

/* the block row's scores, lanes past nv −inf, masked → s[0..nz); returns whether one is NaN */
static inline __attribute__((always_inline)) int masked_scores(const qmm_attn_call *c, const float *S, int nz, int64_t nv, const void *mask,
                                __m256 s[NZ_MAX]) {
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const int64_t ms3 = mask ? c->ms[3] : 0;
    for (int z = 0; z < nz; z++) {
        const int64_t n = nv - 8 * z;
        const __m256 live = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n > 8 ? 8 : n < 0 ? 0 : n)), lane));
        __m256 x = _mm256_blendv_ps(ninf, _mm256_loadu_ps(S + 8 * z), live);
        if (mask && n > 0) {
            if (c->mask_dtype == QMM_U8) { /* false → −inf */
                const uint8_t *r = (const uint8_t *)mask + 8 * z * ms3;
                int32_t dead[8];
                for (int e = 0; e < 8; e++) dead[e] = e < n && !r[e * ms3] ? -1 : 0;
                x = _mm256_blendv_ps(x, ninf, _mm256_castsi256_ps(_mm256_loadu_si256((const __m256i *)dead)));
            } else { /* + mask·log2(e), finite where both are */
                __m256 add;
                if (ms3 == 1 && n >= 8 && c->mask_dtype == QMM_F32) {
                    add = _mm256_loadu_ps((const float *)mask + 8 * z);
                } else {
                    float a[8];
                    for (int e = 0; e < 8; e++) a[e] = e < n ? qmm_load_f(mask, c->mask_dtype, (8 * z + e) * ms3) : 0.0f;
                    add = _mm256_loadu_ps(a);
                }
                const __m256 fin = _mm256_and_ps(_mm256_cmp_ps(add, ninf, _CMP_NEQ_UQ), _mm256_cmp_ps(x, ninf, _CMP_NEQ_UQ));
                __m256 y = _mm256_fmadd_ps(add, _mm256_set1_ps(1.44269504088896341f), x);
                y = _mm256_blendv_ps(y, _mm256_max_ps(_mm256_set1_ps(-FLT_MAX), y), fin); /* max keeps a NaN y */
                x = _mm256_blendv_ps(x, y, live);
            }
        }
        s[z] = x;
    }
    __m256 nan = _mm256_setzero_ps();
    for (int z = 0; z < nz; z++) nan = _mm256_or_ps(nan, _mm256_cmp_ps(s[z], s[z], _CMP_UNORD_Q));
    return _mm256_movemask_ps(nan) != 0;
}

/* 8 f32 values in [0, 255.x] → 8 u8 (nearest even; NaN → 0) */
static inline void store_u8x8(uint8_t *p, __m256 e) {
    const __m256i i = _mm256_cvtps_epi32(e);
    const __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(i), _mm256_extracti128_si256(i, 1));
    _mm_storel_epi64((__m128i *)p, _mm_packus_epi16(w, w));
}

/* u8 = 0: P f32; 1: u8; nz = nk / 8 (a constant: the row stays in registers) */
static inline __attribute__((always_inline)) float softmax_n(const qmm_attn_call *c, const float *S, const int nz,
                                                             int64_t nv, const void *mask, void *P, float *sum,
                                                             const int u8) {
    __m256 s[NZ_MAX];
    const int nan = masked_scores(c, S, nz, nv, mask, s);
    __m256 mx = _mm256_set1_ps(-INFINITY);
    for (int z = 0; z < nz; z++) mx = _mm256_max_ps(mx, s[z]);
    const float bm = hmax8(mx);
    if (nan || !(bm > -INFINITY)) { /* a NaN score, or every key masked: P 0 */
        for (int z = 0; z < nz; z++) {
            if (u8) _mm_storel_epi64((__m128i *)((uint8_t *)P + 8 * z), _mm_setzero_si128());
            else _mm256_storeu_ps((float *)P + 8 * z, _mm256_setzero_ps());
        }
        *sum = nan ? NAN : 0.0f;
        return nan ? bm : -INFINITY;
    }
    const __m256 vb = _mm256_set1_ps(bm);
    __m256 acc = _mm256_setzero_ps();
    for (int z = 0; z < nz; z++) {
        const __m256 e = exp2_k(_mm256_sub_ps(s[z], vb), u8 ? 255.0f : 1.0f);
        acc = _mm256_add_ps(acc, e);
        if (u8) store_u8x8((uint8_t *)P + 8 * z, e);
        else _mm256_storeu_ps((float *)P + 8 * z, e);
    }
    const float t = hsum8(acc);
    *sum = u8 ? t * (1.0f / 255.0f) : t;
    return bm;
}

static inline __attribute__((always_inline)) float softmax_k(const qmm_attn_call *c, const float *S, int64_t nk,
                                                             int64_t nv, const void *mask, void *P, float *sum,
                                                             const int u8) {
    switch (nk) {
    case 64: return softmax_n(c, S, 8, nv, mask, P, sum, u8);
    case 32: return softmax_n(c, S, 4, nv, mask, P, sum, u8);
    case 16: return softmax_n(c, S, 2, nv, mask, P, sum, u8);
    default: return softmax_n(c, S, (int)(nk / 8), nv, mask, P, sum, u8);
    }
}

float qmm_attn_softmax_f32__avx2(const qmm_attn_call *c, const float *s, int64_t nk, int64_t j0, int64_t nv,
                                 const void *mask, void *P, float *sum) {
    (void)j0;
    return softmax_k(c, s, nk, nv, mask, P, sum, 0);
}

float qmm_attn_softmax_u8__avx2(const qmm_attn_call *c, const float *s, int64_t nk, int64_t j0, int64_t nv,
                                const void *mask, void *P, float *sum) {
    (void)j0;
    return softmax_k(c, s, nk, nv, mask, P, sum, 1);
}
