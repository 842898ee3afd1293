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
 * Input layout (missing bytes read as 0):
 *   h0  N = 1 + h0 % 40
 *   h1  gs = {0, 0, 16, 64}[h1 & 3]; K = gs ? gs * (1 + (h1 >> 2) % 3) : 1 + (h1 >> 2)
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
    const int64_t N = 1 + h0 % 40, gs = gss[h1 & 3], K = gs ? gs * (1 + (h1 >> 2) % 3) : 1 + (h1 >> 2);
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
