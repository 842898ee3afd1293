/*
 * test_checkpoint_w4a8.c — ComfyUI v0.30 W4A8 files (format asym_w4a8_int8: L.weight codes,
 * L.weight_s_rel, L.weight_s_channel, optional L.weight_codebook, L.comfy_quant; SPEC §3, §11)
 * through qmm_model_*, on files written here with tu_write_ckpt:
 *   - seeded random layers (4 bits with and without a codebook, 6 bits; s_rel F8_E4M3, U8 and F32;
 *     every group-size kind; bias none/F32/BF16; keys at the top level or in "params"; the
 *     _quantization_metadata alternative; tensors at odd offsets) load as QMM_LAYER_W4A8 with the
 *     right bits, group, K and convrot group; the model's weight borrows the codes from the file
 *     (its codes pointer is the tensor's), decodes to the int8 values of a weight borrowed directly
 *     from the same arrays, and every engine gives the bits of the same engine on that direct weight
 *     (int8 engines: the bits of the reference), the file opened by path and from memory;
 *   - qmm_plan_info.weight (and qmm_plan_format's "weight:" line) names the bits, codebook, group
 *     and where the codes are decoded: the int8 engine's panels, or the fallback's blocks
 *     (full_precision_matrix_mult);
 *   - each malformed class: an error naming the tensor or key (codes width, group size, bits,
 *     codebook size or with 6 bits, s_rel / s_channel dtype and shape, missing tensors, a
 *     correction, convrot false, K % convrot group, huge group sizes) and no model; NaN/Inf s_rel,
 *     a zero/negative/NaN s_channel, a NaN codebook entry, an Inf bias: the open succeeds,
 *     qmm_model_check_layer and qmm_model_weight fail naming the tensor and row;
 *   - a file truncated after the open: QMM_ERR_IO at packing, not a SIGBUS;
 *   - no read past the codes: the model opened from memory that ends (with the codes) at a
 *     PROT_NONE page runs on every engine.
 * An unavailable engine prints "skipped: <engine>: <why>". QMM_TEST_QUICK=1: fewer cases.
 */
#define _GNU_SOURCE /* MAP_ANONYMOUS */
#include "qmm_internal.h"
#include "qmm_io.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static char g_dir[256];
static qmm_context *g_ctx;
static qmm_engine_id g_eng[QMM_ENGINE_COUNT];
static int g_neng;
static int g_avail[QMM_ENGINE_COUNT];

static const char *tmp_path(const char *name) {
    static char buf[512];
    snprintf(buf, sizeof buf, "%s/%s", g_dir, name);
    return buf;
}

enum { SREL_F8 = 0, SREL_U8 = 1, SREL_F32 = 2 };
static const char *k_srel_name[] = {"F8_E4M3", "U8", "F32"};

/* One W4A8 layer as the kitchen stores it, with its tensors and comfy_quant. */
typedef struct {
    char name[64];
    int64_t N, K;
    int bits, gsz, gs, srel, has_cb, nested, fp;
    qmm_dtype bias_t;     /* QMM_I8: no bias */
    uint8_t *codes;       /* [N][K·bits/8] */
    void *s_rel;          /* [N][K/gsz] */
    float *s_channel, cb[16];
    void *bias;
    char cq[256];
} w4layer;

static size_t codes_bytes(const w4layer *L) { return (size_t)(L->N * L->K * L->bits / 8); }
static size_t srel_bytes(const w4layer *L) { return (size_t)(L->N * (L->K / L->gsz)) * (L->srel == SREL_F32 ? 4 : 1); }

static void w4_random(w4layer *L, const char *name, int64_t N, int64_t K, int bits, int gsz, int gs, int srel, int has_cb,
                      qmm_dtype bias_t) {
    memset(L, 0, sizeof *L);
    snprintf(L->name, sizeof L->name, "%s", name);
    L->N = N; L->K = K; L->bits = bits; L->gsz = gsz; L->gs = gs; L->srel = srel; L->has_cb = has_cb && bits == 4;
    L->bias_t = bias_t;
    L->codes = malloc(codes_bytes(L));
    for (size_t i = 0; i < codes_bytes(L); i++) L->codes[i] = (uint8_t)tu_rand_int(0, 255);
    const int64_t ns = N * (K / gsz);
    L->s_rel = malloc(srel_bytes(L));
    for (int64_t i = 0; i < ns; i++) {
        if (srel == SREL_F32) ((float *)L->s_rel)[i] = (float)tu_rand_int(1, 4000) / 32.0f;
        else ((uint8_t *)L->s_rel)[i] = (uint8_t)tu_rand_int(0x00, 0x6e);   /* 0, subnormals, up to 112: finite */
    }
    L->s_channel = malloc((size_t)N * 4);
    for (int64_t i = 0; i < N; i++) L->s_channel[i] = (float)tu_rand_int(1, 1000) * 1e-5f;
    for (int i = 0; i < 16; i++) L->cb[i] = ((float)i - 7.5f) / 7.5f + (float)tu_rand_int(-100, 100) * 1e-4f;
    if (bias_t != QMM_I8) {
        L->bias = malloc((size_t)N * 4);
        tu_fill_float(L->bias, bias_t, N, 0.5f);
    }
    snprintf(L->cq, sizeof L->cq,
             L->nested ? "{\"format\": \"asym_w4a8_int8\", \"params\": {\"group_size\": %d, \"convrot_groupsize\": %d}}"
                       : "{\"format\": \"asym_w4a8_int8\", \"group_size\": %d, \"convrot_groupsize\": %d}",
             gsz, gs);
}

static void w4_set_cq(w4layer *L, const char *extra) {
    snprintf(L->cq, sizeof L->cq,
             L->nested ? "{\"format\": \"asym_w4a8_int8\", \"params\": {\"group_size\": %d, \"convrot_groupsize\": %d}%s}"
                       : "{\"format\": \"asym_w4a8_int8\", \"group_size\": %d, \"convrot_groupsize\": %d%s}",
             L->gsz, L->gs, extra ? extra : "");
}

static void w4_free(w4layer *L) {
    free(L->codes);
    free(L->s_rel);
    free(L->s_channel);
    free(L->bias);
}

/* The layer's tensors into t (names in names[][96]): weight, s_rel, s_channel, codebook, bias,
 * comfy_quant (with_cq). Returns the count. */
static size_t w4_tensors(const w4layer *L, tu_tensor *t, char names[][96], int with_cq) {
    size_t n = 0;
    snprintf(names[n], 96, "%s.weight", L->name);
    t[n] = (tu_tensor){names[n], QMM_ST_I8, 2, {L->N, L->K * L->bits / 8}, L->codes};
    n++;
    snprintf(names[n], 96, "%s.weight_s_rel", L->name);
    t[n] = (tu_tensor){names[n], L->srel == SREL_F32 ? QMM_ST_F32 : L->srel == SREL_U8 ? QMM_ST_U8 : QMM_ST_F8_E4M3, 2,
                       {L->N, L->K / L->gsz}, L->s_rel};
    n++;
    snprintf(names[n], 96, "%s.weight_s_channel", L->name);
    t[n] = (tu_tensor){names[n], QMM_ST_F32, 1, {L->N}, L->s_channel};
    n++;
    if (L->has_cb) {
        snprintf(names[n], 96, "%s.weight_codebook", L->name);
        t[n] = (tu_tensor){names[n], QMM_ST_F32, 1, {16}, L->cb};
        n++;
    }
    if (L->bias) {
        snprintf(names[n], 96, "%s.bias", L->name);
        t[n] = (tu_tensor){names[n], qmm_st_dtype_from_qmm(L->bias_t), 1, {L->N}, L->bias};
        n++;
    }
    if (with_cq) {
        snprintf(names[n], 96, "%s.comfy_quant", L->name);
        t[n] = (tu_tensor){names[n], QMM_ST_U8, 1, {(int64_t)strlen(L->cq)}, L->cq};
        n++;
    }
    return n;
}

static qmm_status w4_direct(const w4layer *L, qmm_weight **out) {
    qmm_w4a8_desc d = qmm_w4a8_desc_default();
    d.name = L->name;
    d.N = L->N; d.K = L->K; d.bits = L->bits;
    d.codes = L->codes; d.codes_bytes = (int64_t)codes_bytes(L);
    d.s_rel = L->s_rel; d.s_rel_dtype = L->srel == SREL_F32 ? QMM_F32 : QMM_F8_E4M3;
    d.n_s_rel = L->N * (L->K / L->gsz); d.group_size = L->gsz;
    d.codebook = L->has_cb ? L->cb : NULL; d.n_codebook = L->has_cb ? 16 : 0;
    d.s_channel = L->s_channel;
    d.bias = L->bias; d.bias_dtype = L->bias ? L->bias_t : QMM_F32;
    d.convrot_gs = L->gs; d.full_precision = L->fp;
    return qmm_weight_borrow_w4a8(g_ctx, &d, out);
}

static void describe(const w4layer *L, const char *what, char *buf, size_t n) {
    snprintf(buf, n, "%s %s [%lld, %lld] W%dA8 group %d convrot %d s_rel %s%s%s%s", what, L->name, (long long)L->N,
             (long long)L->K, L->bits, L->gsz, L->gs, k_srel_name[L->srel], L->has_cb ? " codebook" : "",
             L->bias ? " bias " : "", L->bias ? qmm_dtype_name(L->bias_t) : "");
}

static qmm_status run(const qmm_weight *w, int64_t M, const void *x, qmm_dtype xt, void *y, qmm_dtype yt, qmm_engine_id e) {
    qmm_linear_args a = qmm_linear_args_default();
    a.M = M; a.x = x; a.x_dtype = xt; a.y = y; a.y_dtype = yt; a.engine = e;
    return qmm_linear(g_ctx, w, &a);
}

/* The model's weight of layer L against a weight borrowed directly from L's arrays. */
static void check_model_layer(qmm_model *m, const w4layer *L, const char *how) {
    char what[400];
    describe(L, how, what, sizeof what);
    const qmm_layer_info *li = NULL;
    TU_CHECK_OK(qmm_model_find(m, L->name, &li));
    if (!li) return;
    TU_CHECK(li->kind == QMM_LAYER_W4A8 && li->code_bits == L->bits && li->group_size == L->gsz && li->N == L->N &&
                 li->K == L->K && li->convrot_gs == L->gs && (li->codebook != NULL) == L->has_cb &&
                 li->weight_scale == NULL && li->n_scale == L->N && li->full_precision == L->fp &&
                 !strcmp(li->format, "asym_w4a8_int8"),
             "%s: layer info kind %d bits %d group %d [%lld, %lld] convrot %d codebook %d", what, li->kind, li->code_bits,
             li->group_size, (long long)li->N, (long long)li->K, li->convrot_gs, li->codebook != NULL);
    TU_CHECK_OK(qmm_model_check_layer(m, L->name));
    const qmm_weight *w = NULL;
    qmm_weight *wd = NULL;
    TU_CHECK_OK(qmm_model_weight(m, g_ctx, L->name, &w));
    TU_CHECK_OK(w4_direct(L, &wd));
    if (!w || !wd) goto out;
    TU_CHECK(w->w4a8 && w->w4.codes == (const uint8_t *)li->weight->data,
             "%s: the weight borrows the codes from the file (codes %p, tensor data %p)", what, (const void *)w->w4.codes,
             li->weight->data);
    qmm_weight_info wi;
    qmm_weight_get_info(w, &wi);
    TU_CHECK(wi.code_bits == L->bits && wi.group_size == L->gsz && wi.has_codebook == L->has_cb &&
                 wi.packed_bytes >= (size_t)li->s_rel->nbytes + (size_t)li->s_channel->nbytes &&
                 wi.packed_bytes <= (size_t)li->s_rel->nbytes + (size_t)li->s_channel->nbytes + 16 * 4 +
                                        (li->bias ? (size_t)li->bias->nbytes : 0) + 5 * 64 &&
                 wi.has_bias == (L->bias != NULL) && wi.convrot_gs == L->gs && wi.full_precision == L->fp,
             "%s: weight info bits %d group %d codebook %d packed %zu bias %d", what, wi.code_bits, wi.group_size,
             wi.has_codebook, wi.packed_bytes, wi.has_bias);
    const size_t nk = (size_t)(L->N * L->K);
    int8_t *ra = malloc(nk), *rb = malloc(nk);
    TU_CHECK_OK(qmm_weight_int8_rows(w, 0, L->N, ra, 0));
    TU_CHECK_OK(qmm_weight_int8_rows(wd, 0, L->N, rb, 0));
    size_t bad = 0;
    while (bad < nk && ra[bad] == rb[bad]) bad++;
    TU_CHECK(bad == nk, "%s: decoded W[%lld][%lld] = %d, the direct weight %d", what, (long long)(bad / (size_t)L->K),
             (long long)(bad % (size_t)L->K), bad < nk ? ra[bad] : 0, bad < nk ? rb[bad] : 0);
    free(ra);
    free(rb);
    const int64_t M = tu_rand_int(0, 2) == 0 ? 1 : tu_rand_int(2, 40);
    const qmm_dtype xt = tu_rand_int(0, 1) ? QMM_F32 : QMM_BF16, yt = tu_rand_int(0, 1) ? QMM_F32 : QMM_BF16;
    void *x = malloc((size_t)(M * L->K) * 4), *yref = malloc((size_t)(M * L->N) * 4), *ym = malloc((size_t)(M * L->N) * 4),
         *yd = malloc((size_t)(M * L->N) * 4);
    tu_fill_float(x, xt, M * L->K, 1.0f);
    qmm_status st = run(wd, M, x, xt, yref, yt, QMM_ENGINE_REF);
    TU_CHECK(st == QMM_OK, "%s: reference on the direct weight: %s", what, qmm_last_error());
    TU_CHECK_OK(run(w, M, x, xt, ym, yt, QMM_ENGINE_REF));
    int64_t i = tu_first_diff(ym, yref, yt, M * L->N);
    TU_CHECK(i < 0, "%s M=%lld: reference differs from the direct weight at %lld", what, (long long)M, (long long)i);
    for (int k = 0; k < g_neng && st == QMM_OK; k++) {
        const qmm_engine_id e = g_eng[k];
        if (!g_avail[e]) continue;
        const qmm_status sm = run(w, M, x, xt, ym, yt, e), sd = run(wd, M, x, xt, yd, yt, e);
        TU_CHECK(sm == sd, "%s on %s: model %s, direct %s (%s)", what, qmm_engine_name(e), qmm_status_name(sm),
                 qmm_status_name(sd), qmm_last_error());
        if (sm != QMM_OK || sd != QMM_OK) continue;
        i = tu_first_diff(ym, yd, yt, M * L->N);
        TU_CHECK(i < 0, "%s M=%lld on %s: differs from the direct weight at %lld", what, (long long)M, qmm_engine_name(e),
                 (long long)i);
        if (qmm_engine_is_int8(e)) {
            i = tu_first_diff(ym, yref, yt, M * L->N);
            TU_CHECK(i < 0, "%s M=%lld on %s: differs from the reference at %lld", what, (long long)M,
                     qmm_engine_name(e), (long long)i);
        }
    }
    /* the plan names the W4A8 decoding */
    qmm_linear_args a = qmm_linear_args_default();
    a.M = M; a.x_dtype = xt; a.y_dtype = yt;
    qmm_plan_info p;
    TU_CHECK_OK(qmm_plan(g_ctx, w, &a, &p));
    char want[64], text[8192];
    snprintf(want, sizeof want, "W%dA8: %d-bit codes%s, group %d", L->bits, L->bits, L->has_cb ? " + codebook" : "",
             L->gsz);
    const char *where = p.is_fallback ? "fallback's n16k4 blocks" : "into the int8 engine's ";
    TU_CHECK(p.engine == QMM_ENGINE_AUTO || (strstr(p.weight, want) && strstr(p.weight, where)),
             "%s: plan weight '%s' (wants '%s' and '%s')", what, p.weight, want, where);
    qmm_plan_format(&p, text, sizeof text);
    TU_CHECK(p.engine == QMM_ENGINE_AUTO || strstr(text, "\nweight: W"), "%s: plan text has the weight line:\n%s", what,
             text);
    if (L->fp) TU_CHECK(p.is_fallback || p.engine == QMM_ENGINE_AUTO, "%s: full precision runs on a float engine", what);
    free(x); free(yref); free(ym); free(yd);
out:
    qmm_weight_destroy(wd);
}

static void *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    void *b = malloc(*n ? *n : 1);
    if (b && fread(b, 1, *n, f) != *n) { free(b); b = NULL; }
    fclose(f);
    return b;
}

/* Random layers in one file (a 3-byte tensor first puts every later one at an odd offset). */
static void test_layers(int quick) {
    enum { NL = 6 };
    w4layer L[NL];
    static const int g4[] = {4, 8, 16, 32, 64}, g6[] = {16, 32, 64};
    static const qmm_dtype bt[] = {QMM_I8, QMM_F32, QMM_BF16, QMM_F16};
    for (int round = 0; round < (quick ? 2 : 5); round++) {
        for (int i = 0; i < NL; i++) {
            const int bits = i % 3 == 2 ? 6 : 4;
            const int gsz = bits == 6 ? g6[tu_rand_int(0, 2)] : g4[tu_rand_int(0, 4)];
            const int gs = (int[]){16, 64, 256}[tu_rand_int(0, 2)];
            const int64_t unit = (gs > gsz ? gs : gsz) > 32 ? (gs > gsz ? gs : gsz) : 32;
            const int64_t K = unit * tu_rand_int(1, 512 / unit + 1);
            const int64_t N = tu_rand_int(0, 3) == 0 ? tu_rand_int(1, 17) : tu_rand_int(1, 90);
            char name[32];
            snprintf(name, sizeof name, "blocks.%d.lin%d", round, i);
            w4_random(&L[i], name, N, K, bits, gsz, gs, (int)tu_rand_int(0, 2), i == 0 || tu_rand_int(0, 1),
                      bt[tu_rand_int(0, 3)]);
            L[i].nested = i == 1;
            L[i].fp = i == 3;
            w4_set_cq(&L[i], L[i].fp ? ", \"full_precision_matrix_mult\": true" : i == 4 ? ", \"bits\": 4" : NULL);
        }
        /* layer 5 through __metadata__["_quantization_metadata"] instead of its comfy_quant */
        tu_tensor t[NL * 6 + 1];
        char names[NL * 6 + 1][96];
        const unsigned char pad[3] = {1, 2, 3};
        size_t n = 0;
        t[n++] = (tu_tensor){"pad", QMM_ST_U8, 1, {3}, pad};
        for (int i = 0; i < NL; i++) n += w4_tensors(&L[i], t + n, names + n, i != 5);
        char meta[512];
        snprintf(meta, sizeof meta, "{\"format_version\": \"1.0\", \"layers\": {\"%s\": %s}}", L[5].name, L[5].cq);
        const char *path = tmp_path("w4a8.safetensors");
        tu_write_ckpt(path, t, n, "_quantization_metadata", meta);
        qmm_model *m = NULL;
        TU_CHECK_OK(qmm_model_open(path, NULL, &m));
        if (m) {
            TU_CHECK(qmm_model_layer_count(m) == NL, "%zu layers (want %d)", qmm_model_layer_count(m), NL);
            for (int i = 0; i < NL; i++) check_model_layer(m, &L[i], "file");
            const qmm_layer_info *l5 = NULL;
            TU_CHECK(qmm_model_find(m, L[5].name, &l5) == QMM_OK && l5 && !strcmp(l5->source, "_quantization_metadata"),
                     "layer 5 read from _quantization_metadata");
            TU_CHECK_OK(qmm_model_load_all(m, g_ctx));
        }
        qmm_model_close(m);
        size_t sz = 0;
        void *bytes = read_file(path, &sz);
        m = NULL;
        TU_CHECK_OK(qmm_model_open_memory(bytes, sz, NULL, &m));
        for (int i = 0; m && i < NL; i++) check_model_layer(m, &L[i], "memory");
        /* a weight of qmm_model_create_weight is the caller's and owns its scales */
        qmm_weight *own = NULL;
        if (m) TU_CHECK_OK(qmm_model_create_weight(m, g_ctx, L[0].name, &own));
        qmm_weight_destroy(own);
        qmm_model_close(m);
        free(bytes);
        for (int i = 0; i < NL; i++) w4_free(&L[i]);
    }
}

/* A file that must not open: status want, the message containing needle. */
static void expect_open_fail(const char *what, const tu_tensor *t, size_t n, qmm_status want, const char *needle) {
    const char *path = tmp_path("bad.safetensors");
    tu_write_ckpt(path, t, n, NULL, NULL);
    qmm_model *m = NULL;
    qmm_status st = qmm_model_open(path, NULL, &m);
    TU_CHECK(st == want && !m && strstr(qmm_last_error(), needle), "%s: %s (want %s with '%s'): %s", what,
             qmm_status_name(st), qmm_status_name(want), needle, qmm_last_error());
    qmm_model_close(m);
    qmm_model_options o = qmm_model_options_default();
    o.allow_unsupported = 1;
    st = qmm_model_open(path, &o, &m);
    TU_CHECK(st == want && !m, "%s with allow_unsupported: %s (W4A8 is a supported format: no listing)", what,
             qmm_status_name(st));
    qmm_model_close(m);
}

/* A file that opens but whose layer refuses to pack: FORMAT, naming needle. */
static void expect_value_fail(const char *what, const tu_tensor *t, size_t n, const char *layer, const char *needle) {
    const char *path = tmp_path("badval.safetensors");
    tu_write_ckpt(path, t, n, NULL, NULL);
    qmm_model *m = NULL;
    TU_CHECK_OK(qmm_model_open(path, NULL, &m));
    if (!m) return;
    qmm_status st = qmm_model_check_layer(m, layer);
    TU_CHECK(st == QMM_ERR_FORMAT && strstr(qmm_last_error(), needle), "%s: check_layer %s (want FORMAT with '%s'): %s",
             what, qmm_status_name(st), needle, qmm_last_error());
    const qmm_weight *w = NULL;
    st = qmm_model_weight(m, g_ctx, layer, &w);
    TU_CHECK(st == QMM_ERR_FORMAT && !w && strstr(qmm_last_error(), needle), "%s: model_weight %s: %s", what,
             qmm_status_name(st), qmm_last_error());
    qmm_model_close(m);
}

static void test_bad_files(void) {
    w4layer L;
    w4_random(&L, "a", 8, 64, 4, 16, 16, SREL_F8, 1, QMM_F32);
    tu_tensor t[8];
    char names[8][96];
    size_t n = w4_tensors(&L, t, names, 1);   /* weight, s_rel, s_channel, codebook, bias, comfy_quant */
    tu_tensor b[8];
#define RESET() memcpy(b, t, sizeof t)
    /* the codes' width: neither K/2 nor 3K/4 */
    RESET(); b[0].shape[1] = 24;
    expect_open_fail("codes width 24 for K 64", b, n, QMM_ERR_FORMAT, "a.weight rows are 24 bytes");
    RESET(); b[0].dtype = QMM_ST_F16; b[0].shape[1] = 16;
    expect_open_fail("codes F16", b, n, QMM_ERR_FORMAT, "a.weight is F16");
    RESET(); b[0].ndim = 1; b[0].shape[0] = 8 * 32;
    expect_open_fail("codes 1-D", b, n, QMM_ERR_FORMAT, "a.weight is I8 [256]");
    /* s_rel */
    RESET(); b[1].dtype = QMM_ST_F16; b[1].shape[1] = 2;
    expect_open_fail("s_rel F16", b, n, QMM_ERR_FORMAT, "a.weight_s_rel is F16");
    RESET(); b[1].shape[0] = 4; b[1].shape[1] = 8;
    expect_open_fail("s_rel rows", b, n, QMM_ERR_FORMAT, "a.weight_s_rel is F8_E4M3 [4, 8]");
    RESET(); b[1].shape[1] = 2;
    expect_open_fail("s_rel columns (K 32 against codes of K 64)", b, n, QMM_ERR_FORMAT, "a.weight rows are 32 bytes, but K = 32");
    /* s_channel */
    RESET(); b[2].shape[0] = 7;
    expect_open_fail("s_channel [7]", b, n, QMM_ERR_FORMAT, "a.weight_s_channel is F32 [7]");
    RESET(); b[2].dtype = QMM_ST_BF16; b[2].shape[0] = 16;
    expect_open_fail("s_channel BF16", b, n, QMM_ERR_FORMAT, "a.weight_s_channel is BF16");
    /* codebook */
    RESET(); b[3].shape[0] = 8;
    expect_open_fail("codebook [8]", b, n, QMM_ERR_FORMAT, "a.weight_codebook is F32 [8]");
    RESET(); b[3].dtype = QMM_ST_I8; b[3].shape[0] = 64;
    expect_open_fail("codebook I8", b, n, QMM_ERR_FORMAT, "a.weight_codebook is I8");
    /* bias */
    RESET(); b[4].shape[0] = 4;
    expect_open_fail("bias [4]", b, n, QMM_ERR_FORMAT, "a.bias is F32 [4]");
    /* missing tensors */
    expect_open_fail("no s_rel", (tu_tensor[]){t[0], t[2], t[3], t[4], t[5]}, 5, QMM_ERR_FORMAT,
                     "a.weight_s_rel (the group scales) is missing");
    expect_open_fail("no s_channel", (tu_tensor[]){t[0], t[1], t[3], t[4], t[5]}, 5, QMM_ERR_FORMAT,
                     "a.weight_s_channel (the row scales) is missing");
    expect_open_fail("no weight", (tu_tensor[]){t[1], t[2], t[3], t[4], t[5]}, 5, QMM_ERR_FORMAT, "a.weight is missing");
    /* a correction: the asymmetric layout */
    float corr[4 * 8] = {0};
    RESET();
    b[n] = (tu_tensor){"a.weight_correction", QMM_ST_F32, 2, {4, 8}, corr};
    expect_open_fail("correction", b, n + 1, QMM_ERR_UNSUPPORTED, "a.weight_correction: asymmetric W4A8");
    /* comfy_quant keys */
    static const struct { const char *json; qmm_status st; const char *needle; } cq[] = {
        {"{\"format\": \"asym_w4a8_int8\", \"group_size\": 12, \"convrot_groupsize\": 16}", QMM_ERR_FORMAT, "\"group_size\" 12"},
        {"{\"format\": \"asym_w4a8_int8\", \"group_size\": 2, \"convrot_groupsize\": 16}", QMM_ERR_FORMAT, "\"group_size\" 2"},
        {"{\"format\": \"asym_w4a8_int8\", \"group_size\": 4611686018427387904}", QMM_ERR_FORMAT, "\"group_size\" 4611686018427387904"},
        {"{\"format\": \"asym_w4a8_int8\", \"group_size\": -16}", QMM_ERR_FORMAT, "\"group_size\" -16"},
        {"{\"format\": \"asym_w4a8_int8\", \"group_size\": \"16\"}", QMM_ERR_FORMAT, "\"group_size\" is not an integer"},
        {"{\"format\": \"asym_w4a8_int8\", \"group_size\": 16.0}", QMM_ERR_FORMAT, "\"group_size\" is not an integer"},
        {"{\"format\": \"asym_w4a8_int8\", \"group_size\": 16, \"convrot_groupsize\": 32}", QMM_ERR_UNSUPPORTED,
         "convrot group size 32"},
        {"{\"format\": \"asym_w4a8_int8\", \"group_size\": 16}", QMM_ERR_FORMAT, "K=64 is not a multiple of the convrot group 256"},
        {"{\"format\": \"asym_w4a8_int8\", \"group_size\": 16, \"convrot_groupsize\": 16, \"bits\": 5}", QMM_ERR_FORMAT,
         "\"bits\" is 5"},
        {"{\"format\": \"asym_w4a8_int8\", \"group_size\": 16, \"convrot_groupsize\": 16, \"bits\": 6}", QMM_ERR_FORMAT,
         "are 4-bit codes"},
        {"{\"format\": \"asym_w4a8_int8\", \"group_size\": 16, \"convrot_groupsize\": 16, \"convrot\": false}",
         QMM_ERR_FORMAT, "always runs with ConvRot"},
        {"{\"format\": \"asym_w4a8_int8\", \"group_size\": 16, \"convrot_groupsize\": 16, \"full_precision_matrix_mult\": 2}",
         QMM_ERR_FORMAT, "\"full_precision_matrix_mult\" is not a boolean"},
    };
    for (size_t i = 0; i < sizeof cq / sizeof cq[0]; i++) {
        RESET();
        b[5].data = cq[i].json;
        b[5].shape[0] = (int64_t)strlen(cq[i].json);
        expect_open_fail(cq[i].json, b, n, cq[i].st, cq[i].needle);
    }
    /* group 32 with codes of K 64 but s_rel of 4 columns: K = 128, the width does not match */
    RESET();
    const char *g32 = "{\"format\": \"asym_w4a8_int8\", \"group_size\": 32, \"convrot_groupsize\": 16}";
    b[5].data = g32; b[5].shape[0] = (int64_t)strlen(g32);
    expect_open_fail("group 32 against s_rel of K/16 columns", b, n, QMM_ERR_FORMAT, "K = 128");
    w4_free(&L);

    /* 6 bits: a codebook, and K % 32 != 0 */
    w4layer L6;
    w4_random(&L6, "a", 4, 64, 6, 16, 16, SREL_F8, 0, QMM_I8);
    n = w4_tensors(&L6, t, names, 1);   /* weight, s_rel, s_channel, comfy_quant */
    float cb[16] = {0};
    expect_open_fail("6 bits with a codebook",
                     (tu_tensor[]){t[0], t[1], t[2], {"a.weight_codebook", QMM_ST_F32, 1, {16}, cb}, t[3]}, 5,
                     QMM_ERR_FORMAT, "a.weight_codebook with 6-bit codes");
    w4_free(&L6);
    w4_random(&L6, "a", 4, 48, 6, 16, 16, SREL_F8, 0, QMM_I8);
    n = w4_tensors(&L6, t, names, 1);
    expect_open_fail("6 bits, K 48", t, n, QMM_ERR_FORMAT, "6-bit storage needs K % 32 == 0");
    w4_free(&L6);
    w4_random(&L6, "a", 4, 64, 6, 8, 16, SREL_F8, 0, QMM_I8);
    n = w4_tensors(&L6, t, names, 1);
    expect_open_fail("6 bits, group 8", t, n, QMM_ERR_FORMAT, "group_size a multiple of 16");
    w4_free(&L6);

    /* values: the file opens, the layer refuses to pack */
    w4_random(&L, "v", 8, 64, 4, 16, 16, SREL_F8, 1, QMM_F32);
    n = w4_tensors(&L, t, names, 1);
    ((uint8_t *)L.s_rel)[2 * 4 + 3] = 0x7f;
    expect_value_fail("s_rel NaN", t, n, "v", "v.weight_s_rel of row 2, group 3 is NaN");
    ((uint8_t *)L.s_rel)[2 * 4 + 3] = 0xff;
    expect_value_fail("s_rel -NaN", t, n, "v", "v.weight_s_rel of row 2, group 3 is NaN");
    ((uint8_t *)L.s_rel)[2 * 4 + 3] = 0x40;
    const float bad_sc[] = {0.0f, -0.5f, NAN, INFINITY, 1e-40f};
    const char *bad_why[] = {"is zero", "is negative", "is NaN", "is +Inf", "is denormal"};
    for (int i = 0; i < 5; i++) {
        const float keep = L.s_channel[5];
        L.s_channel[5] = bad_sc[i];
        char needle[96];
        snprintf(needle, sizeof needle, "v.weight_s_channel of row 5 %s", bad_why[i]);
        expect_value_fail(needle, t, n, "v", needle);
        L.s_channel[5] = keep;
    }
    L.cb[9] = NAN;
    expect_value_fail("codebook NaN", t, n, "v", "v.weight_codebook[9] is NaN");
    L.cb[9] = 0.25f;
    ((float *)L.bias)[6] = INFINITY;
    expect_value_fail("bias Inf", t, n, "v", "bias of row 6 is +Inf");
    ((float *)L.bias)[6] = 0.0f;
    w4_free(&L);
    w4_random(&L, "f", 4, 64, 4, 16, 16, SREL_F32, 0, QMM_I8);
    n = w4_tensors(&L, t, names, 1);
    ((float *)L.s_rel)[1 * 4 + 2] = -INFINITY;
    expect_value_fail("s_rel F32 -Inf", t, n, "f", "f.weight_s_rel of row 1, group 2 is -Inf");
    w4_free(&L);
#undef RESET
}

/* A file truncated after the open: packing the layer is QMM_ERR_IO (qmm_st_read), never SIGBUS. */
static void test_truncated(void) {
    w4layer L;
    w4_random(&L, "t", 64, 1024, 4, 16, 256, SREL_F8, 1, QMM_I8);
    tu_tensor t[6];
    char names[6][96];
    size_t n = w4_tensors(&L, t, names, 1);
    tu_tensor order[6] = {t[1], t[2], t[3], t[4], t[0]};   /* the codes last in the file */
    (void)n;
    const char *path = tmp_path("trunc.safetensors");
    tu_write_ckpt(path, order, 5, NULL, NULL);
    qmm_model *m = NULL;
    TU_CHECK_OK(qmm_model_open(path, NULL, &m));
    if (m) {
        const qmm_st_file *f = qmm_model_file(m);
        const size_t keep = qmm_st_file_size(f) - codes_bytes(&L) / 2;
        TU_CHECK(truncate(path, (off_t)keep) == 0, "truncate");
        qmm_weight *w = NULL;
        qmm_status st = qmm_model_create_weight(m, g_ctx, "t", &w);
        TU_CHECK(st == QMM_ERR_IO && !w, "a W4A8 layer of a file truncated since the open: %s (want QMM_ERR_IO): %s",
                 qmm_status_name(st), qmm_last_error());
        qmm_weight_destroy(w);
    }
    qmm_model_close(m);
    w4_free(&L);
}

/* The model opened from bytes that end, with the codes, at a PROT_NONE page: every engine. */
static void test_guarded(int64_t M, int64_t N, int64_t K, int bits, int gsz) {
    w4layer L;
    w4_random(&L, "g", N, K, bits, gsz, 16, bits == 6 ? SREL_U8 : SREL_F8, bits == 4, QMM_BF16);
    tu_tensor t[6];
    char names[6][96];
    const size_t nt = w4_tensors(&L, t, names, 1);
    tu_tensor order[6];
    size_t n = 0;
    for (size_t i = 1; i < nt; i++) order[n++] = t[i];
    order[n++] = t[0];   /* the codes last */
    const char *path = tmp_path("guard.safetensors");
    tu_write_ckpt(path, order, n, NULL, NULL);
    size_t sz = 0;
    void *bytes = read_file(path, &sz);
    const size_t pg = (size_t)sysconf(_SC_PAGESIZE), body = (sz + pg - 1) / pg * pg;
    char *map = mmap(NULL, body + pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (!bytes || map == MAP_FAILED) { TU_CHECK(0, "guarded: read or mmap failed"); free(bytes); return; }
    mprotect(map + body, pg, PROT_NONE);
    char *at = map + body - sz;
    memcpy(at, bytes, sz);
    qmm_model *m = NULL;
    TU_CHECK_OK(qmm_model_open_memory(at, sz, NULL, &m));
    const qmm_weight *w = NULL;
    if (m) TU_CHECK_OK(qmm_model_weight(m, g_ctx, "g", &w));
    if (w) {
        char what[400];
        describe(&L, "guarded", what, sizeof what);
        TU_CHECK(w->w4.codes + codes_bytes(&L) == (const uint8_t *)(map + body), "%s: the codes end at the guard page",
                 what);
        uint16_t *x = malloc((size_t)(M * K) * 2), *y = malloc((size_t)(M * N) * 2), *yr = malloc((size_t)(M * N) * 2);
        tu_fill_float(x, QMM_BF16, M * K, 1.0f);
        TU_CHECK_OK(run(w, M, x, QMM_BF16, yr, QMM_BF16, QMM_ENGINE_REF));
        for (int k = 0; k < g_neng; k++) {
            const qmm_engine_id e = g_eng[k];
            if (!g_avail[e]) continue;
            qmm_status st = run(w, M, x, QMM_BF16, y, QMM_BF16, e);
            TU_CHECK(st == QMM_OK, "%s M=%lld on %s: %s", what, (long long)M, qmm_engine_name(e), qmm_last_error());
            if (st == QMM_OK && qmm_engine_is_int8(e))
                TU_CHECK(tu_first_diff(y, yr, QMM_BF16, M * N) < 0, "%s M=%lld on %s: differs from the reference", what,
                         (long long)M, qmm_engine_name(e));
        }
        free(x); free(y); free(yr);
    }
    qmm_model_close(m);
    munmap(map, body + pg);
    free(bytes);
    w4_free(&L);
}

int main(int argc, char **argv) {
    tu_init(argc, argv, "test_checkpoint_w4a8");
    const int quick = getenv("QMM_TEST_QUICK") != NULL;
    snprintf(g_dir, sizeof g_dir, "/tmp/qmm_test_ckw4_XXXXXX");
    if (!mkdtemp(g_dir)) return 1;
    TU_CHECK_OK(qmm_context_create(NULL, &g_ctx));
    if (!g_ctx) return tu_finish();
    g_neng = tu_engines_avail(TU_ENGINES_ALL, g_eng, g_avail);
    test_layers(quick);
    test_bad_files();
    test_truncated();
    test_guarded(1, 37, 160, 4, 16);
    test_guarded(5, 16, 96, 6, 32);
    test_guarded(40, 33, 256, 4, 4);
    qmm_context_destroy(g_ctx);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd) != 0) printf("# could not remove %s\n", g_dir);
    return tu_finish();
}
