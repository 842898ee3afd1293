/*
 * w4a8_avx512.c — the AVX-512 forms of w4a8.h's decoders and decode table (the same bits):
 *   table      per s_rel byte, the 16 (or 64) levels times its scale in one fp32 product each,
 *              VRNDSCALEPS to nearest even, the clamp, NaN → 0, VPMOVDB (qmm_w4a8_value);
 *   table rows e4m3 s_rel, groups of a multiple of 16: the lookups of w4a8_avx512.h, 64 weights
 *              per step (16 at the range's ends); a panel block's call prefetches the next
 *              block's lines into L2, a long run prefetches ahead in its row;
 *   arithmetic f32 s_rel, groups of a multiple of 16: 16 codes per step (4 bits: 8 bytes of nibbles
 *              unpacked; 6 bits: the high plane's 4 bytes shifted per lane), the level (VPERMPS of
 *              the codebook, or c − 2^(bits−1)), the product with the group's s_rel, the rounding
 *              and clamp of the table;
 * other groups (4, 8) and the ends of a range not on 16 k: the scalar decoders.
 */
#include "w4a8_avx512.h"

#include <immintrin.h>

/* 16 int8 values of 16 levels times s (qmm_w4a8_value) */
static inline __m128i value16(__m512 v, __m512 s) {
    const __m512 p = _mm512_mul_ps(v, s);
    const __mmask16 ord = _mm512_cmp_ps_mask(p, p, _CMP_ORD_Q);
    const __m512 r = _mm512_min_ps(_mm512_max_ps(_mm512_roundscale_ps(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
                                                 _mm512_set1_ps(-127.0f)), _mm512_set1_ps(127.0f));
    return _mm512_cvtepi32_epi8(_mm512_maskz_cvtps_epi32(ord, r));
}

static void decode_row_avx512(const qmm_weight *w, int64_t n, int64_t k0, int64_t k1, int8_t *dst) {
    const int gsz = w->w4.group, bits = w->w4.bits;
    if (gsz % 16 != 0) {
        qmm_w4a8_decode_row(w, n, k0, k1, dst);
        return;
    }
    const uint8_t *row = w->w4.codes + n * w->w4.row_bytes, *hi = row + w->K / 2;
    int64_t k = k0;
    const int64_t head = (k0 + 15) / 16 * 16 < k1 ? (k0 + 15) / 16 * 16 : k1;
    if (head > k) {
        qmm_w4a8_decode_row(w, n, k, head, dst);
        k = head;
    }
    const __m512 cb = w->w4.codebook ? _mm512_loadu_ps(w->w4.codebook) : _mm512_setzero_ps();
    const __m512i off = _mm512_set1_epi32(1 << (bits - 1));
    const __m512i shifts = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m128i m4 = _mm_set1_epi8(0x0f);
    const int64_t G = w->K / gsz, kend = k + (k1 - k) / 16 * 16;
    const uint8_t *s8 = (const uint8_t *)w->w4.s_rel + n * G;
    const float *s32 = (const float *)w->w4.s_rel + n * G;
    const int f32 = w->w4.s_rel_dtype == QMM_F32, has_cb = w->w4.codebook != NULL;
    _Alignas(64) float sc[16];
    int64_t gb = -16; /* sc holds the scales of groups [gb, gb + 16) */
    for (int64_t g = k / gsz; k < kend; g++) {
        if (!f32 && g >= gb + 16) { /* 16 e4m3 scales widened at once (the bits of qmm_e4m3_to_f32) */
            gb = g;
            const int64_t cnt = G - g < 16 ? G - g : 16;
            const __m512i b = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8((__mmask16)((1u << cnt) - 1u), s8 + g));
            const __m512i em = _mm512_and_si512(b, _mm512_set1_epi32(0x7f));
            const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(b, _mm512_set1_epi32(0x80)), 24);
            __m512 v = _mm512_castsi512_ps(_mm512_add_epi32(_mm512_slli_epi32(em, 20), _mm512_set1_epi32(120 << 23)));
            const __mmask16 sub = _mm512_cmplt_epi32_mask(em, _mm512_set1_epi32(8));
            v = _mm512_mask_mul_ps(v, sub, _mm512_cvtepi32_ps(em), _mm512_set1_ps(0x1p-9f));
            v = _mm512_mask_mov_ps(v, _mm512_cmpeq_epi32_mask(em, _mm512_set1_epi32(0x7f)), _mm512_set1_ps(__builtin_nanf("")));
            _mm512_store_ps(sc, _mm512_or_ps(v, _mm512_castsi512_ps(sign)));
        }
        const __m512 sv = _mm512_set1_ps(f32 ? s32[g] : sc[g - gb]);
        const int64_t ge = (g + 1) * gsz < kend ? (g + 1) * gsz : kend;
        for (; k < ge; k += 16) {
            const __m128i b = _mm_loadl_epi64((const __m128i *)(row + k / 2));
            const __m128i nib = _mm_unpacklo_epi8(_mm_and_si128(b, m4), _mm_and_si128(_mm_srli_epi16(b, 4), m4));
            __m512i c = _mm512_cvtepu8_epi32(nib);
            if (bits == 6) {
                int32_t h;
                __builtin_memcpy(&h, hi + k / 4, 4);
                const __m512i t = _mm512_and_si512(_mm512_srlv_epi32(_mm512_set1_epi32(h), shifts), _mm512_set1_epi32(3));
                c = _mm512_or_si512(c, _mm512_slli_epi32(t, 4));
            }
            const __m512 v = has_cb ? _mm512_permutexvar_ps(c, cb) : _mm512_cvtepi32_ps(_mm512_sub_epi32(c, off));
            _mm_storeu_si128((__m128i *)(dst + (k - k0)), value16(v, sv));
        }
    }
    if (k < k1) qmm_w4a8_decode_row(w, n, k, k1, dst + (k - k0));
}

static void lut_fill_avx512(const qmm_weight *w, int8_t *lut) {
    const int bits = w->w4.bits, L = 1 << bits;
    __m512 lv[4];
    for (int q = 0; q < L / 16; q++)
        lv[q] = w->w4.codebook ? _mm512_loadu_ps(w->w4.codebook + 16 * q)
                               : _mm512_cvtepi32_ps(_mm512_sub_epi32(
                                     _mm512_add_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                                      _mm512_set1_epi32(16 * q)),
                                     _mm512_set1_epi32(L / 2)));
    for (int b = 0; b < 256; b++) {
        const __m512 s = _mm512_set1_ps(qmm_e4m3_to_f32((uint8_t)b));
        for (int q = 0; q < L / 16; q++) _mm_store_si128((__m128i *)(lut + b * L + 16 * q), value16(lv[q], s));
    }
}

static void decode_rows_avx512(const qmm_weight *w, const int8_t *lut, int64_t n0, int64_t rows, int64_t k0, int64_t k1,
                               int8_t *dst, int64_t ld) {
    const int gsz = w->w4.group;
    if (lut && gsz % 16 != 0) { /* groups of 4 or 8: the scalar table decoder */
        qmm_w4a8_decode_rows(w, lut, n0, rows, k0, k1, dst, ld);
        return;
    }
    if (!lut) { /* f32 s_rel: the arithmetic */
        for (int64_t i = 0; i < rows; i++) decode_row_avx512(w, n0 + i, k0, k1, dst + i * ld);
        return;
    }
    qmm_w4_table_rows(w, lut, n0, rows, k0, k1, dst, ld);
}

const qmm_w4a8_rows_fn qmm_w4a8_decode_rows_avx512_ptr = decode_rows_avx512;
const qmm_w4a8_lut_fn qmm_w4a8_lut_fill_avx512_ptr = lut_fill_avx512;
