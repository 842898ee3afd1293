/*
 * prepass.c — the scalar activation pre-pass and epilogue (the reference numerics of SPEC §1),
 * and the threaded driver that runs the best row kernel over all rows.
 */
#include "prepass.h"

#include "numerics.h"

#include <string.h>

void qmm_prepass_row_ref(const void *x, qmm_dtype t, int64_t K, qmm_act act, int gs, const float *s_in,
                         int8_t *q, int64_t qcols, float *s_out, float *tmp) {
    qmm_ref_act_rotate_row(x, t, K, act, gs, tmp);
    float s = s_in ? *s_in : qmm_scale_of(qmm_amax_f32(tmp, K));
    qmm_ref_quantize_row(tmp, K, t, s, q);
    if (qcols > K) memset(q + K, 0, (size_t)(qcols - K));
    *s_out = s;
}

float qmm_amax_row_ref(const void *x, qmm_dtype t, int64_t K, qmm_act act, int gs, float *tmp) {
    qmm_ref_act_rotate_row(x, t, K, act, gs, tmp);
    return qmm_amax_f32(tmp, K);
}

typedef struct {
    const qmm_call *c;
    int8_t *q;
    int64_t ldq;
    float *s;
    float *amax;
    float *tmp;       /* [threads][Kt] */
    int64_t Kt;
    int64_t rows_per_task;
    qmm_prepass_row_fn row;
    qmm_amax_row_fn amax_row;
} prepass_job;

static void prepass_task(int64_t task, int64_t n_tasks, int thread, void *arg) {
    (void)n_tasks;
    prepass_job *j = arg;
    const qmm_call *c = j->c;
    size_t es = qmm_dtype_size(c->x_dtype);
    int64_t r0 = task * j->rows_per_task, r1 = r0 + j->rows_per_task;
    if (r1 > c->M) r1 = c->M;
    float *tmp = j->tmp + (int64_t)thread * j->Kt;
    for (int64_t r = r0; r < r1; r++) {
        const void *xr = (const char *)c->x + (size_t)(r * c->ldx) * es;
        if (j->amax) {
            j->amax[r] = j->amax_row(xr, c->x_dtype, c->K, c->act, c->w->convrot_gs, tmp);
        } else {
            const float *sin = c->token_scales_in ? &c->token_scales_in[r] : NULL;
            j->row(xr, c->x_dtype, c->K, c->act, c->w->convrot_gs, sin, j->q + r * j->ldq, j->ldq, &j->s[r], tmp);
        }
    }
}

static int use_avx512(const qmm_context *ctx) {
    return qmm_prepass_row_avx512_ptr && qmm_core_simd(ctx) == QMM_ISA_AVX512;
}

static int use_avx2(const qmm_context *ctx) {
    return qmm_prepass_row_avx2_ptr && qmm_core_simd(ctx) >= QMM_ISA_AVX2;
}

static qmm_status run_prepass(qmm_context *ctx, const qmm_call *c, int8_t *q, int64_t ldq, float *s, float *amax,
                              int ref) {
    prepass_job j;
    memset(&j, 0, sizeof j);
    j.c = c;
    j.q = q;
    j.ldq = ldq;
    j.s = s;
    j.amax = amax;
    j.Kt = qmm_round_up(c->K, 16);
    int fast = !ref && use_avx512(ctx);
    j.row = fast ? qmm_prepass_row_avx512_ptr : qmm_prepass_row_ref;
    j.amax_row = fast && qmm_amax_row_avx512_ptr ? qmm_amax_row_avx512_ptr : qmm_amax_row_ref;
    if (!ref && !fast && use_avx2(ctx)) {
        j.row = qmm_prepass_row_avx2_ptr;
        j.amax_row = qmm_amax_row_avx2_ptr ? qmm_amax_row_avx2_ptr : qmm_amax_row_ref;
    }
    int nt = ctx->n_threads;
    void *tmp;
    QMM_FORWARD_IF_ERROR(qmm_context_scratch(ctx, QMM_SCRATCH_PREPASS, (size_t)(nt * j.Kt) * sizeof(float), &tmp));
    j.tmp = tmp;
    /* a few tasks per thread, whole rows each; the result does not depend on the split */
    int64_t tasks = (int64_t)nt * 4;
    if (tasks > c->M) tasks = c->M;
    j.rows_per_task = (c->M + tasks - 1) / tasks;
    tasks = (c->M + j.rows_per_task - 1) / j.rows_per_task;
    qmm_pool_run(ctx->pool, tasks, prepass_task, &j);
    return QMM_OK;
}

qmm_status qmm_prepass(qmm_context *ctx, const qmm_call *c, int8_t *q, int64_t ldq, float *s, int ref) {
    return run_prepass(ctx, c, q, ldq, s, NULL, ref);
}

qmm_status qmm_prepass_amax(qmm_context *ctx, const qmm_call *c, float *amax, int ref) {
    return run_prepass(ctx, c, NULL, 0, NULL, amax, ref);
}

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
