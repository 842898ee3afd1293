/*
 * float_gemm_avx512.c — the float GEMM's output epilogue with AVX-512 (F/BW/VL/DQ), for the
 * engines whose CPU has it (avx512_f32, avx512_bf16, amx_bf16). Contract: float_gemm.h.
 *
 * Per 16 columns, v = C · w_scale[n] (int8 weights only), v = v + bias[n] (0 when absent), then
 * one round-to-nearest-even cast to the output dtype — the same operations, in the same order,
 * as qmm_float_epilogue_ref (bf16 rounding done with integer ops as qmm_f32_to_bf16, NaN kept
 * quiet; f16 with VCVTPS2PH in RNE, which matches qmm_f32_to_f16 incl. subnormals).
 */
#include "float_gemm.h"
#include "simd_avx512.h"

#include <immintrin.h>

void qmm_float_epilogue_avx512(const qmm_call *c, float *C, int64_t ldc, int64_t rows, int64_t r0, int64_t n0,
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
            qmm_z_store16((char *)c->y + (size_t)(yrow + j) * qmm_dtype_size(c->y_dtype), c->y_dtype, m, v);
        }
    }
}
