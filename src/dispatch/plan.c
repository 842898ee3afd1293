/*
 * plan.c — SPEC §4 dispatch, for every operation (qmm_op_class): walk the engine table
 * best-first for one call, keep every engine's admission (its row's admit) and reason, pick the
 * first int8 engine that admits, else the first float engine (for a call whose float engines are
 * a fallback — the linear's W8A16, attention's mode int8 — counted and refusable by the caller),
 * never the scalar reference (it runs only when asked for by name). Two forms of the one walk:
 * qmm_plan_op keeps every engine's verdict and reason (the plans, error messages, the fallback
 * log); qmm_plan_choose only chooses, and finalizes the chosen engine's descriptor for the call
 * (qmm_op_finalize), both cached per call class where the operation has one (the linear's hot
 * path). Also the text of a plan: the reasons joined for error messages and logs, and
 * qmm_plan_format.
 */
#include "dispatch.h"

#include <stdio.h>
#include <string.h>

const char *qmm_plan_admit(const qmm_op_class *op, const qmm_engine *e, void *call, int fallback, char *why, size_t n) {
    const qmm_op_row *row = &e->ops->op[op->op];
    if (op->set_fallback) op->set_fallback(call, fallback);
    if (!row->admit) {
        snprintf(why, n, "offers no %s", qmm_op_name(op->op));
        return why;
    }
    return row->admit(call, why, n);
}

/* The walk of SPEC §4, for any operation: every int8 engine, then every float engine (a float
 * engine is only a fallback when every int8 engine refused a call op->float_fallback names; the
 * table lists them in that order), each one usable here and admitting the call or not. With p,
 * every engine's verdict and reason goes into p; without, the walk stops at the first admitting
 * engine and formats no reason of its own. Returns the chosen engine (AUTO if none) and, in
 * *fallback, whether it is a fallback. */
static qmm_engine_id walk(const qmm_context *ctx, const qmm_op_class *op, void *call, qmm_plan_info *p, int *fallback) {
    const int float_fallback = op->float_fallback(call);
    qmm_engine_id chosen = QMM_ENGINE_AUTO;
    *fallback = 0;
    for (int kind = QMM_KIND_INT8; kind <= QMM_KIND_FLOAT; kind++) {
        for (int i = 0; i < QMM_ENGINE_TABLE_LEN; i++) {
            const qmm_engine *e = &qmm_engine_table[i];
            if ((int)e->kind != kind) continue;
            const int fb = kind == QMM_KIND_FLOAT && float_fallback;
            char why[QMM_REASON_MAX];
            const int usable = p ? qmm_engine_usable(e, ctx->max_isa, ctx->disabled_engines, why, sizeof why)
                                 : (int)((ctx->usable_engines >> e->id) & 1u);
            const char *r = usable ? qmm_plan_admit(op, e, call, fb, why, sizeof why) : p ? why : "unusable";
            if (r) {
                if (p) snprintf(p->reason[e->id], QMM_REASON_MAX, "%s", r);
                continue;
            }
            if (p) p->admitted[e->id] = 1;
            if (chosen == QMM_ENGINE_AUTO) {
                chosen = e->id;
                *fallback = fb;
                if (!p) return chosen;
            }
        }
    }
    return chosen;
}

void qmm_plan_op(const qmm_context *ctx, const qmm_op_class *op, void *call, qmm_plan_info *p) {
    memset(p, 0, sizeof *p);
    snprintf(p->reason[QMM_ENGINE_REF], QMM_REASON_MAX, "reference: runs only when asked for by name");
    p->engine = walk(ctx, op, call, p, &p->is_fallback);
    p->status = p->engine == QMM_ENGINE_AUTO ? QMM_ERR_NO_ENGINE
              : (p->is_fallback && ctx->fallback == QMM_FALLBACK_STRICT) ? QMM_ERR_FALLBACK_REFUSED
                                                                          : QMM_OK;
    if (op->set_fallback) op->set_fallback(call, p->is_fallback);
    const qmm_engine *e = qmm_engine_get(p->engine);
    if (e) {
        const char *name = qmm_op_finalize(&e->ops->op[op->op], call, ctx->n_threads).name;
        snprintf(p->regime, sizeof p->regime, "%s", name ? name : "");
    }
}

/* A plan cache word (qmm_plan_cache): the operation's call class (op->cache_key), and
 *   bits 39..43  the chosen engine id       bit 44  the choice is a fallback
 *   bit  63      the slot is full (part of every key)
 * beside it in its slot the thread count and the engine's final descriptor (qmm_final). */

/* Slot s when it holds class key for `threads` threads, read consistently (seq even and
 * unchanged across the reads): 1 with its word and final descriptor, else 0. */
static int slot_read(qmm_plan_slot *s, uint64_t key, int threads, uint64_t *word, qmm_final *fin) {
    const uint64_t seq = atomic_load_explicit(&s->seq, memory_order_acquire);
    if (seq & 1) return 0;
    const uint64_t v = atomic_load_explicit(&s->word, memory_order_relaxed);
    const int t = atomic_load_explicit(&s->threads, memory_order_relaxed);
    const void *d = atomic_load_explicit(&s->desc, memory_order_relaxed);
    const char *n = atomic_load_explicit(&s->name, memory_order_relaxed);
    atomic_thread_fence(memory_order_acquire);
    if (atomic_load_explicit(&s->seq, memory_order_relaxed) != seq) return 0;
    if ((v & ~QMM_PLAN_CHOICE_MASK) != key || t != threads) return 0;
    *word = v;
    fin->desc = d;
    fin->name = n;
    return 1;
}

/* Fills slot s, unless another writer is filling it (the cache is only a shortcut). */
static void slot_write(qmm_plan_slot *s, uint64_t word, int threads, qmm_final fin) {
    uint64_t seq = atomic_load_explicit(&s->seq, memory_order_relaxed);
    if ((seq & 1) || !atomic_compare_exchange_strong_explicit(&s->seq, &seq, seq + 1, memory_order_relaxed,
                                                              memory_order_relaxed))
        return;
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&s->word, word, memory_order_relaxed);
    atomic_store_explicit(&s->threads, threads, memory_order_relaxed);
    atomic_store_explicit(&s->desc, fin.desc, memory_order_relaxed);
    atomic_store_explicit(&s->name, fin.name, memory_order_relaxed);
    atomic_store_explicit(&s->seq, seq + 2, memory_order_release);
}

qmm_engine_id qmm_plan_choose(const qmm_context *ctx, const qmm_op_class *op, void *call, int *fallback,
                              qmm_final *fin) {
    _Static_assert(QMM_ENGINE_MAX <= 32, "the cache word's engine id (qmm.h)");
    uint64_t key = 0, v;
    /* a weight is immutable but for this cache and fallback_logged, both atomic */
    qmm_plan_cache *cache = op->cache_key ? op->cache_key(ctx, call, &key) : NULL;
    if (cache) {
        for (int i = 0; i < QMM_PLAN_CACHE_SLOTS; i++) {
            if (!slot_read(&cache->slot[i], key, ctx->n_threads, &v, fin)) continue;
            *fallback = (int)(v >> 44) & 1;
            if (op->set_fallback) op->set_fallback(call, *fallback);
            return (qmm_engine_id)((v >> 39) & 0x1f);
        }
    }
    const qmm_engine_id id = walk(ctx, op, call, NULL, fallback);
    if (op->set_fallback) op->set_fallback(call, *fallback);
    const qmm_engine *e = qmm_engine_get(id);
    if (!e) return id; /* a refusal is an error path: its message needs the full plan */
    const qmm_op_row *row = &e->ops->op[op->op];
    *fin = qmm_op_finalize(row, call, ctx->n_threads);
    if (cache && (fin->desc || row->run)) { /* no descriptor (out of memory): finalized again next time */
        const uint64_t h = (key ^ (uint64_t)ctx->n_threads << 40) * 0x9E3779B97F4A7C15ull;
        slot_write(&cache->slot[(int)(h >> 61) % QMM_PLAN_CACHE_SLOTS],
                   key | (uint64_t)id << 39 | (uint64_t)(*fallback != 0) << 44, ctx->n_threads, *fin);
    }
    return id;
}

/* Is row i a refusing engine that the reasons text lists? */
static int listed(const qmm_plan_info *p, int int8_only, int i) {
    const qmm_engine *e = &qmm_engine_table[i];
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
        const qmm_engine_id id = qmm_engine_table[i].id;
        int k = snprintf(buf + len, n - len, "%s%s", len ? "; " : "", qmm_engine_name(id));
        if (k < 0 || (size_t)k >= n - len) break;
        len += (size_t)k;
        for (int j = i + 1; j < QMM_ENGINE_TABLE_LEN; j++) {
            const qmm_engine_id jd = qmm_engine_table[j].id;
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
    else APPEND("engine: %s%s%.*s%s%s%s\n", qmm_engine_name(p->engine), p->regime[0] ? " [" : "", (int)sizeof p->regime,
                p->regime, p->regime[0] ? "]" : "", p->is_fallback ? " (fallback)" : "",
                p->status == QMM_ERR_FALLBACK_REFUSED ? " — refused: strict policy" : "");
    if (memchr(p->weight, 0, sizeof p->weight) && p->weight[0]) APPEND("weight: %s\n", p->weight);
    for (int i = 0; i < QMM_ENGINE_TABLE_LEN; i++) {
        const qmm_engine_id id = qmm_engine_table[i].id;
        APPEND("  %-12s %s%.*s\n", qmm_engine_name(id), p->admitted[id] ? "admits" : "refuses: ", QMM_REASON_MAX,
               p->admitted[id] ? "" : p->reason[id]);
    }
#undef APPEND
    return len;
}
