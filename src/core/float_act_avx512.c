/*
 * float_act_avx512.c — the float engines' epilogue with AVX-512 (F/BW/VL): per 16 columns,
 * v = C · w_scale[n] (int8 weights only), v = v + bias[n] (0 when absent), then one
 * round-to-nearest-even cast to the output dtype — the same operations, in the same order, as
 * qmm_float_epilogue_ref (bf16 rounding done with integer ops as qmm_f32_to_bf16, NaN kept quiet;
 * f16 with VCVTPS2PH in RNE, which matches qmm_f32_to_f16 incl. subnormals).
 */
#include "float_act.h"

#include <immintrin.h>

static inline __m256i bf16_rne(__m512 v) {
    __m512i u = _mm512_castps_si512(v);
    __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff),
                                                     _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1))));
    r = _mm512_srli_epi32(r, 16);
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                            _mm512_set1_epi32(0x7f800000));
    r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40)));
    return _mm512_cvtepi32_epi16(r);
}

void qmm_float_epilogue_avx512(const qmm_call *c, const float *C, int64_t ldc, int64_t rows, int64_t r0, int64_t n0,
                               int64_t ncols) {
    const qmm_weight *w = c->w;
    for (int64_t i = 0; i < rows; i++) {
        const float *ci = C + i * ldc;
        int64_t yrow = (r0 + i) * c->ldy + n0;
        for (int64_t j = 0; j < ncols; j += 16) {
            int64_t left = ncols - j;
            __mmask16 m = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1u);
            __m512 v = _mm512_maskz_loadu_ps(m, ci + j);
            if (w->is_int8) v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, w->scale + n0 + j));
            if (w->bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, w->bias + n0 + j));
            else v = _mm512_add_ps(v, _mm512_setzero_ps());
            switch (c->y_dtype) {
            case QMM_BF16:
                _mm256_mask_storeu_epi16((uint16_t *)c->y + yrow + j, m, bf16_rne(v));
                break;
            case QMM_F16:
                _mm256_mask_storeu_epi16((uint16_t *)c->y + yrow + j, m,
                                         _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
                break;
            default:
                _mm512_mask_storeu_ps((float *)c->y + yrow + j, m, v);
                break;
            }
        }
    }
}
