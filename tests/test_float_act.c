/*
 * test_float_act.c — the float engines' activation panels (float_act.h): the AVX-512 and AVX2
 * panel functions and the scalar one must all write, bit for bit, the panel the definition gives:
 * element (k, row i) = qmm_ref_act_rotate_row(x row i)[k] (f32 panels) or qmm_f32_to_bf16 of it
 * (bf16 panels), rows past `rows` zero, the odd-K pad half zero. Swept over every x dtype,
 * input_act, convrot group, f32 / bf16 panels, panel heights (6 = the engines', and others that
 * take the generic packing), partial panels, K across several k chunks and odd K, row strides, on
 *   - random rows (normal values at scales from denormal to huge, outlier channels),
 *   - random bit patterns (denormals, Inf; NaN only where the reference's NaN payload is defined),
 *   - every f16 and every bf16 code,
 *   - edge rows: zero, one NaN, ±Inf, denormals.
 * A failing case prints the function, dtype/act/gs/K/mr/rows, the first bad (k, row) and both values.
 * Also the threaded pass over a chunk (qmm_float_act_pack): every panel as the scalar function
 * writes it, the k past K up to the engine's Ka (e.g. 32 for amx_bf16) zero, any thread count.
 *
 * NaN results: with gcc every bit matches, NaN sign and payload included, and that is checked.
 * clang (LLVM) treats the sign and payload of a NaN produced by arithmetic as unspecified and may
 * rewrite x - y into forms that flip it (seen: Inf - Inf and a propagated NaN coming out with the
 * other sign in the vector path), so under clang a NaN only has to meet a NaN.
 */
#include "float_act.h"
#include "numerics.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const qmm_dtype k_dtypes[3] = {QMM_F32, QMM_F16, QMM_BF16};
static const qmm_act k_acts[3] = {QMM_ACT_NONE, QMM_ACT_SWIGLU, QMM_ACT_GELU_TANH};
static const int k_gs[4] = {0, 16, 64, 256};

static int g_quick, g_have_avx512, g_have_avx2;
static int g_panels, g_nan_loose;

#if defined(__clang__)
#define NAN_BITS_EXACT 0
#else
#define NAN_BITS_EXACT 1
#endif

/* the panel element (k, i) as bits: bf16 code or f32 bits */
static uint32_t elem(const void *A, int bf16, int mr, int64_t k, int i) {
    if (bf16) return ((const uint16_t *)A)[(k / 2) * mr * 2 + 2 * i + (k % 2)];
    return qmm_f32_bits(((const float *)A)[k * mr + i]);
}

static int is_nan_elem(uint32_t b, int bf16) {
    return bf16 ? (b & 0x7fffu) > 0x7f80u : (b & 0x7fffffffu) > 0x7f800000u;
}
/* same element: same bits (or, without NAN_BITS_EXACT, both NaN) */
static int same(uint32_t want, uint32_t got, int bf16) {
    if (want == got) return 1;
    if (!NAN_BITS_EXACT && is_nan_elem(want, bf16) && is_nan_elem(got, bf16)) {
        g_nan_loose++;
        return 1;
    }
    return 0;
}

/* x: rows of K_in values of dtype t, ldx apart. Compares every panel function with the definition. */
static int check_panel(const void *x, int64_t ldx, qmm_dtype t, int64_t K, qmm_act act, int gs, int rows, int mr,
                       int bf16, const char *what) {
    const int64_t Ka = bf16 ? qmm_round_up(K, 2) : K;
    const size_t es = bf16 ? 2 : 4, bytes = (size_t)(Ka * mr) * es;
    const size_t xs = qmm_dtype_size(t);
    /* the expected panel, from the scalar definitions */
    void *E = malloc(bytes);
    float *row = malloc((size_t)K * sizeof(float));
    memset(E, 0, bytes);
    for (int i = 0; i < rows; i++) {
        qmm_ref_act_rotate_row((const char *)x + (size_t)(i * ldx) * xs, t, K, act, gs, row);
        for (int64_t k = 0; k < K; k++) {
            if (bf16) ((uint16_t *)E)[(k / 2) * mr * 2 + 2 * i + (k % 2)] = qmm_f32_to_bf16(row[k]);
            else ((float *)E)[k * mr + i] = row[k];
        }
    }
    free(row);

    qmm_fact_src src = {x, ldx, t, K, act, gs};
    struct { const char *name; qmm_fact_panel_fn fn; int have; } fns[3] = {
        {"ref", qmm_float_act_panel_ref, 1},
        {"avx512", qmm_float_act_panel_avx512, g_have_avx512},
        {"avx2", qmm_float_act_panel_avx2, g_have_avx2},
    };
    size_t tmp_bytes = (size_t)qmm_round_up((int64_t)qmm_float_act_tmp_floats(K, mr), 16) * sizeof(float);
    float *tmp = qmm_aligned_alloc(tmp_bytes);
    void *A = malloc(bytes);
    int ok = 1;
    for (int f = 0; f < 3; f++) {
        if (!fns[f].have) continue;
        memset(A, 0x55 + 0x22 * f, bytes); /* garbage: every element must be written */
        memset(tmp, 0x7f, tmp_bytes);
        fns[f].fn(&src, rows, mr, bf16, A, Ka, tmp);
        int64_t bk = -1;
        int bi = -1;
        for (int64_t k = 0; k < Ka && bk < 0; k++)
            for (int i = 0; i < mr; i++)
                if (!same(elem(E, bf16, mr, k, i), elem(A, bf16, mr, k, i), bf16)) {
                    bk = k;
                    bi = i;
                    break;
                }
        ok &= TU_CHECK(bk < 0,
                       "float act panel %s (%s): dtype %s act %s gs %d K=%lld mr %d rows %d %s panel: first bad "
                       "(k %lld, row %d): expected %08x got %08x",
                       fns[f].name, what, qmm_dtype_name(t), qmm_act_name(act), gs, (long long)K, mr, rows,
                       bf16 ? "bf16" : "f32", (long long)bk, bi, bk >= 0 ? elem(E, bf16, mr, bk, bi) : 0,
                       bk >= 0 ? elem(A, bf16, mr, bk, bi) : 0);
    }
    g_panels++;
    qmm_aligned_free(tmp);
    free(A);
    free(E);
    return ok;
}

static const int k_mrs[] = {6, 6, 6, 32, 32, 1, 4, 8, 16}; /* 6: the AVX engines', 32: amx_bf16's */

static int64_t k_for(int gs) {
    if (gs) return gs * tu_rand_int(1, gs == 256 ? 4 : 12);
    static const int64_t ks[] = {1, 3, 15, 16, 17, 31, 32, 33, 63, 100, 255, 256, 257, 300, 513, 1001};
    return ks[tu_rand_int(0, (int64_t)(sizeof ks / sizeof ks[0]) - 1)];
}


/* random panels: normal values at many scales, or random bits (per row at most one non-finite
 * value, and a NaN only without act and rotation: two NaN payloads meeting — an input NaN and one
 * made from Inf - Inf or an overflow — give a compiler-dependent payload, in the reference too) */
static void random_panels(void) {
    int n = g_quick ? 150 : 1500;
    for (int c = 0; c < n; c++) {
        qmm_dtype t = k_dtypes[tu_rand_int(0, 2)];
        qmm_act act = k_acts[tu_rand_int(0, 2)];
        int gs = k_gs[tu_rand_int(0, 3)];
        int mr = k_mrs[tu_rand_int(0, (int64_t)(sizeof k_mrs / sizeof k_mrs[0]) - 1)];
        int rows = tu_rand_int(0, 2) ? mr : (int)tu_rand_int(1, mr);
        int bf16 = (int)tu_rand_int(0, 1);
        int64_t K = k_for(gs), Kin = act == QMM_ACT_SWIGLU ? 2 * K : K, ldx = Kin + tu_rand_int(0, 5);
        size_t es = qmm_dtype_size(t);
        void *x = malloc((size_t)(ldx * rows) * es);
        int mode = (int)tu_rand_int(0, 3);
        for (int i = 0; i < rows; i++) {
            char *xr = (char *)x + (size_t)(i * ldx) * es;
            if (mode < 3) {
                static const float scales[] = {1.0f, 1e-3f, 30.0f, 1e-39f, 1e30f, 6e4f};
                tu_fill_float(xr, t, ldx, scales[tu_rand_int(0, 5)]);
                if (mode == 1) /* outlier channels */
                    for (int j = 0; j < 3; j++) qmm_store_f(xr, t, tu_rand_int(0, Kin - 1), 500.0f * tu_rand_normal());
            } else {
                int nonfinite = 0;
                for (int64_t k = 0; k < ldx; k++) {
                    uint32_t b = (uint32_t)tu_rand_u64();
                    if (t != QMM_F32) b &= 0xffffu;
                    if (tu_is_nonfinite_bits(t, b) && (nonfinite++ || (tu_is_nan_bits(t, b) && (act || gs))))
                        b &= t == QMM_F32 ? 0x807fffffu : t == QMM_F16 ? 0x83ffu : 0x807fu;
                    tu_store_bits(xr, t, k, b);
                }
            }
        }
        check_panel(x, ldx, t, K, act, gs, rows, mr, bf16, mode < 3 ? "random" : "random bits");
        free(x);
    }
}

/* every f16 / bf16 code, 64 per row, 6 rows per panel; NaN codes replaced by 0 except the first
 * NaN of every 16th row, whose infinities are zeroed too (as test_prepass, for the same reason) */
static void all_codes(void) {
    for (int d = 1; d < 3; d++) {
        qmm_dtype t = k_dtypes[d];
        uint16_t x[6][128];
        for (int row0 = 0; row0 < 1024; row0 += g_quick ? 42 : 6) {
            for (int i = 0; i < 6; i++) {
                int row = (row0 + i) % 1024, nan_seen = 0;
                for (int j = 0; j < 64; j++) {
                    uint16_t c = (uint16_t)(row * 64 + j);
                    if (tu_is_nan_bits(t, c) && (row % 16 || nan_seen++)) c = 0;
                    if (row % 16 == 0 && (c & 0x7fffu) == (t == QMM_F16 ? 0x7c00u : 0x7f80u)) c = 0;
                    x[i][j] = c;
                    x[i][64 + j] = (uint16_t)tu_rand_u64(); /* swiglu "up" half */
                    if (tu_is_nan_bits(t, x[i][64 + j])) x[i][64 + j] = 0x3c00;
                }
            }
            for (int a = 0; a < 3; a++)
                for (int g = 0; g < 3; g++)
                    for (int bf16 = 0; bf16 < 2; bf16++) check_panel(x, 128, t, 64, k_acts[a], k_gs[g], 6, 6, bf16, "all codes");
        }
    }
}

static void edge_rows(void) {
    for (int d = 0; d < 3; d++) {
        qmm_dtype t = k_dtypes[d];
        for (int a = 0; a < 3; a++) {
            for (int g = 0; g < 4; g++) {
                int64_t K = k_gs[g] ? 512 : 301, Kin = k_acts[a] == QMM_ACT_SWIGLU ? 2 * K : K;
                float *xf = calloc((size_t)Kin, 4);
                void *x = malloc((size_t)(Kin * 6) * 4);
                for (int kind = 0; kind < 5; kind++) {
                    for (int64_t k = 0; k < Kin; k++) xf[k] = 0.0f;
                    const char *what = "zero row";
                    if (kind == 1) { what = "one NaN"; for (int64_t k = 0; k < Kin; k++) xf[k] = (float)k * 0.25f; xf[5] = NAN; }
                    if (kind == 2) { what = "+Inf"; for (int64_t k = 0; k < Kin; k++) xf[k] = 1.0f; xf[9] = INFINITY; }
                    if (kind == 3) { what = "-Inf"; xf[Kin - 1] = -INFINITY; }
                    if (kind == 4) { what = "denormals"; for (int64_t k = 0; k < Kin; k++) xf[k] = (float)(k - 40) * 1e-41f; }
                    /* 6 rows: the edge row, then shifted copies so that each row is at another place */
                    for (int i = 0; i < 6; i++)
                        for (int64_t k = 0; k < Kin; k++) qmm_store_f(x, t, i * Kin + k, xf[(k + 7 * i) % Kin]);
                    for (int bf16 = 0; bf16 < 2; bf16++) {
                        check_panel(x, Kin, t, K, k_acts[a], k_gs[g], 6, 6, bf16, what);
                        check_panel(x, Kin, t, K, k_acts[a], k_gs[g], 3, 6, bf16, what);
                    }
                }
                free(xf);
                free(x);
            }
        }
    }
}

/* The threaded pass (qmm_float_act_pack) as the float GEMM driver calls it: chunk rows [r0, r0 +
 * rows) of an int8 weight's call (convrot or not), mr = 6 or 32 (amx_bf16's), Ka = K rounded up
 * to 1/2, or to 32 (amx_bf16's): every panel as the scalar panel function writes it, and k in
 * [K, Ka) zero although the buffer held NaN bits before; 1 and 2 threads alike. */
static void chunk_pass(void) {
    static const int64_t Ks[] = {1, 31, 64, 100, 257};
    qmm_context *ctx[2];
    for (int t = 0; t < 2; t++) {
        qmm_context_options o = qmm_context_options_default();
        o.n_threads = t + 1;
        TU_CHECK_OK(qmm_context_create(&o, &ctx[t]));
    }
    for (int ik = 0; ik < 5; ik++) {
        const int64_t K = Ks[ik], M = tu_rand_int(1, 80);
        const int gs = K % 64 == 0 ? 64 : 0, mr = tu_rand_int(0, 1) ? 32 : 6, bf16 = (int)tu_rand_int(0, 1);
        const int64_t Ka = ik % 2 == 0 || tu_rand_int(0, 1) ? qmm_round_up(K, 32) : bf16 ? qmm_round_up(K, 2) : K;
        const int64_t r0 = tu_rand_int(0, M - 1), rows = tu_rand_int(1, M - r0);
        const qmm_dtype t = k_dtypes[tu_rand_int(0, 2)];
        int8_t *wq = calloc((size_t)(16 * K), 1);
        float sc = 1.0f;
        qmm_weight_desc d = qmm_weight_desc_default();
        d.N = 16; d.K = K; d.data = wq; d.scale = &sc; d.n_scale = 1; d.convrot_gs = gs;
        qmm_weight *w = NULL;
        TU_CHECK_OK(qmm_weight_create_int8(ctx[0], &d, &w));
        void *x = malloc((size_t)(M * K) * qmm_dtype_size(t));
        tu_fill_float(x, t, M * K, 1.0f);
        qmm_call c;
        memset(&c, 0, sizeof c);
        c.w = w; c.M = M; c.N = 16; c.K = K; c.K_in = K; c.x = x; c.x_dtype = t; c.ldx = K; c.act = QMM_ACT_NONE;
        const int64_t panels = (rows + mr - 1) / mr;
        const size_t es = bf16 ? 2 : 4, bytes = (size_t)(panels * Ka * mr) * es;
        unsigned char *A[2], *E = malloc(bytes);
        float *tmp = malloc(qmm_float_act_tmp_floats(K, mr) * sizeof(float));
        memset(E, 0, bytes);
        qmm_fact_src src = {NULL, K, t, K, QMM_ACT_NONE, gs};
        for (int64_t p = 0; p < panels; p++) {
            src.x = (const char *)x + (size_t)((r0 + p * mr) * K) * qmm_dtype_size(t);
            const int pr = (int)(rows - p * mr < mr ? rows - p * mr : mr);
            qmm_float_act_panel_ref(&src, pr, mr, bf16, E + (size_t)(p * Ka * mr) * es, Ka, tmp);
        }
        for (int th = 0; th < 2; th++) {
            A[th] = malloc(bytes);
            memset(A[th], 0xff, bytes); /* NaN bits: the pass must overwrite every element */
            TU_CHECK_OK(qmm_float_act_pack(ctx[th], &c, r0, rows, mr, bf16, A[th], Ka));
            int64_t bad = -1;
            for (size_t i = 0; i < bytes && bad < 0; i++)
                if (A[th][i] != E[i]) bad = (int64_t)i;
            TU_CHECK(bad < 0, "qmm_float_act_pack %d thr K=%lld Ka=%lld mr=%d %s x=%s gs=%d rows [%lld, +%lld): "
                     "first bad byte %lld", th + 1, (long long)K, (long long)Ka, mr, bf16 ? "bf16" : "f32",
                     qmm_dtype_name(t), gs, (long long)r0, (long long)rows, (long long)bad);
            g_panels += (int)panels;
        }
        free(A[0]); free(A[1]); free(E); free(tmp); free(x); free(wq);
        qmm_weight_destroy(w);
    }
    for (int t = 0; t < 2; t++) qmm_context_destroy(ctx[t]);
}

int main(int argc, char **argv) {
    tu_init(argc, argv, "test_float_act");
    g_quick = getenv("QMM_TEST_QUICK") != NULL;
    const uint32_t f = qmm_cpu_features();
    const uint32_t need512 = QMM_CPU_AVX512F | QMM_CPU_AVX512BW | QMM_CPU_AVX512VL | QMM_CPU_AVX512DQ;
    const uint32_t need2 = QMM_CPU_AVX2 | QMM_CPU_FMA | QMM_CPU_F16C;
    g_have_avx512 = (f & need512) == need512;
    g_have_avx2 = (f & need2) == need2;
    if (!g_have_avx512) tu_skip("float_act_avx512", "CPU lacks AVX-512 F/BW/VL/DQ");
    if (!g_have_avx2) tu_skip("float_act_avx2", "CPU lacks AVX2/FMA/F16C");
    edge_rows();
    all_codes();
    random_panels();
    chunk_pass();
    tu_note("%d panels compared (%s%s)", g_panels, g_have_avx512 ? "avx512 " : "", g_have_avx2 ? "avx2" : "");
    if (!NAN_BITS_EXACT) tu_note("clang build: %d NaN elements matched as NaN with other sign/payload bits", g_nan_loose);
    return tu_finish();
}
