/*
 * prepass.c — the scalar activation pre-pass row (the reference numerics of SPEC §1 steps 1–3,
 * numerics.h) and the threaded driver (contract in prepass.h) that runs the best row kernel over
 * all rows and, per row while it is in L1, the extras the int8 driver asks for: the row sums
 * and -128 flags, the packed copy for the one-pass regime; per group of rows, once all of it is
 * written, the caller's own copy (group_fill).
 */
#include "prepass.h"

#include "numerics.h"

#include <stdatomic.h>
#include <string.h>

void qmm_prepass_row_ref(const void *x, qmm_dtype t, int64_t K, qmm_act act, int gs, const float *s_in,
                         int8_t *q, int64_t qcols, uint8_t flip, float *s_out, float *tmp) {
    qmm_ref_act_rotate_row(x, t, K, act, gs, tmp);
    float s = s_in ? *s_in : qmm_scale_of(qmm_amax_f32(tmp, K));
    qmm_ref_quantize_row(tmp, K, t, s, q);
    for (int64_t k = 0; k < K && flip; k++) q[k] = (int8_t)((uint8_t)q[k] ^ flip);
    if (qcols > K) memset(q + K, flip, (size_t)(qcols - K));
    *s_out = s;
}

float qmm_amax_row_ref(const void *x, qmm_dtype t, int64_t K, qmm_act act, int gs, float *tmp) {
    qmm_ref_act_rotate_row(x, t, K, act, gs, tmp);
    return qmm_amax_f32(tmp, K);
}

typedef struct {
    const qmm_call *c;
    const qmm_prepass_out *o; /* NULL: amax only */
    float *amax;
    float *tmp;               /* [threads][Kt] */
    int64_t Kt;
    qmm_prepass_row_fn row;
    qmm_amax_row_fn amax_row;
    _Atomic int64_t *left;    /* group_fill: [groups] rows of each group not written yet */
} prepass_job;

/* Σ q and whether q holds -128, over the row's first n bytes (s8) */
static void row_sum(const int8_t *q, int64_t n, int32_t *sum, uint8_t *neg) {
    int32_t s = 0;
    int m = 0;
    for (int64_t k = 0; k < n; k++) {
        s += q[k];
        m |= q[k] == -128;
    }
    *sum = s;
    *neg = (uint8_t)m;
}

static void prepass_rows(int64_t r0, int64_t r1, int thread, void *arg) {
    const prepass_job *j = arg;
    const qmm_call *c = j->c;
    const qmm_prepass_out *o = j->o;
    const size_t es = qmm_dtype_size(c->x_dtype);
    float *tmp = j->tmp + (int64_t)thread * j->Kt;
    for (int64_t r = r0; r < r1; r++) {
        const void *xr = (const char *)c->x + (size_t)(r * c->ldx) * es;
        if (!o) {
            j->amax[r] = j->amax_row(xr, c->x_dtype, c->K, c->act, c->w->convrot_gs, tmp);
            continue;
        }
        const float *sin = c->token_scales_in ? &c->token_scales_in[r] : NULL;
        int8_t *q = o->q + r * o->ldq;
        j->row(xr, c->x_dtype, c->K, c->act, c->w->convrot_gs, sin, q, o->ldq, o->flip, &o->s[r], tmp);
        if (o->qsum) row_sum(q, c->K, &o->qsum[r], &o->qneg128[r]);
        if (o->ap)
            for (int64_t k = 0; k < o->kq; k++) memcpy(o->ap + (k * o->wrows + r) * 4, q + k * 4, 4);
    }
    /* the groups this range touches: the thread that writes a group's last rows fills it (the
     * acquire-release count makes the other threads' rows of it visible) */
    if (o && o->group_fill)
        for (int64_t g0 = r0 / o->group_rows * o->group_rows; g0 < r1; g0 += o->group_rows) {
            const int64_t g1 = g0 + o->group_rows < c->M ? g0 + o->group_rows : c->M;
            const int64_t n = (g1 < r1 ? g1 : r1) - (g0 > r0 ? g0 : r0);
            if (atomic_fetch_sub_explicit(&j->left[g0 / o->group_rows], n, memory_order_acq_rel) == n)
                o->group_fill(o->group_arg, g0, g1);
        }
    if (o && o->ap && r1 == c->M) /* the packed rows past M: the value of q = 0 */
        for (int64_t k = 0; k < o->kq; k++)
            memset(o->ap + (k * o->wrows + c->M) * 4, o->flip, (size_t)(o->wrows - c->M) * 4);
}

static int use_avx512(const qmm_context *ctx) {
    return qmm_prepass_row_avx512_ptr && qmm_core_simd(ctx) == QMM_ISA_AVX512;
}

static int use_avx2(const qmm_context *ctx) {
    return qmm_prepass_row_avx2_ptr && qmm_core_simd(ctx) >= QMM_ISA_AVX2;
}

static qmm_status run_prepass(qmm_context *ctx, const qmm_call *c, const qmm_prepass_out *o, float *amax, int ref) {
    QMM_RETURN_IF(o && ((o->qsum && (o->flip || !o->qneg128)) || (o->ap && (o->wrows < c->M || o->kq * 4 > o->ldq))),
                  QMM_ERR_INTERNAL, "layer %s: pre-pass asked for an inconsistent output", c->w->name);
    prepass_job j;
    memset(&j, 0, sizeof j);
    j.c = c;
    j.o = o;
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
    const int64_t groups = o && o->group_fill ? (c->M + o->group_rows - 1) / o->group_rows : 0;
    void *tmp;
    QMM_FORWARD_IF_ERROR(qmm_context_scratch(ctx, QMM_SCRATCH_PREPASS,
                                             (size_t)(nt * j.Kt) * sizeof(float) + (size_t)groups * sizeof(int64_t), &tmp));
    j.tmp = tmp;
    j.left = (_Atomic int64_t *)(j.tmp + nt * j.Kt); /* (Kt: a multiple of 16 floats) */
    for (int64_t g = 0; g < groups; g++)
        atomic_init(&j.left[g], (g + 1) * o->group_rows < c->M ? o->group_rows : c->M - g * o->group_rows);
    /* whole rows per range; the result does not depend on the split */
    qmm_pool_run_rows(ctx->pool, c->M, 1, prepass_rows, &j);
    return QMM_OK;
}

qmm_status qmm_prepass_to(qmm_context *ctx, const qmm_call *c, const qmm_prepass_out *o, int ref) {
    return run_prepass(ctx, c, o, NULL, ref);
}

qmm_status qmm_prepass(qmm_context *ctx, const qmm_call *c, int8_t *q, int64_t ldq, float *s, int ref) {
    const qmm_prepass_out o = {.q = q, .ldq = ldq, .s = s};
    return run_prepass(ctx, c, &o, NULL, ref);
}

qmm_status qmm_prepass_amax(qmm_context *ctx, const qmm_call *c, float *amax, int ref) {
    return run_prepass(ctx, c, NULL, amax, ref);
}
