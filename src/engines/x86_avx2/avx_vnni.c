/*
 * avx_vnni.c — the AVX-VNNI int8 engine (QMM_ENGINE_AVX_VNNI): 256-bit VPDPBUSD {vex} for CPUs
 * with AVX-VNNI but no AVX-512 (Alder Lake and later client cores, Sierra Forest).
 *
 * Contract: y = epilogue(q · Wᵀ) per SPEC §1 with the same bits as the reference engine (int32
 * accumulators and float outputs). VPDPBUSD multiplies u8 × s8, so A is a = q + 128 (the pre-pass
 * output flipped by XOR 0x80) and the epilogue subtracts 128·colsum[n]: exact in int32.
 * Weights are the shared n16k4 packing, read in place: one 64-byte k-quad row of a 16-channel
 * block is two ymm (channels 0..7, 8..15), each dword = 4 consecutive k of one channel, which is
 * exactly what VPDPBUSD wants against a broadcast dword of 4 activation bytes.
 * Register blocking: up to 6 rows × 16 channels = 12 ymm accumulators + 2 weight ymm + 1
 * broadcast. Blocking, threads and epilogue: int8_gemm_avx2.h. A borrowed weight at M <= 32
 * takes the rows regime (below: int8_rows_avx2.h's dot form up to 8 tokens, avx_vnni_rows.c's
 * tokens in lanes from 9).
 * Admission: the common int8 checks only (any K, M, N; -128 weights are fine: u8 × s8 is exact).
 */
#include "avx2_attn.h"
#include "int8_gemm_avx2.h"
#include "int8_rows_avx2.h"
#include "ukernels.h"

#if defined(__AVXVNNI__)
#define QMM_DPBUSD(acc, a, b) _mm256_dpbusd_avx_epi32((acc), (a), (b))
#define QMM_HAVE_AVXVNNI_BUILD 1
#endif

#ifdef QMM_HAVE_AVXVNNI_BUILD
/* qmm_a2_step_fn: one VPDPBUSD per half (u8 a × s8 w, 4 products summed into each dword) */
static inline void avx_vnni_step(__m256i av, __m256i b0, __m256i b1, __m256i *lo, __m256i *hi) {
    *lo = QMM_DPBUSD(*lo, av, b0);
    *hi = QMM_DPBUSD(*hi, av, b1);
}

/* One row (decode, M tails): weight-streaming bound; two accumulator pairs (even / odd k-quads)
 * so the VPDPBUSD latency chain does not limit the stream. Integer sums: same result. */
static void avx_vnni_1x16(const uint8_t *a, const int8_t *b, int64_t kq, int32_t *c, int first, const int8_t *pf,
                      int64_t pf_kq) {
    __m256i lo0 = _mm256_setzero_si256(), hi0 = lo0, lo1 = lo0, hi1 = lo0;
    int64_t i = 0;
    for (; i + 2 <= kq; i += 2) {
        if (i < pf_kq) {
            _mm_prefetch((const char *)(pf + i * 64), _MM_HINT_T1);
            _mm_prefetch((const char *)(pf + i * 64 + 64), _MM_HINT_T1);
        }
        int32_t v0, v1;
        memcpy(&v0, a + i * 4, 4);
        memcpy(&v1, a + i * 4 + 4, 4);
        __m256i a0 = _mm256_set1_epi32(v0), a1 = _mm256_set1_epi32(v1);
        lo0 = QMM_DPBUSD(lo0, a0, _mm256_load_si256((const __m256i *)(b + i * 64)));
        hi0 = QMM_DPBUSD(hi0, a0, _mm256_load_si256((const __m256i *)(b + i * 64 + 32)));
        lo1 = QMM_DPBUSD(lo1, a1, _mm256_load_si256((const __m256i *)(b + i * 64 + 64)));
        hi1 = QMM_DPBUSD(hi1, a1, _mm256_load_si256((const __m256i *)(b + i * 64 + 96)));
    }
    if (i < kq) {
        int32_t v0;
        memcpy(&v0, a + i * 4, 4);
        __m256i a0 = _mm256_set1_epi32(v0);
        lo0 = QMM_DPBUSD(lo0, a0, _mm256_load_si256((const __m256i *)(b + i * 64)));
        hi0 = QMM_DPBUSD(hi0, a0, _mm256_load_si256((const __m256i *)(b + i * 64 + 32)));
    }
    lo0 = _mm256_add_epi32(lo0, lo1);
    hi0 = _mm256_add_epi32(hi0, hi1);
    if (!first) {
        lo0 = _mm256_add_epi32(lo0, _mm256_loadu_si256((const __m256i *)c));
        hi0 = _mm256_add_epi32(hi0, _mm256_loadu_si256((const __m256i *)(c + 8)));
    }
    _mm256_storeu_si256((__m256i *)c, lo0);
    _mm256_storeu_si256((__m256i *)(c + 8), hi0);
}

/* qmm_a2_kernel_fn: mr <= 6 rows × one 16-column block */
static void block_6x16(const uint8_t *a, int64_t lda, const int8_t *b, int64_t kq, int32_t *c, int64_t ldc, int mr,
                       int first, const int8_t *pf, int64_t pf_kq) {
    switch (mr) {
    case 1: avx_vnni_1x16(a, b, kq, c, first, pf, pf_kq); break;
    case 2: qmm_a2_mrx16(a, lda, b, kq, c, ldc, 2, first, pf, pf_kq, avx_vnni_step); break;
    case 3: qmm_a2_mrx16(a, lda, b, kq, c, ldc, 3, first, pf, pf_kq, avx_vnni_step); break;
    case 4: qmm_a2_mrx16(a, lda, b, kq, c, ldc, 4, first, pf, pf_kq, avx_vnni_step); break;
    case 5: qmm_a2_mrx16(a, lda, b, kq, c, ldc, 5, first, pf, pf_kq, avx_vnni_step); break;
    default: qmm_a2_mrx16(a, lda, b, kq, c, ldc, 6, first, pf, pf_kq, avx_vnni_step); break;
    }
}
#endif

static const char *admit(const void *call, char *why, size_t n) {
    const qmm_call *c = call;
    return qmm_admit_common_int8(c, why, n);
}

#ifdef QMM_HAVE_AVXVNNI_BUILD
/* The tile kernel (qmm_i8_tile_fn, ukernels.h): up to 6 rows × 4 blocks (64 columns) */
void qmm_qd8_qc8w_gemm_ukernel_6x64c4__avxvnni(const uint8_t *a, int64_t lda, const float *s, const qmm_call *out,
                                               const qmm_i8_tile *t) {
    qmm_a2_tile(a, lda, s, out, t, block_6x16, 1);
}

/* The rows kernels (qmm_i8_rows_fn, ukernels.h) for a borrowed weight at M <= ROWS_M: up to 8
 * tokens the rows regime's dot form (int8_rows_avx2.h, VPDPBUSD: w + 128 against q, less
 * 128·Σq; exact for every w and q), 9..32 the tokens in lanes (avx_vnni_rows.c: q against each
 * row's broadcast k-quads as w + 128, less 128·Σq). Past 32 tokens the panels. Measured
 * (bench/NOTES.md): the dot form re-reads all of q for every row of W, past L1 at 12 tokens of
 * K = 5376, and loses to the panels there; the lanes form does not. */
enum { ROWS_DOT_M = 8, ROWS_M = 32, W4_BCAST_M = 24 };
_Static_assert((int)ROWS_DOT_M <= (int)QMM_A2R_DOT_M, "one token group per row");

void qmm_qd8_qc8w_rows_ukernel_m1to8__avxvnni_dot(const int8_t *w, int64_t ldw, const qmm_rows_act *a,
                                                  const qmm_call *out, int64_t n0, int64_t n1) {
    qmm_a2r_kernel_m1to12(1, w, ldw, a, out, n0, n1);
}

static const qmm_i8_rows_ukernel k_rows[] = {
    {"qmm_qd8_qc8w_rows_ukernel_m1to8__avxvnni_dot", qmm_qd8_qc8w_rows_ukernel_m1to8__avxvnni_dot, 1, ROWS_DOT_M},
    {"qmm_qd8_qc8w_rows_ukernel_m9to32__avxvnni_bcast", qmm_qd8_qc8w_rows_ukernel_m9to32__avxvnni_bcast, ROWS_DOT_M + 1,
     ROWS_M},
};

/* its W4A8 family (qmm_i8_engine.w4a8): the fused rows kernels of avx_vnni_w4a8.c, the forms of
 * the int8 rows kernels above on the engine's token copy, up to 24 tokens (at 25..32 the rows
 * looked up into the thread's buffer for the int8 kernel measured as fast: bench/NOTES.md) */
static const qmm_w4_rows_ukernel k_w4a8[] = {
    {"qmm_qd8_w4w6_rows_ukernel_m1to8__avxvnni_fused", qmm_qd8_w4w6_rows_ukernel_m1to8__avxvnni_fused, 1, ROWS_DOT_M,
     QMM_W4_BITS4 | QMM_W4_BITS6, 0},
    {"qmm_qd8_w4w6_rows_ukernel_m9to24__avxvnni_bcast", qmm_qd8_w4w6_rows_ukernel_m9to24__avxvnni_bcast, ROWS_DOT_M + 1,
     W4_BCAST_M, QMM_W4_BITS4 | QMM_W4_BITS6, 0},
};
static const qmm_w4_rows_kernels k_w4a8_family = {k_w4a8, (int)(sizeof k_w4a8 / sizeof k_w4a8[0]), NULL};

static const qmm_i8_engine k_avx_vnni = {
    QMM_A2_ENGINE_FIELDS(1, 6, qmm_qd8_qc8w_gemm_ukernel_6x64c4__avxvnni, ROWS_M, k_rows, (int)(sizeof k_rows / sizeof k_rows[0])),
    .rows_ap_bytes = qmm_avx_vnni_rows_ap_bytes, .rows_ap_fill = qmm_avx_vnni_rows_ap_fill,
    .w4a8 = &k_w4a8_family,
};
#endif

#ifdef QMM_HAVE_AVXVNNI_BUILD
const qmm_engine_ops qmm_avx_vnni_ops = {.built = 1, .op[QMM_OP_LINEAR] = {.admit = admit, .desc = &k_avx_vnni},
                                         .op[QMM_OP_ATTENTION] = {.admit = qmm_avx_vnni_attn_admit, .desc = &qmm_avx_vnni_attn}};
#else /* the compiler lacks AVX-VNNI: listed, never usable */
const qmm_engine_ops qmm_avx_vnni_ops = {.built = 0, .op[QMM_OP_LINEAR] = {.admit = admit}};
#endif
