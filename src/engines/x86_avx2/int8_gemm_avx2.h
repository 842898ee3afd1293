/*
 * int8_gemm_avx2.h — the blocked, threaded int8 GEMM driver and the fused AVX2 epilogue shared
 * by the two 256-bit int8 engines (avx_vnni.c, avx2_int8.c). Included only by files compiled
 * with the AVX2 flags. Each engine supplies one microkernel; everything else lives here.
 *
 *   pre-pass     qmm_prepass() → q [M][Kp] int8 (zero padded) + s [M] fp32, in QMM_SCRATCH_ACT;
 *                u8 engines (VPDPBUSD) then flip q in place to a = q + 128 (XOR 0x80);
 *   blocking     task = (MC rows) × (NC output channels); inside a task, for each KC-deep slice
 *                of K (all of K when M <= 32: weight streaming, each panel read once, contiguously): for each 16-channel panel (B slice 16×KC = 8 KiB, stays in L1) for each
 *                MR-row micro tile (A slice MR×KC from the MC×KC block kept in L2) the
 *                microkernel adds its MR×16 int32 sums into the task's C tile (MC×NC int32,
 *                per-thread scratch, L2). Every output element is summed by one task in one
 *                fixed k order, so the bits do not depend on the thread count;
 *   threads      qmm_pool_run over the task grid (task i on thread i % n: static partition);
 *   epilogue     acc (− 128·colsum[n] for u8 A) → qmm_y_epilogue8 (simd_avx2.h: fused or kitchen
 *                form, bias, residual, RNE to the output dtype), the reference's operations;
 *                columns past the last multiple of 8 use the scalar qmm_epilogue_store_ref.
 */
#ifndef QMM_INT8_GEMM_AVX2_H
#define QMM_INT8_GEMM_AVX2_H

#include "numerics.h"
#include "prepass.h"
#include "qmm_internal.h"
#include "simd_avx2.h"

#include <immintrin.h>
#include <string.h>

enum { QMM_A2_MC = 96, QMM_A2_NC = 256, QMM_A2_KC = 512 };

/* The microkernel: C[r][0..16) (+)= Σ_{k in slice} A[r][k] · W[n0 + j][k] for r < mr.
 * a: mr rows at the slice's first k, row stride lda bytes; b: the 16-channel panel at the
 * slice's first k-quad (kq 64-byte rows); c: mr rows of 16 int32, row stride ldc;
 * first: store instead of add. mr in 1..mr_max of the engine. pf: pf_kq 64-byte rows to
 * prefetch into L2 meanwhile (the next panel, small M), or pf_kq = 0. */
typedef void (*qmm_a2_kernel_fn)(const uint8_t *a, int64_t lda, const int8_t *b, int64_t kq, int32_t *c,
                                 int64_t ldc, int mr, int first, const int8_t *pf, int64_t pf_kq);

typedef struct {
    const qmm_call *c;
    const uint8_t *q;       /* [M][Kp] */
    const float *s;         /* [M] */
    int32_t *ctile;         /* [threads][MC][NC] */
    int64_t mt, nt;         /* task grid: row blocks, channel blocks */
    int64_t kc;             /* K slice depth (bytes of k): QMM_A2_KC, or all of Kp for small M */
    int u8;                 /* A holds q + 128: subtract 128·colsum */
    int mr_max;
    qmm_a2_kernel_fn kern;
} qmm_a2_job;

/* Epilogue of one output row r: acc[0..cols) are columns n0.. (− 128·colsum for u8 A), then
 * qmm_y_epilogue8 (simd_avx2.h) per 8 columns and qmm_epilogue_store_ref for the last ones. */
static inline void qmm_a2_epilogue_row(const qmm_call *c, const int32_t *acc, int64_t r, int64_t n0, int64_t cols,
                                       int u8, float sr) {
    const int32_t *cs = c->w->i8.colsum + n0;
    const __m256i c128 = _mm256_set1_epi32(u8 ? 128 : 0);
    int64_t j = 0;
    for (; j + 8 <= cols; j += 8) {
        __m256i a = _mm256_loadu_si256((const __m256i *)(acc + j));
        a = _mm256_sub_epi32(a, _mm256_mullo_epi32(c128, _mm256_loadu_si256((const __m256i *)(cs + j))));
        qmm_y_epilogue8(c, a, r, n0 + j, sr);
    }
    for (; j < cols; j++) qmm_epilogue_store_ref(c, acc[j] - (u8 ? 128 * cs[j] : 0), r, n0 + j, sr);
}

static void qmm_a2_task(int64_t task, int64_t n_tasks, int thread, void *arg) {
    (void)n_tasks;
    const qmm_a2_job *j = arg;
    const qmm_call *c = j->c;
    const qmm_weight *w = c->w;
    const int64_t Kp = w->i8.Kp, Kq = Kp / 4, KC = j->kc;
    const int64_t ni = task / j->mt, mi = task % j->mt; /* consecutive tasks share the B block */
    const int64_t m0 = mi * QMM_A2_MC, m1 = m0 + QMM_A2_MC < c->M ? m0 + QMM_A2_MC : c->M;
    const int64_t n0 = ni * QMM_A2_NC;
    const int64_t npan = (n0 + QMM_A2_NC <= w->i8.Np ? QMM_A2_NC : w->i8.Np - n0) / 16;
    int32_t *ct = j->ctile + (int64_t)thread * QMM_A2_MC * QMM_A2_NC; /* [MC][NC] */
    for (int64_t k0 = 0; k0 < Kp; k0 += KC) {
        const int64_t kq0 = k0 / 4, kqn = (k0 + KC <= Kp ? KC : Kp - k0) / 4;
        for (int64_t p = 0; p < npan; p++) {
            const int8_t *b = w->i8.data + ((n0 / 16 + p) * Kq + kq0) * 64;
            /* whole-K panels (small M, several row tiles): the tiles of this panel share the
             * prefetch of the next panel (same task) into L2, so its first tile does not wait on
             * DRAM; with one tile (M <= 6) the hardware prefetcher's sequential stream is left alone */
            const int64_t ntile = (m1 - m0 + j->mr_max - 1) / j->mr_max;
            const int8_t *nb = p + 1 < npan && KC == Kp && ntile > 1 ? b + Kq * 64 : NULL; /* 1 tile: pure stream */
            for (int64_t r = m0, t = 0; r < m1; r += j->mr_max, t++) {
                int mr = (int)(m1 - r < j->mr_max ? m1 - r : j->mr_max);
                int64_t pf0 = Kq * t / ntile, pf1 = Kq * (t + 1) / ntile;
                j->kern(j->q + r * Kp + k0, Kp, b, kqn, ct + (r - m0) * QMM_A2_NC + p * 16, QMM_A2_NC, mr, k0 == 0,
                        nb ? nb + pf0 * 64 : NULL, nb ? pf1 - pf0 : 0);
            }
        }
    }
    const int64_t cols = (n0 + QMM_A2_NC <= c->N ? QMM_A2_NC : c->N - n0);
    for (int64_t r = m0; r < m1; r++) qmm_a2_epilogue_row(c, ct + (r - m0) * QMM_A2_NC, r, n0, cols, j->u8, j->s[r]);
}

static void qmm_a2_xor_task(int64_t task, int64_t n_tasks, int thread, void *arg) {
    (void)thread;
    const qmm_a2_job *j = arg;
    const int64_t M = j->c->M, Kp = j->c->w->i8.Kp;
    int64_t r0 = M * task / n_tasks, r1 = M * (task + 1) / n_tasks;
    uint8_t *q = (uint8_t *)j->q;
    const __m256i x80 = _mm256_set1_epi8((char)0x80);
    for (int64_t i = r0 * Kp; i < r1 * Kp; i += 32) {
        __m256i v = _mm256_load_si256((const __m256i *)(q + i));
        _mm256_store_si256((__m256i *)(q + i), _mm256_xor_si256(v, x80));
    }
}

/* The whole call on one engine: pre-pass, (u8 flip), blocked GEMM + epilogue, token scales. */
static inline qmm_status qmm_a2_run(qmm_context *ctx, const qmm_call *c, qmm_a2_kernel_fn kern, int mr_max, int u8) {
    const qmm_weight *w = c->w;
    const int64_t M = c->M, Kp = w->i8.Kp;
    size_t qbytes;
    QMM_RETURN_IF(!qmm_mul_ok((size_t)M, (size_t)Kp, &qbytes) || qbytes > SIZE_MAX / 2, QMM_ERR_OUT_OF_MEMORY,
                  "layer %s: M=%lld × Kp=%lld activations too large", w->name, (long long)M, (long long)Kp);
    void *buf, *tiles;
    QMM_FORWARD_IF_ERROR(qmm_context_scratch(ctx, QMM_SCRATCH_ACT, qbytes + (size_t)M * sizeof(float), &buf));
    const int nt = qmm_pool_threads(ctx->pool);
    QMM_FORWARD_IF_ERROR(qmm_context_scratch(ctx, QMM_SCRATCH_ENGINE,
                                             (size_t)nt * QMM_A2_MC * QMM_A2_NC * sizeof(int32_t), &tiles));
    int8_t *q = buf;
    float *s = (float *)((char *)buf + qbytes);
    QMM_FORWARD_IF_ERROR(qmm_prepass(ctx, c, q, Kp, s, 0));
    qmm_a2_job j;
    memset(&j, 0, sizeof j);
    j.c = c;
    j.q = (const uint8_t *)q;
    j.s = s;
    j.ctile = tiles;
    j.mt = (M + QMM_A2_MC - 1) / QMM_A2_MC;
    j.nt = (w->i8.Np + QMM_A2_NC - 1) / QMM_A2_NC;
    /* small M is weight-bandwidth bound: stream each panel's whole K contiguously (the A rows
     * fit in L1/L2 anyway) instead of hopping between panels every KC bytes */
    j.kc = M <= 32 ? Kp : QMM_A2_KC;
    j.u8 = u8;
    j.mr_max = mr_max;
    j.kern = kern;
    if (u8) qmm_pool_run(ctx->pool, M < nt ? M : nt, qmm_a2_xor_task, &j);
    qmm_pool_run(ctx->pool, j.mt * j.nt, qmm_a2_task, &j);
    if (c->token_scales) memcpy(c->token_scales, s, (size_t)M * sizeof(float));
    return QMM_OK;
}

#endif /* QMM_INT8_GEMM_AVX2_H */
