/*
 * w4a8_avx2.c — w4a8.h's decode table and table decoder in AVX2 (the context's core level on a
 * CPU without AVX-512; the same bits). The table: per s_rel byte, 8 levels at a time times its
 * scale, one fp32 product each, VROUNDPS to nearest even, the clamp, NaN → 0, packed. The
 * decoder: e4m3 s_rel, groups of a multiple of 16, 32 weights per step (16 at a range's end),
 * the lookups of w4a8_avx2.h (groups of 16 apart from the others: qmm_w4a2_per). What is not on
 * the table (f32 s_rel, groups of 4 or 8) and the ends of a range not on 16 k: the scalar
 * decoders (w4a8.c).
 */
#include "w4a8_avx2.h"

/* row n, k [k0, k1) from the table (k0 even): the scalar decoder up to the first multiple of 16
 * and past the last, 32 at a time between (16 at its end) */
static inline __attribute__((always_inline)) void table_row(const int six, const int per, const qmm_weight *w,
                                                            const int8_t *lut, int64_t n, int64_t k0, int64_t k1,
                                                            int8_t *dst) {
    int64_t k = (k0 + 15) / 16 * 16 < k1 ? (k0 + 15) / 16 * 16 : k1;
    if (k > k0) qmm_w4a8_decode_rows(w, lut, n, 1, k0, k, dst, 0);
    const int64_t k16 = k + (k1 - k) / 16 * 16;
    const qmm_w4_codes wc = qmm_w4_codes_of(w);
    qmm_w4a2_walk it = qmm_w4a2_walk_at(&wc, n, k);
    for (; k + 32 <= k16; k += 32) _mm256_storeu_si256((__m256i *)(dst + (k - k0)), qmm_w4a2_next32(&it, lut, six, per));
    if (k < k16) {
        _mm_storeu_si128((__m128i *)(dst + (k - k0)), qmm_w4a2_next16(&it, lut, six));
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
#define TABLE_ROWS(S, P) for (int64_t i = 0; i < rows; i++) table_row(S, P, w, lut, n0 + i, k0, k1, dst + i * ld)
    switch ((w->w4.bits == 6) * 4 + qmm_w4a2_per(w->w4.group)) {
    case 2: TABLE_ROWS(0, 2); break;
    case 0: TABLE_ROWS(0, 0); break;
    case 6: TABLE_ROWS(1, 2); break;
    default: TABLE_ROWS(1, 0); break;
    }
#undef TABLE_ROWS
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
