/*
 * w4a8_rows_avx2.h — the rows regime of both 256-bit int8 engines on a W4A8 weight, fused (their
 * kernels of the W4A8 family, qmm_w4_rows_fn in int8_gemm.h), as one template over their dot step (vnni, as
 * int8_rows_avx2.h): each row's codes are looked up in the call's decode table (w4a8_avx2.h) and
 * the 32 int8 values of a step multiplied at once, never stored.
 *   vnni = 0  avx2_int8 (avx2_int8_w4a8.c): the table lut, the sign form (|w| once, per
 *             token VPSIGNB(q, w), VPMADDUBSW, VPMADDWD(1); the decoded values lie in [-127,
 *             127]); a call whose q holds -128 (a->qneg128) takes exact scalar dot products,
 *             each row looked up 2048 k at a time into a stack buffer;
 *   vnni = 1  avx_vnni (avx_vnni_w4a8.c; only in a file built with -mavxvnni): the table's u8
 *             form lut_u8 (w + 128), one VPDPBUSD per token and step, less 128·Σq (a->qsum)
 *             at the end; exact for every q.
 * R rows at a time (M = 1: 4, 2: 3, 3..4: 2, 5..8: 1; R·M accumulators) from R equal runs of the
 * thread's blocks, each run's codes prefetched 4 KiB ahead into L2; every 16 rows of a run their
 * outputs through qmm_a2_rows_out. The int32 sums are exact (mod 2^32): the engine's and the
 * reference's bits. e4m3 s_rel, groups of a multiple of 16 (the driver checks).
 *   qmm_w4r_kernel(vnni, ..): the body of the engines' kernels with their operands, M = a->M in
 *   1..8, 4 or 6 bits.
 * Static inline; included only by files compiled with the AVX2 flags.
 */
#ifndef QMM_W4A8_ROWS_AVX2_H
#define QMM_W4A8_ROWS_AVX2_H

#include "int8_gemm_avx2.h"
#include "int8_rows_avx2.h"
#include "avx2/w4a8_avx2.h"

enum { QMM_W4R_PF = 4096, QMM_W4R_CHUNK = 2048, QMM_W4R_M = 8 };

/* One kernel call's operands (qmm_w4_rows_fn) as the templates pass them on: columns [n0, n1). */
typedef struct qmm_w4r_job {
    const qmm_w4_codes *w;
    const int8_t *lut, *lut_u8;
    const qmm_rows_act *a;
    const qmm_call *c;
    int64_t n0, n1;
} qmm_w4r_job;

static inline int qmm_w4r_streams(int m) { return m == 1 ? 4 : m == 2 ? 3 : m <= 4 ? 2 : 1; }

/* out[i][r·16 + jn] = Σ_k W[n0 + r·step][k]·q[i][k] (mod 2^32) for R rows at once, i < m */
static inline __attribute__((always_inline)) void qmm_w4r_dot(const int vnni, const int six, const int per, const int m,
                                                              const int R, const qmm_w4_codes *w, const int8_t *lut, int64_t n0,
                                                              int64_t step, const int8_t *q, int64_t lda,
                                                              const int32_t *qsum, int32_t out[QMM_W4R_M][64], int jn) {
    const int64_t K = w->K, K32 = K / 32 * 32;
    __m256i acc[4][QMM_W4R_M];
    qmm_w4a2_walk it[4];
    for (int r = 0; r < R; r++) {
        it[r] = qmm_w4a2_walk_at(w, n0 + r * step, 0);
        for (int i = 0; i < m; i++) acc[r][i] = _mm256_setzero_si256();
    }
    int64_t k = 0;
    for (; k < K; k += 32) { /* the last step 16 when K is an odd multiple of 16 */
        __m256i x[4], px[4];
        for (int r = 0; r < R; r++) {
            if (!(k & 127)) {
                _mm_prefetch((const char *)(it[r].cp + QMM_W4R_PF), _MM_HINT_T1);
                if (six && !(k & 255)) _mm_prefetch((const char *)(it[r].hp + QMM_W4R_PF / 2), _MM_HINT_T1);
                if (!(k & 1023)) _mm_prefetch((const char *)(it[r].sp + QMM_W4R_PF / 8), _MM_HINT_T1);
            }
            /* vnni: the u8 table's w + 128, and past K16 zeros (q is zero there: no matter) */
            x[r] = k < K32 ? qmm_w4a2_next32(&it[r], lut, six, per)
                           : _mm256_zextsi128_si256(qmm_w4a2_next16(&it[r], lut, six));
            px[r] = vnni ? x[r] : _mm256_abs_epi8(x[r]);
        }
        for (int i = 0; i < m; i++) { /* q is zero past K up to Kp (a multiple of 64 >= k + 32) */
            const __m256i qv = _mm256_loadu_si256((const __m256i *)(q + i * lda + k));
            for (int r = 0; r < R; r++) acc[r][i] = qmm_a2r_step(vnni, acc[r][i], x[r], px[r], qv);
        }
    }
    for (int r = 0; r < R; r++)
        for (int i = 0; i < m; i++) out[i][r * 16 + jn] = qmm_a2r_sum(vnni, acc[r][i], qsum[i]);
}

/* the same sums for one row n, exact for any q (vnni = 0, a call whose q holds -128): the row
 * looked up (lut: the table's s8 form) QMM_W4R_CHUNK k at a time, then scalar products */
static inline __attribute__((always_inline)) void qmm_w4r_dot_scalar(const int six, const int per, int m,
                                                                     const qmm_w4_codes *w, const int8_t *lut,
                                                                     int64_t n, const int8_t *q, int64_t lda,
                                                                     int32_t out[QMM_W4R_M][64], int jn) {
    int8_t buf[QMM_W4R_CHUNK];
    uint32_t sum[QMM_W4R_M] = {0};
    qmm_w4a2_walk it = qmm_w4a2_walk_at(w, n, 0);
    for (int64_t k0 = 0; k0 < w->K; k0 += QMM_W4R_CHUNK) { /* K a multiple of 16 */
        const int64_t len = w->K - k0 < QMM_W4R_CHUNK ? w->K - k0 : QMM_W4R_CHUNK;
        int64_t k = 0;
        for (; k + 32 <= len; k += 32) _mm256_storeu_si256((__m256i *)(buf + k), qmm_w4a2_next32(&it, lut, six, per));
        if (k < len) _mm_storeu_si128((__m128i *)(buf + k), qmm_w4a2_next16(&it, lut, six));
        for (int i = 0; i < m; i++)
            for (int64_t j = 0; j < len; j++) sum[i] += (uint32_t)((int32_t)buf[j] * (int32_t)q[i * lda + k0 + j]);
    }
    for (int i = 0; i < m; i++) out[i][jn] = (int32_t)sum[i];
}

/* R streams of len rows, stream r = rows s0 + r·len + j (j < len); after every 16 rows of the
 * streams (and after the last) their outputs through the epilogue */
static inline __attribute__((always_inline)) void qmm_w4r_run(const int vnni, const int six, const int per, const int m,
                                                              const int R, const qmm_w4r_job *g, int64_t s0, int64_t len) {
    const qmm_rows_act *a = g->a;
    const int8_t *q = a->q, *lut = vnni ? g->lut_u8 : g->lut;
    int scalar = 0;
    if (!vnni)
        for (int i = 0; i < m; i++) scalar |= a->qneg128[i];
    int32_t out[QMM_W4R_M][64];
    for (int64_t j = 0; j < len; j++) {
        if (scalar)
            for (int r = 0; r < R; r++)
                qmm_w4r_dot_scalar(six, per, m, g->w, g->lut, s0 + r * len + j, q, a->lda, out, (int)(j % 16) + r * 16);
        else
            qmm_w4r_dot(vnni, six, per, m, R, g->w, lut, s0 + j, len, q, a->lda, a->qsum, out, (int)(j % 16));
        if (j % 16 != 15 && j != len - 1) continue;
        const int cols = (int)(j % 16) + 1;
        qmm_a2_rows_out(g->c, a->s, (const int32_t(*)[64])out, R, m, s0 + j - cols + 1, len, cols);
    }
}

/* columns [g->n0, g->n1): R streams of ⌊rows / R⌋ rows, the rest one at a time */
static inline __attribute__((always_inline)) void qmm_w4r_blocks(const int vnni, const int six, const int per, const int m,
                                                                 const qmm_w4r_job *g) {
    const int64_t n0 = g->n0, n1 = g->n1;
    const int R = qmm_w4r_streams(m);
    const int64_t len = (n1 - n0) / R;
    if (len > 0) {
        switch (R) { /* R a constant in each: the accumulators stay in registers */
        case 4: qmm_w4r_run(vnni, six, per, m, 4, g, n0, len); break;
        case 3: qmm_w4r_run(vnni, six, per, m, 3, g, n0, len); break;
        case 2: qmm_w4r_run(vnni, six, per, m, 2, g, n0, len); break;
        default: qmm_w4r_run(vnni, six, per, m, 1, g, n0, len); break;
        }
    }
    if (n0 + R * len < n1) qmm_w4r_run(vnni, six, per, m, 1, g, n0 + R * len, n1 - n0 - R * len);
}

/* M = a->M in 1..QMM_W4R_M (past: qmm_call_bug); groups of 16 apart (qmm_w4a2_per) */
static inline __attribute__((always_inline)) void qmm_w4r_m(const int vnni, const int six, const int per,
                                                            const qmm_w4r_job *g) {
    switch (g->a->M) {
    case 1: qmm_w4r_blocks(vnni, six, per, 1, g); break;
    case 2: qmm_w4r_blocks(vnni, six, per, 2, g); break;
    case 3: qmm_w4r_blocks(vnni, six, per, 3, g); break;
    case 4: qmm_w4r_blocks(vnni, six, per, 4, g); break;
    case 5: qmm_w4r_blocks(vnni, six, per, 5, g); break;
    case 6: qmm_w4r_blocks(vnni, six, per, 6, g); break;
    case 7: qmm_w4r_blocks(vnni, six, per, 7, g); break;
    case 8: qmm_w4r_blocks(vnni, six, per, 8, g); break;
    default: qmm_call_bug(g->c, "w4a8 256-bit fused rows: M past 8"); break;
    }
}

/* the kernel on its operands (qmm_w4_rows_fn; buf unused) */
static inline __attribute__((always_inline)) void qmm_w4r_kernel(const int vnni, const qmm_w4_codes *w, const int8_t *lut,
                                                                 const int8_t *lut_u8, const qmm_rows_act *a,
                                                                 const qmm_call *out, int64_t n0, int64_t n1) {
    const qmm_w4r_job job = {w, lut, lut_u8, a, out, n0, n1}, *g = &job;
    const int six = w->bits == 6, per = qmm_w4a2_per(w->group);
    if (n0 >= n1) return;
    if (six && per == 2) qmm_w4r_m(vnni, 1, 2, g);
    else if (six) qmm_w4r_m(vnni, 1, 0, g);
    else if (per == 2) qmm_w4r_m(vnni, 0, 2, g);
    else qmm_w4r_m(vnni, 0, 0, g);
}

#endif /* QMM_W4A8_ROWS_AVX2_H */
