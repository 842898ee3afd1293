/*
 * avx2_f32.c — the AVX2-FMA FP32 float engine: the float fallback (W8A16) and the float-weight
 * engine of machines without AVX-512.
 *
 * Contract (SPEC §4; driver and layouts in core/float_gemm.h):
 *   int8 weight (fallback / full_precision): a = act(x), rotated if w->convrot_gs (exactly
 *     qmm_ref_act_rotate_row, values in x's dtype), kept in f32; the int8 weights are widened
 *     to f32 inside the engine from the shared n16k4 packing, one (kc × 16) block at a time;
 *     y = out((acc · w_scale[n]) + bias[n]).
 *   float weight: a = act(x); W from w->fp (f32 as is, bf16 widened exactly); y = out(acc + bias[n]).
 * Admission: qmm_admit_common_float; nothing else.
 *
 * Micro-kernel: 6 rows × 16 columns (12 ymm accumulators), B block [kc][16] f32. Each output
 * element is one FMA chain over k in order from 0: the same bits as avx512_f32.
 */
#include "avx2_attn.h"
#include "float_gemm.h"
#include "qmm_internal.h"
#include "ukernels.h"

#include <immintrin.h>

#define MR 6
#define NR 16
#define KC 256

/* ---------------------------------------------------------------- B blocks → [kc][16] f32 */
/* The widens of the one 16-column block (float_gemm.h); f32 weights are read in place (f32_direct) */
static void widen_i8(const void *src, int64_t nq, void *dst) {
    const __m128i tr = _mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    const int8_t *s = src;
    for (int64_t q = 0; q < nq; q++) {
        /* lane l: columns 4l..4l+3 × 4 k → dword k = 4 columns of k */
        __m128i l0 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(s + q * 64)), tr);
        __m128i l1 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(s + q * 64 + 16)), tr);
        __m128i l2 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(s + q * 64 + 32)), tr);
        __m128i l3 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(s + q * 64 + 48)), tr);
        __m128i a01 = _mm_unpacklo_epi32(l0, l1), b01 = _mm_unpackhi_epi32(l0, l1); /* k0,k1 | k2,k3 cols 0-7 */
        __m128i a23 = _mm_unpacklo_epi32(l2, l3), b23 = _mm_unpackhi_epi32(l2, l3); /* cols 8-15 */
        float *d = (float *)dst + q * 4 * NR;
        _mm256_storeu_ps(d + 0 * NR, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(a01)));
        _mm256_storeu_ps(d + 0 * NR + 8, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(a23)));
        _mm256_storeu_ps(d + 1 * NR, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(a01, 8))));
        _mm256_storeu_ps(d + 1 * NR + 8, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(a23, 8))));
        _mm256_storeu_ps(d + 2 * NR, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b01)));
        _mm256_storeu_ps(d + 2 * NR + 8, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b23)));
        _mm256_storeu_ps(d + 3 * NR, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(b01, 8))));
        _mm256_storeu_ps(d + 3 * NR + 8, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(b23, 8))));
    }
}

static void widen_bf16(const void *src, int64_t np, void *dst) {
    const uint16_t *s = src;
    const __m256i hi = _mm256_set1_epi32((int)0xffff0000u);
    for (int64_t q = 0; q < np; q++) { /* pair row (k, k+1) of 16 columns → rows k and k + 1, exactly */
        __m256i x0 = _mm256_loadu_si256((const __m256i *)(s + q * 32));      /* columns 0..7 */
        __m256i x1 = _mm256_loadu_si256((const __m256i *)(s + q * 32 + 16)); /* columns 8..15 */
        float *d = (float *)dst + 2 * q * NR;
        _mm256_storeu_si256((__m256i *)d, _mm256_slli_epi32(x0, 16));
        _mm256_storeu_si256((__m256i *)(d + 8), _mm256_slli_epi32(x1, 16));
        _mm256_storeu_si256((__m256i *)(d + NR), _mm256_and_si256(x0, hi));
        _mm256_storeu_si256((__m256i *)(d + NR + 8), _mm256_and_si256(x1, hi));
    }
}

/* ---------------------------------------------------------------- the micro-kernel */
static inline __attribute__((always_inline)) void kern(const int rows, int64_t kc, const float *a, const float *b,
                                                       float *C, int accumulate) {
    /* 12 accumulators + 2 B vectors + 1 broadcast = 15 of the 16 ymm: the loops over rows are
     * unrolled (rows is a constant here) so that the accumulators stay in registers */
    __m256 c0[MR], c1[MR];
#pragma GCC unroll 6
    for (int i = 0; i < MR; i++) {
        if (i < rows) {
            c0[i] = accumulate ? _mm256_loadu_ps(C + i * NR) : _mm256_setzero_ps();
            c1[i] = accumulate ? _mm256_loadu_ps(C + i * NR + 8) : _mm256_setzero_ps();
        }
    }
    for (int64_t k = 0; k < kc; k++) {
        const __m256 b0 = _mm256_loadu_ps(b + k * NR), b1 = _mm256_loadu_ps(b + k * NR + 8);
#pragma GCC unroll 6
        for (int i = 0; i < MR; i++) {
            if (i < rows) {
                const __m256 av = _mm256_broadcast_ss(a + k * MR + i);
                c0[i] = _mm256_fmadd_ps(av, b0, c0[i]);
                c1[i] = _mm256_fmadd_ps(av, b1, c1[i]);
            }
        }
    }
#pragma GCC unroll 6
    for (int i = 0; i < MR; i++) {
        if (i < rows) {
            _mm256_storeu_ps(C + i * NR, c0[i]);
            _mm256_storeu_ps(C + i * NR + 8, c1[i]);
        }
    }
}

/* C[6][16] (+)= A[kc][6]ᵀ · B[kc][16] */
void qmm_f32_gemm_ukernel_6x16__avx2_fma(const qmm_fgemm *g, int rows, int64_t kc, const void *a, const void *b,
                                         float *C, int accumulate) {
    (void)g;
    QMM_FGEMM_ROWS6(kern, rows, kc, a, b, C, accumulate);
}

/* ---------------------------------------------------------------- engine */
static const qmm_fgemm k_gemm = {
    .mr = MR, .nr = NR, .kc = KC, .bf16 = 0,
    .b_bytes = (size_t)(KC + 4) * NR * sizeof(float), .b_col16 = 0 /* one block */,
    .widen_i8 = widen_i8, .widen_bf16 = widen_bf16, .f32_direct = 1,
    .kernel = qmm_f32_gemm_ukernel_6x16__avx2_fma, .epilogue = NULL,
};

/* attention (avx2_f32_attn.c) */

const qmm_engine_ops qmm_avx2_f32_ops = {
    .built = 1,
    .op[QMM_OP_LINEAR] = {.admit = qmm_admit_common_float, .desc = &k_gemm},
    .op[QMM_OP_ATTENTION] = {.admit = qmm_avx2_f32_attn_admit, .desc = &qmm_avx2_f32_attn},
};
