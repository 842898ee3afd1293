/*
 * test_engine_table.c — the one ordered engine table (src/base/engines.c) and what is
 * derived from it: every engine id but AUTO appears exactly once; rows are best first by kind
 * (int8, then float, then the reference); each row's engine descriptor carries its own id, a
 * name that round-trips through qmm_engine_from_name, an ISA level, CPU features, a peak
 * instruction, an operand dtype that matches its kind, and per operation a row (qmm_op_row)
 * with admit and a descriptor, a finalize (not both) or a run (the reference only), or none (the
 * linear always); qmm_engine_get / qmm_engine_is_int8
 * agree with the table; the public view (qmm_engine_count, qmm_engine_get_info)
 * is the table, row for row; the per-engine arrays of the public structs have the pinned
 * capacity QMM_ENGINE_MAX; the plan picks the first admitting row in table order, its accessors
 * agree with its arrays, and qmm_plan_format lists every row once, in table order; qmm_linear's
 * cached choice is the plan's, for one weight shared by contexts with different engine sets and
 * more call classes than the cache has slots.
 */
#include "dispatch.h"
#include "testutil.h"

#include <string.h>

/* position of a kind in the table: int8 rows, then float rows, then the reference */
static int kind_rank(qmm_engine_kind k) { return k == QMM_KIND_INT8 ? 0 : k == QMM_KIND_FLOAT ? 1 : 2; }

static void test_rows(void) {
    int seen[QMM_ENGINE_COUNT] = {0};
    int last_rank = 0;
    for (int i = 0; i < QMM_ENGINE_TABLE_LEN; i++) {
        const qmm_engine *e = &qmm_engine_table[i], *r = e;
        if (!TU_CHECK(e != NULL, "row %d has no engine", i)) continue;
        TU_CHECK(e->id > QMM_ENGINE_AUTO && e->id < QMM_ENGINE_COUNT, "row %d: id %d out of range", i, (int)e->id);
        if (e->id <= QMM_ENGINE_AUTO || e->id >= QMM_ENGINE_COUNT) continue;
        TU_CHECK(seen[e->id]++ == 0, "engine %s appears twice", e->name);
        TU_CHECK(qmm_engine_get(e->id) == e, "%s: lookup by id", e->name);
        TU_CHECK(qmm_engine_from_name(e->name) == e->id, "%s: name round trip", e->name);
        TU_CHECK(!strcmp(qmm_engine_name(e->id), e->name), "%s: qmm_engine_name", e->name);
        TU_CHECK(kind_rank(e->kind) >= last_rank, "row %d (%s): kind %d out of the int8, float, ref order", i,
                 e->name, (int)e->kind);
        if (kind_rank(e->kind) > last_rank) last_rank = kind_rank(e->kind);
        TU_CHECK(qmm_engine_is_int8(e->id) == (e->kind == QMM_KIND_INT8), "%s: qmm_engine_is_int8", e->name);
        TU_CHECK(e->ops && e->ops->op[QMM_OP_LINEAR].admit, "%s: a linear row with admit", e->name);
        for (int op = 0; e->ops && op < QMM_OP_COUNT; op++) { /* a row: admit and how it runs, or none of them */
            const qmm_op_row *row = &e->ops->op[op];
            const char *opn = qmm_op_name((qmm_op)op);
            if (!row->admit)
                TU_CHECK(!row->desc && !row->finalize && !row->run, "%s %s: a descriptor, finalize or run without admit",
                         e->name, opn);
            else if (e->ops->built)
                TU_CHECK(row->desc || row->finalize || row->run, "%s %s: admits, yet has no descriptor, finalize or run",
                         e->name, opn);
            TU_CHECK(!row->run || e->kind == QMM_KIND_REF, "%s %s: a run of its own (only the reference's)", e->name, opn);
            TU_CHECK(!(row->desc && row->finalize), "%s %s: both a fixed descriptor and a finalize", e->name, opn);
        }
        TU_CHECK(r->peak_insn && r->peak_insn[0], "%s: peak instruction", e->name);
        if (e->kind == QMM_KIND_INT8)
            TU_CHECK(r->operands == QMM_I8 && e->cpu_features != 0 && e->isa > QMM_ISA_NONE, "%s: int8 row", e->name);
        if (e->kind == QMM_KIND_FLOAT)
            TU_CHECK((r->operands == QMM_BF16 || r->operands == QMM_F32) && e->cpu_features != 0 &&
                         e->isa > QMM_ISA_NONE,
                     "%s: float row", e->name);
        if (e->kind == QMM_KIND_REF) TU_CHECK(e->cpu_features == 0 && e->isa == QMM_ISA_NONE, "ref row");
    }
    for (int id = QMM_ENGINE_AUTO + 1; id < QMM_ENGINE_COUNT; id++)
        TU_CHECK(seen[id] == 1, "engine id %d (%s) is not in the table", id, qmm_engine_name((qmm_engine_id)id));
    TU_CHECK(qmm_engine_get(QMM_ENGINE_AUTO) == NULL && qmm_engine_get(QMM_ENGINE_COUNT) == NULL &&
                 qmm_engine_get((qmm_engine_id)-1) == NULL,
             "no row for AUTO or out-of-range ids");
    TU_CHECK(!qmm_engine_is_int8(QMM_ENGINE_AUTO) && !qmm_engine_is_int8(QMM_ENGINE_COUNT), "is_int8 of non-engines");
}

/* the public view of the table, and the pinned per-engine capacity of the public structs */
static void test_public_view(void) {
    TU_CHECK(qmm_engine_count() == QMM_ENGINE_TABLE_LEN, "qmm_engine_count %d, table %d", qmm_engine_count(),
             QMM_ENGINE_TABLE_LEN);
    for (int i = 0; i < qmm_engine_count(); i++) {
        qmm_engine_info info;
        if (!TU_CHECK(qmm_engine_get_info(i, &info) == QMM_OK, "qmm_engine_get_info(%d): %s", i, qmm_last_error()))
            continue;
        const qmm_engine *r = &qmm_engine_table[i];
        TU_CHECK(info.id == r->id && !strcmp(info.name, r->name) && info.kind == r->kind &&
                     info.isa == r->isa && info.cpu_features == r->cpu_features &&
                     info.operands == r->operands && !strcmp(info.peak_instruction, r->peak_insn) &&
                     info.verified_on_hardware == r->hw_verified && info.built == r->ops->built,
                 "engine info %d (%s) differs from its table row", i, r->name);
        TU_CHECK((unsigned)info.id < QMM_ENGINE_MAX, "%s: id %d >= QMM_ENGINE_MAX", info.name, (int)info.id);
    }
    /* a new engine or operation changes none of these sizes (qmm.h: QMM_ENGINE_MAX and QMM_OP_MAX are pinned) */
    TU_CHECK(QMM_ENGINE_MAX == 32 && QMM_REASON_MAX == 160 && QMM_OP_MAX == 8, "pinned capacities moved");
    TU_CHECK(sizeof(qmm_counters) == QMM_OP_MAX * (QMM_ENGINE_MAX + 2) * sizeof(uint64_t), "qmm_counters size %zu",
             sizeof(qmm_counters));
    for (int op = 0; op < QMM_OP_COUNT; op++) TU_CHECK(strcmp(qmm_op_name((qmm_op)op), "unknown") != 0, "op %d has no name", op);
    TU_CHECK(!strcmp(qmm_op_name(QMM_OP_COUNT), "unknown") && !strcmp(qmm_op_name((qmm_op)-1), "unknown"),
             "op names out of range");
    /* qmm_plan_info: engine, is_fallback, status, the per-engine verdicts, the weight line, the regime */
    TU_CHECK(sizeof(qmm_plan_info) ==
                 3 * sizeof(int) + QMM_ENGINE_MAX * (sizeof(int) + QMM_REASON_MAX) + QMM_REASON_MAX + 32,
             "qmm_plan_info size %zu", sizeof(qmm_plan_info));
}

/* plan: the chosen engine is the first admitting row of the table (int8 rows first); the text
 * lists every row once in table order */
static void test_plan_order(void) {
    qmm_context *ctx = NULL;
    qmm_weight *w = NULL;
    TU_CHECK_OK(qmm_context_create(NULL, &ctx));
    if (!ctx) return;
    enum { N = 32, K = 256 };
    static int8_t wq[N * K];
    static float sc[N];
    tu_fill_i8(wq, N * K, -127, 127);
    for (int n = 0; n < N; n++) sc[n] = 0.01f;
    qmm_weight_desc d = qmm_weight_desc_default();
    d.name = "table.fc";
    d.N = N; d.K = K; d.data = wq; d.scale = sc; d.n_scale = N;
    TU_CHECK_OK(qmm_weight_create_int8(ctx, &d, &w));
    if (!w) goto out;
    for (int v = 0; v <= 1; v++) {
        qmm_linear_args a = qmm_linear_args_default();
        a.M = 64;
        a.x_dtype = QMM_BF16;
        a.y_dtype = QMM_BF16;
        a.act = v ? QMM_ACT_NONE : QMM_ACT_GELU_TANH;
        qmm_plan_info p;
        qmm_status st = qmm_plan(ctx, w, &a, &p);
        if (!TU_CHECK(st == QMM_OK, "qmm_plan: %s", qmm_last_error())) continue;
        qmm_engine_id first = QMM_ENGINE_AUTO;
        for (int i = 0; i < QMM_ENGINE_TABLE_LEN && first == QMM_ENGINE_AUTO; i++) {
            const qmm_engine *e = &qmm_engine_table[i];
            if (e->kind != QMM_KIND_REF && p.admitted[e->id]) first = e->id;
        }
        TU_CHECK(p.engine == first, "plan chose %s, the first admitting row is %s", qmm_engine_name(p.engine),
                 qmm_engine_name(first));
        TU_CHECK(!p.admitted[QMM_ENGINE_REF] && strstr(p.reason[QMM_ENGINE_REF], "by name"),
                 "the reference never admits under AUTO");
        for (int e = 0; e < QMM_ENGINE_MAX; e++)
            TU_CHECK(qmm_plan_admits(&p, (qmm_engine_id)e) == p.admitted[e] &&
                         (p.admitted[e] ? !strcmp(qmm_plan_reason(&p, (qmm_engine_id)e), "")
                                        : qmm_plan_reason(&p, (qmm_engine_id)e) == p.reason[e]),
                     "plan accessors of engine id %d", e);
        char text[8192];
        qmm_plan_format(&p, text, sizeof text);
        const char *at = text;
        for (int i = 0; i < QMM_ENGINE_TABLE_LEN; i++) {
            char key[40];
            snprintf(key, sizeof key, "\n  %-12s ", qmm_engine_table[i].name);
            const char *hit = strstr(at, key);
            if (!TU_CHECK(hit != NULL, "plan text lacks %s after the previous row:\n%s", qmm_engine_table[i].name, text))
                break;
            at = hit + 1;
        }
        if (p.engine != QMM_ENGINE_AUTO) {
            static uint16_t x[64 * K], y[64 * N];
            tu_fill_float(x, QMM_BF16, 64 * K, 1.0f);
            a.x = x;
            a.y = y;
            TU_CHECK_OK(qmm_linear(ctx, w, &a));
            TU_CHECK(qmm_last_engine(ctx) == p.engine, "qmm_last_engine %s, plan %s", qmm_engine_name(qmm_last_engine(ctx)),
                     qmm_engine_name(p.engine));
        }
    }
out:
    qmm_weight_destroy(w);
    qmm_context_destroy(ctx);
}

/* qmm_linear chooses through the weight's plan cache (dispatch.h, qmm_plan_choose): whatever ran
 * must be what qmm_plan chooses for the same context and call, fallbacks counted the same, on
 * contexts of different thread counts; the plan's regime is qmm_engine_regime's */
static void test_plan_cache(void) {
    enum { N = 32, K = 128, MAXM = 64 };
    static int8_t wq[N * K];
    static float sc[N], x[MAXM * K], y[MAXM * N];
    tu_fill_i8(wq, N * K, -127, 127);
    for (int n = 0; n < N; n++) sc[n] = 0.02f;
    tu_fill_float(x, QMM_F32, MAXM * K, 1.0f);
    qmm_engine_id i8[QMM_ENGINE_COUNT];
    const int n8 = tu_engines(TU_ENGINES_INT8, i8);
    uint32_t all8 = 0;
    for (int i = 0; i < n8; i++) all8 |= 1u << i8[i];
    /* every engine; the last int8 engine only (or a fallback); no int8 engine (a fallback) */
    const uint32_t disabled[3] = {0, n8 ? all8 & ~(1u << i8[n8 - 1]) : 0, all8};
    qmm_context *ctx[3] = {NULL, NULL, NULL};
    qmm_weight *w = NULL;
    for (int i = 0; i < 3; i++) {
        qmm_context_options o = qmm_context_options_default();
        o.n_threads = 1 + i % 2; /* the cache keys the thread count too (a final descriptor may depend on it) */
        o.verbose = 0;
        o.disabled_engines = disabled[i];
        TU_CHECK_OK(qmm_context_create(&o, &ctx[i]));
        if (!ctx[i]) goto out;
    }
    qmm_weight_desc d = qmm_weight_desc_default();
    d.name = "cache.fc";
    d.N = N; d.K = K; d.data = wq; d.scale = sc; d.n_scale = N;
    TU_CHECK_OK(qmm_weight_create_int8(ctx[0], &d, &w));
    if (!w) goto out;
    static const int64_t Ms[] = {1, 2, 3, 5, 8, 13, 21, 34, 64};
    for (int round = 0; round < 2; round++)
        for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++)
            for (int ci = 0; ci < 3; ci++)
                for (int yt = 0; yt < 2; yt++) {
                    qmm_linear_args a = qmm_linear_args_default();
                    a.M = Ms[mi];
                    a.x = x;
                    a.y = y;
                    a.y_dtype = yt ? QMM_F32 : QMM_I32;
                    qmm_plan_info p;
                    TU_CHECK_OK(qmm_plan(ctx[ci], w, &a, &p));
                    TU_CHECK(p.engine == QMM_ENGINE_AUTO || !strcmp(p.regime, qmm_engine_regime(p.engine, w, a.M)),
                             "M=%lld context %d: plan regime '%s', qmm_engine_regime '%s'", (long long)a.M, ci, p.regime,
                             qmm_engine_regime(p.engine, w, a.M));
                    qmm_counters c0, c1;
                    qmm_get_counters(ctx[ci], &c0);
                    const qmm_status st = qmm_linear(ctx[ci], w, &a);
                    qmm_get_counters(ctx[ci], &c1);
                    TU_CHECK(st == p.status, "M=%lld context %d y %s: qmm_linear %s, plan %s (%s)", (long long)a.M, ci,
                             qmm_dtype_name(a.y_dtype), qmm_status_name(st), qmm_status_name(p.status), qmm_last_error());
                    if (st != QMM_OK) continue;
                    const uint64_t fb = c1.op[QMM_OP_LINEAR].fallbacks - c0.op[QMM_OP_LINEAR].fallbacks;
                    TU_CHECK(qmm_last_engine(ctx[ci]) == p.engine && fb == (uint64_t)p.is_fallback,
                             "M=%lld context %d y %s (round %d): ran %s (fallbacks +%llu), plan %s (fallback %d)",
                             (long long)a.M, ci, qmm_dtype_name(a.y_dtype), round, qmm_engine_name(qmm_last_engine(ctx[ci])),
                             (unsigned long long)fb, qmm_engine_name(p.engine), p.is_fallback);
                }
out:
    qmm_weight_destroy(w);
    for (int i = 0; i < 3; i++) qmm_context_destroy(ctx[i]);
}

int main(int argc, char **argv) {
    tu_init(argc, argv, "test_engine_table");
    test_rows();
    test_public_view();
    test_plan_order();
    test_plan_cache();
    return tu_finish();
}
