/*
 * avx2_int8_w4a8.c — the avx2_int8 engine's rows regime on a W4A8 weight, fused (its
 * kernel of the W4A8 family, qmm_w4_rows_fn in int8_gemm.h; qmm_qd8_w4w6_rows_ukernel_m1to8__avx2_fused): the
 * template of w4a8_rows_avx2.h in its sign form (|w| once, per token VPSIGNB(q, w), VPMADDUBSW,
 * VPMADDWD(1); a call whose q holds -128 takes exact scalar dot products), M <= 8 (at 5..8 one row
 * at a time, 8 accumulators: measured against the rows buffer, bench/NOTES.md).
 */
#include "ukernels.h"
#include "w4a8_rows_avx2.h"

void qmm_qd8_w4w6_rows_ukernel_m1to8__avx2_fused(const qmm_w4_codes *w, const int8_t *lut, const int8_t *lut_u8,
        const qmm_rows_act *a, const qmm_call *out, int64_t n0, int64_t n1, int8_t *buf, int64_t buf_bytes) {
    (void)buf;
    (void)buf_bytes;
    qmm_w4r_kernel(0, w, lut, lut_u8, a, out, n0, n1);
}
