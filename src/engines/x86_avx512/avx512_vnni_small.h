/*
 * avx512_vnni_small.h — one-pass register tiles of the AVX512-VNNI engine for 7 ≤ M ≤ 24
 * (avx512_vnni_small.c; used by avx512_vnni.c only). A tile holds `rows` (8, 12, 16, 20 or 24) rows ×
 * qmm_vnni_small_blocks(rows) 16-column blocks over the whole K.
 */
#ifndef QMM_AVX512_VNNI_SMALL_H
#define QMM_AVX512_VNNI_SMALL_H

#include <stdint.h>

/* The tile height for M rows (M ≤ 24): 8, 12, 16, 20 or 24; rows M.. are padding. */
int qmm_vnni_small_rows(int64_t M);
/* 16-column blocks per tile for that height: 3 (8 rows), 2 (12), else 1. */
int qmm_vnni_small_blocks(int rows);
/* part[i * 256 + jb * 16 + l] = Σ_q Σ_t ap[q][i][t] · b[jb * ldb + q * 64 + l * 4 + t] for rows
 * i < rows, blocks jb < blocks, l < 16, over nq quads; u8 × s8, exact int32 (mod 2^32).
 * ap is [nq][rows][4] u8; b: n16k4 blocks ldb bytes apart, 64-byte aligned. */
/* the one-pass tiles: 8 rows × 48 columns, 12 × 32, 16..24 × 16 (qmm_vnni_small_blocks) */
void qmm_qd8_qc8w_gemm_ukernel_onepass_c4__avx512vnni(int rows, const uint8_t *ap, const int8_t *b, int64_t ldb,
                                                      int64_t nq, int32_t *part);

#endif /* QMM_AVX512_VNNI_SMALL_H */
