/*
 * prepass.h — the activation pre-pass shared by every int8 engine (SPEC §1 steps 1–3), one
 * fused pass per row: input_act → convrot rotation → amax → quantize, writing the A operand
 * q [M][ldq] (row-major int8, columns K..ldq zero) that the VNNI and AMX kernels read directly,
 * and the fp32 per-token scales s [M]. The row kernel is chosen once per call: the AVX-512
 * one when the CPU has it and the ISA cap allows, else the AVX2 one (same conditions), else the
 * scalar one; all give the same bits (numerics.h).
 */
#ifndef QMM_PREPASS_H
#define QMM_PREPASS_H

#include "qmm_internal.h"

/* One row. x: K_in values of dtype t; s_in: a given scale (NULL: compute it); q: qcols bytes
 * (K values, then zeros); s_out: the scale used; tmp: K floats of scratch (64-byte aligned). */
typedef void (*qmm_prepass_row_fn)(const void *x, qmm_dtype t, int64_t K, qmm_act act, int gs,
                                   const float *s_in, int8_t *q, int64_t qcols, float *s_out, float *tmp);
/* amax only: the row's max |a| after act + rotation (NaN if any NaN). */
typedef float (*qmm_amax_row_fn)(const void *x, qmm_dtype t, int64_t K, qmm_act act, int gs, float *tmp);

void  qmm_prepass_row_ref(const void *x, qmm_dtype t, int64_t K, qmm_act act, int gs, const float *s_in,
                          int8_t *q, int64_t qcols, float *s_out, float *tmp);
float qmm_amax_row_ref(const void *x, qmm_dtype t, int64_t K, qmm_act act, int gs, float *tmp);

/* AVX-512 versions (prepass_avx512.c), same bits; NULL-safe selection below. */
extern const qmm_prepass_row_fn qmm_prepass_row_avx512_ptr;
extern const qmm_amax_row_fn qmm_amax_row_avx512_ptr;
/* AVX2 + FMA + F16C versions (prepass_avx2.c), same bits; used when AVX-512 is absent or capped. */
extern const qmm_prepass_row_fn qmm_prepass_row_avx2_ptr;
extern const qmm_amax_row_fn qmm_amax_row_avx2_ptr;

/* The whole call, threaded over rows: q [M][ldq], s [M]. ref != 0 forces the scalar kernel. */
qmm_status qmm_prepass(qmm_context *ctx, const qmm_call *c, int8_t *q, int64_t ldq, float *s, int ref);
qmm_status qmm_prepass_amax(qmm_context *ctx, const qmm_call *c, float *amax, int ref);

/* The int8 epilogue of one output y[r][n] of call c (numerics.h: fused or kitchen form by
 * c->epilogue, bias, residual; I32 output stores acc). acc: the exact sum Σ q·w. The vector forms
 * (simd_avx512.h qmm_z_epilogue16, simd_avx2.h qmm_y_epilogue8) give the same bits. */
void qmm_epilogue_store_ref(const qmm_call *c, int32_t acc, int64_t r, int64_t n, float s_r);

/* The epilogue on a block of accumulators: rows [r0, r0 + rows) × cols [n0, n0 + cols) of the
 * output of c, acc [rows][ldacc] holding those columns from index 0; s: the scales of rows
 * r0... Scalar (qmm_epilogue_store_ref per element). */
void qmm_epilogue_block_ref(const qmm_call *c, const int32_t *acc, int64_t ldacc, int64_t r0, int64_t rows,
                            int64_t n0, int64_t cols, const float *s);

#endif /* QMM_PREPASS_H */
