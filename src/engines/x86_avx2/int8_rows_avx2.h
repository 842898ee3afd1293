/*
 * int8_rows_avx2.h — the rows regime (int8_gemm.h: a borrowed weight at M <= QMM_A2R_M, the
 * caller's rows read in place, each byte once) of both 256-bit int8 engines, as one template
 * over their dot step (vnni):
 *   vnni = 0  avx2_int8 (avx2_int8.c): per 32 bytes of a row |w| once, and per token VPSIGNB(q,
 *             w) (q with w's sign), VPMADDUBSW(|w|, ·), VPMADDWD(1): pair sums <= 2·128·127,
 *             never saturate, and -128 weights are exact (|-128| = 128 as u8); the precondition
 *             moves to q: a call whose q holds -128 (the driver's qneg128, rare: only from
 *             token_scales_in or a clamped rounding) takes exact scalar dot products;
 *   vnni = 1  avx_vnni (avx_vnni.c; only in a file built with -mavxvnni): per 32 bytes w XOR
 *             0x80 once (w + 128 as u8), and per token one VPDPBUSD(w + 128, q): Σ (w + 128)·q,
 *             less 128·Σq (the driver's qsum) at the end; exact for every w and q.
 * R long sequential streams (stream r: rows n0 + r·len + j of the thread's blocks; with ld == K
 * a run of len·K bytes, prefetched QMM_A2R_PF bytes ahead into L2), all M tokens of q against
 * each. R·M accumulators (R = 4, 3, 2, 2 for M = 1, 2, 3, 4; R = 1 above). Past M = QMM_A2R_DOT_M
 * (12) they would spill: 13 <= M <= QMM_A2R_M takes token groups, ng of 8 and a last of 1..8, one
 * after the other on each row (the later ones read the row from L1: the same memory traffic, one
 * more load and step per 32 bytes and group). Each (row, token) sum is reduced at the end of its
 * row; per 16 rows of a stream the outputs go through qmm_a2_rows_out. The last K % 32 bytes of
 * a row are copied into a zeroed buffer: nothing past W[n][K-1] is read (q is zero past K up to
 * Kp). The int32 sums are exact (mod 2^32): the reference's bits.
 *   qmm_a2r_kernel_m1to12(vnni, ..), qmm_a2r_kernel_m13to64(vnni, ..): the bodies of the engines'
 *   two rows kernels, with their operands (qmm_i8_rows_fn, ukernels.h).
 * Static inline; included only by files compiled with the AVX2 flags.
 */
#ifndef QMM_INT8_ROWS_AVX2_H
#define QMM_INT8_ROWS_AVX2_H

#include "int8_gemm_avx2.h"

enum {
    QMM_A2R_M = 64,     /* up to this M: the rows regime */
    QMM_A2R_DOT_M = 12, /* up to this M: one token group per row (above, the accumulators would spill) */
    QMM_A2R_RMAX = 4,   /* the most rows of W per step */
    QMM_A2R_PF = 4096   /* prefetch distance per stream, bytes (into L2) */
};

static inline int qmm_a2r_streams(int m) { return m == 1 ? 4 : m == 2 ? 3 : m <= 4 ? 2 : 1; }

/* the row's operand of the step: |x| (vnni = 0) or x + 128 as u8 (vnni = 1) */
static inline __attribute__((always_inline)) __m256i qmm_a2r_prep(const int vnni, __m256i x) {
    return vnni ? _mm256_xor_si256(x, _mm256_set1_epi8((char)0x80)) : _mm256_abs_epi8(x);
}

/* acc + the dot products of 4-byte groups of the row's 32 bytes x (px = qmm_a2r_prep(x)) with the
 * token's qv: Σ w·q (vnni = 0) or Σ (w + 128)·q (vnni = 1) per dword */
static inline __attribute__((always_inline)) __m256i qmm_a2r_step(const int vnni, __m256i acc, __m256i x, __m256i px,
                                                                  __m256i qv) {
#ifdef __AVXVNNI__
    if (vnni) return _mm256_dpbusd_avx_epi32(acc, px, qv);
#endif
    (void)vnni;
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(px, _mm256_sign_epi8(qv, x)),
                                                   _mm256_set1_epi16(1)));
}

/* the sum of acc's lanes, less 128·qsum (vnni = 1), mod 2^32 */
static inline __attribute__((always_inline)) int32_t qmm_a2r_sum(const int vnni, __m256i acc, int32_t qsum) {
    return (int32_t)((uint32_t)qmm_a2_hsum8(acc) - (vnni ? 128u * (uint32_t)qsum : 0u));
}

/* out[i][jn + r·16] = Σ_k w_r[k]·q[i][k] for rows w, w + span, .. (R of them, K bytes each), i < m */
static inline __attribute__((always_inline)) void qmm_a2r_dot(const int vnni, const int m, const int R, const int8_t *w,
                                                              int64_t span, int64_t K, const int8_t *q, int64_t lda,
                                                              const int32_t *qsum, int32_t out[QMM_A2R_M][QMM_A2R_RMAX * 16],
                                                              int jn) {
    __m256i acc[QMM_A2R_RMAX][QMM_A2R_DOT_M];
    for (int r = 0; r < R; r++)
        for (int i = 0; i < m; i++) acc[r][i] = _mm256_setzero_si256();
    for (int64_t k = 0; k < K; k += 32) {
        __m256i x[QMM_A2R_RMAX], px[QMM_A2R_RMAX];
        for (int r = 0; r < R; r++) {
            const int8_t *p = w + r * span + k;
            _mm_prefetch((const char *)(p + QMM_A2R_PF), _MM_HINT_T1);
            if (K - k >= 32) {
                x[r] = _mm256_loadu_si256((const __m256i *)p);
            } else {
                int8_t tmp[32] = {0};
                memcpy(tmp, p, (size_t)(K - k));
                x[r] = _mm256_loadu_si256((const __m256i *)tmp);
            }
            px[r] = qmm_a2r_prep(vnni, x[r]);
        }
        for (int i = 0; i < m; i++) {
            const __m256i qv = _mm256_loadu_si256((const __m256i *)(q + i * lda + k));
            for (int r = 0; r < R; r++) acc[r][i] = qmm_a2r_step(vnni, acc[r][i], x[r], px[r], qv);
        }
    }
    for (int r = 0; r < R; r++)
        for (int i = 0; i < m; i++) out[i][r * 16 + jn] = qmm_a2r_sum(vnni, acc[r][i], qsum[i]);
}

/* the same sums, exact for any q (vnni = 0, a call whose q holds -128) */
static inline void qmm_a2r_dot_scalar(int m, const int8_t *w, int64_t K, const int8_t *q, int64_t lda,
                                      int32_t out[QMM_A2R_M][QMM_A2R_RMAX * 16], int jn) {
    for (int i = 0; i < m; i++) {
        uint32_t sum = 0;
        for (int64_t k = 0; k < K; k++) sum += (uint32_t)((int32_t)w[k] * (int32_t)q[i * lda + k]);
        out[i][jn] = (int32_t)sum;
    }
}

/* R streams of len rows, stream r = rows s0 + r·span + j (j < len), against ng token groups of 8
 * and then the last, [8·ng, 8·ng + last); after every 16 rows of the streams (and after the last)
 * their outputs through the epilogue */
static inline __attribute__((always_inline)) void qmm_a2r_run(const int vnni, const int last, const int ng, const int R,
                                                              const qmm_a2r_job *g, int64_t s0, int64_t span,
                                                              int64_t len) {
    const int m = 8 * ng + last;
    const qmm_rows_act *a = g->a;
    const int64_t K = a->K, ld = g->ldw, lda = a->lda;
    const int8_t *q = a->q;
    int scalar = 0;
    if (!vnni)
        for (int i = 0; i < m; i++) scalar |= a->qneg128[i];
    int32_t out[QMM_A2R_M][QMM_A2R_RMAX * 16];
    for (int64_t j = 0; j < len; j++) {
        const int8_t *w = g->w + (s0 + j - g->n0) * ld;
        if (scalar)
            for (int r = 0; r < R; r++)
                qmm_a2r_dot_scalar(m, w + r * span * ld, K, q, lda, out, (int)(j % 16) + r * 16);
        else {
            for (int gi = 0; gi < ng; gi++)
                qmm_a2r_dot(vnni, 8, R, w, span * ld, K, q + 8 * gi * lda, lda, a->qsum + 8 * gi, out + 8 * gi,
                            (int)(j % 16));
            qmm_a2r_dot(vnni, last, R, w, span * ld, K, q + 8 * ng * lda, lda, a->qsum + 8 * ng, out + 8 * ng,
                        (int)(j % 16));
        }
        if (j % 16 != 15 && j != len - 1) continue;
        const int cols = (int)(j % 16) + 1;
        qmm_a2_rows_out(g->c, a->s, (const int32_t(*)[64])out, R, m, s0 + j - cols + 1, span, cols);
    }
}

/* columns [g->n0, g->n1) for 8·ng + last tokens: R streams of ⌊rows / R⌋ rows, the rest one at a
 * time (with token groups, ng > 0, one stream: R = 1, a constant, so the accumulators stay in
 * registers) */
static inline __attribute__((always_inline)) void qmm_a2r_blocks(const int vnni, const int last, const int ng,
                                                                 const qmm_a2r_job *g) {
    const int64_t n0 = g->n0, n1 = g->n1;
    if (ng > 0) {
        qmm_a2r_run(vnni, last, ng, 1, g, n0, 0, n1 - n0);
        return;
    }
    const int R = qmm_a2r_streams(last);
    const int64_t len = (n1 - n0) / R;
    if (len > 0) qmm_a2r_run(vnni, last, 0, R, g, n0, len, len);
    if (n0 + R * len < n1) qmm_a2r_run(vnni, last, 0, 1, g, n0 + R * len, 0, n1 - n0 - R * len);
}

/* M = a->M in 1..QMM_A2R_DOT_M: one token group per row (qmm_i8_rows_fn's operands) */
static inline __attribute__((always_inline)) void qmm_a2r_kernel_m1to12(const int vnni, const int8_t *w, int64_t ldw,
                                                                        const qmm_rows_act *a, const qmm_call *out,
                                                                        int64_t n0, int64_t n1) {
    const qmm_a2r_job job = {w, ldw, a, out, n0, n1}, *g = &job;
    switch (a->M) {
    case 1: qmm_a2r_blocks(vnni, 1, 0, g); break;
    case 2: qmm_a2r_blocks(vnni, 2, 0, g); break;
    case 3: qmm_a2r_blocks(vnni, 3, 0, g); break;
    case 4: qmm_a2r_blocks(vnni, 4, 0, g); break;
    case 5: qmm_a2r_blocks(vnni, 5, 0, g); break;
    case 6: qmm_a2r_blocks(vnni, 6, 0, g); break;
    case 7: qmm_a2r_blocks(vnni, 7, 0, g); break;
    case 8: qmm_a2r_blocks(vnni, 8, 0, g); break;
    case 9: qmm_a2r_blocks(vnni, 9, 0, g); break;
    case 10: qmm_a2r_blocks(vnni, 10, 0, g); break;
    case 11: qmm_a2r_blocks(vnni, 11, 0, g); break;
    default: qmm_a2r_blocks(vnni, 12, 0, g); break;
    }
}

/* M = a->M in QMM_A2R_DOT_M + 1..QMM_A2R_M: groups of 8, the last of 1..8 */
static inline __attribute__((always_inline)) void qmm_a2r_kernel_m13to64(const int vnni, const int8_t *w, int64_t ldw,
                                                                         const qmm_rows_act *a, const qmm_call *out,
                                                                         int64_t n0, int64_t n1) {
    const qmm_a2r_job job = {w, ldw, a, out, n0, n1}, *g = &job;
    const int ng = (int)(a->M - 1) / 8;
    switch (a->M - 8 * ng) {
    case 1: qmm_a2r_blocks(vnni, 1, ng, g); break;
    case 2: qmm_a2r_blocks(vnni, 2, ng, g); break;
    case 3: qmm_a2r_blocks(vnni, 3, ng, g); break;
    case 4: qmm_a2r_blocks(vnni, 4, ng, g); break;
    case 5: qmm_a2r_blocks(vnni, 5, ng, g); break;
    case 6: qmm_a2r_blocks(vnni, 6, ng, g); break;
    case 7: qmm_a2r_blocks(vnni, 7, ng, g); break;
    default: qmm_a2r_blocks(vnni, 8, ng, g); break;
    }
}

#endif /* QMM_INT8_ROWS_AVX2_H */
