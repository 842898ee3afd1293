/*
 * avx512_vnni_w4a8.c — the avx512_vnni engine's fused W4A8 rows kernels (avx512_vnni_w4a8.h), each
 * for 4- and 6-bit weights (w4w6), by name (qmm_vnni_w4a8_kernels, with the VBMI ones of
 * avx512_vnni_w4a8_vbmi.c first).
 */
#include "avx512_vnni_rows.h"
#include "avx512_vnni_w4a8.h"
#include "ukernels.h"

#define W4W6_KERNEL(kern)                                                                                      \
    do {                                                                                                    \
        if (w->bits == 6) QMM_VNNI_W4_KERNEL(kern, 1, w, lut, lut_u8, a, out, n0, n1, buf, buf_bytes);      \
        else QMM_VNNI_W4_KERNEL(kern, 0, w, lut, lut_u8, a, out, n0, n1, buf, buf_bytes);                   \
    } while (0)

void qmm_qd8_w4w6_rows_ukernel_m1to8__avx512vnni_fused(const qmm_w4_codes *w, const int8_t *lut, const int8_t *lut_u8,
                                                       const qmm_rows_act *a, const qmm_call *out, int64_t n0,
                                                       int64_t n1, int8_t *buf, int64_t buf_bytes) {
    W4W6_KERNEL(qmm_vnni_w4_dot_kernel);
}

void qmm_qd8_w4w6_rows_ukernel_m9to16__avx512vnni_bcast(const qmm_w4_codes *w, const int8_t *lut, const int8_t *lut_u8,
                                                        const qmm_rows_act *a, const qmm_call *out, int64_t n0,
                                                        int64_t n1, int8_t *buf, int64_t buf_bytes) {
    W4W6_KERNEL(qmm_vnni_w4_bcast_kernel);
}

void qmm_qd8_w4w6_rows_ukernel_m17to64__avx512vnni_groups(const qmm_w4_codes *w, const int8_t *lut,
                                                          const int8_t *lut_u8, const qmm_rows_act *a,
                                                          const qmm_call *out, int64_t n0, int64_t n1, int8_t *buf,
                                                          int64_t buf_bytes) {
    W4W6_KERNEL(qmm_vnni_w4_groups_kernel);
}

/* the VBMI kernels (6 bits, where qmm_w4a8_vbmi) first: the first that runs a call is picked */
static const qmm_w4_rows_ukernel k_w4a8[] = {
    {"qmm_qd8_w6_rows_ukernel_m1to8__avx512vbmi_fused", qmm_qd8_w6_rows_ukernel_m1to8__avx512vbmi_fused, 1, 8,
     QMM_W4_BITS6, 1},
    {"qmm_qd8_w6_rows_ukernel_m9to16__avx512vbmi_bcast", qmm_qd8_w6_rows_ukernel_m9to16__avx512vbmi_bcast, 9, 16,
     QMM_W4_BITS6, 1},
    {"qmm_qd8_w6_rows_ukernel_m17to64__avx512vbmi_groups", qmm_qd8_w6_rows_ukernel_m17to64__avx512vbmi_groups, 17,
     64, QMM_W4_BITS6, 1},
    {"qmm_qd8_w4w6_rows_ukernel_m1to8__avx512vnni_fused", qmm_qd8_w4w6_rows_ukernel_m1to8__avx512vnni_fused, 1, 8,
     QMM_W4_BITS4 | QMM_W4_BITS6, 0},
    {"qmm_qd8_w4w6_rows_ukernel_m9to16__avx512vnni_bcast", qmm_qd8_w4w6_rows_ukernel_m9to16__avx512vnni_bcast, 9, 16,
     QMM_W4_BITS4 | QMM_W4_BITS6, 0},
    {"qmm_qd8_w4w6_rows_ukernel_m17to64__avx512vnni_groups", qmm_qd8_w4w6_rows_ukernel_m17to64__avx512vnni_groups,
     17, 64, QMM_W4_BITS4 | QMM_W4_BITS6, 0},
};

const qmm_w4_rows_kernels qmm_vnni_w4a8_kernels = {k_w4a8, (int)(sizeof k_w4a8 / sizeof k_w4a8[0]),
                                                   qmm_vnni_w4_ap_fill};
