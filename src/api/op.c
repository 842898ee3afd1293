/*
 * op.c — the API skeleton of every operation (op.h): the named engine, AUTO's choice (each with
 * the engine's final descriptor for the call), the fallback policy and log, the run, the
 * counters. What differs between operations is in their qmm_op_class (dispatch.h): the subject of
 * the messages, the fallback's words, the run.
 */
#include "op.h"

#include <stdio.h>

/* The length of a subject: a 127-byte layer name with its shape, or an attention call's sizes. */
enum { SUBJECT_MAX = 256 };

const char *qmm_op_named_verdict(const qmm_context *ctx, const qmm_op_class *op, const qmm_engine *e, void *call,
                                 char *why, qmm_status *st) {
    if (!qmm_engine_usable(e, ctx->max_isa, 0, why, QMM_REASON_MAX)) { *st = QMM_ERR_UNSUPPORTED_HARDWARE; return why; }
    const int fallback = e->kind == QMM_KIND_FLOAT && op->float_fallback(call);
    const char *r = qmm_plan_admit(op, e, call, fallback, why, QMM_REASON_MAX);
    *st = r ? QMM_ERR_UNSUPPORTED : QMM_OK;
    return r;
}

/* The engine asked for by name and its final descriptor for the call, or an error naming the call. */
static qmm_status named(const qmm_context *ctx, const qmm_op_class *op, void *call, qmm_engine_id id,
                        const qmm_engine **out, qmm_final *fin) {
    char sub[SUBJECT_MAX], why[QMM_REASON_MAX];
    const qmm_engine *e = qmm_engine_get(id);
    if (!e) {
        op->subject(call, sub, sizeof sub);
        return qmm_fail(QMM_ERR_INVALID_ARGUMENT, "%s: engine %d unknown", sub, (int)id);
    }
    qmm_status st;
    const char *r = qmm_op_named_verdict(ctx, op, e, call, why, &st);
    if (r) {
        op->subject(call, sub, sizeof sub);
        return qmm_fail(st, "%s: engine %s %s: %s", sub, e->name,
                        st == QMM_ERR_UNSUPPORTED_HARDWARE ? "unavailable" : "refuses", r);
    }
    *out = e;
    *fin = qmm_op_finalize(&e->ops->op[op->op], call, ctx->n_threads);
    return QMM_OK;
}

/* The error of an AUTO call that dispatch refused (no engine admits it, or strict policy and a
 * fallback), with every refusing engine's reason: the full plan, made only here. */
static qmm_status refusal(const qmm_context *ctx, const qmm_op_class *op, void *call) {
    qmm_plan_info p;
    char reasons[QMM_REASONS_TEXT_MAX], sub[SUBJECT_MAX];
    qmm_plan_op(ctx, op, call, &p);
    qmm_plan_reasons_text(&p, p.status == QMM_ERR_FALLBACK_REFUSED, reasons);
    op->subject(call, sub, sizeof sub);
    if (p.status == QMM_ERR_FALLBACK_REFUSED)
        return qmm_fail(QMM_ERR_FALLBACK_REFUSED, "%s%s: would fall back to %s (strict policy): %s", sub, op->fallback_from,
                        qmm_engine_name(p.engine), reasons);
    if (p.status == QMM_ERR_NO_ENGINE) return qmm_fail(QMM_ERR_NO_ENGINE, "%s: no engine admits it: %s", sub, reasons);
    return qmm_fail(QMM_ERR_INTERNAL, "%s: dispatch refused a call its plan admits (%s)", sub, qmm_engine_name(p.engine));
}

/* AUTO: dispatch's choice and its final descriptor (cached where the operation has a call class),
 * the policy, the log. */
static qmm_status chosen(qmm_context *ctx, const qmm_op_class *op, void *call, const qmm_engine **out, int *fallback,
                         qmm_final *fin) {
    /* the choice alone; every engine's reason only when a message needs them */
    const qmm_engine *e = qmm_engine_get(qmm_plan_choose(ctx, op, call, fallback, fin));
    if (!e || (*fallback && ctx->fallback == QMM_FALLBACK_STRICT)) return refusal(ctx, op, call);
    if (ctx->verbose) {
        char sub[SUBJECT_MAX];
        if (*fallback && (!op->log_fallback || op->log_fallback(call))) {
            qmm_plan_info p;
            char reasons[QMM_REASONS_TEXT_MAX];
            qmm_plan_op(ctx, op, call, &p); /* leaves the call told it is a fallback, as chosen */
            qmm_plan_reasons_text(&p, 1, reasons);
            op->subject(call, sub, sizeof sub);
            qmm_log(ctx, "fallback: %s%s, runs %s on %s: %s", sub, op->fallback_from, op->fallback_runs, e->name, reasons);
        } else if (!*fallback) {
            op->subject(call, sub, sizeof sub);
            const int named_final = fin->name && fin->name[0];
            qmm_log(ctx, "dispatch: %s → %s%s%s%s", sub, op->work_name ? op->work_name(e) : e->name,
                    named_final ? " [" : "", named_final ? fin->name : "", named_final ? "]" : "");
        }
    }
    *out = e;
    return QMM_OK;
}

/* The status of a run that qmm_cancel reached (SPEC §12): QMM_ERR_CANCELLED naming the call, also
 * where the run itself finished; a run's other error stays. */
static qmm_status cancelled(const qmm_op_class *op, void *call, qmm_status st) {
    if (st != QMM_OK && st != QMM_ERR_CANCELLED) return st;
    char sub[SUBJECT_MAX];
    op->subject(call, sub, sizeof sub);
    return qmm_fail(QMM_ERR_CANCELLED, "%s: cancelled by qmm_cancel; its outputs are undefined", sub);
}

qmm_status qmm_op_call(qmm_context *ctx, const qmm_op_class *op, qmm_status made, void *call, qmm_engine_id engine) {
    qmm_op_counters *n = &ctx->counters.op[op->op];
    const qmm_engine *e = NULL;
    qmm_final fin = {NULL, ""};
    int fallback = 0;
    qmm_status st = made;
    /* in flight from here until it returns: what qmm_cancel reaches (the pool and the drivers poll) */
    qmm_cancel_enter(&ctx->cancel);
    if (st == QMM_OK)
        st = engine != QMM_ENGINE_AUTO ? named(ctx, op, call, engine, &e, &fin) : chosen(ctx, op, call, &e, &fallback, &fin);
    if (st == QMM_OK) st = op->run(ctx, e, fin.desc, call);
    if (made == QMM_OK && qmm_cancelled(ctx)) st = cancelled(op, call, st);
    qmm_cancel_leave(&ctx->cancel);
    if (st != QMM_OK) {
        n->errors++;
        return st;
    }
    n->calls[e->id]++;
    if (fallback) n->fallbacks++;
    ctx->last_engine[op->op] = e->id;
    return QMM_OK;
}
