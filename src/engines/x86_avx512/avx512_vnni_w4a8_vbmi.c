/*
 * avx512_vnni_w4a8_vbmi.c — the avx512_vnni engine's fused W4A8 rows kernels (avx512_vnni_w4a8.h)
 * for 6-bit weights, compiled with AVX512-VBMI: each run's 64-entry table looked up by one VPERMB
 * (w4a8_avx512.h). The driver runs them instead of avx512_vnni_w4a8.c's on a 6-bit weight where
 * qmm_w4a8_vbmi says the CPU has VBMI (qmm_vnni_rows_w6a8_vbmi_kernels); the same bits.
 */
#include "avx512_vnni_w4a8.h"
#include "ukernels.h"

void qmm_qd8_w6_rows_ukernel_m1to8__avx512vbmi_fused(const qmm_i8_gemm *g, int64_t b0, int64_t b1) {
    if (g->c->w->w4.bits != 6) qmm_call_bug(g->c, "w6a8 vbmi rows: a 4-bit weight");
    else qmm_vnni_w4_dot_kernel(1, g, b0, b1);
}

void qmm_qd8_w6_rows_ukernel_m9to16__avx512vbmi_bcast(const qmm_i8_gemm *g, int64_t b0, int64_t b1) {
    if (g->c->w->w4.bits != 6) qmm_call_bug(g->c, "w6a8 vbmi rows: a 4-bit weight");
    else qmm_vnni_w4_bcast_kernel(1, g, b0, b1);
}

void qmm_qd8_w6_rows_ukernel_m17to64__avx512vbmi_groups(const qmm_i8_gemm *g, int64_t b0, int64_t b1) {
    if (g->c->w->w4.bits != 6) qmm_call_bug(g->c, "w6a8 vbmi rows: a 4-bit weight");
    else qmm_vnni_w4_groups_kernel(1, g, b0, b1);
}

const qmm_i8_rows_ukernel qmm_vnni_rows_w6a8_vbmi_kernels[QMM_VNNI_N_ROWS_W4A8_KERNELS] = {
    {"qmm_qd8_w6_rows_ukernel_m1to8__avx512vbmi_fused", qmm_qd8_w6_rows_ukernel_m1to8__avx512vbmi_fused, 1, 8},
    {"qmm_qd8_w6_rows_ukernel_m9to16__avx512vbmi_bcast", qmm_qd8_w6_rows_ukernel_m9to16__avx512vbmi_bcast, 9, 16},
    {"qmm_qd8_w6_rows_ukernel_m17to64__avx512vbmi_groups", qmm_qd8_w6_rows_ukernel_m17to64__avx512vbmi_groups, 17,
     64},
};
