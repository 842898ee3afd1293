/*
 * avx2_attn.h — the attention admits of the AVX2-level engines (SPEC §10), each defined in its
 * engine's *_attn.c beside its ukernels (ukernels.h: qmm_avx2_f32_attn, qmm_avx_vnni_attn) and
 * set in the engine's qmm_engine_ops: NULL or the first reason the engine refuses the call.
 */
#ifndef QMM_AVX2_ATTN_H
#define QMM_AVX2_ATTN_H

#include "qmm_internal.h"

const char *qmm_avx2_f32_attn_admit(const void *call, char *why, size_t n); /* avx2_f32_attn.c */
const char *qmm_avx_vnni_attn_admit(const void *call, char *why, size_t n); /* avx_vnni_attn.c: mode int8 */

#endif /* QMM_AVX2_ATTN_H */
