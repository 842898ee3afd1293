/*
 * avx512_vnni_small.h — one-pass register tiles of the AVX512-VNNI engine for 7 ≤ M ≤ 24
 * (avx512_vnni_small.c; used by avx512_vnni.c only). A tile holds `rows` (8, 12, 16, 20 or 24) rows ×
 * qmm_vnni_small_blocks(rows) 16-column blocks over the whole K.
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

#endif /* QMM_AVX512_VNNI_SMALL_H */
