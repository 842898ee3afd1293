/*
 * float_act_avx2.c — the float engines' activation panel with AVX2 + FMA + F16C (contract in
 * float_act.h), for CPUs without AVX-512 or with the ISA capped below it: per chunk of
 * QMM_FACT_KB k values, each row's act + rotation runs through qmm_y_act_rotate (simd_avx2.h: the
 * AVX2 int8 pre-pass's own vector code, bit-identical to qmm_ref_act_rotate_row) into
 * tmp[row][kb]; the chunk is then packed by the scalar qmm_float_act_pack_rows (bf16 rounding as
 * qmm_f32_to_bf16). The act + rotation is the costly part; the packing stays scalar.
 */
#include "float_act.h"
#include "simd_avx2.h"

#include <string.h>

void qmm_float_act_panel_avx2(const qmm_fact_src *src, int rows, int mr, int bf16, void *Ap, int64_t Ka,
                              float *tmp) {
    const int64_t K = src->K;
    const size_t xs = qmm_dtype_size(src->t);
    for (int64_t k0 = 0; k0 < K; k0 += QMM_FACT_KB) {
        const int64_t k1 = K - k0 < QMM_FACT_KB ? K : k0 + QMM_FACT_KB, kb = k1 - k0;
        for (int i = 0; i < mr; i++) {
            float *a = tmp + (int64_t)i * QMM_FACT_KB;
            if (i < rows) {
                qmm_y_amax m;
                qmm_y_amax_init(&m);
                qmm_y_act_rotate((const char *)src->x + (size_t)(i * src->ldx) * xs, src->t, K, src->act, src->gs, k0,
                                 k1, a, &m);
            } else {
                memset(a, 0, (size_t)kb * sizeof(float));
            }
        }
        qmm_float_act_pack_rows(tmp, QMM_FACT_KB, 0, mr, mr, k0, k1, K, bf16, Ap, Ka);
    }
}
