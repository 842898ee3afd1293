/*
 * ref_attention.c — the reference attention (SPEC §10), the yardstick of the attention tests:
 * for each batch, head and query row, in plain C with fp64 sums and no tiling, independent of
 * the attention driver:
 *
 *   s[j]   = scale · Σ_d q[d]·k[j][d]  (+ mask[j] if additive; bool false or j masked: -inf)
 *   m      = max_j s[j];  p[j] = exp(s[j] − m);  out[d] = Σ_j p[j]·v[j][d] / Σ_j p[j]
 *   a row whose every s[j] is -inf gives 0, a row with a NaN s[j] NaN; out rounded once to its dtype.
 *
 * Runs only when asked for by name (dispatch never chooses the reference).
 */
#include "numerics.h"
#include "qmm_internal.h"

#include <math.h>

const char *qmm_ref_attn_admit(const void *call, char *why, size_t n);
qmm_status qmm_ref_attn_run(qmm_context *ctx, const void *call);

const char *qmm_ref_attn_admit(const void *call, char *why, size_t n) {
    const qmm_attn_call *c = call;
    (void)c; (void)why; (void)n;
    return NULL;
}

typedef struct {
    const qmm_attn_call *c;
    double *scores;     /* [T][Skv] */
} ref_job;

static float elem(const void *base, qmm_dtype t, int64_t i) { return qmm_load_f(base, t, i); }

static void ref_row(int64_t row, int64_t n_rows, int thread, void *arg) {
    (void)n_rows;
    const ref_job *j = arg;
    const qmm_attn_call *c = j->c;
    const int64_t s = row % c->S, h = (row / c->S) % c->H, b = row / (c->S * c->H);
    const int64_t hk = h / (c->H / c->Hkv), D = c->D, Skv = c->Skv;
    double *sc = j->scores + (size_t)thread * (size_t)Skv;
    const int64_t q0 = b * c->qs[0] + h * c->qs[1] + s * c->qs[2];
    double m = -INFINITY;
    int nan = 0;
    for (int64_t t = 0; t < Skv; t++) {
        const int64_t k0 = b * c->ks[0] + hk * c->ks[1] + t * c->ks[2];
        double acc = 0;
        for (int64_t d = 0; d < D; d++) acc += (double)elem(c->q, c->q_dtype, q0 + d) * elem(c->k, c->kv_dtype, k0 + d);
        double x = acc * (double)c->scale;
        if (c->mask) {
            const int64_t mi = b * c->ms[0] + h * c->ms[1] + s * c->ms[2] + t * c->ms[3];
            if (c->mask_dtype == QMM_U8) x = ((const uint8_t *)c->mask)[mi] ? x : -INFINITY;
            else x += elem(c->mask, c->mask_dtype, mi);
        }
        sc[t] = x;
        if (x > m) m = x;
        nan |= x != x;
    }
    const int64_t o0 = b * c->os[0] + h * c->os[1] + s * c->os[2];
    if (m == -INFINITY || nan) {
        for (int64_t d = 0; d < D; d++) qmm_store_f(c->out, c->out_dtype, o0 + d, nan ? NAN : 0.0f);
        return;
    }
    double l = 0;
    for (int64_t t = 0; t < Skv; t++) l += (sc[t] = exp(sc[t] - m));
    for (int64_t d = 0; d < D; d++) {
        double acc = 0;
        for (int64_t t = 0; t < Skv; t++)
            acc += sc[t] * elem(c->v, c->kv_dtype, b * c->vs[0] + hk * c->vs[1] + t * c->vs[2] + d);
        qmm_store_f(c->out, c->out_dtype, o0 + d, (float)(acc / l));
    }
}

qmm_status qmm_ref_attn_run(qmm_context *ctx, const void *call) {
    const qmm_attn_call *c = call;
    const int T = qmm_pool_threads(ctx->pool);
    size_t row, bytes;
    QMM_RETURN_IF(!qmm_mul_ok(sizeof(double), (size_t)c->Skv, &row) || row > QMM_ATTN_MAX_SCRATCH ||
                      !qmm_mul_ok(row, (size_t)T, &bytes),
                  QMM_ERR_UNSUPPORTED, "attention (ref): a score row of Skv=%lld keys needs more than 2^40 bytes",
                  (long long)c->Skv);
    void *p;
    QMM_FORWARD_IF_ERROR(qmm_context_scratch(ctx, QMM_SCRATCH_ENGINE, bytes, &p));
    ref_job j = {.c = c, .scores = p};
    qmm_pool_run(ctx->pool, c->B * c->H * c->S, ref_row, &j); /* qmm_cancel: between rows (the pool) */
    return qmm_cancel_status(ctx);
}
