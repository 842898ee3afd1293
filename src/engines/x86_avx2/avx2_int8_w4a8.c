/*
 * avx2_int8_w4a8.c — the avx2_int8 engine's rows regime on a W4A8 weight at M <= 4, fused (its
 * qmm_i8_engine.rows_w4a8 kernel, int8_gemm.h; qmm_qd8_w4_rows_ukernel_m1to4__avx2_fused): each
 * row's codes are looked up in the call's decode table (w4a8_avx2.h) and the 32 int8 values of a
 * step multiplied at once, never stored, with the engine's rows arithmetic (avx2_int8.c: |w|
 * once, per token VPSIGNB(q, w), VPMADDUBSW, VPMADDWD(1); the decoded values lie in [-127, 127]).
 * A call whose q holds -128 (the driver's qneg128) takes exact scalar dot products, each row
 * decoded 2048 k at a time into a stack buffer. R rows at a time (M = 1: 4, 2: 3, 3..4: 2; R·M
 * accumulators) from R equal runs of the thread's blocks, each run's codes prefetched 4 KiB ahead
 * into L2; every 16 rows of a run their outputs through qmm_a2_epilogue_row. The int32 sums are
 * exact (mod 2^32): the engine's and the reference's bits. e4m3 s_rel, groups of a multiple of 16
 * (the driver checks).
 */
#include "int8_gemm_avx2.h"
#include "ukernels.h"
#include "w4a8_avx2.h"

enum { W4_PF = 4096, W4_CHUNK = 2048 };

static inline int w4_streams(int m) { return m == 1 ? 4 : m == 2 ? 3 : 2; }

/* out[i][r·16 + jn] = Σ_k W[n0 + r·step][k]·q[i][k] (mod 2^32) for R rows at once, i < m */
static inline __attribute__((always_inline)) void w4_dot(const int six, const int m, const int R, const qmm_weight *w,
                                                         const int8_t *lut, int64_t n0, int64_t step, const int8_t *q,
                                                         int64_t lda, int32_t out[4][64], int jn) {
    const int64_t K = w->K, K32 = K / 32 * 32;
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i acc[4][4];
    qmm_w4a2_walk it[4];
    for (int r = 0; r < R; r++) {
        it[r] = qmm_w4a2_walk_at(w, n0 + r * step, 0);
        for (int i = 0; i < m; i++) acc[r][i] = _mm256_setzero_si256();
    }
    int64_t k = 0;
    for (; k < K; k += 32) { /* the last step 16 when K is an odd multiple of 16 */
        __m256i x[4], ax[4];
        for (int r = 0; r < R; r++) {
            if (!(k & 127)) {
                _mm_prefetch((const char *)(it[r].cp + W4_PF), _MM_HINT_T1);
                if (six && !(k & 255)) _mm_prefetch((const char *)(it[r].hp + W4_PF / 2), _MM_HINT_T1);
                if (!(k & 1023)) _mm_prefetch((const char *)(it[r].sp + W4_PF / 8), _MM_HINT_T1);
            }
            x[r] = k < K32 ? qmm_w4a2_next32(&it[r], lut, six)
                           : _mm256_zextsi128_si256(qmm_w4a2_next16(&it[r], lut, six));
            ax[r] = _mm256_abs_epi8(x[r]);
        }
        for (int i = 0; i < m; i++) { /* q is zero past K up to Kp (a multiple of 64 >= k + 32) */
            const __m256i qv = _mm256_loadu_si256((const __m256i *)(q + i * lda + k));
            for (int r = 0; r < R; r++)
                acc[r][i] = _mm256_add_epi32(
                    acc[r][i], _mm256_madd_epi16(_mm256_maddubs_epi16(ax[r], _mm256_sign_epi8(qv, x[r])), ones));
        }
    }
    for (int r = 0; r < R; r++)
        for (int i = 0; i < m; i++) out[i][r * 16 + jn] = qmm_a2_hsum8(acc[r][i]);
}

/* the same sums for one row n, exact for any q (a call whose q holds -128) */
static void w4_dot_scalar(int m, const qmm_weight *w, const int8_t *lut, int64_t n, const int8_t *q, int64_t lda,
                          int32_t out[4][64], int jn) {
    int8_t buf[W4_CHUNK];
    uint32_t sum[4] = {0, 0, 0, 0};
    for (int64_t k0 = 0; k0 < w->K; k0 += W4_CHUNK) {
        const int64_t len = w->K - k0 < W4_CHUNK ? w->K - k0 : W4_CHUNK;
        qmm_w4a8_decode_rows_avx2_ptr(w, lut, n, 1, k0, k0 + len, buf, len);
        for (int i = 0; i < m; i++)
            for (int64_t k = 0; k < len; k++) sum[i] += (uint32_t)((int32_t)buf[k] * (int32_t)q[i * lda + k0 + k]);
    }
    for (int i = 0; i < m; i++) out[i][jn] = (int32_t)sum[i];
}

/* R streams of len rows, stream r = rows s0 + r·len + j (j < len); after every 16 rows of the
 * streams (and after the last) their outputs through the epilogue */
static inline __attribute__((always_inline)) void w4_run(const int six, const int m, const int R, const qmm_i8_gemm *g,
                                                         int64_t s0, int64_t len) {
    const qmm_call *c = g->c;
    const int8_t *q = (const int8_t *)g->a;
    int scalar = 0;
    for (int i = 0; i < m; i++) scalar |= g->qneg128[i];
    int32_t out[4][64];
    for (int64_t j = 0; j < len; j++) {
        if (scalar)
            for (int r = 0; r < R; r++) w4_dot_scalar(m, c->w, g->w4_lut, s0 + r * len + j, q, g->Kp, out, (int)(j % 16) + r * 16);
        else
            w4_dot(six, m, R, c->w, g->w4_lut, s0 + j, len, q, g->Kp, out, (int)(j % 16));
        if (j % 16 != 15 && j != len - 1) continue;
        const int cols = (int)(j % 16) + 1;
        qmm_a2_rows_out(g, (const int32_t(*)[64])out, R, m, s0 + j - cols + 1, len, cols);
    }
}

/* blocks [b0, b1): R streams of ⌊rows / R⌋ rows, the rest one at a time */
static inline __attribute__((always_inline)) void w4_blocks(const int six, const int m, const qmm_i8_gemm *g,
                                                            int64_t b0, int64_t b1) {
    const int64_t N = g->c->N, n0 = b0 * 16, n1 = b1 * 16 < N ? b1 * 16 : N;
    const int R = w4_streams(m);
    const int64_t len = (n1 - n0) / R;
    if (len > 0 && R == 4) w4_run(six, m, 4, g, n0, len);
    if (len > 0 && R == 3) w4_run(six, m, 3, g, n0, len);
    if (len > 0 && R == 2) w4_run(six, m, 2, g, n0, len);
    if (n0 + R * len < n1) w4_run(six, m, 1, g, n0 + R * len, n1 - n0 - R * len);
}

void qmm_qd8_w4_rows_ukernel_m1to4__avx2_fused(const qmm_i8_gemm *g, int64_t b0, int64_t b1) {
    const int six = g->c->w->w4.bits == 6;
#define W4_CASE(S, M) case (S) * 10 + (M): w4_blocks(S, M, g, b0, b1); break
    switch (six * 10 + (int)g->c->M) {
    W4_CASE(0, 1); W4_CASE(0, 2); W4_CASE(0, 3); W4_CASE(0, 4);
    W4_CASE(1, 1); W4_CASE(1, 2); W4_CASE(1, 3); W4_CASE(1, 4);
    default: qmm_call_bug(g->c, "w4a8 avx2 fused rows: M past 4"); break;
    }
#undef W4_CASE
}
