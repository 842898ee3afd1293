/*
 * fuzz_engines.c — differential libFuzzer target: the input bytes become a small int8 layer and
 * its input (shape, convrot group, act, dtypes, weights, scales, bias, x — scales, bias and x
 * include NaN with payloads, ±Inf, ±0, denormals and values near FLT_MAX), and every int8 engine
 * available here (qmm_engine_available) runs it against QMM_ENGINE_REF. The outputs (the whole
 * strided y, gaps included) and the token scales must be the same bits, a NaN matching any NaN
 * (payloads and signs are unspecified, SPEC §7). An engine may refuse a layer
 * (QMM_ERR_UNSUPPORTED with a reason, e.g. weights holding -128); any other difference prints
 * the case and aborts. Every engine runs the layer twice: on the owned weight (packed at
 * creation) and on a borrowed twin over a copy of the same bytes at row stride ld >= K from a
 * base that may be unaligned (qmm_weight_borrow_int8: packed per call or read in place by the
 * rows kernels), both against the reference on the owned weight. Replayed on fuzz/corpus/engines/ by fuzz/replay.c in the normal tests.
 * QMM_FUZZ_ENGINES=avx512_vnni,avx2_int8 limits the comparison to the engines named.
 *
 * Built with -DQMM_FUZZ_AMX_EMU (fuzz_replay_engines_amx_emu, fuzz_engines_amx_emu; linked with
 * the emulated AMX engines of tests/amx_emu.cmake) the same input also runs, on the owned and the
 * borrowed weight, amx_int8 (emulated) in every regime its rule allows for M (decode M <= 32,
 * panel and blocked M >= 2), each forced through qmm_amx_blocking_emu with a blocking picked from
 * the input (kc 64..512: several K chunks, K tails; nc, mc 32..512: several tasks), against the
 * reference's bits (y and token scales), and amx_bf16 (emulated, the W8A16 fallback, no token
 * scales) against its contract (amx_bf16.c: a = bf16(act-rotate(x)), one fp32 chain
 * acc = FTZ(acc + DAZ(a)·w) over k < K rounded up to 32, then qmm_float_epilogue_ref), NaN
 * matching NaN. Every emulated call: no tile fault, no tile configuration left, the regime forced
 * the one that ran. The emulated engines need AVX-512 (their epilogues): without it they are
 * skipped, said once. fuzz_amx_emu_done() (called by replay.c at the end) prints the runs per
 * engine, layout and regime and fails when one of them never ran.
 *
 * Input layout (missing bytes read as 0):
 *   h0  N = 1 + h0 % 40
 *   h1  gs = {0, 0, 16, 64}[h1 & 3]; K = gs ? gs * (1 + (h1 >> 2) % 3) : h1 & 1 ? 65 + 3·(h1 >> 2)
 *       (65..254: K tails past the first 64-byte k-step, several K chunks) : 1 + (h1 >> 2)
 *   h2  M = 1 + h2 % 20, or 1 + h2 % 80 when h5 & 64 (past the rows regime's M <= 64 of the
 *       borrowed weights on avx512_vnni: both of its borrowed paths)
 *   h3  act = h3 % 3 (none, swiglu, gelu_tanh); x dtype = (h3 / 3) % 3 (f32, f16, bf16)
 *   h4  y dtype = h4 % 4 (i32, f32, f16, bf16); bias = h4 & 4; bias dtype = (h4 >> 3) % 3;
 *       per-tensor scale = h4 & 32; -128 kept in the weights = h4 & 64
 *   h5  ldx padding = h5 % 4; ldy padding = (h5 >> 2) % 4; the borrowed twin's row stride
 *       ld = K + 3·((h5 >> 4) % 4) and base offset (h5 >> 7) bytes (unaligned)
 *   then N*K weight bytes, the scales, the bias, then x (M rows of K_in values): each value is
 *   one code byte c and one value byte v: c < 16 gives a special (c % 8: NaN with payload v,
 *   -NaN, +Inf, -Inf, -0, a denormal, ±3e38, 0), else (int8)v * unit * (1 + c / 64).
 */
#include "numerics.h" /* qmm_store_f: f32 -> f16 / bf16, round to nearest even, NaN stays NaN */
#include "qmm.h"
#ifdef QMM_FUZZ_AMX_EMU
#include "../src/engines/x86_amx/amx_emu.h"
#include "borrow.h"
#include "float_gemm.h"
#endif

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct rd {
    const uint8_t *p;
    size_t n, i;
} rd;

static unsigned u8(rd *r) { return r->i < r->n ? r->p[r->i++] : 0u; }

static float bits_f32(uint32_t b) {
    float f;
    memcpy(&f, &b, 4);
    return f;
}

static float value(rd *r, float unit) {
    unsigned c = u8(r), v = u8(r);
    if (c >= 16) return (float)(int8_t)v * unit * (1.0f + (float)c / 64.0f);
    switch (c % 8) {
    case 0: return bits_f32(0x7fc00000u | (v << 13));       /* quiet NaN, payload v */
    case 1: return bits_f32(0xffc00000u | (v << 5));        /* negative NaN */
    case 2: return INFINITY;
    case 3: return -INFINITY;
    case 4: return -0.0f;
    case 5: return bits_f32(1u + v);                        /* denormal */
    case 6: return v & 1 ? -3e38f : 3e38f;
    default: return 0.0f;
    }
}

static int is_nan(const void *p, qmm_dtype t, int64_t i) {
    if (t == QMM_F32) return isnan(((const float *)p)[i]);
    uint16_t h = ((const uint16_t *)p)[i];
    if (t == QMM_BF16) return (h & 0x7fffu) > 0x7f80u;
    if (t == QMM_F16) return (h & 0x7fffu) > 0x7c00u;
    return 0;
}

static size_t dsize(qmm_dtype t) { return t == QMM_F16 || t == QMM_BF16 ? 2 : 4; }

/* first element of n (dtype t) that differs other than NaN vs NaN, or -1 */
static int64_t first_diff(const void *a, const void *b, qmm_dtype t, int64_t n) {
    const size_t es = dsize(t);
    for (int64_t i = 0; i < n; i++)
        if (memcmp((const char *)a + (size_t)i * es, (const char *)b + (size_t)i * es, es) &&
            !(is_nan(a, t, i) && is_nan(b, t, i)))
            return i;
    return -1;
}

static qmm_context *g_ctx;

/* QMM_FUZZ_ENGINES=name,name,...: compare only these engines (default: every available one) */
static int wanted(qmm_engine_id e) {
    const char *list = getenv("QMM_FUZZ_ENGINES"), *nm = qmm_engine_name(e);
    if (!list || !*list) return 1;
    const size_t n = strlen(nm);
    for (const char *p = list; (p = strstr(p, nm)); p += n)
        if ((p == list || p[-1] == ',') && (p[n] == ',' || p[n] == 0)) return 1;
    return 0;
}

#ifdef QMM_FUZZ_AMX_EMU
static long g_amx_runs[2][3]; /* amx_int8 (emulated) calls: [owned, borrowed][decode, panel, blocked] */
static long g_bf16_runs[2];   /* amx_bf16 (emulated) calls: [owned, borrowed] */
static int g_amx_skip = -1;   /* 1: the CPU lacks AVX-512 (the emulated engines' epilogues) */

static int amx_emu_skipped(void) {
    if (g_amx_skip < 0) {
        const uint32_t need = QMM_CPU_AVX512F | QMM_CPU_AVX512BW | QMM_CPU_AVX512VL | QMM_CPU_AVX512DQ;
        g_amx_skip = (qmm_cpu_features() & need) != need;
        if (g_amx_skip) fprintf(stderr, "fuzz_engines: emulated AMX engines skipped: the CPU lacks AVX-512\n");
    }
    return g_amx_skip;
}

/* The runs per engine, layout and regime; 1 if one of them never ran (on a CPU that runs them). */
int fuzz_amx_emu_done(void);
int fuzz_amx_emu_done(void) {
    if (amx_emu_skipped()) return 0;
    printf("fuzz_engines (emulated): amx_int8 owned decode %ld panel %ld blocked %ld, borrowed decode %ld panel %ld "
           "blocked %ld; amx_bf16 owned %ld borrowed %ld\n",
           g_amx_runs[0][0], g_amx_runs[0][1], g_amx_runs[0][2], g_amx_runs[1][0], g_amx_runs[1][1], g_amx_runs[1][2],
           g_bf16_runs[0], g_bf16_runs[1]);
    int bad = !g_bf16_runs[0] || !g_bf16_runs[1];
    for (int b = 0; b < 2; b++)
        for (int r = 0; r < 3; r++) bad |= !g_amx_runs[b][r];
    if (bad) fprintf(stderr, "fuzz_engines (emulated): some engine, layout or regime never ran on this corpus\n");
    return bad;
}

static uint32_t mix32(uint32_t h) {
    h ^= h >> 16;
    h *= 0x7feb352du;
    h ^= h >> 15;
    h *= 0x846ca68bu;
    return h ^ (h >> 16);
}

/* The blocking of one emulated call, from the input's selector sel: kc, nc, mc small (several K
 * chunks, tasks and row blocks on these shapes) or the library's; the regime forced by small_m and
 * panel_a for M rows whose A takes a_bytes (regime -1: no regime, amx_bf16). */
static qmm_amx_blocking amx_blocking_for(uint32_t sel, int regime, int64_t M, int64_t a_bytes) {
    static const int64_t kcs[4] = {64, 128, 192, 512}, ncs[4] = {32, 64, 96, 512}, mcs[4] = {32, 64, 96, 512};
    qmm_amx_blocking b = qmm_amx_blocking_default();
    if (sel & 1) {
        b.kc = kcs[(sel >> 1) & 3];
        b.nc = ncs[(sel >> 3) & 3];
        b.mc = mcs[(sel >> 5) & 3];
    }
    b.min_m = 1; /* the small-M rules are the plan's, not the kernels': every M runs here */
    b.borrowed_min_m = 1;
    if (regime == QMM_AMX_DECODE) b.small_m = M + (int64_t)((sel >> 7) % (uint32_t)(33 - M));
    else if (regime > QMM_AMX_DECODE) {
        b.small_m = 1 + (int64_t)((sel >> 7) % (uint32_t)(M - 1 < 32 ? M - 1 : 32));
        b.panel_a = regime == QMM_AMX_PANEL ? a_bytes + (int64_t)((sel >> 12) & 4095)
                                            : (int64_t)((sel >> 12) % (uint32_t)a_bytes);
    }
    return b;
}

/* the AMX engines' table rows with the emulated operations (amx_emu.h) */
static const qmm_engine g_emu_int8 = {QMM_ENGINE_AMX_INT8, "amx_int8", QMM_KIND_INT8, QMM_ISA_AMX, 0, QMM_I8, "TDPBSSD",
                                      0, &qmm_amx_int8_ops_emu};
static const qmm_engine g_emu_bf16 = {QMM_ENGINE_AMX_BF16, "amx_bf16", QMM_KIND_FLOAT, QMM_ISA_AMX, 0, QMM_BF16,
                                      "TDPBF16PS", 0, &qmm_amx_bf16_ops_emu};

/* Runs emulated engine e on w (owned, or borrowed: its per-call view) with the call's arguments;
 * QMM_ERR_UNSUPPORTED when it does not admit the call. Aborts on a tile fault, a configuration
 * left behind or (amx_int8) another regime than the one forced. */
static qmm_status amx_emu_run(const qmm_engine *e, const qmm_weight *w, const qmm_linear_args *a, int regime) {
    qmm_weight view;
    const qmm_weight *wc = w;
    if (qmm_weight_for_call(g_ctx, w, &view, &wc) != QMM_OK) return QMM_ERR_UNSUPPORTED;
    _Atomic(const char *) bug = NULL;
    const qmm_call c = {.w = wc, .M = a->M, .N = w->N, .K = w->K, .K_in = a->act == QMM_ACT_SWIGLU ? 2 * w->K : w->K,
                        .x = a->x, .x_dtype = a->x_dtype, .ldx = a->ldx, .y = a->y, .y_dtype = a->y_dtype,
                        .ldy = a->ldy, .act = a->act, .token_scales = a->token_scales,
                        .fallback = e->kind == QMM_KIND_FLOAT, .epilogue = a->epilogue, .bug = &bug};
    char why[QMM_REASON_MAX];
    if (e->ops->op[QMM_OP_LINEAR].admit(&c, why, sizeof why)) return QMM_ERR_UNSUPPORTED;
    const long f0 = qmm_amx_emu_faults();
    qmm_amx_last_regime_emu = -1;
    const qmm_status st = qmm_linear_drive(g_ctx, e, qmm_op_finalize(&e->ops->op[QMM_OP_LINEAR], &c, g_ctx->n_threads).desc, &c);
    if (qmm_amx_emu_faults() != f0 || qmm_amx_emu_live_configs() != 0 || atomic_load(&bug) ||
        (regime >= 0 && st == QMM_OK && qmm_amx_last_regime_emu != regime)) {
        fprintf(stderr, "fuzz_engines: %s (emulated, %s weight): %ld tile faults (%s), %ld configurations left, "
                        "kernel bug '%s', regime %d ran where %d was forced\n",
                e->name, w->borrowed ? "borrowed" : "owned", qmm_amx_emu_faults() - f0, qmm_amx_emu_first_fault(),
                qmm_amx_emu_live_configs(), atomic_load(&bug) ? atomic_load(&bug) : "", qmm_amx_last_regime_emu,
                regime);
        abort();
    }
    return st;
}

/* amx_bf16's contract for the layer (the file header): yexp [M][ldy] (its padding as given) */
static void bf16_expected(const qmm_weight *wt, const int8_t *w, const qmm_linear_args *a, int gs, void *yexp) {
    const int64_t M = a->M, N = wt->N, K = wt->K, Ka = (K + 31) / 32 * 32;
    float *arow = malloc((size_t)Ka * sizeof(float)), *acc = malloc((size_t)(M * N) * sizeof(float));
    if (!arow || !acc) abort();
    for (int64_t r = 0; r < M; r++) {
        qmm_ref_act_rotate_row((const char *)a->x + (size_t)(r * a->ldx) * dsize(a->x_dtype), a->x_dtype, K, a->act,
                               gs, arow);
        for (int64_t k = 0; k < Ka; k++) {
            uint32_t u;
            const float v = k < K ? qmm_round_to(arow[k], QMM_BF16) : 0.0f;
            memcpy(&u, &v, 4);
            arow[k] = (u & 0x7f800000u) ? v : bits_f32(u & 0x80000000u); /* DAZ */
        }
        for (int64_t n = 0; n < N; n++) {
            float c = 0.0f;
            for (int64_t k = 0; k < Ka; k++) { /* the terms past K: +0 · +0 (a -0 sum becomes +0) */
                uint32_t u;
                c = fmaf(arow[k], k < K ? (float)w[n * K + k] : 0.0f, c);
                memcpy(&u, &c, 4);
                if (!(u & 0x7f800000u)) c = bits_f32(u & 0x80000000u); /* FTZ */
            }
            acc[r * N + n] = c;
        }
    }
    qmm_call ce = {.w = wt, .M = M, .N = N, .K = K, .y = yexp, .y_dtype = a->y_dtype, .ldy = a->ldy, .fallback = 1};
    qmm_float_epilogue_ref(&ce, acc, N, M, 0, 0, N);
    free(arow);
    free(acc);
}

static void amx_emu_fail(const char *what, const qmm_weight *w, int regime, const qmm_amx_blocking *b,
                         const qmm_linear_args *a, int64_t bad, int64_t sbad) {
    fprintf(stderr,
            "fuzz_engines: %s (emulated, %s weight, ld %lld) differs from %s: M×N×K=%lldx%lldx%lld regime %s kc=%lld "
            "nc=%lld mc=%lld act=%s x=%s y=%s ldx=%lld ldy=%lld: first bad y element %lld (row %lld col %lld), first bad "
            "token scale %lld\n",
            what, w->borrowed ? "borrowed" : "owned", (long long)(w->borrowed ? w->borrow.ld : w->K),
            regime < 0 ? "its contract" : "ref", (long long)a->M, (long long)w->N, (long long)w->K,
            regime < 0 ? "-" : qmm_amx_regime_name((qmm_amx_regime)regime), (long long)b->kc, (long long)b->nc,
            (long long)b->mc, qmm_act_name(a->act), qmm_dtype_name(a->x_dtype), qmm_dtype_name(a->y_dtype),
            (long long)a->ldx, (long long)a->ldy, (long long)bad, (long long)(bad >= 0 ? bad / a->ldy : -1),
            (long long)(bad >= 0 ? bad % a->ldy : -1), (long long)sbad);
    abort();
}

/* amx_int8 and amx_bf16 (emulated) on the owned weight wt and its borrowed twin wbt: against the
 * reference's y0 / s0 (amx_int8), against the contract (amx_bf16). y1, s1: scratch of y0's size. */
static void amx_emu_engines(const qmm_weight *wt, const qmm_weight *wbt, const int8_t *w, qmm_linear_args a, int gs,
                            const unsigned char *y0, const float *s0, unsigned char *y1, float *s1, uint32_t sel) {
    if (amx_emu_skipped()) return;
    const int64_t M = a.M, ys = (int64_t)dsize(a.y_dtype), ybytes = M * a.ldy * ys;
    for (int borrowed = 0; borrowed < 2; borrowed++)
        for (int regime = QMM_AMX_DECODE; regime <= QMM_AMX_BLOCKED; regime++) {
            if ((regime == QMM_AMX_DECODE && M > 32) || (regime != QMM_AMX_DECODE && M < 2)) continue;
            const uint32_t s = mix32(sel + 0x9e3779b9u * (uint32_t)(borrowed * 3 + regime + 1));
            qmm_amx_blocking_emu = amx_blocking_for(s, regime, M, M * wt->i8.Kp);
            memset(y1, 0xA5, (size_t)ybytes);
            memset(s1, 0, (size_t)M * sizeof(float));
            a.y = y1;
            a.token_scales = s1;
            const qmm_status st = amx_emu_run(&g_emu_int8, borrowed ? wbt : wt, &a, regime);
            if (st == QMM_ERR_UNSUPPORTED) continue;
            const int64_t bad = st == QMM_OK ? first_diff(y0, y1, a.y_dtype, M * a.ldy) : 0;
            const int64_t sbad = st == QMM_OK ? first_diff(s0, s1, QMM_F32, M) : -1;
            if (st != QMM_OK || bad >= 0 || sbad >= 0)
                amx_emu_fail("amx_int8", borrowed ? wbt : wt, regime, &qmm_amx_blocking_emu, &a, bad, sbad);
            g_amx_runs[borrowed][regime]++;
        }
    if (a.y_dtype == QMM_I32) { /* a float engine's outputs are float */
        qmm_amx_blocking_emu = qmm_amx_blocking_default();
        return;
    }
    unsigned char *yexp = malloc((size_t)ybytes);
    if (!yexp) abort();
    memset(yexp, 0xA5, (size_t)ybytes);
    a.y = yexp;
    bf16_expected(wt, w, &a, gs, yexp);
    a.token_scales = NULL;
    for (int borrowed = 0; borrowed < 2; borrowed++) {
        qmm_amx_blocking_emu = amx_blocking_for(mix32(sel ^ (0x51ed27u + (uint32_t)borrowed)), -1, M, 0);
        memset(y1, 0xA5, (size_t)ybytes);
        a.y = y1;
        const qmm_status st = amx_emu_run(&g_emu_bf16, borrowed ? wbt : wt, &a, -1);
        if (st == QMM_ERR_UNSUPPORTED) continue;
        const int64_t bad = st == QMM_OK ? first_diff(yexp, y1, a.y_dtype, M * a.ldy) : 0;
        if (st != QMM_OK || bad >= 0) amx_emu_fail("amx_bf16", borrowed ? wbt : wt, -1, &qmm_amx_blocking_emu, &a, bad, -1);
        g_bf16_runs[borrowed]++;
    }
    free(yexp);
    qmm_amx_blocking_emu = qmm_amx_blocking_default();
}
#endif /* QMM_FUZZ_AMX_EMU */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_ctx) {
        qmm_context_options o = qmm_context_options_default();
        o.n_threads = 1;
        o.max_isa = QMM_ISA_MAX; /* engines are named explicitly */
        o.verbose = 0;
        if (qmm_context_create(&o, &g_ctx) != QMM_OK) return 0;
    }
    static const qmm_dtype fl[3] = {QMM_F32, QMM_F16, QMM_BF16}, yts[4] = {QMM_I32, QMM_F32, QMM_F16, QMM_BF16};
    static const int gss[4] = {0, 0, 16, 64};
    rd r = {data, size, 0};
    const unsigned h0 = u8(&r), h1 = u8(&r), h2 = u8(&r), h3 = u8(&r), h4 = u8(&r), h5 = u8(&r);
    const int64_t N = 1 + h0 % 40, gs = gss[h1 & 3], K = gs ? gs * (1 + (h1 >> 2) % 3) : h1 & 1 ? 65 + 3 * (h1 >> 2) : 1 + (h1 >> 2);
    const int64_t M = 1 + h2 % ((h5 & 64) ? 80 : 20);
    const int64_t bld = K + 3 * ((h5 >> 4) % 4), boff = h5 >> 7;
    const qmm_act act = (qmm_act)(h3 % 3);
    const qmm_dtype xt = fl[(h3 / 3) % 3], yt = yts[h4 % 4], bt = fl[(h4 >> 3) % 3];
    const int has_bias = (h4 & 4) != 0, per_tensor = (h4 & 32) != 0, keep128 = (h4 & 64) != 0;
    const int64_t Kin = act == QMM_ACT_SWIGLU ? 2 * K : K, ldx = Kin + h5 % 4, ldy = N + (h5 >> 2) % 4;
    const int64_t ns = per_tensor ? 1 : N;

    int8_t *w = malloc((size_t)(N * K)), *wb = malloc((size_t)(N * bld + boff));
    float *sc = malloc((size_t)ns * sizeof(float));
    void *bias = malloc((size_t)N * 4);
    void *x = calloc((size_t)(M * ldx), dsize(xt));
    const size_t ys = dsize(yt), ybytes = (size_t)(M * ldy) * ys;
    unsigned char *y0 = malloc(ybytes), *y1 = malloc(ybytes);
    float *s0 = malloc((size_t)M * sizeof(float)), *s1 = malloc((size_t)M * sizeof(float));
    if (!w || !wb || !sc || !bias || !x || !y0 || !y1 || !s0 || !s1) goto out;
    for (int64_t i = 0; i < N * K; i++) {
        int8_t b = (int8_t)u8(&r);
        w[i] = b == -128 && !keep128 ? -127 : b;
    }
    for (int64_t i = 0; i < ns; i++) sc[i] = value(&r, 1e-3f); /* 0, negative and non-finite included */
    for (int64_t i = 0; i < N; i++) qmm_store_f(bias, bt, i, value(&r, 0.1f));
    for (int64_t m = 0; m < M; m++)
        for (int64_t k = 0; k < Kin; k++) qmm_store_f(x, xt, m * ldx + k, value(&r, 0.05f));

    qmm_weight_desc d = qmm_weight_desc_default();
    d.name = "fuzz.engines";
    d.N = N;
    d.K = K;
    d.data = w;
    d.scale = sc;
    d.n_scale = ns;
    d.bias = has_bias ? bias : NULL;
    d.bias_dtype = bt;
    d.convrot_gs = (int)gs;
    qmm_weight *wt = NULL, *wbt = NULL;
    if (qmm_weight_create_int8(g_ctx, &d, &wt) != QMM_OK) goto out; /* e.g. refused scales */
    memset(wb, 0x5A, (size_t)(N * bld + boff)); /* the gaps past K: never read */
    for (int64_t n = 0; n < N; n++) memcpy(wb + boff + n * bld, w + n * K, (size_t)K);
    qmm_weight_desc db = d;
    db.data = wb + boff;
    db.ld = bld;
    if (qmm_weight_borrow_int8(g_ctx, &db, &wbt) != QMM_OK) goto out;

    qmm_linear_args a = qmm_linear_args_default();
    a.M = M;
    a.x = x;
    a.x_dtype = xt;
    a.ldx = ldx;
    a.y_dtype = yt;
    a.ldy = ldy;
    a.act = act;
    a.engine = QMM_ENGINE_REF;
    a.y = y0;
    a.token_scales = s0;
    memset(y0, 0xA5, ybytes);
    if (qmm_linear(g_ctx, wt, &a) == QMM_OK) {
        for (int eb = 0; eb < 2 * (QMM_ENGINE_AVX2_INT8 - QMM_ENGINE_AMX_INT8 + 1); eb++) {
            const int e = QMM_ENGINE_AMX_INT8 + eb / 2, borrowed = eb % 2;
            if (!qmm_engine_available((qmm_engine_id)e, NULL, 0) || !wanted((qmm_engine_id)e)) continue;
            memset(y1, 0xA5, ybytes);
            memset(s1, 0, (size_t)M * sizeof(float));
            a.engine = (qmm_engine_id)e;
            a.y = y1;
            a.token_scales = s1;
            qmm_status st = qmm_linear(g_ctx, borrowed ? wbt : wt, &a);
            if (st == QMM_ERR_UNSUPPORTED) continue; /* the engine does not admit this layer */
            int64_t bad = st == QMM_OK ? first_diff(y0, y1, yt, M * ldy) : -1;
            int64_t sbad = st == QMM_OK ? first_diff(s0, s1, QMM_F32, M) : -1;
            if (st != QMM_OK || bad >= 0 || sbad >= 0) {
                fprintf(stderr,
                        "fuzz_engines: %s (%s weight, ld %lld, base +%lld) differs from ref: M×N×K=%lldx%lldx%lld gs=%d act=%s x=%s y=%s bias=%s "
                        "%s-scale ldx=%lld ldy=%lld: status %s (%s), first bad y element %lld (row %lld col %lld), "
                        "first bad token scale %lld\n",
                        qmm_engine_name((qmm_engine_id)e), borrowed ? "borrowed" : "owned", (long long)(borrowed ? bld : K),
                        (long long)(borrowed ? boff : 0), (long long)M, (long long)N, (long long)K, (int)gs,
                        qmm_act_name(act), qmm_dtype_name(xt), qmm_dtype_name(yt),
                        has_bias ? qmm_dtype_name(bt) : "none", per_tensor ? "tensor" : "row", (long long)ldx,
                        (long long)ldy, qmm_status_name(st), st == QMM_OK ? "" : qmm_last_error(), (long long)bad,
                        (long long)(bad >= 0 ? bad / ldy : -1), (long long)(bad >= 0 ? bad % ldy : -1),
                        (long long)sbad);
                abort();
            }
        }
#ifdef QMM_FUZZ_AMX_EMU
        amx_emu_engines(wt, wbt, w, a, (int)gs, y0, s0, y1, s1, h0 | h1 << 8 | h2 << 16 | (h3 ^ h4 ^ h5 << 3) << 24);
#endif
    }
    qmm_weight_destroy(wt);
    qmm_weight_destroy(wbt);
out:
    free(w);
    free(wb);
    free(sc);
    free(bias);
    free(x);
    free(y0);
    free(y1);
    free(s0);
    free(s1);
    return 0;
}
