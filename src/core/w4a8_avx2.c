/*
 * w4a8_avx2.c — w4a8.h's decode table and table decoder in AVX2 (the context's core level on a
 * CPU without AVX-512; the same bits). The table: per s_rel byte, 8 levels at a time times its
 * scale, one fp32 product each, VROUNDPS to nearest even, the clamp, NaN → 0, packed. The
 * decoder: e4m3 s_rel, groups of a multiple of 16, 32 weights per step (16 at a
 * range's end). The 16 code bytes widened to words and their nibbles split (one shift, one OR,
 * one AND) give 32 indices in k order; the 16-byte tables of the step's two runs of 16 (each in
 * one group) in the two lanes; one VPSHUFB. 6 bits: the top 2 bits of each code widened from the
 * high plane's 8 bytes, the four 16-entry quarters of the runs' 64-entry tables each looked up,
 * the right one kept by two VPBLENDVB. What is not on the table (f32 s_rel, groups of 4 or 8) and
 * the ends of a range not on 16 k: the scalar decoders (w4a8.c).
 */
#include "w4a8.h"

#include <immintrin.h>

/* 32 (or 16) nibbles of 16 (or 8) code bytes, one per byte in k order */
static inline __m256i nibbles32(const uint8_t *p) {
    const __m256i t = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)p));
    return _mm256_and_si256(_mm256_or_si256(t, _mm256_slli_epi16(t, 4)), _mm256_set1_epi16(0x0f0f));
}
static inline __m128i nibbles16(const uint8_t *p) {
    const __m128i t = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)p));
    return _mm_and_si128(_mm_or_si128(t, _mm_slli_epi16(t, 4)), _mm_set1_epi16(0x0f0f));
}

/* the top 2 bits of 32 (or 16) 6-bit codes, one per byte: high-plane byte i holds k = 4i + t at bit 2t */
static inline __m256i tops32(const uint8_t *p) {
    const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
    const __m256i a = _mm256_or_si256(v, _mm256_slli_epi32(v, 6));
    return _mm256_and_si256(_mm256_or_si256(a, _mm256_slli_epi32(a, 12)), _mm256_set1_epi32(0x03030303));
}
static inline __m128i tops16(const uint8_t *p) {
    int32_t h;
    __builtin_memcpy(&h, p, 4);
    const __m128i v = _mm_cvtepu8_epi32(_mm_cvtsi32_si128(h));
    const __m128i a = _mm_or_si128(v, _mm_slli_epi32(v, 6));
    return _mm_and_si128(_mm_or_si128(a, _mm_slli_epi32(a, 12)), _mm_set1_epi32(0x03030303));
}

/* One row's walk from k (a multiple of 16): code bytes cp, high-plane bytes hp, the group's scale
 * byte sp and the place in that group r. */
typedef struct walk {
    const uint8_t *cp, *hp, *sp;
    int64_t r;
    int gsz;
} walk;

/* the table of the next run of 16 (2^bits bytes) */
static inline const int8_t *run16(walk *it, const int8_t *lut, int sh) {
    const int8_t *t = lut + ((int64_t)it->sp[0] << sh);
    it->r += 16;
    if (it->r == it->gsz) { it->sp++; it->r = 0; }
    return t;
}

/* the next 32 weights */
static inline __attribute__((always_inline)) __m256i next32(walk *it, const int8_t *lut, const int six) {
    const int sh = six ? 6 : 4;
    const int8_t *t0 = run16(it, lut, sh), *t1 = run16(it, lut, sh);
    const __m256i nib = nibbles32(it->cp);
#define LANES(Q) _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(t0 + 16 * (Q)))), \
                                         _mm_loadu_si128((const __m128i *)(t1 + 16 * (Q))), 1)
    __m256i v = _mm256_shuffle_epi8(LANES(0), nib);
    if (six) {
        const __m256i h = tops32(it->hp), one = _mm256_set1_epi8(1), two = _mm256_set1_epi8(2);
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
static inline __attribute__((always_inline)) __m128i next16(walk *it, const int8_t *lut, const int six) {
    const int8_t *t = run16(it, lut, six ? 6 : 4);
    const __m128i nib = nibbles16(it->cp);
    __m128i v = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)t), nib);
    if (six) {
        const __m128i h = tops16(it->hp), one = _mm_set1_epi8(1), two = _mm_set1_epi8(2);
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

/* row n, k [k0, k1) from the table (k0 even): the scalar decoder up to the first multiple of 16
 * and past the last, 32 at a time between (16 at its end) */
static inline __attribute__((always_inline)) void table_row(const int six, const qmm_weight *w, const int8_t *lut,
                                                            int64_t n, int64_t k0, int64_t k1, int8_t *dst) {
    int64_t k = (k0 + 15) / 16 * 16 < k1 ? (k0 + 15) / 16 * 16 : k1;
    if (k > k0) qmm_w4a8_decode_rows(w, lut, n, 1, k0, k, dst, 0);
    const int64_t k16 = k + (k1 - k) / 16 * 16;
    const uint8_t *row = w->w4.codes + n * w->w4.row_bytes;
    walk it = {.cp = row + k / 2, .hp = row + w->K / 2 + k / 4,
               .sp = (const uint8_t *)w->w4.s_rel + n * (w->K / w->w4.group) + k / w->w4.group,
               .r = k % w->w4.group, .gsz = w->w4.group};
    for (; k + 32 <= k16; k += 32) _mm256_storeu_si256((__m256i *)(dst + (k - k0)), next32(&it, lut, six));
    if (k < k16) {
        _mm_storeu_si128((__m128i *)(dst + (k - k0)), next16(&it, lut, six));
        k += 16;
    }
    if (k < k1) qmm_w4a8_decode_rows(w, lut, n, 1, k, k1, dst + (k - k0), 0);
}

static void decode_rows_avx2(const qmm_weight *w, const int8_t *lut, int64_t n0, int64_t rows, int64_t k0, int64_t k1,
                             int8_t *dst, int64_t ld) {
    if (!lut || w->w4.group % 16 != 0) { /* f32 s_rel, groups of 4 or 8: the scalar decoders */
        qmm_w4a8_decode_rows(w, lut, n0, rows, k0, k1, dst, ld);
        return;
    }
    if (w->w4.bits == 6)
        for (int64_t i = 0; i < rows; i++) table_row(1, w, lut, n0 + i, k0, k1, dst + i * ld);
    else
        for (int64_t i = 0; i < rows; i++) table_row(0, w, lut, n0 + i, k0, k1, dst + i * ld);
}

/* 8 int8 values of 8 levels times s (qmm_w4a8_value: one fp32 product, rounded to nearest even,
 * clamped to ±127, NaN → 0) into dst */
static inline void value8(__m256 v, __m256 s, int8_t *dst) {
    const __m256 p = _mm256_mul_ps(v, s);
    __m256 r = _mm256_round_ps(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r = _mm256_min_ps(_mm256_max_ps(r, _mm256_set1_ps(-127.0f)), _mm256_set1_ps(127.0f));
    r = _mm256_and_ps(r, _mm256_cmp_ps(p, p, _CMP_ORD_Q));
    const __m256i i = _mm256_cvtps_epi32(r);
    const __m128i h = _mm_packs_epi32(_mm256_castsi256_si128(i), _mm256_extracti128_si256(i, 1));
    _mm_storel_epi64((__m128i *)dst, _mm_packs_epi16(h, h));
}

static void lut_fill_avx2(const qmm_weight *w, int8_t *lut) {
    const int L = 1 << w->w4.bits;
    __m256 lv[8];
    for (int q = 0; q < L / 8; q++)
        lv[q] = w->w4.codebook ? _mm256_loadu_ps(w->w4.codebook + 8 * q)
                               : _mm256_cvtepi32_ps(_mm256_add_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                                                     _mm256_set1_epi32(8 * q - L / 2)));
    for (int b = 0; b < 256; b++) {
        const __m256 s = _mm256_set1_ps(qmm_e4m3_to_f32((uint8_t)b));
        for (int q = 0; q < L / 8; q++) value8(lv[q], s, lut + b * L + 8 * q);
    }
}

const qmm_w4a8_rows_fn qmm_w4a8_decode_rows_avx2_ptr = decode_rows_avx2;
const qmm_w4a8_lut_fn qmm_w4a8_lut_fill_avx2_ptr = lut_fill_avx2;
