/*
 * avx512_vnni_rows.h — the AVX512-VNNI engine's rows regime as its engine file (avx512_vnni.c)
 * sees it: the int8 rows kernels' table and the token copy they read (avx512_vnni_rows.c), the
 * fused W4A8 family (avx512_vnni_w4a8.c, avx512_vnni_w4a8_vbmi.c). The kernels by name:
 * ukernels.h.
 */
#ifndef QMM_AVX512_VNNI_ROWS_H
#define QMM_AVX512_VNNI_ROWS_H

#include "int8_gemm.h"

enum { QMM_VNNI_ROWS_M = 64 /* up to this M: the rows regime (the rows kernels' ranges cover 1..64) */ };

/* The rows regime's token copy: its bytes for M tokens (0: none), and its fill from q
 * (qmm_i8_engine.rows_ap_bytes / rows_ap_fill). */
int64_t qmm_vnni_rows_ap_bytes(int64_t M, int64_t Kp);
void qmm_vnni_rows_ap_fill(const int8_t *q, int64_t lda, uint8_t *ap, int64_t r0, int64_t r1);
/* The W4A8 family's (qmm_w4_rows_kernels.ap_fill): the same bytes, its groups of 16 tokens in the
 * k16 layout (avx512_vnni_bcast.h). */
void qmm_vnni_w4_ap_fill(const int8_t *q, int64_t lda, uint8_t *ap, int64_t r0, int64_t r1);
/* The rows kernels of the engine with the M each runs (qmm_i8_engine.rows_kernels). */
enum { QMM_VNNI_N_ROWS_KERNELS = 5 };
extern const qmm_i8_rows_ukernel qmm_vnni_rows_kernels[QMM_VNNI_N_ROWS_KERNELS];
/* Its W4A8 family (qmm_i8_engine.w4a8): the fused rows kernels of avx512_vnni_w4a8.c (4 and 6
 * bits) and avx512_vnni_w4a8_vbmi.c (6 bits with AVX512-VBMI). */
extern const qmm_w4_rows_kernels qmm_vnni_w4a8_kernels;

#endif /* QMM_AVX512_VNNI_ROWS_H */
