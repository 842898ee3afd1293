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
 *   epilogue     acc (− 128·colsum[n] for u8 A) → ((float)acc · s_r) · w_scale[n] + bias[n]
 *                (bias 0.0f when absent), three separate fp32 vector operations in the order of
 *                qmm_epilogue_f, then RNE to bf16 (NaN → quiet, as qmm_f32_to_bf16), to f16
 *                (VCVTPS2PH, RNE, same results as qmm_f32_to_f16) or f32; I32 stores acc.
 *                Columns past the last multiple of 8 use the scalar definition.
 */
#ifndef QMM_INT8_GEMM_AVX2_H
#define QMM_INT8_GEMM_AVX2_H

#include "numerics.h"
#include "prepass.h"
#include "qmm_internal.h"

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

/* 8 fp32 → 8 bf16, exactly qmm_f32_to_bf16 per lane. */
static inline __m128i qmm_a2_f32_to_bf16(__m256 v) {
    __m256i u = _mm256_castps_si256(v);
    __m256i ax = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
    __m256i isnan = _mm256_cmpgt_epi32(ax, _mm256_set1_epi32(0x7f800000));
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i rnd = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
    __m256i qn = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
    __m256i r = _mm256_blendv_epi8(rnd, qn, isnan);
    r = _mm256_packus_epi32(r, r);                 /* per 128-bit lane: [0..3,0..3 | 4..7,4..7] */
    r = _mm256_permute4x64_epi64(r, 0x08);         /* lanes 0, 2 → low 128 bits */
    return _mm256_castsi256_si128(r);
}

/* Epilogue of one output row: acc[0..cols) are columns n0.. of row r (scale sr). */
static inline void qmm_a2_epilogue_row(const qmm_weight *w, const int32_t *acc, int64_t n0, int64_t cols, int u8,
                                       float sr, void *yrow, qmm_dtype yt) {
    const int32_t *cs = w->i8.colsum + n0;
    const float *ws = w->scale + n0;
    const float *bs = w->bias ? w->bias + n0 : NULL;
    const __m256 vs = _mm256_set1_ps(sr);
    const __m256i c128 = _mm256_set1_epi32(u8 ? 128 : 0);
    int64_t j = 0;
    for (; j + 8 <= cols; j += 8) {
        __m256i a = _mm256_loadu_si256((const __m256i *)(acc + j));
        a = _mm256_sub_epi32(a, _mm256_mullo_epi32(c128, _mm256_loadu_si256((const __m256i *)(cs + j))));
        if (yt == QMM_I32) {
            _mm256_storeu_si256((__m256i *)((int32_t *)yrow + n0 + j), a);
            continue;
        }
        __m256 t = _mm256_mul_ps(_mm256_cvtepi32_ps(a), vs);
        t = _mm256_mul_ps(t, _mm256_loadu_ps(ws + j));
        t = _mm256_add_ps(t, bs ? _mm256_loadu_ps(bs + j) : _mm256_setzero_ps());
        if (yt == QMM_F32) _mm256_storeu_ps((float *)yrow + n0 + j, t);
        else if (yt == QMM_BF16) _mm_storeu_si128((__m128i *)((uint16_t *)yrow + n0 + j), qmm_a2_f32_to_bf16(t));
        else _mm_storeu_si128((__m128i *)((uint16_t *)yrow + n0 + j), _mm256_cvtps_ph(t, _MM_FROUND_TO_NEAREST_INT));
    }
    for (; j < cols; j++) {
        int32_t a = acc[j] - (u8 ? 128 * cs[j] : 0);
        if (yt == QMM_I32) ((int32_t *)yrow)[n0 + j] = a;
        else qmm_store_f(yrow, yt, n0 + j, qmm_epilogue_f(a, sr, ws[j], bs ? bs[j] : 0.0f));
    }
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
    const size_t ys = c->y_dtype == QMM_I32 ? 4 : qmm_dtype_size(c->y_dtype);
    for (int64_t r = m0; r < m1; r++)
        qmm_a2_epilogue_row(w, ct + (r - m0) * QMM_A2_NC, n0, cols, j->u8, j->s[r],
                            (char *)c->y + (size_t)(r * c->ldy) * ys, c->y_dtype);
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
