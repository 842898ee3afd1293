/*
 * avx512_bf16.c — the AVX512-BF16 float engine (VDPBF16PS): the BF16 baseline, the engine of
 * bf16 float weights, and the W8A16 fallback for int8 weights on CPUs without AMX.
 *
 * Contract (SPEC §4; driver and layouts in core/float_gemm.h):
 *   int8 weight (fallback / full_precision): a = act(x), rotated if w->convrot_gs (exactly
 *     qmm_ref_act_rotate_row, values in x's dtype), then rounded to bf16 (RNE); the int8 weights
 *     (exact in bf16) are widened inside the engine from the shared n16k4 packing into the
 *     VDPBF16PS operand, one (kc × 64) block at a time — never a dequantized copy;
 *     y = out((acc · w_scale[n]) + bias[n]) in fp32.
 *   bf16 float weight: a = act(x) rounded to bf16; W read from w->fp.bf16 (n16k2: one k-pair row
 *     of 16 columns is exactly one VDPBF16PS operand); y = out(acc + bias[n]).
 *   f32 float weight: refused (this engine would round the weights to bf16; avx512_f32 runs them).
 * acc: VDPBF16PS chains over k-pairs in order, starting from 0 (products exact, fp32 adds; the
 * instruction flushes denormals) — within fp32 summation noise of an fp64 sum, not bit-equal to
 * the f32 engines.
 *
 * Micro-kernel: 6 rows × 64 columns (24 zmm accumulators), B block [kc/2][64][2] bf16 (32 KiB, in
 * L1), A k-pairs broadcast (one dword) from the 6-row panel.
 */
#include "avx512_attn.h"
#include "float_gemm.h"
#include "avx512/pack_avx512.h"
#include "qmm_internal.h"
#include "ukernels.h"

#include <immintrin.h>

#define MR 6
#define NR 64
#define KC 256

/* ---------------------------------------------------------------- B blocks → [kc/2][64][2] bf16 */
/* The widens of one 16-column block (float_gemm.h): dst = its 16 columns of pair row k0/2, pair
 * rows 2·NR values apart */
static void widen_i8(const void *src, int64_t nq, void *dst) {
    /* per quad: 16 columns × 4 k int8 (byte 4c + k) → two k-pair rows (k0,k1) and (k2,k3) */
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    for (int64_t q = 0; q < nq; q++) {
        uint16_t *d = (uint16_t *)dst + q * 4 * NR;
        __m512i x = _mm512_loadu_si512((const int8_t *)src + q * 64);
        __m512 f0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm512_extracti32x4_epi32(x, 0)));
        __m512 f1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm512_extracti32x4_epi32(x, 1)));
        __m512 f2 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm512_extracti32x4_epi32(x, 2)));
        __m512 f3 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm512_extracti32x4_epi32(x, 3)));
        /* exact: int8 values are bf16 numbers. dword 2c = (k0,k1) of column c, 2c+1 = (k2,k3) */
        __m512i lo = (__m512i)_mm512_cvtne2ps_pbh(f1, f0); /* columns 0..7 */
        __m512i hi = (__m512i)_mm512_cvtne2ps_pbh(f3, f2); /* columns 8..15 */
        _mm512_storeu_si512(d, _mm512_permutex2var_epi32(lo, even, hi));
        _mm512_storeu_si512(d + 2 * NR, _mm512_permutex2var_epi32(lo, odd, hi));
    }
}

static void widen_bf16(const void *src, int64_t np, void *dst) { /* the n16k2 pair rows as they are */
    for (int64_t q = 0; q < np; q++)
        _mm512_storeu_si512((uint16_t *)dst + q * 2 * NR, _mm512_loadu_si512((const uint16_t *)src + q * 32));
}

/* ---------------------------------------------------------------- the micro-kernel */
static inline __attribute__((always_inline)) void kern(const int rows, int64_t kc, const uint32_t *a,
                                                       const uint16_t *b, float *C, int accumulate) {
    __m512 c[MR][4];
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < 4; j++) c[i][j] = accumulate ? _mm512_loadu_ps(C + i * NR + j * 16) : _mm512_setzero_ps();
    const int64_t pairs = kc / 2;
    for (int64_t q = 0; q < pairs; q++) {
        const uint16_t *bq = b + q * 2 * NR;
        __m512bh b0 = (__m512bh)_mm512_load_si512(bq), b1 = (__m512bh)_mm512_load_si512(bq + 32),
                 b2 = (__m512bh)_mm512_load_si512(bq + 64), b3 = (__m512bh)_mm512_load_si512(bq + 96);
        for (int i = 0; i < rows; i++) {
            __m512bh av = (__m512bh)_mm512_set1_epi32((int)a[q * MR + i]);
            c[i][0] = _mm512_dpbf16_ps(c[i][0], av, b0);
            c[i][1] = _mm512_dpbf16_ps(c[i][1], av, b1);
            c[i][2] = _mm512_dpbf16_ps(c[i][2], av, b2);
            c[i][3] = _mm512_dpbf16_ps(c[i][3], av, b3);
        }
    }
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < 4; j++) _mm512_storeu_ps(C + i * NR + j * 16, c[i][j]);
}

/* C[6][64] (+)= A[kc/2][6][2]ᵀ · B[kc/2][64][2] */
void qmm_bf16_f32_gemm_ukernel_6x64__avx512bf16(const qmm_fgemm *g, int rows, int64_t kc, const void *a,
                                                const void *b, float *C, int accumulate) {
    (void)g;
    QMM_FGEMM_ROWS6(kern, rows, kc, a, b, C, accumulate);
}

/* ---------------------------------------------------------------- engine */
static const char *admit(const void *call, char *why, size_t n) {
    const qmm_call *c = call;
    const char *r = qmm_admit_common_float(c, why, n);
    if (r) return r;
    if (!c->w->is_int8 && c->w->fdtype != QMM_BF16)
        return "f32 weights: avx512_bf16 would round them to bf16 (avx512_f32 runs them)";
    return NULL;
}

static const qmm_fgemm k_gemm = {
    .mr = MR, .nr = NR, .kc = KC, .bf16 = 1,
    .b_bytes = (size_t)(KC + 4) * NR * sizeof(uint16_t), .b_col16 = 32 * sizeof(uint16_t),
    .widen_i8 = widen_i8, .widen_bf16 = widen_bf16, /* f32 weights: refused by admit */
    .kernel = qmm_bf16_f32_gemm_ukernel_6x64__avx512bf16, .epilogue = qmm_float_epilogue_avx512,
    .pack = qmm_z_pack_n16k4,
};

const qmm_engine_ops qmm_avx512_bf16_ops = {
    .built = 1,
    .op[QMM_OP_LINEAR] = {.admit = admit, .desc = &k_gemm},
    .op[QMM_OP_ATTENTION] = {.admit = qmm_avx512_bf16_attn_admit, .desc = &qmm_avx512_bf16_attn},
};
