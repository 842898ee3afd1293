/*
 * test_prepass.c — the activation pre-pass, every part against the scalar reference:
 *   row kernels  the AVX-512 one (prepass_avx512.c) and the AVX2 one (prepass_avx2.c), each
 *                against qmm_prepass_row_ref / qmm_amax_row_ref: q bytes (as s8 and as the u8
 *                form q XOR 0x80, padding included), the scale's bits and the amax bits identical
 *                for every x dtype, input_act and convrot group, given or computed scales, on
 *                - random rows (normal values at scales from denormal to huge, outliers),
 *                - random bit patterns (denormals, Inf, at most one NaN per row),
 *                - special values (NaN, ±Inf, ±0, denormals, the edges of qmm_expf's range,
 *                  f16/bf16 overflow), K with and without a vector tail, exp's range densely,
 *                - every f16 and every bf16 code (1024 rows of 64 consecutive codes, NaN codes
 *                  kept in a few rows),
 *                - edge rows: all zero, one NaN, ±Inf, exact half steps, -128 reachable;
 *                a kernel this CPU cannot run is skipped visibly;
 *   the driver   qmm_prepass_to (1 and 2 threads, each row kernel the context selects) against the
 *                reference rows: a as s8 or u8, the rows regime's Σq and -128 flags, the one-pass
 *                copy ap with its padding rows, token scales given or computed;
 *   input stage  the kitchen input stage's AVX-512 row (input_stage_avx512.c) against its scalar
 *                row (qmm_input_stage_row_ref): rms_norm, situ, every act with and without the
 *                modulation, every dtype, random K (tails), random values and bit patterns.
 * Through qmm_linear, with the ISA capped so that the AVX2 row kernel runs: test_int8_engines
 * under QMM_MAX_ISA=avx_vnni (tests/int8_engines.cmake). A failing case prints
 * kernel/dtype/act/gs/K, the first bad index and both values.
 */
#include "input_stage.h"
#include "numerics.h"
#include "prepass.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const qmm_dtype k_dtypes[3] = {QMM_F32, QMM_F16, QMM_BF16};
static const qmm_act k_acts[3] = {QMM_ACT_NONE, QMM_ACT_SWIGLU, QMM_ACT_GELU_TANH};
static const int k_gs[6] = {0, 16, 64, 256, 4, 1024}; /* the first 4 in the exhaustive sweeps */

static int g_quick;
static int g_cases;
static int g_neg_rows; /* driver rows holding -128 (the flag's check is not vacuous) */

/* the row kernel under test */
typedef struct {
    const char *name;
    qmm_prepass_row_fn row;
    qmm_amax_row_fn amax;
} row_kernel;
static row_kernel g_k;

/* x holds K_in = (swiglu ? 2K : K) values of dtype t. Compares g_k with the reference, as s8 and
 * (a random half of the rows) as u8, and the reference's u8 form with its s8 one XOR 0x80. */
static int check_row(const void *x, qmm_dtype t, int64_t K, qmm_act act, int gs, const float *s_in, const char *what) {
    int64_t qcols = qmm_round_up(K, 64);
    const uint8_t flip = tu_rand_int(0, 1) ? 0x80 : 0;
    int8_t *q0 = malloc((size_t)qcols), *q1 = malloc((size_t)qcols), *qs = malloc((size_t)qcols);
    float *tmp0 = qmm_aligned_alloc((size_t)qmm_round_up(K, 16) * 4), *tmp1 = qmm_aligned_alloc((size_t)qmm_round_up(K, 16) * 4);
    memset(q0, 0x33, (size_t)qcols);
    memset(q1, 0x55, (size_t)qcols);
    float s0 = 0, s1 = 0, s2 = 0;
    qmm_prepass_row_ref(x, t, K, act, gs, s_in, q0, qcols, flip, &s0, tmp0);
    g_k.row(x, t, K, act, gs, s_in, q1, qcols, flip, &s1, tmp1);
    float m0 = qmm_amax_row_ref(x, t, K, act, gs, tmp0);
    float m1 = g_k.amax(x, t, K, act, gs, tmp1);
    int64_t bad = -1, fbad = -1;
    for (int64_t k = 0; k < qcols && bad < 0; k++)
        if (q0[k] != q1[k]) bad = k;
    if (flip) { /* the u8 form is the s8 one XOR 0x80, padding included */
        qmm_prepass_row_ref(x, t, K, act, gs, s_in, qs, qcols, 0, &s2, tmp0);
        for (int64_t k = 0; k < qcols && fbad < 0; k++)
            if ((uint8_t)q0[k] != ((uint8_t)qs[k] ^ 0x80)) fbad = k;
    }
    g_cases++;
    int ok = TU_CHECK(bad < 0 && qmm_f32_bits(s0) == qmm_f32_bits(s1) && qmm_f32_bits(m0) == qmm_f32_bits(m1),
                      "prepass %s vs ref (%s): dtype %s act %s gs %d K=%lld s_in=%s flip %02x: first bad q index %lld "
                      "(ref %d, %s %d); s %08x vs %08x; amax %08x vs %08x",
                      g_k.name, what, qmm_dtype_name(t), qmm_act_name(act), gs, (long long)K,
                      s_in ? "given" : "computed", flip, (long long)bad, bad >= 0 ? q0[bad] : 0, g_k.name,
                      bad >= 0 ? q1[bad] : 0, qmm_f32_bits(s0), qmm_f32_bits(s1), qmm_f32_bits(m0), qmm_f32_bits(m1));
    ok &= TU_CHECK(fbad < 0, "prepass ref (%s): dtype %s act %s gs %d K=%lld: u8 byte %lld = %d is not s8 %d XOR 0x80",
                   what, qmm_dtype_name(t), qmm_act_name(act), gs, (long long)K, (long long)fbad,
                   fbad >= 0 ? q0[fbad] : 0, fbad >= 0 ? qs[fbad] : 0);
    free(q0);
    free(q1);
    free(qs);
    qmm_aligned_free(tmp0);
    qmm_aligned_free(tmp1);
    return ok;
}

static float special(void) {
    static const float v[] = {NAN, -NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e-40f, -3e-39f, 87.3f, -87.3f, 88.7f,
                              -88.7f, 88.8f, -87.4f, 44.0f, -44.0f, 65504.0f, 70000.0f, -1e30f, 3e38f, 6e-8f, 1e-5f};
    return v[tu_rand_int(0, (int64_t)(sizeof v / sizeof v[0]) - 1)];
}

/* one row of normal values (scale 1 or 20), with three special values when asked */
static void special_row(qmm_dtype t, int64_t K, qmm_act act, int gs, int with_special, int given_scale) {
    const int64_t K_in = act == QMM_ACT_SWIGLU ? 2 * K : K;
    void *x = malloc((size_t)K_in * qmm_dtype_size(t));
    tu_fill_float(x, t, K_in, tu_rand_int(0, 1) ? 1.0f : 20.0f);
    if (with_special)
        for (int i = 0; i < 3; i++) qmm_store_f(x, t, tu_rand_int(0, K_in - 1), special());
    float sin = 0.001f + 0.05f * (float)(tu_rand_u64() % 1000) / 1000.0f;
    check_row(x, t, K, act, gs, given_scale ? &sin : NULL, with_special ? "special values" : "normal values");
    free(x);
}

/* every dtype × act × group, K with and without a tail of the vector width, special values; then
 * exp's whole range, densely, through gelu and swiglu */
static void special_rows(void) {
    const int gss[6] = {0, 4, 16, 64, 256, 1024};
    for (int ti = 0; ti < 3; ti++)
        for (int act = 0; act < 3; act++)
            for (int gi = 0; gi < 6; gi++)
                for (int rep = 0; rep < (g_quick ? 3 : 12); rep++) {
                    int gs = gss[gi];
                    int64_t K = gs ? gs * tu_rand_int(1, gs > 256 ? 2 : 6) : tu_rand_int(1, 300);
                    if (rep == 0 && !gs) K = tu_rand_int(1, 7); /* all tail */
                    special_row(k_dtypes[ti], K, k_acts[act], gs, rep % 3 == 2, rep % 4 == 1);
                }
    for (int i = 0; i < (g_quick ? 50 : 400); i++)
        special_row(k_dtypes[i % 3], 8 * tu_rand_int(1, 40), k_acts[1 + i % 2], 0, 1, 0);
}

static int64_t k_for(int gs) {
    if (gs) return gs * tu_rand_int(1, 4);
    static const int64_t ks[] = {1, 3, 15, 16, 17, 31, 63, 64, 65, 100, 256, 1001};
    return ks[tu_rand_int(0, (int64_t)(sizeof ks / sizeof ks[0]) - 1)];
}


/* random normal rows at scales from denormal to huge, and random bit patterns */
static void random_rows(void) {
    int n = g_quick ? 150 : 1500;
    for (int i = 0; i < n; i++) {
        qmm_dtype t = k_dtypes[tu_rand_int(0, 2)];
        qmm_act act = k_acts[tu_rand_int(0, 2)];
        int gs = k_gs[tu_rand_int(0, 5)];
        int64_t K = k_for(gs), Kin = act == QMM_ACT_SWIGLU ? 2 * K : K;
        size_t es = qmm_dtype_size(t);
        void *x = malloc((size_t)Kin * es);
        int mode = (int)tu_rand_int(0, 3);
        if (mode < 3) {
            static const float scales[] = {1.0f, 1e-3f, 30.0f, 1e-39f, 1e30f, 6e4f};
            tu_fill_float(x, t, Kin, scales[tu_rand_int(0, 5)]);
            if (mode == 1) { /* outlier channels */
                for (int j = 0; j < 3; j++) qmm_store_f(x, t, tu_rand_int(0, Kin - 1), 500.0f * tu_rand_normal());
            }
        } else {
            int nonfinite = 0;
            for (int64_t k = 0; k < Kin; k++) {
                uint32_t b = (uint32_t)tu_rand_u64();
                if (t != QMM_F32) b &= 0xffffu;
                /* one non-finite value at most, and a NaN only without act and rotation: two NaN
                 * payloads meeting (an input NaN and one made from Inf - Inf or an overflow) give
                 * a compiler-dependent payload, in the reference too */
                if (tu_is_nonfinite_bits(t, b) && (nonfinite++ || (tu_is_nan_bits(t, b) && (act || gs)))) b &= t == QMM_F32 ? 0x807fffffu : t == QMM_F16 ? 0x83ffu : 0x807fu;
                tu_store_bits(x, t, k, b);
            }
        }
        float s_in = 0.0f;
        int given = tu_rand_int(0, 4) == 0;
        if (given) s_in = (float)tu_rand_int(1, 1000) / 997.0f;
        check_row(x, t, K, act, gs, given ? &s_in : NULL, mode < 3 ? "random" : "random bits");
        free(x);
    }
}

/* every f16 / bf16 code, 64 per row; NaN codes replaced by 0 except the first NaN of every 16th
 * row, whose infinities are zeroed too (several NaNs of different payloads meeting in a butterfly give a NaN whose payload
 * depends on the compiler's operand order, in the reference as well) */
static void all_codes(void) {
    for (int d = 1; d < 3; d++) {
        qmm_dtype t = k_dtypes[d];
        uint16_t x[128];
        for (int row = 0; row < 1024; row += g_quick ? 7 : 1) {
            int nan_seen = 0;
            for (int j = 0; j < 64; j++) {
                uint16_t c = (uint16_t)(row * 64 + j);
                if (tu_is_nan_bits(t, c) && (row % 16 || nan_seen++)) c = 0;
                if (row % 16 == 0 && (c & 0x7fffu) == (t == QMM_F16 ? 0x7c00u : 0x7f80u)) c = 0; /* -Inf → act NaN */
                x[j] = c;
                x[64 + j] = (uint16_t)tu_rand_u64(); /* swiglu "up" half */
                if (tu_is_nan_bits(t, x[64 + j])) x[64 + j] = 0x3c00;
            }
            for (int a = 0; a < 3; a++)
                for (int g = 0; g < 3; g++) check_row(x, t, 64, k_acts[a], k_gs[g], NULL, "all codes");
        }
    }
}

static void edge_rows(void) {
    for (int d = 0; d < 3; d++) {
        qmm_dtype t = k_dtypes[d];
        for (int a = 0; a < 3; a++) {
            for (int g = 0; g < 4; g++) {
                int64_t K = k_gs[g] ? 256 : 77, Kin = k_acts[a] == QMM_ACT_SWIGLU ? 2 * K : K;
                float *xf = calloc((size_t)Kin, 4);
                void *x = malloc((size_t)Kin * 4);
                for (int kind = 0; kind < 7; kind++) {
                    for (int64_t k = 0; k < Kin; k++) xf[k] = 0.0f;
                    const char *what = "zero row";
                    if (kind == 1) { what = "one NaN"; for (int64_t k = 0; k < Kin; k++) xf[k] = (float)k * 0.25f; xf[5] = NAN; }
                    if (kind == 2) { what = "+Inf"; for (int64_t k = 0; k < Kin; k++) xf[k] = 1.0f; xf[9] = INFINITY; }
                    if (kind == 3) { what = "-Inf"; xf[Kin - 1] = -INFINITY; }
                    if (kind == 4) { /* half steps: amax 127 → s = 1 → q = rne(k + 0.5) */
                        what = "half steps";
                        for (int64_t k = 0; k < Kin; k++) xf[k] = (float)((k % 254) - 127) + 0.5f;
                        xf[0] = 127.0f;
                    }
                    if (kind == 5) { what = "-128 reachable"; for (int64_t k = 0; k < Kin; k++) xf[k] = 1.0f; xf[3] = -127.6f; xf[4] = 127.0f; }
                    if (kind == 6) { what = "denormals"; for (int64_t k = 0; k < Kin; k++) xf[k] = (float)(k - 40) * 1e-41f; }
                    for (int64_t k = 0; k < Kin; k++) qmm_store_f(x, t, k, xf[k]);
                    check_row(x, t, K, k_acts[a], k_gs[g], NULL, what);
                }
                free(xf);
                free(x);
            }
        }
    }
}

/* the input stage rows: scalar vs AVX-512 */
static void input_stage_rows(void) {
    if (!qmm_input_stage_row_avx512_ptr) {
        tu_skip("input_stage_avx512", "not built");
        return;
    }
    const qmm_act acts[5] = {QMM_ACT_NONE, QMM_ACT_SWIGLU, QMM_ACT_GELU_TANH, QMM_ACT_RMS_NORM, QMM_ACT_SITU};
    for (int rep = 0; rep < (g_quick ? 60 : 400); rep++) {
        qmm_weight w;
        memset(&w, 0, sizeof w);
        qmm_call c;
        memset(&c, 0, sizeof c);
        c.w = &w;
        c.x_dtype = k_dtypes[rep % 3];
        c.act = acts[(rep / 3) % 5];
        c.K = rep % 7 == 0 ? tu_rand_int(1, 17) : tu_rand_int(1, 700);
        const int64_t Kin = c.act == QMM_ACT_SWIGLU || c.act == QMM_ACT_SITU ? 2 * c.K : c.K;
        c.act_weight_dtype = k_dtypes[tu_rand_int(0, 2)];
        c.act_eps = tu_rand_int(0, 1) ? 1e-6f : 0.0f;
        void *x = malloc((size_t)Kin * 4), *aw = malloc((size_t)c.K * 4), *mod = malloc((size_t)c.K * 4);
        const size_t es = qmm_dtype_size(c.x_dtype);
        if (rep % 5 == 4) { /* random bit patterns: denormals, Inf, NaN */
            tu_fill_i8(x, (int64_t)(Kin * (int64_t)es), -128, 127);
        } else {
            tu_fill_float(x, c.x_dtype, Kin, rep % 5 == 0 ? 30.0f : 1.0f);
        }
        tu_fill_float(aw, c.act_weight_dtype, c.K, 2.0f);
        tu_fill_float(mod, c.x_dtype, c.K, 0.5f);
        c.act_weight = aw;
        c.modulation = rep % 2 ? mod : NULL;
        void *o0 = malloc((size_t)c.K * es), *o1 = malloc((size_t)c.K * es);
        float *tmp = qmm_aligned_alloc((size_t)qmm_round_up(c.K, 16) * 4);
        qmm_input_stage_row_ref(&c, x, o0, tmp);
        qmm_input_stage_row_avx512_ptr(&c, x, o1, tmp);
        int64_t bad = -1;
        for (int64_t k = 0; k < c.K && bad < 0; k++) {
            float v0 = tu_load(o0, c.x_dtype, k), v1 = tu_load(o1, c.x_dtype, k);
            if (memcmp((char *)o0 + k * es, (char *)o1 + k * es, es) && !(v0 != v0 && v1 != v1)) bad = k;
        }
        g_cases++;
        TU_CHECK(bad < 0, "input stage avx512 vs ref: dtype %s act %s%s K=%lld: first bad index %lld: ref %.9g avx512 %.9g",
                 qmm_dtype_name(c.x_dtype), qmm_act_name(c.act), c.modulation ? " modulated" : "", (long long)c.K,
                 (long long)bad, bad >= 0 ? (double)tu_load(o0, c.x_dtype, bad) : 0.0,
                 bad >= 0 ? (double)tu_load(o1, c.x_dtype, bad) : 0.0);
        free(x); free(aw); free(mod); free(o0); free(o1);
        qmm_aligned_free(tmp);
    }
}

/* qmm_prepass_to on ctx against the reference rows: a (s8 or u8), s, the rows regime's sums, ap */
static void driver_case(qmm_context *ctx, int64_t M, int64_t K, int form) {
    const qmm_dtype t = k_dtypes[tu_rand_int(0, 2)];
    const qmm_act act = k_acts[tu_rand_int(0, 2)];
    const int gs = K % 16 == 0 && tu_rand_int(0, 1) ? 16 : 0;
    const int64_t Kin = act == QMM_ACT_SWIGLU ? 2 * K : K, ldx = Kin + tu_rand_int(0, 3);
    const int64_t ldq = qmm_round_up(K, 64), kq = (K + 3) / 4;
    const int wrows = form == 2 ? (int)(M + tu_rand_int(0, 5)) : 0;
    const uint8_t flip = form == 1 ? 0 : tu_rand_int(0, 1) ? 0x80 : 0;
    qmm_weight w;
    memset(&w, 0, sizeof w);
    w.convrot_gs = gs;
    qmm_call c = {.w = &w, .M = M, .K = K, .K_in = Kin, .ldx = ldx, .x_dtype = t, .act = act};
    const size_t es = qmm_dtype_size(t);
    void *x = malloc((size_t)(M * ldx) * es);
    tu_fill_float(x, t, M * ldx, 3.0f);
    for (int64_t r = 0; r < M; r += 3) qmm_store_f(x, t, r * ldx, -1e4f); /* q = -128 in some rows */
    c.x = x;
    float *sin = malloc((size_t)M * 4);
    for (int64_t r = 0; r < M; r++) sin[r] = 0.01f + (float)tu_rand_int(0, 100) / 50.0f;
    c.token_scales_in = tu_rand_int(0, 1) ? sin : NULL; /* small given scales: q saturates at -128 */
    int8_t *q = malloc((size_t)(M * ldq)), *qr = malloc((size_t)ldq);
    uint8_t *ap = malloc((size_t)(kq * (wrows ? wrows : 1) * 4)), *neg = malloc((size_t)M);
    int32_t *qsum = malloc((size_t)M * 4);
    float *s = malloc((size_t)M * 4), *tmp = qmm_aligned_alloc((size_t)qmm_round_up(K, 16) * 4);
    memset(neg, 7, (size_t)M);
    const qmm_prepass_out o = {.q = q, .ldq = ldq, .s = s, .flip = flip, .qsum = form == 1 ? qsum : NULL,
                               .qneg128 = form == 1 ? neg : NULL, .ap = form == 2 ? ap : NULL, .kq = kq,
                               .wrows = wrows};
    TU_CHECK_OK(qmm_prepass_to(ctx, &c, &o, tu_rand_int(0, 3) == 0)); /* 1: the scalar row kernel */
    int64_t bad = -1;
    const char *what = "";
    for (int64_t r = 0; r < M && bad < 0; r++) {
        float sr;
        qmm_prepass_row_ref((const char *)x + (size_t)(r * ldx) * es, t, K, act, gs, c.token_scales_in ? &sin[r] : NULL,
                            qr, ldq, flip, &sr, tmp);
        if (memcmp(qr, q + r * ldq, (size_t)ldq)) bad = r, what = "a";
        else if (qmm_f32_bits(sr) != qmm_f32_bits(s[r])) bad = r, what = "s";
        if (bad >= 0 || !form) continue;
        int32_t sum = 0;
        int m = 0;
        for (int64_t k = 0; k < K; k++) sum += qr[k], m |= qr[k] == -128;
        g_neg_rows += form == 1 && m;
        if (form == 1 && (qsum[r] != sum || neg[r] != m)) bad = r, what = "qsum / qneg128";
        for (int64_t j = 0; form == 2 && j < kq && bad < 0; j++)
            if (memcmp(ap + (j * wrows + r) * 4, qr + 4 * j, 4)) bad = r, what = "ap";
    }
    for (int64_t j = 0; form == 2 && j < kq && bad < 0; j++)
        for (int64_t r = M; r < wrows && bad < 0; r++)
            for (int b = 0; b < 4; b++)
                if (ap[(j * wrows + r) * 4 + b] != flip) bad = r, what = "ap padding row";
    g_cases++;
    TU_CHECK(bad < 0, "qmm_prepass_to (%d threads) M=%lld K=%lld %s act %s gs %d flip %02x%s%s%s: row %lld: %s differs",
             qmm_pool_threads(ctx->pool), (long long)M, (long long)K, qmm_dtype_name(t), qmm_act_name(act), gs, flip,
             c.token_scales_in ? " scales given" : "", form == 1 ? " with qsum" : "", form == 2 ? " with ap" : "",
             (long long)bad, what);
    free(x); free(sin); free(q); free(qr); free(ap); free(neg); free(qsum); free(s);
    qmm_aligned_free(tmp);
}

static void driver(void) {
    for (int th = 1; th <= 2; th++) {
        qmm_context_options opt = qmm_context_options_default();
        opt.n_threads = th;
        qmm_context *ctx;
        TU_CHECK_OK(qmm_context_create(&opt, &ctx));
        for (int rep = 0; rep < (g_quick ? 12 : 60); rep++) {
            static const int64_t ks[] = {1, 5, 63, 64, 65, 256, 1001};
            driver_case(ctx, tu_rand_int(1, rep % 4 ? 30 : 200), ks[rep % 7], rep % 3);
        }
        qmm_context_destroy(ctx);
    }
}

int main(int argc, char **argv) {
    tu_init(argc, argv, "test_prepass");
    g_quick = getenv("QMM_TEST_QUICK") != NULL;
    const uint32_t f = qmm_cpu_features();
    const struct {
        row_kernel k;
        uint32_t need;
        const char *lacks;
    } kernels[2] = {
        {{"avx512", qmm_prepass_row_avx512_ptr, qmm_amax_row_avx512_ptr},
         QMM_CPU_AVX512F | QMM_CPU_AVX512BW | QMM_CPU_AVX512VL | QMM_CPU_AVX512DQ, "CPU lacks AVX-512 F/BW/VL/DQ"},
        {{"avx2", qmm_prepass_row_avx2_ptr, qmm_amax_row_avx2_ptr}, QMM_CPU_AVX2 | QMM_CPU_FMA | QMM_CPU_F16C,
         "CPU lacks AVX2/FMA/F16C"},
    };
    int ran = 0;
    for (int i = 0; i < 2; i++) {
        char what[64];
        snprintf(what, sizeof what, "prepass_%s", kernels[i].k.name);
        if (!kernels[i].k.row || !kernels[i].k.amax) { tu_skip(what, "not built"); continue; }
        if ((f & kernels[i].need) != kernels[i].need) { tu_skip(what, kernels[i].lacks); continue; }
        g_k = kernels[i].k;
        const int before = g_cases;
        edge_rows();
        all_codes();
        random_rows();
        special_rows();
        tu_note("%s: %d rows compared", g_k.name, g_cases - before);
        ran++;
    }
    const int before = g_cases;
    driver();
    tu_note("qmm_prepass_to: %d calls compared, %d rows with qsum held -128", g_cases - before, g_neg_rows);
    if ((f & (QMM_CPU_AVX512F | QMM_CPU_AVX512BW | QMM_CPU_AVX512VL | QMM_CPU_AVX512DQ)) ==
        (QMM_CPU_AVX512F | QMM_CPU_AVX512BW | QMM_CPU_AVX512VL | QMM_CPU_AVX512DQ))
        input_stage_rows();
    else
        tu_skip("input_stage_avx512", "CPU lacks AVX-512 F/BW/VL/DQ");
    int rc = tu_finish();
    return ran ? rc : (rc ? rc : 77);
}
