/*
 * test_api_abuse.c — hostile arguments to every public function of qmm.h, qmm_io.h and (when
 * built with MPI) the non-collective parts of qmm_dist.h: NULL pointers in every position,
 * zero/negative/huge sizes (products that overflow int64/size_t must be refused before any
 * allocation), strides smaller than widths, unknown enum values, scale counts, K % g != 0, odd
 * swiglu widths, weights used across contexts, destroy(NULL). Every call must return its
 * documented status with a message naming what was wrong, and never crash, hang or leak (the
 * ASan run checks leaks). The hostile values are drawn from a seeded RNG (replay: QMM_SEED=N).
 * Allocations stay small: no shape that passes validation is larger than a few KiB.
 */
#define _POSIX_C_SOURCE 200809L
#include "qmm.h"
#include "qmm_io.h"
#ifdef QMM_WITH_MPI
#include "qmm_dist.h"
#endif
#include "testutil.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* status must be `want` and the message must contain `needle` (case-sensitive) */
#define EXPECT(expr, want, needle)                                                                          \
    do {                                                                                                    \
        qmm_status s_ = (expr);                                                                             \
        TU_CHECK(s_ == (want), "%s -> %s, want %s (%s)", #expr, qmm_status_name(s_), qmm_status_name(want), \
                 qmm_last_error());                                                                         \
        if (s_ != QMM_OK)                                                                                   \
            TU_CHECK(strstr(qmm_last_error(), (needle)) != NULL, "%s: message '%s' does not name '%s'",     \
                     #expr, qmm_last_error(), (needle));                                                    \
    } while (0)
/* any error status (not OK), message non-empty */
#define EXPECT_ERR(expr)                                                                                     \
    do {                                                                                                     \
        qmm_status s_ = (expr);                                                                              \
        TU_CHECK(s_ != QMM_OK && qmm_last_error()[0], "%s -> %s (%s), want an error with a message", #expr, \
                 qmm_status_name(s_), qmm_last_error());                                                     \
    } while (0)

/* the engine of the calls meant to succeed: AUTO, or REF when QMM_MAX_ISA=none leaves no engine */
static qmm_engine_id g_run = QMM_ENGINE_AUTO;

static const int64_t HUGE31 = (int64_t)1 << 31;
static const int64_t HUGE62 = (int64_t)1 << 62;

/* one of several hostile int64 sizes */
static int64_t hostile_size(void) {
    static const int64_t v[] = {0, -1, -64, INT64_MIN, INT64_MAX, (int64_t)1 << 62, (int64_t)1 << 40};
    return v[tu_rand_int(0, (int64_t)(sizeof v / sizeof v[0]) - 1)];
}

/* ---------------------------------------------------------------- names, enums, hardware */
static void test_names(void) {
    TU_CHECK(strcmp(qmm_status_name((qmm_status)99), "QMM_ERR_UNKNOWN") == 0, "status 99 name");
    TU_CHECK(strcmp(qmm_status_name((qmm_status)-1), "QMM_ERR_UNKNOWN") == 0, "status -1 name");
    TU_CHECK(strcmp(qmm_dtype_name((qmm_dtype)99), "unknown") == 0, "dtype 99 name");
    TU_CHECK(strcmp(qmm_dtype_name((qmm_dtype)-1), "unknown") == 0, "dtype -1 name");
    TU_CHECK(qmm_dtype_size((qmm_dtype)99) == 0 && qmm_dtype_size((qmm_dtype)-3) == 0, "dtype 99 size");
    TU_CHECK(strcmp(qmm_act_name((qmm_act)7), "unknown") == 0, "act 7 name");
    TU_CHECK(strcmp(qmm_engine_name((qmm_engine_id)42), "unknown") == 0, "engine 42 name");
    TU_CHECK(strcmp(qmm_engine_name((qmm_engine_id)-5), "unknown") == 0, "engine -5 name");
    TU_CHECK(qmm_engine_from_name(NULL) == QMM_ENGINE_UNKNOWN, "engine from NULL name");
    TU_CHECK(qmm_engine_from_name("") == QMM_ENGINE_UNKNOWN, "engine from empty name");
    TU_CHECK(!qmm_engine_is_int8((qmm_engine_id)42) && !qmm_engine_is_int8((qmm_engine_id)-1), "is_int8(42)");
    TU_CHECK(strcmp(qmm_isa_name((qmm_isa)99), "unknown") == 0 && strcmp(qmm_isa_name((qmm_isa)-1), "unknown") == 0,
             "isa 99 name");
    TU_CHECK((int)qmm_isa_from_name(NULL) == -1 && (int)qmm_isa_from_name("avx1024") == -1, "isa from bad name");
    TU_CHECK(qmm_cpu_feature_name(0) == NULL && qmm_cpu_feature_name(3) == NULL && qmm_cpu_feature_name(1u << 31) == NULL,
             "feature name of not-one-bit");
    TU_CHECK(qmm_cpu_brand() != NULL, "cpu brand");
    char why[QMM_REASON_MAX];
    TU_CHECK(!qmm_engine_available((qmm_engine_id)42, why, sizeof why) && why[0], "engine 42 available");
    TU_CHECK(!qmm_engine_available((qmm_engine_id)-7, why, sizeof why) && why[0], "engine -7 available");
    why[0] = 'x';
    (void)qmm_engine_available((qmm_engine_id)42, why, 0); /* size 0: nothing written */
    TU_CHECK(why[0] == 'x', "why written with size 0");
    (void)qmm_engine_available((qmm_engine_id)42, NULL, 0);
    (void)qmm_engine_available(QMM_ENGINE_AMX_INT8, NULL, 16);
}

/* ---------------------------------------------------------------- context */
static void test_context(void) {
    qmm_context *c = (qmm_context *)(uintptr_t)1;
    EXPECT(qmm_context_create(NULL, NULL), QMM_ERR_INVALID_ARGUMENT, "out");
    qmm_context_options o = qmm_context_options_default();
    o.n_threads = -1;
    EXPECT(qmm_context_create(&o, &c), QMM_ERR_INVALID_ARGUMENT, "n_threads");
    TU_CHECK(c == NULL, "out not cleared on error");
    o.n_threads = 1 << 20;
    EXPECT(qmm_context_create(&o, &c), QMM_ERR_INVALID_ARGUMENT, "n_threads");
    o = qmm_context_options_default();
    o.fallback = (qmm_fallback_policy)7;
    EXPECT(qmm_context_create(&o, &c), QMM_ERR_INVALID_ARGUMENT, "fallback");
    o = qmm_context_options_default();
    o.max_isa = 99;
    EXPECT(qmm_context_create(&o, &c), QMM_ERR_INVALID_ARGUMENT, "max_isa");
    o.max_isa = -2;
    EXPECT(qmm_context_create(&o, &c), QMM_ERR_INVALID_ARGUMENT, "max_isa");
    /* pinning to CPUs that do not exist: refused with a reason or ignored, never a crash */
    o = qmm_context_options_default();
    int cpus[2] = {100000, -3};
    o.n_threads = 2;
    o.pin_threads = 1;
    o.cpu_list = cpus;
    EXPECT(qmm_context_create(&o, &c), QMM_ERR_INVALID_ARGUMENT, "cpu_list[0]=100000");
    cpus[0] = 0;
    EXPECT(qmm_context_create(&o, &c), QMM_ERR_INVALID_ARGUMENT, "cpu_list[1]=-3");
    o.n_threads = 0; /* a list of unknown length */
    EXPECT(qmm_context_create(&o, &c), QMM_ERR_INVALID_ARGUMENT, "cpu_list");
    TU_CHECK(qmm_context_threads(NULL) == 0 && qmm_context_max_isa(NULL) == -1, "NULL context queries");
    qmm_counters k;
    memset(&k, 0xff, sizeof k);
    qmm_get_counters(NULL, &k);
    qmm_counters zero;
    memset(&zero, 0, sizeof zero);
    TU_CHECK(!memcmp(&k, &zero, sizeof k), "counters of NULL context");
    qmm_get_counters(NULL, NULL);
    qmm_reset_counters(NULL);
    qmm_context_destroy(NULL);
}

/* ---------------------------------------------------------------- weights */
static void test_weights(qmm_context *ctx) {
    enum { N = 5, K = 64 };
    int8_t wq[N * K];
    float sc[N] = {0.5f, 0.25f, 1.0f, 2.0f, 0.125f};
    float wf[N * K];
    tu_fill_i8(wq, N * K, -127, 127);
    tu_fill_float(wf, QMM_F32, N * K, 1.0f);
    qmm_weight *w = (qmm_weight *)(uintptr_t)1;
    qmm_weight_desc d = qmm_weight_desc_default();
    d.name = "blocks.3.mlp.fc2";
    d.N = N; d.K = K; d.data = wq; d.scale = sc; d.n_scale = N;

    EXPECT(qmm_weight_create_int8(ctx, &d, NULL), QMM_ERR_INVALID_ARGUMENT, "out");
    EXPECT(qmm_weight_create_int8(NULL, NULL, &w), QMM_ERR_INVALID_ARGUMENT, "desc"); /* no ctx: not the error */
    TU_CHECK(w == NULL, "weight out not cleared on error");
    EXPECT(qmm_weight_create_int8(ctx, NULL, &w), QMM_ERR_INVALID_ARGUMENT, "desc");
    qmm_weight_desc b = d; b.data = NULL;
    EXPECT(qmm_weight_create_int8(ctx, &b, &w), QMM_ERR_INVALID_ARGUMENT, "data");
    b = d; b.scale = NULL;
    EXPECT(qmm_weight_create_int8(ctx, &b, &w), QMM_ERR_INVALID_ARGUMENT, "scale");
    /* scale counts: only 1 or N */
    static const int64_t bad_ns[] = {0, 2, N + 1, -1, -N};
    for (size_t i = 0; i < sizeof bad_ns / sizeof bad_ns[0]; i++) {
        b = d; b.n_scale = bad_ns[i];
        EXPECT(qmm_weight_create_int8(ctx, &b, &w), QMM_ERR_INVALID_ARGUMENT, "scales");
    }
    /* zero/negative/huge shapes; n_scale follows N so the shape check is the one hit */
    for (int i = 0; i < 20; i++) {
        b = d;
        if (tu_rand_int(0, 1)) b.N = hostile_size(); else b.K = hostile_size();
        b.n_scale = 1;
        qmm_status st = qmm_weight_create_int8(ctx, &b, &w);
        TU_CHECK(st == QMM_ERR_INVALID_ARGUMENT || st == QMM_ERR_UNSUPPORTED,
                 "int8 weight [%lld, %lld] -> %s (%s)", (long long)b.N, (long long)b.K, qmm_status_name(st),
                 qmm_last_error());
        TU_CHECK(strstr(qmm_last_error(), "blocks.3.mlp.fc2") != NULL, "message does not name the layer: %s",
                 qmm_last_error());
    }
    /* products that overflow or cannot be allocated: refused before allocating */
    b = d; b.N = HUGE31; b.K = HUGE31; b.n_scale = 1;
    EXPECT(qmm_weight_create_int8(ctx, &b, &w), QMM_ERR_UNSUPPORTED, "too large");
    b = d; b.N = 1 << 20; b.K = 1 << 20; b.n_scale = 1;
    EXPECT(qmm_weight_create_int8(ctx, &b, &w), QMM_ERR_UNSUPPORTED, "too large");
    b = d; b.ld = HUGE62;   /* N * ld overflows int64 */
    EXPECT(qmm_weight_create_int8(ctx, &b, &w), QMM_ERR_UNSUPPORTED, "stride");
    /* strides smaller than the width */
    b = d; b.ld = K - 1;
    EXPECT(qmm_weight_create_int8(ctx, &b, &w), QMM_ERR_INVALID_ARGUMENT, "stride");
    b = d; b.ld = -K;
    EXPECT(qmm_weight_create_int8(ctx, &b, &w), QMM_ERR_INVALID_ARGUMENT, "stride");
    /* convrot groups */
    static const int bad_gs[] = {1, 2, 32, 128, 512, -16, 7, 262144}; /* not powers of 4 from 4 to 65536 */
    for (size_t i = 0; i < sizeof bad_gs / sizeof bad_gs[0]; i++) {
        b = d; b.convrot_gs = bad_gs[i];
        EXPECT(qmm_weight_create_int8(ctx, &b, &w), QMM_ERR_UNSUPPORTED, "group");
    }
    b = d; b.K = 48; b.convrot_gs = 64;  /* K % g != 0 */
    EXPECT(qmm_weight_create_int8(ctx, &b, &w), QMM_ERR_UNSUPPORTED, "multiple");
    b = d; b.bias = sc; b.bias_dtype = (qmm_dtype)99;
    EXPECT(qmm_weight_create_int8(ctx, &b, &w), QMM_ERR_UNSUPPORTED, "bias");
    b.bias_dtype = QMM_I8;
    EXPECT(qmm_weight_create_int8(ctx, &b, &w), QMM_ERR_UNSUPPORTED, "bias");
    /* a very long name is truncated, not overflowed; a NULL name is fine */
    char longname[600];
    memset(longname, 'L', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    b = d; b.name = longname;
    TU_CHECK_OK(qmm_weight_create_int8(ctx, &b, &w));
    qmm_weight_info info;
    qmm_weight_get_info(w, &info);
    TU_CHECK(info.name && strlen(info.name) < sizeof longname, "long name kept whole?");
    qmm_weight_destroy(w);
    b = d; b.name = NULL;
    TU_CHECK_OK(qmm_weight_create_int8(ctx, &b, &w));
    qmm_weight_destroy(w);
    qmm_weight_get_info(NULL, &info);
    TU_CHECK(info.N == 0 && info.name == NULL, "info of NULL weight");
    qmm_weight_get_info(NULL, NULL);
    qmm_weight_destroy(NULL);

    /* float weights */
    EXPECT(qmm_weight_create_float(ctx, "emb", wf, QMM_F32, N, K, 0, NULL, QMM_F32, NULL), QMM_ERR_INVALID_ARGUMENT, "out");
    EXPECT(qmm_weight_create_float(NULL, "emb", NULL, QMM_F32, N, K, 0, NULL, QMM_F32, &w), QMM_ERR_INVALID_ARGUMENT, "data");
    EXPECT(qmm_weight_create_float(ctx, "emb", NULL, QMM_F32, N, K, 0, NULL, QMM_F32, &w), QMM_ERR_INVALID_ARGUMENT, "data");
    EXPECT(qmm_weight_create_float(ctx, "emb", wf, QMM_I8, N, K, 0, NULL, QMM_F32, &w), QMM_ERR_UNSUPPORTED, "dtype");
    EXPECT(qmm_weight_create_float(ctx, "emb", wf, (qmm_dtype)99, N, K, 0, NULL, QMM_F32, &w), QMM_ERR_UNSUPPORTED, "dtype");
    EXPECT(qmm_weight_create_float(ctx, "emb", wf, QMM_F32, N, K, K - 1, NULL, QMM_F32, &w), QMM_ERR_INVALID_ARGUMENT, "stride");
    EXPECT(qmm_weight_create_float(ctx, "emb", wf, QMM_F32, N, K, 0, sc, (qmm_dtype)42, &w), QMM_ERR_UNSUPPORTED, "bias");
    for (int i = 0; i < 10; i++) {
        int64_t n = hostile_size(), k = K;
        if (tu_rand_int(0, 1)) { k = n; n = N; }
        EXPECT_ERR(qmm_weight_create_float(ctx, "emb", wf, QMM_BF16, n, k, 0, NULL, QMM_F32, &w));
        TU_CHECK(w == NULL, "float weight out set on error");
    }
    EXPECT(qmm_weight_create_float(ctx, "emb", wf, QMM_F32, HUGE31, HUGE31, 0, NULL, QMM_F32, &w), QMM_ERR_UNSUPPORTED,
           "too large");
    EXPECT(qmm_weight_create_float(ctx, "emb", wf, QMM_BF16, 1 << 20, 1 << 20, 0, NULL, QMM_F32, &w), QMM_ERR_UNSUPPORTED,
           "too large");
    EXPECT(qmm_weight_create_float(ctx, "emb", wf, QMM_F32, N, K, HUGE62, NULL, QMM_F32, &w), QMM_ERR_UNSUPPORTED,
           "stride");

    /* SPEC §2 quantize / dequantize */
    int8_t oq[N * K];
    float os[N];
    float out[N * K];
    int gs = -5;
    qmm_quant_options qo = {0, 0};
    EXPECT(qmm_quantize_weight(NULL, QMM_F32, N, K, 0, &qo, oq, os, &gs), QMM_ERR_INVALID_ARGUMENT, "w");
    EXPECT(qmm_quantize_weight(wf, QMM_F32, N, K, 0, &qo, NULL, os, &gs), QMM_ERR_INVALID_ARGUMENT, "wq");
    EXPECT(qmm_quantize_weight(wf, QMM_F32, N, K, 0, &qo, oq, NULL, &gs), QMM_ERR_INVALID_ARGUMENT, "scales");
    EXPECT(qmm_quantize_weight(wf, (qmm_dtype)99, N, K, 0, &qo, oq, os, &gs), QMM_ERR_UNSUPPORTED, "dtype");
    EXPECT(qmm_quantize_weight(wf, QMM_I32, N, K, 0, &qo, oq, os, &gs), QMM_ERR_UNSUPPORTED, "dtype");
    EXPECT(qmm_quantize_weight(wf, QMM_F32, N, K, K - 3, &qo, oq, os, &gs), QMM_ERR_INVALID_ARGUMENT, "stride");
    EXPECT(qmm_quantize_weight(wf, QMM_F32, N, K, -1, &qo, oq, os, &gs), QMM_ERR_INVALID_ARGUMENT, "stride");
    for (int i = 0; i < 10; i++) {
        int64_t n = hostile_size(), k = K;
        if (tu_rand_int(0, 1)) { k = n; n = N; }
        EXPECT_ERR(qmm_quantize_weight(wf, QMM_F32, n, k, 0, &qo, oq, os, &gs));
    }
    EXPECT(qmm_quantize_weight(wf, QMM_F32, N, HUGE62, 0, &qo, oq, os, &gs), QMM_ERR_UNSUPPORTED, "too large");
    EXPECT(qmm_quantize_weight(wf, QMM_F32, HUGE62, HUGE62, 0, &qo, oq, os, &gs), QMM_ERR_UNSUPPORTED, "too large");
    qo.convrot_gs = 32;
    EXPECT(qmm_quantize_weight(wf, QMM_F32, N, K, 0, &qo, oq, os, &gs), QMM_ERR_UNSUPPORTED, "group");
    qo.convrot_gs = 256;
    EXPECT(qmm_quantize_weight(wf, QMM_F32, N, K, 0, &qo, oq, os, &gs), QMM_ERR_UNSUPPORTED, "multiple");
    qo.convrot_gs = -1; /* auto: 64 divides K */
    TU_CHECK_OK(qmm_quantize_weight(wf, QMM_F32, N, K, 0, &qo, oq, os, NULL));
    TU_CHECK_OK(qmm_quantize_weight(wf, QMM_F32, N, K, 0, NULL, oq, os, &gs));
    TU_CHECK(gs == 0, "no options: no rotation (gs=%d)", gs);
    EXPECT(qmm_dequantize_weight(NULL, N, K, os, N, 0, out), QMM_ERR_INVALID_ARGUMENT, "wq is NULL");
    EXPECT(qmm_dequantize_weight(oq, N, K, NULL, N, 0, out), QMM_ERR_INVALID_ARGUMENT, "scales is NULL");
    EXPECT(qmm_dequantize_weight(oq, N, K, os, N, 0, NULL), QMM_ERR_INVALID_ARGUMENT, "out is NULL");
    EXPECT(qmm_dequantize_weight(oq, N, K, os, 3, 0, out), QMM_ERR_INVALID_ARGUMENT, "scales");
    EXPECT(qmm_dequantize_weight(oq, N, K, os, N, 32, out), QMM_ERR_UNSUPPORTED, "group");
    EXPECT(qmm_dequantize_weight(oq, N, K, os, N, 256, out), QMM_ERR_UNSUPPORTED, "group");
    EXPECT(qmm_dequantize_weight(oq, 0, K, os, N, 0, out), QMM_ERR_INVALID_ARGUMENT, "shape");
    EXPECT(qmm_dequantize_weight(oq, HUGE62, HUGE62, os, 1, 0, out), QMM_ERR_UNSUPPORTED, "too large");
    TU_CHECK_OK(qmm_dequantize_weight(oq, N, K, os, N, 0, out));

    qo.convrot_gs = 0;
    EXPECT(qmm_weight_quantize(ctx, "q", wf, QMM_F32, N, K, 0, &qo, NULL, QMM_F32, NULL), QMM_ERR_INVALID_ARGUMENT, "out");
    EXPECT(qmm_weight_quantize(NULL, "q", NULL, QMM_F32, N, K, 0, &qo, NULL, QMM_F32, &w), QMM_ERR_INVALID_ARGUMENT, "w is NULL");
    EXPECT(qmm_weight_quantize(ctx, "q", NULL, QMM_F32, N, K, 0, &qo, NULL, QMM_F32, &w), QMM_ERR_INVALID_ARGUMENT, "w");
    EXPECT(qmm_weight_quantize(ctx, "q", wf, QMM_BF16, 0, K, 0, &qo, NULL, QMM_F32, &w), QMM_ERR_INVALID_ARGUMENT, "shape");
    EXPECT(qmm_weight_quantize(ctx, "q", wf, QMM_F32, HUGE31, HUGE31, 0, &qo, NULL, QMM_F32, &w), QMM_ERR_UNSUPPORTED,
           "too large");
    EXPECT(qmm_weight_quantize(ctx, "q", wf, QMM_F32, N, K, 0, &qo, sc, (qmm_dtype)99, &w), QMM_ERR_UNSUPPORTED, "bias");
    EXPECT(qmm_weight_quantize(ctx, "q", wf, (qmm_dtype)7, N, K, 0, &qo, NULL, QMM_F32, &w), QMM_ERR_UNSUPPORTED, "dtype");
    TU_CHECK(w == NULL, "quantize out set on error");
}

/* ---------------------------------------------------------------- the linear call */
static void test_linear(qmm_context *ctx, qmm_context *ctx2) {
    enum { N = 7, K = 64, M = 3 };
    int8_t wq[N * K];
    float sc[N];
    tu_fill_i8(wq, N * K, -127, 127);
    for (int i = 0; i < N; i++) sc[i] = 0.01f * (float)(i + 1);
    float x[M * 2 * K], y[M * N], y2[M * N], ts[M], amax[M];
    int32_t acc[M * N];
    tu_fill_float(x, QMM_F32, M * 2 * K, 1.0f);
    qmm_weight_desc d = qmm_weight_desc_default();
    d.name = "blocks.1.attn.out_proj";
    d.N = N; d.K = K; d.data = wq; d.scale = sc; d.n_scale = tu_rand_int(0, 1) ? N : 1;
    qmm_weight *w = NULL, *wf = NULL;
    TU_CHECK_OK(qmm_weight_create_int8(ctx2, &d, &w));  /* created in another context */
    float wfl[N * K];
    tu_fill_float(wfl, QMM_F32, N * K, 0.1f);
    TU_CHECK_OK(qmm_weight_create_float(ctx, "blocks.1.norm_proj", wfl, QMM_F32, N, K, 0, NULL, QMM_F32, &wf));
    if (!w || !wf) { qmm_weight_destroy(w); qmm_weight_destroy(wf); return; }
    const char *nm = d.name;

    qmm_linear_args a = qmm_linear_args_default(), b;
    a.M = M; a.x = x; a.x_dtype = QMM_F32; a.y = y; a.y_dtype = QMM_F32; a.engine = g_run;
    /* the weight of ctx2 runs in ctx (and gives the bits of the reference) */
    TU_CHECK_OK(qmm_linear(ctx, w, &a));
    b = a; b.engine = QMM_ENGINE_REF; b.y = y2;
    TU_CHECK_OK(qmm_linear(ctx2, w, &b));
    TU_CHECK(tu_first_diff(y, y2, QMM_F32, (int64_t)(sizeof y / sizeof y[0])) < 0,
             "weight from ctx2 used in ctx: bits differ from ref");

    EXPECT(qmm_linear(NULL, w, &a), QMM_ERR_INVALID_ARGUMENT, "ctx");
    EXPECT(qmm_linear(ctx, NULL, &a), QMM_ERR_INVALID_ARGUMENT, "weight");
    EXPECT(qmm_linear(ctx, w, NULL), QMM_ERR_INVALID_ARGUMENT, "args");
    b = a; b.x = NULL;
    EXPECT(qmm_linear(ctx, w, &b), QMM_ERR_INVALID_ARGUMENT, "x is NULL");
    b = a; b.y = NULL;
    EXPECT(qmm_linear(ctx, w, &b), QMM_ERR_INVALID_ARGUMENT, "y is NULL");
    for (int i = 0; i < 12; i++) {
        b = a;
        /* invalid for sure: negative, or products that overflow (a stride of 2^40 with small M
         * is a legal claim about the caller's buffer, so it is not drawn here) */
        static const int64_t bad[] = {0, -1, -64, INT64_MIN, INT64_MAX, (int64_t)1 << 62};
        int64_t v = bad[tu_rand_int(0, (int64_t)(sizeof bad / sizeof bad[0]) - 1)];
        int which = (int)tu_rand_int(0, 2);
        if (which == 0) b.M = v; else if (which == 1) b.ldx = v; else b.ldy = v;
        if (v == 0) continue; /* 0 strides mean "dense" */
        qmm_status st = qmm_linear(ctx, w, &b);
        TU_CHECK(st == QMM_ERR_INVALID_ARGUMENT || st == QMM_ERR_UNSUPPORTED,
                 "M=%lld ldx=%lld ldy=%lld -> %s (%s)", (long long)b.M, (long long)b.ldx, (long long)b.ldy,
                 qmm_status_name(st), qmm_last_error());
        TU_CHECK(strstr(qmm_last_error(), nm) != NULL, "message does not name the layer: %s", qmm_last_error());
    }
    b = a; b.M = HUGE62;   /* M * ldx overflows */
    EXPECT(qmm_linear(ctx, w, &b), QMM_ERR_UNSUPPORTED, "too large");
    b = a; b.M = HUGE31 * 8; b.ldx = HUGE31 * 8;
    EXPECT(qmm_linear(ctx, w, &b), QMM_ERR_UNSUPPORTED, "too large");
    b = a; b.ldx = K - 1;
    EXPECT(qmm_linear(ctx, w, &b), QMM_ERR_INVALID_ARGUMENT, "stride");
    b = a; b.ldy = N - 1;
    EXPECT(qmm_linear(ctx, w, &b), QMM_ERR_INVALID_ARGUMENT, "stride");
    b = a; b.x_dtype = (qmm_dtype)99;
    EXPECT(qmm_linear(ctx, w, &b), QMM_ERR_UNSUPPORTED, "x dtype");
    b = a; b.x_dtype = QMM_I8;
    EXPECT(qmm_linear(ctx, w, &b), QMM_ERR_UNSUPPORTED, "x dtype");
    b = a; b.y_dtype = (qmm_dtype)99;
    EXPECT(qmm_linear(ctx, w, &b), QMM_ERR_UNSUPPORTED, "out dtype");
    b = a; b.y_dtype = QMM_U8;
    EXPECT(qmm_linear(ctx, w, &b), QMM_ERR_UNSUPPORTED, "out dtype");
    b = a; b.act = (qmm_act)7;
    EXPECT(qmm_linear(ctx, w, &b), QMM_ERR_INVALID_ARGUMENT, "input_act");
    b = a; b.act = (qmm_act)-1;
    EXPECT(qmm_linear(ctx, w, &b), QMM_ERR_INVALID_ARGUMENT, "input_act");
    b = a; b.act = QMM_ACT_SWIGLU; b.x_cols = 2 * K - 1;
    EXPECT(qmm_linear(ctx, w, &b), QMM_ERR_INVALID_ARGUMENT, "odd");
    b = a; b.act = QMM_ACT_SWIGLU; b.x_cols = K;
    EXPECT(qmm_linear(ctx, w, &b), QMM_ERR_INVALID_ARGUMENT, "swiglu");
    b = a; b.act = QMM_ACT_SWIGLU; b.ldx = K;   /* stride of a K-wide row: smaller than 2K */
    EXPECT(qmm_linear(ctx, w, &b), QMM_ERR_INVALID_ARGUMENT, "stride");
    b = a; b.x_cols = -5;
    EXPECT(qmm_linear(ctx, w, &b), QMM_ERR_INVALID_ARGUMENT, "columns");
    b = a; b.act = QMM_ACT_SWIGLU; b.x_cols = 2 * K;
    TU_CHECK_OK(qmm_linear(ctx, w, &b));
    b = a; b.engine = (qmm_engine_id)42;
    EXPECT(qmm_linear(ctx, w, &b), QMM_ERR_INVALID_ARGUMENT, "engine");
    b = a; b.engine = (qmm_engine_id)-3;
    EXPECT(qmm_linear(ctx, w, &b), QMM_ERR_INVALID_ARGUMENT, "engine");
    b = a; b.engine = QMM_ENGINE_COUNT;
    EXPECT(qmm_linear(ctx, w, &b), QMM_ERR_INVALID_ARGUMENT, "engine");
    char why[QMM_REASON_MAX];
    qmm_engine_id all[QMM_ENGINE_COUNT];
    for (int i = 0, n = tu_engines(TU_ENGINES_ALL, all); i < n; i++) {
        if (qmm_engine_available(all[i], why, sizeof why)) continue;
        b = a; b.engine = all[i];
        EXPECT(qmm_linear(ctx, w, &b), QMM_ERR_UNSUPPORTED_HARDWARE, qmm_engine_name(all[i]));
    }
    /* i32 output of a float weight; shared token scales on a float weight */
    b = a; b.y_dtype = QMM_I32; b.y = acc;
    EXPECT(qmm_linear(ctx, wf, &b), QMM_ERR_UNSUPPORTED, "i32");
    b = a; b.token_scales_in = ts;
    for (int i = 0; i < M; i++) ts[i] = 0.1f;
    EXPECT(qmm_linear(ctx, wf, &b), g_run == QMM_ENGINE_AUTO ? QMM_ERR_NO_ENGINE : QMM_ERR_UNSUPPORTED, "token scales");
    b = a; b.y_dtype = QMM_I32; b.y = acc; b.token_scales = ts;
    TU_CHECK_OK(qmm_linear(ctx, w, &b));
    /* hostile shared token scales (0, negative, NaN, inf): no crash, and every engine gives the
     * reference's bits */
    {
        const float hs[4] = {0.0f, -1.0f, __builtin_nanf(""), __builtin_inff()};
        for (int i = 0; i < M; i++) ts[i] = hs[tu_rand_int(0, 3)];
        b = a; b.token_scales_in = ts; b.y = y;
        TU_CHECK_OK(qmm_linear(ctx, w, &b));
        b.engine = QMM_ENGINE_REF; b.y = y2;
        TU_CHECK_OK(qmm_linear(ctx, w, &b));
        TU_CHECK(tu_first_diff(y, y2, QMM_F32, (int64_t)(sizeof y / sizeof y[0])) < 0,
                 "hostile token_scales_in: engine bits differ from ref (M=%d N=%d K=%d)",
                 M, N, K);
    }
    /* the counters moved for errors */
    qmm_counters k;
    qmm_get_counters(ctx, &k);
    TU_CHECK(k.op[QMM_OP_LINEAR].errors > 0, "errors counted (%llu)", (unsigned long long)k.op[QMM_OP_LINEAR].errors);

    /* plan */
    qmm_plan_info p;
    EXPECT(qmm_plan(NULL, w, &a, &p), QMM_ERR_INVALID_ARGUMENT, "ctx");
    EXPECT(qmm_plan(ctx, w, &a, NULL), QMM_ERR_INVALID_ARGUMENT, "out");
    EXPECT(qmm_plan(ctx, NULL, &a, &p), QMM_ERR_INVALID_ARGUMENT, "weight");
    EXPECT(qmm_plan(ctx, w, NULL, &p), QMM_ERR_INVALID_ARGUMENT, "args");
    b = a; b.x = NULL; b.y = NULL;
    TU_CHECK_OK(qmm_plan(ctx, w, &b, &p));
    b.M = 0;
    EXPECT(qmm_plan(ctx, w, &b, &p), QMM_ERR_INVALID_ARGUMENT, "M=0");
    b = a; b.M = HUGE62;
    EXPECT(qmm_plan(ctx, w, &b, &p), QMM_ERR_UNSUPPORTED, "too large");
    TU_CHECK_OK(qmm_plan(ctx, w, &a, &p));
    char txt[16];
    size_t need = qmm_plan_format(&p, NULL, 0);
    TU_CHECK(need > 0, "plan_format length");
    TU_CHECK(qmm_plan_format(&p, txt, sizeof txt) == need && strlen(txt) == sizeof txt - 1, "plan_format truncates");
    TU_CHECK(qmm_plan_format(NULL, txt, sizeof txt) == 0 && txt[0] == 0, "plan_format(NULL)");
    qmm_plan_info bogus;
    memset(&bogus, 0, sizeof bogus);
    bogus.engine = (qmm_engine_id)42;
    bogus.status = (qmm_status)99;
    for (int i = 0; i < QMM_ENGINE_MAX; i++) memset(bogus.reason[i], 'r', QMM_REASON_MAX); /* not terminated */
    char big[4096];
    (void)qmm_plan_format(&bogus, big, sizeof big);
    TU_CHECK(1, "plan_format on an unterminated reason did not crash");
    TU_CHECK(!strcmp(qmm_plan_reason(&bogus, QMM_ENGINE_AVX2_F32), "") && !qmm_plan_admits(&bogus, QMM_ENGINE_AVX2_F32),
             "plan_reason of an unterminated reason");
    TU_CHECK(!strcmp(qmm_plan_reason(NULL, QMM_ENGINE_REF), "") && !strcmp(qmm_plan_reason(&p, QMM_ENGINE_UNKNOWN), "") &&
                 !strcmp(qmm_plan_reason(&p, (qmm_engine_id)QMM_ENGINE_MAX), "") && !qmm_plan_admits(NULL, QMM_ENGINE_REF) &&
                 !qmm_plan_admits(&p, (qmm_engine_id)QMM_ENGINE_MAX) && !qmm_plan_admits(&p, QMM_ENGINE_UNKNOWN),
             "plan accessors on bad input");
    qmm_engine_info ei;
    EXPECT(qmm_engine_get_info(-1, &ei), QMM_ERR_INVALID_ARGUMENT, "index -1");
    EXPECT(qmm_engine_get_info(qmm_engine_count(), &ei), QMM_ERR_INVALID_ARGUMENT, "the library has");
    EXPECT(qmm_engine_get_info(0, NULL), QMM_ERR_INVALID_ARGUMENT, "out is NULL");
    EXPECT(qmm_convert(NULL, QMM_F32, big, QMM_F32, 1), QMM_ERR_INVALID_ARGUMENT, "src is NULL");
    TU_CHECK(!strcmp(qmm_engine_regime(QMM_ENGINE_AMX_INT8, NULL, 4), "") &&
                 !strcmp(qmm_engine_regime(QMM_ENGINE_AMX_INT8, w, 0), "") &&
                 !strcmp(qmm_engine_regime(QMM_ENGINE_AVX2_INT8, w, 4), "") &&
                 !strcmp(qmm_engine_regime(QMM_ENGINE_AMX_INT8, w, 4), "decode") &&
                 !strcmp(qmm_engine_regime(QMM_ENGINE_AMX_INT8, w, INT64_MAX), "blocked"),
             "engine regime");
    EXPECT(qmm_engine_tuning(QMM_ENGINE_AMX_INT8, NULL, 8), QMM_ERR_INVALID_ARGUMENT, "buf is NULL");
    TU_CHECK(qmm_engine_tuning(QMM_ENGINE_AVX2_INT8, big, sizeof big) == QMM_OK && big[0] == 0, "tuning of avx2_int8");
    setenv("QMM_AMX_BLOCKING", "kc=7", 1);
    EXPECT(qmm_engine_tuning(QMM_ENGINE_AMX_BF16, big, sizeof big), QMM_ERR_INVALID_ARGUMENT, "kc=7");
    TU_CHECK(strstr(big, "kc=512") != NULL, "an invalid QMM_AMX_BLOCKING shows the defaults: %s", big);
    unsetenv("QMM_AMX_BLOCKING");
    EXPECT(qmm_convert(big, QMM_I8, big, QMM_F32, 1), QMM_ERR_UNSUPPORTED, "i8 to f32");
    EXPECT(qmm_convert(big, QMM_F32, big, QMM_F32, -1), QMM_ERR_INVALID_ARGUMENT, "n=-1");

    /* amax and epilogue (SPEC §6 building blocks) */
    EXPECT(qmm_activation_amax(NULL, w, &a, amax), QMM_ERR_INVALID_ARGUMENT, "ctx");
    EXPECT(qmm_activation_amax(ctx, w, &a, NULL), QMM_ERR_INVALID_ARGUMENT, "amax");
    EXPECT(qmm_activation_amax(ctx, NULL, &a, amax), QMM_ERR_INVALID_ARGUMENT, "weight");
    EXPECT(qmm_activation_amax(ctx, w, NULL, amax), QMM_ERR_INVALID_ARGUMENT, "args");
    EXPECT(qmm_activation_amax(ctx, wf, &a, amax), QMM_ERR_UNSUPPORTED, "int8");
    b = a; b.M = -4;
    EXPECT(qmm_activation_amax(ctx, w, &b, amax), QMM_ERR_INVALID_ARGUMENT, "M=");
    b = a; b.x = NULL;
    EXPECT(qmm_activation_amax(ctx, w, &b, amax), QMM_ERR_INVALID_ARGUMENT, "x is NULL");
    b = a; b.y = NULL;
    TU_CHECK_OK(qmm_activation_amax(ctx, w, &b, amax));
    TU_CHECK(qmm_scale_from_amax(0.0f) == 1e-30f && qmm_scale_from_amax(-1.0f) == 1e-30f, "scale of amax 0 / -1");
    for (int i = 0; i < M * N; i++) acc[i] = (int32_t)tu_rand_int(-100000, 100000);
    EXPECT(qmm_linear_epilogue(NULL, w, M, acc, 0, ts, y, QMM_F32, 0), QMM_ERR_INVALID_ARGUMENT, "ctx is NULL");
    EXPECT(qmm_linear_epilogue(ctx, NULL, M, acc, 0, ts, y, QMM_F32, 0), QMM_ERR_INVALID_ARGUMENT, "weight is NULL");
    EXPECT(qmm_linear_epilogue(ctx, w, M, NULL, 0, ts, y, QMM_F32, 0), QMM_ERR_INVALID_ARGUMENT, "acc is NULL");
    EXPECT(qmm_linear_epilogue(ctx, w, M, acc, 0, NULL, y, QMM_F32, 0), QMM_ERR_INVALID_ARGUMENT, "token_scales is NULL");
    EXPECT(qmm_linear_epilogue(ctx, w, M, acc, 0, ts, NULL, QMM_F32, 0), QMM_ERR_INVALID_ARGUMENT, "y is NULL");
    EXPECT(qmm_linear_epilogue(ctx, w, 0, acc, 0, ts, y, QMM_F32, 0), QMM_ERR_INVALID_ARGUMENT, "M=0");
    EXPECT(qmm_linear_epilogue(ctx, w, -1, acc, 0, ts, y, QMM_F32, 0), QMM_ERR_INVALID_ARGUMENT, "M=-1");
    EXPECT(qmm_linear_epilogue(ctx, w, M, acc, N - 1, ts, y, QMM_F32, 0), QMM_ERR_INVALID_ARGUMENT, "strides");
    EXPECT(qmm_linear_epilogue(ctx, w, M, acc, 0, ts, y, QMM_F32, -N), QMM_ERR_INVALID_ARGUMENT, "strides");
    EXPECT(qmm_linear_epilogue(ctx, w, M, acc, 0, ts, y, (qmm_dtype)99, 0), QMM_ERR_UNSUPPORTED, "dtype");
    EXPECT(qmm_linear_epilogue(ctx, w, M, acc, 0, ts, y, QMM_I32, 0), QMM_ERR_UNSUPPORTED, "dtype");
    EXPECT(qmm_linear_epilogue(ctx, wf, M, acc, 0, ts, y, QMM_F32, 0), QMM_ERR_UNSUPPORTED, "int8");
    EXPECT(qmm_linear_epilogue(ctx, w, HUGE62, acc, HUGE62, ts, y, QMM_F32, 0), QMM_ERR_UNSUPPORTED, "too large");
    TU_CHECK_OK(qmm_linear_epilogue(ctx, w, M, acc, 0, ts, y, QMM_BF16, 0));

    /* the weight outlives its creating context: destroy ctx2's user (done by the caller) later */
    qmm_weight_destroy(w);
    qmm_weight_destroy(wf);
}

/* a weight created in a context that is destroyed before the weight is used */
static void test_weight_outlives_context(qmm_context *ctx) {
    enum { N = 3, K = 16 };
    int8_t wq[N * K];
    float sc = 0.5f, x[K], y[N];
    tu_fill_i8(wq, N * K, -127, 127);
    tu_fill_float(x, QMM_F32, K, 1.0f);
    qmm_context_options o = qmm_context_options_default();
    o.n_threads = 1;
    o.max_isa = QMM_ISA_AVX2; /* a capped creator: the user context may pick other engines */
    qmm_context *tmp = NULL;
    TU_CHECK_OK(qmm_context_create(&o, &tmp));
    if (!tmp) return;
    qmm_weight_desc d = qmm_weight_desc_default();
    d.name = "capped.creator"; d.N = N; d.K = K; d.data = wq; d.scale = &sc; d.n_scale = 1; d.convrot_gs = 16;
    qmm_weight *w = NULL;
    TU_CHECK_OK(qmm_weight_create_int8(tmp, &d, &w));
    qmm_context_destroy(tmp);
    if (!w) return;
    qmm_linear_args a = qmm_linear_args_default();
    a.M = 1; a.x = x; a.y = y; a.engine = g_run;
    TU_CHECK_OK(qmm_linear(ctx, w, &a));
    qmm_weight_destroy(w);
}

/* K beyond the exact-int32 limit (131071): every int8 engine refuses with the reason; the
 * reference (by name) still runs, summing mod 2^32 without undefined behaviour */
static void test_deep_k(qmm_context *ctx) {
    const int64_t K = 131072;
    int8_t *wq = malloc((size_t)K);
    float *x = malloc((size_t)K * sizeof(float));
    float sc = 0.5f, y = 0.0f;
    if (!wq || !x) { free(wq); free(x); TU_CHECK(0, "out of memory"); return; }
    memset(wq, -128, (size_t)K);
    for (int64_t k = 0; k < K; k++) x[k] = -1.0f;
    qmm_weight_desc d = qmm_weight_desc_default();
    d.name = "deep"; d.N = 1; d.K = K; d.data = wq; d.scale = &sc; d.n_scale = 1;
    qmm_weight *w = NULL;
    TU_CHECK_OK(qmm_weight_create_int8(ctx, &d, &w));
    if (w) {
        qmm_linear_args a = qmm_linear_args_default();
        a.M = 1; a.x = x; a.y = &y;
        qmm_plan_info p;
        TU_CHECK_OK(qmm_plan(ctx, w, &a, &p));
        qmm_engine_id i8[QMM_ENGINE_COUNT];
        for (int i = 0, n = tu_engines(TU_ENGINES_INT8, i8); i < n; i++)
            TU_CHECK(!p.admitted[i8[i]], "K=%lld: int8 engine %s admits (int32 could overflow)", (long long)K,
                     qmm_engine_name(i8[i]));
        if (qmm_engine_available(QMM_ENGINE_AVX512_VNNI, NULL, 0))
            TU_CHECK(strstr(p.reason[QMM_ENGINE_AVX512_VNNI], "overflow") != NULL, "reason '%s'",
                     p.reason[QMM_ENGINE_AVX512_VNNI]);
        a.engine = QMM_ENGINE_REF;
        TU_CHECK_OK(qmm_linear(ctx, w, &a));
        qmm_weight_destroy(w);
    }
    free(wq);
    free(x);
}

/* ---------------------------------------------------------------- files */
static void test_io(qmm_context *ctx) {
    qmm_st_file *f = (qmm_st_file *)(uintptr_t)1;
    EXPECT(qmm_st_open(NULL, &f), QMM_ERR_INVALID_ARGUMENT, "");
    EXPECT(qmm_st_open("/nonexistent/qmm/abuse.safetensors", NULL), QMM_ERR_INVALID_ARGUMENT, "");
    EXPECT(qmm_st_open("/nonexistent/qmm/abuse.safetensors", &f), QMM_ERR_IO, "abuse.safetensors");
    EXPECT(qmm_st_open("/", &f), QMM_ERR_IO, "/");
    EXPECT(qmm_st_open_memory(NULL, 16, &f), QMM_ERR_INVALID_ARGUMENT, "");
    unsigned char junk[64];
    for (size_t i = 0; i < sizeof junk; i++) junk[i] = (unsigned char)tu_rand_int(0, 255);
    EXPECT(qmm_st_open_memory(junk, 0, &f), QMM_ERR_FORMAT, "");
    EXPECT(qmm_st_open_memory(junk, 7, &f), QMM_ERR_FORMAT, "");
    EXPECT_ERR(qmm_st_open_memory(junk, sizeof junk, &f));
    EXPECT(qmm_st_open_memory(junk, sizeof junk, NULL), QMM_ERR_INVALID_ARGUMENT, "");
    /* a header length of 2^64 - 1 */
    unsigned char hl[16];
    memset(hl, 0xff, 8);
    memset(hl + 8, ' ', 8);
    EXPECT(qmm_st_open_memory(hl, sizeof hl, &f), QMM_ERR_FORMAT, "header");
    qmm_st_close(NULL);
    TU_CHECK(qmm_st_count(NULL) == 0 && qmm_st_at(NULL, 0) == NULL && qmm_st_get(NULL, "x") == NULL, "NULL file queries");
    TU_CHECK(qmm_st_metadata_count(NULL) == 0 && qmm_st_metadata_get(NULL, "k") == NULL, "NULL file metadata");
    TU_CHECK(qmm_st_file_size(NULL) == 0 && qmm_st_header_size(NULL) == 0 && qmm_st_path(NULL) != NULL, "NULL file sizes");
    const char *k = "x", *v = "y";
    qmm_st_metadata_at(NULL, 0, &k, &v);
    qmm_st_metadata_at(NULL, 0, NULL, NULL);
    qmm_st_release(NULL, NULL);
    const qmm_st_tensor *t = NULL;
    EXPECT_ERR(qmm_st_find(NULL, "x", &t));
    TU_CHECK(strcmp(qmm_st_dtype_name((qmm_st_dtype)99), "?") == 0 && qmm_st_dtype_bits((qmm_st_dtype)-1) == 0 &&
                 qmm_st_dtype_to_qmm((qmm_st_dtype)99) == -1,
             "unknown st dtype");
    (void)qmm_st_dtype_from_qmm((qmm_dtype)99);

    /* a valid small file in memory, then hostile queries on it */
    char path[256];
    snprintf(path, sizeof path, "/tmp/qmm_abuse_%d_%llu.safetensors", (int)getpid(), (unsigned long long)tu_seed());
    qmm_st_writer *wr = NULL;
    EXPECT(qmm_st_writer_create(NULL, &wr), QMM_ERR_INVALID_ARGUMENT, "");
    EXPECT(qmm_st_writer_create(path, NULL), QMM_ERR_INVALID_ARGUMENT, "");
    EXPECT(qmm_st_writer_create("/nonexistent/qmm/x.safetensors", &wr), QMM_ERR_IO, "x.safetensors");
    EXPECT_ERR(qmm_st_writer_set_metadata(NULL, "k", "v"));
    EXPECT_ERR(qmm_st_writer_declare(NULL, "t", QMM_ST_F32, 1, (const int64_t[]){2}));
    EXPECT_ERR(qmm_st_writer_begin(NULL));
    EXPECT_ERR(qmm_st_writer_write(NULL, junk, 4));
    EXPECT_ERR(qmm_st_writer_finish(NULL));
    qmm_st_writer_destroy(NULL);
    TU_CHECK_OK(qmm_st_writer_create(path, &wr));
    if (wr) {
        EXPECT_ERR(qmm_st_writer_set_metadata(wr, NULL, "v"));
        EXPECT_ERR(qmm_st_writer_set_metadata(wr, "k", NULL));
        EXPECT_ERR(qmm_st_writer_declare(wr, NULL, QMM_ST_F32, 1, (const int64_t[]){2}));
        EXPECT_ERR(qmm_st_writer_declare(wr, "t", (qmm_st_dtype)99, 1, (const int64_t[]){2}));
        EXPECT_ERR(qmm_st_writer_declare(wr, "t", QMM_ST_F32, -1, (const int64_t[]){2}));
        EXPECT_ERR(qmm_st_writer_declare(wr, "t", QMM_ST_F32, QMM_ST_MAX_DIMS + 1, (const int64_t[QMM_ST_MAX_DIMS + 1]){1}));
        EXPECT_ERR(qmm_st_writer_declare(wr, "t", QMM_ST_F32, 2, NULL));
        EXPECT_ERR(qmm_st_writer_declare(wr, "t", QMM_ST_F32, 2, (const int64_t[]){-1, 4}));
        EXPECT_ERR(qmm_st_writer_declare(wr, "t", QMM_ST_F32, 2, (const int64_t[]){HUGE62, HUGE62}));
        EXPECT_ERR(qmm_st_writer_declare(wr, "t", QMM_ST_F32, 3, (const int64_t[]){1 << 30, 1 << 30, 1 << 30}));
        EXPECT_ERR(qmm_st_writer_write(wr, junk, 4)); /* before begin */
        TU_CHECK_OK(qmm_st_writer_declare(wr, "t", QMM_ST_F32, 2, (const int64_t[]){2, 2}));
        EXPECT_ERR(qmm_st_writer_declare(wr, "t", QMM_ST_F32, 1, (const int64_t[]){2})); /* twice */
        EXPECT_ERR(qmm_st_writer_finish(wr)); /* data not written */
        qmm_st_writer_destroy(wr);            /* removes the temporary file */
        TU_CHECK(access(path, F_OK) != 0, "an unfinished writer left %s", path);
    }
    TU_CHECK_OK(qmm_st_writer_create(path, &wr));
    if (wr) {
        TU_CHECK_OK(qmm_st_writer_declare(wr, "t", QMM_ST_F32, 1, (const int64_t[]){2}));
        TU_CHECK_OK(qmm_st_writer_begin(wr));
        EXPECT_ERR(qmm_st_writer_begin(wr));
        EXPECT_ERR(qmm_st_writer_declare(wr, "u", QMM_ST_F32, 1, (const int64_t[]){2}));
        EXPECT_ERR(qmm_st_writer_write(wr, NULL, 8));
        EXPECT_ERR(qmm_st_writer_write(wr, junk, 12)); /* 4 bytes too many */
        qmm_st_writer_destroy(wr);
    }
    EXPECT_ERR(qmm_st_save(NULL, NULL, 0, NULL));
    EXPECT_ERR(qmm_st_save(path, NULL, 3, NULL));
    unlink(path);

    /* models */
    qmm_model *m = (qmm_model *)(uintptr_t)1;
    EXPECT_ERR(qmm_model_open(NULL, NULL, &m));
    EXPECT_ERR(qmm_model_open("/nonexistent/qmm/m.safetensors", NULL, NULL));
    EXPECT(qmm_model_open("/nonexistent/qmm/m.safetensors", NULL, &m), QMM_ERR_IO, "m.safetensors");
    EXPECT_ERR(qmm_model_open_memory(NULL, 10, NULL, &m));
    EXPECT_ERR(qmm_model_open_memory(junk, sizeof junk, NULL, &m));
    qmm_model_close(NULL);
    TU_CHECK(qmm_model_file(NULL) == NULL && qmm_model_layer_count(NULL) == 0 && qmm_model_layer(NULL, 0) == NULL,
             "NULL model queries");
    const qmm_layer_info *li = NULL;
    const qmm_weight *cw = NULL;
    qmm_weight *ow = NULL;
    EXPECT_ERR(qmm_model_find(NULL, "l", &li));
    EXPECT_ERR(qmm_model_weight(NULL, ctx, "l", &cw));
    EXPECT_ERR(qmm_model_load_all(NULL, ctx));
    EXPECT_ERR(qmm_model_create_weight(NULL, ctx, "l", &ow));
    {
        qmm_w4a8_desc wd;
        void *own = NULL;
        EXPECT_ERR(qmm_model_w4a8_desc(NULL, "l", &wd, &own));
        EXPECT_ERR(qmm_model_w4a8_desc(NULL, NULL, NULL, NULL));
        qmm_model_desc_release(NULL);
    }
    char js[8];
    size_t n1 = qmm_comfy_quant_json(256, NULL, 0);
    TU_CHECK(n1 > 0 && qmm_comfy_quant_json(256, js, sizeof js) == n1 && strlen(js) == sizeof js - 1,
             "comfy_quant_json length/truncation");
    (void)qmm_comfy_quant_json(7, js, sizeof js);
    (void)qmm_comfy_quant_json(-1, NULL, 0);
    /* a real model from a small checkpoint, then hostile calls on it */
    {
        int8_t wq[4 * 16];
        float s[4] = {1, 2, 3, 4};
        tu_fill_i8(wq, 64, -127, 127);
        const char *cq = "{\"format\": \"int8_tensorwise\"}";
        qmm_st_tensor ts[3];
        memset(ts, 0, sizeof ts);
        ts[0].name = "l.weight"; ts[0].dtype = QMM_ST_I8; ts[0].ndim = 2; ts[0].shape[0] = 4; ts[0].shape[1] = 16;
        ts[0].data = wq; ts[0].nbytes = sizeof wq;
        ts[1].name = "l.weight_scale"; ts[1].dtype = QMM_ST_F32; ts[1].ndim = 2; ts[1].shape[0] = 4; ts[1].shape[1] = 1;
        ts[1].data = s; ts[1].nbytes = sizeof s;
        ts[2].name = "l.comfy_quant"; ts[2].dtype = QMM_ST_U8; ts[2].ndim = 1; ts[2].shape[0] = (int64_t)strlen(cq);
        ts[2].data = cq; ts[2].nbytes = strlen(cq);
        for (int i = 0; i < 3; i++) {
            ts[i].numel = 1;
            for (int dd = 0; dd < ts[i].ndim; dd++) ts[i].numel *= ts[i].shape[dd];
        }
        TU_CHECK_OK(qmm_st_save(path, ts, 3, NULL));
        m = NULL;
        TU_CHECK_OK(qmm_model_open(path, NULL, &m));
        if (m) {
            EXPECT(qmm_model_find(m, "nope", &li), QMM_ERR_NOT_FOUND, "nope");
            EXPECT_ERR(qmm_model_find(m, NULL, &li));
            EXPECT_ERR(qmm_model_find(m, "l", NULL));
            EXPECT(qmm_model_weight(m, NULL, "nope", &cw), QMM_ERR_NOT_FOUND, "nope"); /* no ctx: not the error */
            EXPECT_ERR(qmm_model_weight(m, ctx, NULL, &cw));
            EXPECT_ERR(qmm_model_weight(m, ctx, "l", NULL));
            EXPECT(qmm_model_weight(m, ctx, "nope", &cw), QMM_ERR_NOT_FOUND, "nope");
            {
                qmm_w4a8_desc wd;
                void *own = NULL;
                EXPECT(qmm_model_w4a8_desc(m, "l", &wd, &own), QMM_ERR_UNSUPPORTED, "not an asym_w4a8_int8 layer");
                EXPECT(qmm_model_w4a8_desc(m, "nope", &wd, &own), QMM_ERR_NOT_FOUND, "nope");
                TU_CHECK(own == NULL, "nothing owned after a refused W4A8 desc");
            }
            EXPECT(qmm_model_create_weight(m, NULL, "nope", &ow), QMM_ERR_NOT_FOUND, "nope");
            EXPECT_ERR(qmm_model_create_weight(m, ctx, "l", NULL));
            TU_CHECK_OK(qmm_model_load_all(m, NULL)); /* packs without a context */
            TU_CHECK(qmm_model_layer(m, 999) == NULL, "layer 999");
            TU_CHECK_OK(qmm_model_weight(m, ctx, "l", &cw));
            TU_CHECK_OK(qmm_model_create_weight(m, ctx, "l", &ow));
            qmm_weight_destroy(ow);
            const qmm_st_file *mf = qmm_model_file(m);
            TU_CHECK(qmm_st_at(mf, 999) == NULL && qmm_st_get(mf, NULL) == NULL, "file queries out of range");
            EXPECT_ERR(qmm_st_find(mf, NULL, &t));
            EXPECT_ERR(qmm_st_find(mf, "l.weight", NULL));
            EXPECT(qmm_st_find(mf, "zz", &t), QMM_ERR_NOT_FOUND, "zz");
            qmm_st_metadata_at(mf, 999, &k, &v);
            TU_CHECK(qmm_st_metadata_get(mf, NULL) == NULL, "metadata_get(NULL key)");
            qmm_st_release(mf, NULL);
            qmm_model_close(m);
        }
    }
    /* checkpoint quantization */
    qmm_quantize_file_options qf = qmm_quantize_file_options_default();
    int64_t nq = -1;
    EXPECT_ERR(qmm_quantize_file(NULL, path, &qf, &nq));
    EXPECT_ERR(qmm_quantize_file(path, NULL, &qf, &nq));
    EXPECT(qmm_quantize_file("/nonexistent/qmm/in.safetensors", "/tmp/qmm_abuse_never.safetensors", &qf, &nq),
           QMM_ERR_IO, "in.safetensors");
    qf.convrot = 32;
    EXPECT_ERR(qmm_quantize_file(path, "/tmp/qmm_abuse_never.safetensors", &qf, NULL));
    qf.convrot = -1;
    qf.min_size = -5;
    (void)qmm_quantize_file_selects(NULL, NULL, &qf, NULL, 0);
    char why[64];
    TU_CHECK(qmm_quantize_file_selects(NULL, NULL, NULL, why, sizeof why) == 0, "selects(NULL)");
    unlink(path);
    unlink("/tmp/qmm_abuse_never.safetensors");
}

#ifdef QMM_WITH_MPI
static void test_dist(qmm_context *ctx) {
    qmm_tp_options o = qmm_tp_options_default();
    TU_CHECK(o.kind == QMM_TP_COLUMN, "tp options default");
    qmm_comm *c = NULL;
    EXPECT_ERR(qmm_comm_create_mpi(NULL, NULL));
    /* MPI is not initialized in this process: refused, not aborted */
    EXPECT(qmm_comm_create_mpi(NULL, &c), QMM_ERR_DIST, "MPI");
    qmm_comm_destroy(NULL);
    qmm_tp_linear_destroy(NULL);
    qmm_tp_pair_destroy(NULL);
    qmm_tp_desc_release(NULL);
    qmm_tp_linear_info info;
    qmm_tp_linear_get_info(NULL, &info);
    qmm_tp_linear_get_info(NULL, NULL);
    qmm_weight_desc d = qmm_weight_desc_default();
    qmm_tp_linear *L = NULL;
    qmm_tp_pair *P = NULL;
    EXPECT_ERR(qmm_tp_linear_create(ctx, NULL, &d, &o, &L));
    EXPECT_ERR(qmm_tp_linear_create(ctx, NULL, &d, &o, NULL));
    EXPECT_ERR(qmm_tp_pair_create(ctx, NULL, &d, &d, NULL, &P));
    EXPECT_ERR(qmm_tp_linear_run(NULL, ctx, NULL, 0));
    EXPECT_ERR(qmm_tp_pair_run(NULL, ctx, 1, NULL, QMM_F32, 0, QMM_F32, NULL, QMM_F32, 0, QMM_ENGINE_AUTO));
    void *owned = NULL;
    EXPECT_ERR(qmm_tp_desc_from_model(NULL, "l", &d, &owned));
    qmm_tp_layer tl;
    memset(&tl, 0, sizeof tl);
    EXPECT_ERR(qmm_tp_linear_create_layer(ctx, NULL, &tl, &o, &L));
    EXPECT_ERR(qmm_tp_linear_create_layer(ctx, NULL, NULL, &o, NULL));
    EXPECT_ERR(qmm_tp_pair_create_layers(ctx, NULL, &tl, NULL, NULL, &P));
    EXPECT_ERR(qmm_tp_layer_from_model(NULL, "l", &tl, &owned));
    EXPECT_ERR(qmm_tp_layer_from_model(NULL, "l", NULL, NULL));
}
#endif

int main(int argc, char **argv) {
    tu_init(argc, argv, "api_abuse");
    test_names();
    test_context();
    qmm_context_options o = qmm_context_options_default();
    o.n_threads = (int)tu_rand_int(1, 2);
    o.verbose = 0;
    qmm_context *ctx = NULL, *ctx2 = NULL;
    TU_CHECK_OK(qmm_context_create(&o, &ctx));
    o.n_threads = 1;
    TU_CHECK_OK(qmm_context_create(&o, &ctx2));
    int any = 0;
    qmm_engine_id all[QMM_ENGINE_COUNT];
    for (int i = 0, n = tu_engines(TU_ENGINES_ALL, all); i < n; i++) any |= qmm_engine_available(all[i], NULL, 0);
    if (!any) {
        g_run = QMM_ENGINE_REF;
        tu_skip("auto dispatch", "no engine available (QMM_MAX_ISA?): the calls meant to succeed name ref");
    }
    if (ctx && ctx2) {
        test_weights(ctx);
        test_linear(ctx, ctx2);
        test_weight_outlives_context(ctx);
        test_deep_k(ctx);
        test_io(ctx);
#ifdef QMM_WITH_MPI
        test_dist(ctx);
#else
        tu_skip("qmm_dist", "built without MPI");
#endif
    }
    qmm_context_destroy(ctx);
    qmm_context_destroy(ctx2);
    return tu_finish();
}
