/*
 * tp_pair.c — Megatron-style column → row pairs (qmm_dist.h), with no gather in between:
 *
 *   MLP:       fc1 [2F, K1] rows [gate; up] column-parallel (rank r: gate rows [lo, hi) and up
 *              rows [F + lo, F + hi)) → local [M, 2F_r] = [gate_r | up_r] → fc2 [N2, F]
 *              row-parallel on K-slice [lo, hi) with input_act swiglu on the local slice.
 *   attention: qkv [3F, K1] column-parallel by heads (unit = head_dim) → core(local q,k,v) →
 *              [M, F_r] → out_proj [N2, F] row-parallel on [lo, hi).
 *
 * One split of F serves both layers (balanced in units of the lcm of unit and the second layer's
 * row-parallel K granularity, tp_row_unit; or the caller's), each layer int8 or W4A8; the result
 * equals one process running first → (swiglu | core) → second with the same engine, bit for bit,
 * because each rank's intermediate columns are exactly the single process's columns and the
 * row-parallel layer is exact (tp_linear.c).
 */
#include "tp_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct qmm_tp_pair {
    qmm_comm *comm;
    char name[160];
    qmm_tp_linear *first, *second;
    int parts;
    qmm_act act;
    int64_t F, lo, hi;
    qmm_tp_core_fn core;
    void *core_user;
    void *mid, *core_out;
    size_t mid_bytes, core_bytes;
};

void qmm_tp_pair_destroy(qmm_tp_pair *p) {
    if (!p) return;
    qmm_tp_linear_destroy(p->first);
    qmm_tp_linear_destroy(p->second);
    qmm_aligned_free(p->mid);
    qmm_aligned_free(p->core_out);
    free(p);
}

static int format_ok(const qmm_tp_layer *l) { return l->format == QMM_TP_INT8 || l->format == QMM_TP_W4A8; }

static qmm_status check_local(const qmm_tp_layer *a, const qmm_tp_layer *b, const qmm_tp_pair_options *o,
                              const char *nm) {
    QMM_RETURN_IF(!a || !b || !o, QMM_ERR_INVALID_ARGUMENT, "pair %s: %s is NULL", nm,
                  !a ? "first desc" : !b ? "second desc" : "options");
    QMM_RETURN_IF(!format_ok(a) || !format_ok(b), QMM_ERR_INVALID_ARGUMENT, "pair %s: %s layer format %d unknown", nm,
                  !format_ok(a) ? "first" : "second", (int)(!format_ok(a) ? a->format : b->format));
    QMM_RETURN_IF(o->parts != 2 && o->parts != 3, QMM_ERR_INVALID_ARGUMENT,
                  "pair %s: parts=%d (2 for an MLP [gate; up], 3 for attention [q; k; v])", nm, o->parts);
    QMM_RETURN_IF(o->act == QMM_ACT_SWIGLU && (o->parts != 2 || o->core), QMM_ERR_INVALID_ARGUMENT,
                  "pair %s: a swiglu MLP has 2 parts and no core", nm);
    QMM_RETURN_IF(o->act != QMM_ACT_SWIGLU && !o->core, QMM_ERR_INVALID_ARGUMENT,
                  "pair %s: without swiglu the pair needs a core function (attention)", nm);
    QMM_RETURN_IF(o->act != QMM_ACT_SWIGLU && o->act != QMM_ACT_NONE, QMM_ERR_UNSUPPORTED,
                  "pair %s: act %s between the layers (swiglu or a core)", nm, qmm_act_name(o->act));
    const int64_t N1 = tp_layer_N(a), K2 = tp_layer_K(b);
    QMM_RETURN_IF(K2 <= 0 || N1 % o->parts || N1 / o->parts != K2, QMM_ERR_INVALID_ARGUMENT,
                  "pair %s: first layer N=%lld must be %d x the second's K=%lld", nm, (long long)N1, o->parts,
                  (long long)K2);
    QMM_RETURN_IF(o->unit < 0, QMM_ERR_INVALID_ARGUMENT, "pair %s: unit %lld", nm, (long long)o->unit);
    return QMM_OK;
}

qmm_status qmm_tp_pair_create(qmm_context *ctx, qmm_comm *comm, const qmm_weight_desc *first,
                              const qmm_weight_desc *second, const qmm_tp_pair_options *opt, qmm_tp_pair **out) {
    qmm_tp_layer a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    if (first) a.int8 = *first;
    if (second) b.int8 = *second;
    return qmm_tp_pair_create_layers(ctx, comm, first ? &a : NULL, second ? &b : NULL, opt, out);
}

qmm_status qmm_tp_pair_create_layers(qmm_context *ctx, qmm_comm *comm, const qmm_tp_layer *first,
                                     const qmm_tp_layer *second, const qmm_tp_pair_options *opt, qmm_tp_pair **out) {
    QMM_RETURN_IF(!out || !comm, QMM_ERR_INVALID_ARGUMENT, "qmm_tp_pair_create: %s is NULL", !out ? "out" : "comm");
    *out = NULL;
    char nm[160];
    snprintf(nm, sizeof nm, "%s+%s", first && format_ok(first) ? tp_layer_name(first) : "(unnamed)",
             second && format_ok(second) ? tp_layer_name(second) : "(unnamed)");
    tp_rec *recs = calloc((size_t)comm->size, sizeof *recs);
    qmm_tp_pair *p = calloc(1, sizeof *p);
    if (!recs || !p) {
        free(recs);
        free(p);
        return qmm_fail(QMM_ERR_OUT_OF_MEMORY, "pair %s: out of memory", nm);
    }
    tp_rec rec;
    memset(&rec, 0, sizeof rec);
    qmm_status st = check_local(first, second, opt, nm);
    if (st == QMM_OK) {
        rec.N = tp_layer_N(first);
        rec.K = tp_layer_K(second);
        rec.gs = tp_layer_gs(second);
        rec.format = (first->format == QMM_TP_W4A8 ? first->w4a8.bits : 0) * 8 +
                     (second->format == QMM_TP_W4A8 ? second->w4a8.bits : 0);
        rec.group = second->format == QMM_TP_W4A8 ? second->w4a8.group_size : 0;
        rec.parts = opt->parts;
        rec.act = opt->act;
        rec.kind = opt->core != NULL;
        rec.unit = opt->unit;
        rec.split_hash = tp_split_hash(opt->split, comm->size);
    }
    tp_rec_status(&rec, st);
    st = tp_agree(comm, nm, "pair create", &rec, recs, NULL, NULL);
    free(recs);
    if (st != QMM_OK) {
        free(p);
        return st;
    }
    p->comm = comm;
    snprintf(p->name, sizeof p->name, "%s", nm);
    p->parts = opt->parts;
    p->act = opt->act;
    p->core = opt->core;
    p->core_user = opt->core_user;
    p->F = tp_layer_K(second);
    const int64_t unit = tp_lcm(opt->unit > 0 ? opt->unit : 1, tp_row_unit(second));
    /* the first column-parallel over `parts` blocks, the second row-parallel, on one unit */
    const qmm_tp_options o1 = {.kind = QMM_TP_COLUMN, .parts = opt->parts, .unit = unit, .split = opt->split,
                               .no_fingerprint = opt->no_fingerprint};
    const qmm_tp_options o2 = {.kind = QMM_TP_ROW, .parts = 1, .unit = unit, .split = opt->split,
                               .no_fingerprint = opt->no_fingerprint};
    st = qmm_tp_linear_create_layer(ctx, comm, first, &o1, &p->first);
    if (st == QMM_OK) st = qmm_tp_linear_create_layer(ctx, comm, second, &o2, &p->second);
    if (st != QMM_OK) {
        qmm_tp_pair_destroy(p);
        return st;
    }
    qmm_tp_linear_info i1, i2;
    qmm_tp_linear_get_info(p->first, &i1);
    qmm_tp_linear_get_info(p->second, &i2);
    if (i1.lo != i2.lo || i1.hi != i2.hi) { /* cannot happen: same split of the same width */
        qmm_tp_pair_destroy(p);
        return qmm_fail(QMM_ERR_INTERNAL, "pair %s: the two layers split F differently", nm);
    }
    p->lo = i1.lo;
    p->hi = i1.hi;
    *out = p;
    return QMM_OK;
}

qmm_status qmm_tp_pair_run(qmm_tp_pair *p, qmm_context *ctx, int64_t M, const void *x, qmm_dtype x_dtype,
                           int64_t ldx, qmm_dtype mid_dtype, void *y, qmm_dtype y_dtype, int64_t ldy,
                           qmm_engine_id engine) {
    QMM_RETURN_IF(!p, QMM_ERR_INVALID_ARGUMENT, "qmm_tp_pair_run: pair is NULL");
    const int64_t fr = p->hi - p->lo, wmid = (int64_t)p->parts * fr;
    const size_t ms = qmm_dtype_size(mid_dtype);
    qmm_status st = QMM_OK;
    if (mid_dtype != QMM_F32 && mid_dtype != QMM_F16 && mid_dtype != QMM_BF16)
        st = qmm_fail(QMM_ERR_UNSUPPORTED, "pair %s: intermediate dtype %s (needs f32, f16 or bf16)", p->name,
                      qmm_dtype_name(mid_dtype));
    else if (M <= 0)
        st = qmm_fail(QMM_ERR_INVALID_ARGUMENT, "pair %s: M=%lld tokens", p->name, (long long)M);
    else if ((uint64_t)M > ((uint64_t)1 << 62) / (uint64_t)(wmid > 0 ? wmid : 1) / ms)
        st = qmm_fail(QMM_ERR_UNSUPPORTED, "pair %s: M=%lld tokens too many (buffer sizes overflow)", p->name,
                      (long long)M);
    else
        st = tp_grow(&p->mid, &p->mid_bytes, (size_t)M * (size_t)wmid * ms);
    qmm_linear_args a1 = qmm_linear_args_default(), a2 = a1;
    a1.M = a2.M = M;
    a1.engine = a2.engine = engine;
    a1.x = x;
    a1.x_dtype = x_dtype;
    a1.ldx = ldx;
    a1.y = p->mid;
    a1.y_dtype = a2.x_dtype = mid_dtype;
    a1.ldy = wmid;
    QMM_FORWARD_IF_ERROR(tp_linear_run_ex(p->first, ctx, &a1, QMM_TP_Y_LOCAL, st));
    a2.y = y;
    a2.y_dtype = y_dtype;
    a2.ldy = ldy;
    if (p->core) {
        st = tp_grow(&p->core_out, &p->core_bytes, (size_t)M * (size_t)fr * ms);
        if (st == QMM_OK) st = p->core(p->core_user, M, p->mid, wmid, p->core_out, fr, fr, mid_dtype);
        a2.x = p->core_out;
        a2.ldx = fr;
        a2.act = QMM_ACT_NONE;
    } else {
        a2.x = p->mid;
        a2.ldx = wmid;
        a2.act = QMM_ACT_SWIGLU;
    }
    return tp_linear_run_ex(p->second, ctx, &a2, 0, st);
}
