/*
 * avx512_vnni_small.h — the one-pass regime of the AVX512-VNNI engine for 7 ≤ M ≤ 24
 * (avx512_vnni_small.c; used by avx512_vnni.c): register tiles of `rows` (8, 12, 16, 20 or 24)
 * rows × qmm_vnni_small_blocks(rows) 16-column blocks over the whole K, and the engine's
 * one_pass_rows / one_pass (int8_gemm.h) on them.
 */
#ifndef QMM_AVX512_VNNI_SMALL_H
#define QMM_AVX512_VNNI_SMALL_H

#include "ukernels.h"

#include <stdint.h>

/* The tile height for M rows (M ≤ 24): 8, 12, 16, 20 or 24; rows M.. are padding. */
int qmm_vnni_small_rows(int64_t M);
/* 16-column blocks per tile for that height: 3 (8 rows), 2 (12), else 1. */
int qmm_vnni_small_blocks(int rows);
/* The one-pass kernel of that height (ukernels.h: 8 rows × 48 columns, 12 × 32, 16..24 × 16). */
qmm_vnni_onepass_fn qmm_vnni_small_kernel(int rows);

/* The engine's one-pass regime (qmm_i8_engine.one_pass_rows, .one_pass; int8_gemm.h): 7 ≤ M ≤ 24
 * takes it, a tile of qmm_vnni_small_rows(M) rows × qmm_vnni_small_blocks of them; one tile the
 * kernel of its height, then the outputs of the tile's t->nr blocks (qmm_vnni_store_out). */
int qmm_vnni_one_pass_rows(int64_t M, int *blocks);
void qmm_vnni_one_pass(const uint8_t *ap, int wrows, const float *s, const qmm_call *out, const qmm_i8_tile *t);

#endif /* QMM_AVX512_VNNI_SMALL_H */
