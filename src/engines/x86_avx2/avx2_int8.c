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
 * kernel (qmm_i8_tile.neg128); at M ≤ ROWS_M (64) a borrowed weight takes the rows regime below,
 * which swaps the roles (|w| · sign(q, w): exact for every weight, and for q without -128).
 * Register blocking: up to 4 rows × 16 channels (8 accumulators). Blocking, threads, epilogue:
 * int8_gemm_avx2.h.
 */
#include "int8_gemm_avx2.h"
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

static const char *admit(const qmm_call *c, char *why, size_t n) {
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
void qmm_qd8_qc8w_gemm_ukernel_4x64c4__avx2(const qmm_i8_gemm *g, const qmm_i8_tile *t) {
    qmm_a2_tile(g, t, t->neg128 ? scalar_kernel : block_4x16);
}

/* ---------------------------------------------------------------- borrowed weights: small M */
/* The rows regime (M <= ROWS_M, int8_gemm.h): the caller's rows read in place, each byte once, in
 * R long sequential streams (stream r: rows n0 + r·len + j of the task; with ld == K a run of
 * len·K bytes, prefetched ROWS_PF bytes ahead into L2), all M rows of q against each. Per 32
 * bytes of K and row: |w| once, and per token VPSIGNB(q, w) (q with w's sign), VPMADDUBSW(|w|,
 * ·), VPMADDWD(1): pair sums <= 2·128·127, never saturate, and -128 weights are exact (|-128| =
 * 128 as u8); the precondition moves to q: a call whose q holds -128 (driver's qneg128, rare: only
 * from token_scales_in or a clamped rounding) takes the exact scalar dot products. R·M
 * accumulators (R·(M + 2) + 2 <= 16 ymm: R = 4, 3, 2, 2 for M = 1, 2, 3, 4; R = 1 above). Past
 * M = ROWS_DOT_M (12) they would spill: 13 <= M <= ROWS_M takes token groups, ng of 8 and a
 * last of 5..12, one after the other on each row (the later ones read the row from L1: the same
 * memory traffic, one more load and |w| per 32 bytes and group). Each
 * (row, token) sum is reduced at the end of its row; per 16 rows of a stream the outputs go
 * through qmm_a2_epilogue_row. The last K % 32 bytes of a row are copied into a zeroed buffer:
 * nothing past W[n][K-1] is read. */
enum {
    ROWS_M = 64,      /* up to this M: the rows regime */
    ROWS_DOT_M = 12,  /* up to this M: one token group per row (above, the accumulators would spill) */
    ROWS_RMAX = 4,    /* the most rows of W per step */
    ROWS_PF = 4096    /* prefetch distance per stream, bytes (into L2) */
};

static inline int rows_r(int m) { return m == 1 ? 4 : m == 2 ? 3 : m <= 4 ? 2 : 1; }

/* out[i][jn + r·16] = Σ_k w_r[k]·q[i][k] for rows w, w + span, .. (R of them, K bytes each) */
static inline __attribute__((always_inline)) void rows_dot(const int m, const int R, const int8_t *w, int64_t span,
                                                           int64_t K, const int8_t *q, int64_t lda,
                                                           int32_t out[ROWS_M][ROWS_RMAX * 16], int jn) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i acc[ROWS_RMAX][ROWS_DOT_M];
    for (int r = 0; r < R; r++)
        for (int i = 0; i < m; i++) acc[r][i] = _mm256_setzero_si256();
    for (int64_t k = 0; k < K; k += 32) {
        __m256i x[ROWS_RMAX], ax[ROWS_RMAX];
        for (int r = 0; r < R; r++) {
            const int8_t *p = w + r * span + k;
            _mm_prefetch((const char *)(p + ROWS_PF), _MM_HINT_T1);
            if (K - k >= 32) {
                x[r] = _mm256_loadu_si256((const __m256i *)p);
            } else {
                int8_t tmp[32] = {0};
                memcpy(tmp, p, (size_t)(K - k));
                x[r] = _mm256_loadu_si256((const __m256i *)tmp);
            }
            ax[r] = _mm256_abs_epi8(x[r]);
        }
        for (int i = 0; i < m; i++) {
            const __m256i qv = _mm256_loadu_si256((const __m256i *)(q + i * lda + k));
            for (int r = 0; r < R; r++)
                acc[r][i] = _mm256_add_epi32(
                    acc[r][i], _mm256_madd_epi16(_mm256_maddubs_epi16(ax[r], _mm256_sign_epi8(qv, x[r])), ones));
        }
    }
    for (int r = 0; r < R; r++)
        for (int i = 0; i < m; i++) out[i][r * 16 + jn] = qmm_a2_hsum8(acc[r][i]);
}

/* the same sums, exact for any q (a call whose q holds -128) */
static void rows_dot_scalar(int m, const int8_t *w, int64_t K, const int8_t *q, int64_t lda,
                            int32_t out[ROWS_M][ROWS_RMAX * 16], int jn) {
    for (int i = 0; i < m; i++) {
        uint32_t sum = 0;
        for (int64_t k = 0; k < K; k++) sum += (uint32_t)((int32_t)w[k] * (int32_t)q[i * lda + k]);
        out[i][jn] = (int32_t)sum;
    }
}

/* R streams of len rows, stream r = rows s0 + r·span + j (j < len), against ng token groups of 8
 * and then the last, [8·ng, 8·ng + last); after every 16 rows of the streams (and after the last)
 * their outputs through the epilogue */
static inline __attribute__((always_inline)) void rows_run(const int last, const int ng, const int R,
                                                           const qmm_i8_gemm *g, int64_t s0, int64_t span,
                                                           int64_t len) {
    const int m = 8 * ng + last;
    const qmm_call *c = g->c;
    const int64_t K = c->K, ld = c->w->borrow.ld;
    const int8_t *q = (const int8_t *)g->a;
    int scalar = 0;
    for (int i = 0; i < m; i++) scalar |= g->qneg128[i];
    int32_t out[ROWS_M][ROWS_RMAX * 16];
    for (int64_t j = 0; j < len; j++) {
        const int8_t *w = c->w->borrow.data + (s0 + j) * ld;
        if (scalar)
            for (int r = 0; r < R; r++) rows_dot_scalar(m, w + r * span * ld, K, q, g->Kp, out, (int)(j % 16) + r * 16);
        else {
            for (int gi = 0; gi < ng; gi++)
                rows_dot(8, R, w, span * ld, K, q + 8 * gi * g->Kp, g->Kp, out + 8 * gi, (int)(j % 16));
            rows_dot(last, R, w, span * ld, K, q + 8 * ng * g->Kp, g->Kp, out + 8 * ng, (int)(j % 16));
        }
        if (j % 16 != 15 && j != len - 1) continue;
        const int cols = (int)(j % 16) + 1;
        qmm_a2_rows_out(g, (const int32_t(*)[64])out, R, m, s0 + j - cols + 1, span, cols);
    }
}

/* blocks [b0, b1) for 8·ng + last tokens: R streams of ⌊rows / R⌋ rows, the rest one at a time
 * (with token groups, ng > 0, one stream: R = 1, a constant, so the accumulators stay in registers) */
static inline __attribute__((always_inline)) void rows_blocks(const int last, const int ng, const qmm_i8_gemm *g,
                                                              int64_t b0, int64_t b1) {
    const int64_t N = g->c->N, n0 = b0 * 16, n1 = b1 * 16 < N ? b1 * 16 : N;
    if (ng > 0) {
        rows_run(last, ng, 1, g, n0, 0, n1 - n0);
        return;
    }
    const int R = rows_r(last);
    const int64_t len = (n1 - n0) / R;
    if (len > 0) rows_run(last, 0, R, g, n0, len, len);
    if (n0 + R * len < n1) rows_run(last, 0, 1, g, n0 + R * len, 0, n1 - n0 - R * len);
}

/* The rows kernels (qmm_i8_rows_fn, ukernels.h): 16-column blocks [b0, b1) of a borrowed weight,
 * M = g->c->M in the kernel's range. Up to ROWS_DOT_M tokens: one token group per row. */
void qmm_qd8_qc8w_rows_ukernel_m1to12__avx2_dot(const qmm_i8_gemm *g, int64_t b0, int64_t b1) {
    switch (g->c->M) {
    case 1: rows_blocks(1, 0, g, b0, b1); break;
    case 2: rows_blocks(2, 0, g, b0, b1); break;
    case 3: rows_blocks(3, 0, g, b0, b1); break;
    case 4: rows_blocks(4, 0, g, b0, b1); break;
    case 5: rows_blocks(5, 0, g, b0, b1); break;
    case 6: rows_blocks(6, 0, g, b0, b1); break;
    case 7: rows_blocks(7, 0, g, b0, b1); break;
    case 8: rows_blocks(8, 0, g, b0, b1); break;
    case 9: rows_blocks(9, 0, g, b0, b1); break;
    case 10: rows_blocks(10, 0, g, b0, b1); break;
    case 11: rows_blocks(11, 0, g, b0, b1); break;
    default: rows_blocks(12, 0, g, b0, b1); break;
    }
}

/* 13..ROWS_M tokens: groups of 8, the last of 1..8 */
void qmm_qd8_qc8w_rows_ukernel_m13to64__avx2_dot(const qmm_i8_gemm *g, int64_t b0, int64_t b1) {
    const int ng = (int)(g->c->M - 1) / 8;
    switch (g->c->M - 8 * ng) {
    case 1: rows_blocks(1, ng, g, b0, b1); break;
    case 2: rows_blocks(2, ng, g, b0, b1); break;
    case 3: rows_blocks(3, ng, g, b0, b1); break;
    case 4: rows_blocks(4, ng, g, b0, b1); break;
    case 5: rows_blocks(5, ng, g, b0, b1); break;
    case 6: rows_blocks(6, ng, g, b0, b1); break;
    case 7: rows_blocks(7, ng, g, b0, b1); break;
    default: rows_blocks(8, ng, g, b0, b1); break;
    }
}

static const qmm_i8_rows_ukernel k_rows[] = {
    {"qmm_qd8_qc8w_rows_ukernel_m1to12__avx2_dot", qmm_qd8_qc8w_rows_ukernel_m1to12__avx2_dot, 1, ROWS_DOT_M},
    {"qmm_qd8_qc8w_rows_ukernel_m13to64__avx2_dot", qmm_qd8_qc8w_rows_ukernel_m13to64__avx2_dot, ROWS_DOT_M + 1, ROWS_M},
};
_Static_assert(ROWS_DOT_M == 12 && ROWS_M <= 64, "the rows kernels' ranges above");

static const qmm_i8_rows_ukernel k_rows_w4a8[] = {
    {"qmm_qd8_w4_rows_ukernel_m1to4__avx2_fused", qmm_qd8_w4_rows_ukernel_m1to4__avx2_fused, 1, 4},
};

static const qmm_i8_engine k_avx2_int8 = {
    QMM_A2_ENGINE_FIELDS(0, 4, qmm_qd8_qc8w_gemm_ukernel_4x64c4__avx2, ROWS_M, k_rows, (int)(sizeof k_rows / sizeof k_rows[0])),
    .rows_w4a8 = k_rows_w4a8, .n_rows_w4a8 = 1,
};

const qmm_engine_ops qmm_avx2_int8_ops = {.built = 1, .admit = admit, .i8 = &k_avx2_int8};
