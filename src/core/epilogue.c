/*
 * epilogue.c — the scalar int8 epilogue (contract in epilogue.h; the numbers are numerics.h's
 * qmm_epilogue_f / qmm_epilogue_kitchen_f).
 */
#include "epilogue.h"

#include "numerics.h"

void qmm_epilogue_store_ref(const qmm_call *c, int32_t acc, int64_t r, int64_t n, float s_r) {
    const qmm_weight *w = c->w;
    const qmm_dtype yt = c->y_dtype;
    if (yt == QMM_I32) {
        ((int32_t *)c->y)[r * c->ldy + n] = acc;
        return;
    }
    float v;
    if (c->epilogue == QMM_EPILOGUE_KITCHEN) {
        v = qmm_epilogue_kitchen_f(acc, s_r, w->scale[n]);
        if (w->bias) v = qmm_round_to(v, yt) + qmm_round_to(w->bias[n], yt);
    } else {
        v = qmm_epilogue_f(acc, s_r, w->scale[n], w->bias ? w->bias[n] : 0.0f);
    }
    if (c->residual)
        v = fmaf(qmm_round_to(v, yt), qmm_load_f(c->residual_scale, yt, n), qmm_load_f(c->residual, yt, r * c->ldr + n));
    qmm_store_f(c->y, yt, r * c->ldy + n, v);
}

void qmm_epilogue_block_ref(const qmm_call *c, const int32_t *acc, int64_t ldacc, int64_t r0, int64_t rows,
                            int64_t n0, int64_t cols, const float *s) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < cols; j++) qmm_epilogue_store_ref(c, acc[r * ldacc + j], r0 + r, n0 + j, s[r]);
}
