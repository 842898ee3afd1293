/*
 * attention_avx2.c — the frame's attention softmax ukernels for AVX2 + FMA (no F16C: f16 masks
 * are converted one by one, numerics.h), one per P kind it serves (qmm_attn_softmax_fn,
 * attention.h; declared in ukernels.h): f32 (avx2_f32) and u8 (avx_vnni's int8 mode). A group of
 * 1..16 score rows of a key block (nk a multiple of 8, <= 64) → per row the block max bm and
 * P = 2^(s − bm) as f32 or u8 (attention.h's U), Σ P (f32: from the f32 values; u8: the integer
 * sum / 255; two passes over the rows: their maxima in one network per 8 rows, then each row's
 * P), and the rows' online-softmax state (m, l, α, ps) updated, 8 rows per register.
 * The same numbers as attention_avx512.c's (its mask rules, its exp2 polynomials; the u8 P and
 * its state bit for bit): bool false → −inf; additive (base e) → s + mask·log2(e) in one FMA,
 * kept finite where mask and s are; lanes past nv −inf; a NaN score left by the mask → Σ NaN,
 * P 0 (u8: also bm = +inf); every lane −inf → bm = −inf, P 0, Σ 0.
 */
#include "attention.h"
#include "numerics.h"
#include "simd_avx2.h"
#include "ukernels.h"

#include <float.h>
#include <math.h>
#include <string.h>

#define NZ_MAX 8 /* 64 keys */

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
    for (int z = 0; z < nz; z += 2) /* unordered: either is NaN */
        nan = _mm256_or_ps(nan, _mm256_cmp_ps(s[z], s[z + 1 < nz ? z + 1 : z], _CMP_UNORD_Q));
    return _mm256_movemask_ps(nan) != 0;
}

/* 2^x for x <= 0, −inf (0) or NaN (NaN): 2^n · q(x − n), n = round(x) */
static inline __m256 exp2_1(__m256 x) {
    const __m256 n = _mm256_round_ps(x, QMM_Y_RNE), f = _mm256_sub_ps(x, n);
    __m256 q = _mm256_set1_ps(QMM_ATTN_E_C5);
    q = _mm256_fmadd_ps(q, f, _mm256_set1_ps(QMM_ATTN_E_C4));
    q = _mm256_fmadd_ps(q, f, _mm256_set1_ps(QMM_ATTN_E_C3));
    q = _mm256_fmadd_ps(q, f, _mm256_set1_ps(QMM_ATTN_E_C2));
    q = _mm256_fmadd_ps(q, f, _mm256_set1_ps(QMM_ATTN_E_C1));
    q = _mm256_fmadd_ps(q, f, _mm256_set1_ps(QMM_ATTN_E_C0));
    /* below 2^-126 (and −inf): 0; n in [-126, 0] elsewhere (a NaN x: q NaN) */
    const __m256 keep = _mm256_cmp_ps(x, _mm256_set1_ps(-126.0f), _CMP_NLT_UQ);
    const __m256 p2 = qmm_y_pow2i(_mm256_cvtps_epi32(_mm256_max_ps(n, _mm256_set1_ps(-126.0f))));
    return _mm256_and_ps(keep, _mm256_mul_ps(q, p2));
}

/* the row's block max from its masked scores */
static inline __attribute__((always_inline)) float max_of(const __m256 s[NZ_MAX], int nz) {
    __m256 mx = s[0]; /* max(−inf, s[0]) */
    for (int z = 1; z < nz; z++) mx = _mm256_max_ps(mx, s[z]);
    return hmax8(mx);
}

/* one row of nz · 8 keys → P f32, *sum; returns bm (−inf where every key is masked; *sum NaN
 * where a score is NaN) */
static inline __attribute__((always_inline)) float softmax_f32_n(const qmm_attn_call *c, const float *S, const int nz,
                                                                 int64_t nv, const __m256 live[NZ_MAX], const void *mask,
                                                                 float *P, float *sum) {
    __m256 s[NZ_MAX];
    s[0] = _mm256_set1_ps(-INFINITY); /* nz >= 1; the compiler cannot see it where nz is not a constant */
    const int nan = masked_scores(c, S, nz, nv, live, mask, s);
    const float bm = max_of(s, nz);
    if (nan || !(bm > -INFINITY)) { /* a NaN score, or every key masked: P 0 */
        for (int z = 0; z < nz; z++) _mm256_storeu_ps(P + 8 * z, _mm256_setzero_ps());
        *sum = nan ? NAN : 0.0f;
        return nan ? bm : -INFINITY;
    }
    const __m256 vb = _mm256_set1_ps(bm);
    __m256 acc = _mm256_setzero_ps();
    for (int z = 0; z < nz; z++) {
        const __m256 e = exp2_1(_mm256_sub_ps(s[z], vb));
        acc = z ? _mm256_add_ps(acc, e) : e; /* 0 + e: e (never −0) */
        _mm256_storeu_ps(P + 8 * z, e);
    }
    *sum = hsum8(acc);
    return bm;
}

/* attention.h's U of 8 lanes x − bm (x <= bm or −inf), as 8 int32 */
static inline __m256i u8_p(__m256 x, __m256 vb) {
    /* x' + (1.5 · 2^23 + 128) (even): n + 128 in its low bits (x' rounded to nearest even), 2^(n + 1) by
     * shifting them into the exponent; the coefficients halved, so q/2 · 2^(n + 1) is U's q · 2^n, bit for bit */
    const __m256 magic = _mm256_set1_ps(12583040.0f);
    const __m256 xc = _mm256_max_ps(_mm256_sub_ps(x, vb), _mm256_set1_ps(QMM_ATTN_U8_XMIN)); /* −inf → −16 */
    const __m256 t = _mm256_add_ps(xc, magic);
    const __m256 f = _mm256_sub_ps(xc, _mm256_sub_ps(t, magic));
    __m256 q = _mm256_fmadd_ps(_mm256_set1_ps(0.5f * QMM_ATTN_U8_C3), f, _mm256_set1_ps(0.5f * QMM_ATTN_U8_C2));
    q = _mm256_fmadd_ps(q, f, _mm256_set1_ps(0.5f * QMM_ATTN_U8_C1));
    q = _mm256_fmadd_ps(q, f, _mm256_set1_ps(0.5f * QMM_ATTN_U8_C0));
    const __m256 p2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_castps_si256(t), 23));
    return _mm256_cvtps_epi32(_mm256_mul_ps(q, p2)); /* exact product, rounded to nearest even */
}

/* the maxima of rows (1..8): lane i the max of the 8 lanes of r[i] (r[rows] −inf where rows is
 * odd); a network over the rows in place of one reduction per row */
static inline __m256 rows_max8(int rows, const __m256 r[8]) {
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    __m256 x[4], w[2];
    /* x[p]: row 2p in the low 128 bits, row 2p + 1 in the high (4 values each); −inf past the rows */
    for (int p = 0; p < 4; p++)
        x[p] = 2 * p < rows ? _mm256_max_ps(_mm256_permute2f128_ps(r[2 * p], r[2 * p + 1], 0x20),
                                            _mm256_permute2f128_ps(r[2 * p], r[2 * p + 1], 0x31))
                            : ninf;
    /* w[q]: low 128 bits rows 4q, 4q + 2 in elements 0, 1; high: rows 4q + 1, 4q + 3 */
    for (int q = 0; q < 2; q++) {
        const __m256 t = _mm256_max_ps(_mm256_unpacklo_ps(x[2 * q], x[2 * q + 1]), _mm256_unpackhi_ps(x[2 * q], x[2 * q + 1]));
        w[q] = 4 * q < rows ? _mm256_max_ps(t, _mm256_permute_ps(t, 0x4e)) : ninf;
    }
    /* rows 0, 2, 4, 6, 1, 3, 5, 7 → lane i row i */
    return _mm256_permutevar8x32_ps(_mm256_shuffle_ps(w[0], w[1], 0x44), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* one row's masked scores s[0..nz) → the lanes' max of its vectors (*mv); whether one is NaN;
 * with a mask the scores are kept in ms for the second pass */
static inline __attribute__((always_inline)) int u8_row_max(const qmm_attn_call *c, const float *S, const int nz, int64_t nv,
                                                            const __m256 live[NZ_MAX], const void *mask, float *ms, __m256 *mv) {
    __m256 s[NZ_MAX];
    s[0] = _mm256_set1_ps(-INFINITY);
    const int nan = masked_scores(c, S, nz, nv, live, mask, s);
    if (mask)
        for (int z = 0; z < nz; z++) _mm256_store_ps(ms + 8 * z, s[z]);
    __m256 v = s[0];
    for (int z = 1; z < nz; z++) v = _mm256_max_ps(v, s[z]);
    *mv = v;
    return nan;
}

/* one row of nz · 8 keys (s: its masked scores, vb: its block max, finite, in every lane) → P u8
 * (attention.h's U); returns Σ P */
static inline __attribute__((always_inline)) int32_t softmax_u8_row(const __m256 s[NZ_MAX], const int nz, __m256 vb, uint8_t *P) {
    const __m256i zero = _mm256_setzero_si256(), idx = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    __m256i sad = zero;
    for (int z0 = 0; z0 < nz; z0 += 4) { /* 32 keys: 128-bit lane L of the packed bytes holds dwords (keys 8z + 4L..),
                                          * z = 0..3; the permutation puts dword 4L + z at 2z + L */
        __m256i pi[4];
        for (int z = 0; z < 4; z++) pi[z] = z0 + z < nz ? u8_p(s[z0 + z], vb) : zero;
        const __m256i b = _mm256_packus_epi16(_mm256_packus_epi32(pi[0], pi[1]), _mm256_packus_epi32(pi[2], pi[3]));
        sad = _mm256_add_epi64(sad, _mm256_sad_epu8(b, zero));
        const __m256i o = _mm256_permutevar8x32_epi32(b, idx);
        if (nz - z0 >= 4) {
            _mm256_storeu_si256((__m256i *)(P + 8 * z0), o);
        } else {
            uint8_t tmp[32];
            _mm256_storeu_si256((__m256i *)tmp, o);
            memcpy(P + 8 * z0, tmp, (size_t)(8 * (nz - z0)));
        }
    }
    /* 4 qword sums (< 2^14, high dwords 0) → the low dword the row's sum */
    const __m128i h = _mm_add_epi64(_mm256_castsi256_si128(sad), _mm256_extracti128_si256(sad, 1));
    return _mm_cvtsi128_si32(_mm_add_epi64(h, _mm_unpackhi_epi64(h, h)));
}

/* u8 P of rows (1..16) of nz · 8 keys in two passes: each row's masked scores and the lanes' max,
 * the block maxima of 8 rows in one network (bm[i]), then each row's P from its scores again (S,
 * or ms where a mask applies): isum[i] = Σ P, nanr[i] whether it is a NaN row (a NaN score or
 * bm = +inf: P 0 there); every key masked: bm = −inf, P 0, Σ 0 */
static inline __attribute__((always_inline)) void softmax_u8_rows(const qmm_attn_call *c, int rows, const float *S, const int nz,
                                                                  int64_t nv, const __m256 live[NZ_MAX], const void *mask,
                                                                  uint8_t *P, float *bm, int32_t *isum, int32_t *nanr) {
    const int64_t prow = 8 * nz;
    _Alignas(32) float ms[16][8 * NZ_MAX];
    __m256 rm[16];
    unsigned nan = 0;
    if (!mask) { /* (mask a constant NULL in masked_scores) */
        for (int i = 0; i < rows; i++) nan |= (unsigned)u8_row_max(c, S + i * prow, nz, nv, live, NULL, NULL, &rm[i]) << i;
    } else {
        const int64_t mrow = c->ms[2] * (int64_t)qmm_dtype_size(c->mask_dtype);
        for (int i = 0; i < rows; i++)
            nan |= (unsigned)u8_row_max(c, S + i * prow, nz, nv, live, (const char *)mask + i * mrow, ms[i], &rm[i]) << i;
    }
    if (rows & 1) rm[rows] = _mm256_set1_ps(-INFINITY);
    __m256 bmv[2];
    unsigned skip = nan;
    for (int r = 0; r < rows; r += 8) {
        bmv[r / 8] = rows_max8(rows - r < 8 ? rows - r : 8, rm + r);
        _mm256_storeu_ps(bm + r, bmv[r / 8]);
        /* +inf: a NaN row; not above −inf: every key masked (or a NaN row) */
        nan |= (unsigned)_mm256_movemask_ps(_mm256_cmp_ps(bmv[r / 8], _mm256_set1_ps(INFINITY), _CMP_EQ_OQ)) << r;
        skip |= (unsigned)_mm256_movemask_ps(_mm256_cmp_ps(bmv[r / 8], _mm256_set1_ps(-INFINITY), _CMP_NGT_UQ)) << r;
    }
    skip |= nan;
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    for (int i = 0; i < rows; i++) {
        uint8_t *Pi = P + i * prow;
        nanr[i] = (int32_t)(nan >> i & 1);
        if (skip >> i & 1) {
            memset(Pi, 0, (size_t)prow);
            isum[i] = 0;
            continue;
        }
        __m256 s[NZ_MAX];
        for (int z = 0; z < nz; z++)
            s[z] = mask ? _mm256_load_ps(ms[i] + 8 * z) : _mm256_blendv_ps(ninf, _mm256_loadu_ps(S + i * prow + 8 * z), live[z]);
        isum[i] = softmax_u8_row(s, nz, _mm256_permutevar8x32_ps(bmv[i / 8], _mm256_set1_epi32(i & 7)), Pi);
    }
}

/* attention.h's E(x) for x <= 0: n = −trunc(0.5 − x), q(x − n) in Horner form without FMA, times
 * 2^n; 0 where x < −126 or x is −inf */
static inline __m256 exp2_state(__m256 x) {
    const __m256i n = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_cvttps_epi32(_mm256_sub_ps(_mm256_set1_ps(0.5f), x)));
    const __m256 f = _mm256_sub_ps(x, _mm256_cvtepi32_ps(n));
    __m256 q = _mm256_set1_ps(QMM_ATTN_E_C5);
    q = _mm256_add_ps(_mm256_mul_ps(q, f), _mm256_set1_ps(QMM_ATTN_E_C4));
    q = _mm256_add_ps(_mm256_mul_ps(q, f), _mm256_set1_ps(QMM_ATTN_E_C3));
    q = _mm256_add_ps(_mm256_mul_ps(q, f), _mm256_set1_ps(QMM_ATTN_E_C2));
    q = _mm256_add_ps(_mm256_mul_ps(q, f), _mm256_set1_ps(QMM_ATTN_E_C1));
    q = _mm256_add_ps(_mm256_mul_ps(q, f), _mm256_set1_ps(QMM_ATTN_E_C0));
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
    int32_t isum[16] = {0}, nanr[16] = {0}; /* u8: Σ P, whether a NaN row */
    const int64_t prow = 8 * nz * (u8 ? 1 : 4);
    __m256 live[NZ_MAX];
    live_lanes(nz, nv, live);
    if (u8) {
        softmax_u8_rows(c, rows, S, nz, nv, live, mask, (uint8_t *)P, bm, isum, nanr);
    } else if (!mask) { /* (mask a constant NULL in masked_scores) */
        for (int i = 0; i < rows; i++)
            bm[i] = softmax_f32_n(c, S + i * 8 * nz, nz, nv, live, NULL, (float *)((char *)P + i * prow), &sum[i]);
    } else {
        const int64_t mrow = c->ms[2] * (int64_t)qmm_dtype_size(c->mask_dtype);
        for (int i = 0; i < rows; i++)
            bm[i] = softmax_f32_n(c, S + i * 8 * nz, nz, nv, live, (const char *)mask + i * mrow,
                                  (float *)((char *)P + i * prow), &sum[i]);
    }
    if (u8) /* Σ = (float)Σ P · (1/255), NaN on the NaN rows */
        for (int r = 0; r < rows; r += 8) {
            const __m256 su = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_loadu_si256((const __m256i *)(isum + r))),
                                            _mm256_set1_ps(1.0f / 255.0f));
            const __m256i nr = _mm256_loadu_si256((const __m256i *)(nanr + r));
            const __m256 nan = _mm256_castsi256_ps(_mm256_cmpgt_epi32(nr, _mm256_setzero_si256()));
            _mm256_storeu_ps(sum + r, _mm256_blendv_ps(su, _mm256_set1_ps(NAN), nan));
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
