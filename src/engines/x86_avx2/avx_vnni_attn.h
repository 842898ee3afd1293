/*
 * avx_vnni_attn.h — attention's int8 mode on avx_vnni (avx_vnni_attn.c): its ukernels under the
 * attention contract (core/attention.h, "the ukernel contract"), its descriptor and admission.
 * The kernel names and signatures are the contract's typedefs; these declarations belong with
 * the other engines' ukernels (ukernels.h) once the driver's branch is merged.
 */
#ifndef QMM_AVX_VNNI_ATTN_H
#define QMM_AVX_VNNI_ATTN_H

#include "attention.h"

void qmm_qs8_attn_pack_kv__avxvnni(const qmm_attn_call *c, const void *k, const void *v, void *kv); /* pack_kv_fn */
void qmm_qs8_attn_pack_q__avxvnni(const qmm_attn_call *c, const void *q, void *Q, float *sq);       /* pack_q_fn */
void qmm_qs8_attn_qk_ukernel_6x32c4__avxvnni(int rows, const void *Q, const float *sq, const void *kblk, int64_t D,
                                              float *S); /* qk_fn */
void qmm_qu8_qs8_attn_pv_ukernel_6x16c4__avxvnni(int rows, const void *P, const float *ps, const float *alpha,
                                                  const void *vblk, int64_t D, float *O, void *ws); /* pv_fn */

/* The engine's row of the contract: kernels, sizes, the frame's u8 softmax. Where the compiler
 * lacks -mavxvnni, every kernel pointer is NULL (the engine is then not built). */
extern const qmm_attn_ukernels qmm_avx_vnni_attn_ukernels;
/* NULL, or the first reason it refuses c: mode int8 only */
const char *qmm_avx_vnni_attn_admit(const qmm_attn_call *c, char *why, size_t n);

#endif /* QMM_AVX_VNNI_ATTN_H */
