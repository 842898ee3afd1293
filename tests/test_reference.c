/*
 * test_reference.c — the reference engine's whole pipeline (SPEC §1) against an independent,
 * straightforward fp64 computation written here from the SPEC §1 text: act in double (libm exp),
 * the rotation as an explicit product with the Kronecker-built H_g, kitchen-exact quantization,
 * then y = a_rot · (Wq · w_scale)ᵀ + bias in double. Random shapes including M = 1, K = g, odd N,
 * strided rows, every x/out dtype and input_act, per-tensor/per-row scales, bias or not.
 *
 * The bound per output: quantizing activation k costs at most 0.5·s_r (rounding to an integer)
 * + |a_k|·(eps_T + |s_r/T(s_r) - 1|) (the quotient and the scale rounded to T) + 1 ulp of a_k in T
 * where an activation or rotation is computed (libm vs qmm_expf, fp64 vs fp32 rotation); the sum
 * over k weighted by |W|·w_scale, plus 2 ulp of the output dtype. The int32 accumulators
 * are compared exactly where the independent q must be identical (act = none, no rotation).
 */
#include "numerics.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const int H4[4][4] = {{1, 1, 1, -1}, {1, 1, -1, 1}, {1, -1, 1, 1}, {-1, 1, 1, 1}};

static double h_entry(int g, int i, int j) {
    int v = 1;
    for (int d = 1; d < g; d *= 4, i /= 4, j /= 4) v *= H4[i % 4][j % 4];
    return v / sqrt((double)g);
}

static double eps_of(qmm_dtype t) { return t == QMM_BF16 ? 1.0 / 256 : t == QMM_F16 ? 1.0 / 2048 : 1.0 / 16777216; }

/* The reference activation row, computed independently: act → round → rotate → round. */
static void indep_act_rotate(const void *x, qmm_dtype T, int64_t K, qmm_act act, int gs, double *a) {
    for (int64_t k = 0; k < K; k++) {
        double v = qmm_load_f(x, T, k);
        if (act == QMM_ACT_SWIGLU) {
            double sg = qmm_round_to((float)(v / (1 + exp(-v))), T);
            v = qmm_round_to((float)(sg * qmm_load_f(x, T, K + k)), T);
        } else if (act == QMM_ACT_GELU_TANH) {
            /* 0.5 v (1 + tanh u) = v / (1 + exp(-2u)): the second form has no cancellation for v << 0 */
            v = qmm_round_to((float)(v / (1 + exp(-2 * 0.7978845608028654 * (v + 0.044715 * v * v * v)))), T);
        }
        a[k] = v;
    }
    if (gs) {
        double *tmp = malloc(sizeof(double) * (size_t)gs);
        for (int64_t b = 0; b < K; b += gs) {
            for (int j = 0; j < gs; j++) {
                double s = 0;
                for (int i = 0; i < gs; i++) s += a[b + i] * h_entry(gs, i, j);
                tmp[j] = s;
            }
            for (int j = 0; j < gs; j++) a[b + j] = qmm_round_to((float)tmp[j], T);
        }
        free(tmp);
    }
}

static int run_case(qmm_context *ctx, int64_t M, int64_t N, int64_t K, qmm_dtype T, qmm_dtype Y, qmm_act act, int gs,
                    int per_tensor, int with_bias) {
    int64_t K_in = act == QMM_ACT_SWIGLU ? 2 * K : K;
    int64_t ldx = K_in + tu_rand_int(0, 5), ldy = N + tu_rand_int(0, 3);
    size_t xs = qmm_dtype_size(T), ys = qmm_dtype_size(Y);
    void *x = malloc((size_t)(M * ldx) * xs);
    void *y = malloc((size_t)(M * ldy) * ys);
    int8_t *w = malloc((size_t)(N * K));
    float *sc = malloc(sizeof(float) * (size_t)N);
    float *bias = malloc(sizeof(float) * (size_t)N);
    float *ts = malloc(sizeof(float) * (size_t)M);
    int32_t *acc = malloc(sizeof(int32_t) * (size_t)(M * N));
    double *a = malloc(sizeof(double) * (size_t)K);
    tu_fill_float(x, T, M * ldx, 1.0f);
    /* a few outlier input channels, as real activations have */
    for (int64_t r = 0; r < M; r++)
        for (int o = 0; o < 3; o++) qmm_store_f(x, T, r * ldx + tu_rand_int(0, K_in - 1), tu_rand_normal() * 40.0f);
    tu_fill_i8(w, N * K, -127, 127);
    for (int64_t n = 0; n < N; n++) {
        sc[n] = 0.001f + 0.01f * (float)(tu_rand_u64() % 1000) / 1000.0f;
        bias[n] = tu_rand_normal();
    }
    qmm_weight_desc d = qmm_weight_desc_default();
    d.name = "test.layer";
    d.N = N;
    d.K = K;
    d.data = w;
    d.scale = sc;
    d.n_scale = per_tensor ? 1 : N;
    d.bias = with_bias ? bias : NULL;
    d.bias_dtype = QMM_F32;
    d.convrot_gs = gs;
    qmm_weight *wt = NULL;
    int ok = 1;
    qmm_status st = qmm_weight_create_int8(ctx, &d, &wt);
    ok &= TU_CHECK(st == QMM_OK, "create: %s", qmm_last_error());
    if (!ok) goto done;
    qmm_linear_args args = qmm_linear_args_default();
    args.M = M;
    args.x = x;
    args.x_dtype = T;
    args.ldx = ldx;
    args.y = y;
    args.y_dtype = Y;
    args.ldy = ldy;
    args.act = act;
    args.token_scales = ts;
    args.engine = QMM_ENGINE_REF;
    st = qmm_linear(ctx, wt, &args);
    ok &= TU_CHECK(st == QMM_OK, "linear: %s", qmm_last_error());
    args.y = acc;
    args.y_dtype = QMM_I32;
    args.ldy = N;
    st = qmm_linear(ctx, wt, &args);
    ok &= TU_CHECK(st == QMM_OK, "linear i32: %s", qmm_last_error());
    if (!ok) goto done;
    double eT = eps_of(T);
    for (int64_t r = 0; r < M && ok; r++) {
        indep_act_rotate((const char *)x + (size_t)(r * ldx) * xs, T, K, act, gs, a);
        double amax = 0;
        for (int64_t k = 0; k < K; k++) amax = fmax(amax, fabs(a[k]));
        float s = qmm_scale_of((float)amax);
        /* the fp32 rotation differs from fp64 by a few fp32 ulps; an fp32 activation in the tails
         * (exp of |2u| up to ~90) is conditioned like |2u|·2^-24 */
        double atol = act != QMM_ACT_NONE ? 1e-5 : 0;
        double stol = (2 * eT + (gs ? 1e-5 : 0) + atol + 8.0 / 16777216) * s;
        ok &= TU_CHECK(fabs(ts[r] - s) <= stol, "%lldx%lldx%lld %s act=%s gs=%d row %lld: scale %g vs %g",
                       (long long)M, (long long)N, (long long)K, qmm_dtype_name(T), qmm_act_name(act), gs,
                       (long long)r, ts[r], s);
        /* the scale rounded to T (f16 can round tiny scales to subnormals or 0) */
        double sTr = qmm_round_to(ts[r], T);
        double rel_s = sTr > 0 ? fabs(ts[r] / sTr - 1) : 1e30;
        if (rel_s > 1) rel_s = 1.0 + 128.0; /* quotients saturate: q = ±127/-128 */
        for (int64_t n = 0; n < N && ok; n++) {
            double ws = sc[per_tensor ? 0 : n], want = 0, wabs = 0, werr = 0;
            int64_t exact = 0;
            for (int64_t k = 0; k < K; k++) {
                double wk = w[n * K + k];
                want += a[k] * wk;
                wabs += fabs(wk) * (0.5 * ts[r] + fabs(a[k]) * (eT + rel_s) + (act || gs ? tu_ulp(a[k], T) : 0));
                werr += fabs(a[k] * wk);
                if (act == QMM_ACT_NONE && !gs) {
                    double v = qmm_round_to((float)(a[k] / qmm_round_to(s, T)), T);
                    v = v != v ? 0 : rint(v);
                    v = v > 127 ? 127 : v < -128 ? -128 : v;
                    exact += (int64_t)v * w[n * K + k];
                }
            }
            want = want * ws + (with_bias ? bias[n] : 0.0);
            double got = qmm_load_f(y, Y, r * ldy + n);
            double tol = wabs * ws * 1.01 + 2 * tu_ulp(want, Y) + (1e-6 + atol) * werr * ws;
            ok &= TU_CHECK(fabs(got - want) <= tol,
                           "%lldx%lldx%lld x=%s y=%s act=%s gs=%d %s bias=%d: y[%lld][%lld] = %.7g, fp64 %.7g, "
                           "tol %.3g",
                           (long long)M, (long long)N, (long long)K, qmm_dtype_name(T), qmm_dtype_name(Y),
                           qmm_act_name(act), gs, per_tensor ? "per-tensor" : "per-row", with_bias, (long long)r,
                           (long long)n, got, want, tol);
            if (act == QMM_ACT_NONE && !gs)
                ok &= TU_CHECK(acc[r * N + n] == exact, "%lldx%lldx%lld %s: acc[%lld][%lld] = %d, exact %lld",
                               (long long)M, (long long)N, (long long)K, qmm_dtype_name(T), (long long)r,
                               (long long)n, acc[r * N + n], (long long)exact);
        }
    }
done:
    qmm_weight_destroy(wt);
    free(x);
    free(y);
    free(w);
    free(sc);
    free(bias);
    free(ts);
    free(acc);
    free(a);
    return ok;
}

/* A row with NaN (or Inf) gives a non-finite scale and a NaN output row; the others are finite. */
static void test_nonfinite_rows(qmm_context *ctx) {
    int64_t M = 3, N = 5, K = 32;
    float x[3 * 32], y[3 * 5], sc = 0.01f;
    int8_t w[5 * 32];
    tu_fill_float(x, QMM_F32, M * K, 1.0f);
    tu_fill_i8(w, N * K, -127, 127);
    x[0 * K + 7] = NAN;
    x[2 * K + 3] = INFINITY;
    qmm_weight_desc d = qmm_weight_desc_default();
    d.N = N; d.K = K; d.data = w; d.scale = &sc; d.n_scale = 1;
    qmm_weight *wt;
    TU_CHECK_OK(qmm_weight_create_int8(ctx, &d, &wt));
    qmm_linear_args a = qmm_linear_args_default();
    a.M = M; a.x = x; a.y = y; a.engine = QMM_ENGINE_REF;
    TU_CHECK_OK(qmm_linear(ctx, wt, &a));
    int nan0 = 1, fin1 = 1, nan2 = 1;
    for (int n = 0; n < N; n++) { nan0 &= isnan(y[n]); fin1 &= isfinite(y[N + n]); nan2 &= isnan(y[2 * N + n]); }
    TU_CHECK(nan0 && fin1 && nan2, "non-finite rows: NaN row → NaN %d, finite row finite %d, Inf row → NaN %d", nan0,
             fin1, nan2);
    qmm_weight_destroy(wt);
}

int main(int argc, char **argv) {
    tu_init(argc, argv, "test_reference");
    int quick = getenv("QMM_TEST_QUICK") != NULL;
    qmm_context_options o = qmm_context_options_default();
    o.n_threads = 2;
    qmm_context *ctx;
    TU_CHECK_OK(qmm_context_create(&o, &ctx));
    const qmm_dtype dts[3] = {QMM_F32, QMM_F16, QMM_BF16};
    const int64_t Ks[5] = {1, 63, 64, 65, 1001};
    int cases = 0, failed = 0;
    for (int ti = 0; ti < 3; ti++)
        for (int yi = 0; yi < 3; yi++)
            for (int act = 0; act < 3; act++)
                for (int gi = 0; gi < 4; gi++) {
                    int gs = gi == 0 ? 0 : gi == 1 ? 16 : gi == 2 ? 64 : 256;
                    int reps = quick ? 1 : 2;
                    for (int rep = 0; rep < reps; rep++) {
                        int64_t M = rep == 0 ? 1 : tu_rand_int(2, 33);
                        int64_t N = tu_rand_int(1, 20) * 2 + 1;
                        int64_t K = gs ? gs * tu_rand_int(1, 3) : Ks[tu_rand_int(0, 4)];
                        cases++;
                        failed += !run_case(ctx, M, N, K, dts[ti], dts[yi], (qmm_act)act, gs, (int)tu_rand_int(0, 1),
                                            (int)tu_rand_int(0, 1));
                    }
                }
    tu_note("%d pipeline cases, %d failed", cases, failed);
    test_nonfinite_rows(ctx);
    qmm_context_destroy(ctx);
    return tu_finish();
}
