/*
 * amx_regime.h — the AMX engines' decisions per call class, plain C (amx_regime.c: callable on
 * any CPU): the blocking in force, their linear rows' finalize (amx_int8: the regime's
 * descriptor; amx_bf16: its float driver descriptor for the class) and their tuning hook; and
 * what their kernel files hand it, each descriptor's fixed part (its kernels and tile shape).
 *
 * One source, two builds (amx_kernel.h): the emulated build (-DQMM_AMX_EMULATE) gives every
 * external symbol the suffix _emu and reads its blocking from qmm_amx_blocking_emu.
 */
#ifndef QMM_AMX_REGIME_H
#define QMM_AMX_REGIME_H

#include "amx_blocking.h"
#include "qmm_internal.h"

#ifdef QMM_AMX_EMULATE
#define QMM_AMX_SYM(x) x##_emu
#else
#define QMM_AMX_SYM(x) x
#endif

/* The blocking in force (amx_blocking.h): the defaults with QMM_AMX_BLOCKING applied (read once
 * per process; invalid: the defaults). The emulated build returns qmm_amx_blocking_emu instead,
 * which tests set to small blocks so that every loop of every regime runs on small shapes. */
qmm_amx_blocking QMM_AMX_SYM(qmm_amx_blocking_now)(void);
#ifdef QMM_AMX_EMULATE
extern qmm_amx_blocking qmm_amx_blocking_emu;
extern int qmm_amx_last_regime_emu; /* the regime amx_int8's finalize last chose (tests) */
#define QMM_AMX_NOTE_REGIME(r) (qmm_amx_last_regime_emu = (int)(r))
#else
#define QMM_AMX_NOTE_REGIME(r) ((void)0)
#endif

/* The fixed part of each engine's descriptor, defined beside its kernels (all zero when the
 * compiler could not build them): amx_int8's qmm_i8_engine without its blocking (mc, nc, kc,
 * whole_k_m), of its decode regime (its tile streams B ahead) and of the others; amx_bf16's
 * qmm_fgemm without its nr and kc (nor the buffer sizes they give). */
extern const struct qmm_i8_engine QMM_AMX_SYM(qmm_amx_int8_kernels);
extern const struct qmm_i8_engine QMM_AMX_SYM(qmm_amx_int8_kernels_decode);
extern const struct qmm_fgemm QMM_AMX_SYM(qmm_amx_bf16_kernels);

/* The linear rows' finalize (qmm_op_row): amx_int8's descriptor of the regime of the call's class
 * (decode, panel or blocked by amx_blocking.h's rule; named so), amx_bf16's for its block width
 * (N, M and the threads; named ""). desc NULL where the engine was not built (or, amx_bf16, its
 * descriptor could not be allocated). */
qmm_final QMM_AMX_SYM(qmm_amx_int8_finalize)(const void *call, int n_threads);
qmm_final QMM_AMX_SYM(qmm_amx_bf16_finalize)(const void *call, int n_threads);

/* The AMX blocking in force, "kc=..,nc=..,mc=..,small_m=..,panel_a=..,min_m=.."; an error when
 * QMM_AMX_BLOCKING is invalid (the engines then use the defaults, which buf shows). */
qmm_status QMM_AMX_SYM(qmm_amx_tuning)(char *buf, size_t size);

#endif /* QMM_AMX_REGIME_H */
