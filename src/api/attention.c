/*
 * attention.c — the public attention calls (qmm.h, SPEC §10), attention's own part:
 * qmm_attention_args_default, the validation of a call into a qmm_attn_call (every error names
 * the argument), its qmm_op_class (dispatch.h: float engines are the fallback of mode int8; its
 * run is the attention driver on the engine's ukernels, or the reference's own run), qmm_attention
 * (through the skeleton, api/op.c: named engine or AUTO, fallback, log, counters) and
 * qmm_attention_plan.
 */
#include "attention.h"
#include "geometry.h"
#include "op.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

qmm_attention_args qmm_attention_args_default(void) {
    qmm_attention_args a;
    memset(&a, 0, sizeof a);
    a.q_dtype = a.kv_dtype = a.out_dtype = QMM_F32;
    a.mask_dtype = QMM_U8;
    a.mode = QMM_ATTN_BEST;
    a.engine = QMM_ENGINE_AUTO;
    return a;
}

static qmm_status check_tensor(const char *name, const void *p, qmm_dtype t, const int64_t *s, int nd) {
    QMM_RETURN_IF(!p, QMM_ERR_INVALID_ARGUMENT, "attention: %s is NULL", name);
    QMM_RETURN_IF(!qmm_dtype_is_float(t), QMM_ERR_INVALID_ARGUMENT, "attention: %s dtype %s: needs f32, f16 or bf16",
                  name, qmm_dtype_name(t));
    for (int i = 0; i < nd; i++)
        QMM_RETURN_IF(s[i] < 0, QMM_ERR_INVALID_ARGUMENT, "attention: %s stride[%d] = %lld is negative", name, i,
                      (long long)s[i]);
    return QMM_OK;
}

/* args → c, every rule of qmm.h checked; need_data: the pointers must be given (not for a plan) */
static qmm_status make_attn_call(const qmm_attention_args *a, int need_data, qmm_attn_call *c) {
    QMM_RETURN_IF(!a, QMM_ERR_INVALID_ARGUMENT, "attention: args is NULL");
    const int64_t dims[6] = {a->B, a->H, a->Hkv, a->S, a->Skv, a->D};
    static const char *const names[6] = {"B", "H", "Hkv", "S", "Skv", "D"};
    for (int i = 0; i < 6; i++)
        QMM_RETURN_IF(dims[i] < 1, QMM_ERR_INVALID_ARGUMENT, "attention: %s = %lld: must be >= 1", names[i],
                      (long long)dims[i]);
    QMM_RETURN_IF(a->D > QMM_ATTN_MAX_D, QMM_ERR_UNSUPPORTED, "attention: D = %lld > %d", (long long)a->D, QMM_ATTN_MAX_D);
    QMM_RETURN_IF(a->H % a->Hkv != 0, QMM_ERR_INVALID_ARGUMENT, "attention: H = %lld is not a multiple of Hkv = %lld",
                  (long long)a->H, (long long)a->Hkv);
    QMM_RETURN_IF(!isfinite(a->scale), QMM_ERR_INVALID_ARGUMENT, "attention: scale %g is not finite", (double)a->scale);
    QMM_RETURN_IF((unsigned)a->mode >= QMM_ATTN_MODE_COUNT, QMM_ERR_INVALID_ARGUMENT, "attention: mode %d unknown",
                  (int)a->mode);
    memset(c, 0, sizeof *c);
    c->B = a->B; c->H = a->H; c->Hkv = a->Hkv; c->S = a->S; c->Skv = a->Skv; c->D = a->D;
    c->q = a->q; c->q_dtype = a->q_dtype;
    c->k = a->k; c->v = a->v; c->kv_dtype = a->kv_dtype;
    c->out = a->out; c->out_dtype = a->out_dtype;
    memcpy(c->qs, a->q_stride, sizeof c->qs);
    memcpy(c->ks, a->k_stride, sizeof c->ks);
    memcpy(c->vs, a->v_stride, sizeof c->vs);
    memcpy(c->os, a->out_stride, sizeof c->os);
    c->scale = a->scale != 0.0f ? a->scale : (float)(1.0 / sqrt((double)a->D));
    c->mask = a->mask; c->mask_dtype = a->mask_dtype;
    memcpy(c->ms, a->mask_stride, sizeof c->ms);
    c->mode = a->mode;
    c->by_name = a->engine != QMM_ENGINE_AUTO;
    /* dtypes and strides (checked with or without data: a plan reads the dtypes) */
    static const void *const placeholder = &placeholder;
    const void *q = need_data ? a->q : placeholder, *k = need_data ? a->k : placeholder,
               *v = need_data ? a->v : placeholder, *o = need_data ? a->out : placeholder;
    QMM_FORWARD_IF_ERROR(check_tensor("q", q, a->q_dtype, a->q_stride, 3));
    QMM_FORWARD_IF_ERROR(check_tensor("k", k, a->kv_dtype, a->k_stride, 3));
    QMM_FORWARD_IF_ERROR(check_tensor("v", v, a->kv_dtype, a->v_stride, 3));
    QMM_FORWARD_IF_ERROR(check_tensor("out", o, a->out_dtype, a->out_stride, 3));
    if (a->mask) {
        QMM_RETURN_IF(a->mask_dtype != QMM_U8 && !qmm_dtype_is_float(a->mask_dtype), QMM_ERR_INVALID_ARGUMENT,
                      "attention: mask dtype %s: needs u8 (bool) or f32, f16, bf16 (additive)", qmm_dtype_name(a->mask_dtype));
        for (int i = 0; i < 4; i++)
            QMM_RETURN_IF(a->mask_stride[i] < 0, QMM_ERR_INVALID_ARGUMENT, "attention: mask stride[%d] = %lld is negative",
                          i, (long long)a->mask_stride[i]);
    }
    if (!need_data) return QMM_OK; /* a plan reads the sizes, dtypes and mode only */
    const int64_t nq[3] = {a->B, a->H, a->S}, nk[3] = {a->B, a->Hkv, a->Skv};
    const int64_t qb = qmm_extent_bytes(nq, a->q_stride, 3, a->D, qmm_dtype_size(a->q_dtype));
    const int64_t kb = qmm_extent_bytes(nk, a->k_stride, 3, a->D, qmm_dtype_size(a->kv_dtype));
    const int64_t vb = qmm_extent_bytes(nk, a->v_stride, 3, a->D, qmm_dtype_size(a->kv_dtype));
    const int64_t ob = qmm_extent_bytes(nq, a->out_stride, 3, a->D, qmm_dtype_size(a->out_dtype));
    QMM_RETURN_IF(!qb || !kb || !vb || !ob, QMM_ERR_UNSUPPORTED, "attention: %s's extent overflows int64",
                  !qb ? "q" : !kb ? "k" : !vb ? "v" : "out");
    QMM_RETURN_IF(!qmm_elements_distinct(nq, a->out_stride, a->D), QMM_ERR_INVALID_ARGUMENT,
                  "attention: out strides {%lld, %lld, %lld} make elements share memory", (long long)a->out_stride[0],
                  (long long)a->out_stride[1], (long long)a->out_stride[2]);
    int64_t mb = 0;
    if (a->mask) {
        const int64_t nm[3] = {a->B, a->H, a->S};
        int64_t t;
        mb = qmm_extent_bytes(nm, a->mask_stride, 3, 1, 1);
        QMM_RETURN_IF(!mb || __builtin_mul_overflow(a->Skv - 1, a->mask_stride[3], &t) ||
                          __builtin_add_overflow(mb, t, &mb) ||
                          __builtin_mul_overflow(mb, (int64_t)qmm_dtype_size(a->mask_dtype), &mb),
                      QMM_ERR_UNSUPPORTED, "attention: mask's extent overflows int64");
    }
    {
        QMM_RETURN_IF(qmm_bytes_overlap(a->out, ob, a->q, qb) || qmm_bytes_overlap(a->out, ob, a->k, kb) || qmm_bytes_overlap(a->out, ob, a->v, vb) ||
                          (a->mask && qmm_bytes_overlap(a->out, ob, a->mask, mb)),
                      QMM_ERR_INVALID_ARGUMENT, "attention: out overlaps %s", qmm_bytes_overlap(a->out, ob, a->q, qb) ? "q"
                      : qmm_bytes_overlap(a->out, ob, a->k, kb) ? "k" : qmm_bytes_overlap(a->out, ob, a->v, vb) ? "v" : "mask");
    }
    return QMM_OK;
}

static void attn_subject(const void *call, char *buf, size_t n) {
    const qmm_attn_call *c = call;
    snprintf(buf, n, "attention B=%lld H=%lld Hkv=%lld S=%lld Skv=%lld D=%lld", (long long)c->B, (long long)c->H,
             (long long)c->Hkv, (long long)c->S, (long long)c->Skv, (long long)c->D);
}

static int attn_float_fallback(const void *call) { return ((const qmm_attn_call *)call)->mode == QMM_ATTN_INT8; }

/* the engine's ukernels by their descriptor's name (it starts with the engine's) */
static const char *attn_work_name(const qmm_engine *e) {
    const qmm_attn_ukernels *u = e->ops->op[QMM_OP_ATTENTION].desc;
    return u ? u->name : e->name;
}

/* The attention's qmm_op_class.run: the driver on the row's ukernels (desc: its descriptor, the
 * same for every call), or the row's own run (the reference's f64 loop). */
static qmm_status attn_run(qmm_context *ctx, const qmm_engine *e, const void *desc, void *call) {
    const qmm_attn_call *c = call;
    const qmm_op_row *row = &e->ops->op[QMM_OP_ATTENTION];
    const int64_t n[3] = {c->B, c->H, c->S};
    qmm_advise_huge(c->out, (size_t)qmm_extent_bytes(n, c->os, 3, c->D, qmm_dtype_size(c->out_dtype)));
    if (desc) return qmm_attention_run(ctx, c, desc);
    if (row->run) return row->run(ctx, c);
    return qmm_fail(QMM_ERR_INTERNAL, "attention: engine %s not built", e->name);
}

/* mode int8 falls back to mode best on a float engine; not cached; logged at every fallback */
static const qmm_op_class k_attention = {
    .op = QMM_OP_ATTENTION, .float_fallback = attn_float_fallback, .subject = attn_subject,
    .fallback_from = ", mode int8", .fallback_runs = "mode best", .work_name = attn_work_name, .run = attn_run,
};

qmm_status qmm_attention_plan(qmm_context *ctx, const qmm_attention_args *args, qmm_plan_info *out) {
    QMM_RETURN_IF(!ctx || !out, QMM_ERR_INVALID_ARGUMENT, "qmm_attention_plan: %s is NULL", !ctx ? "ctx" : "out");
    qmm_attn_call c;
    QMM_FORWARD_IF_ERROR(make_attn_call(args, 0, &c));
    qmm_plan_op(ctx, &k_attention, &c, out);
    if (args->engine != QMM_ENGINE_AUTO) { /* the named engine decides, as in qmm_attention */
        const qmm_engine *e = qmm_engine_get(args->engine);
        QMM_RETURN_IF(!e, QMM_ERR_INVALID_ARGUMENT, "attention: engine %d unknown", (int)args->engine);
        char why[QMM_REASON_MAX];
        qmm_status st;
        const char *r = qmm_op_named_verdict(ctx, &k_attention, e, &c, why, &st);
        out->engine = r ? QMM_ENGINE_AUTO : e->id;
        out->status = st;
        out->is_fallback = 0;
        out->admitted[e->id] = !r;
        snprintf(out->reason[e->id], QMM_REASON_MAX, "%s", r ? r : "");
    }
    return QMM_OK;
}

qmm_status qmm_attention(qmm_context *ctx, const qmm_attention_args *args) {
    QMM_RETURN_IF(!ctx, QMM_ERR_INVALID_ARGUMENT, "qmm_attention: ctx is NULL");
    qmm_attn_call c;
    const qmm_status made = make_attn_call(args, 1, &c);
    return qmm_op_call(ctx, &k_attention, made, &c, made == QMM_OK ? args->engine : QMM_ENGINE_AUTO);
}
