/*
 * test_float_engines.c — the same-device float engines (avx512_bf16, avx512_f32, avx2_f32), each
 * asked for by name, against an fp64 computation on the same rounded operands:
 *   a = act(x) (rotated for int8 weights with convrot, exactly qmm_ref_act_rotate_row), rounded
 *   to bf16 for the BF16 engine; W = the int8 values (W8A16), or the float weight (bf16 exact,
 *   f16 → f32 exact, f32);  y = out(acc · w_scale + bias) (int8) or out(acc + bias) (float).
 * Tolerance per element: fp32 summation noise (K + 4) · 2^-24 · Σ|a·w| (· |w_scale|) plus 1 ulp of
 * the output dtype at the expected value (and 2^-23 |expected| for the epilogue's fp32 steps).
 * Shape sweep as the int8 tester: M 1..33 and a big one, K 1/63/64/65/256/1001, odd N and N < 16,
 * strided x/y (padding of y untouched), every dtype and act, with and without rotation/bias,
 * per-tensor and per-row scales. Also: 1 vs 2 threads give identical bits; avx2_f32 and
 * avx512_f32 give identical bits (one FMA chain over k); avx512_bf16 refuses f32 weights.
 */
#include "testutil.h"

#include "dispatch.h"
#include "numerics.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* the float engines of the engine table but amx_bf16, which has its own tester (test_amx_emulated,
 * which also sweeps the real engine where the CPU has AMX) */
static qmm_engine_id k_engines[QMM_ENGINE_COUNT];
static int N_ENG;
static double g_worst[QMM_ENGINE_COUNT]; /* worst |err| / tolerance, per engine */

typedef struct {
    int64_t N, K;
    int kind;               /* 0 int8, 1 bf16 float, 2 f32 float, 3 f16 float (stored f32) */
    int gs, per_tensor;
    qmm_dtype bias_dtype;
    int has_bias;
    int8_t *wq;             /* [N][K] */
    void *wf;               /* [N][K] float of wdt */
    qmm_dtype wdt;
    float *scale;           /* [N] (per-tensor: all equal) */
    void *bias;
    float *biasf;           /* [N] the bias as fp32 */
    qmm_weight *w;
} wcase;

static float wval(const wcase *c, int64_t n, int64_t k) {
    if (c->kind == 0) return (float)c->wq[n * c->K + k];
    return qmm_load_f(c->wf, c->wdt, n * c->K + k);
}

static void wcase_free(wcase *c) {
    qmm_weight_destroy(c->w);
    free(c->wq);
    free(c->wf);
    free(c->scale);
    free(c->bias);
    free(c->biasf);
}

static int make_weight(qmm_context *ctx, wcase *c) {
    const int64_t N = c->N, K = c->K;
    c->scale = malloc((size_t)N * sizeof(float));
    c->biasf = calloc((size_t)N, sizeof(float));
    float s0 = 0.001f + 0.01f * (float)tu_rand_int(1, 100) / 100.0f;
    for (int64_t n = 0; n < N; n++) c->scale[n] = c->per_tensor ? s0 : 0.001f + 0.01f * (float)tu_rand_int(1, 100) / 100.0f;
    if (c->has_bias) {
        c->bias = malloc((size_t)N * 4);
        tu_fill_float(c->bias, c->bias_dtype, N, 0.5f);
        for (int64_t n = 0; n < N; n++) c->biasf[n] = qmm_load_f(c->bias, c->bias_dtype, n);
    }
    qmm_status st;
    if (c->kind == 0) {
        c->wq = malloc((size_t)(N * K));
        tu_fill_i8(c->wq, N * K, -128, 127);
        qmm_weight_desc d = qmm_weight_desc_default();
        d.name = "test.float";
        d.N = N;
        d.K = K;
        d.data = c->wq;
        d.scale = c->scale;
        d.n_scale = c->per_tensor ? 1 : N;
        d.bias = c->bias;
        d.bias_dtype = c->bias_dtype;
        d.convrot_gs = c->gs;
        d.full_precision = 1;
        st = qmm_weight_create_int8(ctx, &d, &c->w);
    } else {
        c->wdt = c->kind == 1 ? QMM_BF16 : c->kind == 2 ? QMM_F32 : QMM_F16;
        c->wf = malloc((size_t)(N * K) * 4);
        tu_fill_float(c->wf, c->wdt, N * K, 0.1f);
        st = qmm_weight_create_float(ctx, "test.float", c->wf, c->wdt, N, K, 0, c->bias, c->bias_dtype, &c->w);
    }
    TU_CHECK(st == QMM_OK, "weight create [%lld, %lld] kind %d: %s", (long long)N, (long long)K, c->kind,
             qmm_last_error());
    return st == QMM_OK;
}

static const qmm_dtype k_fdt[] = {QMM_F32, QMM_F16, QMM_BF16};

/* runs engine e on (wc, M) and compares with fp64; returns 1 if it ran */
static void run_case(qmm_context *ctx1, qmm_context *ctx2, const wcase *wc, int64_t M, qmm_engine_id e) {
    const int64_t N = wc->N, K = wc->K;
    qmm_dtype xt = k_fdt[tu_rand_int(0, 2)], yt = k_fdt[tu_rand_int(0, 2)];
    qmm_act act = (qmm_act)tu_rand_int(0, 2);
    int64_t K_in = act == QMM_ACT_SWIGLU ? 2 * K : K;
    int64_t ldx = K_in + (tu_rand_int(0, 2) ? 0 : tu_rand_int(1, 9));
    int64_t ldy = N + (tu_rand_int(0, 2) ? 0 : tu_rand_int(1, 9));
    size_t xs = qmm_dtype_size(xt), ys = qmm_dtype_size(yt);
    void *x = malloc((size_t)(M * ldx) * xs);
    tu_fill_float(x, xt, M * ldx, 1.0f);
    unsigned char *y1 = malloc((size_t)(M * ldy) * ys), *y2 = malloc((size_t)(M * ldy) * ys);
    memset(y1, 0xA5, (size_t)(M * ldy) * ys);
    memset(y2, 0x5A, (size_t)(M * ldy) * ys);
    qmm_linear_args a = qmm_linear_args_default();
    a.M = M;
    a.x = x;
    a.x_dtype = xt;
    a.ldx = ldx;
    a.y = y1;
    a.y_dtype = yt;
    a.ldy = ldy;
    a.act = act;
    a.engine = e;
    const char *en = qmm_engine_name(e);
    int is_bf16 = qmm_engine_get(e)->operands == QMM_BF16;
    qmm_status st = qmm_linear(ctx1, wc->w, &a);
    if (is_bf16 && wc->kind >= 2) {
        TU_CHECK(st == QMM_ERR_UNSUPPORTED && strstr(qmm_last_error(), "f32 weights"),
                 "%s must refuse f32 weights: %s %s", en, qmm_status_name(st), qmm_last_error());
        goto out;
    }
    if (!TU_CHECK(st == QMM_OK, "%s M=%lld N=%lld K=%lld: %s: %s", en, (long long)M, (long long)N, (long long)K,
                  qmm_status_name(st), qmm_last_error()))
        goto out;
    a.y = y2;
    st = qmm_linear(ctx2, wc->w, &a);
    TU_CHECK(st == QMM_OK, "%s (2 threads): %s", en, qmm_last_error());
    /* padding must be untouched; compare only the N columns across thread counts */
    int64_t bad = -1;
    for (int64_t r = 0; r < M && bad < 0; r++)
        if (memcmp(y1 + (size_t)(r * ldy) * ys, y2 + (size_t)(r * ldy) * ys, (size_t)N * ys)) bad = r;
    TU_CHECK(bad < 0, "%s M×N×K=%lld×%lld×%lld: 1 vs 2 threads differ in row %lld", en, (long long)M, (long long)N,
             (long long)K, (long long)bad);
    int pad_ok = 1;
    for (int64_t r = 0; r < M; r++)
        for (size_t b = (size_t)N * ys; b < (size_t)ldy * ys; b++) pad_ok &= y1[(size_t)(r * ldy) * ys + b] == 0xA5;
    TU_CHECK(pad_ok, "%s M×N×K=%lld×%lld×%lld: y padding written (ldy=%lld)", en, (long long)M, (long long)N,
             (long long)K, (long long)ldy);

    float *arow = malloc((size_t)(K + 16) * sizeof(float));
    int gs = wc->kind == 0 ? wc->gs : 0;
    double worst = 0;
    int64_t first_bad = -1;
    double bad_got = 0, bad_want = 0, bad_tol = 0;
    for (int64_t r = 0; r < M && first_bad < 0; r++) {
        qmm_ref_act_rotate_row((const char *)x + (size_t)(r * ldx) * xs, xt, K, act, gs, arow);
        if (is_bf16)
            for (int64_t k = 0; k < K; k++) arow[k] = qmm_round_to(arow[k], QMM_BF16);
        for (int64_t n = 0; n < N; n++) {
            double acc = 0, sabs = 0;
            for (int64_t k = 0; k < K; k++) {
                double p = (double)arow[k] * (double)wval(wc, n, k);
                acc += p;
                sabs += fabs(p);
            }
            double ws = wc->kind == 0 ? wc->scale[n] : 1.0;
            double want = acc * ws + wc->biasf[n];
            double tol = (double)(K + 4) * ldexp(sabs * fabs(ws), -24) + ldexp(fabs(want), -23) +
                         ldexp(fabs(wc->biasf[n]), -24) + tu_ulp(want, yt);
            double got = tu_load(y1, yt, r * ldy + n);
            double err = fabs(got - want);
            if (err / tol > worst) worst = err / tol;
            if (!(err <= tol)) {
                first_bad = r * N + n;
                bad_got = got;
                bad_want = want;
                bad_tol = tol;
                break;
            }
        }
    }
    TU_CHECK(first_bad < 0,
             "%s M×N×K=%lld×%lld×%lld kind=%d gs=%d act=%s x=%s y=%s: first bad index %lld (row %lld col %lld): "
             "got %.9g want %.9g tol %.3g",
             en, (long long)M, (long long)N, (long long)K, wc->kind, gs, qmm_act_name(act), qmm_dtype_name(xt),
             qmm_dtype_name(yt), (long long)first_bad, (long long)(first_bad / N), (long long)(first_bad % N), bad_got,
             bad_want, bad_tol);
    if (worst > g_worst[e]) g_worst[e] = worst;
    free(arow);
out:
    free(x);
    free(y1);
    free(y2);
}

/* avx2_f32 and avx512_f32 compute each element as the same FMA chain: identical bits */
static void same_bits_f32(qmm_context *ctx, const wcase *wc, int64_t M) {
    const int64_t N = wc->N, K = wc->K;
    qmm_dtype yt = k_fdt[tu_rand_int(0, 2)];
    void *x = malloc((size_t)(M * K) * 4);
    tu_fill_float(x, QMM_F32, M * K, 1.0f);
    size_t ys = qmm_dtype_size(yt);
    void *y1 = calloc((size_t)(M * N), ys), *y2 = calloc((size_t)(M * N), ys);
    qmm_linear_args a = qmm_linear_args_default();
    a.M = M;
    a.x = x;
    a.y = y1;
    a.y_dtype = yt;
    a.engine = QMM_ENGINE_AVX512_F32;
    TU_CHECK_OK(qmm_linear(ctx, wc->w, &a));
    a.y = y2;
    a.engine = QMM_ENGINE_AVX2_F32;
    TU_CHECK_OK(qmm_linear(ctx, wc->w, &a));
    TU_CHECK(tu_first_diff(y1, y2, yt, M * N) < 0, "avx512_f32 vs avx2_f32 M×N×K=%lld×%lld×%lld kind=%d: bits differ",
             (long long)M, (long long)N, (long long)K, wc->kind);
    free(x);
    free(y1);
    free(y2);
}

int main(int argc, char **argv) {
    tu_init(argc, argv, "test_float_engines");
    int quick = getenv("QMM_TEST_QUICK") != NULL;
    qmm_engine_id fl[QMM_ENGINE_COUNT];
    for (int i = 0, n = tu_engines(TU_ENGINES_FLOAT, fl); i < n; i++)
        if (fl[i] != QMM_ENGINE_AMX_BF16) k_engines[N_ENG++] = fl[i];
    int avail[QMM_ENGINE_COUNT], any = 0;
    for (int i = 0; i < N_ENG; i++) {
        char why[QMM_REASON_MAX];
        avail[i] = qmm_engine_available(k_engines[i], why, sizeof why);
        if (!avail[i]) tu_skip(qmm_engine_name(k_engines[i]), why);
        any |= avail[i];
    }
    if (!any) { tu_finish(); return 77; }
    qmm_context_options o = qmm_context_options_default();
    o.n_threads = 1;
    qmm_context *ctx1, *ctx2;
    TU_CHECK_OK(qmm_context_create(&o, &ctx1));
    o.n_threads = 2;
    TU_CHECK_OK(qmm_context_create(&o, &ctx2));

    static const int64_t Ks[] = {1, 63, 64, 65, 256, 1001};
    static const int64_t Ns[] = {1, 7, 16, 17, 33, 64, 65, 129};
    for (size_t ki = 0; ki < sizeof Ks / sizeof Ks[0]; ki++) {
        for (int kind = 0; kind < 4; kind++) {
            for (int rep = 0; rep < 2; rep++) {
                wcase wc;
                memset(&wc, 0, sizeof wc);
                wc.K = Ks[ki];
                wc.N = Ns[tu_rand_int(0, (int64_t)(sizeof Ns / sizeof Ns[0]) - 1)];
                wc.kind = kind;
                wc.per_tensor = (int)tu_rand_int(0, 1);
                wc.has_bias = (int)tu_rand_int(0, 1);
                wc.bias_dtype = k_fdt[tu_rand_int(0, 2)];
                if (kind == 0) {
                    int g = (int)(tu_rand_int(0, 3) == 0 ? 0 : (int[]){4, 16, 64, 256, 1024}[tu_rand_int(0, 4)]);
                    wc.gs = g && wc.K % g == 0 ? g : (wc.K % 16 == 0 && rep ? 16 : 0);
                }
                if (!make_weight(ctx1, &wc)) { wcase_free(&wc); continue; }
                int64_t Ms[3] = {tu_rand_int(1, 6), tu_rand_int(7, 33), quick ? tu_rand_int(34, 80)
                                                                               : tu_rand_int(300, 450)};
                for (int mi = 0; mi < 3; mi++) {
                    if (mi == 2 && wc.K > 256 && quick) continue;
                    for (int i = 0; i < N_ENG; i++)
                        if (avail[i]) run_case(ctx1, ctx2, &wc, Ms[mi], k_engines[i]);
                }
                if (avail[1] && avail[2]) same_bits_f32(ctx2, &wc, tu_rand_int(1, 40));
                wcase_free(&wc);
            }
        }
    }
    /* deep K: the driver bounds the packed-A chunk (M rows × K) by bytes, so at K = 20011 an
     * M of 300 runs in several K-limited chunks — the path large real layers take */
    if (!quick) {
        for (int kind = 0; kind <= 2; kind += 2) {
            wcase wc;
            memset(&wc, 0, sizeof wc);
            wc.K = 20011;
            wc.N = 70;
            wc.kind = kind;
            wc.has_bias = 1;
            wc.bias_dtype = QMM_F32;
            if (!make_weight(ctx1, &wc)) { wcase_free(&wc); continue; }
            for (int i = 0; i < N_ENG; i++)
                if (avail[i]) run_case(ctx1, ctx2, &wc, 401, k_engines[i]); /* > 314 bf16 / 157 f32 rows */
            if (avail[1] && avail[2]) same_bits_f32(ctx2, &wc, 300);
            wcase_free(&wc);
        }
    }
    for (int i = 0; i < N_ENG; i++)
        if (avail[i]) tu_note("%s: worst |error| / tolerance %.3g", qmm_engine_name(k_engines[i]),
                              g_worst[k_engines[i]]);
    qmm_context_destroy(ctx1);
    qmm_context_destroy(ctx2);
    return tu_finish();
}
