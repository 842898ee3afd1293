/* prepass_avx512.c — placeholder until the AVX-512 pre-pass lands: NULL selects the scalar one. */
#include "prepass.h"

const qmm_prepass_row_fn qmm_prepass_row_avx512_ptr = NULL;
const qmm_amax_row_fn qmm_amax_row_avx512_ptr = NULL;
