/*
 * avx_vnni_w4a8.c — the avx_vnni engine's rows regime on a W4A8 weight, fused (its
 * qmm_i8_engine.rows_w4a8 kernel, int8_gemm.h; qmm_qd8_w4_rows_ukernel_m1to8__avxvnni_fused): the
 * template of w4a8_rows_avx2.h in its VPDPBUSD form (the table's u8 form, w + 128, against q,
 * less 128·Σq; exact for every q), M <= 8 (the engine's rows regime). Built with -mavxvnni; a
 * compiler without it builds nothing here (avx_vnni.c then lists the engine as not built).
 */
#include "ukernels.h"
#include "w4a8_rows_avx2.h"

#ifdef __AVXVNNI__
void qmm_qd8_w4_rows_ukernel_m1to8__avxvnni_fused(const qmm_i8_gemm *g, int64_t b0, int64_t b1) {
    qmm_w4r_kernel(1, g, b0, b1);
}
#endif
