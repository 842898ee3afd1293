/*
 * avx512_attn.h — the attention entry points of the AVX-512 engines (SPEC §10), each defined in
 * its engine's *_attn.c and set in the engine's qmm_engine_ops: admit (NULL or the first reason
 * it refuses the call) and run (preconditions: admitted, the call validated).
 */
#ifndef QMM_AVX512_ATTN_H
#define QMM_AVX512_ATTN_H

#include "qmm_internal.h"

const char *qmm_avx512_f32_attn_admit(const qmm_attn_call *c, char *why, size_t n);  /* avx512_f32_attn.c */
qmm_status qmm_avx512_f32_attn_run(qmm_context *ctx, const qmm_attn_call *c);
const char *qmm_avx512_bf16_attn_admit(const qmm_attn_call *c, char *why, size_t n); /* avx512_bf16_attn.c */
qmm_status qmm_avx512_bf16_attn_run(qmm_context *ctx, const qmm_attn_call *c);
const char *qmm_avx512_vnni_attn_admit(const qmm_attn_call *c, char *why, size_t n); /* avx512_vnni_attn.c: mode int8 */
qmm_status qmm_avx512_vnni_attn_run(qmm_context *ctx, const qmm_attn_call *c);

#endif /* QMM_AVX512_ATTN_H */
