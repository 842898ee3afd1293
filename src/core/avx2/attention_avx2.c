/*
 * attention_avx2.c — the frame's attention softmax ukernels for AVX2 + FMA (no F16C: f16 masks
 * are converted one by one, numerics.h), one per P kind it serves (qmm_attn_softmax_fn,
 * attention.h; declared in ukernels.h): f32 (avx2_f32) and u8 (avx_vnni's int8 mode). A group of
 * 1..16 score rows of a key block (nk a multiple of 8, <= 64) → per row the block max bm and
 * P = 2^(s − bm) as f32 or u8 (round(255 · 2^(s − bm))), Σ P from the f32 values before rounding
 * (u8: / 255), and the rows' online-softmax state (m, l, α, ps) updated, 8 rows per register.
 * The same numbers as attention_avx512.c's (its mask rules, its exp2 polynomials): bool false →
 * −inf; additive (base e) → s + mask·log2(e) in one FMA, kept finite where mask and s are; lanes
 * past nv −inf; a NaN score left by the mask → Σ NaN, P 0; every lane −inf → bm = −inf, P 0,
 * Σ 0.
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

/* the lanes of the block's 8·z.. keys below nv, per z */
static inline void live_lanes(int nz, int64_t nv, __m256 live[NZ_MAX]) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (int z = 0; z < nz; z++) {
        const int64_t n = nv - 8 * z;
        live[z] = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n > 8 ? 8 : n < 0 ? 0 : n)), lane));
    }
}

/* the block row's scores, lanes past nv −inf (live: live_lanes), masked → s[0..nz); returns
 * whether one is NaN */
static inline __attribute__((always_inline)) int masked_scores(const qmm_attn_call *c, const float *S, int nz, int64_t nv,
                                                               const __m256 live[NZ_MAX], const void *mask, __m256 s[NZ_MAX]) {
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    const int64_t ms3 = mask ? c->ms[3] : 0;
    for (int z = 0; z < nz; z++) {
        const int64_t n = nv - 8 * z;
        __m256 x = _mm256_blendv_ps(ninf, _mm256_loadu_ps(S + 8 * z), live[z]);
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
                x = _mm256_blendv_ps(x, y, live[z]);
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

/* u8 = 0: P f32; 1: u8; nz = nk / 8 (a constant: the row stays in registers); one row → P,
 * *sum; returns bm (−inf where every key is masked; *sum NaN where a score is NaN) */
static inline __attribute__((always_inline)) float softmax_n(const qmm_attn_call *c, const float *S, const int nz,
                                                             int64_t nv, const __m256 live[NZ_MAX], const void *mask,
                                                             void *P, float *sum, const int u8) {
    __m256 s[NZ_MAX];
    s[0] = _mm256_set1_ps(-INFINITY); /* nz >= 1; the compiler cannot see it where nz is not a constant */
    const int nan = masked_scores(c, S, nz, nv, live, mask, s);
    __m256 mx = s[0]; /* max(−inf, s[0]) */
    for (int z = 1; z < nz; z++) mx = _mm256_max_ps(mx, s[z]);
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
        acc = z ? _mm256_add_ps(acc, e) : e; /* 0 + e: e (never −0) */
        if (u8) store_u8x8((uint8_t *)P + 8 * z, e);
        else _mm256_storeu_ps((float *)P + 8 * z, e);
    }
    const float t = hsum8(acc);
    *sum = u8 ? t * (1.0f / 255.0f) : t;
    return bm;
}

/* attention.h's E(x) for x <= 0: n = −trunc(0.5 − x), q(x − n) in Horner form without FMA, times
 * 2^n; 0 where x < −126 or x is −inf */
static inline __m256 exp2_state(__m256 x) {
    const __m256i n = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_cvttps_epi32(_mm256_sub_ps(_mm256_set1_ps(0.5f), x)));
    const __m256 f = _mm256_sub_ps(x, _mm256_cvtepi32_ps(n));
    __m256 q = _mm256_set1_ps(0.001326697994954884f);
    q = _mm256_add_ps(_mm256_mul_ps(q, f), _mm256_set1_ps(0.009675469249486923f));
    q = _mm256_add_ps(_mm256_mul_ps(q, f), _mm256_set1_ps(0.05550742521882057f));
    q = _mm256_add_ps(_mm256_mul_ps(q, f), _mm256_set1_ps(0.24022121727466583f));
    q = _mm256_add_ps(_mm256_mul_ps(q, f), _mm256_set1_ps(0.6931469440460205f));
    q = _mm256_add_ps(_mm256_mul_ps(q, f), _mm256_set1_ps(1.0000001192092896f));
    const __m256 p2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n, _mm256_set1_epi32(127)), 23));
    return _mm256_and_ps(_mm256_cmp_ps(x, _mm256_set1_ps(-126.0f), _CMP_GE_OQ), _mm256_mul_ps(q, p2));
}

/* the state of 8 rows from their block max bm and Σ P (attention.h); the lanes past the group's
 * rows are computed on the caller's padding and not stored */
static inline void row_state8(int rows, const float *bm_, const float *sum_, float *m, float *l, float *alpha, float *ps) {
    const __m256i live = _mm256_cmpgt_epi32(_mm256_set1_epi32(rows), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    const __m256 one = _mm256_set1_ps(1.0f), bm = _mm256_loadu_ps(bm_), sum = _mm256_loadu_ps(sum_);
    const __m256 vm = _mm256_maskload_ps(m, live), vl = _mm256_maskload_ps(l, live);
    const __m256 nan = _mm256_or_ps(_mm256_cmp_ps(sum, sum, _CMP_UNORD_Q), _mm256_cmp_ps(vl, vl, _CMP_UNORD_Q));
    const __m256 add = _mm256_andnot_ps(nan, _mm256_cmp_ps(bm, _mm256_set1_ps(-INFINITY), _CMP_GT_OQ));
    const __m256 mn = _mm256_max_ps(bm, vm); /* bm > m ? bm : m */
    /* E(m − m') where m' = bm, E(bm − m') where m' = m: E of the smaller minus m' */
    const __m256 e = exp2_state(_mm256_sub_ps(_mm256_min_ps(bm, vm), mn));
    const __m256 a = _mm256_blendv_ps(e, one, _mm256_cmp_ps(mn, vm, _CMP_EQ_OQ));
    const __m256 f = _mm256_blendv_ps(e, one, _mm256_cmp_ps(bm, mn, _CMP_EQ_OQ));
    const __m256 ln = _mm256_add_ps(_mm256_mul_ps(vl, a), _mm256_mul_ps(f, sum));
    _mm256_maskstore_ps(l, live, _mm256_blendv_ps(_mm256_blendv_ps(vl, ln, add), _mm256_set1_ps(NAN), nan));
    _mm256_maskstore_ps(m, live, _mm256_blendv_ps(vm, mn, add));
    _mm256_maskstore_ps(alpha, live, _mm256_blendv_ps(one, a, add));
    _mm256_maskstore_ps(ps, live, _mm256_and_ps(add, f));
}

/* rows (1..16) of nz · 8 keys: each row's P and Σ, then the rows' state */
static inline __attribute__((always_inline)) void softmax_rows_n(const qmm_attn_call *c, int rows, const float *S,
                                                                 const int nz, int64_t nv, const void *mask, void *P,
                                                                 float *m, float *l, float *alpha, float *ps,
                                                                 const int u8) {
    float bm[16] = {0}, sum[16] = {0};
    const int64_t prow = 8 * nz * (u8 ? 1 : 4);
    __m256 live[NZ_MAX];
    live_lanes(nz, nv, live);
    if (!mask) {
        for (int i = 0; i < rows; i++) bm[i] = softmax_n(c, S + i * 8 * nz, nz, nv, live, NULL, (char *)P + i * prow, &sum[i], u8);
    } else {
        const int64_t mrow = c->ms[2] * (int64_t)qmm_dtype_size(c->mask_dtype);
        for (int i = 0; i < rows; i++)
            bm[i] = softmax_n(c, S + i * 8 * nz, nz, nv, live, (const char *)mask + i * mrow, (char *)P + i * prow, &sum[i], u8);
    }
    for (int r = 0; r < rows; r += 8) row_state8(rows - r, bm + r, sum + r, m + r, l + r, alpha + r, ps + r);
}

static inline __attribute__((always_inline)) void softmax_k(const qmm_attn_call *c, int rows, const float *S, int64_t nk,
                                                            int64_t nv, const void *mask, void *P, float *m, float *l,
                                                            float *alpha, float *ps, const int u8) {
    switch (nk) {
    case 64: softmax_rows_n(c, rows, S, 8, nv, mask, P, m, l, alpha, ps, u8); break;
    case 32: softmax_rows_n(c, rows, S, 4, nv, mask, P, m, l, alpha, ps, u8); break;
    case 16: softmax_rows_n(c, rows, S, 2, nv, mask, P, m, l, alpha, ps, u8); break;
    default: softmax_rows_n(c, rows, S, (int)(nk / 8), nv, mask, P, m, l, alpha, ps, u8); break;
    }
}

void qmm_attn_softmax_f32__avx2(const qmm_attn_call *c, int rows, const float *S, int64_t nk, int64_t nv,
                                const void *mask, void *P, float *m, float *l, float *alpha, float *ps) {
    softmax_k(c, rows, S, nk, nv, mask, P, m, l, alpha, ps, 0);
}

void qmm_attn_softmax_u8__avx2(const qmm_attn_call *c, int rows, const float *S, int64_t nk, int64_t nv,
                               const void *mask, void *P, float *m, float *l, float *alpha, float *ps) {
    softmax_k(c, rows, S, nk, nv, mask, P, m, l, alpha, ps, 1);
}
