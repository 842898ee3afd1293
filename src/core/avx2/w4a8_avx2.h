/*
 * w4a8_avx2.h — the AVX2 table lookups of a W4A8 weight's codes (w4a8.h's decode table), shared by
 * the AVX2 row decoder (w4a8_avx2.c) and avx2_int8's fused rows kernel (avx2_int8_w4a8.c). Static
 * inline; include only from files built with at least -mavx2.
 *   qmm_w4a2_walk   one row's codes from some k on (a multiple of 16, group a multiple of 16):
 *                   qmm_w4a2_next32 the next 32 int8 values, qmm_w4a2_next16 the next 16, in k
 *                   order, each the table's entry of (the group's s_rel byte, the code);
 *   how 32 found    the 16 code bytes widened to words and their nibbles split (one shift, one
 *                   OR, one AND); the 16-byte tables of the step's two runs of 16 (each in one
 *                   group) in the two lanes; one VPSHUFB. 6 bits: the top 2 bits of each code
 *                   widened from the high plane's 8 bytes, the four 16-entry quarters of the
 *                   runs' 64-entry tables each looked up, the right one kept by two VPBLENDVB.
 */
#ifndef QMM_W4A8_AVX2_H
#define QMM_W4A8_AVX2_H

#include "w4a8.h"

#include <immintrin.h>

/* 32 (or 16) nibbles of 16 (or 8) code bytes, one per byte in k order */
static inline __m256i qmm_w4a2_nibbles32(const uint8_t *p) {
    const __m256i t = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)p));
    return _mm256_and_si256(_mm256_or_si256(t, _mm256_slli_epi16(t, 4)), _mm256_set1_epi16(0x0f0f));
}
static inline __m128i qmm_w4a2_nibbles16(const uint8_t *p) {
    const __m128i t = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)p));
    return _mm_and_si128(_mm_or_si128(t, _mm_slli_epi16(t, 4)), _mm_set1_epi16(0x0f0f));
}

/* the top 2 bits of 32 (or 16) 6-bit codes, one per byte: high-plane byte i holds k = 4i + t at bit 2t */
static inline __m256i qmm_w4a2_tops32(const uint8_t *p) {
    const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
    const __m256i a = _mm256_or_si256(v, _mm256_slli_epi32(v, 6));
    return _mm256_and_si256(_mm256_or_si256(a, _mm256_slli_epi32(a, 12)), _mm256_set1_epi32(0x03030303));
}
static inline __m128i qmm_w4a2_tops16(const uint8_t *p) {
    int32_t h;
    __builtin_memcpy(&h, p, 4);
    const __m128i v = _mm_cvtepu8_epi32(_mm_cvtsi32_si128(h));
    const __m128i a = _mm_or_si128(v, _mm_slli_epi32(v, 6));
    return _mm_and_si128(_mm_or_si128(a, _mm_slli_epi32(a, 12)), _mm_set1_epi32(0x03030303));
}

/* One row's walk from k (a multiple of 16): code bytes cp, high-plane bytes hp, the group's scale
 * byte sp and the place in that group r. */
typedef struct qmm_w4a2_walk {
    const uint8_t *cp, *hp, *sp;
    int64_t r;
    int gsz;
} qmm_w4a2_walk;

/* the table of the next run of 16 (2^bits bytes) */
static inline const int8_t *qmm_w4a2_run16(qmm_w4a2_walk *it, const int8_t *lut, int sh) {
    const int8_t *t = lut + ((int64_t)it->sp[0] << sh);
    it->r += 16;
    if (it->r == it->gsz) { it->sp++; it->r = 0; }
    return t;
}

/* qmm_w4a2_next32's per for a group size: 16 → 2 (each run of 16 a group of its own: the two
 * scale bytes read side by side, no count kept), else 0 (counted run by run) */
static inline int qmm_w4a2_per(int gsz) { return gsz == 16 ? 2 : 0; }

/* the next 32 weights (per as qmm_w4a2_per of the walk's group) */
static inline __attribute__((always_inline)) __m256i qmm_w4a2_next32(qmm_w4a2_walk *it, const int8_t *lut, const int six,
                                                                     const int per) {
    const int sh = six ? 6 : 4;
    const int8_t *t0, *t1;
    if (per == 2) {
        t0 = lut + ((int64_t)it->sp[0] << sh);
        t1 = lut + ((int64_t)it->sp[1] << sh);
        it->sp += 2;
    } else {
        t0 = qmm_w4a2_run16(it, lut, sh);
        t1 = qmm_w4a2_run16(it, lut, sh);
    }
    const __m256i nib = qmm_w4a2_nibbles32(it->cp);
#define LANES(Q) _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(t0 + 16 * (Q)))), \
                                         _mm_loadu_si128((const __m128i *)(t1 + 16 * (Q))), 1)
    __m256i v = _mm256_shuffle_epi8(LANES(0), nib);
    if (six) {
        const __m256i h = qmm_w4a2_tops32(it->hp), one = _mm256_set1_epi8(1), two = _mm256_set1_epi8(2);
        const __m256i m1 = _mm256_cmpeq_epi8(_mm256_and_si256(h, one), one);
        const __m256i m2 = _mm256_cmpeq_epi8(_mm256_and_si256(h, two), two);
        const __m256i a = _mm256_blendv_epi8(v, _mm256_shuffle_epi8(LANES(1), nib), m1);
        const __m256i b = _mm256_blendv_epi8(_mm256_shuffle_epi8(LANES(2), nib), _mm256_shuffle_epi8(LANES(3), nib), m1);
        v = _mm256_blendv_epi8(a, b, m2);
    }
#undef LANES
    it->cp += 16;
    it->hp += 8;
    return v;
}

/* the next 16 weights */
static inline __attribute__((always_inline)) __m128i qmm_w4a2_next16(qmm_w4a2_walk *it, const int8_t *lut, const int six) {
    const int8_t *t = qmm_w4a2_run16(it, lut, six ? 6 : 4);
    const __m128i nib = qmm_w4a2_nibbles16(it->cp);
    __m128i v = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)t), nib);
    if (six) {
        const __m128i h = qmm_w4a2_tops16(it->hp), one = _mm_set1_epi8(1), two = _mm_set1_epi8(2);
        const __m128i m1 = _mm_cmpeq_epi8(_mm_and_si128(h, one), one), m2 = _mm_cmpeq_epi8(_mm_and_si128(h, two), two);
        const __m128i a = _mm_blendv_epi8(v, _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(t + 16)), nib), m1);
        const __m128i b = _mm_blendv_epi8(_mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(t + 32)), nib),
                                          _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(t + 48)), nib), m1);
        v = _mm_blendv_epi8(a, b, m2);
    }
    it->cp += 8;
    it->hp += 4;
    return v;
}

/* row n's walk from k (a multiple of 16) */
static inline qmm_w4a2_walk qmm_w4a2_walk_at(const qmm_w4_codes *w, int64_t n, int64_t k) {
    const uint8_t *row = w->codes + n * w->ld;
    const qmm_w4a2_walk it = {.cp = row + k / 2, .hp = row + w->K / 2 + k / 4,
                              .sp = w->s_rel + n * (w->K / w->group) + k / w->group, .r = k % w->group,
                              .gsz = w->group};
    return it;
}

#endif /* QMM_W4A8_AVX2_H */
