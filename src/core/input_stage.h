/*
 * input_stage.h — the kitchen input stage (input_stage.c, input_stage_avx512.c; SPEC §1a):
 * rms_norm, situ and the modulation materialized before the engine runs.
 */
#ifndef QMM_INPUT_STAGE_H
#define QMM_INPUT_STAGE_H

#include "qmm_internal.h"

/* Does the call carry rms_norm, situ or a modulation? */
int qmm_input_stage_needed(const qmm_call *c);
/* If needed: materializes a = modulate(act(x)) [M][K] of x's dtype in QMM_SCRATCH_STAGE and
 * rewrites c to read it (act none, no modulation). */
qmm_status qmm_input_stage(qmm_context *ctx, qmm_call *c);
/* One row: x (K_in values of T) → out (K values of T); tmp: K floats. The AVX-512 version
 * (input_stage_avx512.c, NULL when not built) gives the same bits as the scalar one. */
typedef void (*qmm_input_stage_row_fn)(const qmm_call *c, const void *x, void *out, float *tmp);
void qmm_input_stage_row_ref(const qmm_call *c, const void *x, void *out, float *tmp);
extern const qmm_input_stage_row_fn qmm_input_stage_row_avx512_ptr;
qmm_input_stage_row_fn qmm_input_stage_row_select(const qmm_context *ctx);
/* rms_norm's 1 / sqrtf(sumsq / K + eps) */
float qmm_rms_norm_factor(const qmm_call *c, float sumsq);

#endif /* QMM_INPUT_STAGE_H */
