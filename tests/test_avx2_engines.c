/*
 * test_avx2_engines.c — the 256-bit int8 engines (avx_vnni, avx2_int8) against the scalar
 * reference engine: int32 accumulators AND float outputs bit-identical (the design makes every
 * int8 engine produce the reference's bits), every x/out dtype, input_act and convrot size,
 * K ∈ {1, 16, 63, 64, 65, 256, 1000+odd, >KC}, M ∈ 1..33 and past the row block (96), N odd,
 * N < 16 and past the channel block (256), strided x/y (padding untouched), per-tensor/per-row
 * scales, bias of each dtype, token scales out and in (small given scales saturate q at -128 and
 * 127: the full-range case VPMADDUBSW must survive), NaN/Inf rows, 1 and 2 threads identical.
 * Also: avx2_int8 refuses a weight holding -128 with its reason (dispatch moves on), avx_vnni
 * runs it exactly. An engine this CPU lacks is skipped visibly.
 */
#include "numerics.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int g_quick;

typedef struct {
    int64_t M, N, K;
    qmm_dtype T, Y, B;
    qmm_act act;
    int gs, per_tensor, bias, scales_in, nonfinite, neg128;
} tcase;

static const char *desc(const tcase *t, char *buf, size_t n) {
    snprintf(buf, n, "%lldx%lldx%lld x=%s y=%s act=%s gs=%d %s bias=%s%s%s", (long long)t->M, (long long)t->N,
             (long long)t->K, qmm_dtype_name(t->T), qmm_dtype_name(t->Y), qmm_act_name(t->act), t->gs,
             t->per_tensor ? "per-tensor" : "per-row", t->bias ? qmm_dtype_name(t->B) : "none",
             t->scales_in ? " scales_in" : "", t->nonfinite ? " nonfinite" : "");
    return buf;
}

/* Runs engine e on ctx; returns y (ldy-strided, padded with 0x5a) and the token scales. */
static qmm_status run_engine(qmm_context *ctx, const qmm_weight *w, const tcase *t, qmm_engine_id e, const void *x,
                             int64_t ldx, qmm_dtype Y, void *y, int64_t ldy, float *ts, const float *ts_in) {
    size_t ys = qmm_dtype_size(Y);
    memset(y, 0x5a, (size_t)(t->M * ldy) * ys);
    qmm_linear_args a = qmm_linear_args_default();
    a.M = t->M;
    a.x = x;
    a.x_dtype = t->T;
    a.ldx = ldx;
    a.y = y;
    a.y_dtype = Y;
    a.ldy = ldy;
    a.act = t->act;
    a.token_scales = ts;
    a.token_scales_in = ts_in;
    a.engine = e;
    return qmm_linear(ctx, w, &a);
}

/* First differing element of two (M, ldy) outputs of dtype t, or -1. Compares whole rows incl.
 * padding; bits, NaN as NaN (tu_same_elem, SPEC §7). */
static int64_t first_diff(const void *a, const void *b, int64_t M, int64_t ldy, qmm_dtype t) {
    return tu_first_diff(a, b, t, M * ldy);
}

static int run_case(qmm_context *c1, qmm_context *c2, qmm_engine_id e, const tcase *t) {
    char d[256];
    desc(t, d, sizeof d);
    const int64_t M = t->M, N = t->N, K = t->K, K_in = t->act == QMM_ACT_SWIGLU ? 2 * K : K;
    const int64_t ldx = K_in + tu_rand_int(0, 3), ldy = N + tu_rand_int(0, 3);
    const size_t xs = qmm_dtype_size(t->T), ys = qmm_dtype_size(t->Y);
    void *x = malloc((size_t)(M * ldx) * xs);
    int8_t *wq = malloc((size_t)(N * K));
    float *sc = malloc(sizeof(float) * (size_t)N);
    float *biasf = malloc(sizeof(float) * (size_t)N);
    uint16_t *biash = malloc(sizeof(uint16_t) * (size_t)N);
    float *tsi = malloc(sizeof(float) * (size_t)M);
    float *ts[3];
    void *y[3];
    int32_t *acc[3];
    for (int i = 0; i < 3; i++) {
        ts[i] = malloc(sizeof(float) * (size_t)M);
        y[i] = malloc((size_t)(M * ldy) * ys);
        acc[i] = malloc(sizeof(int32_t) * (size_t)(M * ldy));
    }
    tu_fill_float(x, t->T, M * ldx, 1.0f);
    for (int64_t r = 0; r < M; r++)
        for (int o = 0; o < 2; o++) qmm_store_f(x, t->T, r * ldx + tu_rand_int(0, K_in - 1), tu_rand_normal() * 30.0f);
    if (t->nonfinite && M > 1) {
        qmm_store_f(x, t->T, 0 * ldx + tu_rand_int(0, K_in - 1), NAN);
        qmm_store_f(x, t->T, (M - 1) * ldx + tu_rand_int(0, K_in - 1), INFINITY);
    }
    tu_fill_i8(wq, N * K, -127, 127);
    /* some extreme weights, and -128 when asked */
    for (int i = 0; i < 8; i++) wq[tu_rand_int(0, N * K - 1)] = (int8_t)(tu_rand_int(0, 1) ? 127 : -127);
    if (t->neg128) wq[tu_rand_int(0, N * K - 1)] = -128;
    for (int64_t n = 0; n < N; n++) {
        sc[n] = 0.0005f + 0.01f * (float)(tu_rand_u64() % 1000) / 1000.0f;
        biasf[n] = tu_rand_normal();
        biash[n] = t->B == QMM_F16 ? qmm_f32_to_f16(biasf[n]) : qmm_f32_to_bf16(biasf[n]);
    }
    for (int64_t r = 0; r < M; r++) tsi[r] = 0.002f + 0.02f * (float)(tu_rand_u64() % 1000) / 1000.0f;
    qmm_weight_desc wd = qmm_weight_desc_default();
    wd.name = "test.avx2";
    wd.N = N;
    wd.K = K;
    wd.data = wq;
    wd.scale = sc;
    wd.n_scale = t->per_tensor ? 1 : N;
    wd.bias = t->bias ? (t->B == QMM_F32 ? (const void *)biasf : (const void *)biash) : NULL;
    wd.bias_dtype = t->B;
    wd.convrot_gs = t->gs;
    qmm_weight *w = NULL;
    int ok = TU_CHECK(qmm_weight_create_int8(c2, &wd, &w) == QMM_OK, "%s: create: %s", d, qmm_last_error());
    const float *tin = t->scales_in ? tsi : NULL;
    if (ok) {
        /* 0: reference; 1: engine, 1 thread; 2: engine, 2 threads */
        qmm_context *ctxs[3] = {c1, c1, c2};
        qmm_engine_id ids[3] = {QMM_ENGINE_REF, e, e};
        for (int i = 0; i < 3 && ok; i++) {
            qmm_status st = run_engine(ctxs[i], w, t, ids[i], x, ldx, t->Y, y[i], ldy, ts[i], tin);
            ok &= TU_CHECK(st == QMM_OK, "%s: %s: %s", d, qmm_engine_name(ids[i]), qmm_last_error());
            st = run_engine(ctxs[i], w, t, ids[i], x, ldx, QMM_I32, acc[i], ldy, ts[i], tin);
            ok &= TU_CHECK(st == QMM_OK, "%s: %s i32: %s", d, qmm_engine_name(ids[i]), qmm_last_error());
        }
        for (int i = 1; i < 3 && ok; i++) {
            const char *th = i == 1 ? "1 thread" : "2 threads";
            int64_t bad = first_diff(acc[0], acc[i], M, ldy, QMM_I32);
            ok &= TU_CHECK(bad < 0, "%s: engine %s (%s): acc[%lld][%lld] = %d, reference %d", d, qmm_engine_name(e), th,
                           (long long)(bad / ldy), (long long)(bad % ldy), bad < 0 ? 0 : acc[i][bad],
                           bad < 0 ? 0 : acc[0][bad]);
            bad = first_diff(y[0], y[i], M, ldy, t->Y);
            ok &= TU_CHECK(bad < 0, "%s: engine %s (%s): y[%lld][%lld] = %.9g, reference %.9g (bits differ)", d,
                           qmm_engine_name(e), th, (long long)(bad / ldy), (long long)(bad % ldy),
                           bad < 0 ? 0.0 : (double)tu_load(y[i], t->Y, bad), bad < 0 ? 0.0 : (double)tu_load(y[0], t->Y, bad));
            bad = first_diff(ts[0], ts[i], M, 1, QMM_F32);
            ok &= TU_CHECK(bad < 0, "%s: engine %s (%s): token scale[%lld] = %g, reference %g", d, qmm_engine_name(e),
                           th, (long long)bad, bad < 0 ? 0.0 : ts[i][bad], bad < 0 ? 0.0 : ts[0][bad]);
        }
    }
    qmm_weight_destroy(w);
    free(x); free(wq); free(sc); free(biasf); free(biash); free(tsi);
    for (int i = 0; i < 3; i++) { free(ts[i]); free(y[i]); free(acc[i]); }
    return ok;
}

static void random_case(tcase *t, int64_t M, int64_t N, int64_t K) {
    static const qmm_dtype fd[3] = {QMM_F32, QMM_F16, QMM_BF16};
    static const qmm_dtype yd[3] = {QMM_F32, QMM_F16, QMM_BF16};
    memset(t, 0, sizeof *t);
    t->M = M; t->N = N; t->K = K;
    t->T = fd[tu_rand_int(0, 2)];
    t->Y = yd[tu_rand_int(0, 2)];
    t->B = fd[tu_rand_int(0, 2)];
    t->act = (qmm_act)tu_rand_int(0, 2);
    int gss[4] = {0, 16, 64, 256};
    t->gs = gss[tu_rand_int(0, 3)];
    if (t->gs && K % t->gs) t->gs = K % 16 ? 0 : 16;
    t->per_tensor = tu_rand_int(0, 3) == 0;
    t->bias = tu_rand_int(0, 2) != 0;
    t->scales_in = tu_rand_int(0, 3) == 0;
    t->nonfinite = tu_rand_int(0, 9) == 0;
}

/* avx2_int8 refuses a weight with -128 (plan shows the reason, AUTO moves on); avx_vnni is exact on it. */
static void test_neg128(qmm_context *c1, qmm_context *c2, int have_avx2, int have_vnni) {
    tcase t;
    random_case(&t, 5, 37, 130);
    t.neg128 = 1;
    t.nonfinite = 0;
    if (have_vnni) run_case(c1, c2, QMM_ENGINE_AVX_VNNI, &t);
    if (!have_avx2) { tu_skip("avx2_int8", "-128 refusal: engine unavailable"); return; }
    int8_t wq[4 * 64];
    tu_fill_i8(wq, 4 * 64, -127, 127);
    wq[77] = -128;
    float sc = 0.01f;
    qmm_weight_desc wd = qmm_weight_desc_default();
    wd.name = "neg128.layer"; wd.N = 4; wd.K = 64; wd.data = wq; wd.scale = &sc; wd.n_scale = 1;
    qmm_weight *w;
    TU_CHECK_OK(qmm_weight_create_int8(c2, &wd, &w));
    qmm_linear_args a = qmm_linear_args_default();
    a.M = 2;
    qmm_plan_info p;
    TU_CHECK_OK(qmm_plan(c2, w, &a, &p));
    TU_CHECK(!p.admitted[QMM_ENGINE_AVX2_INT8] && strstr(p.reason[QMM_ENGINE_AVX2_INT8], "-128"),
             "avx2_int8 must refuse a -128 weight with the reason; got admitted=%d reason '%s'",
             p.admitted[QMM_ENGINE_AVX2_INT8], p.reason[QMM_ENGINE_AVX2_INT8]);
    TU_CHECK(p.engine != QMM_ENGINE_AVX2_INT8, "dispatch must move past avx2_int8 (chose %s)", qmm_engine_name(p.engine));
    float x[2 * 64], y[2 * 4];
    tu_fill_float(x, QMM_F32, 2 * 64, 1.0f);
    a.x = x; a.y = y; a.engine = QMM_ENGINE_AVX2_INT8;
    qmm_status st = qmm_linear(c2, w, &a);
    TU_CHECK(st == QMM_ERR_UNSUPPORTED && strstr(qmm_last_error(), "-128"),
             "avx2_int8 by name on a -128 weight: %s (%s)", qmm_status_name(st), qmm_last_error());
    qmm_weight_destroy(w);
}

int main(int argc, char **argv) {
    tu_init(argc, argv, "test_avx2_engines");
    g_quick = getenv("QMM_TEST_QUICK") != NULL;
    qmm_context_options o = qmm_context_options_default();
    o.n_threads = 1;
    qmm_context *c1, *c2;
    TU_CHECK_OK(qmm_context_create(&o, &c1));
    o.n_threads = 2;
    TU_CHECK_OK(qmm_context_create(&o, &c2));
    const qmm_engine_id engines[2] = {QMM_ENGINE_AVX_VNNI, QMM_ENGINE_AVX2_INT8};
    int have[2];
    const int64_t Ks[] = {1, 16, 63, 64, 65, 256, 1001, 1536, 2071};
    const int64_t Ns[] = {1, 7, 15, 16, 17, 33, 100, 257, 300, 515};
    for (int ei = 0; ei < 2; ei++) {
        char why[QMM_REASON_MAX];
        have[ei] = qmm_engine_available(engines[ei], why, sizeof why);
        if (!have[ei]) { tu_skip(qmm_engine_name(engines[ei]), why); continue; }
        int cases = 0, failed = 0;
        /* every K with small M, N */
        for (size_t i = 0; i < sizeof Ks / sizeof Ks[0]; i++) {
            tcase t;
            random_case(&t, tu_rand_int(1, 33), Ns[tu_rand_int(0, 6)], Ks[i]);
            cases++; failed += !run_case(c1, c2, engines[ei], &t);
        }
        /* every N */
        for (size_t i = 0; i < sizeof Ns / sizeof Ns[0]; i++) {
            tcase t;
            random_case(&t, tu_rand_int(1, 20), Ns[i], Ks[tu_rand_int(0, 6)]);
            cases++; failed += !run_case(c1, c2, engines[ei], &t);
        }
        /* M 1..33 */
        for (int64_t M = 1; M <= 33; M += g_quick ? 8 : 1) {
            tcase t;
            random_case(&t, M, Ns[tu_rand_int(0, 7)], Ks[tu_rand_int(0, 6)]);
            cases++; failed += !run_case(c1, c2, engines[ei], &t);
        }
        /* every dtype pair × act explicitly */
        for (int T = 0; T < 3; T++)
            for (int Y = 0; Y < 3; Y++)
                for (int act = 0; act < 3; act++) {
                    tcase t;
                    random_case(&t, tu_rand_int(1, 12), 33, 256);
                    t.T = (qmm_dtype)T; t.Y = (qmm_dtype)Y; t.act = (qmm_act)act;
                    cases++; failed += !run_case(c1, c2, engines[ei], &t);
                }
        /* larger: past the row block (96) and the channel block (256), full K blocks */
        {
            tcase t;
            random_case(&t, g_quick ? 100 : 230, g_quick ? 270 : 530, g_quick ? 1024 : 2304);
            cases++; failed += !run_case(c1, c2, engines[ei], &t);
            if (!g_quick) {
                random_case(&t, 4096, 40, 256);
                t.nonfinite = 0;
                cases++; failed += !run_case(c1, c2, engines[ei], &t);
            }
        }
        tu_note("%s: %d cases, %d failed", qmm_engine_name(engines[ei]), cases, failed);
    }
    test_neg128(c1, c2, have[1], have[0]);
    qmm_context_destroy(c1);
    qmm_context_destroy(c2);
    return tu_finish();
}
