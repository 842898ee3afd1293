/*
 * attention_avx512.c — the frame's attention softmax ukernels for AVX-512 (F/BW/VL/DQ), one per P
 * kind (qmm_attn_softmax_fn, attention.h; declared in ukernels.h): a group of 1..16 score rows
 * of a key block (nk a multiple of 16, <= 64) → per row the block max bm and P = 2^(s − bm) as
 * f32, bf16 (nearest even) or u8 (attention.h's U: about 255 · 2^(s − bm), an integer), Σ P
 * (f32, bf16: from the f32 values before rounding; u8: the integer sum / 255), and the rows'
 * online-softmax state (m, l, α, ps) updated, 16 rows in one register.
 *
 * Mask (the row's at key j0, keys c->ms[3] apart): bool (u8) false → −inf, whatever the score;
 * additive (f32, f16, bf16; base e) → s + mask·log2(e) in one FMA, kept finite where mask and s
 * are (an additive −FLT_MAX, torch's finfo.min, then stays a finite −FLT_MAX as it does in base e).
 * Lanes past nv are −inf whatever S holds. A NaN score left by the mask makes Σ NaN (P 0);
 * every lane −inf: bm = −inf, P 0, Σ 0.
 * exp2 of f32 and bf16 P: 2^n · q(x − n), n = round(x), q the degree-5 polynomial of 2^f on
 * |f| <= 1/2 (relative error 8e-8), FMA; 0 below 2^-126 and for −inf. u8 P: attention.h's U
 * (x clamped at −16, the degree-3 polynomial of 255 · 2^f, FMA, rounded to an integer; Σ the
 * integer sum of the row's P / 255); a row whose max is +inf is a NaN row. Every P kind in two
 * passes over the rows: their block maxima in one network over the group, then each row's P from
 * its scores loaded again (with a mask: the masked scores kept on the stack). exp2 of α and ps:
 * attention.h's E (the degree-5 polynomial without FMA).
 */
#include "attention.h"
#include "numerics.h"
#include "simd_avx512.h"
#include "ukernels.h"

#include <float.h>
#include <math.h>

static inline __mmask16 lanes16(int64_t n) { return n >= 16 ? (__mmask16)0xffff : n <= 0 ? 0 : (__mmask16)((1u << n) - 1u); }

/* 2^x for x <= 0, −inf (0) or NaN (NaN) */
static inline __m512 exp2_k(__m512 x) {
    const __m512 n = _mm512_roundscale_ps(x, QMM_Z_RNE), f = _mm512_sub_ps(x, n);
    __m512 q = _mm512_set1_ps(QMM_ATTN_E_C5);
    q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(QMM_ATTN_E_C4));
    q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(QMM_ATTN_E_C3));
    q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(QMM_ATTN_E_C2));
    q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(QMM_ATTN_E_C1));
    q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(QMM_ATTN_E_C0));
    const __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-126.0f), _CMP_NLT_UQ); /* not below, or NaN */
    return _mm512_maskz_scalef_ps(keep, q, n);
}

/* the block row's scores, lanes past nv −inf (kz[z]: the lanes below nv of s[z]), masked (see the
 * top) → s[0..nz); returns whether one is NaN */
static inline __attribute__((always_inline)) int masked_scores(const qmm_attn_call *c, const float *S, int nz, int64_t nv,
                                                               const __mmask16 kz[4], const void *mask, __m512 s[4]) {
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    for (int z = 0; z < nz; z++) s[z] = _mm512_mask_loadu_ps(ninf, kz[z], S + 16 * z);
    if (mask) {
        const int64_t ms3 = c->ms[3];
        if (c->mask_dtype == QMM_U8) {
            const uint8_t *r = mask;
            for (int z = 0; z < nz && nv > 16 * z; z++) {
                const __mmask16 mk = kz[z];
                __mmask16 attend;
                if (ms3 == 1) {
                    attend = _mm512_mask_test_epi32_mask(mk, _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(mk, r + 16 * z)),
                                                         _mm512_set1_epi32(0xff));
                } else {
                    attend = 0;
                    for (int e = 0; e < 16 && 16 * z + e < nv; e++)
                        if (r[(16 * z + e) * ms3]) attend |= (__mmask16)(1u << e);
                }
                s[z] = _mm512_mask_mov_ps(ninf, attend, s[z]);
            }
        } else {
            const __m512 l2e = _mm512_set1_ps(1.44269504088896341f), lo = _mm512_set1_ps(-FLT_MAX);
            for (int z = 0; z < nz && nv > 16 * z; z++) {
                const __mmask16 mk = kz[z];
                __m512 add;
                if (ms3 == 1) {
                    add = qmm_z_load16(mask, c->mask_dtype, 16 * z, mk);
                } else {
                    float tmp[16];
                    for (int e = 0; e < 16; e++)
                        tmp[e] = 16 * z + e < nv ? qmm_load_f(mask, c->mask_dtype, (16 * z + e) * ms3) : 0.0f;
                    add = _mm512_loadu_ps(tmp);
                }
                /* finite mask on a finite score: at least −FLT_MAX (max keeps a NaN: second operand) */
                const __mmask16 fin = _mm512_cmp_ps_mask(add, ninf, _CMP_NEQ_UQ) & _mm512_cmp_ps_mask(s[z], ninf, _CMP_NEQ_UQ);
                const __m512 x = _mm512_fmadd_ps(add, l2e, s[z]);
                s[z] = _mm512_mask_mov_ps(s[z], mk, _mm512_mask_max_ps(x, fin & mk, lo, x));
            }
        }
    }
    __mmask16 nan = 0; /* unordered: either is NaN */
    for (int z = 0; z < nz; z += 2) nan |= _mm512_cmp_ps_mask(s[z], s[z + 1 < nz ? z + 1 : z], _CMP_UNORD_Q);
    return nan != 0;
}

/* rows 4k..4k + 3 of sad[] (each 8 qword partial sums < 2^32) → per 128-bit lane L their sums
 * over qwords 2L, 2L + 1, as 4 dwords in row order */
static inline __m512i sum4(const __m512i *sad) {
    const __m512i p0 = _mm512_or_si512(sad[0], _mm512_slli_epi64(sad[1], 32)); /* dwords: row 0, row 1 per qword */
    const __m512i p1 = _mm512_or_si512(sad[2], _mm512_slli_epi64(sad[3], 32));
    return _mm512_add_epi32(_mm512_unpacklo_epi64(p0, p1), _mm512_unpackhi_epi64(p0, p1));
}

/* the rows' (1..16) sums of their 8 qword partial sums: lane i row i (sad[i] zero for i from rows
 * to rows rounded up to 8) */
static inline __m512i row_sums(int rows, const __m512i sad[16]) {
    const __m512i c0 = sum4(sad), c1 = sum4(sad + 4);
    const __m512i c2 = rows > 8 ? sum4(sad + 8) : _mm512_setzero_si512(), c3 = rows > 8 ? sum4(sad + 12) : _mm512_setzero_si512();
    /* the 128-bit lanes summed: [c0, c1, c2, c3] */
    const __m512i e0 = _mm512_add_epi32(_mm512_shuffle_i32x4(c0, c1, 0x44), _mm512_shuffle_i32x4(c0, c1, 0xee));
    const __m512i e1 = _mm512_add_epi32(_mm512_shuffle_i32x4(c2, c3, 0x44), _mm512_shuffle_i32x4(c2, c3, 0xee));
    return _mm512_add_epi32(_mm512_shuffle_i32x4(e0, e1, 0x88), _mm512_shuffle_i32x4(e0, e1, 0xdd));
}

/* the rows' (1..16) maxima: lane i the max of the 16 lanes of r[i] (r[rows] −inf where rows is
 * odd); a network over the group in place of one reduction per row */
static inline __m512 rows_max(int rows, const __m512 r[16]) {
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    __m512 x[8], y[4];
    /* x[p]: rows 2p, 2p + 1 in 128-bit lanes 0-1, 2-3 (8 values each); −inf past the rows */
    for (int p = 0; p < 8; p++)
        x[p] = 2 * p < rows ? _mm512_max_ps(_mm512_shuffle_f32x4(r[2 * p], r[2 * p + 1], 0x44),
                                            _mm512_shuffle_f32x4(r[2 * p], r[2 * p + 1], 0xee))
                            : ninf;
    /* y[q]: rows 4q .. 4q + 3 in 128-bit lanes 0 .. 3 (4 values each) */
    for (int q = 0; q < 4; q++)
        y[q] = 4 * q < rows ? _mm512_max_ps(_mm512_shuffle_f32x4(x[2 * q], x[2 * q + 1], 0x88),
                                            _mm512_shuffle_f32x4(x[2 * q], x[2 * q + 1], 0xdd))
                            : ninf;
    /* w: 128-bit lane k element 0 row k, element 1 row 4 + k (w1: rows 8 + k, 12 + k) */
    __m512 w0 = _mm512_max_ps(_mm512_unpacklo_ps(y[0], y[1]), _mm512_unpackhi_ps(y[0], y[1]));
    w0 = _mm512_max_ps(w0, _mm512_permute_ps(w0, 0x4e));
    const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 16, 20, 24, 28, 17, 21, 25, 29);
    if (rows <= 8) return _mm512_permutexvar_ps(idx, w0);
    __m512 w1 = _mm512_max_ps(_mm512_unpacklo_ps(y[2], y[3]), _mm512_unpackhi_ps(y[2], y[3]));
    w1 = _mm512_max_ps(w1, _mm512_permute_ps(w1, 0x4e));
    return _mm512_permutex2var_ps(w0, idx, w1);
}

/* one row's masked scores s[0..nz) (nz a constant, 1..4) → the lanes' max of its vectors; bit i
 * of the result whether one is NaN; with a mask the scores are kept in ms for the second pass */
static inline __attribute__((always_inline)) unsigned row_max_pass(const qmm_attn_call *c, const float *S, const int nz,
                                                                 int64_t nv, const __mmask16 kz[4], const void *mask,
                                                                 float *ms, int i, __m512 *mv) {
    __m512 s[4];
    const int nan = masked_scores(c, S, nz, nv, kz, mask, s);
    if (mask)
        for (int z = 0; z < nz; z++) _mm512_store_ps(ms + 16 * z, s[z]);
    __m512 v = s[0];
    for (int z = 1; z < nz; z++) v = _mm512_max_ps(v, s[z]);
    *mv = v;
    return (unsigned)nan << i;
}

/* one row of nz · 16 keys (nz a constant, 1..4; s: its masked scores, mv: its block max, finite,
 * in every lane) → P as u8 (attention.h's U), *sad Σ P in 8 qword parts */
static inline __attribute__((always_inline)) void softmax_u8_row(const __m512 s[4], const int nz, __m512 mv, uint8_t *P,
                                                                 __m512i *sad) {
    const __mmask64 store = nz == 4 ? ~(__mmask64)0 : (((__mmask64)1 << (16 * nz)) - 1);
    /* without U's clamp at −16: below it 2^n · q is below 2^-7 (0 after rounding, as U(−16)), and
     * x = −inf gives f NaN, a NaN product, the integer 0x80000000 and 0 after PACKUS */
    __m512i pi[4];
    for (int z = 0; z < 4; z++) {
        if (z >= nz) { pi[z] = _mm512_setzero_si512(); continue; }
        const __m512 x = _mm512_sub_ps(s[z], mv);
        const __m512 n = _mm512_roundscale_ps(x, QMM_Z_RNE), f = _mm512_sub_ps(x, n);
        __m512 q = _mm512_fmadd_ps(_mm512_set1_ps(QMM_ATTN_U8_C3), f, _mm512_set1_ps(QMM_ATTN_U8_C2));
        q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(QMM_ATTN_U8_C1));
        q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(QMM_ATTN_U8_C0));
        pi[z] = _mm512_cvtps_epi32(_mm512_scalef_ps(q, n)); /* 2^n · q exact, rounded to nearest even */
    }
    /* 128-bit lane L of the packed bytes holds dwords (keys 16z + 4L..) in the order z = 0..3:
     * the permutation puts dword 4L + z at 4z + L */
    const __m512i b = _mm512_packus_epi16(_mm512_packus_epi32(pi[0], pi[1]), _mm512_packus_epi32(pi[2], pi[3]));
    const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    _mm512_mask_storeu_epi8(P, store, _mm512_permutexvar_epi32(idx, b));
    *sad = _mm512_sad_epu8(b, _mm512_setzero_si512()); /* lanes past nz 0 */
}

/* u8 P of rows (1..16) of nz · 16 keys in two passes: each row's masked scores and the lanes'
 * max, the rows' block maxima in one network (lane i row i: *bmv), then each row's P from its
 * scores again (S, or ms where a mask applies) and Σ P (sad[i]); returns the NaN rows (a NaN
 * score, or bm = +inf: P 0 there); every key masked: P 0, Σ 0 */
static inline __attribute__((always_inline)) unsigned softmax_u8_rows(const qmm_attn_call *c, int rows, const float *S,
                                                                      const int nz, int64_t nv, const __mmask16 kz[4],
                                                                      const void *mask, uint8_t *P, __m512 *bmv,
                                                                      __m512i sad[16]) {
    const int64_t prow = 16 * nz;
    _Alignas(64) float ms[16][64];
    __m512 rm[16];
    unsigned nanrows = 0;
    if (!mask) {
        for (int i = 0; i < rows; i++) nanrows |= row_max_pass(c, S + i * prow, nz, nv, kz, NULL, NULL, i, &rm[i]);
    } else {
        const int64_t mrow = c->ms[2] * (int64_t)qmm_dtype_size(c->mask_dtype);
        for (int i = 0; i < rows; i++)
            nanrows |= row_max_pass(c, S + i * prow, nz, nv, kz, (const char *)mask + i * mrow, ms[i], i, &rm[i]);
    }
    if (rows & 1) rm[rows] = _mm512_set1_ps(-INFINITY);
    const __m512 bm = rows_max(rows, rm);
    *bmv = bm;
    /* +inf: a NaN row; not above −inf: every key masked (or a NaN row) */
    nanrows |= _mm512_cmp_ps_mask(bm, _mm512_set1_ps(INFINITY), _CMP_EQ_OQ) & lanes16(rows);
    const unsigned skip = nanrows | (unsigned)(~_mm512_cmp_ps_mask(bm, _mm512_set1_ps(-INFINITY), _CMP_GT_OQ) & 0xffffu);
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    for (int i = 0; i < rows; i++) {
        uint8_t *Pi = P + i * prow;
        if (skip >> i & 1) {
            const __mmask64 store = nz == 4 ? ~(__mmask64)0 : (((__mmask64)1 << (16 * nz)) - 1);
            _mm512_mask_storeu_epi8(Pi, store, _mm512_setzero_si512());
            sad[i] = _mm512_setzero_si512();
            continue;
        }
        __m512 s[4];
        if (!mask) for (int z = 0; z < nz; z++) s[z] = _mm512_mask_loadu_ps(ninf, kz[z], S + i * prow + 16 * z);
        else for (int z = 0; z < nz; z++) s[z] = _mm512_load_ps(ms[i] + 16 * z);
        softmax_u8_row(s, nz, _mm512_permutexvar_ps(_mm512_set1_epi32(i), bm), Pi, &sad[i]);
    }
    return nanrows;
}

/* kind: 0 f32, 1 bf16; rows (1..16) of nz · 16 keys (nz a constant) in two passes: each row's
 * masked scores and the max of its vectors, the rows' block maxima in one network, then each
 * row's P from its scores again (S, or ms where a mask applies): bm[i] (−inf where every key is
 * masked), sum[i] (NaN where a score is NaN; P 0 there) */
static inline __attribute__((always_inline)) void softmax_fb_rows(const qmm_attn_call *c, int rows, const float *S,
                                                                  const int nz, int64_t nv, const __mmask16 kz[4],
                                                                  const void *mask, void *P, float *bm, float *sum,
                                                                  const int kind) {
    const int64_t srow = 16 * nz, prow = 16 * nz * (4 >> kind);
    _Alignas(64) float ms[16][64];
    __m512 rm[16];
    unsigned nan = 0;
    if (!mask) {
        for (int i = 0; i < rows; i++) nan |= row_max_pass(c, S + i * srow, nz, nv, kz, NULL, NULL, i, &rm[i]);
    } else {
        const int64_t mrow = c->ms[2] * (int64_t)qmm_dtype_size(c->mask_dtype);
        for (int i = 0; i < rows; i++)
            nan |= row_max_pass(c, S + i * srow, nz, nv, kz, (const char *)mask + i * mrow, ms[i], i, &rm[i]);
    }
    if (rows & 1) rm[rows] = _mm512_set1_ps(-INFINITY);
    const __m512 bmv = rows_max(rows, rm);
    /* not above −inf: every key masked (or a NaN row) */
    const unsigned skip = nan | (unsigned)(~_mm512_cmp_ps_mask(bmv, _mm512_set1_ps(-INFINITY), _CMP_GT_OQ) & 0xffffu);
    _mm512_storeu_ps(bm, _mm512_mask_mov_ps(bmv, (__mmask16)(skip & ~nan), _mm512_set1_ps(-INFINITY)));
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    for (int i = 0; i < rows; i++) {
        char *Pi = (char *)P + i * prow;
        if (skip >> i & 1) { /* a NaN score, or every key masked: P 0 */
            for (int z = 0; z < nz; z++) {
                if (kind == 0) _mm512_storeu_ps((float *)Pi + 16 * z, _mm512_setzero_ps());
                else _mm256_storeu_si256((__m256i *)((uint16_t *)Pi + 16 * z), _mm256_setzero_si256());
            }
            sum[i] = nan >> i & 1 ? NAN : 0.0f;
            continue;
        }
        __m512 s[4];
        if (!mask) for (int z = 0; z < nz; z++) s[z] = _mm512_mask_loadu_ps(ninf, kz[z], S + i * srow + 16 * z);
        else for (int z = 0; z < nz; z++) s[z] = _mm512_load_ps(ms[i] + 16 * z);
        const __m512 vb = _mm512_permutexvar_ps(_mm512_set1_epi32(i), bmv);
        __m512 acc = _mm512_setzero_ps();
        for (int z = 0; z < nz; z++) {
            const __m512 e = exp2_k(_mm512_sub_ps(s[z], vb));
            acc = z ? _mm512_add_ps(acc, e) : e; /* 0 + e: e (never −0) */
            if (kind == 0) _mm512_storeu_ps((float *)Pi + 16 * z, e);
            else qmm_z_store16((uint16_t *)Pi + 16 * z, QMM_BF16, 0xffff, e);
        }
        sum[i] = _mm512_reduce_add_ps(acc); /* a NaN e (s = +inf = bm): NaN */
    }
}

/* attention.h's E(x) for x <= 0: n = −trunc(0.5 − x), q(x − n) in Horner form without FMA, times
 * 2^n; 0 where x < −126 or x is −inf */
static inline __m512 exp2_state(__m512 x) {
    const __m512i n = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_cvttps_epi32(_mm512_sub_ps(_mm512_set1_ps(0.5f), x)));
    const __m512 f = _mm512_sub_ps(x, _mm512_cvtepi32_ps(n));
    __m512 q = _mm512_set1_ps(QMM_ATTN_E_C5);
    q = _mm512_add_ps(_mm512_mul_ps(q, f), _mm512_set1_ps(QMM_ATTN_E_C4));
    q = _mm512_add_ps(_mm512_mul_ps(q, f), _mm512_set1_ps(QMM_ATTN_E_C3));
    q = _mm512_add_ps(_mm512_mul_ps(q, f), _mm512_set1_ps(QMM_ATTN_E_C2));
    q = _mm512_add_ps(_mm512_mul_ps(q, f), _mm512_set1_ps(QMM_ATTN_E_C1));
    q = _mm512_add_ps(_mm512_mul_ps(q, f), _mm512_set1_ps(QMM_ATTN_E_C0));
    const __m512 p2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n, _mm512_set1_epi32(127)), 23));
    return _mm512_maskz_mul_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(-126.0f), _CMP_GE_OQ), q, p2);
}

/* the state of rows (1..16) from their block max bm and Σ P (attention.h), lane i row i */
static inline void row_state_v(int rows, __m512 bm, __m512 sum, float *m, float *l, float *alpha, float *ps) {
    const __mmask16 k = lanes16(rows);
    const __m512 one = _mm512_set1_ps(1.0f);
    const __m512 vm = _mm512_maskz_loadu_ps(k, m), vl = _mm512_maskz_loadu_ps(k, l);
    const __mmask16 nan = _mm512_cmp_ps_mask(sum, sum, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(vl, vl, _CMP_UNORD_Q);
    const __mmask16 add = ~nan & _mm512_cmp_ps_mask(bm, _mm512_set1_ps(-INFINITY), _CMP_GT_OQ);
    const __m512 mn = _mm512_max_ps(bm, vm); /* bm > m ? bm : m */
    /* E(m − m') where m' = bm, E(bm − m') where m' = m: E of the smaller minus m' */
    const __m512 e = exp2_state(_mm512_sub_ps(_mm512_min_ps(bm, vm), mn));
    const __m512 a = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(mn, vm, _CMP_EQ_OQ), e, one);
    const __m512 f = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(bm, mn, _CMP_EQ_OQ), e, one);
    const __m512 ln = _mm512_add_ps(_mm512_mul_ps(vl, a), _mm512_mul_ps(f, sum));
    _mm512_mask_storeu_ps(l, k, _mm512_mask_blend_ps(nan, _mm512_mask_blend_ps(add, vl, ln), _mm512_set1_ps(NAN)));
    _mm512_mask_storeu_ps(m, k, _mm512_mask_blend_ps(add, vm, mn));
    _mm512_mask_storeu_ps(alpha, k, _mm512_mask_blend_ps(add, one, a));
    _mm512_mask_storeu_ps(ps, k, _mm512_maskz_mov_ps(add, f));
}

static inline void row_state(int rows, const float *bm, const float *sum, float *m, float *l, float *alpha, float *ps) {
    const __mmask16 k = lanes16(rows);
    row_state_v(rows, _mm512_maskz_loadu_ps(k, bm), _mm512_maskz_loadu_ps(k, sum), m, l, alpha, ps);
}

/* rows (1..16) of nz · 16 keys: each row's P and Σ, then the rows' state */
static inline __attribute__((always_inline)) void softmax_rows_n(const qmm_attn_call *c, int rows, const float *S,
                                                                 const int nz, int64_t nv, const void *mask, void *P,
                                                                 float *m, float *l, float *alpha, float *ps,
                                                                 const int kind) {
    float bm[16], sum[16];
    __mmask16 kz[4];
    for (int z = 0; z < nz; z++) kz[z] = lanes16(nv - 16 * z);
    if (kind == 2) { /* the rows' bm and Σ P gathered in lanes, Σ / 255 and the NaN rows' NaN in one vector */
        __m512 bmv;
        __m512i sad[16];
        const unsigned nanrows = softmax_u8_rows(c, rows, S, nz, nv, kz, mask, (uint8_t *)P, &bmv, sad);
        for (int i = rows; i < (rows > 8 ? 16 : 8); i++) sad[i] = _mm512_setzero_si512();
        /* (float) of exact integers, times 1/255 */
        const __m512 su = _mm512_mul_ps(_mm512_cvtepi32_ps(row_sums(rows, sad)), _mm512_set1_ps(1.0f / 255.0f));
        row_state_v(rows, bmv, _mm512_mask_mov_ps(su, (__mmask16)nanrows, _mm512_set1_ps(NAN)), m, l, alpha, ps);
        return;
    }
    softmax_fb_rows(c, rows, S, nz, nv, kz, mask, P, bm, sum, kind);
    row_state(rows, bm, sum, m, l, alpha, ps);
}

static inline __attribute__((always_inline)) void softmax_k(const qmm_attn_call *c, int rows, const float *S, int64_t nk,
                                                            int64_t nv, const void *mask, void *P, float *m, float *l,
                                                            float *alpha, float *ps, const int kind) {
    switch (nk) {
    case 64: softmax_rows_n(c, rows, S, 4, nv, mask, P, m, l, alpha, ps, kind); break;
    case 48: softmax_rows_n(c, rows, S, 3, nv, mask, P, m, l, alpha, ps, kind); break;
    case 32: softmax_rows_n(c, rows, S, 2, nv, mask, P, m, l, alpha, ps, kind); break;
    default: softmax_rows_n(c, rows, S, 1, nv, mask, P, m, l, alpha, ps, kind); break;
    }
}

void qmm_attn_softmax_f32__avx512(const qmm_attn_call *c, int rows, const float *S, int64_t nk, int64_t nv,
                                  const void *mask, void *P, float *m, float *l, float *alpha, float *ps) {
    softmax_k(c, rows, S, nk, nv, mask, P, m, l, alpha, ps, 0);
}

void qmm_attn_softmax_bf16__avx512(const qmm_attn_call *c, int rows, const float *S, int64_t nk, int64_t nv,
                                   const void *mask, void *P, float *m, float *l, float *alpha, float *ps) {
    softmax_k(c, rows, S, nk, nv, mask, P, m, l, alpha, ps, 1);
}

void qmm_attn_softmax_u8__avx512(const qmm_attn_call *c, int rows, const float *S, int64_t nk, int64_t nv,
                                 const void *mask, void *P, float *m, float *l, float *alpha, float *ps) {
    softmax_k(c, rows, S, nk, nv, mask, P, m, l, alpha, ps, 2);
}
