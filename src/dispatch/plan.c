/*
 * plan.c — SPEC §4 dispatch: walk the engine table best-first for one call, keep every engine's
 * admission and reason, pick the first int8 engine that admits, else the first float engine
 * (the W8A16 fallback for an int8 weight, counted and refusable by the caller), never the scalar
 * reference (it runs only when asked for by name). Also the text of a plan: the reasons joined
 * for error messages and logs, and qmm_plan_format for people.
 */
#include "dispatch.h"

#include <stdio.h>
#include <string.h>

/* One engine of the walk: usable here (build, CPU, OS, cap, disabled set) and admitting c? */
static void consider(const qmm_context *ctx, const qmm_engine *e, qmm_call *c, qmm_plan_info *p) {
    char why[QMM_REASON_MAX];
    const char *r;
    if (!qmm_engine_usable(e, ctx->max_isa, ctx->disabled_engines, why, sizeof why)) r = why;
    else r = e->admit(c, why, sizeof why);
    if (r) {
        snprintf(p->reason[e->id], QMM_REASON_MAX, "%s", r);
        return;
    }
    p->admitted[e->id] = 1;
    if (p->engine == QMM_ENGINE_AUTO) {
        p->engine = e->id;
        p->is_fallback = e->kind == QMM_KIND_FLOAT && c->w->is_int8;
    }
}

void qmm_plan_call(const qmm_context *ctx, qmm_call *c, qmm_plan_info *p) {
    memset(p, 0, sizeof *p);
    p->engine = QMM_ENGINE_AUTO;
    snprintf(p->reason[QMM_ENGINE_REF], QMM_REASON_MAX, "reference: runs only when asked for by name");
    /* the int8 engines first, then the float ones: the table lists them in that order, and a
     * float engine is only a fallback when every int8 engine refused */
    for (int kind = QMM_KIND_INT8; kind <= QMM_KIND_FLOAT; kind++) {
        for (int i = 0; i < QMM_ENGINE_TABLE_LEN; i++) {
            const qmm_engine *e = qmm_engine_table[i].engine;
            if ((int)e->kind != kind) continue;
            c->fallback = kind == QMM_KIND_FLOAT && c->w->is_int8;
            consider(ctx, e, c, p);
        }
    }
    c->fallback = p->is_fallback;
    p->status = p->engine == QMM_ENGINE_AUTO ? QMM_ERR_NO_ENGINE
              : (p->is_fallback && ctx->fallback == QMM_FALLBACK_STRICT) ? QMM_ERR_FALLBACK_REFUSED
                                                                          : QMM_OK;
}

/* Is row i a refusing engine that the reasons text lists? */
static int listed(const qmm_plan_info *p, int int8_only, int i) {
    const qmm_engine *e = qmm_engine_table[i].engine;
    if (e->kind == QMM_KIND_REF || p->admitted[e->id]) return 0;
    return !int8_only || e->kind == QMM_KIND_INT8;
}

void qmm_plan_reasons_text(const qmm_plan_info *p, int int8_only, char buf[QMM_REASONS_TEXT_MAX]) {
    const size_t n = QMM_REASONS_TEXT_MAX;
    size_t len = 0;
    int done[QMM_ENGINE_TABLE_LEN] = {0};
    buf[0] = 0;
    for (int i = 0; i < QMM_ENGINE_TABLE_LEN; i++) {
        if (done[i] || !listed(p, int8_only, i)) continue;
        const qmm_engine_id id = qmm_engine_table[i].engine->id;
        int k = snprintf(buf + len, n - len, "%s%s", len ? "; " : "", qmm_engine_name(id));
        if (k < 0 || (size_t)k >= n - len) break;
        len += (size_t)k;
        for (int j = i + 1; j < QMM_ENGINE_TABLE_LEN; j++) {
            const qmm_engine_id jd = qmm_engine_table[j].engine->id;
            if (!listed(p, int8_only, j) || strcmp(p->reason[jd], p->reason[id]) != 0) continue;
            done[j] = 1;
            k = snprintf(buf + len, n - len, ", %s", qmm_engine_name(jd));
            if (k < 0 || (size_t)k >= n - len) break;
            len += (size_t)k;
        }
        k = snprintf(buf + len, n - len, ": %.*s", QMM_REASON_MAX, p->reason[id]);
        if (k < 0 || (size_t)k >= n - len) break;
        len += (size_t)k;
    }
}

int qmm_plan_admits(const qmm_plan_info *p, qmm_engine_id e) {
    return p && (unsigned)e < QMM_ENGINE_MAX && p->admitted[e];
}

const char *qmm_plan_reason(const qmm_plan_info *p, qmm_engine_id e) {
    if (!p || (unsigned)e >= QMM_ENGINE_MAX || p->admitted[e]) return "";
    const char *r = p->reason[e];
    return memchr(r, 0, QMM_REASON_MAX) ? r : ""; /* a reason is always terminated; a foreign struct may not be */
}

size_t qmm_plan_format(const qmm_plan_info *p, char *buf, size_t size) {
    char tmp[64];
    if (!buf) size = 0;
    if (size) buf[0] = 0;
    if (!p) return 0;
    size_t len = 0;
#define APPEND(...)                                                                     \
    do {                                                                                \
        int k_ = snprintf(len < size ? buf + len : tmp, len < size ? size - len : 0, __VA_ARGS__); \
        if (k_ > 0) len += (size_t)k_;                                                  \
    } while (0)
    if (p->engine == QMM_ENGINE_AUTO) APPEND("engine: none (%s)\n", qmm_status_name(p->status));
    else APPEND("engine: %s%s%s\n", qmm_engine_name(p->engine), p->is_fallback ? " (fallback)" : "",
                p->status == QMM_ERR_FALLBACK_REFUSED ? " — refused: strict policy" : "");
    for (int i = 0; i < QMM_ENGINE_TABLE_LEN; i++) {
        const qmm_engine_id id = qmm_engine_table[i].engine->id;
        APPEND("  %-12s %s%.*s\n", qmm_engine_name(id), p->admitted[id] ? "admits" : "refuses: ", QMM_REASON_MAX,
               p->admitted[id] ? "" : p->reason[id]);
    }
#undef APPEND
    return len;
}
