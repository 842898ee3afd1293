/*
 * avx512_vnni_w4a8.c — the avx512_vnni engine's fused W4A8 rows kernels (avx512_vnni_w4a8.h) for
 * 4- and 6-bit weights, by name (qmm_vnni_rows_w4a8_kernels).
 */
#include "avx512_vnni_w4a8.h"
#include "ukernels.h"

void qmm_qd8_w4_rows_ukernel_m1to8__avx512vnni_fused(const qmm_i8_gemm *g, int64_t b0, int64_t b1) {
    if (g->c->w->w4.bits == 6) qmm_vnni_w4_dot_kernel(1, g, b0, b1);
    else qmm_vnni_w4_dot_kernel(0, g, b0, b1);
}

void qmm_qd8_w4_rows_ukernel_m9to16__avx512vnni_bcast(const qmm_i8_gemm *g, int64_t b0, int64_t b1) {
    if (g->c->w->w4.bits == 6) qmm_vnni_w4_bcast_kernel(1, g, b0, b1);
    else qmm_vnni_w4_bcast_kernel(0, g, b0, b1);
}

void qmm_qd8_w4_rows_ukernel_m17to64__avx512vnni_groups(const qmm_i8_gemm *g, int64_t b0, int64_t b1) {
    if (g->c->w->w4.bits == 6) qmm_vnni_w4_groups_kernel(1, g, b0, b1);
    else qmm_vnni_w4_groups_kernel(0, g, b0, b1);
}

const qmm_i8_rows_ukernel qmm_vnni_rows_w4a8_kernels[QMM_VNNI_N_ROWS_W4A8_KERNELS] = {
    {"qmm_qd8_w4_rows_ukernel_m1to8__avx512vnni_fused", qmm_qd8_w4_rows_ukernel_m1to8__avx512vnni_fused, 1, 8},
    {"qmm_qd8_w4_rows_ukernel_m9to16__avx512vnni_bcast", qmm_qd8_w4_rows_ukernel_m9to16__avx512vnni_bcast, 9, 16},
    {"qmm_qd8_w4_rows_ukernel_m17to64__avx512vnni_groups", qmm_qd8_w4_rows_ukernel_m17to64__avx512vnni_groups, 17,
     64},
};
