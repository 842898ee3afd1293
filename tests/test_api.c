/*
 * test_api.c — the public API's contract: version, status names, destroy(NULL), every bad input
 * returning its specific status with a message naming what was wrong (NULL pointers, zero sizes,
 * K % g != 0 with convrot, swiglu with an odd width, a scale count not in {1, N}, unsupported
 * dtypes), weights made with no context (every kind, run through contexts made after them), the
 * plan (the reference is never chosen implicitly; every refusal has a reason), engines asked for
 * by name, the ISA cap, and counters.
 */
#define _POSIX_C_SOURCE 200809L
#include "qmm.h"
#include "numerics.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define EXPECT_STATUS(expr, want, needle)                                                                   \
    do {                                                                                                    \
        qmm_status s_ = (expr);                                                                             \
        TU_CHECK(s_ == (want), "%s -> %s, want %s (%s)", #expr, qmm_status_name(s_), qmm_status_name(want), \
                 qmm_last_error());                                                                         \
        TU_CHECK(strstr(qmm_last_error(), (needle)) != NULL, "%s: message '%s' does not name '%s'", #expr,   \
                 qmm_last_error(), (needle));                                                               \
    } while (0)

static void test_basics(void) {
    TU_CHECK(qmm_version_number() == QMM_VERSION_NUMBER, "runtime version %u != header %d", qmm_version_number(),
             QMM_VERSION_NUMBER);
    char version[32];
    snprintf(version, sizeof version, "%d.%d.%d", QMM_VERSION_MAJOR, QMM_VERSION_MINOR, QMM_VERSION_PATCH);
    TU_CHECK(strcmp(qmm_version_string(), version) == 0, "version string %s, header %s", qmm_version_string(), version);
    TU_CHECK(strcmp(qmm_status_name(QMM_ERR_FALLBACK_REFUSED), "QMM_ERR_FALLBACK_REFUSED") == 0, "status name");
    TU_CHECK(QMM_OK == 0 && QMM_ERR_INVALID_ARGUMENT == 1 && QMM_ERR_NO_ENGINE == 3 && QMM_ERR_FALLBACK_REFUSED == 4 &&
                 QMM_ERR_INTERNAL == 11,
             "pinned status values moved");
    TU_CHECK(strcmp(qmm_status_name((qmm_status)99), "QMM_ERR_UNKNOWN") == 0, "unknown status name");
    qmm_context_destroy(NULL);
    qmm_weight_destroy(NULL);
    TU_CHECK(1, "destroy(NULL) is a no-op");
    for (int e = 0; e < QMM_ENGINE_COUNT; e++)
        TU_CHECK((int)qmm_engine_from_name(qmm_engine_name((qmm_engine_id)e)) == e, "engine name round trip %d", e);
    TU_CHECK(qmm_engine_from_name("nope") == QMM_ENGINE_UNKNOWN, "unknown engine name");
    for (int a = 0; a < QMM_ACT_COUNT; a++)
        TU_CHECK(qmm_act_from_name(qmm_act_name((qmm_act)a)) == (qmm_act)a, "act name round trip %d", a);
    TU_CHECK(qmm_act_from_name("relu") == QMM_ACT_COUNT && qmm_act_from_name(NULL) == QMM_ACT_COUNT, "unknown act name");
    for (int i = 0; i <= QMM_ISA_MAX; i++) TU_CHECK(qmm_isa_from_name(qmm_isa_name((qmm_isa)i)) == (qmm_isa)i, "isa names");
    char why[QMM_REASON_MAX];
    qmm_engine_id all[QMM_ENGINE_COUNT];
    for (int i = 0, n = tu_engines(TU_ENGINES_ALL, all); i < n; i++)
        if (!qmm_engine_available(all[i], why, sizeof why))
            TU_CHECK(why[0] != 0, "engine %s unavailable without a reason", qmm_engine_name(all[i]));
}

static void test_bad_input(qmm_context *ctx) {
    int8_t w[8 * 48];
    float sc[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    memset(w, 1, sizeof w);
    qmm_weight *wt = NULL;
    qmm_weight_desc d = qmm_weight_desc_default();
    d.name = "blocks.0.attn.qkv_proj";
    d.N = 8; d.K = 48; d.data = w; d.scale = sc; d.n_scale = 8;

    EXPECT_STATUS(qmm_weight_create_int8(ctx, NULL, &wt), QMM_ERR_INVALID_ARGUMENT, "desc");
    EXPECT_STATUS(qmm_weight_create_int8(ctx, &d, NULL), QMM_ERR_INVALID_ARGUMENT, "out");
    qmm_weight_desc b = d;
    b.data = NULL;
    EXPECT_STATUS(qmm_weight_create_int8(ctx, &b, &wt), QMM_ERR_INVALID_ARGUMENT, "blocks.0.attn.qkv_proj");
    b = d; b.N = 0;
    EXPECT_STATUS(qmm_weight_create_int8(ctx, &b, &wt), QMM_ERR_INVALID_ARGUMENT, "blocks.0.attn.qkv_proj");
    b = d; b.K = -5;
    EXPECT_STATUS(qmm_weight_create_int8(ctx, &b, &wt), QMM_ERR_INVALID_ARGUMENT, "shape");
    b = d; b.n_scale = 3;
    EXPECT_STATUS(qmm_weight_create_int8(ctx, &b, &wt), QMM_ERR_INVALID_ARGUMENT, "3 scales");
    b = d; b.convrot_gs = 32;
    EXPECT_STATUS(qmm_weight_create_int8(ctx, &b, &wt), QMM_ERR_UNSUPPORTED, "group size 32");
    b = d; b.convrot_gs = 64; /* K = 48 */
    EXPECT_STATUS(qmm_weight_create_int8(ctx, &b, &wt), QMM_ERR_UNSUPPORTED, "K=48 is not a multiple");
    b = d; b.scale = NULL;
    EXPECT_STATUS(qmm_weight_create_int8(ctx, &b, &wt), QMM_ERR_INVALID_ARGUMENT, "weight_scale");
    b = d; b.ld = 10;
    EXPECT_STATUS(qmm_weight_create_int8(ctx, &b, &wt), QMM_ERR_INVALID_ARGUMENT, "stride");
    b = d; b.bias = sc; b.bias_dtype = QMM_I8;
    EXPECT_STATUS(qmm_weight_create_int8(ctx, &b, &wt), QMM_ERR_UNSUPPORTED, "bias dtype i8");
    TU_CHECK(wt == NULL, "a failed create leaves *out NULL");

    TU_CHECK_OK(qmm_weight_create_int8(ctx, &d, &wt));
    float x[4 * 96], y[4 * 8];
    memset(x, 0, sizeof x);
    qmm_linear_args a = qmm_linear_args_default();
    a.M = 4; a.x = x; a.y = y; a.engine = QMM_ENGINE_REF;
    TU_CHECK_OK(qmm_linear(ctx, wt, &a));
    EXPECT_STATUS(qmm_linear(NULL, wt, &a), QMM_ERR_INVALID_ARGUMENT, "ctx");
    EXPECT_STATUS(qmm_linear(ctx, NULL, &a), QMM_ERR_INVALID_ARGUMENT, "weight");
    EXPECT_STATUS(qmm_linear(ctx, wt, NULL), QMM_ERR_INVALID_ARGUMENT, "args");
    qmm_linear_args c = a; c.M = 0;
    EXPECT_STATUS(qmm_linear(ctx, wt, &c), QMM_ERR_INVALID_ARGUMENT, "M=0");
    c = a; c.x = NULL;
    EXPECT_STATUS(qmm_linear(ctx, wt, &c), QMM_ERR_INVALID_ARGUMENT, "x is NULL");
    c = a; c.y = NULL;
    EXPECT_STATUS(qmm_linear(ctx, wt, &c), QMM_ERR_INVALID_ARGUMENT, "y is NULL");
    c = a; c.act = QMM_ACT_SWIGLU; c.x_cols = 95;
    EXPECT_STATUS(qmm_linear(ctx, wt, &c), QMM_ERR_INVALID_ARGUMENT, "swiglu input width 95 is odd");
    c = a; c.act = QMM_ACT_SWIGLU; c.x_cols = 48;
    EXPECT_STATUS(qmm_linear(ctx, wt, &c), QMM_ERR_INVALID_ARGUMENT, "needs 96");
    c = a; c.x_dtype = QMM_I8;
    EXPECT_STATUS(qmm_linear(ctx, wt, &c), QMM_ERR_UNSUPPORTED, "x dtype i8");
    c = a; c.y_dtype = QMM_U8;
    EXPECT_STATUS(qmm_linear(ctx, wt, &c), QMM_ERR_UNSUPPORTED, "out dtype u8");
    c = a; c.ldx = 20;
    EXPECT_STATUS(qmm_linear(ctx, wt, &c), QMM_ERR_INVALID_ARGUMENT, "x row stride 20");
    c = a; c.ldy = 7;
    EXPECT_STATUS(qmm_linear(ctx, wt, &c), QMM_ERR_INVALID_ARGUMENT, "out row stride 7");
    c = a; c.act = (qmm_act)7;
    EXPECT_STATUS(qmm_linear(ctx, wt, &c), QMM_ERR_INVALID_ARGUMENT, "input_act 7");
    c = a; c.engine = (qmm_engine_id)42;
    EXPECT_STATUS(qmm_linear(ctx, wt, &c), QMM_ERR_INVALID_ARGUMENT, "engine 42");
    char why[QMM_REASON_MAX];
    if (!qmm_engine_available(QMM_ENGINE_AMX_INT8, why, sizeof why)) {
        c = a; c.engine = QMM_ENGINE_AMX_INT8;
        EXPECT_STATUS(qmm_linear(ctx, wt, &c), QMM_ERR_UNSUPPORTED_HARDWARE, "amx_int8");
    }
    /* float weight: no i32 output */
    qmm_weight *fw = NULL;
    float wf[8 * 48] = {0};
    EXPECT_STATUS(qmm_weight_create_float(ctx, "fw", wf, QMM_I8, 8, 48, 0, NULL, QMM_F32, &fw), QMM_ERR_UNSUPPORTED,
                  "dtype i8");
    TU_CHECK_OK(qmm_weight_create_float(ctx, "fw", wf, QMM_F32, 8, 48, 0, NULL, QMM_F32, &fw));
    c = a; c.y_dtype = QMM_I32;
    EXPECT_STATUS(qmm_linear(ctx, fw, &c), QMM_ERR_UNSUPPORTED, "i32");
    qmm_weight_info info;
    qmm_weight_get_info(fw, &info);
    TU_CHECK(!info.is_int8 && info.N == 8 && info.K == 48 && info.dtype == QMM_F32, "float weight info");
    qmm_weight_get_info(wt, &info);
    TU_CHECK(info.is_int8 && info.N == 8 && info.K == 48 && !info.per_tensor_scale && info.packed_bytes >= 8 * 48,
             "int8 weight info");
    qmm_weight_destroy(fw);
    /* quantizer bad input */
    int8_t wq[8 * 48];
    qmm_quant_options qo = {64, 0};
    EXPECT_STATUS(qmm_quantize_weight(wf, QMM_F32, 8, 48, 0, &qo, wq, sc, NULL), QMM_ERR_UNSUPPORTED, "K=48");
    EXPECT_STATUS(qmm_quantize_weight(NULL, QMM_F32, 8, 48, 0, &qo, wq, sc, NULL), QMM_ERR_INVALID_ARGUMENT, "w");
    qmm_weight_destroy(wt);
    /* context options */
    qmm_context *bad = NULL;
    qmm_context_options o = qmm_context_options_default();
    o.n_threads = -1;
    EXPECT_STATUS(qmm_context_create(&o, &bad), QMM_ERR_INVALID_ARGUMENT, "n_threads=-1");
    o = qmm_context_options_default();
    o.max_isa = 99;
    EXPECT_STATUS(qmm_context_create(&o, &bad), QMM_ERR_INVALID_ARGUMENT, "max_isa=99");
    TU_CHECK(bad == NULL, "failed context create leaves *out NULL");
}

static void test_plan_and_counters(void) {
    qmm_context *ctx;
    TU_CHECK_OK(qmm_context_create(NULL, &ctx));
    int8_t w[33 * 256];
    float sc = 0.01f;
    tu_fill_i8(w, 33 * 256, -127, 127);
    qmm_weight_desc d = qmm_weight_desc_default();
    d.name = "blocks.0.mlp.fc2"; d.N = 33; d.K = 256; d.data = w; d.scale = &sc; d.n_scale = 1; d.convrot_gs = 256;
    qmm_weight *wt;
    TU_CHECK_OK(qmm_weight_create_int8(ctx, &d, &wt));
    const int64_t Ms[4] = {1, 16, 17, 4096};
    for (int i = 0; i < 4; i++) {
        qmm_linear_args a = qmm_linear_args_default();
        a.M = Ms[i];
        a.x_dtype = QMM_BF16;
        a.y_dtype = QMM_BF16;
        a.act = QMM_ACT_SWIGLU;
        qmm_plan_info p;
        TU_CHECK_OK(qmm_plan(ctx, wt, &a, &p));
        TU_CHECK(p.engine != QMM_ENGINE_REF, "M=%lld: the plan chose the reference engine", (long long)Ms[i]);
        TU_CHECK(!p.admitted[QMM_ENGINE_REF] && strstr(p.reason[QMM_ENGINE_REF], "by name"),
                 "the reference must refuse implicit use with a reason: '%s'", p.reason[QMM_ENGINE_REF]);
        qmm_engine_id all[QMM_ENGINE_COUNT];
        for (int j = 0, n = tu_engines(TU_ENGINES_ALL, all); j < n; j++)
            TU_CHECK(p.admitted[all[j]] || p.reason[all[j]][0], "M=%lld: %s refused without a reason", (long long)Ms[i],
                     qmm_engine_name(all[j]));
        char text[4096];
        size_t need = qmm_plan_format(&p, text, sizeof text);
        TU_CHECK(need < sizeof text && strstr(text, "engine:") && strstr(text, "amx_int8"), "plan text:\n%s", text);
        tu_note("plan M=%lld: %s%s", (long long)Ms[i], qmm_engine_name(p.engine), p.is_fallback ? " (fallback)" : "");
    }
    /* counters: a named reference call counts under the linear's REF, errors count */
    float x[256] = {0}, y[33];
    qmm_linear_args a = qmm_linear_args_default();
    a.M = 1; a.x = x; a.y = y; a.engine = QMM_ENGINE_REF;
    qmm_reset_counters(ctx);
    TU_CHECK_OK(qmm_linear(ctx, wt, &a));
    a.M = 0;
    (void)qmm_linear(ctx, wt, &a);
    qmm_counters cn;
    qmm_get_counters(ctx, &cn);
    const qmm_op_counters *lin = &cn.op[QMM_OP_LINEAR], *att = &cn.op[QMM_OP_ATTENTION];
    TU_CHECK(lin->calls[QMM_ENGINE_REF] == 1 && lin->errors == 1 && lin->fallbacks == 0, "counters: ref %llu errors %llu",
             (unsigned long long)lin->calls[QMM_ENGINE_REF], (unsigned long long)lin->errors);
    TU_CHECK(att->calls[QMM_ENGINE_REF] == 0 && att->errors == 0, "linear calls counted under attention");
    TU_CHECK(qmm_last_engine(ctx) == QMM_ENGINE_REF, "last engine %s", qmm_engine_name(qmm_last_engine(ctx)));
    qmm_weight_destroy(wt);
    qmm_context_destroy(ctx);

    /* ISA cap "none": no engine but the reference by name; AUTO says why for each */
    qmm_context_options o = qmm_context_options_default();
    o.max_isa = QMM_ISA_NONE;
    TU_CHECK_OK(qmm_context_create(&o, &ctx));
    TU_CHECK_OK(qmm_weight_create_int8(ctx, &d, &wt));
    a.M = 1;
    a.engine = QMM_ENGINE_AUTO;
    qmm_status st = qmm_linear(ctx, wt, &a);
    TU_CHECK(st == QMM_ERR_NO_ENGINE, "cap none: %s (%s)", qmm_status_name(st), qmm_last_error());
    TU_CHECK(strstr(qmm_last_error(), "blocks.0.mlp.fc2") && strstr(qmm_last_error(), "avx2_int8") &&
                 strstr(qmm_last_error(), "avx2_f32"),
             "cap none: message names the layer and every engine: %s", qmm_last_error());
    a.engine = QMM_ENGINE_REF;
    TU_CHECK_OK(qmm_linear(ctx, wt, &a));
    qmm_weight_destroy(wt);
    qmm_context_destroy(ctx);
}

/* The longest "no engine admits it" message: a 127-byte layer name and every engine refusing.
 * Every engine's name and its whole reason (as qmm_plan gives it) must be in the message: on
 * AMX machines the reasons are longest, and a fixed 512-byte buffer once cut the end off. */
static void test_longest_message(void) {
    char name[200];
    memset(name, 'L', sizeof name);
    name[199] = 0;
    int8_t w[16 * 64];
    float sc = 0.01f;
    tu_fill_i8(w, 16 * 64, -127, 127);
    qmm_weight_desc d = qmm_weight_desc_default();
    d.name = name; d.N = 16; d.K = 64; d.data = w; d.scale = &sc; d.n_scale = 1;
    const int caps[2] = {QMM_ISA_NONE, -1};
    for (int ci = 0; ci < 2; ci++) {
        qmm_context_options o = qmm_context_options_default();
        o.max_isa = caps[ci];
        if (caps[ci] == -1) o.disabled_engines = ~0u; /* no cap: every engine disabled for dispatch */
        qmm_context *ctx;
        qmm_weight *wt;
        TU_CHECK_OK(qmm_context_create(&o, &ctx));
        TU_CHECK_OK(qmm_weight_create_int8(ctx, &d, &wt));
        float x[64] = {0}, y[16];
        qmm_linear_args a = qmm_linear_args_default();
        a.M = 1; a.x = x; a.y = y;
        qmm_plan_info p;
        TU_CHECK_OK(qmm_plan(ctx, wt, &a, &p));
        qmm_status st = qmm_linear(ctx, wt, &a);
        const char *msg = qmm_last_error();
        TU_CHECK(st == QMM_ERR_NO_ENGINE, "cap %d: %s (%s)", caps[ci], qmm_status_name(st), msg);
        TU_CHECK(strstr(msg, "LLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLL"), "the layer name: %s", msg);
        qmm_engine_id all[QMM_ENGINE_COUNT];
        for (int i = 0, n = tu_engines(TU_ENGINES_ALL, all); i < n; i++) {
            const qmm_engine_id e = all[i];
            TU_CHECK(!p.admitted[e], "cap %d: %s admitted", caps[ci], qmm_engine_name(e));
            TU_CHECK(strstr(msg, qmm_engine_name(e)) && strstr(msg, p.reason[e]),
                     "cap %d: the message lost %s's reason '%s': %s", caps[ci], qmm_engine_name(e), p.reason[e], msg);
        }
        tu_note("longest message (%zu bytes): %s", strlen(msg), msg);
        qmm_weight_destroy(wt);
        qmm_context_destroy(ctx);
    }
}

/* qmm_quantize_rows: every row equals the reference definitions (rotation in x's dtype, scale,
 * kitchen-exact quantization), with computed and with given scales; bad arguments say why. */
static void test_quantize_rows(void) {
    qmm_context *ctx;
    TU_CHECK_OK(qmm_context_create(NULL, &ctx));
    const qmm_dtype dts[3] = {QMM_F32, QMM_F16, QMM_BF16};
    const int gss[4] = {0, 4, 16, 1024};
    for (int di = 0; di < 3; di++)
        for (int gi = 0; gi < 4; gi++) {
            const int64_t M = tu_rand_int(1, 9), K = gss[gi] ? gss[gi] * tu_rand_int(1, 2) : tu_rand_int(1, 300);
            const int64_t ldx = K + tu_rand_int(0, 3), ldq = K + tu_rand_int(0, 5);
            void *x = malloc((size_t)(M * ldx) * 4);
            tu_fill_float(x, dts[di], M * ldx, 4.0f);
            int8_t *q = malloc((size_t)(M * ldq)), *qr = malloc((size_t)K);
            float *s = malloc((size_t)M * 4), *a = malloc((size_t)K * 4);
            for (int given = 0; given < 2; given++) {
                float sin[9];
                for (int64_t r = 0; r < M; r++) sin[r] = 0.01f * (float)(r + 1);
                TU_CHECK_OK(qmm_quantize_rows(ctx, x, dts[di], M, K, ldx, gss[gi], given ? sin : NULL, q, ldq, s));
                for (int64_t r = 0; r < M; r++) {
                    qmm_ref_act_rotate_row((const char *)x + (size_t)(r * ldx) * qmm_dtype_size(dts[di]), dts[di], K,
                                           QMM_ACT_NONE, gss[gi], a);
                    float sr = given ? sin[r] : qmm_scale_of(qmm_amax_f32(a, K));
                    qmm_ref_quantize_row(a, K, dts[di], sr, qr);
                    int zeros = 1;
                    for (int64_t k = K; k < ldq; k++) zeros &= q[r * ldq + k] == 0;
                    TU_CHECK(memcmp(q + r * ldq, qr, (size_t)K) == 0 && zeros &&
                                 qmm_f32_bits(s[r]) == qmm_f32_bits(sr),
                             "quantize_rows %s gs %d K=%lld row %lld given=%d: differs from the reference",
                             qmm_dtype_name(dts[di]), gss[gi], (long long)K, (long long)r, given);
                }
            }
            free(x); free(q); free(qr); free(s); free(a);
        }
    float x1[64] = {0}, s1[1];
    int8_t q1[64];
    TU_CHECK(qmm_quantize_rows(ctx, x1, QMM_F32, 1, 64, 0, 32, NULL, q1, 0, s1) == QMM_ERR_UNSUPPORTED &&
                 strstr(qmm_last_error(), "convrot group 32"), "group 32: %s", qmm_last_error());
    TU_CHECK(qmm_quantize_rows(ctx, x1, QMM_F32, 1, 64, 0, 256, NULL, q1, 0, s1) == QMM_ERR_UNSUPPORTED,
             "group 256 does not divide K=64: %s", qmm_last_error());
    TU_CHECK(qmm_quantize_rows(ctx, NULL, QMM_F32, 1, 64, 0, 0, NULL, q1, 0, s1) == QMM_ERR_INVALID_ARGUMENT &&
                 strstr(qmm_last_error(), "x is NULL"), "NULL x: %s", qmm_last_error());
    TU_CHECK(qmm_quantize_rows(ctx, x1, QMM_I8, 1, 64, 0, 0, NULL, q1, 0, s1) == QMM_ERR_UNSUPPORTED, "i8 x: %s",
             qmm_last_error());
    TU_CHECK(qmm_quantize_rows(ctx, x1, QMM_F32, 1, 64, 0, 0, NULL, q1, 32, s1) == QMM_ERR_INVALID_ARGUMENT,
             "ldq < K: %s", qmm_last_error());
    qmm_context_destroy(ctx);
}

/* The residual (y = T(fmaf(y, rs[n], res[r][n]))) is the same on every engine and path — fused
 * in the int8 epilogue, added after the float engines (W8A16 fallback and float weights) — and
 * in place (residual = y) gives the same bits. */
static void test_residual_every_engine(void) {
    qmm_context *ctx;
    TU_CHECK_OK(qmm_context_create(NULL, &ctx));
    const int64_t M = 5, N = 37, K = 64;
    int8_t w[37 * 64];
    float sc[37], wf[37 * 64];
    tu_fill_i8(w, N * K, -127, 127);
    for (int n = 0; n < N; n++) sc[n] = 0.001f * (float)(n + 1);
    tu_fill_float(wf, QMM_F32, N * K, 0.1f);
    qmm_weight_desc d = qmm_weight_desc_default();
    d.name = "residual.layer"; d.N = N; d.K = K; d.data = w; d.scale = sc; d.n_scale = N; d.bias = sc;
    d.bias_dtype = QMM_F32;
    qmm_weight *wi, *wfl;
    TU_CHECK_OK(qmm_weight_create_int8(ctx, &d, &wi));
    TU_CHECK_OK(qmm_weight_create_float(ctx, "residual.float", wf, QMM_F32, N, K, 0, NULL, QMM_F32, &wfl));
    const qmm_dtype yts[3] = {QMM_F32, QMM_F16, QMM_BF16};
    float x[5 * 64];
    tu_fill_float(x, QMM_F32, M * K, 1.0f);
    for (int yi = 0; yi < 3; yi++) {
        const qmm_dtype yt = yts[yi];
        uint16_t res[5 * 37 * 2], rs[37 * 2], y0[5 * 37 * 2], y1[5 * 37 * 2], y2[5 * 37 * 2];
        tu_fill_float(res, yt, M * N, 3.0f);
        tu_fill_float(rs, yt, N, 1.0f);
        for (int e = QMM_ENGINE_REF; e < QMM_ENGINE_COUNT; e++) {
            if (e != QMM_ENGINE_REF && !qmm_engine_available((qmm_engine_id)e, NULL, 0)) continue;
            for (int wk = 0; wk < 2; wk++) {
                const qmm_weight *wt = wk ? wfl : wi;
                if (wk && qmm_engine_is_int8((qmm_engine_id)e)) continue;
                qmm_linear_args a = qmm_linear_args_default();
                a.M = M; a.x = x; a.y_dtype = yt; a.engine = (qmm_engine_id)e;
                a.epilogue = QMM_EPILOGUE_KITCHEN;
                a.y = y0;
                if (qmm_linear(ctx, wt, &a) != QMM_OK) continue; /* e.g. avx2_int8 refusing: covered elsewhere */
                a.y = y1; a.residual = res; a.residual_scale = rs;
                TU_CHECK_OK(qmm_linear(ctx, wt, &a));
                memcpy(y2, res, sizeof res);
                a.y = y2; a.residual = y2;
                TU_CHECK_OK(qmm_linear(ctx, wt, &a));
                int bad = -1;
                for (int64_t i = 0; i < M * N && bad < 0; i++) {
                    float want = fmaf(tu_load(y0, yt, i), tu_load(rs, yt, i % N), tu_load(res, yt, i));
                    uint16_t wb[2];
                    qmm_store_f(wb, yt, 0, want);
                    if (memcmp((char *)y1 + i * qmm_dtype_size(yt), wb, qmm_dtype_size(yt)) ||
                        memcmp((char *)y2 + i * qmm_dtype_size(yt), wb, qmm_dtype_size(yt)))
                        bad = (int)i;
                }
                TU_CHECK(bad < 0, "residual on %s, %s weight, out %s: differs at %d", qmm_engine_name((qmm_engine_id)e),
                         wk ? "float" : "int8", qmm_dtype_name(yt), bad);
            }
        }
    }
    qmm_weight_destroy(wi);
    qmm_weight_destroy(wfl);
    qmm_context_destroy(ctx);
}

/* QMM_MAX_ISA and QMM_VERBOSE=dispatch are read at context creation; the log goes to stderr. */
static void test_environment(void) {
    setenv("QMM_MAX_ISA", "avx2", 1);
    setenv("QMM_VERBOSE", "dispatch", 1);
    qmm_context *ctx;
    TU_CHECK_OK(qmm_context_create(NULL, &ctx));
    TU_CHECK(qmm_context_max_isa(ctx) == QMM_ISA_AVX2, "QMM_MAX_ISA=avx2 → cap %d", qmm_context_max_isa(ctx));
    char why[QMM_REASON_MAX];
    /* the cap's reason, or the CPU's where the CPU lacks AVX-512 anyway */
    TU_CHECK(!qmm_engine_available(QMM_ENGINE_AVX512_VNNI, why, sizeof why) &&
                 (strstr(why, "QMM_MAX_ISA") || (!(qmm_cpu_features() & QMM_CPU_AVX512F) && strstr(why, "CPU lacks"))),
             "avx512_vnni under QMM_MAX_ISA=avx2: '%s'", why);
    int8_t w[16 * 64];
    float sc = 0.5f, x[64] = {1}, y[16];
    tu_fill_i8(w, 16 * 64, -127, 127);
    qmm_weight_desc d = qmm_weight_desc_default();
    d.name = "env.layer"; d.N = 16; d.K = 64; d.data = w; d.scale = &sc; d.n_scale = 1;
    qmm_weight *wt;
    TU_CHECK_OK(qmm_weight_create_int8(ctx, &d, &wt));
    fflush(stderr);
    FILE *log = tmpfile();
    int saved = dup(2);
    dup2(fileno(log), 2);
    qmm_linear_args a = qmm_linear_args_default();
    a.M = 1; a.x = x; a.y = y;
    qmm_status st = qmm_linear(ctx, wt, &a);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    char text[2048] = "";
    rewind(log);
    size_t n = fread(text, 1, sizeof text - 1, log);
    text[n] = 0;
    fclose(log);
    if (st == QMM_OK) {
        qmm_plan_info p;
        qmm_plan(ctx, wt, &a, &p);
        TU_CHECK(strstr(text, "env.layer") && strstr(text, qmm_engine_name(p.engine)),
                 "QMM_VERBOSE=dispatch log does not name the layer and engine %s: '%s'", qmm_engine_name(p.engine), text);
        TU_CHECK(p.engine != QMM_ENGINE_AVX512_VNNI && p.engine != QMM_ENGINE_AMX_INT8,
                 "QMM_MAX_ISA=avx2 but dispatch chose %s", qmm_engine_name(p.engine));
    } else {
        TU_CHECK(strstr(qmm_last_error(), "env.layer") != NULL, "error without the layer name: %s", qmm_last_error());
    }
    qmm_weight_destroy(wt);
    qmm_context_destroy(ctx);
    unsetenv("QMM_MAX_ISA");
    unsetenv("QMM_VERBOSE");
    /* verbose off: nothing printed */
    TU_CHECK_OK(qmm_context_create(NULL, &ctx));
    TU_CHECK(qmm_context_max_isa(ctx) == -1, "no QMM_MAX_ISA → no cap");
    qmm_context_destroy(ctx);
}

/* Every weight function takes ctx == NULL (weight creation uses no context): each kind of weight
 * made with no context exists before any context does and gives, through two contexts made after
 * it, the bits of the same weight made with a context; bad input with no context is refused
 * naming the bad field (never "ctx"). */
static void test_weights_without_context(void) {
    enum { N = 19, K = 64, M = 5 };
    int8_t wq[N * K];
    float sc[N], wf[N * K], bias[N], x[M * K];
    tu_fill_i8(wq, N * K, -127, 127);
    for (int n = 0; n < N; n++) sc[n] = 0.001f * (float)(n + 1);
    tu_fill_float(wf, QMM_F32, N * K, 1.0f);
    tu_fill_float(bias, QMM_F32, N, 1.0f);
    tu_fill_float(x, QMM_F32, M * K, 1.0f);
    /* a W4A8 weight: 4-bit codes, f32 group scales of 16 */
    uint8_t codes[N * K / 2];
    float srel[N * K / 16];
    for (int i = 0; i < N * K / 2; i++) codes[i] = (uint8_t)tu_rand_int(0, 255);
    for (int i = 0; i < N * K / 16; i++) srel[i] = (float)tu_rand_int(1, 16);
    qmm_w4a8_desc w4 = qmm_w4a8_desc_default();
    w4.name = "noctx.w4a8";
    w4.N = N; w4.K = K; w4.codes = codes; w4.codes_bytes = sizeof codes;
    w4.s_rel = srel; w4.s_rel_dtype = QMM_F32; w4.n_s_rel = N * K / 16; w4.s_channel = sc;
    w4.bias = bias; w4.convrot_gs = 16;
    qmm_weight_desc d = qmm_weight_desc_default();
    d.name = "noctx.int8";
    d.N = N; d.K = K; d.data = wq; d.scale = sc; d.n_scale = N; d.bias = bias; d.convrot_gs = 64;
    qmm_quant_options qo = {16, 0};
    const char *kinds[5] = {"create_int8", "borrow_int8", "borrow_w4a8", "quantize", "create_float"};
    qmm_weight *w[2][5] = {{NULL}};
    for (int c = 0; c < 2; c++) { /* c = 0: no context exists; 1: made with a context */
        qmm_context *wc = NULL;
        if (c) TU_CHECK_OK(qmm_context_create(NULL, &wc));
        TU_CHECK_OK(qmm_weight_create_int8(wc, &d, &w[c][0]));
        TU_CHECK_OK(qmm_weight_borrow_int8(wc, &d, &w[c][1]));
        TU_CHECK_OK(qmm_weight_borrow_w4a8(wc, &w4, &w[c][2]));
        TU_CHECK_OK(qmm_weight_quantize(wc, "noctx.q", wf, QMM_F32, N, K, 0, &qo, bias, QMM_F32, &w[c][3]));
        TU_CHECK_OK(qmm_weight_create_float(wc, "noctx.f", wf, QMM_F32, N, K, 0, bias, QMM_F32, &w[c][4]));
        qmm_context_destroy(wc); /* the weights outlive it */
    }
    for (int run = 0; run < 2; run++) { /* two contexts made after the weights */
        qmm_context *ctx;
        qmm_context_options o = qmm_context_options_default();
        o.n_threads = run + 1;
        TU_CHECK_OK(qmm_context_create(&o, &ctx));
        for (int k = 0; k < 5; k++) {
            if (!w[0][k] || !w[1][k]) continue;
            float y[2][M * N];
            for (int c = 0; c < 2; c++) {
                qmm_linear_args a = qmm_linear_args_default();
                a.M = M; a.x = x; a.y = y[c];
                TU_CHECK_OK(qmm_linear(ctx, w[c][k], &a));
            }
            int64_t bad = tu_first_diff(y[0], y[1], QMM_F32, M * N);
            TU_CHECK(bad < 0, "%s without a context, %d threads: y[%lld] %g, with one %g", kinds[k], run + 1,
                     (long long)bad, bad < 0 ? 0.0 : (double)y[0][bad], bad < 0 ? 0.0 : (double)y[1][bad]);
        }
        qmm_context_destroy(ctx);
    }
    for (int c = 0; c < 2; c++)
        for (int k = 0; k < 5; k++) qmm_weight_destroy(w[c][k]);
    /* bad input with no context: the bad field is named */
    qmm_weight *o = (qmm_weight *)(uintptr_t)1;
    qmm_weight_desc b = d;
    b.data = NULL;
    EXPECT_STATUS(qmm_weight_create_int8(NULL, &b, &o), QMM_ERR_INVALID_ARGUMENT, "data is NULL");
    TU_CHECK(o == NULL, "a failed create without a context leaves *out NULL");
    EXPECT_STATUS(qmm_weight_create_int8(NULL, NULL, &o), QMM_ERR_INVALID_ARGUMENT, "desc is NULL");
    EXPECT_STATUS(qmm_weight_create_int8(NULL, &d, NULL), QMM_ERR_INVALID_ARGUMENT, "out is NULL");
    b = d; b.n_scale = 3;
    EXPECT_STATUS(qmm_weight_borrow_int8(NULL, &b, &o), QMM_ERR_INVALID_ARGUMENT, "3 scales");
    EXPECT_STATUS(qmm_weight_borrow_int8(NULL, NULL, &o), QMM_ERR_INVALID_ARGUMENT, "desc is NULL");
    qmm_w4a8_desc b4 = w4;
    b4.codes_bytes = 7;
    EXPECT_STATUS(qmm_weight_borrow_w4a8(NULL, &b4, &o), QMM_ERR_INVALID_ARGUMENT, "codes_bytes 7");
    EXPECT_STATUS(qmm_weight_borrow_w4a8(NULL, NULL, &o), QMM_ERR_INVALID_ARGUMENT, "desc is NULL");
    EXPECT_STATUS(qmm_weight_quantize(NULL, "noctx.q", NULL, QMM_F32, N, K, 0, &qo, NULL, QMM_F32, &o),
                  QMM_ERR_INVALID_ARGUMENT, "w is NULL");
    qmm_quant_options q64 = {64, 0};
    EXPECT_STATUS(qmm_weight_quantize(NULL, "noctx.q", wf, QMM_F32, N, 48, 0, &q64, NULL, QMM_F32, &o),
                  QMM_ERR_UNSUPPORTED, "K=48");
    EXPECT_STATUS(qmm_weight_create_float(NULL, "noctx.f", NULL, QMM_F32, N, K, 0, NULL, QMM_F32, &o),
                  QMM_ERR_INVALID_ARGUMENT, "data is NULL");
    EXPECT_STATUS(qmm_weight_create_float(NULL, "noctx.f", wf, QMM_I8, N, K, 0, NULL, QMM_F32, &o),
                  QMM_ERR_UNSUPPORTED, "dtype i8");
    TU_CHECK(o == NULL, "failed creates without a context leave *out NULL");
}

int main(int argc, char **argv) {
    tu_init(argc, argv, "test_api");
    test_basics();
    qmm_context *ctx;
    TU_CHECK_OK(qmm_context_create(NULL, &ctx));
    test_bad_input(ctx);
    qmm_context_destroy(ctx);
    test_weights_without_context();
    test_plan_and_counters();
    test_longest_message();
    test_quantize_rows();
    test_residual_every_engine();
    test_environment();
    return tu_finish();
}
