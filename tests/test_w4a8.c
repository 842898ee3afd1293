/*
 * test_w4a8.c — borrowed W4A8 / W6A8 weights (qmm_weight_borrow_w4a8, SPEC §11):
 *   - fp8 e4m3fn: every one of the 256 bytes decodes to its value (an independent formula);
 *   - decoding: qmm_weight_int8_rows of a W4A8 weight equals this test's own decoder (written
 *     from the kitchen's _unpack_codes / _dequant_int4_grouped_to_int8: unpack, level, fp32
 *     product, round half to even, clamp) for 4 and 6 bits, every group size kind, codebook or
 *     uniform, s_rel f8_e4m3 or f32, values that round at .5 and clamp past ±127;
 *   - the decoders of w4a8.h alone (the decode table, the fastest and the scalar rows decoders,
 *     with and without the table) on random ranges, row counts, strides and misaligned outputs;
 *   - every engine of the table on the W4A8 weight gives the bits of the same engine on an owned
 *     int8 weight of the decoded values (scale s_channel), and every int8 engine the bits of the
 *     reference (seeded random shapes: M = 1 and up to 300, odd N, K a multiple of 16 or 32 with
 *     tails of 64, every x and out dtype, act, convrot group, bias, residual, both epilogues),
 *     and every M of the fused rows kernels (1..64) and of avx_vnni's rows regime (1..32) on
 *     weights they run;
 *   - amx_int8 (the tile emulator, tests/w4a8.cmake) on the W4A8 weight, each regime, against the
 *     reference;
 *   - bad descriptors: an error naming the field (codes length, group size, bits, codebook size,
 *     NaN/Inf scales, NULLs, convrot group);
 *   - no read past the caller's codes: codes, s_rel, s_channel each end at a PROT_NONE page.
 * An unavailable engine prints "skipped: <engine>: <why>". QMM_TEST_QUICK=1: fewer cases.
 */
#define _GNU_SOURCE /* MAP_ANONYMOUS */
#include "../src/engines/x86_amx/amx_emu.h"
#include "borrow.h"
#include "testutil.h"
#include "w4a8.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static const qmm_dtype k_xt[3] = {QMM_F32, QMM_F16, QMM_BF16};
static const qmm_dtype k_yt[4] = {QMM_I32, QMM_F32, QMM_F16, QMM_BF16};
static const qmm_act k_acts[3] = {QMM_ACT_NONE, QMM_ACT_SWIGLU, QMM_ACT_GELU_TANH};

static qmm_context *g_ctx;
static qmm_engine_id g_eng[QMM_ENGINE_COUNT];
static int g_neng;
static int g_avail[QMM_ENGINE_COUNT];

/* fp8 e4m3fn by its definition: (-1)^s · 2^(e-7) · (1 + m/8), subnormal 2^-6 · m/8, 0x7f NaN */
static float e4m3(uint8_t b) {
    const int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
    if (e == 15 && m == 7) return NAN;
    const double v = e ? ldexp(1.0 + m / 8.0, e - 7) : ldexp(m / 8.0, -6);
    return (float)(s ? -v : v);
}

/* One W4A8 layer: the kitchen's storage, and the arguments of a call. */
typedef struct {
    int64_t M, N, K, Kin;
    int bits, gsz, gs, f8, has_cb;
    qmm_act act;
    qmm_dtype xt, yt, bias_t;
    int bias, kitchen, residual;
    uint8_t *codes;            /* [N][K·bits/8] */
    void *s_rel;               /* [N][K/gsz], f8 bytes or f32 */
    float cb[16], *s_channel;
    void *biasv, *x, *res, *rscale;
    int8_t *dec;               /* [N][K]: this test's decoding */
} layer;

/* code of W[n][k] as the kitchen's _unpack_codes reads it */
static int code_at(const layer *L, int64_t n, int64_t k) {
    const uint8_t *row = L->codes + n * (L->K * L->bits / 8);
    int c = k % 2 ? row[k / 2] >> 4 : row[k / 2] & 15;
    if (L->bits == 6) c += ((row[L->K / 2 + k / 4] >> (2 * (k % 4))) & 3) * 16;
    return c;
}

static float srel_at(const layer *L, int64_t n, int64_t g) {
    const int64_t i = n * (L->K / L->gsz) + g;
    return L->f8 ? e4m3(((const uint8_t *)L->s_rel)[i]) : ((const float *)L->s_rel)[i];
}

/* _dequant_int4_grouped_to_int8: (codebook[c] or c - 2^(bits-1)) * s_rel in fp32, round (half
 * to even), clamp(-127, 127) */
static void decode(layer *L) {
    for (int64_t n = 0; n < L->N; n++)
        for (int64_t k = 0; k < L->K; k++) {
            const int c = code_at(L, n, k);
            const float v = L->has_cb ? L->cb[c] : (float)(c - (1 << (L->bits - 1)));
            volatile float p = v * srel_at(L, n, k / L->gsz);
            double r = nearbyint((double)p);
            r = r > 127 ? 127 : r < -127 ? -127 : r;
            L->dec[n * L->K + k] = (int8_t)r;
        }
}

static const int k_groups4[] = {4, 8, 16, 32, 48, 64, 128};

/* set: layer_random's groups a multiple of 16 and s_rel e4m3 (the fused rows kernels' weights) */
static int g_table_groups;

static void layer_random(layer *L, int64_t M, int64_t N, int64_t K, int bits) {
    memset(L, 0, sizeof *L);
    L->M = M; L->N = N; L->K = K; L->bits = bits;
    do L->gsz = k_groups4[tu_rand_int(0, 6)];
    while (K % L->gsz || ((bits == 6 || g_table_groups) && L->gsz % 16));
    static const int gss[4] = {0, 16, 64, 256};
    do L->gs = gss[tu_rand_int(0, 3)];
    while (L->gs && K % L->gs);
    L->f8 = g_table_groups || tu_rand_int(0, 3) != 0;
    L->has_cb = bits == 4 && tu_rand_int(0, 2) != 0;
    L->act = k_acts[tu_rand_int(0, 2)];
    L->Kin = L->act == QMM_ACT_SWIGLU ? 2 * K : K;
    L->xt = k_xt[tu_rand_int(0, 2)];
    L->yt = k_yt[tu_rand_int(0, 3)];
    L->bias = (int)tu_rand_int(0, 1);
    L->bias_t = k_xt[tu_rand_int(0, 2)];
    L->kitchen = (int)tu_rand_int(0, 1);
    L->residual = L->yt != QMM_I32 && tu_rand_int(0, 2) == 0;
    const int64_t cbytes = N * K * bits / 8, groups = N * K / L->gsz;
    L->codes = malloc((size_t)cbytes);
    for (int64_t i = 0; i < cbytes; i++) L->codes[i] = (uint8_t)tu_rand_u64();
    if (L->has_cb) /* sorted, in [-1, 1], sometimes with a level of exactly ±0.5 / a large one */
        for (int i = 0; i < 16; i++) L->cb[i] = -1.0f + (float)i * (2.0f / 15.0f) + 0.01f * tu_rand_normal();
    if (L->has_cb && tu_rand_int(0, 1)) { L->cb[7] = -0.5f; L->cb[8] = 0.5f; L->cb[15] = 1.7f; }
    L->s_rel = malloc((size_t)groups * 4);
    for (int64_t i = 0; i < groups; i++) {
        /* in the kitchen's range (s_rel · max|level| ≈ 127 at the row's largest group), sometimes past it */
        const float lmax = L->has_cb ? 1.0f : (float)((1 << (bits - 1)));
        const float s = (127.0f / lmax) * (0.2f + 0.9f * (float)tu_rand_int(0, 1000) / 1000.0f);
        if (L->f8) { /* the nearest e4m3 byte below s, searched */
            uint8_t best = 0;
            for (int b = 1; b < 0x7f; b++)
                if (e4m3((uint8_t)b) <= s) best = (uint8_t)b;
            ((uint8_t *)L->s_rel)[i] = tu_rand_int(0, 9) == 0 ? (uint8_t)(best | 0x80) : best; /* a negative one */
        } else {
            ((float *)L->s_rel)[i] = tu_rand_int(0, 4) == 0 ? rintf(s) + 0.5f : s; /* x.5 products */
        }
    }
    L->s_channel = malloc((size_t)N * 4);
    for (int64_t n = 0; n < N; n++) L->s_channel[n] = 0.001f + 0.01f * (float)tu_rand_int(1, 100) / 100.0f;
    L->biasv = malloc((size_t)N * 4);
    tu_fill_float(L->biasv, L->bias_t, N, 1.0f);
    L->x = malloc((size_t)(M * L->Kin) * 4);
    tu_fill_float(L->x, L->xt, M * L->Kin, 1.0f);
    L->res = malloc((size_t)(M * N) * 4);
    tu_fill_float(L->res, L->yt == QMM_I32 ? QMM_F32 : L->yt, M * N, 1.0f);
    L->rscale = malloc((size_t)N * 4);
    tu_fill_float(L->rscale, L->yt == QMM_I32 ? QMM_F32 : L->yt, N, 1.0f);
    L->dec = malloc((size_t)(N * K));
    decode(L);
}

static void layer_free(layer *L) {
    free(L->codes); free(L->s_rel); free(L->s_channel); free(L->biasv); free(L->x); free(L->res); free(L->rscale);
    free(L->dec);
}

static qmm_w4a8_desc layer_desc(const layer *L) {
    qmm_w4a8_desc d = qmm_w4a8_desc_default();
    d.name = "w4a8";
    d.N = L->N; d.K = L->K; d.bits = L->bits;
    d.codes = L->codes;
    d.codes_bytes = L->N * L->K * L->bits / 8;
    d.s_rel = L->s_rel;
    d.s_rel_dtype = L->f8 ? QMM_F8_E4M3 : QMM_F32;
    d.n_s_rel = L->N * L->K / L->gsz;
    d.group_size = L->gsz;
    d.codebook = L->has_cb ? L->cb : NULL;
    d.n_codebook = L->has_cb ? 16 : 0;
    d.s_channel = L->s_channel;
    d.bias = L->bias ? L->biasv : NULL;
    d.bias_dtype = L->bias_t;
    d.convrot_gs = L->gs;
    return d;
}

static qmm_weight_desc owned_desc(const layer *L) {
    qmm_weight_desc d = qmm_weight_desc_default();
    d.name = "decoded";
    d.N = L->N; d.K = L->K;
    d.data = L->dec;
    d.scale = L->s_channel;
    d.n_scale = L->N;
    d.bias = L->bias ? L->biasv : NULL;
    d.bias_dtype = L->bias_t;
    d.convrot_gs = L->gs;
    return d;
}

static void describe(const layer *L, const char *e, char *buf, size_t n) {
    snprintf(buf, n, "%s M×N×K=%lldx%lldx%lld W%dA8 group %d %s %s s_rel x %s out %s act %s gs %d bias %s%s%s", e,
             (long long)L->M, (long long)L->N, (long long)L->K, L->bits, L->gsz, L->has_cb ? "codebook" : "uniform",
             L->f8 ? "f8" : "f32", qmm_dtype_name(L->xt), qmm_dtype_name(L->yt), qmm_act_name(L->act), L->gs,
             L->bias ? qmm_dtype_name(L->bias_t) : "none", L->kitchen ? " kitchen" : "", L->residual ? " residual" : "");
}

static qmm_status run(qmm_context *ctx, const qmm_weight *w, const layer *L, void *y, qmm_engine_id e) {
    memset(y, 0, (size_t)(L->M * L->N) * 4);
    qmm_linear_args a = qmm_linear_args_default();
    a.M = L->M; a.x = L->x; a.x_dtype = L->xt; a.y = y; a.y_dtype = L->yt; a.act = L->act; a.engine = e;
    a.epilogue = L->kitchen ? QMM_EPILOGUE_KITCHEN : QMM_EPILOGUE_FUSED;
    if (L->residual) { a.residual = L->res; a.residual_scale = L->rscale; }
    return qmm_linear(ctx, w, &a);
}

static int same(const layer *L, const void *a, const void *b, const char *what, const char *vs) {
    const int64_t i = tu_first_diff(a, b, L->yt, L->M * L->N);
    return TU_CHECK(i < 0, "%s: differs from %s at [%lld][%lld]", what, vs, (long long)(i / L->N), (long long)(i % L->N));
}

static void check_decode(const layer *L, const qmm_weight *w) {
    int8_t *got = malloc((size_t)(L->N * L->K));
    char what[320];
    describe(L, "decode", what, sizeof what);
    TU_CHECK_OK(qmm_weight_int8_rows(w, 0, L->N, got, 0));
    int64_t i = 0;
    while (i < L->N * L->K && got[i] == L->dec[i]) i++;
    TU_CHECK(i == L->N * L->K, "%s: W[%lld][%lld] = %d, the kitchen's decoding %d", what, (long long)(i / L->K),
             (long long)(i % L->K), i < L->N * L->K ? got[i] : 0, i < L->N * L->K ? L->dec[i] : 0);
    free(got);
}

static void check_layer(layer *L) {
    char what[320];
    const qmm_w4a8_desc d = layer_desc(L);
    const qmm_weight_desc od = owned_desc(L);
    qmm_weight *wb = NULL, *wo = NULL;
    TU_CHECK_OK(qmm_weight_borrow_w4a8(g_ctx, &d, &wb));
    TU_CHECK_OK(qmm_weight_create_int8(g_ctx, &od, &wo));
    if (!wb || !wo) goto done;
    check_decode(L, wb);
    const size_t yb = (size_t)(L->M * L->N) * 4;
    void *yref = malloc(yb), *yo = malloc(yb), *yw = malloc(yb);
    describe(L, "ref", what, sizeof what);
    qmm_status st = run(g_ctx, wo, L, yref, QMM_ENGINE_REF);
    TU_CHECK(st == QMM_OK, "%s (owned): %s", what, qmm_last_error());
    TU_CHECK_OK(run(g_ctx, wb, L, yw, QMM_ENGINE_REF));
    if (st == QMM_OK) same(L, yw, yref, what, "the reference on the decoded int8 weight");
    for (int i = 0; i < g_neng && st == QMM_OK; i++) {
        const qmm_engine_id e = g_eng[i];
        if (!g_avail[e]) continue;
        describe(L, qmm_engine_name(e), what, sizeof what);
        const qmm_status so = run(g_ctx, wo, L, yo, e);
        const qmm_status sb = run(g_ctx, wb, L, yw, e);
        TU_CHECK(so == sb, "%s: owned %s, W4A8 %s (%s)", what, qmm_status_name(so), qmm_status_name(sb), qmm_last_error());
        if (so != QMM_OK || sb != QMM_OK) continue;
        same(L, yw, yo, what, "the same engine on the decoded int8 weight");
        if (qmm_engine_is_int8(e)) same(L, yw, yref, what, "the reference");
    }
    /* auto dispatch: an int8 engine, no fallback */
    qmm_counters c0, c1;
    qmm_get_counters(g_ctx, &c0);
    TU_CHECK_OK(run(g_ctx, wb, L, yw, QMM_ENGINE_AUTO));
    qmm_get_counters(g_ctx, &c1);
    if (g_neng && qmm_engine_is_int8(g_eng[0]) && g_avail[g_eng[0]])
        TU_CHECK(c1.op[QMM_OP_LINEAR].fallbacks == c0.op[QMM_OP_LINEAR].fallbacks, "%s: auto dispatch fell back", what);
    free(yref); free(yo); free(yw);
done:
    qmm_weight_destroy(wb);
    qmm_weight_destroy(wo);
}

/* The decoders of w4a8.h on their own, against this test's decoding: the decode table (the
 * context's and the scalar one, byte for byte, and each entry the definition), then the rows
 * decoders (the context's fastest, the scalar one; with the table where s_rel is e4m3 and
 * without) over random ranges [k0, k1) (k0 even: heads and tails not on 16 or 64 k), row counts
 * and row strides, into a buffer at a random offset from 64-byte alignment. */
static void check_decoders(layer *L) {
    const qmm_w4a8_desc d = layer_desc(L);
    qmm_weight *wb = NULL;
    TU_CHECK_OK(qmm_weight_borrow_w4a8(g_ctx, &d, &wb));
    if (!wb) return;
    qmm_weight view;
    const qmm_weight *w = NULL;
    TU_CHECK_OK(qmm_weight_for_call(g_ctx, wb, &view, &w));
    char what[320];
    describe(L, "decoders", what, sizeof what);
    static _Alignas(64) int8_t lut[QMM_W4A8_LUT_BYTES], lut_ref[QMM_W4A8_LUT_BYTES];
    const int ncode = 1 << L->bits;
    /* the table: the context's filler and each SIMD form this CPU runs, against the scalar one
     * and this test's arithmetic */
    qmm_w4a8_lut_fn fills[3] = {qmm_w4a8_lut_filler(g_ctx)};
    int nfill = 1;
    if (qmm_core_simd(g_ctx) >= QMM_ISA_AVX2) fills[nfill++] = qmm_w4a8_lut_fill_avx2_ptr;
    if (qmm_core_simd(g_ctx) == QMM_ISA_AVX512) fills[nfill++] = qmm_w4a8_lut_fill_avx512_ptr;
    for (int fi = 0; fi < nfill && L->f8; fi++) {
        qmm_w4a8_lut_fill(w, lut_ref);
        fills[fi](w, lut);
        int bad = -1;
        for (int i = 0; i < 256 * ncode && bad < 0; i++) {
            const int c = i % ncode;
            const float v = L->has_cb ? L->cb[c] : (float)(c - ncode / 2);
            volatile float p = v * e4m3((uint8_t)(i / ncode));
            double r = isnan(p) ? 0.0 : nearbyint((double)p);
            r = r > 127 ? 127 : r < -127 ? -127 : r;
            if (lut[i] != lut_ref[i] || lut[i] != (int8_t)r) bad = i;
        }
        TU_CHECK(bad < 0, "%s: table %d: [s_rel byte 0x%02x][code %d] = %d (scalar %d)", what, fi, bad / ncode,
                 bad % ncode, bad >= 0 ? lut[bad] : 0, bad >= 0 ? lut_ref[bad] : 0);
    }
    if (L->f8) qmm_w4a8_lut_filler(g_ctx)(w, lut); /* the table the decoders below read */
    /* the scalar decoder, the context's fastest, and each SIMD form this CPU runs (AVX2, AVX-512
     * with and without VBMI's 6-bit lookups) */
    qmm_w4a8_rows_fn fns[5] = {qmm_w4a8_decode_rows, qmm_w4a8_decoder(g_ctx)};
    const char *names[5] = {"scalar", "fastest"};
    int nf = 2;
    if (qmm_core_simd(g_ctx) >= QMM_ISA_AVX2) {
        fns[nf] = qmm_w4a8_decode_rows_avx2_ptr;
        names[nf++] = "avx2";
    }
    if (qmm_core_simd(g_ctx) == QMM_ISA_AVX512) {
        fns[nf] = qmm_w4a8_decode_rows_avx512_ptr;
        names[nf++] = "avx512";
        if (qmm_cpu_features() & QMM_CPU_AVX512_VBMI) {
            fns[nf] = qmm_w4a8_decode_rows_avx512vbmi_ptr;
            names[nf++] = "avx512vbmi";
        }
    }
    int8_t *buf = malloc((size_t)(L->N * (L->K + 64) + 128));
    for (int it = 0; it < 40 && buf; it++) {
        const int use_lut = L->f8 && it % 2 == 0, fi = (it / 2) % nf;
        int64_t k0 = 2 * tu_rand_int(0, (L->K - 1) / 2), k1 = tu_rand_int(k0 + 1, L->K);
        if (it % 3 == 0) { k0 = 0; k1 = L->K; } /* whole rows (the rows regime) */
        const int64_t n0 = tu_rand_int(0, L->N - 1), rows = tu_rand_int(1, L->N - n0 < 20 ? L->N - n0 : 20);
        const int64_t ld = k1 - k0 + tu_rand_int(0, 64), off = tu_rand_int(0, 63);
        int8_t *dst = buf + off;
        memset(buf, 0x55, (size_t)(L->N * (L->K + 64) + 128));
        fns[fi](w, use_lut ? lut : NULL, n0, rows, k0, k1, dst, ld);
        int64_t bi = -1, bk = 0;
        for (int64_t i = 0; i < rows && bi < 0; i++)
            for (int64_t k = k0; k < k1 && bi < 0; k++)
                if (dst[i * ld + k - k0] != L->dec[(n0 + i) * L->K + k]) { bi = i; bk = k; }
        TU_CHECK(bi < 0, "%s: %s decoder%s rows [%lld, +%lld) k [%lld, %lld) ld %lld: W[%lld][%lld] = %d, want %d", what,
                 names[fi], use_lut ? " with the table" : "", (long long)n0, (long long)rows,
                 (long long)k0, (long long)k1, (long long)ld, (long long)(n0 + bi), (long long)bk,
                 bi >= 0 ? dst[bi * ld + bk - k0] : 0, bi >= 0 ? L->dec[(n0 + bi) * L->K + bk] : 0);
        int64_t past = -1; /* nothing written between rows or around the buffer */
        for (int64_t i = 0; i < off && past < 0; i++) past = buf[i] != 0x55 ? i : -1;
        for (int64_t i = 0; i < rows && past < 0; i++)
            for (int64_t k = k1 - k0; k < (i + 1 < rows ? ld : 64) && past < 0; k++)
                if (dst[i * ld + k] != 0x55) past = off + i * ld + k;
        TU_CHECK(past < 0, "%s: a decoder wrote byte %lld outside its rows", what, (long long)past);
    }
    free(buf);
    qmm_weight_destroy(wb);
}

/* amx_int8 through the tile emulator on the W4A8 weight, each regime, against the reference. */
static void force_regime(int want) {
    qmm_amx_blocking b = qmm_amx_blocking_default();
    if (tu_rand_int(0, 1)) {
        static const int64_t kcs[] = {64, 128, 192, 512}, ncs[] = {32, 64, 96, 512}, mcs[] = {32, 64, 512};
        b.kc = kcs[tu_rand_int(0, 3)];
        b.nc = ncs[tu_rand_int(0, 3)];
        b.mc = mcs[tu_rand_int(0, 2)];
    }
    if (want == QMM_AMX_DECODE) b.small_m = 32;
    else if (want == QMM_AMX_PANEL) { b.small_m = 1; b.panel_a = (int64_t)1 << 40; }
    else { b.small_m = 1; b.panel_a = 0; }
    qmm_amx_blocking_emu = b;
}

static void check_amx_emulated(int64_t M, int64_t N, int64_t K) {
    const uint32_t need = QMM_CPU_AVX512F | QMM_CPU_AVX512BW | QMM_CPU_AVX512VL | QMM_CPU_AVX512DQ;
    if ((qmm_cpu_features() & need) != need) { /* the emulated objects are built with the AVX-512 flags */
        static int said;
        if (!said++) tu_skip("amx_int8 (emulated)", "the emulated build's epilogues are AVX-512; CPU lacks it");
        return;
    }
    layer L;
    layer_random(&L, M, N, K, tu_rand_int(0, 1) ? 4 : 6);
    const qmm_w4a8_desc d = layer_desc(&L);
    const qmm_weight_desc od = owned_desc(&L);
    qmm_weight *wb = NULL, *wo = NULL;
    TU_CHECK_OK(qmm_weight_borrow_w4a8(g_ctx, &d, &wb));
    TU_CHECK_OK(qmm_weight_create_int8(g_ctx, &od, &wo));
    const size_t yb = (size_t)(M * N) * 4;
    void *yref = malloc(yb), *y = calloc(1, yb);
    char what[320];
    describe(&L, "amx_int8 (emulated)", what, sizeof what);
    if (wb && wo && run(g_ctx, wo, &L, yref, QMM_ENGINE_REF) == QMM_OK) {
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
        force_regime(want);
        const long f0 = qmm_amx_emu_faults();
        /* as qmm_linear runs it: the row's final descriptor for the call, then the driver */
        static const qmm_engine emu = {QMM_ENGINE_AMX_INT8, "amx_int8", QMM_KIND_INT8, QMM_ISA_AMX, 0, QMM_I8, "TDPBSSD",
                                       0, &qmm_amx_int8_ops_emu};
        TU_CHECK_OK(qmm_linear_drive(g_ctx, &emu, qmm_op_finalize(&emu.ops->op[QMM_OP_LINEAR], &c, g_ctx->n_threads).desc, &c));
        TU_CHECK(qmm_amx_emu_faults() == f0, "%s: emulated tile faults: %s", what, qmm_amx_emu_first_fault());
        same(&L, y, yref, what, "the reference");
        qmm_amx_blocking_emu = qmm_amx_blocking_default();
    }
    free(yref); free(y);
    qmm_weight_destroy(wb);
    qmm_weight_destroy(wo);
    layer_free(&L);
}

/* ---------------------------------------------------------------- bad input */
static void expect_fail(const qmm_w4a8_desc *d, qmm_status want, const char *needle) {
    qmm_weight *w = (qmm_weight *)1;
    const qmm_status st = qmm_weight_borrow_w4a8(g_ctx, d, &w);
    TU_CHECK(st == want && w == NULL && strstr(qmm_last_error(), needle) != NULL,
             "bad descriptor (%s): got %s \"%s\", want %s naming %s", needle, qmm_status_name(st), qmm_last_error(),
             qmm_status_name(want), needle);
    if (st == QMM_OK) qmm_weight_destroy(w);
}

static void check_bad_input(void) {
    layer L;
    layer_random(&L, 1, 5, 64, 4);
    L.f8 = 1;
    free(L.s_rel);
    L.gsz = 16;
    L.s_rel = calloc((size_t)(5 * 64 / 16), 1);
    memset(L.s_rel, 0x40, 20);
    const qmm_w4a8_desc good = layer_desc(&L);
    qmm_w4a8_desc d;
    const qmm_status IA = QMM_ERR_INVALID_ARGUMENT;
    d = good; d.codes_bytes = good.codes_bytes - 1; expect_fail(&d, IA, "codes_bytes");
    d = good; d.codes_bytes = good.codes_bytes * 2; expect_fail(&d, IA, "codes_bytes");
    d = good; d.codes = NULL; expect_fail(&d, IA, "codes");
    d = good; d.bits = 5; expect_fail(&d, IA, "bits");
    d = good; d.bits = 8; expect_fail(&d, IA, "bits");
    d = good; d.group_size = 24; expect_fail(&d, IA, "group_size");
    d = good; d.group_size = 3; expect_fail(&d, IA, "group_size");
    d = good; d.group_size = 0; expect_fail(&d, IA, "group_size");
    d = good; d.group_size = 128; expect_fail(&d, IA, "group_size"); /* does not divide K = 64 */
    d = good; d.n_s_rel = good.n_s_rel + 1; expect_fail(&d, IA, "s_rel");
    d = good; d.s_rel = NULL; expect_fail(&d, IA, "s_rel");
    d = good; d.s_rel_dtype = QMM_BF16; expect_fail(&d, IA, "s_rel dtype");
    d = good; d.n_codebook = 15; expect_fail(&d, IA, "codebook");
    d = good; d.codebook = L.cb; d.n_codebook = 8; expect_fail(&d, IA, "codebook");
    d = good; d.codebook = NULL; d.n_codebook = 16; expect_fail(&d, IA, "codebook");
    d = good; d.s_channel = NULL; expect_fail(&d, IA, "s_channel");
    d = good; d.K = 40; d.codes_bytes = 5 * 40 / 2; expect_fail(&d, IA, "multiple of 16");
    d = good; d.N = 0; expect_fail(&d, IA, "shape");
    d = good; d.convrot_gs = 8; expect_fail(&d, QMM_ERR_UNSUPPORTED, "convrot");
    d = good; d.convrot_gs = 256; expect_fail(&d, QMM_ERR_UNSUPPORTED, "convrot");
    d = good; d.bias = L.biasv; d.bias_dtype = QMM_I8; expect_fail(&d, QMM_ERR_UNSUPPORTED, "bias dtype");
    /* 6 bits: K % 32, group a multiple of 16, no codebook */
    d = good; d.bits = 6; d.K = 48; d.codes_bytes = 5 * 48 * 6 / 8; d.n_s_rel = 5 * 3; expect_fail(&d, IA, "multiple of 32");
    d = good; d.bits = 6; d.codes_bytes = 5 * 64 * 6 / 8; d.group_size = 8; d.n_s_rel = 5 * 8; expect_fail(&d, IA, "group_size");
    float cb[16] = {0};
    d = good; d.bits = 6; d.codes_bytes = 5 * 64 * 6 / 8; d.codebook = cb; d.n_codebook = 16; expect_fail(&d, IA, "codebook");
    /* non-finite scales and codebook values */
    float sch[5] = {1, 1, 1, 1, 1};
    d = good; d.s_channel = sch; sch[3] = NAN; expect_fail(&d, IA, "s_channel[3]");
    sch[3] = INFINITY; expect_fail(&d, IA, "s_channel[3]");
    uint8_t *sr = L.s_rel;
    d = good; sr[6] = 0x7f; expect_fail(&d, IA, "s_rel[1][2]");
    sr[6] = 0xff; expect_fail(&d, IA, "s_rel[1][2]");
    sr[6] = 0x40;
    float srf[20];
    for (int i = 0; i < 20; i++) srf[i] = 1.0f;
    srf[19] = NAN;
    d = good; d.s_rel = srf; d.s_rel_dtype = QMM_F32; expect_fail(&d, IA, "s_rel[4][3]");
    srf[19] = -INFINITY; expect_fail(&d, IA, "s_rel[4][3]");
    for (int i = 0; i < 16; i++) cb[i] = (float)i;
    cb[9] = NAN;
    d = good; d.codebook = cb; d.n_codebook = 16; expect_fail(&d, IA, "codebook[9]");
    qmm_weight *w = (qmm_weight *)1;
    TU_CHECK(qmm_weight_borrow_w4a8(g_ctx, NULL, &w) == IA && w == NULL, "NULL desc accepted");
    TU_CHECK(qmm_weight_borrow_w4a8(NULL, NULL, &w) == IA && w == NULL, "NULL desc (and no ctx) accepted");
    TU_CHECK(qmm_weight_borrow_w4a8(g_ctx, &good, NULL) == IA, "NULL out accepted");
    /* the good one works, and says what it is */
    TU_CHECK_OK(qmm_weight_borrow_w4a8(g_ctx, &good, &w));
    qmm_weight_info info;
    qmm_weight_get_info(w, &info);
    TU_CHECK(info.is_int8 && info.code_bits == 4 && info.group_size == 16 && info.packed_bytes == 0,
             "info: int8 %d bits %d group %d packed %zu", info.is_int8, info.code_bits, info.group_size, info.packed_bytes);
    int8_t row[64];
    TU_CHECK(qmm_weight_int8_rows(w, 4, 2, row, 0) == IA, "rows past N accepted");
    TU_CHECK(qmm_weight_int8_rows(w, 0, 1, row, 10) == IA, "ldo < K accepted");
    TU_CHECK(qmm_weight_int8_rows(NULL, 0, 1, row, 0) == IA, "NULL weight accepted");
    qmm_weight_destroy(w);
    layer_free(&L);
}

/* ---------------------------------------------------------------- no read past the caller's memory */
/* n bytes ending at a PROT_NONE page */
static void *guarded(size_t n, void **map, size_t *mapn) {
    const size_t pg = (size_t)sysconf(_SC_PAGESIZE), body = (n + pg - 1) / pg * pg;
    *mapn = body + pg;
    char *p = mmap(NULL, *mapn, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    mprotect(p + body, pg, PROT_NONE);
    *map = p;
    return p + body - n;
}

static void check_guarded(int64_t M, int64_t N, int64_t K, int bits) {
    layer L;
    layer_random(&L, M, N, K, bits);
    if (L.yt == QMM_I32) { L.yt = QMM_BF16; L.residual = 0; } /* every engine, the float ones too */
    const size_t cb = (size_t)(N * K * bits / 8), sb = (size_t)(N * K / L.gsz) * (L.f8 ? 1 : 4);
    void *m1, *m2, *m3;
    size_t n1, n2, n3;
    uint8_t *codes = guarded(cb, &m1, &n1);
    void *srel = guarded(sb, &m2, &n2);
    float *sch = guarded((size_t)N * 4, &m3, &n3);
    if (!codes || !srel || !sch) { TU_CHECK(0, "mmap failed"); return; }
    memcpy(codes, L.codes, cb);
    memcpy(srel, L.s_rel, sb);
    memcpy(sch, L.s_channel, (size_t)N * 4);
    qmm_w4a8_desc d = layer_desc(&L);
    d.codes = codes; d.s_rel = srel; d.s_channel = sch;
    qmm_weight *w = NULL, *wo = NULL;
    const qmm_weight_desc od = owned_desc(&L);
    TU_CHECK_OK(qmm_weight_borrow_w4a8(g_ctx, &d, &w));
    TU_CHECK_OK(qmm_weight_create_int8(g_ctx, &od, &wo));
    const size_t yb = (size_t)(M * N) * 4;
    void *yref = malloc(yb), *y = malloc(yb);
    char what[320];
    if (w && wo && run(g_ctx, wo, &L, yref, QMM_ENGINE_REF) == QMM_OK)
        for (int i = 0; i < g_neng; i++) {
            const qmm_engine_id e = g_eng[i];
            if (!g_avail[e]) continue;
            describe(&L, qmm_engine_name(e), what, sizeof what);
            TU_CHECK(run(g_ctx, w, &L, y, e) == QMM_OK, "%s (guarded): %s", what, qmm_last_error());
            if (qmm_engine_is_int8(e)) same(&L, y, yref, what, "the reference (guarded)");
        }
    free(yref); free(y);
    qmm_weight_destroy(w);
    qmm_weight_destroy(wo);
    munmap(m1, n1); munmap(m2, n2); munmap(m3, n3);
    layer_free(&L);
}

int main(int argc, char **argv) {
    tu_init(argc, argv, "test_w4a8");
    const int quick = getenv("QMM_TEST_QUICK") != NULL;
    TU_CHECK_OK(qmm_context_create(NULL, &g_ctx));
    if (!g_ctx) return tu_finish();
    g_neng = tu_engines(TU_ENGINES_ALL, g_eng);
    for (int i = 0; i < g_neng; i++) {
        char why[160];
        g_avail[g_eng[i]] = qmm_engine_available(g_eng[i], why, sizeof why);
        if (!g_avail[g_eng[i]]) tu_skip(qmm_engine_name(g_eng[i]), why);
    }
    /* fp8 e4m3fn, every byte */
    int bad = -1;
    for (int b = 0; b < 256 && bad < 0; b++) {
        const float want = e4m3((uint8_t)b), got = qmm_e4m3_to_f32((uint8_t)b);
        if (!(want == got && signbit(want) == signbit(got)) && !(isnan(want) && isnan(got))) bad = b;
    }
    TU_CHECK(bad < 0, "e4m3 byte 0x%02x: %g, want %g", bad, bad >= 0 ? qmm_e4m3_to_f32((uint8_t)bad) : 0.0,
             bad >= 0 ? e4m3((uint8_t)bad) : 0.0);
    check_bad_input();
    if (!qmm_w4a8_vbmi(g_ctx))
        tu_skip("W4A8 6-bit lookups with AVX512-VBMI (VPERMB)",
                qmm_cpu_features() & QMM_CPU_AVX512_VBMI ? "QMM_W4A8_VBMI=0 or no AVX-512 core level"
                                                         : "CPU lacks avx512_vbmi");
    /* randomized layers: M = 1 and small M, then larger; odd N; K multiples of 16/32 with tails of 64 */
    static const int64_t Ms[] = {1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 17, 24, 33, 64, 65, 100, 300};
    const int nm = (int)(sizeof Ms / sizeof Ms[0]);
    for (int it = 0; it < (quick ? 12 : 40); it++) {
        const int bits = tu_rand_int(0, 2) ? 4 : 6;
        const int64_t M = Ms[it % nm];
        const int64_t N = tu_rand_int(0, 3) == 0 ? tu_rand_int(1, 40) : tu_rand_int(1, 300) | 1;
        const int64_t K = bits == 6 ? 32 * tu_rand_int(1, M > 64 ? 12 : 30) : 16 * tu_rand_int(1, M > 64 ? 24 : 60);
        layer L;
        layer_random(&L, M, N, K, bits);
        check_layer(&L);
        layer_free(&L);
    }
    /* the fused rows kernels (avx512_vnni: 1..8 row dots, 9..16 tokens in lanes, 17..64 groups of
     * 16 tokens; avx2_int8 and avx_vnni: 1..8 row dots) at every M of their range, and the rows
     * buffer up to 32 (avx_vnni's rows regime): e4m3 s_rel, groups of 16 to 128, K with and without
     * a tail past the last 64 */
    g_table_groups = 1;
    for (int it = 0; it < (quick ? 64 : 128); it++) {
        const int bits = tu_rand_int(0, 2) ? 4 : 6;
        const int64_t M = 1 + it % 64, N = tu_rand_int(0, 3) == 0 ? tu_rand_int(1, 40) : tu_rand_int(1, 300) | 1;
        const int64_t K = tu_rand_int(0, 1) ? 64 * tu_rand_int(1, 20) : bits == 6 ? 32 * tu_rand_int(1, 40) : 16 * tu_rand_int(1, 80);
        layer L;
        layer_random(&L, M, N, K, bits);
        check_layer(&L);
        layer_free(&L);
    }
    g_table_groups = 0;
    /* the decoders alone: every group size, 4 and 6 bits, codebook or not, e4m3 or f32 s_rel */
    for (int it = 0; it < (quick ? 16 : 48); it++) {
        const int bits = it % 3 == 2 ? 6 : 4;
        const int64_t N = tu_rand_int(1, 40), K = bits == 6 ? 32 * tu_rand_int(1, 40) : 16 * tu_rand_int(1, 80);
        layer L;
        layer_random(&L, 1, N, K, bits);
        check_decoders(&L);
        layer_free(&L);
    }
    /* K past 16 Ki: the rows regime decodes 16 rows at a time */
    for (int it = 0; it < 2; it++) {
        layer L;
        layer_random(&L, it ? 3 : 1, 37, 16 * 1088, it ? 6 : 4);
        check_layer(&L);
        layer_free(&L);
    }
    for (int it = 0; it < (quick ? 6 : 20); it++) {
        const int64_t M = it < 10 ? tu_rand_int(1, 40) : tu_rand_int(33, 200);
        check_amx_emulated(M, tu_rand_int(0, 3) == 0 ? 1 : tu_rand_int(1, 200), 32 * tu_rand_int(1, 20));
    }
    check_guarded(1, 37, 160, 4);
    check_guarded(5, 16, 96, 6);
    check_guarded(12, 35, 176, 4);
    check_guarded(16, 21, 224, 6);
    check_guarded(70, 33, 224, 4);
    qmm_context_destroy(g_ctx);
    return tu_finish();
}
