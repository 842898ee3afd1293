/*
 * avx2_int8.c — the AVX2 int8 engine (QMM_ENGINE_AVX2_INT8) for x86 without VNNI (Haswell to
 * Ice Lake client, Zen 1–3).
 *
 * Contract: y = epilogue(q · Wᵀ) per SPEC §1 with the same bits as the reference engine.
 * Products must be exact, and VPMADDUBSW saturates its int16 pair sums: u8 (q + 128 ≤ 255) times
 * s8 reaches 2·255·127 = 64770. The scheme used: the activation's magnitude |q| (VPABSB, ≤ 128
 * as u8) times the weight with the activation's sign moved onto it (VPSIGNB(w, q), |w| ≤ 127);
 * pair sums are ≤ 2·128·127 = 32512, never saturate; VPMADDWD with ones widens to int32.
 * Why this and not widening to int16: 4 instructions per 32 weight bytes and no reshuffle of
 * the n16k4 packing (widening needs a re-layout for VPMADDWD pairs and 2× the loads).
 * Its one precondition: no weight equals -128 (VPSIGNB cannot negate it). qmm's quantizer never
 * produces -128 (SPEC §2); a weight that has one (w->has_neg128, found at creation) is refused
 * by admit() with that reason, so dispatch moves on (to the float fallback). A borrowed weight's
 * values are not known at admission: a panel whose packing found a -128 runs the exact scalar
 * kernel (qmm_i8_tile.neg128); at M ≤ 64 a borrowed weight takes the rows regime (int8_rows_avx2.h),
 * which swaps the roles (|w| · sign(q, w): exact for every weight, and for q without -128).
 * Register blocking: up to 4 rows × 16 channels (8 accumulators). Blocking, threads, epilogue:
 * int8_gemm_avx2.h.
 */
#include "int8_gemm_avx2.h"
#include "int8_rows_avx2.h"
#include "ukernels.h"

/* qmm_a2_step_fn: |a| · (w with a's sign) in pairs (VPMADDUBSW, u8 × s8: the pair sums stay
 * within 2·128·127, see above), then the pairs summed into dwords (VPMADDWD by 1) */
static inline void avx2_int8_step(__m256i av, __m256i b0, __m256i b1, __m256i *lo, __m256i *hi) {
    const __m256i ones = _mm256_set1_epi16(1), mag = _mm256_abs_epi8(av);
    *lo = _mm256_add_epi32(*lo, _mm256_madd_epi16(_mm256_maddubs_epi16(mag, _mm256_sign_epi8(b0, av)), ones));
    *hi = _mm256_add_epi32(*hi, _mm256_madd_epi16(_mm256_maddubs_epi16(mag, _mm256_sign_epi8(b1, av)), ones));
}

/* qmm_a2_kernel_fn: mr <= 4 rows × one 16-column block */
static void block_4x16(const uint8_t *a, int64_t lda, const int8_t *b, int64_t kq, int32_t *c, int64_t ldc, int mr,
                       int first, const int8_t *pf, int64_t pf_kq) {
    switch (mr) {
    case 1: qmm_a2_mrx16(a, lda, b, kq, c, ldc, 1, first, pf, pf_kq, avx2_int8_step); break;
    case 2: qmm_a2_mrx16(a, lda, b, kq, c, ldc, 2, first, pf, pf_kq, avx2_int8_step); break;
    case 3: qmm_a2_mrx16(a, lda, b, kq, c, ldc, 3, first, pf, pf_kq, avx2_int8_step); break;
    default: qmm_a2_mrx16(a, lda, b, kq, c, ldc, 4, first, pf, pf_kq, avx2_int8_step); break;
    }
}

static const char *admit(const void *call, char *why, size_t n) {
    const qmm_call *c = call;
    const char *r = qmm_admit_common_int8(c, why, n);
    if (r) return r;
    if (c->w->has_neg128)
        return "weight holds -128 (not from qmm's symmetric quantizer): the exact VPSIGNB/VPMADDUBSW scheme needs "
               "|w| <= 127";
    return NULL;
}

/* The exact scalar form of the same kernel, for a panel of a borrowed weight that held -128 when
 * this call packed it (admission cannot see a borrowed weight's values; they may change between
 * calls). */
static void scalar_kernel(const uint8_t *a, int64_t lda, const int8_t *b, int64_t kq, int32_t *c, int64_t ldc, int mr,
                          int first, const int8_t *pf, int64_t pf_kq) {
    (void)pf;
    (void)pf_kq;
    for (int r = 0; r < mr; r++)
        for (int j = 0; j < 16; j++) {
            uint32_t sum = first ? 0u : (uint32_t)c[r * ldc + j];
            for (int64_t i = 0; i < kq * 4; i++)
                sum += (uint32_t)((int32_t)(int8_t)a[r * lda + i] * (int32_t)b[(i / 4) * 64 + j * 4 + i % 4]);
            c[r * ldc + j] = (int32_t)sum;
        }
}

/* The tile kernel (qmm_i8_tile_fn, ukernels.h): up to 4 rows × 4 blocks (64 columns) */
void qmm_qd8_qc8w_gemm_ukernel_4x64c4__avx2(const uint8_t *a, int64_t lda, const float *s, const qmm_call *out,
                                            const qmm_i8_tile *t) {
    qmm_a2_tile(a, lda, s, out, t, t->neg128 ? scalar_kernel : block_4x16, 0);
}

/* ---------------------------------------------------------------- borrowed weights: small M */
/* The rows kernels (qmm_i8_rows_fn, ukernels.h; the rows regime, int8_rows_avx2.h, in its sign
 * form: exact for every weight, -128 included): columns [n0, n1) from the rows w (ldw bytes
 * apart), M = a->M in the kernel's range. */
void qmm_qd8_qc8w_rows_ukernel_m1to12__avx2_dot(const int8_t *w, int64_t ldw, const qmm_rows_act *a,
                                                const qmm_call *out, int64_t n0, int64_t n1) {
    qmm_a2r_kernel_m1to12(0, w, ldw, a, out, n0, n1);
}

void qmm_qd8_qc8w_rows_ukernel_m13to64__avx2_dot(const int8_t *w, int64_t ldw, const qmm_rows_act *a,
                                                 const qmm_call *out, int64_t n0, int64_t n1) {
    qmm_a2r_kernel_m13to64(0, w, ldw, a, out, n0, n1);
}

static const qmm_i8_rows_ukernel k_rows[] = {
    {"qmm_qd8_qc8w_rows_ukernel_m1to12__avx2_dot", qmm_qd8_qc8w_rows_ukernel_m1to12__avx2_dot, 1, QMM_A2R_DOT_M},
    {"qmm_qd8_qc8w_rows_ukernel_m13to64__avx2_dot", qmm_qd8_qc8w_rows_ukernel_m13to64__avx2_dot, QMM_A2R_DOT_M + 1,
     QMM_A2R_M},
};
_Static_assert(QMM_A2R_DOT_M == 12 && QMM_A2R_M <= 64, "the rows kernels' ranges above");

/* its W4A8 family (qmm_i8_engine.w4a8): the fused rows kernel of avx2_int8_w4a8.c */
static const qmm_w4_rows_ukernel k_w4a8[] = {
    {"qmm_qd8_w4w6_rows_ukernel_m1to8__avx2_fused", qmm_qd8_w4w6_rows_ukernel_m1to8__avx2_fused, 1, 8,
     QMM_W4_BITS4 | QMM_W4_BITS6, 0},
};
static const qmm_w4_rows_kernels k_w4a8_family = {k_w4a8, 1, NULL};

static const qmm_i8_engine k_avx2_int8 = {
    QMM_A2_ENGINE_FIELDS(0, 4, qmm_qd8_qc8w_gemm_ukernel_4x64c4__avx2, QMM_A2R_M, k_rows, (int)(sizeof k_rows / sizeof k_rows[0])),
    .w4a8 = &k_w4a8_family,
};

const qmm_engine_ops qmm_avx2_int8_ops = {.built = 1, .op[QMM_OP_LINEAR] = {.admit = admit, .desc = &k_avx2_int8}};
