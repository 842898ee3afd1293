/*
 * int8_gemm_avx2.h — what the two 256-bit int8 engines (avx_vnni.c, avx2_int8.c) share on top of
 * the core int8 driver (int8_gemm.h): their micro-kernel signature, the blocking, the tile
 * adapter and the fused AVX2 epilogue. Included only by files compiled with the AVX2 flags.
 *
 *   tile         up to 4 16-column blocks of mr rows per call (nrb = 4), one kernel call per
 *                block: the engine's kernel adds its mr × 16 int32 sums into the driver's
 *                partials, prefetching its part of the next panel into L2 for whole-K small M;
 *   blocking     MC × NC tasks, KC-deep chunks (all of K when M <= 32: weight streaming);
 *   epilogue     on the last chunk, acc (− 128·colsum[n] for u8 A) → qmm_y_epilogue8
 *                (simd_avx2.h: fused or kitchen form, bias, residual, RNE to the output dtype),
 *                the reference's operations; columns past the last multiple of 8 use the scalar
 *                qmm_epilogue_store_ref.
 */
#ifndef QMM_INT8_GEMM_AVX2_H
#define QMM_INT8_GEMM_AVX2_H

#include "numerics.h"
#include "int8_gemm.h"
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

/* The driver's tile (int8_gemm.h) on kernel kern: nr 16-column blocks one kernel call each,
 * each prefetching its part of the tile's share of the next panel into L2 (whole-K small M),
 * then on the last chunk the tile's outputs, row by row over its nr·16 columns. */
static inline void qmm_a2_tile(const qmm_i8_gemm *g, const qmm_i8_tile *t, qmm_a2_kernel_fn kern) {
    const int64_t ldp = g->e->nc, ldb = g->Kp * 16;
    const int64_t part_bytes = t->pf_mode == QMM_I8_PF_NEXT ? t->pf_step * t->nq / t->nr : 0;
    int64_t pf_kq = (part_bytes + 63) / 64;
    if (pf_kq > t->nq) pf_kq = t->nq;
    for (int jb = 0; jb < t->nr; jb++)
        kern(t->a, g->Kp, t->b + jb * ldb, t->nq, t->part + jb * 16, ldp, t->mr, t->first,
             pf_kq ? t->pf + jb * part_bytes : NULL, pf_kq);
    if (t->last) {
        const int64_t cols = g->c->N - t->n < 16 * t->nr ? g->c->N - t->n : 16 * t->nr;
        for (int i = 0; i < t->mr; i++)
            qmm_a2_epilogue_row(g->c, t->part + i * ldp, t->r + i, t->n, cols, g->e->u8, g->s[t->r + i]);
    }
}

/* The blocking of both AVX2 engines: MC × KC activation bytes (48 KiB) in L2, a 16 × KC panel
 * (8 KiB) in L1; whole K (weight streaming) up to 32 rows. */
#define QMM_A2_ENGINE(u8_, mr_, tile_) \
    { .u8 = (u8_), .mr = (mr_), .nrb = 4, .mc = QMM_A2_MC, .nc = QMM_A2_NC, .kc = QMM_A2_KC, .whole_k_m = 32, .tile = (tile_) }

#endif /* QMM_INT8_GEMM_AVX2_H */
