/*
 * w4a8_avx512vbmi.c — w4a8.h's AVX-512 table decoder compiled with AVX512-VBMI: 6-bit codes looked
 * up with one VPERMB per run's 64-entry table (w4a8_avx512.h) instead of four VPSHUFB quarters and
 * their blends. qmm_w4a8_decoder's choice where the CPU has VBMI (qmm_w4a8_vbmi); what is not on
 * the table (f32 s_rel, groups of 4 or 8) goes to w4a8_avx512.c's decoder. The same bits.
 */
#include "w4a8_avx512.h"

static void decode_rows_vbmi(const qmm_weight *w, const int8_t *lut, int64_t n0, int64_t rows, int64_t k0, int64_t k1,
                             int8_t *dst, int64_t ld) {
    if (lut && w->w4.group % 16 == 0) qmm_w4_table_rows(w, lut, n0, rows, k0, k1, dst, ld);
    else qmm_w4a8_decode_rows_avx512_ptr(w, lut, n0, rows, k0, k1, dst, ld);
}

const qmm_w4a8_rows_fn qmm_w4a8_decode_rows_avx512vbmi_ptr = decode_rows_vbmi;
