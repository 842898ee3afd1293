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
 *                qmm_epilogue_store_ref;
 *   rows         the rows regime's outputs (qmm_a2_rows_out) and avx_vnni's token-copy hooks; the
 *                regime's kernels: int8_rows_avx2.h, w4a8_rows_avx2.h, avx_vnni_rows.c.
 */
#ifndef QMM_INT8_GEMM_AVX2_H
#define QMM_INT8_GEMM_AVX2_H

#include "numerics.h"
#include "int8_gemm.h"
#include "prepass.h"
#include "qmm_internal.h"
#include "avx2/simd_avx2.h"

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

/* One k-quad of one row: *lo, *hi (channels 0..7, 8..15) += the dot products of the 4 activation
 * bytes broadcast in av with each channel's 4 bytes in b0, b1 — the engine's instruction(s). */
typedef void (*qmm_a2_step_fn)(__m256i av, __m256i b0, __m256i b1, __m256i *lo, __m256i *hi);

/* The engines' mr × 16 micro-kernel (a qmm_a2_kernel_fn) over their step, mr <= 6: each k-quad
 * row of the panel loaded once (two ymm) for the mr rows, mr·2 ymm accumulators. Always inlined
 * into the engine's switch on mr with a constant mr and step, so the accumulators stay in
 * registers and the step is inlined. */
static inline __attribute__((always_inline)) void qmm_a2_mrx16(const uint8_t *a, int64_t lda, const int8_t *b,
                                                               int64_t kq, int32_t *c, int64_t ldc, const int mr,
                                                               int first, const int8_t *pf, int64_t pf_kq,
                                                               qmm_a2_step_fn step) {
    __m256i lo[6], hi[6];
#pragma GCC unroll 6
    for (int r = 0; r < 6; r++) {
        if (r < mr) { lo[r] = _mm256_setzero_si256(); hi[r] = _mm256_setzero_si256(); }
    }
    for (int64_t i = 0; i < kq; i++) {
        if (i < pf_kq) _mm_prefetch((const char *)(pf + i * 64), _MM_HINT_T1);
        const __m256i b0 = _mm256_load_si256((const __m256i *)(b + i * 64));
        const __m256i b1 = _mm256_load_si256((const __m256i *)(b + i * 64 + 32));
#pragma GCC unroll 6
        for (int r = 0; r < 6; r++) {
            if (r < mr) {
                int32_t v;
                memcpy(&v, a + r * lda + i * 4, 4);
                step(_mm256_set1_epi32(v), b0, b1, &lo[r], &hi[r]);
            }
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < 6; r++) {
        if (r < mr) {
            __m256i *c0 = (__m256i *)(c + r * ldc), *c1 = (__m256i *)(c + r * ldc + 8);
            if (!first) {
                lo[r] = _mm256_add_epi32(lo[r], _mm256_loadu_si256(c0));
                hi[r] = _mm256_add_epi32(hi[r], _mm256_loadu_si256(c1));
            }
            _mm256_storeu_si256(c0, lo[r]);
            _mm256_storeu_si256(c1, hi[r]);
        }
    }
}

/* Epilogue of one output row r: acc[0..cols) are columns n0.. (− 128·cs[j] for u8 A, cs the column sums), then
 * qmm_y_epilogue8 (simd_avx2.h) per 8 columns and qmm_epilogue_store_ref for the last ones. */
static inline void qmm_a2_epilogue_row(const qmm_call *c, const int32_t *cs, const int32_t *acc, int64_t r, int64_t n0,
                                       int64_t cols, int u8, float sr) {
    const __m256i c128 = _mm256_set1_epi32(u8 ? 128 : 0);
    int64_t j = 0;
    for (; j + 8 <= cols; j += 8) {
        __m256i a = _mm256_loadu_si256((const __m256i *)(acc + j));
        a = _mm256_sub_epi32(a, _mm256_mullo_epi32(c128, _mm256_loadu_si256((const __m256i *)(cs + j))));
        qmm_y_epilogue8(c, a, r, n0 + j, sr);
    }
    for (; j < cols; j++) qmm_epilogue_store_ref(c, acc[j] - (u8 ? 128 * cs[j] : 0), r, n0 + j, sr);
}

/* The driver's tile (qmm_i8_tile_fn, int8_gemm.h) on kernel kern, the operand u8 (the engine's
 * u8) or s8: nr 16-column blocks one kernel call each, each prefetching its part of the tile's
 * share of the next panel into L2 (whole-K small M), then on the last chunk the tile's outputs,
 * row by row over its nr·16 columns. The partials' rows QMM_A2_NC int32 apart (the engines' nc). */
static inline void qmm_a2_tile(const uint8_t *a, int64_t lda, const float *s, const qmm_call *out,
                               const qmm_i8_tile *t, qmm_a2_kernel_fn kern, int u8) {
    const int64_t ldp = QMM_A2_NC, ldb = t->ldb;
    const int64_t part_bytes = t->pf_mode == QMM_I8_PF_NEXT ? t->pf_step * t->nq / t->nr : 0;
    int64_t pf_kq = (part_bytes + 63) / 64;
    if (pf_kq > t->nq) pf_kq = t->nq;
    for (int jb = 0; jb < t->nr; jb++)
        kern(a, lda, t->b + jb * ldb, t->nq, t->part + jb * 16, ldp, t->mr, t->first,
             pf_kq ? t->pf + jb * part_bytes : NULL, pf_kq);
    if (t->last) {
        const int64_t cols = out->N - t->n < 16 * t->nr ? out->N - t->n : 16 * t->nr;
        for (int i = 0; i < t->mr; i++)
            qmm_a2_epilogue_row(out, t->colsum, t->part + i * ldp, t->r + i, t->n, cols, u8, s[i]);
    }
}

/* x[0..8) as an 8 × 8 matrix of dwords (x[j] = row j), transposed in place: x[q] lane j = dword q
 * of row j */
static inline __attribute__((always_inline)) void qmm_a2_tr8(__m256i x[8]) {
    __m256i t[8];
    for (int j = 0; j < 8; j += 2) {
        t[j] = _mm256_unpacklo_epi32(x[j], x[j + 1]);
        t[j + 1] = _mm256_unpackhi_epi32(x[j], x[j + 1]);
    }
    for (int g = 0; g < 2; g++) { /* x[4g + d], lane l: rows 4g..4g+3, dword 4l + d */
        x[4 * g + 0] = _mm256_unpacklo_epi64(t[4 * g], t[4 * g + 2]);
        x[4 * g + 1] = _mm256_unpackhi_epi64(t[4 * g], t[4 * g + 2]);
        x[4 * g + 2] = _mm256_unpacklo_epi64(t[4 * g + 1], t[4 * g + 3]);
        x[4 * g + 3] = _mm256_unpackhi_epi64(t[4 * g + 1], t[4 * g + 3]);
    }
    for (int d = 0; d < 4; d++) { /* dword 4l + d of the 8 rows = lane l of x[d], x[4 + d] */
        t[d] = _mm256_permute2x128_si256(x[d], x[4 + d], 0x20);
        t[4 + d] = _mm256_permute2x128_si256(x[d], x[4 + d], 0x31);
    }
    for (int j = 0; j < 8; j++) x[j] = t[j];
}

/* qmm_pack_n16k4_fn (int8_gemm.h) in AVX2: per 32 bytes of K, rows 0..7 and 8..15 each transposed
 * as an 8 × 8 matrix of dwords (out[q]: k-quad q of 8 rows), the two halves one n16k4 row; the
 * last bytes of a row (k1 - k < 32) are copied into a zeroed buffer first: nothing past k1 is
 * read. Column sums: VPMADDUBSW(1, w) then VPMADDWD(1): exact, no saturation (|Σ pair| <= 256). */
static inline void qmm_a2_pack(const int8_t *W, int64_t ld, int rows, int64_t k0, int64_t k1, int8_t *dst, int64_t nq,
                               int32_t *cs, int first, int *neg128) {
    const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1), m128 = _mm256_set1_epi8(-128);
    __m256i cs_h[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()}, neg = _mm256_setzero_si256();
    for (int64_t q0 = 0; q0 < nq; q0 += 8) {
        const int64_t k = k0 + q0 * 4, bytes = k1 - k < 32 ? k1 - k : 32;
        const int64_t nout = nq - q0 < 8 ? nq - q0 : 8;
        for (int h = 0; h < 2; h++) {
            __m256i r[8];
            for (int j = 0; j < 8; j++) {
                const int row = 8 * h + j;
                if (row >= rows || bytes <= 0) {
                    r[j] = _mm256_setzero_si256();
                } else if (bytes == 32) {
                    r[j] = _mm256_loadu_si256((const __m256i *)(W + row * ld + k));
                } else {
                    int8_t tmp[32] = {0};
                    memcpy(tmp, W + row * ld + k, (size_t)bytes);
                    r[j] = _mm256_loadu_si256((const __m256i *)tmp);
                }
                neg = _mm256_or_si256(neg, _mm256_cmpeq_epi8(r[j], m128));
            }
            qmm_a2_tr8(r);
            for (int64_t q = 0; q < nout; q++) {
                _mm256_store_si256((__m256i *)(dst + (q0 + q) * 64 + 32 * h), r[q]);
                cs_h[h] = _mm256_add_epi32(cs_h[h], _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, r[q]), ones16));
            }
        }
    }
    for (int h = 0; h < 2; h++) {
        if (!first) cs_h[h] = _mm256_add_epi32(cs_h[h], _mm256_loadu_si256((const __m256i *)(cs + 8 * h)));
        _mm256_storeu_si256((__m256i *)(cs + 8 * h), cs_h[h]);
    }
    *neg128 |= _mm256_movemask_epi8(neg) != 0;
}

/* The blocking of both AVX2 engines: MC × KC activation bytes (48 KiB) in L2, a 16 × KC panel
 * (8 KiB) in L1; whole K (weight streaming) up to 32 rows; the engine's rows regime for borrowed
 * weights (rows_m_ = 0: none). */
#define QMM_A2_ENGINE_FIELDS(u8_, mr_, tile_, rows_m_, rows_kernels_, n_rows_kernels_) \
    .u8 = (u8_), .mr = (mr_), .nrb = 4, .mc = QMM_A2_MC, .nc = QMM_A2_NC, .kc = QMM_A2_KC, .whole_k_m = 32, .tile = (tile_), \
    .pack = qmm_a2_pack, .rows_m = (rows_m_), .rows_kernels = (rows_kernels_), .n_rows_kernels = (n_rows_kernels_)

/* One rows kernel call's operands (qmm_i8_rows_fn, int8_gemm.h) as the rows templates pass them
 * on (int8_rows_avx2.h, avx_vnni_rows.c): column n from row w + (n − n0)·ldw, columns [n0, n1). */
typedef struct qmm_a2r_job {
    const int8_t *w;
    int64_t ldw;
    const qmm_rows_act *a;
    const qmm_call *c;
    int64_t n0, n1;
} qmm_a2r_job;

/* The rows regime's outputs (int8_rows_avx2.h, w4a8_rows_avx2.h, avx_vnni_rows.c): for R
 * streams, stream r's rows n0 + r·span .. n0 + r·span + cols − 1, the sums out[i][r·16 + j] of
 * token i < m (token scale s[i]) through the epilogue of call c. */
static inline void qmm_a2_rows_out(const qmm_call *c, const float *s, const int32_t (*out)[64], int R, int m,
                                   int64_t n0, int64_t span, int cols) {
    static const int32_t zero[16];
    for (int r = 0; r < R; r++)
        for (int i = 0; i < m; i++) qmm_a2_epilogue_row(c, zero, out[i] + r * 16, i, n0 + r * span, cols, 0, s[i]);
}

/* the sum of v's 8 int32 lanes */
static inline int32_t qmm_a2_hsum8(__m256i v) {
    __m128i x = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    x = _mm_add_epi32(x, _mm_shuffle_epi32(x, 0x4E));
    x = _mm_add_epi32(x, _mm_shuffle_epi32(x, 0xB1));
    return _mm_cvtsi128_si32(x);
}

/* avx_vnni's rows regime at 9..32 tokens (avx_vnni_rows.c): its token copy, the engine's
 * rows_ap_bytes and rows_ap_fill (int8_gemm.h) */
int64_t qmm_avx_vnni_rows_ap_bytes(int64_t M, int64_t Kp);
void qmm_avx_vnni_rows_ap_fill(const int8_t *q, int64_t lda, uint8_t *ap, int64_t r0, int64_t r1);

#endif /* QMM_INT8_GEMM_AVX2_H */
