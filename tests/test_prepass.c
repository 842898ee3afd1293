/*
 * test_prepass.c — the AVX-512 activation pre-pass row kernels (prepass_avx512.c) against the
 * scalar reference (qmm_prepass_row_ref, qmm_amax_row_ref): q bytes and the scale's bits must be
 * identical for every x dtype, input_act and convrot group, given or computed scales, on
 *   - random rows (normal values at scales from denormal to huge),
 *   - random bit patterns (denormals, Inf, at most one NaN per row),
 *   - every f16 and every bf16 code (1024 rows of 64 consecutive codes, NaN codes kept in a few rows),
 *   - edge rows: all zero, one NaN, ±Inf, exact half steps, -128 reachable.
 * And the kitchen input stage's AVX-512 row (input_stage_avx512.c) against its scalar row
 * (qmm_input_stage_row_ref): rms_norm, situ, every act with and without the modulation, every
 * dtype, random K (tails), random values and random bit patterns — identical bytes.
 * A failing case prints dtype/act/gs/K, the first bad index and both values.
 */
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

/* x holds K_in = (swiglu ? 2K : K) values of dtype t. Compares both row kernels. */
static int check_row(const void *x, qmm_dtype t, int64_t K, qmm_act act, int gs, const float *s_in, const char *what) {
    int64_t qcols = qmm_round_up(K, 64);
    int8_t *q0 = malloc((size_t)qcols), *q1 = malloc((size_t)qcols);
    float *tmp0 = qmm_aligned_alloc((size_t)qmm_round_up(K, 16) * 4), *tmp1 = qmm_aligned_alloc((size_t)qmm_round_up(K, 16) * 4);
    memset(q1, 0x55, (size_t)qcols);
    float s0 = 0, s1 = 0;
    qmm_prepass_row_ref(x, t, K, act, gs, s_in, q0, qcols, &s0, tmp0);
    qmm_prepass_row_avx512_ptr(x, t, K, act, gs, s_in, q1, qcols, &s1, tmp1);
    float m0 = qmm_amax_row_ref(x, t, K, act, gs, tmp0);
    float m1 = qmm_amax_row_avx512_ptr(x, t, K, act, gs, tmp1);
    int64_t bad = -1;
    for (int64_t k = 0; k < qcols && bad < 0; k++)
        if (q0[k] != q1[k]) bad = k;
    g_cases++;
    int ok = TU_CHECK(bad < 0 && qmm_f32_bits(s0) == qmm_f32_bits(s1) && qmm_f32_bits(m0) == qmm_f32_bits(m1),
                      "prepass avx512 vs ref (%s): dtype %s act %s gs %d K=%lld s_in=%s: first bad q index %lld "
                      "(ref %d, avx512 %d); s %08x vs %08x; amax %08x vs %08x",
                      what, qmm_dtype_name(t), qmm_act_name(act), gs, (long long)K, s_in ? "given" : "computed",
                      (long long)bad, bad >= 0 ? q0[bad] : 0, bad >= 0 ? q1[bad] : 0, qmm_f32_bits(s0),
                      qmm_f32_bits(s1), qmm_f32_bits(m0), qmm_f32_bits(m1));
    free(q0);
    free(q1);
    qmm_aligned_free(tmp0);
    qmm_aligned_free(tmp1);
    return ok;
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

int main(int argc, char **argv) {
    tu_init(argc, argv, "test_prepass");
    g_quick = getenv("QMM_TEST_QUICK") != NULL;
    const uint32_t need = QMM_CPU_AVX512F | QMM_CPU_AVX512BW | QMM_CPU_AVX512VL | QMM_CPU_AVX512DQ;
    if (!qmm_prepass_row_avx512_ptr || !qmm_amax_row_avx512_ptr) {
        tu_skip("prepass_avx512", "not built");
        tu_finish();
        return 77;
    }
    if ((qmm_cpu_features() & need) != need) {
        tu_skip("prepass_avx512", "CPU lacks AVX-512 F/BW/VL/DQ");
        tu_finish();
        return 77;
    }
    edge_rows();
    all_codes();
    random_rows();
    input_stage_rows();
    tu_note("%d rows compared", g_cases);
    return tu_finish();
}
