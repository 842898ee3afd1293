/*
 * plan.c — SPEC §4 dispatch: walk the engine table best-first for one call, keep every engine's
 * admission and reason, pick the first int8 engine that admits, else the first float engine
 * (the W8A16 fallback for an int8 weight, counted and refusable by the caller), never the scalar
 * reference (it runs only when asked for by name). Two forms of the one walk: qmm_plan_call keeps
 * every engine's verdict and reason (qmm_plan, error messages, the fallback log);
 * qmm_plan_choose only chooses, cached on the weight per call class (qmm_linear's hot path).
 * Also the text of a plan: the reasons joined for error messages and logs, and qmm_plan_format.
 */
#include "dispatch.h"

#include <stdio.h>
#include <string.h>

/* One operation's verdict of an engine for the walk: NULL if e admits the call, else its reason.
 * fallback: the walk asks a float engine for an int8 weight (W8A16). */
typedef const char *(*op_admit_fn)(const qmm_engine *e, void *call, int fallback, char *why, size_t n);

static const char *admit_linear(const qmm_engine *e, void *call, int fallback, char *why, size_t n) {
    qmm_call *c = call;
    c->fallback = fallback;
    return e->ops->admit(c, why, n);
}

static const char *admit_attention(const qmm_engine *e, void *call, int fallback, char *why, size_t n) {
    (void)fallback;
    return e->ops->attn_admit ? e->ops->attn_admit(call, why, n) : "offers no attention";
}

/* The walk of SPEC §4, for any operation: every int8 engine, then every float engine (a float
 * engine is only a fallback when every int8 engine refused an int8 weight, float_fallback; the
 * table lists them in that order), each one usable here and admitting the call or not. With p,
 * every engine's verdict and reason goes into p; without, the walk stops at the first admitting
 * engine and formats no reason of its own. Returns the chosen engine (AUTO if none) and, in
 * *fallback, whether it is a fallback. */
static qmm_engine_id walk(const qmm_context *ctx, op_admit_fn admit, void *call, int float_fallback,
                          qmm_plan_info *p, int *fallback) {
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
            const char *r = usable ? admit(e, call, fb, why, sizeof why) : p ? why : "unusable";
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

static void plan_of(const qmm_context *ctx, op_admit_fn admit, void *call, int float_fallback, qmm_plan_info *p) {
    memset(p, 0, sizeof *p);
    snprintf(p->reason[QMM_ENGINE_REF], QMM_REASON_MAX, "reference: runs only when asked for by name");
    p->engine = walk(ctx, admit, call, float_fallback, p, &p->is_fallback);
    p->status = p->engine == QMM_ENGINE_AUTO ? QMM_ERR_NO_ENGINE
              : (p->is_fallback && ctx->fallback == QMM_FALLBACK_STRICT) ? QMM_ERR_FALLBACK_REFUSED
                                                                          : QMM_OK;
}

void qmm_plan_call(const qmm_context *ctx, qmm_call *c, qmm_plan_info *p) {
    plan_of(ctx, admit_linear, c, c->w->is_int8, p);
    c->fallback = p->is_fallback;
}

void qmm_plan_attention(const qmm_context *ctx, const qmm_attn_call *c, qmm_plan_info *p) {
    plan_of(ctx, admit_attention, (void *)c, c->mode == QMM_ATTN_INT8, p);
}

qmm_engine_id qmm_plan_attention_choose(const qmm_context *ctx, const qmm_attn_call *c, int *fallback) {
    return walk(ctx, admit_attention, (void *)c, c->mode == QMM_ATTN_INT8, NULL, fallback);
}

/* A call class and dispatch's choice for it in one 64-bit word (qmm_plan_cache):
 *   bits  0..31  ctx->usable_engines          bits 39..43  the chosen engine id
 *   bits 32..34  x_dtype                      bit  44      the choice is a fallback
 *   bits 35..37  y_dtype                      bits 45..61  M (classes with M < 2^17 only)
 *   bit  38      token_scales_in given        bit  62      w->has_neg128
 *                                             bit  63      the slot is full
 * has_neg128 is the one weight property an admit() reads (avx2_int8) that is not fixed by the
 * weight's shape and kind; it is in the key so that a weight whose int8 values are read anew per
 * call can never reuse a choice made for other values. */
enum { CACHE_M_BITS = 17 };
#define CACHE_FULL ((uint64_t)1 << 63)
#define CACHE_CHOICE_MASK ((uint64_t)0x3f << 39)

static int cache_key(const qmm_context *ctx, const qmm_call *c, uint64_t *key) {
    if (c->M >= ((int64_t)1 << CACHE_M_BITS) || (unsigned)c->x_dtype > 7 || (unsigned)c->y_dtype > 7) return 0;
    *key = CACHE_FULL | (uint64_t)ctx->usable_engines | (uint64_t)c->x_dtype << 32 | (uint64_t)c->y_dtype << 35 |
           (uint64_t)(c->token_scales_in != NULL) << 38 | (uint64_t)c->M << 45 |
           (uint64_t)(c->w->has_neg128 != 0) << 62;
    return 1;
}

qmm_engine_id qmm_plan_choose(const qmm_context *ctx, qmm_call *c) {
    _Static_assert(QMM_ENGINE_MAX <= 32 && QMM_DTYPE_COUNT <= 8, "the cache word's fields (qmm.h)");
    /* a weight is immutable but for this cache and fallback_logged, both atomic */
    qmm_plan_cache *cache = (qmm_plan_cache *)&c->w->plan_cache;
    uint64_t key = 0;
    const int cacheable = cache_key(ctx, c, &key);
    if (cacheable) {
        for (int i = 0; i < QMM_PLAN_CACHE_SLOTS; i++) {
            const uint64_t v = atomic_load_explicit(&cache->slot[i], memory_order_relaxed);
            if ((v & ~CACHE_CHOICE_MASK) != key) continue;
            c->fallback = (int)(v >> 44) & 1;
            return (qmm_engine_id)((v >> 39) & 0x1f);
        }
    }
    int fallback;
    const qmm_engine_id id = walk(ctx, admit_linear, c, c->w->is_int8, NULL, &fallback);
    c->fallback = fallback;
    if (cacheable && id != QMM_ENGINE_AUTO) { /* a refusal is an error path: its message needs the full plan */
        const int i = (int)((key * 0x9E3779B97F4A7C15ull) >> 61) % QMM_PLAN_CACHE_SLOTS;
        atomic_store_explicit(&cache->slot[i], key | (uint64_t)id << 39 | (uint64_t)(c->fallback != 0) << 44,
                              memory_order_relaxed);
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
    else APPEND("engine: %s%s%s\n", qmm_engine_name(p->engine), p->is_fallback ? " (fallback)" : "",
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
