/*
 * test_borrow.c — borrowed int8 weights (qmm_weight_borrow_int8): the randomized tester of
 * every engine on a weight that lives in the caller's memory.
 *   - every engine of the table (int8 and float) on a borrowed weight gives the bits of the same
 *     engine on an owned copy (qmm_weight_create_int8 of the same values), and every int8 engine
 *     (and the reference itself on the borrowed weight) the bits of the reference on the owned
 *     copy; cases: ld > K, odd K, K not a multiple of 4 or 64, N = 1, an unaligned base, M = 1..100
 *     (and up to 1700 with K up to 1700: several row tasks and K chunks),
 *     every x dtype, out dtype, input_act, convrot group, per-tensor and per-row scales, bias of
 *     each dtype, residual, modulation, both epilogues, weights holding -128 (avx2_int8 refuses
 *     those owned; borrowed, it runs them exactly); every M in 1..20 on weights of whole 256-row
 *     tasks plus tails (the engines' small-M rows regimes and their switch to the panels), and q
 *     holding -128 (token_scales_in);
 *   - amx_int8 through the tile emulator (tests/borrow.cmake links the emulated build) on a
 *     borrowed weight (read in place), each regime (decode, panel, blocked) forced with default or
 *     small blocks, M = 1..20 then up to 200 and 300..700, N = 1 a quarter of the time, every
 *     engine-level act, both epilogues, residual, against the reference, and amx_bf16 (W8A16)
 *     borrowed against owned, with no emulated tile fault;
 *   - a weight, scale and bias changed between two calls: the second gives the new result;
 *   - two threads, each with its own context, making the first call on one borrowed weight at
 *     once: both exact;
 *   - the phase timers (qmm_profile) on the int8 driver's engines: the same bits, the phases
 *     nested, nothing counted while off;
 *   - bad descriptors: an error status whose message names the field;
 *   - no read past the caller's memory: W, its scales and its bias each end at a page followed by
 *     a PROT_NONE page (an over-read is a SIGSEGV, with or without ASan), every engine (the AMX
 *     ones emulated, each regime), K tails, the small-M rows regimes (M = 1..64, N of whole tasks
 *     and tails).
 * An unavailable engine prints "skipped: <engine>: <why>". QMM_TEST_QUICK=1: fewer cases.
 */
#define _GNU_SOURCE /* pthread barriers, MAP_ANONYMOUS */
#include "../src/engines/x86_amx/amx_emu.h"
#include "borrow.h"
#include "testutil.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static const qmm_dtype k_xt[3] = {QMM_F32, QMM_F16, QMM_BF16};
static const qmm_dtype k_yt[4] = {QMM_I32, QMM_F32, QMM_F16, QMM_BF16};
static const qmm_act k_acts[5] = {QMM_ACT_NONE, QMM_ACT_SWIGLU, QMM_ACT_GELU_TANH, QMM_ACT_RMS_NORM, QMM_ACT_SITU};

static qmm_context *g_ctx;
static qmm_engine_id g_eng[QMM_ENGINE_COUNT];
static int g_neng;
static int g_avail[QMM_ENGINE_COUNT];

/* the AMX engines' table rows with the emulated operations (amx_emu.h), and a call run on an
 * engine's linear row as qmm_linear does: its final descriptor for the call (qmm_op_finalize),
 * then the driver (qmm_linear_drive) */
static const qmm_engine g_emu_int8 = {QMM_ENGINE_AMX_INT8, "amx_int8", QMM_KIND_INT8, QMM_ISA_AMX, 0, QMM_I8, "TDPBSSD",
                                      0, &qmm_amx_int8_ops_emu};
static const qmm_engine g_emu_bf16 = {QMM_ENGINE_AMX_BF16, "amx_bf16", QMM_KIND_FLOAT, QMM_ISA_AMX, 0, QMM_BF16,
                                      "TDPBF16PS", 0, &qmm_amx_bf16_ops_emu};

/* the emulated AMX objects are built with the AVX-512 flags: they run only where the CPU has it */
static int emu_cpu(void) {
    const uint32_t need = QMM_CPU_AVX512F | QMM_CPU_AVX512BW | QMM_CPU_AVX512VL | QMM_CPU_AVX512DQ;
    return (qmm_cpu_features() & need) == need;
}

static qmm_status run_row(const qmm_engine *e, qmm_context *ctx, const qmm_call *c) {
    return qmm_linear_drive(ctx, e, qmm_op_finalize(&e->ops->op[QMM_OP_LINEAR], c, ctx->n_threads).desc, c);
}

/* One layer's inputs: W [N][ld] at an offset into its buffer, and every argument of a call. */
typedef struct {
    int64_t M, N, K, ld, Kin;
    int gs, per_tensor, neg128;
    qmm_act act;
    qmm_dtype xt, yt, bias_t;
    int bias, kitchen, residual, modulation;
    float *tsin;               /* token_scales_in [M], or NULL */
    int8_t *wbuf, *W;          /* W = wbuf + offset (any alignment) */
    float *scale;
    void *biasv, *x, *actw, *mod, *res, *rscale;
} layer;

static void describe(const layer *L, const char *e, char *buf, size_t n) {
    snprintf(buf, n, "%s M×N×K=%lldx%lldx%lld ld=%lld base%%64=%d x %s out %s act %s gs %d %s-scale bias %s%s%s%s%s", e,
             (long long)L->M, (long long)L->N, (long long)L->K, (long long)L->ld, (int)((uintptr_t)L->W % 64),
             qmm_dtype_name(L->xt), qmm_dtype_name(L->yt), qmm_act_name(L->act), L->gs,
             L->per_tensor ? "tensor" : "row", L->bias ? qmm_dtype_name(L->bias_t) : "none",
             L->neg128 ? " W has -128" : "", L->kitchen ? " kitchen" : "", L->residual ? " residual" : "",
             L->modulation ? " modulated" : "");
}

static void layer_random(layer *L, int64_t M, int64_t N, int64_t K) {
    memset(L, 0, sizeof *L);
    L->M = M;
    L->N = N;
    L->K = K;
    L->ld = K + (tu_rand_int(0, 2) ? tu_rand_int(1, 70) : 0);
    static const int gss[4] = {4, 16, 64, 256};
    const int g = gss[tu_rand_int(0, 3)];
    L->gs = tu_rand_int(0, 2) == 0 && K % g == 0 ? g : 0;
    L->act = k_acts[tu_rand_int(0, 4)];
    L->Kin = L->act == QMM_ACT_SWIGLU || L->act == QMM_ACT_SITU ? 2 * K : K;
    L->xt = k_xt[tu_rand_int(0, 2)];
    L->yt = k_yt[tu_rand_int(0, 3)];
    L->per_tensor = (int)tu_rand_int(0, 1);
    L->bias = (int)tu_rand_int(0, 1);
    L->bias_t = k_xt[tu_rand_int(0, 2)];
    L->kitchen = (int)tu_rand_int(0, 1);
    L->residual = L->yt != QMM_I32 && tu_rand_int(0, 2) == 0;
    L->modulation = tu_rand_int(0, 3) == 0;
    L->neg128 = tu_rand_int(0, 5) == 0;
    const int64_t off = tu_rand_int(0, 63);
    L->wbuf = malloc((size_t)(N * L->ld + off));
    L->W = L->wbuf + off;
    tu_fill_i8(L->wbuf, N * L->ld + off, -127, 127);
    if (L->neg128) L->W[tu_rand_int(0, N - 1) * L->ld + tu_rand_int(0, K - 1)] = -128;
    L->scale = malloc((size_t)N * sizeof(float));
    for (int64_t n = 0; n < N; n++) L->scale[n] = 0.001f + 0.01f * (float)tu_rand_int(1, 100) / 100.0f;
    L->biasv = malloc((size_t)N * 4);
    tu_fill_float(L->biasv, L->bias_t, N, 1.0f);
    L->x = malloc((size_t)(M * L->Kin) * 4);
    tu_fill_float(L->x, L->xt, M * L->Kin, 1.0f);
    L->actw = malloc((size_t)K * 4);
    tu_fill_float(L->actw, L->xt, K, 1.0f);
    L->mod = malloc((size_t)K * 4);
    tu_fill_float(L->mod, L->xt, K, 0.2f);
    L->res = malloc((size_t)(M * N) * 4);
    tu_fill_float(L->res, L->yt == QMM_I32 ? QMM_F32 : L->yt, M * N, 1.0f);
    L->rscale = malloc((size_t)N * 4);
    tu_fill_float(L->rscale, L->yt == QMM_I32 ? QMM_F32 : L->yt, N, 1.0f);
}

/* W without -128 (for the checks where avx2_int8 must run the owned weight too) */
static void scrub_neg128(layer *L) {
    L->neg128 = 0;
    for (int64_t k = 0; k < L->N * L->ld; k++)
        if (L->W[k] == -128) L->W[k] = 0;
}

static void layer_free(layer *L) {
    free(L->tsin);
    free(L->wbuf); free(L->scale); free(L->biasv); free(L->x); free(L->actw); free(L->mod); free(L->res); free(L->rscale);
}

static qmm_weight_desc layer_desc(const layer *L) {
    qmm_weight_desc d = qmm_weight_desc_default();
    d.name = "borrowed";
    d.N = L->N;
    d.K = L->K;
    d.data = L->W;
    d.ld = L->ld;
    d.scale = L->scale;
    d.n_scale = L->per_tensor ? 1 : L->N;
    d.bias = L->bias ? L->biasv : NULL;
    d.bias_dtype = L->bias_t;
    d.convrot_gs = L->gs;
    return d;
}

static qmm_linear_args layer_args(const layer *L, void *y, qmm_engine_id e) {
    qmm_linear_args a = qmm_linear_args_default();
    a.M = L->M;
    a.x = L->x;
    a.x_dtype = L->xt;
    a.y = y;
    a.y_dtype = L->yt;
    a.act = L->act;
    a.engine = e;
    if (L->act == QMM_ACT_RMS_NORM) {
        a.act_weight = L->actw;
        a.act_weight_dtype = L->xt;
        a.act_eps = 1e-6f;
    }
    a.modulation = L->modulation ? L->mod : NULL;
    a.epilogue = L->kitchen ? QMM_EPILOGUE_KITCHEN : QMM_EPILOGUE_FUSED;
    if (L->residual) {
        a.residual = L->res;
        a.residual_scale = L->rscale;
    }
    a.token_scales_in = L->tsin;
    return a;
}

static qmm_status run(qmm_context *ctx, const qmm_weight *w, const layer *L, void *y, qmm_engine_id e) {
    memset(y, 0, (size_t)(L->M * L->N) * 4);
    qmm_linear_args a = layer_args(L, y, e);
    return qmm_linear(ctx, w, &a);
}

static int same(const layer *L, const void *a, const void *b, const char *what, const char *vs) {
    const int64_t i = tu_first_diff(a, b, L->yt, L->M * L->N);
    return TU_CHECK(i < 0, "%s: differs from %s at [%lld][%lld]", what, vs, (long long)(i / L->N), (long long)(i % L->N));
}

/* Every engine on the borrowed weight vs owned; int8 engines vs the reference. */
static void check_layer(layer *L) {
    char what[320];
    const qmm_weight_desc d = layer_desc(L);
    qmm_weight *wo = NULL, *wb = NULL;
    TU_CHECK_OK(qmm_weight_create_int8(g_ctx, &d, &wo));
    TU_CHECK_OK(qmm_weight_borrow_int8(g_ctx, &d, &wb));
    if (!wo || !wb) goto done;
    const size_t yb = (size_t)(L->M * L->N) * 4;
    void *yref = malloc(yb), *yo = malloc(yb), *yw = malloc(yb);
    describe(L, "ref", what, sizeof what);
    qmm_status st = run(g_ctx, wo, L, yref, QMM_ENGINE_REF);
    TU_CHECK(st == QMM_OK, "%s (owned): %s", what, qmm_last_error());
    TU_CHECK_OK(run(g_ctx, wb, L, yw, QMM_ENGINE_REF));
    if (st == QMM_OK) same(L, yw, yref, what, "the reference on the owned weight");
    for (int i = 0; i < g_neng && st == QMM_OK; i++) {
        const qmm_engine_id e = g_eng[i];
        if (!g_avail[e]) continue;
        describe(L, qmm_engine_name(e), what, sizeof what);
        const qmm_status so = run(g_ctx, wo, L, yo, e);
        const qmm_status sb = run(g_ctx, wb, L, yw, e);
        if (e == QMM_ENGINE_AVX2_INT8 && L->neg128) { /* refused owned (admission sees -128), exact borrowed */
            TU_CHECK(sb == QMM_OK, "%s: %s", what, qmm_last_error());
            if (sb == QMM_OK) same(L, yw, yref, what, "the reference");
            continue;
        }
        TU_CHECK(so == sb, "%s: owned %s, borrowed %s", what, qmm_status_name(so), qmm_status_name(sb));
        if (so != QMM_OK || sb != QMM_OK) continue;
        same(L, yw, yo, what, "the same engine on the owned weight");
        if (qmm_engine_is_int8(e)) same(L, yw, yref, what, "the reference");
    }
    free(yref); free(yo); free(yw);
done:
    qmm_weight_destroy(wo);
    qmm_weight_destroy(wb);
}

/* ---------------------------------------------------------------- small M: the rows regimes */
/* Every M in 1..20 and the token groups above (the engines' rows regimes to 64 and the switch
 * to the panels above them: every remainder of 8 and 16, the last M of each regime) on weights
 * of one or two whole 256-row tasks plus a tail task and a tail block (the long-stream split and
 * its leftover rows), K with tails of 4 and 64; W holding -128 (a whole row of it: its row sum is
 * the correction of the broadcast kernel); and q holding -128 (token_scales_in far below the
 * activations: q saturates), which avx2_int8's rows regime runs with exact scalar dots. */
static void check_small_m(int quick) {
    static const int64_t Ns[] = {300, 529, 256, 17};
    static const int64_t Ks[] = {5, 63, 100, 129, 256, 301};
    static const int64_t Mbig[] = {21, 24, 25, 28, 29, 31, 32, 33, 36, 41, 45, 48, 49, 57, 63, 64, 65, 70};
    const int nbig = (int)(sizeof Mbig / sizeof Mbig[0]);
    for (int mi = 0; mi < 20 + nbig; mi++)
        for (int v = 0; v < (quick ? 1 : 2); v++) {
            const int64_t M = mi < 20 ? mi + 1 : Mbig[mi - 20];
            layer L;
            layer_random(&L, M, Ns[(M + v) % 4], Ks[(M * 3 + v) % 6]);
            check_layer(&L);
            layer_free(&L);
        }
    for (int64_t M = 1; M <= 64; M += M < 17 ? 1 : 7) { /* W holding -128: one whole row of it, and a few more */
        layer L;
        layer_random(&L, M, Ns[(M + 1) % 4], Ks[(M * 5 + 1) % 6]);
        L.neg128 = 1;
        memset(L.W + tu_rand_int(0, L.N - 1) * L.ld, -128, (size_t)L.K);
        for (int i = 0; i < 8; i++) L.W[tu_rand_int(0, L.N - 1) * L.ld + tu_rand_int(0, L.K - 1)] = -128;
        check_layer(&L);
        layer_free(&L);
    }
    for (int64_t M = 1; M <= 40; M += quick ? 4 : M < 17 ? 1 : 5) {
        layer L;
        layer_random(&L, M, Ns[M % 4], Ks[M % 6]);
        L.act = QMM_ACT_NONE; L.Kin = L.K; L.modulation = 0;
        L.tsin = malloc((size_t)M * sizeof(float));
        for (int64_t i = 0; i < M; i++) L.tsin[i] = 1e-3f; /* |x| up to 1: q = clamp(x / 1e-3) hits -128 and 127 */
        check_layer(&L);
        layer_free(&L);
    }
}

/* ---------------------------------------------------------------- amx_int8, emulated */
/* A blocking that makes the emulated amx_int8 run regime `want` for M rows (decode needs M <= 32),
 * with small blocks (several N, M and K blocks) half the time. */
static void force_regime(int want, int64_t M) {
    qmm_amx_blocking b = qmm_amx_blocking_default();
    if (tu_rand_int(0, 1)) {
        static const int64_t kcs[] = {64, 128, 192, 512}, ncs[] = {32, 64, 96, 512}, mcs[] = {32, 64, 512};
        b.kc = kcs[tu_rand_int(0, 3)];
        b.nc = ncs[tu_rand_int(0, 3)];
        b.mc = mcs[tu_rand_int(0, 2)];
    }
    if (want == QMM_AMX_DECODE) { b.small_m = 32; (void)M; }
    else if (want == QMM_AMX_PANEL) { b.small_m = 1; b.panel_a = (int64_t)1 << 40; }
    else { b.small_m = 1; b.panel_a = 0; }
    qmm_amx_blocking_emu = b;
}

/* amx_int8 (emulated) reads the borrowed rows in place: every x and y dtype, the acts an engine
 * sees (none, swiglu, gelu_tanh: rms_norm, situ and the modulation are materialized before any
 * engine runs), convrot groups, scale kinds, bias dtypes, both epilogues, residual. */
static void check_amx_emulated(int64_t M, int64_t N, int64_t K) {
    if (!emu_cpu()) return; /* main says so once */
    layer L;
    layer_random(&L, M, N, K);
    static const qmm_act engine_acts[3] = {QMM_ACT_NONE, QMM_ACT_SWIGLU, QMM_ACT_GELU_TANH};
    L.act = engine_acts[tu_rand_int(0, 2)];
    L.Kin = L.act == QMM_ACT_SWIGLU ? 2 * K : K;
    L.modulation = 0;
    free(L.x);
    L.x = malloc((size_t)(M * L.Kin) * 4);
    tu_fill_float(L.x, L.xt, M * L.Kin, 1.0f);
    const qmm_weight_desc d = layer_desc(&L);
    qmm_weight *wo = NULL, *wb = NULL;
    TU_CHECK_OK(qmm_weight_create_int8(g_ctx, &d, &wo));
    TU_CHECK_OK(qmm_weight_borrow_int8(g_ctx, &d, &wb));
    const size_t yb = (size_t)(M * N) * 4;
    void *yref = malloc(yb), *y = calloc(1, yb);
    char what[320];
    describe(&L, "amx_int8 (emulated)", what, sizeof what);
    if (wo && wb && run(g_ctx, wo, &L, yref, QMM_ENGINE_REF) == QMM_OK) {
        qmm_weight view;
        qmm_call c;
        memset(&c, 0, sizeof c);
        TU_CHECK_OK(qmm_weight_for_call(g_ctx, wb, &view, &c.w));
        c.M = M; c.N = N; c.K = K; c.K_in = L.Kin;
        c.x = L.x; c.x_dtype = L.xt; c.ldx = L.Kin;
        c.y = y; c.y_dtype = L.yt; c.ldy = N;
        c.act = L.act;
        c.epilogue = L.kitchen ? QMM_EPILOGUE_KITCHEN : QMM_EPILOGUE_FUSED;
        if (L.residual) { c.residual = L.res; c.ldr = N; c.residual_scale = L.rscale; }
        const int want = M <= 32 && tu_rand_int(0, 2) == 0 ? QMM_AMX_DECODE : M >= 2 ? (int)tu_rand_int(1, 2) : QMM_AMX_DECODE;
        force_regime(want, M);
        const long f0 = qmm_amx_emu_faults();
        qmm_amx_last_regime_emu = -1;
        TU_CHECK_OK(run_row(&g_emu_int8, g_ctx, &c));
        TU_CHECK(qmm_amx_emu_faults() == f0, "%s: emulated tile faults: %s", what, qmm_amx_emu_first_fault());
        TU_CHECK(qmm_amx_emu_live_configs() == 0, "%s: tiles left configured", what);
        TU_CHECK(qmm_amx_last_regime_emu == want, "%s: regime %d ran, %d forced", what, qmm_amx_last_regime_emu, want);
        same(&L, y, yref, what, "the reference");
        /* amx_bf16 (W8A16), emulated: borrowed and owned give the same bits, in the same regime
         * (a float engine ignores the int8 epilogue's form and the residual: qmm_linear adds it) */
        if (L.yt != QMM_I32) {
            void *yo = calloc(1, yb);
            qmm_call co = c;
            co.w = wo;
            co.y = yo;
            c.fallback = co.fallback = 1;
            describe(&L, "amx_bf16 (emulated)", what, sizeof what);
            qmm_weight vb;
            TU_CHECK_OK(qmm_weight_for_call(g_ctx, wb, &vb, &c.w));
            TU_CHECK_OK(run_row(&g_emu_bf16, g_ctx, &co));
            const int r_owned = qmm_amx_last_regime_emu;
            TU_CHECK_OK(run_row(&g_emu_bf16, g_ctx, &c));
            TU_CHECK(qmm_amx_emu_faults() == f0, "%s: emulated tile faults: %s", what, qmm_amx_emu_first_fault());
            TU_CHECK(qmm_amx_last_regime_emu == r_owned, "%s: regime %d borrowed, %d owned", what, qmm_amx_last_regime_emu,
                     r_owned);
            same(&L, y, yo, what, "the same engine on the owned weight");
            free(yo);
        }
        qmm_amx_blocking_emu = qmm_amx_blocking_default();
    }
    free(yref); free(y);
    qmm_weight_destroy(wo);
    qmm_weight_destroy(wb);
    layer_free(&L);
}

/* ---------------------------------------------------------------- changed between calls */
static void check_change(void) {
    layer L;
    layer_random(&L, 5, 37, 131);
    L.yt = QMM_F32; L.residual = 0; L.bias = 1;
    scrub_neg128(&L);
    qmm_weight_desc d = layer_desc(&L);
    qmm_weight *wb = NULL;
    TU_CHECK_OK(qmm_weight_borrow_int8(g_ctx, &d, &wb));
    const size_t yb = (size_t)(L.M * L.N) * 4;
    void *y1 = malloc(yb), *y2 = malloc(yb), *yref = malloc(yb);
    for (int i = 0; i < g_neng && wb; i++) {
        const qmm_engine_id e = g_eng[i];
        if (!g_avail[e]) continue;
        if (run(g_ctx, wb, &L, y1, e) != QMM_OK) continue;
        /* the last row's last k, a scale, a bias: what a LoRA patch or copy_ does in place */
        int8_t *last = &L.W[(L.N - 1) * L.ld + L.K - 1];
        const int8_t old = *last;
        *last = (int8_t)(old > 0 ? -100 : 100);
        L.W[7] = (int8_t)-L.W[7];
        const float old_s = L.scale[L.N - 1];
        L.scale[L.N - 1] *= 2.0f;
        tu_fill_float(L.biasv, L.bias_t, L.N, 1.0f);
        qmm_weight *wo = NULL;
        TU_CHECK_OK(qmm_weight_create_int8(g_ctx, &d, &wo));
        TU_CHECK_OK(run(g_ctx, wb, &L, y2, e));
        if (wo) TU_CHECK_OK(run(g_ctx, wo, &L, yref, e));
        char what[320];
        describe(&L, qmm_engine_name(e), what, sizeof what);
        same(&L, y2, yref, what, "an owned weight of the changed values (second call)");
        TU_CHECK(tu_first_diff(y1, y2, QMM_F32, L.M * L.N) >= 0, "%s: the change was not seen", what);
        qmm_weight_destroy(wo);
        *last = old;
        L.scale[L.N - 1] = old_s;
    }
    free(y1); free(y2); free(yref);
    qmm_weight_destroy(wb);
    layer_free(&L);
}

/* ---------------------------------------------------------------- phase timers */
/* qmm_profile on a borrowed weight, each int8 engine of the int8 driver by name, M in the panels
 * regime, M = 3 (the rows regime) and one call with the timers off: the same bits as untimed; the
 * totals nested as qmm.h says (CALL >= SETUP + ENGINE, ENGINE >= PREPASS + GEMM, TASKS >= PACK +
 * TILES, TILES >= EPILOGUE, each thread sum <= threads × GEMM), one call counted per call; off, nothing
 * added. Not timings: only their structure. */
static void check_profile(void) {
    qmm_context_options o = qmm_context_options_default();
    o.n_threads = 2;
    qmm_context *ctx = NULL;
    TU_CHECK_OK(qmm_context_create(&o, &ctx));
    if (!ctx) return;
    TU_CHECK(strcmp(qmm_phase_name(QMM_PHASE_THREADS_EPILOGUE), "threads_epilogue") == 0 &&
                 strcmp(qmm_phase_name(QMM_PHASE_COUNT), "unknown") == 0,
             "qmm_phase_name");
    TU_CHECK(qmm_context_set_profile(NULL, 1) == QMM_ERR_INVALID_ARGUMENT, "qmm_context_set_profile(NULL)");
    static const int64_t Ms[2] = {150, 3};
    for (int mi = 0; mi < 2; mi++) {
        layer L;
        layer_random(&L, Ms[mi], 200, 700);
        L.yt = QMM_F32;
        qmm_weight_desc d = layer_desc(&L);
        qmm_weight *wb = NULL;
        TU_CHECK_OK(qmm_weight_borrow_int8(ctx, &d, &wb));
        const size_t yb = (size_t)(L.M * L.N) * 4;
        void *y0 = malloc(yb), *y1 = malloc(yb);
        int ran = 0, driven = 0;
        for (int i = 0; i < g_neng && wb; i++) {
            const qmm_engine_id e = g_eng[i];
            const qmm_engine *eng = qmm_engine_get(e);
            if (!g_avail[e] || !eng || eng->kind != QMM_KIND_INT8 || eng->ops->op[QMM_OP_LINEAR].run) continue;
            driven++;
            char what[320];
            describe(&L, qmm_engine_name(e), what, sizeof what);
            qmm_profile p0, p1;
            TU_CHECK_OK(qmm_context_set_profile(ctx, 0));
            qmm_reset_profile(ctx);
            if (run(ctx, wb, &L, y0, e) != QMM_OK) continue; /* e.g. -128 on an engine that refuses it */
            ran++;
            qmm_get_profile(ctx, &p0);
            TU_CHECK(p0.calls == 0 && p0.ns[QMM_PHASE_CALL] == 0 && !p0.enabled, "%s: timers off, yet counted", what);
            TU_CHECK_OK(qmm_context_set_profile(ctx, 1));
            TU_CHECK_OK(run(ctx, wb, &L, y1, e));
            TU_CHECK_OK(run(ctx, wb, &L, y1, e));
            same(&L, y0, y1, what, "the same call with the timers off");
            qmm_get_profile(ctx, &p1);
            const uint64_t *ns = p1.ns;
            TU_CHECK(p1.calls == 2 && p1.enabled && p1.threads == 2, "%s: calls %llu enabled %d threads %d", what,
                     (unsigned long long)p1.calls, p1.enabled, p1.threads);
            TU_CHECK(ns[QMM_PHASE_CALL] > 0 && ns[QMM_PHASE_CALL] >= ns[QMM_PHASE_SETUP] + ns[QMM_PHASE_ENGINE] &&
                         ns[QMM_PHASE_ENGINE] >= ns[QMM_PHASE_PREPASS] + ns[QMM_PHASE_GEMM] && ns[QMM_PHASE_GEMM] > 0 &&
                         ns[QMM_PHASE_PREPASS] > 0,
                     "%s: wall phases not nested: call %llu setup %llu engine %llu prepass %llu gemm %llu", what,
                     (unsigned long long)ns[QMM_PHASE_CALL], (unsigned long long)ns[QMM_PHASE_SETUP],
                     (unsigned long long)ns[QMM_PHASE_ENGINE], (unsigned long long)ns[QMM_PHASE_PREPASS],
                     (unsigned long long)ns[QMM_PHASE_GEMM]);
            TU_CHECK(ns[QMM_PHASE_THREADS_TASKS] > 0 &&
                         ns[QMM_PHASE_THREADS_TASKS] >= ns[QMM_PHASE_THREADS_PACK] + ns[QMM_PHASE_THREADS_TILES] &&
                         ns[QMM_PHASE_THREADS_TILES] >= ns[QMM_PHASE_THREADS_EPILOGUE] &&
                         ns[QMM_PHASE_THREADS_TASKS] <= 2 * ns[QMM_PHASE_GEMM],
                     "%s: thread sums not nested: tasks %llu pack %llu tiles %llu epilogue %llu (gemm %llu)", what,
                     (unsigned long long)ns[QMM_PHASE_THREADS_TASKS], (unsigned long long)ns[QMM_PHASE_THREADS_PACK],
                     (unsigned long long)ns[QMM_PHASE_THREADS_TILES], (unsigned long long)ns[QMM_PHASE_THREADS_EPILOGUE],
                     (unsigned long long)ns[QMM_PHASE_GEMM]);
            if (mi == 0)
                TU_CHECK(ns[QMM_PHASE_THREADS_PACK] > 0, "%s: a borrowed weight's panels, yet no packing timed", what);
            TU_CHECK_OK(qmm_context_set_profile(ctx, 0));
            TU_CHECK_OK(run(ctx, wb, &L, y1, e));
            qmm_get_profile(ctx, &p0);
            TU_CHECK(p0.calls == 2 && p0.ns[QMM_PHASE_CALL] == p1.ns[QMM_PHASE_CALL], "%s: timers off, yet counted",
                     what);
        }
        TU_CHECK(ran > 0 || !driven, "phase timers: none of the %d int8 driver engines ran M=%lld", driven, (long long)L.M);
        free(y0); free(y1);
        qmm_weight_destroy(wb);
        layer_free(&L);
    }
    qmm_context_destroy(ctx);
}

/* ---------------------------------------------------------------- two threads, first call */
typedef struct {
    const qmm_weight *w;
    const layer *L;
    qmm_engine_id e;
    pthread_barrier_t *bar;
    void *y;
    qmm_status st;
} thread_arg;

static void *thread_main(void *p) {
    thread_arg *t = p;
    qmm_context_options o = qmm_context_options_default();
    o.n_threads = 1;
    qmm_context *ctx = NULL;
    t->st = qmm_context_create(&o, &ctx);
    pthread_barrier_wait(t->bar);
    if (t->st == QMM_OK) t->st = run(ctx, t->w, t->L, t->y, t->e);
    qmm_context_destroy(ctx);
    return NULL;
}

static void check_threads(void) {
    for (int i = 0; i < g_neng; i++) {
        const qmm_engine_id e = g_eng[i];
        if (!g_avail[e]) continue;
        for (int rep = 0; rep < 4; rep++) {
            layer L;
            layer_random(&L, tu_rand_int(1, 40), tu_rand_int(1, 300), tu_rand_int(1, 700));
            scrub_neg128(&L);
            const qmm_weight_desc d = layer_desc(&L);
            qmm_weight *wo = NULL, *wb = NULL;
            TU_CHECK_OK(qmm_weight_create_int8(g_ctx, &d, &wo));
            TU_CHECK_OK(qmm_weight_borrow_int8(g_ctx, &d, &wb));
            const size_t yb = (size_t)(L.M * L.N) * 4;
            void *yref = malloc(yb);
            thread_arg ta[2];
            pthread_barrier_t bar;
            pthread_barrier_init(&bar, NULL, 2);
            pthread_t th[2];
            const qmm_status so = wo ? run(g_ctx, wo, &L, yref, e) : QMM_ERR_INTERNAL;
            for (int t = 0; t < 2; t++) {
                ta[t] = (thread_arg){wb, &L, e, &bar, malloc(yb), QMM_OK};
                pthread_create(&th[t], NULL, thread_main, &ta[t]);
            }
            char what[320];
            describe(&L, qmm_engine_name(e), what, sizeof what);
            for (int t = 0; t < 2; t++) {
                pthread_join(th[t], NULL);
                TU_CHECK(ta[t].st == so, "%s thread %d: %s vs owned %s", what, t, qmm_status_name(ta[t].st),
                         qmm_status_name(so));
                if (ta[t].st == QMM_OK && so == QMM_OK) same(&L, ta[t].y, yref, what, "owned, one thread");
                free(ta[t].y);
            }
            pthread_barrier_destroy(&bar);
            free(yref);
            qmm_weight_destroy(wo);
            qmm_weight_destroy(wb);
            layer_free(&L);
        }
    }
}

/* ---------------------------------------------------------------- bad descriptors */
static void expect_bad(qmm_weight_desc d, qmm_status want, const char *needle, const char *what) {
    qmm_weight *w = (qmm_weight *)&d; /* must be reset to NULL */
    const qmm_status st = qmm_weight_borrow_int8(g_ctx, &d, &w);
    TU_CHECK(st == want && w == NULL && strstr(qmm_last_error(), needle), "%s: %s (want %s), message \"%s\" (want \"%s\")",
             what, qmm_status_name(st), qmm_status_name(want), qmm_last_error(), needle);
}

static void check_bad_input(void) {
    static int8_t W[64];
    static float s[4] = {1, 1, 1, 1};
    qmm_weight_desc d = qmm_weight_desc_default();
    d.name = "bad";
    d.N = 4; d.K = 16; d.data = W; d.scale = s; d.n_scale = 4;
    qmm_weight *w = NULL;
    TU_CHECK_OK(qmm_weight_borrow_int8(g_ctx, &d, &w));
    qmm_weight_info info;
    qmm_weight_get_info(w, &info);
    TU_CHECK(info.packed_bytes == 0 && info.N == 4 && info.K == 16 && info.is_int8, "info of a borrowed weight");
    qmm_weight_destroy(w);
    qmm_weight_desc b = d; b.ld = 15;
    expect_bad(b, QMM_ERR_INVALID_ARGUMENT, "row stride 15 < K=16", "ld < K");
    b = d; b.data = NULL;
    expect_bad(b, QMM_ERR_INVALID_ARGUMENT, "data is NULL", "NULL data");
    b = d; b.scale = NULL;
    expect_bad(b, QMM_ERR_INVALID_ARGUMENT, "weight_scale is NULL", "NULL scale");
    b = d; b.n_scale = 3;
    expect_bad(b, QMM_ERR_INVALID_ARGUMENT, "3 scales", "n_scale");
    b = d; b.N = 0;
    expect_bad(b, QMM_ERR_INVALID_ARGUMENT, "needs N, K >= 1", "N = 0");
    b = d; b.K = 0;
    expect_bad(b, QMM_ERR_INVALID_ARGUMENT, "needs N, K >= 1", "K = 0");
    b = d; b.N = ((int64_t)1 << 31) + 1; b.n_scale = 1;
    expect_bad(b, QMM_ERR_UNSUPPORTED, "too large", "N past 2^31");
    b = d; b.N = (int64_t)1 << 30; b.K = 1 << 10; b.n_scale = 1;
    expect_bad(b, QMM_ERR_UNSUPPORTED, "too large", "N·K past 2^36");
    b = d; b.bias = s; b.bias_dtype = QMM_I8;
    expect_bad(b, QMM_ERR_UNSUPPORTED, "bias dtype", "bias dtype");
    b = d; b.convrot_gs = 64;
    expect_bad(b, QMM_ERR_UNSUPPORTED, "not a multiple of the convrot group", "gs past K");
    TU_CHECK(qmm_weight_borrow_int8(g_ctx, NULL, &w) == QMM_ERR_INVALID_ARGUMENT && strstr(qmm_last_error(), "desc"),
             "NULL desc");
    TU_CHECK(qmm_weight_borrow_int8(NULL, NULL, &w) == QMM_ERR_INVALID_ARGUMENT && strstr(qmm_last_error(), "desc"),
             "NULL desc, no ctx");
    TU_CHECK(qmm_weight_borrow_int8(g_ctx, &d, NULL) == QMM_ERR_INVALID_ARGUMENT && strstr(qmm_last_error(), "out"),
             "NULL out");
}

/* ---------------------------------------------------------------- no read past the caller's memory */
/* bytes ending exactly at a PROT_NONE page; map, maplen: what to unmap */
static void *at_page_end(size_t bytes, void **map, size_t *maplen) {
    const size_t pg = (size_t)sysconf(_SC_PAGESIZE), span = (bytes + pg - 1) / pg * pg;
    *maplen = span + pg;
    char *m = mmap(NULL, *maplen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return NULL;
    mprotect(m + span, pg, PROT_NONE);
    *map = m;
    return m + span - bytes;
}

static void check_guard_pages(void) {
    static const int64_t shapes[][3] = {{1, 1, 1},     {3, 1, 61},     {17, 5, 67},    {1, 17, 130},  {24, 33, 255},
                                        {64, 50, 193}, {9, 3, 4},      {40, 33, 64},   {5, 16, 128},  {33, 47, 320},
                                        {2, 31, 2},    {2, 300, 129},  {5, 257, 67},   {8, 256, 64},  {12, 256, 100},
                                        {16, 270, 131}, {4, 523, 255}, {11, 512, 33},  {1, 263, 5},   {13, 300, 63},
                                        {15, 17, 5},   {20, 300, 129}, {33, 263, 65},  {48, 256, 200}, {64, 520, 63},
                                        {29, 257, 5}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        layer L;
        layer_random(&L, shapes[si][0], shapes[si][1], shapes[si][2]);
        L.bias = 1; L.bias_t = QMM_BF16; L.per_tensor = 0;
        void *m1 = NULL, *m2 = NULL, *m3 = NULL;
        size_t l1 = 0, l2 = 0, l3 = 0;
        const size_t wbytes = (size_t)((L.N - 1) * L.ld + L.K); /* the last row ends at K: no padding to ld */
        int8_t *W = at_page_end(wbytes, &m1, &l1);
        float *sc = at_page_end((size_t)L.N * 4, &m2, &l2);
        uint16_t *bi = at_page_end((size_t)L.N * 2, &m3, &l3);
        if (!W || !sc || !bi) { TU_CHECK(0, "mmap failed"); return; }
        memcpy(W, L.W, wbytes);
        memcpy(sc, L.scale, (size_t)L.N * 4);
        memcpy(bi, L.biasv, (size_t)L.N * 2);
        qmm_weight_desc d = layer_desc(&L);
        d.data = W; d.scale = sc; d.bias = bi;
        qmm_weight *wb = NULL;
        TU_CHECK_OK(qmm_weight_borrow_int8(g_ctx, &d, &wb));
        void *y = malloc((size_t)(L.M * L.N) * 4);
        for (int i = -1; i < g_neng && wb; i++) {
            const qmm_engine_id e = i < 0 ? QMM_ENGINE_REF : g_eng[i];
            if (i >= 0 && !g_avail[e]) continue;
            (void)run(g_ctx, wb, &L, y, e); /* refused or run: no fault either way */
        }
        /* the emulated AMX engines, each regime */
        for (int want = QMM_AMX_DECODE; want <= QMM_AMX_BLOCKED && wb && emu_cpu(); want++) {
            if (want == QMM_AMX_DECODE ? L.M > 32 : L.M < 2) continue;
            const qmm_engine *amx[2] = {&g_emu_int8, &g_emu_bf16};
            for (int i = 0; i < 2; i++) {
                qmm_weight view;
                qmm_call c;
                memset(&c, 0, sizeof c);
                TU_CHECK_OK(qmm_weight_for_call(g_ctx, wb, &view, &c.w));
                c.M = L.M; c.N = L.N; c.K = L.K; c.K_in = L.K;
                c.x = L.x; c.x_dtype = L.xt; c.ldx = L.Kin;
                c.y = y; c.y_dtype = QMM_F32; c.ldy = L.N;
                c.fallback = i == 1;
                force_regime(want, L.M);
                TU_CHECK_OK(run_row(amx[i], g_ctx, &c));
                qmm_amx_blocking_emu = qmm_amx_blocking_default();
            }
        }
        TU_CHECK(1, "guard pages %lldx%lldx%lld", (long long)L.M, (long long)L.N, (long long)L.K);
        free(y);
        qmm_weight_destroy(wb);
        munmap(m1, l1); munmap(m2, l2); munmap(m3, l3);
        layer_free(&L);
    }
}

int main(int argc, char **argv) {
    tu_init(argc, argv, "test_borrow");
    const int quick = getenv("QMM_TEST_QUICK") != NULL;
    qmm_context_options o = qmm_context_options_default();
    o.n_threads = 2;
    if (qmm_context_create(&o, &g_ctx) != QMM_OK) return 1;
    g_neng = tu_engines(TU_ENGINES_ALL, g_eng);
    for (int i = 0; i < g_neng; i++) {
        char why[QMM_REASON_MAX];
        g_avail[g_eng[i]] = qmm_engine_available(g_eng[i], why, sizeof why);
        if (!g_avail[g_eng[i]]) tu_skip(qmm_engine_name(g_eng[i]), why);
    }
    check_bad_input();
    check_guard_pages();
    check_small_m(quick);
    /* the edges first, then random cases */
    static const int64_t K_edge[] = {1, 3, 4, 5, 63, 64, 65, 127, 129, 255, 257, 1001};
    for (size_t i = 0; i < sizeof K_edge / sizeof K_edge[0]; i++) {
        layer L;
        layer_random(&L, tu_rand_int(1, 100), tu_rand_int(0, 1) ? 1 : tu_rand_int(1, 80), K_edge[i]);
        check_layer(&L);
        layer_free(&L);
    }
    const int cases = quick ? 30 : 150;
    for (int i = 0; i < cases; i++) {
        layer L;
        const int64_t M = i < 100 ? i + 1 : tu_rand_int(1, 100);
        layer_random(&L, M, tu_rand_int(0, 4) ? tu_rand_int(1, 300) : 1, tu_rand_int(1, 600));
        check_layer(&L);
        layer_free(&L);
    }
    for (int i = 0; i < (quick ? 2 : 8); i++) { /* several row tasks and K chunks */
        layer L;
        /* every second case past 4·192 rows: several row tasks of a borrowed weight (int8_gemm.c) */
        layer_random(&L, i % 2 ? tu_rand_int(790, 1700) : tu_rand_int(150, 420), tu_rand_int(1, 300),
                     tu_rand_int(500, 1700));
        check_layer(&L);
        layer_free(&L);
    }
    if (!emu_cpu()) tu_skip("amx_int8, amx_bf16 (emulated)", "the emulated build's epilogues are AVX-512; CPU lacks it");
    for (int i = 0; i < (quick ? 10 : 40); i++)
        check_amx_emulated(i < 20 ? i + 1 : tu_rand_int(1, i % 4 ? 100 : 200), tu_rand_int(0, 3) ? tu_rand_int(1, i % 3 ? 90 : 300) : 1,
                           tu_rand_int(1, 1300));
    for (int i = 0; i < (quick ? 1 : 4); i++) /* several M, N and K blocks (force_regime's small blocks or the defaults) */
        check_amx_emulated(tu_rand_int(300, 700), tu_rand_int(100, 600), tu_rand_int(500, 1300));
    check_change();
    check_threads();
    check_profile();
    qmm_context_destroy(g_ctx);
    return tu_finish();
}
