/*
 * borrow.c — the view a call runs on for a borrowed int8 weight (qmm_weight_borrow_int8): the
 * handle holds only the caller's pointers, so every call reads the caller's memory as it is
 * then. The view is a copy of the handle on the caller's stack whose scale [N] and bias [N] are
 * fp32, read from the caller's scales (one repeated, or N) and bias (f32/f16/bf16 widened
 * exactly) into the context's QMM_SCRATCH_WEIGHT; i8.data/colsum stay NULL and every engine
 * reads the caller's rows (view->borrow) itself, packing per call what its kernels need
 * (int8_gemm.c, amx_int8.c, float_gemm.c). Nothing is shared between calls or
 * contexts: two threads calling one borrowed weight, each with its own context, never race.
 */
#include "borrow.h"

#include "numerics.h"


qmm_status qmm_weight_for_call(qmm_context *ctx, const qmm_weight *w, qmm_weight *view, const qmm_weight **out) {
    if (!w->borrowed) {
        *out = w;
        return QMM_OK;
    }
    const int64_t N = w->N;
    void *buf;
    QMM_FORWARD_IF_ERROR(qmm_context_scratch(ctx, QMM_SCRATCH_WEIGHT, (size_t)N * 8, &buf));
    qmm_weight_copy_plain(view, w);
    float *scale = buf, *bias = scale + N;
    for (int64_t n = 0; n < N; n++) scale[n] = w->borrow.scale[w->borrow.n_scale == 1 ? 0 : n];
    view->scale = scale;
    if (w->borrow.bias) {
        for (int64_t n = 0; n < N; n++) bias[n] = qmm_load_f(w->borrow.bias, w->borrow.bias_dtype, n);
        view->bias = bias;
    }
    *out = view;
    return QMM_OK;
}
