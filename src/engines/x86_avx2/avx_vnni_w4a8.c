/*
 * avx_vnni_w4a8.c — the avx_vnni engine's rows regime on a W4A8 weight, fused (its
 * kernel of the W4A8 family, qmm_w4_rows_fn in int8_gemm.h; qmm_qd8_w4w6_rows_ukernel_m1to8__avxvnni_fused): the
 * template of w4a8_rows_avx2.h in its VPDPBUSD form (the table's u8 form, w + 128, against q,
 * less 128·Σq; exact for every q), M <= 8 (the engine's rows regime). Built with -mavxvnni; a
 * compiler without it builds nothing here (avx_vnni.c then lists the engine as not built).
 */
#include "ukernels.h"
#include "w4a8_rows_avx2.h"

#ifdef __AVXVNNI__
void qmm_qd8_w4w6_rows_ukernel_m1to8__avxvnni_fused(const qmm_w4_codes *w, const int8_t *lut, const int8_t *lut_u8,
        const qmm_rows_act *a, const qmm_call *out, int64_t n0, int64_t n1, int8_t *buf, int64_t buf_bytes) {
    (void)buf;
    (void)buf_bytes;
    qmm_w4r_kernel(1, w, lut, lut_u8, a, out, n0, n1);
}
#endif
