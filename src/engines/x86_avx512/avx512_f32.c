/*
 * avx512_f32.c — the AVX-512 FP32 float engine (FMA): the FP32 baseline, the engine of f32 (and
 * bf16, widened exactly) float weights, and a W8A16 fallback for int8 weights.
 *
 * Contract (SPEC §4; driver and layouts in core/float_gemm.h):
 *   int8 weight (fallback / full_precision): a = act(x), rotated if w->convrot_gs (exactly
 *     qmm_ref_act_rotate_row, values in x's dtype), kept in f32; the int8 weights are widened
 *     to f32 inside the engine from the shared n16k4 packing, one (kc × 64) block at a time;
 *     y = out((acc · w_scale[n]) + bias[n]), acc an fp32 FMA chain over k in order.
 *   float weight: a = act(x); W from w->fp (f32 as is, bf16 widened exactly);
 *     y = out(acc + bias[n]).
 * Admission: qmm_admit_common_float (no i32 output, no shared token scales); nothing else.
 *
 * Micro-kernel: 6 rows × 64 columns (24 zmm accumulators), B block [kc][64] f32 in L1, A
 * broadcast from the 6-row panel. Each output element is one FMA chain over k = 0, 1, ...
 * starting from 0 — the same chain as avx2_f32, so both f32 engines give identical bits.
 */
#include "avx512_attn.h"
#include "float_gemm.h"
#include "avx512/pack_avx512.h"
#include "qmm_internal.h"
#include "ukernels.h"

#include <immintrin.h>

#define MR 6
#define NR 64
#define KC 128

/* ---------------------------------------------------------------- B blocks → [kc][64] f32 */
/* The widens of one 16-column block (float_gemm.h): dst = its 16 columns of row k0, rows NR apart */
static void widen_i8(const void *src, int64_t nq, void *dst) {
    /* per quad: 16 columns × 4 k (byte 4c + k) → 4 rows of 16 f32 */
    const __m512i tr = _mm512_set4_epi32(0x0f0b0703, 0x0e0a0602, 0x0d090501, 0x0c080400);
    const __m512i perm = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    for (int64_t q = 0; q < nq; q++) {
        float *d = (float *)dst + q * 4 * NR;
        __m512i x = _mm512_loadu_si512((const int8_t *)src + q * 64);
        x = _mm512_shuffle_epi8(x, tr);            /* per lane: dword k = 4 columns of k */
        x = _mm512_permutexvar_epi32(perm, x);     /* 16-byte chunk k = 16 columns of k */
        _mm512_storeu_ps(d + 0 * NR, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm512_extracti32x4_epi32(x, 0))));
        _mm512_storeu_ps(d + 1 * NR, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm512_extracti32x4_epi32(x, 1))));
        _mm512_storeu_ps(d + 2 * NR, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm512_extracti32x4_epi32(x, 2))));
        _mm512_storeu_ps(d + 3 * NR, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm512_extracti32x4_epi32(x, 3))));
    }
}

static void widen_bf16(const void *src, int64_t np, void *dst) {
    const __m512i hi = _mm512_set1_epi32((int)0xffff0000u);
    for (int64_t q = 0; q < np; q++) { /* pair row (k, k+1) of 16 columns → rows k and k + 1, exactly */
        float *d = (float *)dst + 2 * q * NR;
        __m512i x = _mm512_loadu_si512((const uint16_t *)src + q * 32);
        _mm512_storeu_si512(d, _mm512_slli_epi32(x, 16));
        _mm512_storeu_si512(d + NR, _mm512_and_si512(x, hi));
    }
}

static void widen_f32(const void *src, int64_t nk, void *dst) {
    for (int64_t k = 0; k < nk; k++) _mm512_storeu_ps((float *)dst + k * NR, _mm512_loadu_ps((const float *)src + k * 16));
}

/* ---------------------------------------------------------------- the micro-kernel */
static inline __attribute__((always_inline)) void kern(const int rows, int64_t kc, const float *a, const float *b,
                                                       float *C, int accumulate) {
    /* 24 accumulators + 4 B vectors + 1 broadcast of the 32 zmm: the loops over rows are
     * unrolled (rows is a constant here) so that the accumulators stay in registers */
    __m512 c[4][MR];
#pragma GCC unroll 6
    for (int i = 0; i < MR; i++) {
        if (i < rows) {
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++)
                c[j][i] = accumulate ? _mm512_loadu_ps(C + i * NR + j * 16) : _mm512_setzero_ps();
        }
    }
    for (int64_t k = 0; k < kc; k++) {
        const float *bk = b + k * NR;
        const __m512 b0 = _mm512_load_ps(bk), b1 = _mm512_load_ps(bk + 16), b2 = _mm512_load_ps(bk + 32),
                     b3 = _mm512_load_ps(bk + 48);
#pragma GCC unroll 6
        for (int i = 0; i < MR; i++) {
            if (i < rows) {
                const __m512 av = _mm512_set1_ps(a[k * MR + i]);
                c[0][i] = _mm512_fmadd_ps(av, b0, c[0][i]);
                c[1][i] = _mm512_fmadd_ps(av, b1, c[1][i]);
                c[2][i] = _mm512_fmadd_ps(av, b2, c[2][i]);
                c[3][i] = _mm512_fmadd_ps(av, b3, c[3][i]);
            }
        }
    }
#pragma GCC unroll 6
    for (int i = 0; i < MR; i++) {
        if (i < rows) {
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++) _mm512_storeu_ps(C + i * NR + j * 16, c[j][i]);
        }
    }
}

/* C[6][64] (+)= A[kc][6]ᵀ · B[kc][64] */
void qmm_f32_gemm_ukernel_6x64__avx512f(const qmm_fgemm *g, int rows, int64_t kc, const void *a, const void *b,
                                        float *C, int accumulate) {
    (void)g;
    QMM_FGEMM_ROWS6(kern, rows, kc, a, b, C, accumulate);
}

/* ---------------------------------------------------------------- engine */
static const qmm_fgemm k_gemm = {
    .mr = MR, .nr = NR, .kc = KC, .bf16 = 0,
    .b_bytes = (size_t)(KC + 4) * NR * sizeof(float), .b_col16 = 16 * sizeof(float),
    .widen_i8 = widen_i8, .widen_bf16 = widen_bf16, .widen_f32 = widen_f32,
    .kernel = qmm_f32_gemm_ukernel_6x64__avx512f, .epilogue = qmm_float_epilogue_avx512,
    .pack = qmm_z_pack_n16k4,
};

const qmm_engine_ops qmm_avx512_f32_ops = {
    .built = 1,
    .op[QMM_OP_LINEAR] = {.admit = qmm_admit_common_float, .desc = &k_gemm},
    .op[QMM_OP_ATTENTION] = {.admit = qmm_avx512_f32_attn_admit, .desc = &qmm_avx512_f32_attn},
};
