/*
 * test_fallback.c — the same-device float fallback (SPEC §4), one test per trigger:
 *   1. every int8 engine disabled in the context (disabled_engines), and an ISA cap below the
 *      int8 engines (the context option, and QMM_MAX_ISA in the environment) with the int8
 *      engines the cap leaves disabled, so that a float engine remains;
 *   2. a full_precision weight;
 *   3. a refused case: a weight holding -128 offered only to avx2_int8 (skipped visibly when
 *      avx2_int8 admits it or is unavailable);
 * each asserting that the planned float engine ran (calls[engine] and fallbacks moved,
 * calls[ref] == 0), that the output follows the W8A16 semantics (fp64 check on the same rounded
 * operands), that qmm_plan shows is_fallback and every int8 engine's reason, and that the strict
 * policy returns QMM_ERR_FALLBACK_REFUSED with a message naming the layer and the reason.
 * Plus: a float weight is not a fallback (fallbacks unchanged, strict mode runs it).
 */
#define _POSIX_C_SOURCE 200809L
#include "testutil.h"

#include "numerics.h"
#include "qmm_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* the linear's counters of ctx (qmm_counters.op[QMM_OP_LINEAR]) */
static qmm_op_counters linear_counters(const qmm_context *ctx) {
    qmm_counters c;
    qmm_get_counters(ctx, &c);
    return c.op[QMM_OP_LINEAR];
}

/* the disabled_engines bits of every int8 engine */

static uint32_t all_int8(void) {
    qmm_engine_id i8[QMM_ENGINE_COUNT];
    uint32_t m = 0;
    for (int i = 0, n = tu_engines(TU_ENGINES_INT8, i8); i < n; i++) m |= 1u << i8[i];
    return m;
}
#define ALL_INT8 all_int8()

typedef struct {
    int64_t N, K;
    int gs;
    int8_t *wq;
    float *scale;
    float *bias;
    qmm_weight *w;
} tw;

static const char *k_name = "blocks.7.mlp.fc2";

static int make_int8(qmm_context *ctx, tw *t, int full_precision, int neg128) {
    t->N = tu_rand_int(1, 80);
    t->K = tu_rand_int(0, 1) ? 64 * tu_rand_int(1, 4) : tu_rand_int(1, 300);
    t->gs = t->K % 64 == 0 && tu_rand_int(0, 1) ? 64 : 0;
    t->wq = malloc((size_t)(t->N * t->K));
    tu_fill_i8(t->wq, t->N * t->K, -127, 127);
    if (neg128) t->wq[tu_rand_int(0, t->N * t->K - 1)] = -128;
    t->scale = malloc((size_t)t->N * sizeof(float));
    t->bias = malloc((size_t)t->N * sizeof(float));
    for (int64_t n = 0; n < t->N; n++) {
        t->scale[n] = 0.002f + 0.001f * (float)(n % 7);
        t->bias[n] = 0.25f * tu_rand_normal();
    }
    qmm_weight_desc d = qmm_weight_desc_default();
    d.name = k_name;
    d.N = t->N;
    d.K = t->K;
    d.data = t->wq;
    d.scale = t->scale;
    d.n_scale = t->N;
    d.bias = t->bias;
    d.bias_dtype = QMM_F32;
    d.convrot_gs = t->gs;
    d.full_precision = full_precision;
    qmm_status st = qmm_weight_create_int8(ctx, &d, &t->w);
    TU_CHECK(st == QMM_OK, "create: %s", qmm_last_error());
    return st == QMM_OK;
}

static void free_tw(tw *t) {
    qmm_weight_destroy(t->w);
    free(t->wq);
    free(t->scale);
    free(t->bias);
    memset(t, 0, sizeof *t);
}

/* W8A16 check of y [M][N] f32 produced by float engine e from x [M][K] f32 */
static void check_w8a16(const tw *t, const float *x, int64_t M, const float *y, qmm_engine_id e, const char *what) {
    float *a = malloc((size_t)t->K * sizeof(float));
    int64_t bad = -1;
    double got = 0, want = 0;
    for (int64_t r = 0; r < M && bad < 0; r++) {
        qmm_ref_act_rotate_row(x + r * t->K, QMM_F32, t->K, QMM_ACT_NONE, t->gs, a);
        if (e == QMM_ENGINE_AVX512_BF16 || e == QMM_ENGINE_AMX_BF16)
            for (int64_t k = 0; k < t->K; k++) a[k] = qmm_round_to(a[k], QMM_BF16);
        for (int64_t n = 0; n < t->N; n++) {
            double acc = 0, sabs = 0;
            for (int64_t k = 0; k < t->K; k++) {
                double p = (double)a[k] * t->wq[n * t->K + k];
                acc += p;
                sabs += fabs(p);
            }
            want = acc * t->scale[n] + t->bias[n];
            double tol = (double)(t->K + 4) * ldexp(sabs * t->scale[n], -24) + ldexp(fabs(want), -22) +
                         ldexp(fabs(t->bias[n]), -24) + 1e-30;
            got = y[r * t->N + n];
            if (!(fabs(got - want) <= tol)) { bad = r * t->N + n; break; }
        }
    }
    TU_CHECK(bad < 0, "%s: %s M×N×K=%lld×%lld×%lld gs=%d: W8A16 output wrong at index %lld: got %.9g want %.9g",
             what, qmm_engine_name(e), (long long)M, (long long)t->N, (long long)t->K, t->gs, (long long)bad, got,
             want);
    free(a);
}

/* Runs the fallback case through ctx (allow) and sctx (strict); `reason` must appear in every
 * int8 engine's plan reason unless that engine is unusable for another reason (NULL: any). */
static void fallback_case(const char *what, qmm_context *ctx, qmm_context *sctx, const tw *t, const char *reason) {
    int64_t M = tu_rand_int(1, 40);
    float *x = malloc((size_t)(M * t->K) * sizeof(float));
    float *y = malloc((size_t)(M * t->N) * sizeof(float));
    tu_fill_float(x, QMM_F32, M * t->K, 1.0f);
    qmm_linear_args a = qmm_linear_args_default();
    a.M = M;
    a.x = x;
    a.y = y;

    qmm_plan_info p;
    TU_CHECK_OK(qmm_plan(ctx, t->w, &a, &p));
    TU_CHECK(p.is_fallback == 1 && p.status == QMM_OK, "%s: plan is_fallback=%d status=%s engine=%s", what,
             p.is_fallback, qmm_status_name(p.status), qmm_engine_name(p.engine));
    TU_CHECK(qmm_engine_get(p.engine) && qmm_engine_get(p.engine)->kind == QMM_KIND_FLOAT,
             "%s: planned engine %s is not a float engine", what, qmm_engine_name(p.engine));
    qmm_engine_id i8[QMM_ENGINE_COUNT];
    for (int i = 0, n = tu_engines(TU_ENGINES_INT8, i8); i < n; i++) {
        const qmm_engine_id id = i8[i];
        TU_CHECK(!p.admitted[id] && p.reason[id][0], "%s: int8 engine %s: admitted=%d reason '%s'", what,
                 qmm_engine_name((qmm_engine_id)id), p.admitted[id], p.reason[id]);
        if (reason && !strstr(p.reason[id], reason))
            TU_CHECK(strstr(p.reason[id], "CPU lacks") || strstr(p.reason[id], "no AMX") ||
                         strstr(p.reason[id], "not implemented"),
                     "%s: %s's reason '%s' does not say '%s'", what, qmm_engine_name((qmm_engine_id)id), p.reason[id],
                     reason);
    }
    char text[4096];
    qmm_plan_format(&p, text, sizeof text);
    TU_CHECK(strstr(text, "(fallback)") != NULL, "%s: plan text lacks '(fallback)':\n%s", what, text);

    qmm_op_counters c0 = linear_counters(ctx), c1;
    qmm_status st = qmm_linear(ctx, t->w, &a);
    TU_CHECK(st == QMM_OK, "%s: qmm_linear: %s: %s", what, qmm_status_name(st), qmm_last_error());
    c1 = linear_counters(ctx);
    TU_CHECK(c1.calls[p.engine] == c0.calls[p.engine] + 1, "%s: calls[%s] did not move", what,
             qmm_engine_name(p.engine));
    TU_CHECK(c1.fallbacks == c0.fallbacks + 1, "%s: fallbacks %llu -> %llu", what, (unsigned long long)c0.fallbacks,
             (unsigned long long)c1.fallbacks);
    TU_CHECK(c1.calls[QMM_ENGINE_REF] == 0, "%s: the reference engine ran", what);
    if (st == QMM_OK) check_w8a16(t, x, M, y, p.engine, what);

    /* strict: refused, naming the layer and the reason; nothing ran */
    c0 = linear_counters(sctx);
    st = qmm_linear(sctx, t->w, &a);
    const char *msg = qmm_last_error();
    TU_CHECK(st == QMM_ERR_FALLBACK_REFUSED, "%s: strict returned %s", what, qmm_status_name(st));
    TU_CHECK(strstr(msg, k_name) && strstr(msg, "strict") && (!reason || strstr(msg, reason) ||
                                                              strstr(msg, "not implemented")),
             "%s: strict message lacks layer/reason: %s", what, msg);
    c1 = linear_counters(sctx);
    TU_CHECK(c1.fallbacks == c0.fallbacks && c1.calls[p.engine] == c0.calls[p.engine] && c1.errors == c0.errors + 1,
             "%s: strict counters moved wrongly", what);
    TU_CHECK_OK(qmm_plan(sctx, t->w, &a, &p));
    TU_CHECK(p.status == QMM_ERR_FALLBACK_REFUSED && p.is_fallback, "%s: strict plan status %s", what,
             qmm_status_name(p.status));
    tu_note("%s: fell back to %s; strict: %s", what, qmm_engine_name(p.engine), msg);
    free(x);
    free(y);
}

static qmm_context *ctx_with(int threads, qmm_fallback_policy pol, int max_isa, uint32_t disabled) {
    qmm_context_options o = qmm_context_options_default();
    o.n_threads = threads;
    o.fallback = pol;
    o.max_isa = max_isa;
    o.disabled_engines = disabled;
    o.verbose = 0;
    qmm_context *c = NULL;
    TU_CHECK_OK(qmm_context_create(&o, &c));
    return c;
}

/* is some float engine usable on this machine under the cap (-1: none)? */
static int any_float_engine(int max_isa) {
    qmm_engine_id fl[QMM_ENGINE_COUNT];
    for (int i = 0, n = tu_engines(TU_ENGINES_FLOAT, fl); i < n; i++)
        if (qmm_engine_usable(qmm_engine_get(fl[i]), max_isa, 0, NULL, 0)) return 1;
    return 0;
}

int main(int argc, char **argv) {
    tu_init(argc, argv, "test_fallback");
    unsetenv("QMM_MAX_ISA");
    if (!any_float_engine(-1)) {
        tu_skip("fallback", "no float engine on this machine");
        tu_finish();
        return 77;
    }
    tw t;

    /* 1a. every int8 engine disabled */
    {
        qmm_context *ctx = ctx_with(2, QMM_FALLBACK_ALLOW, -1, ALL_INT8);
        qmm_context *sctx = ctx_with(1, QMM_FALLBACK_STRICT, -1, ALL_INT8);
        if (make_int8(ctx, &t, 0, 0)) fallback_case("int8 engines disabled", ctx, sctx, &t, "disabled");
        free_tw(&t);
        qmm_context_destroy(ctx);
        qmm_context_destroy(sctx);
    }
    /* 1b. ISA cap (context option) at avx512: amx/avx512_vnni capped, the AVX2-level int8 engines disabled */
    if (any_float_engine(QMM_ISA_AVX512)) {
        uint32_t dis = (1u << QMM_ENGINE_AVX_VNNI) | (1u << QMM_ENGINE_AVX2_INT8);
        qmm_context *ctx = ctx_with(2, QMM_FALLBACK_ALLOW, QMM_ISA_AVX512, dis);
        qmm_context *sctx = ctx_with(2, QMM_FALLBACK_STRICT, QMM_ISA_AVX512, dis);
        if (make_int8(ctx, &t, 0, 0)) {
            qmm_linear_args a = qmm_linear_args_default();
            a.M = 3;
            qmm_plan_info p;
            TU_CHECK_OK(qmm_plan(ctx, t.w, &a, &p));
            if (qmm_cpu_features() & QMM_CPU_AVX512_VNNI)
                TU_CHECK(strstr(p.reason[QMM_ENGINE_AVX512_VNNI], "capped") != NULL, "cap: avx512_vnni reason '%s'",
                         p.reason[QMM_ENGINE_AVX512_VNNI]);
            TU_CHECK(!p.admitted[QMM_ENGINE_AVX512_BF16], "cap avx512 must exclude avx512_bf16");
            fallback_case("ISA capped at avx512", ctx, sctx, &t, NULL);
        }
        free_tw(&t);
        qmm_context_destroy(ctx);
        qmm_context_destroy(sctx);
    } else {
        tu_skip("fallback under QMM_MAX_ISA=avx512", "no float engine at that level");
    }
    /* 1c. ISA cap from the environment (QMM_MAX_ISA=avx2), avx2_int8 disabled: avx2_f32 runs */
    if (any_float_engine(QMM_ISA_AVX2)) {
        setenv("QMM_MAX_ISA", "avx2", 1);
        uint32_t dis = 1u << QMM_ENGINE_AVX2_INT8;
        qmm_context *ctx = ctx_with(2, QMM_FALLBACK_ALLOW, -1, dis);
        qmm_context *sctx = ctx_with(1, QMM_FALLBACK_STRICT, -1, dis);
        unsetenv("QMM_MAX_ISA");
        TU_CHECK(qmm_context_max_isa(ctx) == QMM_ISA_AVX2, "QMM_MAX_ISA=avx2 not read: %d", qmm_context_max_isa(ctx));
        if (make_int8(ctx, &t, 0, 0)) {
            qmm_linear_args a = qmm_linear_args_default();
            a.M = 2;
            qmm_plan_info p;
            TU_CHECK_OK(qmm_plan(ctx, t.w, &a, &p));
            TU_CHECK(p.engine == QMM_ENGINE_AVX2_F32, "QMM_MAX_ISA=avx2: planned %s, expected avx2_f32",
                     qmm_engine_name(p.engine));
            fallback_case("QMM_MAX_ISA=avx2", ctx, sctx, &t, NULL);
        }
        free_tw(&t);
        qmm_context_destroy(ctx);
        qmm_context_destroy(sctx);
    } else {
        tu_skip("fallback under QMM_MAX_ISA=avx2", "no float engine at that level");
    }
    /* 2. a full_precision weight */
    {
        qmm_context *ctx = ctx_with(2, QMM_FALLBACK_ALLOW, -1, 0);
        qmm_context *sctx = ctx_with(2, QMM_FALLBACK_STRICT, -1, 0);
        if (make_int8(ctx, &t, 1, 0)) fallback_case("full_precision weight", ctx, sctx, &t, "full precision");
        free_tw(&t);
        qmm_context_destroy(ctx);
        qmm_context_destroy(sctx);
    }
    /* 3. a refused case: -128 in the weight, only avx2_int8 offered */
    {
        uint32_t dis = ALL_INT8 & ~(1u << QMM_ENGINE_AVX2_INT8);
        qmm_context *ctx = ctx_with(2, QMM_FALLBACK_ALLOW, -1, dis);
        qmm_context *sctx = ctx_with(2, QMM_FALLBACK_STRICT, -1, dis);
        char why[QMM_REASON_MAX];
        if (!qmm_engine_available(QMM_ENGINE_AVX2_INT8, why, sizeof why)) {
            tu_skip("refused case (avx2_int8, -128 weight)", why);
        } else if (make_int8(ctx, &t, 0, 1)) {
            qmm_linear_args a = qmm_linear_args_default();
            a.M = 5;
            qmm_plan_info p;
            TU_CHECK_OK(qmm_plan(ctx, t.w, &a, &p));
            if (p.admitted[QMM_ENGINE_AVX2_INT8]) {
                tu_skip("refused case (avx2_int8, -128 weight)", "avx2_int8 admits weights holding -128");
            } else {
                tu_note("avx2_int8 refuses: %s", p.reason[QMM_ENGINE_AVX2_INT8]);
                fallback_case("refused by avx2_int8", ctx, sctx, &t, NULL);
            }
        }
        free_tw(&t);
        qmm_context_destroy(ctx);
        qmm_context_destroy(sctx);
    }
    /* 4. a float weight is not a fallback: strict mode runs it, fallbacks unchanged */
    {
        qmm_context *sctx = ctx_with(2, QMM_FALLBACK_STRICT, -1, 0);
        int64_t N = 37, K = 70, M = 9;
        uint16_t *wb = malloc((size_t)(N * K) * 2);
        tu_fill_float(wb, QMM_BF16, N * K, 0.1f);
        qmm_weight *w = NULL;
        TU_CHECK_OK(qmm_weight_create_float(sctx, k_name, wb, QMM_BF16, N, K, 0, NULL, QMM_F32, &w));
        float *x = malloc((size_t)(M * K) * 4), *y = malloc((size_t)(M * N) * 4);
        tu_fill_float(x, QMM_F32, M * K, 1.0f);
        qmm_linear_args a = qmm_linear_args_default();
        a.M = M;
        a.x = x;
        a.y = y;
        qmm_plan_info p;
        if (w) {
            TU_CHECK_OK(qmm_plan(sctx, w, &a, &p));
            TU_CHECK(!p.is_fallback && p.status == QMM_OK, "float weight: plan is_fallback=%d status=%s", p.is_fallback,
                     qmm_status_name(p.status));
            qmm_op_counters c0 = linear_counters(sctx), c1;
            TU_CHECK_OK(qmm_linear(sctx, w, &a));
            c1 = linear_counters(sctx);
            TU_CHECK(c1.fallbacks == c0.fallbacks && c1.calls[p.engine] == c0.calls[p.engine] + 1 &&
                         c1.calls[QMM_ENGINE_REF] == 0,
                     "float weight: counters (fallbacks %llu -> %llu)", (unsigned long long)c0.fallbacks,
                     (unsigned long long)c1.fallbacks);
            tu_note("float bf16 weight runs on %s (not a fallback)", qmm_engine_name(p.engine));
        }
        qmm_weight_destroy(w);
        free(wb);
        free(x);
        free(y);
        qmm_context_destroy(sctx);
    }
    return tu_finish();
}
