/*
 * ref.c — the scalar reference engine: SPEC §1 exactly, operation by operation, in plain C.
 * It is the yardstick of every test and runs only when asked for by name
 * (args.engine = QMM_ENGINE_REF); dispatch never chooses it.
 *
 *   int8 weight:  q, s = prepass_ref(x)            q [M][Kp] int8, s [M] fp32
 *                 acc[r][n] = Σ_k q[r][k] · W[n][k]  exact int32 (W read from the n16k4 packing,
 *                                                      or a borrowed weight's own rows)
 *                 y[r][n] = epilogue(acc, s[r], w_scale[n], bias[n])
 *   float weight: a = act(x) (rounded to x's dtype); y[r][n] = Σ_k a[r][k] · W[n][k] + bias[n]
 *                 summed in fp64, rounded once to fp32 then to y's dtype.
 */
#include "epilogue.h"
#include "numerics.h"
#include "prepass.h"
#include "qmm_internal.h"

#include <stdlib.h>

static const char *ref_admit(const void *call, char *why, size_t n) {
    const qmm_call *c = call;
    if (c->w->is_int8) {
        if (c->w->convrot_gs && c->K % c->w->convrot_gs) return qmm_admit_common_int8(c, why, n);
        return NULL;
    }
    return qmm_admit_common_float(c, why, n);
}

static qmm_status ref_run_int8(qmm_context *ctx, const qmm_call *c) {
    const qmm_weight *w = c->w;
    const int64_t M = c->M, N = c->N, K = c->K, Kp = w->i8.Kp;
    void *buf, *accbuf;
    QMM_FORWARD_IF_ERROR(qmm_context_scratch(ctx, QMM_SCRATCH_ACT, (size_t)(M * Kp) + (size_t)M * 4, &buf));
    QMM_FORWARD_IF_ERROR(qmm_context_scratch(ctx, QMM_SCRATCH_ENGINE, (size_t)N * sizeof(int32_t), &accbuf));
    int8_t *q = buf;                     /* [M][Kp] */
    float *s = (float *)(q + M * Kp);    /* [M] */
    int32_t *acc = accbuf;               /* [N], one row at a time */
    QMM_FORWARD_IF_ERROR(qmm_prepass(ctx, c, q, Kp, s, 1));
    for (int64_t r = 0; r < M && !qmm_cancelled(ctx); r++) { /* qmm_cancel: between rows */
        for (int64_t n = 0; n < N; n++) {
            /* summed mod 2^32 (defined behaviour), as the VNNI instructions do; exact when
             * K <= QMM_MAX_INT8_K, the limit the fast engines admit */
            uint32_t sum = 0;
            for (int64_t k = 0; k < K; k++)
                sum += (uint32_t)((int32_t)q[r * Kp + k] * (int32_t)qmm_weight_i8_at(w, n, k));
            acc[n] = (int32_t)sum;
        }
        qmm_epilogue_block_ref(c, acc, N, r, 1, 0, N, &s[r]);
        if (c->token_scales) c->token_scales[r] = s[r];
    }
    return qmm_cancel_status(ctx);
}

static qmm_status ref_run_float(qmm_context *ctx, const qmm_call *c) {
    const qmm_weight *w = c->w;
    const int64_t M = c->M, N = c->N, K = c->K;
    void *buf;
    QMM_FORWARD_IF_ERROR(qmm_context_scratch(ctx, QMM_SCRATCH_PREPASS, (size_t)K * sizeof(float), &buf));
    float *a = buf; /* [K] one row of act(x) */
    size_t xs = qmm_dtype_size(c->x_dtype);
    for (int64_t r = 0; r < M && !qmm_cancelled(ctx); r++) { /* qmm_cancel: between rows */
        qmm_ref_act_rotate_row((const char *)c->x + (size_t)(r * c->ldx) * xs, c->x_dtype, K, c->act, 0, a);
        for (int64_t n = 0; n < N; n++) {
            double sum = 0.0;
            for (int64_t k = 0; k < K; k++) sum += (double)a[k] * (double)qmm_packed_f_at(&w->fp, n, k);
            float v = (float)sum + (w->bias ? w->bias[n] : 0.0f);
            qmm_store_f(c->y, c->y_dtype, r * c->ldy + n, v);
        }
    }
    return qmm_cancel_status(ctx);
}

static qmm_status ref_run(qmm_context *ctx, const void *call) {
    const qmm_call *c = call;
    return c->w->is_int8 ? ref_run_int8(ctx, c) : ref_run_float(ctx, c);
}

/* attention (ref_attention.c) */
const char *qmm_ref_attn_admit(const void *call, char *why, size_t n);
qmm_status qmm_ref_attn_run(qmm_context *ctx, const void *call);

const qmm_engine_ops qmm_ref_ops = {
    .built = 1,
    .op[QMM_OP_LINEAR] = {.admit = ref_admit, .run = ref_run},
    .op[QMM_OP_ATTENTION] = {.admit = qmm_ref_attn_admit, .run = qmm_ref_attn_run}, /* its own f64 loop */
};
