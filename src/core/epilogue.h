/*
 * epilogue.h — the int8 epilogue in scalar C (SPEC §1 step 5, §1a; numerics.h's definitions):
 * the reference engine's, the tails of the vector ones (simd_avx512.h qmm_z_epilogue16,
 * simd_avx2.h qmm_y_epilogue8, which give the same bits) and qmm_linear_epilogue's.
 *
 * For one output y[r][n] of call c from acc = Σ_k q[r][k]·W[n][k] (exact int32) and the token
 * scale s_r: an I32 output stores acc; a float output stores, rounded to c->y_dtype,
 *   fused    v = ((float)acc · s_r) · scale[n] + bias[n]            (c->epilogue FUSED)
 *   kitchen  v = (float)acc · (s_r · scale[n]); with a bias v = T(v) + T(bias[n])   (KITCHEN)
 * then with c->residual v = fmaf(T(v), residual_scale[n], residual[r][n]); y = T(v). It reads
 * c->w's scale and bias, and writes y[r·ldy + n] only.
 */
#ifndef QMM_EPILOGUE_H
#define QMM_EPILOGUE_H

#include "qmm_internal.h"

void qmm_epilogue_store_ref(const qmm_call *c, int32_t acc, int64_t r, int64_t n, float s_r);

/* The epilogue on a block of accumulators: rows [r0, r0 + rows) × cols [n0, n0 + cols) of the
 * output of c, acc [rows][ldacc] holding those columns from index 0; s: the scales of rows
 * r0... (qmm_epilogue_store_ref per element). */
void qmm_epilogue_block_ref(const qmm_call *c, const int32_t *acc, int64_t ldacc, int64_t r0, int64_t rows,
                            int64_t n0, int64_t cols, const float *s);

#endif /* QMM_EPILOGUE_H */
