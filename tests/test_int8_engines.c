/*
 * test_int8_engines.c — ONE randomized tester for every int8 engine (amx_int8, avx512_vnni,
 * avx_vnni, avx2_int8), each named explicitly (so QMM_MAX_ISA is not needed to reach the lower
 * engines on a bigger machine), against the scalar reference engine on identical inputs:
 *   - int32 accumulators (y dtype I32) bit-exact, float outputs (f32/f16/bf16) bit-exact, token
 *     scales identical, the gaps of strided outputs untouched;
 *   - 1 and 2 threads give the same bits;
 *   - K ∈ {1, 16, 63, 64, 65, 256, 1000+odd} and past the K chunk (1536, 2071), M ∈ 1..33, past
 *     the row block (230) and 4096 (small N), N odd, N < 16 and past the task's columns (257, 300,
 *     515), ldx > K_in, ldy > N, every x dtype × out dtype × act, every convrot group (16/64/256
 *     with K a multiple), per-tensor and per-row scales, with/without bias (of each dtype), token
 *     scales computed or given (small given scales saturate q at -128 and 127: the full range
 *     VPMADDUBSW must survive), outlier activations, ±127 weights, zero / NaN / Inf rows, and
 *     weights holding -128 (an engine may refuse those: then it must say why);
 *   - both epilogues (fused, kitchen), the residual (its own buffer, or in place in y), the
 *     kitchen input acts rms_norm and situ and the modulation;
 *   - the -128 policy: avx2_int8 refuses such a weight with the reason (plan and by name) and
 *     AUTO moves past it; the u8 engines run it exactly.
 * Under QMM_MAX_ISA (tests/int8_engines.cmake: avx_vnni) the contexts take the cap, so the
 * pre-pass runs its AVX2 row kernel, and the engines above the cap are skipped.
 * An unavailable engine prints "skipped: <engine>: <why>". QMM_TEST_QUICK=1: fewer, smaller cases.
 * A failing case prints M×N×K, engine, dtype/act/gs and the first bad index.
 */
#include "numerics.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const qmm_dtype k_xt[3] = {QMM_F32, QMM_F16, QMM_BF16};
static const qmm_dtype k_yt[4] = {QMM_I32, QMM_F32, QMM_F16, QMM_BF16};
static const qmm_act k_acts[5] = {QMM_ACT_NONE, QMM_ACT_SWIGLU, QMM_ACT_GELU_TANH, QMM_ACT_RMS_NORM, QMM_ACT_SITU};

typedef struct {
    int64_t M, N, K;
    int gs;
    qmm_act act;
    qmm_dtype xt, yt;
    int per_tensor, bias, neg128, special_rows;
    int inf_row_nan_bias; /* row 0 holds +Inf (its scale is Inf), every other bias is a NaN with a payload */
    qmm_dtype bias_t;
    int64_t ldx_pad, ldy_pad;
    int kitchen;          /* QMM_EPILOGUE_KITCHEN */
    int residual;         /* 0 none, 1 its own buffer, 2 in place (residual = y) */
    int modulation;       /* a = T(a · T(1 + m)) */
    int scales_in;        /* token scales given (token_scales_in), small: q saturates */
    int outliers;         /* two values per row ×30 */
} tcase;

static qmm_context *g_ctx[3]; /* [1]: 1 thread, [2]: 2 threads */
static int g_refusals, g_cases;

static void describe(const tcase *t, qmm_engine_id e, char *buf, size_t n) {
    snprintf(buf, n, "%s M×N×K=%lldx%lldx%lld x %s out %s act %s gs %d %s-scale bias %s%s ldx+%lld ldy+%lld%s%s",
             qmm_engine_name(e), (long long)t->M, (long long)t->N, (long long)t->K, qmm_dtype_name(t->xt),
             qmm_dtype_name(t->yt), qmm_act_name(t->act), t->gs, t->per_tensor ? "tensor" : "row",
             t->bias ? qmm_dtype_name(t->bias_t) : "none", t->neg128 ? " W has -128" : "", (long long)t->ldx_pad,
             (long long)t->ldy_pad, t->kitchen ? " kitchen epilogue" : "",
             t->residual == 1 ? " residual" : t->residual == 2 ? " residual in place" : "");
    if (t->modulation) snprintf(buf + strlen(buf), n - strlen(buf), " modulated");
    if (t->scales_in) snprintf(buf + strlen(buf), n - strlen(buf), " scales given");
    if (t->outliers) snprintf(buf + strlen(buf), n - strlen(buf), " outliers");
}

/* Runs engine e (1 and 2 threads) and the reference on case t; compares everything. */
static void run_case(const tcase *t, qmm_engine_id e) {
    char what[256];
    describe(t, e, what, sizeof what);
    const int64_t M = t->M, N = t->N, K = t->K,
                  Kin = t->act == QMM_ACT_SWIGLU || t->act == QMM_ACT_SITU ? 2 * K : K;
    const int64_t ldx = Kin + t->ldx_pad, ldy = N + t->ldy_pad;
    int8_t *wq = malloc((size_t)(N * K));
    tu_fill_i8(wq, N * K, -127, 127);
    for (int i = 0; i < 8; i++) wq[tu_rand_int(0, N * K - 1)] = (int8_t)(tu_rand_int(0, 1) ? 127 : -127);
    if (t->neg128) wq[tu_rand_int(0, N * K - 1)] = -128;
    float *ws = malloc((size_t)N * 4);
    for (int64_t n = 0; n < N; n++) ws[n] = (float)tu_rand_int(1, 1 << 20) / (float)(1 << 27);
    void *bias = malloc((size_t)N * 4);
    tu_fill_float(bias, t->bias_t, N, 2.0f);
    qmm_weight_desc d = qmm_weight_desc_default();
    d.name = "test.layer";
    d.N = N;
    d.K = K;
    d.data = wq;
    d.scale = ws;
    d.n_scale = t->per_tensor ? 1 : N;
    d.bias = t->bias ? bias : NULL;
    d.bias_dtype = t->bias_t;
    d.convrot_gs = t->gs;
    qmm_weight *w = NULL;
    TU_CHECK_OK(qmm_weight_create_int8(g_ctx[1], &d, &w));
    size_t xs = qmm_dtype_size(t->xt), ys = qmm_dtype_size(t->yt);
    void *x = malloc((size_t)(M * ldx) * xs);
    tu_fill_float(x, t->xt, M * ldx, tu_rand_int(0, 3) == 0 ? 40.0f : 1.0f);
    for (int64_t r = 0; r < M && t->outliers; r++)
        for (int o = 0; o < 2; o++) qmm_store_f(x, t->xt, r * ldx + tu_rand_int(0, Kin - 1), tu_rand_normal() * 30.0f);
    float *tsi = malloc((size_t)M * 4);
    for (int64_t r = 0; r < M; r++) tsi[r] = 0.002f + 0.02f * (float)(tu_rand_u64() % 1000) / 1000.0f;
    if (t->special_rows && M > 1) {
        int64_t r = tu_rand_int(0, M - 1);
        for (int64_t k = 0; k < Kin; k++) qmm_store_f(x, t->xt, r * ldx + k, 0.0f);        /* zero row */
        r = tu_rand_int(0, M - 1);
        qmm_store_f(x, t->xt, r * ldx + tu_rand_int(0, K - 1), t->act == QMM_ACT_NONE ? INFINITY : NAN);
        r = tu_rand_int(0, M - 1);
        qmm_store_f(x, t->xt, r * ldx + tu_rand_int(0, K - 1), NAN);
    }
    if (t->inf_row_nan_bias) {
        qmm_store_f(x, t->xt, tu_rand_int(0, Kin - 1), INFINITY);
        for (int64_t n = 0; n < N; n += 2)
            tu_store_bits(bias, t->bias_t, n, t->bias_t == QMM_F32 ? 0x7fcde000u : t->bias_t == QMM_F16 ? 0x7e6fu : 0x7fcdu);
    }
    size_t ybytes = (size_t)(M * ldy) * ys;
    unsigned char *y0 = malloc(ybytes), *y1 = malloc(ybytes);
    float *s0 = malloc((size_t)M * 4), *s1 = malloc((size_t)M * 4);
    /* residual [M, ldy] and residual_scale [N] of the output dtype (float outputs) */
    const int res = t->yt == QMM_I32 ? 0 : t->residual;
    unsigned char *rbuf = malloc(ybytes), *rscale = malloc((size_t)N * 4);
    tu_fill_float(rbuf, t->yt == QMM_I32 ? QMM_F32 : t->yt, M * ldy, 3.0f);
    tu_fill_float(rscale, t->yt == QMM_I32 ? QMM_F32 : t->yt, N, 1.0f);
    memset(y0, 0xA5, ybytes);
    if (res == 2) memcpy(y0, rbuf, ybytes);
    qmm_linear_args a = qmm_linear_args_default();
    a.M = M;
    a.x = x;
    a.x_dtype = t->xt;
    a.ldx = ldx;
    a.y_dtype = t->yt;
    a.ldy = ldy;
    a.act = t->act;
    a.epilogue = t->kitchen ? QMM_EPILOGUE_KITCHEN : QMM_EPILOGUE_FUSED;
    a.token_scales_in = t->scales_in ? tsi : NULL;
    /* rms_norm weight (any float dtype) and the modulation (x's dtype) */
    float *aw = malloc((size_t)K * 4);
    void *mod = malloc((size_t)K * 4);
    tu_fill_float(aw, QMM_F32, K, 2.0f);
    tu_fill_float(mod, t->xt, K, 0.5f);
    a.act_weight = aw;
    a.act_weight_dtype = QMM_F32;
    a.act_eps = 1e-6f;
    a.modulation = t->modulation ? mod : NULL;
    if (res) {
        a.residual = res == 2 ? (const void *)y0 : rbuf;
        a.ldr = ldy;
        a.residual_scale = rscale;
    }
    a.engine = QMM_ENGINE_REF;
    a.y = y0;
    a.token_scales = s0;
    if (w) TU_CHECK_OK(qmm_linear(g_ctx[1], w, &a));
    g_cases++;
    for (int th = 1; th <= 2 && w; th++) {
        memset(y1, 0xA5, ybytes);
        if (res == 2) {
            memcpy(y1, rbuf, ybytes);
            a.residual = y1;
        }
        memset(s1, 0, (size_t)M * 4);
        a.engine = e;
        a.y = y1;
        a.token_scales = s1;
        qmm_status st = qmm_linear(g_ctx[th], w, &a);
        /* allowed, with a reason: avx2_int8 refusing weights that hold -128 (its exact scheme;
         * every other engine runs them exactly), and amx_int8's small-M rule (the emulated AMX
         * test covers small M through the kernel) */
        if (st == QMM_ERR_UNSUPPORTED && ((t->neg128 && e == QMM_ENGINE_AVX2_INT8) ||
                                          (e == QMM_ENGINE_AMX_INT8 && strstr(qmm_last_error(), "tiny M")))) {
            g_refusals++;
            TU_CHECK(strlen(qmm_last_error()) > 10, "%s: refused without a reason", what);
            break;
        }
        if (!TU_CHECK(st == QMM_OK, "%s, %d thread(s): %s: %s", what, th, qmm_status_name(st), qmm_last_error()))
            break;
        int64_t bad = -1;
        for (int64_t i = 0; i < M * ldy && bad < 0; i++)
            if (!tu_same_elem(y0, y1, t->yt, i)) bad = i; /* bits, NaN as NaN (SPEC §7) */
        if (bad >= 0) {
            TU_CHECK(0, "%s, %d thread(s): output differs at row %lld col %lld%s: ref %.9g engine %.9g", what, th,
                     (long long)(bad / ldy), (long long)(bad % ldy), bad % ldy >= N ? " (stride gap written)" : "",
                     (double)tu_load(y0, t->yt, bad), (double)tu_load(y1, t->yt, bad));
        } else {
            TU_CHECK(1, "ok");
        }
        int64_t sbad = -1;
        for (int64_t r = 0; r < M && sbad < 0; r++)
            if (!tu_same_elem(s0, s1, QMM_F32, r)) sbad = r;
        TU_CHECK(sbad < 0, "%s, %d thread(s): token scale differs at row %lld: ref %08x engine %08x", what, th,
                 (long long)sbad, sbad >= 0 ? qmm_f32_bits(s0[sbad]) : 0, sbad >= 0 ? qmm_f32_bits(s1[sbad]) : 0);
    }
    qmm_weight_destroy(w);
    free(wq);
    free(ws);
    free(bias);
    free(x);
    free(y0);
    free(y1);
    free(s0);
    free(s1);
    free(rbuf);
    free(rscale);
    free(aw);
    free(mod);
    free(tsi);
}

static const int64_t k_K[] = {1, 16, 63, 64, 65, 256, 1001};

/* a random case; K from the list (or a multiple of gs) */
static tcase random_case(int64_t M, int64_t N, int64_t K) {
    tcase t;
    memset(&t, 0, sizeof t);
    t.M = M;
    t.N = N;
    t.act = k_acts[tu_rand_int(0, 4)];
    t.xt = k_xt[tu_rand_int(0, 2)];
    t.yt = k_yt[tu_rand_int(0, 3)];
    static const int gss[6] = {0, 16, 64, 256, 4, 1024};
    t.gs = gss[tu_rand_int(0, 5)];
    if (K <= 0) K = k_K[tu_rand_int(0, 6)];
    if (t.gs && K % t.gs) K = t.gs * tu_rand_int(1, 4);
    t.K = K;
    t.per_tensor = (int)tu_rand_int(0, 1);
    t.bias = (int)tu_rand_int(0, 1);
    t.bias_t = k_xt[tu_rand_int(0, 2)];
    t.neg128 = tu_rand_int(0, 7) == 0;
    t.special_rows = tu_rand_int(0, 5) == 0;
    t.ldx_pad = tu_rand_int(0, 2) ? 0 : tu_rand_int(1, 9);
    t.ldy_pad = tu_rand_int(0, 2) ? 0 : tu_rand_int(1, 9);
    t.kitchen = (int)tu_rand_int(0, 1);
    t.residual = tu_rand_int(0, 3) ? 0 : (int)tu_rand_int(1, 2);
    t.modulation = tu_rand_int(0, 5) == 0;
    t.scales_in = tu_rand_int(0, 3) == 0;
    t.outliers = (int)tu_rand_int(0, 1);
    return t;
}

static int64_t random_n(void) {
    static const int64_t ns[] = {1, 2, 3, 5, 7, 13, 15, 16, 17, 31, 33, 47, 63, 65, 97, 129, 257};
    return ns[tu_rand_int(0, (int64_t)(sizeof ns / sizeof ns[0]) - 1)];
}

static void test_engine(qmm_engine_id e, int quick) {
    char why[256];
    if (!qmm_engine_available(e, why, sizeof why)) {
        tu_skip(qmm_engine_name(e), why);
        return;
    }
    int before = g_cases;
    /* M = 1..33, every K of the list in turn, every act, every dtype */
    for (int64_t M = 1; M <= 33; M += quick ? 4 : 1) {
        tcase t = random_case(M, random_n(), k_K[M % 7]);
        t.act = k_acts[M % 5];
        t.yt = k_yt[M % 4];
        run_case(&t, e);
    }
    /* each K × each x dtype × each out dtype at least once */
    for (int ki = 0; ki < 7; ki++)
        for (int xi = 0; xi < 3; xi++) {
            tcase t = random_case(tu_rand_int(1, 20), random_n(), k_K[ki]);
            t.gs = 0;
            t.K = k_K[ki];
            t.xt = k_xt[xi];
            t.yt = k_yt[(ki + xi) % 4];
            run_case(&t, e);
        }
    /* every x dtype × out dtype × act of the pre-pass, small M */
    for (int xi = 0; xi < 3; xi++)
        for (int yi = 0; yi < 4; yi++)
            for (int ai = 0; ai < 3; ai++) {
                tcase t = random_case(tu_rand_int(1, 12), 33, 256);
                t.xt = k_xt[xi];
                t.yt = k_yt[yi];
                t.act = k_acts[ai];
                run_case(&t, e);
            }
    /* K past the K chunk (512 bytes) with small M; N past the task's 256 columns */
    static const int64_t k_K_long[] = {1536, 2071}, k_N_long[] = {257, 300, 515};
    for (int ki = 0; ki < 2; ki++) {
        tcase t = random_case(tu_rand_int(1, 33), random_n(), k_K_long[ki]);
        t.gs = 0;
        t.K = k_K_long[ki];
        run_case(&t, e);
    }
    for (int ni = 0; ni < 3; ni++) {
        tcase t = random_case(tu_rand_int(1, 20), k_N_long[ni], 0);
        run_case(&t, e);
    }
    /* each convrot group with each act */
    for (int g = 4; g <= 1024; g *= 4)
        for (int ai = 0; ai < 5; ai++) {
            tcase t = random_case(tu_rand_int(1, 40), random_n(), g * tu_rand_int(1, 3));
            t.gs = g;
            t.act = k_acts[ai];
            run_case(&t, e);
        }
    /* full register tiles with K chunks and partial sums (M > 18, N ≥ 64, K > 512) */
    for (int i = 0; i < 2; i++) {
        tcase t = random_case(40 + i * 163, 70 + i * 130, 1001);
        t.gs = 0;
        t.K = 1001;
        run_case(&t, e);
    }
    /* past the row block and the channel block, several K chunks */
    {
        tcase t = random_case(quick ? 100 : 230, quick ? 270 : 530, quick ? 1024 : 2304);
        t.gs = 0;
        t.K = quick ? 1024 : 2304;
        run_case(&t, e);
    }
    /* random cases, larger shapes, and M = 4096 with small N */
    for (int i = 0; i < (quick ? 6 : 60); i++) {
        tcase t = random_case(tu_rand_int(1, 300), tu_rand_int(1, 300), 0);
        run_case(&t, e);
    }
    for (int i = 0; i < (quick ? 1 : 3); i++) {
        tcase t = random_case(quick ? 1024 : 4096, tu_rand_int(1, 24), i ? 1001 : 0);
        run_case(&t, e);
    }
    /* a row whose scale is Inf and NaN biases with a payload — the output is NaN there on
     * every engine, but its payload/sign is unspecified (SPEC §7): compared as NaN, the rest bit for
     * bit. Every float out dtype, M = 1 (single-row kernels) and M >= 8 (tiles). */
    for (int yi = 1; yi < 4; yi++)
        for (int64_t M = 1; M <= 16; M += 7) {
            tcase t = random_case(M, random_n(), 0);
            t.act = QMM_ACT_NONE;
            t.yt = k_yt[yi];
            t.bias = 1;
            t.bias_t = k_xt[tu_rand_int(0, 2)];
            t.neg128 = 0;
            t.special_rows = 0;
            t.inf_row_nan_bias = 1;
            run_case(&t, e);
        }
    /* weights holding -128, every dtype pair */
    for (int yi = 0; yi < 4; yi++) {
        tcase t = random_case(tu_rand_int(1, 33), random_n(), 0);
        t.neg128 = 1;
        t.yt = k_yt[yi];
        run_case(&t, e);
    }
    tu_note("%s: %d cases", qmm_engine_name(e), g_cases - before);
}

/* The -128 policy: avx2_int8 refuses a weight holding -128 (plan shows the reason, AUTO moves on,
 * by name it fails with the reason); the u8 engines run it exactly (the cases above). */
static void test_neg128_policy(void) {
    char why[QMM_REASON_MAX];
    if (!qmm_engine_available(QMM_ENGINE_AVX2_INT8, why, sizeof why)) {
        tu_skip("avx2_int8 -128 refusal", why);
        return;
    }
    int8_t wq[4 * 64];
    tu_fill_i8(wq, 4 * 64, -127, 127);
    wq[77] = -128;
    float sc = 0.01f;
    qmm_weight_desc wd = qmm_weight_desc_default();
    wd.name = "neg128.layer";
    wd.N = 4;
    wd.K = 64;
    wd.data = wq;
    wd.scale = &sc;
    wd.n_scale = 1;
    qmm_weight *w;
    TU_CHECK_OK(qmm_weight_create_int8(g_ctx[2], &wd, &w));
    qmm_linear_args a = qmm_linear_args_default();
    a.M = 2;
    qmm_plan_info p;
    TU_CHECK_OK(qmm_plan(g_ctx[2], w, &a, &p));
    TU_CHECK(!p.admitted[QMM_ENGINE_AVX2_INT8] && strstr(p.reason[QMM_ENGINE_AVX2_INT8], "-128"),
             "avx2_int8 must refuse a -128 weight with the reason; got admitted=%d reason '%s'",
             p.admitted[QMM_ENGINE_AVX2_INT8], p.reason[QMM_ENGINE_AVX2_INT8]);
    TU_CHECK(p.engine != QMM_ENGINE_AVX2_INT8, "dispatch must move past avx2_int8 (chose %s)", qmm_engine_name(p.engine));
    float x[2 * 64], y[2 * 4];
    tu_fill_float(x, QMM_F32, 2 * 64, 1.0f);
    a.x = x;
    a.y = y;
    a.engine = QMM_ENGINE_AVX2_INT8;
    qmm_status st = qmm_linear(g_ctx[2], w, &a);
    TU_CHECK(st == QMM_ERR_UNSUPPORTED && strstr(qmm_last_error(), "-128"), "avx2_int8 by name on a -128 weight: %s (%s)",
             qmm_status_name(st), qmm_last_error());
    qmm_weight_destroy(w);
}

/* the comparison itself: NaN matches any NaN, nothing else is loosened */
static void test_same_elem(void) {
    const float f[] = {0.0f, -0.0f, 1.0f, 0x1.000002p0f, INFINITY, -INFINITY, NAN, -NAN};
    float a[1], b[1];
    int ok = 1;
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 8; j++) {
            a[0] = f[i];
            b[0] = f[j];
            ok &= tu_same_elem(a, b, QMM_F32, 0) == (i == j || (i >= 6 && j >= 6));
        }
    uint32_t p = 0x7fcde000u, q = 0xffc00000u, r = 0x7f800001u;
    ok &= tu_same_elem(&p, &q, QMM_F32, 0) && tu_same_elem(&p, &r, QMM_F32, 0);
    ok &= !tu_same_elem(&p, &q, QMM_I32, 0); /* int32 accumulators: bits only */
    uint16_t h[4] = {0x7e6f, 0xfe00, 0x7c00, 0x8000}, g[1] = {0x0000};
    ok &= tu_same_elem(h, h + 1, QMM_F16, 0) && !tu_same_elem(h + 2, h + 1, QMM_F16, 0) &&
          !tu_same_elem(h + 3, g, QMM_F16, 0);
    uint16_t bb[3] = {0x7fcd, 0xffc0, 0x7f80};
    ok &= tu_same_elem(bb, bb + 1, QMM_BF16, 0) && !tu_same_elem(bb, bb + 2, QMM_BF16, 0);
    TU_CHECK(ok, "tu_same_elem: NaN == NaN of any payload/sign; ±0, ±Inf, 1 ulp and int32 bits still differ");
}

int main(int argc, char **argv) {
    tu_init(argc, argv, "test_int8_engines");
    test_same_elem();
    int quick = getenv("QMM_TEST_QUICK") != NULL;
    for (int th = 1; th <= 2; th++) {
        qmm_context_options o = qmm_context_options_default();
        o.n_threads = th;
        /* engines are named explicitly, so no cap is needed to reach the lower ones; a cap in the
         * environment is taken (the AVX2 pre-pass under QMM_MAX_ISA=avx_vnni) */
        o.max_isa = getenv("QMM_MAX_ISA") ? -1 : QMM_ISA_MAX;
        o.verbose = 0;
        if (qmm_context_create(&o, &g_ctx[th]) != QMM_OK) {
            printf("cannot create a context: %s\n", qmm_last_error());
            return 1;
        }
    }
    qmm_engine_id i8[QMM_ENGINE_COUNT];
    for (int i = 0, n = tu_engines(TU_ENGINES_INT8, i8); i < n; i++) test_engine(i8[i], quick);
    test_neg128_policy();
    if (g_refusals) tu_note("%d runs refused weights holding -128 (with a reason)", g_refusals);
    tu_note("%lld NaN outputs matched as NaN with other payload/sign bits", (long long)tu_nan_matched());
    qmm_context_destroy(g_ctx[1]);
    qmm_context_destroy(g_ctx[2]);
    return tu_finish();
}
