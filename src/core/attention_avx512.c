/*
 * attention_avx512.c — the frame's attention softmax ukernels for AVX-512 (F/BW/VL/DQ), one per P
 * kind (qmm_attn_softmax_fn, attention.h; declared in ukernels.h): one score row of a key block
 * (nk a multiple of 16, <= 64) in base 2 → the block max bm and P = 2^(s − bm) as f32, bf16
 * (nearest even) or u8 (round(255 · 2^(s − bm))); *sum = Σ P from the f32 values before
 * rounding (u8: / 255).
 *
 * Mask (the row's at key j0, keys c->ms[3] apart): bool (u8) false → −inf, whatever the score;
 * additive (f32, f16, bf16; base e) → s + mask·log2(e) in one FMA, kept finite where mask and s
 * are (an additive −FLT_MAX, torch's finfo.min, then stays a finite −FLT_MAX as it does in base e).
 * Lanes past nv are −inf whatever S holds. A NaN score left by the mask makes *sum NaN (P 0);
 * every lane −inf: bm = −inf, P 0, *sum 0.
 * exp2: 2^n · q(x − n), n = round(x), q the degree-5 polynomial of 2^f on |f| <= 1/2 (relative
 * error 8e-8); 0 below 2^-126 and for −inf.
 */
#include "attention.h"
#include "numerics.h"
#include "simd_avx512.h"
#include "ukernels.h"

#include <float.h>
#include <math.h>

static inline __mmask16 lanes16(int64_t n) { return n >= 16 ? (__mmask16)0xffff : n <= 0 ? 0 : (__mmask16)((1u << n) - 1u); }

/* k · 2^x for x <= 0, −inf (0) or NaN (NaN), k = 1 or 255 folded into the coefficients */
static inline __m512 exp2_k(__m512 x, float k) {
    const __m512 n = _mm512_roundscale_ps(x, QMM_Z_RNE), f = _mm512_sub_ps(x, n);
    __m512 q = _mm512_set1_ps(k * 0.001326697994954884f);
    q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(k * 0.009675469249486923f));
    q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(k * 0.05550742521882057f));
    q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(k * 0.24022121727466583f));
    q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(k * 0.6931469440460205f));
    q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(k * 1.0000001192092896f));
    const __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-126.0f), _CMP_NLT_UQ); /* not below, or NaN */
    return _mm512_maskz_scalef_ps(keep, q, n);
}

/* the block row's scores, lanes past nv −inf, masked (see the top) → s[0..nz); returns the lanes
 * that are NaN */
static inline __attribute__((always_inline)) __mmask64 masked_scores(const qmm_attn_call *c, const float *S, int nz, int64_t nv, const void *mask,
                                      __m512 s[4]) {
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    for (int z = 0; z < nz; z++) s[z] = _mm512_mask_loadu_ps(ninf, lanes16(nv - 16 * z), S + 16 * z);
    if (mask) {
        const int64_t ms3 = c->ms[3];
        if (c->mask_dtype == QMM_U8) {
            const uint8_t *r = mask;
            for (int z = 0; z < nz && nv > 16 * z; z++) {
                const __mmask16 mk = lanes16(nv - 16 * z);
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
                const __mmask16 mk = lanes16(nv - 16 * z);
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
    __mmask64 nan = 0;
    for (int z = 0; z < nz; z++) nan |= (__mmask64)_mm512_cmp_ps_mask(s[z], s[z], _CMP_UNORD_Q) << (16 * z);
    return nan;
}

static inline __attribute__((always_inline)) float max_of(const __m512 s[4], int nz) {
    __m512 m = _mm512_set1_ps(-INFINITY);
    for (int z = 0; z < nz; z++) m = _mm512_max_ps(m, s[z]);
    return _mm512_reduce_max_ps(m);
}

/* kind: 0 f32, 1 bf16, 2 u8; nz = nk / 16 (a constant: the row stays in registers) */
static inline __attribute__((always_inline)) float softmax_n(const qmm_attn_call *c, const float *S, const int nz,
                                                             int64_t nv, const void *mask, void *P, float *sum,
                                                             const int kind) {
    __m512 s[4];
    const __mmask64 nan = masked_scores(c, S, nz, nv, mask, s);
    const float bm = max_of(s, nz);
    if (nan || !(bm > -INFINITY)) { /* a NaN score, or every key masked: P 0 */
        for (int z = 0; z < nz; z++) {
            if (kind == 0) _mm512_storeu_ps((float *)P + 16 * z, _mm512_setzero_ps());
            else if (kind == 1) _mm256_storeu_si256((__m256i *)((uint16_t *)P + 16 * z), _mm256_setzero_si256());
            else _mm_storeu_si128((__m128i *)((uint8_t *)P + 16 * z), _mm_setzero_si128());
        }
        *sum = nan ? NAN : 0.0f;
        return nan ? bm : -INFINITY;
    }
    const __m512 vb = _mm512_set1_ps(bm);
    __m512 acc = _mm512_setzero_ps();
    for (int z = 0; z < nz; z++) {
        const __m512 e = exp2_k(_mm512_sub_ps(s[z], vb), kind == 2 ? 255.0f : 1.0f);
        acc = _mm512_add_ps(acc, e);
        if (kind == 0) _mm512_storeu_ps((float *)P + 16 * z, e);
        else if (kind == 1) qmm_z_store16((uint16_t *)P + 16 * z, QMM_BF16, 0xffff, e);
        else _mm_storeu_si128((__m128i *)((uint8_t *)P + 16 * z), _mm512_cvtusepi32_epi8(_mm512_cvtps_epi32(e)));
    }
    const float t = _mm512_reduce_add_ps(acc); /* a NaN e (s = +inf = bm): NaN */
    *sum = kind == 2 ? t * (1.0f / 255.0f) : t;
    return bm;
}

static inline __attribute__((always_inline)) float softmax_k(const qmm_attn_call *c, const float *S, int64_t nk,
                                                             int64_t nv, const void *mask, void *P, float *sum,
                                                             const int kind) {
    switch (nk) {
    case 64: return softmax_n(c, S, 4, nv, mask, P, sum, kind);
    case 48: return softmax_n(c, S, 3, nv, mask, P, sum, kind);
    case 32: return softmax_n(c, S, 2, nv, mask, P, sum, kind);
    default: return softmax_n(c, S, 1, nv, mask, P, sum, kind);
    }
}

float qmm_attn_softmax_f32__avx512(const qmm_attn_call *c, const float *s, int64_t nk, int64_t j0, int64_t nv,
                                   const void *mask, void *P, float *sum) {
    (void)j0;
    return softmax_k(c, s, nk, nv, mask, P, sum, 0);
}

float qmm_attn_softmax_bf16__avx512(const qmm_attn_call *c, const float *s, int64_t nk, int64_t j0, int64_t nv,
                                    const void *mask, void *P, float *sum) {
    (void)j0;
    return softmax_k(c, s, nk, nv, mask, P, sum, 1);
}

float qmm_attn_softmax_u8__avx512(const qmm_attn_call *c, const float *s, int64_t nk, int64_t j0, int64_t nv,
                                  const void *mask, void *P, float *sum) {
    (void)j0;
    return softmax_k(c, s, nk, nv, mask, P, sum, 2);
}
