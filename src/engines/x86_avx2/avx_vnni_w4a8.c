/*
 * avx_vnni_w4a8.c — the avx_vnni engine's rows regime on a W4A8 weight, fused (its kernels of the
 * W4A8 family, qmm_w4_rows_fn in int8_gemm.h), 4 and 6 bits, e4m3 s_rel, groups of a multiple of
 * 16 (the driver checks). Built with -mavxvnni; a compiler without it builds nothing here
 * (avx_vnni.c then lists the engine as not built).
 *   1..8    qmm_qd8_w4w6_rows_ukernel_m1to8__avxvnni_fused: the template of w4a8_rows_avx2.h in
 *           its VPDPBUSD form (the table's u8 form, w + 128, against q, less 128·Σq);
 *   9..24   qmm_qd8_w4w6_rows_ukernel_m9to24__avxvnni_bcast: the broadcast template of
 *           avx_vnni_bcast.h on the looked-up values (the tokens in the lanes of a ymm, the
 *           engine's token copy), as the engine's int8 rows kernel at 9..32 on int8 rows.
 * Exact for every q; the reference's bits.
 */
#include "avx_vnni_bcast.h"
#include "ukernels.h"
#include "w4a8_rows_avx2.h"

#ifdef __AVXVNNI__
void qmm_qd8_w4w6_rows_ukernel_m1to8__avxvnni_fused(const qmm_w4_codes *w, const int8_t *lut, const int8_t *lut_u8,
        const qmm_rows_act *a, const qmm_call *out, int64_t n0, int64_t n1, int8_t *buf, int64_t buf_bytes) {
    (void)buf;
    (void)buf_bytes;
    qmm_w4r_kernel(1, w, lut, lut_u8, a, out, n0, n1);
}

void qmm_qd8_w4w6_rows_ukernel_m9to24__avxvnni_bcast(const qmm_w4_codes *w, const int8_t *lut, const int8_t *lut_u8,
        const qmm_rows_act *a, const qmm_call *out, int64_t n0, int64_t n1, int8_t *buf, int64_t buf_bytes) {
    (void)lut;
    (void)buf;
    (void)buf_bytes;
    if (n0 >= n1) return;
    const qmm_vbc_job job = {.codes = w, .lut_u8 = lut_u8, .a = a, .c = out, .n0 = n0, .n1 = n1};
    const int six = w->bits == 6, per = qmm_w4a2_per(w->group);
    if (six && per == 2) qmm_vbc_kernel(1, 1, 2, &job);
    else if (six) qmm_vbc_kernel(1, 1, 0, &job);
    else if (per == 2) qmm_vbc_kernel(1, 0, 2, &job);
    else qmm_vbc_kernel(1, 0, 0, &job);
}
#endif
