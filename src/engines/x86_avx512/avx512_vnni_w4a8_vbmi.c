/*
 * avx512_vnni_w4a8_vbmi.c — the avx512_vnni engine's fused W4A8 rows kernels (avx512_vnni_w4a8.h)
 * for 6-bit weights (w6), compiled with AVX512-VBMI: each run's 64-entry table looked up by one
 * VPERMB (w4a8_avx512.h). Listed in qmm_vnni_w4a8_kernels (avx512_vnni_w4a8.c) as needing VBMI:
 * the driver runs them instead of the w4w6 kernels on a 6-bit weight where qmm_w4a8_vbmi says the
 * CPU has VBMI; the same bits.
 */
#include "avx512_vnni_w4a8.h"
#include "ukernels.h"

#define W6_KERNEL(kern)                                                                                        \
    do {                                                                                                    \
        if (w->bits != 6) qmm_call_bug(out, "w6a8 vbmi rows: a 4-bit weight");                              \
        else QMM_VNNI_W4_KERNEL(kern, 1, w, lut, lut_u8, a, out, n0, n1, buf, buf_bytes);                   \
    } while (0)

void qmm_qd8_w6_rows_ukernel_m1to8__avx512vbmi_fused(const qmm_w4_codes *w, const int8_t *lut, const int8_t *lut_u8,
                                                     const qmm_rows_act *a, const qmm_call *out, int64_t n0, int64_t n1,
                                                     int8_t *buf, int64_t buf_bytes) {
    W6_KERNEL(qmm_vnni_w4_dot_kernel);
}

void qmm_qd8_w6_rows_ukernel_m9to16__avx512vbmi_bcast(const qmm_w4_codes *w, const int8_t *lut, const int8_t *lut_u8,
                                                      const qmm_rows_act *a, const qmm_call *out, int64_t n0,
                                                      int64_t n1, int8_t *buf, int64_t buf_bytes) {
    W6_KERNEL(qmm_vnni_w4_bcast_kernel);
}

void qmm_qd8_w6_rows_ukernel_m17to64__avx512vbmi_groups(const qmm_w4_codes *w, const int8_t *lut,
                                                        const int8_t *lut_u8, const qmm_rows_act *a,
                                                        const qmm_call *out, int64_t n0, int64_t n1, int8_t *buf,
                                                        int64_t buf_bytes) {
    W6_KERNEL(qmm_vnni_w4_groups_kernel);
}
