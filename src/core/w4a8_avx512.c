/*
 * w4a8_avx512.c — the AVX-512 form of qmm_w4a8_decode_row (w4a8.h): 16 codes per step within a
 * group of a multiple of 16 (4 bits: 8 bytes of nibbles unpacked; 6 bits: the high plane's 4
 * bytes shifted per lane), the level (VPERMPS of the codebook, or c − 2^(bits−1)), one fp32
 * product with the group's s_rel, VRNDSCALEPS to nearest even, the clamp, NaN → 0, VPMOVDB: the
 * bits of qmm_w4a8_value. Other groups (4, 8) and the ends of the range: the scalar decoder.
 */
#include "w4a8.h"

#include <immintrin.h>

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
    const __m512 lo = _mm512_set1_ps(-127.0f), up = _mm512_set1_ps(127.0f);
    const __m128i m4 = _mm_set1_epi8(0x0f);
    for (; k + 16 <= k1; k += 16) {
        const __m128i b = _mm_loadl_epi64((const __m128i *)(row + k / 2));
        const __m128i nib = _mm_unpacklo_epi8(_mm_and_si128(b, m4), _mm_and_si128(_mm_srli_epi16(b, 4), m4));
        __m512i c = _mm512_cvtepu8_epi32(nib);
        if (bits == 6) {
            int32_t h;
            __builtin_memcpy(&h, hi + k / 4, 4);
            const __m512i t = _mm512_and_si512(_mm512_srlv_epi32(_mm512_set1_epi32(h), shifts), _mm512_set1_epi32(3));
            c = _mm512_or_si512(c, _mm512_slli_epi32(t, 4));
        }
        const __m512 v = w->w4.codebook ? _mm512_permutexvar_ps(c, cb) : _mm512_cvtepi32_ps(_mm512_sub_epi32(c, off));
        const __m512 p = _mm512_mul_ps(v, _mm512_set1_ps(qmm_w4a8_srel(w, n, k / gsz)));
        const __mmask16 ord = _mm512_cmp_ps_mask(p, p, _CMP_ORD_Q);
        const __m512 r = _mm512_min_ps(_mm512_max_ps(_mm512_roundscale_ps(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), lo), up);
        _mm_storeu_si128((__m128i *)(dst + (k - k0)), _mm512_cvtepi32_epi8(_mm512_maskz_cvtps_epi32(ord, r)));
    }
    if (k < k1) qmm_w4a8_decode_row(w, n, k, k1, dst + (k - k0));
}

const qmm_w4a8_decode_fn qmm_w4a8_decode_row_avx512_ptr = decode_row_avx512;
