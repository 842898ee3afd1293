/*
 * context.c — a context: thread pool, fallback policy, ISA cap, dispatch logging, the scratch
 * arena of its calls (handed out by base/scratch.c), the counters and the phase timers
 * (qmm_profile: the totals, and a slot per thread while on), qmm_cancel (SPEC §12: the cancel
 * word in qmm_base.h; its calls enter and leave it in op.c). Options not given come from the
 * environment: QMM_NUM_THREADS, QMM_MAX_ISA, QMM_VERBOSE=dispatch; QMM_PROFILE=1 turns the
 * phase timers on.
 */
#define _GNU_SOURCE
#include "qmm_internal.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

qmm_context_options qmm_context_options_default(void) {
    qmm_context_options o;
    memset(&o, 0, sizeof o);
    o.n_threads = 0;
    o.fallback = QMM_FALLBACK_ALLOW;
    o.max_isa = -1;
    o.verbose = -1;
    return o;
}

qmm_status qmm_context_create(const qmm_context_options *opt, qmm_context **out) {
    QMM_RETURN_IF(!out, QMM_ERR_INVALID_ARGUMENT, "qmm_context_create: out is NULL");
    *out = NULL;
    qmm_context_options o = opt ? *opt : qmm_context_options_default();
    QMM_RETURN_IF(o.n_threads < 0 || o.n_threads > 1024, QMM_ERR_INVALID_ARGUMENT,
                  "qmm_context_create: n_threads=%d (needs 0..1024)", o.n_threads);
    QMM_RETURN_IF(o.fallback != QMM_FALLBACK_ALLOW && o.fallback != QMM_FALLBACK_STRICT,
                  QMM_ERR_INVALID_ARGUMENT, "qmm_context_create: fallback policy %d unknown", (int)o.fallback);
    QMM_RETURN_IF(o.max_isa < -1 || o.max_isa > QMM_ISA_MAX, QMM_ERR_INVALID_ARGUMENT,
                  "qmm_context_create: max_isa=%d (needs -1..%d)", o.max_isa, QMM_ISA_MAX);
    QMM_RETURN_IF(o.pin_threads && o.cpu_list && o.n_threads == 0, QMM_ERR_INVALID_ARGUMENT,
                  "qmm_context_create: cpu_list given with n_threads=0 (it needs n_threads entries)");
    if (o.pin_threads && o.cpu_list)
        for (int i = 0; i < o.n_threads; i++)
            QMM_RETURN_IF(o.cpu_list[i] < 0 || o.cpu_list[i] >= CPU_SETSIZE, QMM_ERR_INVALID_ARGUMENT,
                          "qmm_context_create: cpu_list[%d]=%d (needs 0..%d)", i, o.cpu_list[i], CPU_SETSIZE - 1);
    int n = o.n_threads;
    if (n == 0) {
        const char *s = getenv("QMM_NUM_THREADS");
        n = s ? atoi(s) : 0;
        if (n <= 0) n = (int)sysconf(_SC_NPROCESSORS_ONLN);
        if (n <= 0) n = 1;
        if (n > 1024) n = 1024;
    }
    qmm_context *ctx = calloc(1, sizeof *ctx);
    QMM_RETURN_IF(!ctx, QMM_ERR_OUT_OF_MEMORY, "qmm_context_create: out of memory");
    ctx->n_threads = n;
    ctx->fallback = o.fallback;
    ctx->max_isa = o.max_isa >= 0 ? o.max_isa : qmm_env_max_isa();
    if (o.verbose >= 0) {
        ctx->verbose = o.verbose;
    } else {
        const char *v = getenv("QMM_VERBOSE");
        ctx->verbose = v && (strstr(v, "dispatch") || strcmp(v, "1") == 0);
    }
    ctx->disabled_engines = o.disabled_engines;
    ctx->usable_engines = qmm_engines_usable(ctx->max_isa, ctx->disabled_engines);
    atomic_init(&ctx->cancel.w, 0);
    qmm_status st = qmm_pool_create(n, o.pin_threads, o.cpu_list, &ctx->cancel, &ctx->pool);
    if (st != QMM_OK) { free(ctx); return st; }
    const char *pe = getenv("QMM_PROFILE");
    if (pe && *pe && strcmp(pe, "0") != 0 && (st = qmm_context_set_profile(ctx, 1)) != QMM_OK) {
        qmm_context_destroy(ctx);
        return st;
    }
    *out = ctx;
    return QMM_OK;
}

void qmm_context_destroy(qmm_context *ctx) {
    if (!ctx) return;
    qmm_pool_destroy(ctx->pool);
    for (int i = 0; i < QMM_SCRATCH_SLOTS; i++) qmm_aligned_free(ctx->scratch[i]);
    qmm_aligned_free(ctx->prof_slots);
    free(ctx);
}

int qmm_context_threads(const qmm_context *ctx) { return ctx ? ctx->n_threads : 0; }

int qmm_cancel(qmm_context *ctx) {
    if (!ctx) {
        qmm_fail(QMM_ERR_INVALID_ARGUMENT, "qmm_cancel: ctx is NULL");
        return -1;
    }
    return qmm_cancel_set(&ctx->cancel);
}
int qmm_context_max_isa(const qmm_context *ctx) { return ctx ? ctx->max_isa : -1; }

void qmm_get_counters(const qmm_context *ctx, qmm_counters *out) {
    if (!out) return;
    if (!ctx) { memset(out, 0, sizeof *out); return; }
    *out = ctx->counters;
}

void qmm_reset_counters(qmm_context *ctx) {
    if (ctx) memset(&ctx->counters, 0, sizeof ctx->counters);
}

const char *qmm_phase_name(qmm_phase p) {
    static const char *const names[QMM_PHASE_COUNT] = {
        "call", "setup", "engine", "prepass", "gemm", "threads_tasks", "threads_pack", "threads_tiles",
        "threads_epilogue"};
    return (unsigned)p < QMM_PHASE_COUNT ? names[p] : "unknown";
}

qmm_status qmm_context_set_profile(qmm_context *ctx, int on) {
    QMM_RETURN_IF(!ctx, QMM_ERR_INVALID_ARGUMENT, "qmm_context_set_profile: ctx is NULL");
    if (on && !ctx->prof_slots) {
        size_t bytes;
        QMM_RETURN_IF(!qmm_mul_ok((size_t)ctx->n_threads, sizeof(qmm_prof_slot), &bytes), QMM_ERR_OUT_OF_MEMORY,
                      "qmm_context_set_profile: out of memory");
        ctx->prof_slots = qmm_aligned_alloc(bytes);
        QMM_RETURN_IF(!ctx->prof_slots, QMM_ERR_OUT_OF_MEMORY, "qmm_context_set_profile: out of memory (%zu bytes)",
                      bytes);
        memset(ctx->prof_slots, 0, bytes);
    }
    ctx->profile = on != 0;
    return QMM_OK;
}

void qmm_get_profile(const qmm_context *ctx, qmm_profile *out) {
    if (!out) return;
    memset(out, 0, sizeof *out);
    if (!ctx) return;
    *out = ctx->prof;
    out->threads = ctx->n_threads;
    out->enabled = ctx->profile;
}

void qmm_reset_profile(qmm_context *ctx) {
    if (ctx) memset(&ctx->prof, 0, sizeof ctx->prof);
}
