/*
 * avx2_int8_w4a8.c — the avx2_int8 engine's rows regime on a W4A8 weight, fused (its
 * qmm_i8_engine.rows_w4a8 kernel, int8_gemm.h; qmm_qd8_w4_rows_ukernel_m1to8__avx2_fused): the
 * template of w4a8_rows_avx2.h in its sign form (|w| once, per token VPSIGNB(q, w), VPMADDUBSW,
 * VPMADDWD(1); a call whose q holds -128 takes exact scalar dot products), M <= 8 (at 5..8 one row
 * at a time, 8 accumulators: measured against the rows buffer, bench/NOTES.md).
 */
#include "ukernels.h"
#include "w4a8_rows_avx2.h"

void qmm_qd8_w4_rows_ukernel_m1to8__avx2_fused(const qmm_i8_gemm *g, int64_t b0, int64_t b1) {
    qmm_w4r_kernel(0, g, b0, b1);
}
