/*
 * test_checkpoint.c — the ComfyUI INT8 convention (qmm_model_*) on files written here:
 *   - every accepted weight_scale shape ([N,1], [N], [1], []) loads, also unaligned in the file,
 *     and the model's weight gives the same bits through the reference engine as a weight
 *     created directly from the same arrays (bias F16, convrot from nested "params", default
 *     group 256, full_precision_matrix_mult, the _quantization_metadata alternative);
 *   - float layers (F32/BF16/F16 .weight) load as float weights and match qmm_weight_create_float;
 *   - each malformed class (missing weight_scale / weight, misshaped scale, comfy_quant that is
 *     not JSON or not an object, wrong weight dtype, K % g != 0, unknown group, bad
 *     _quantization_metadata) returns QMM_ERR_FORMAT, an unsupported format QMM_ERR_UNSUPPORTED
 *     naming layer and format — and no model; with allow_unsupported the layer is listed and
 *     refuses to load.
 */
#define _POSIX_C_SOURCE 200809L
#include "qmm_io.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char g_dir[256];
static qmm_context *g_ctx;

static const char *tmp_path(const char *name) {
    static char buf[512];
    snprintf(buf, sizeof buf, "%s/%s", g_dir, name);
    return buf;
}


/* y of both weights through the reference engine, compared bit for bit */
static void same_output(const qmm_weight *a, const qmm_weight *b, int64_t K_in, const char *what) {
    const int64_t M = 3;
    qmm_weight_info ia;
    qmm_weight_get_info(a, &ia);
    float *x = malloc((size_t)(M * K_in) * 4), *ya = malloc((size_t)(M * ia.N) * 4), *yb = malloc((size_t)(M * ia.N) * 4);
    tu_fill_float(x, QMM_F32, M * K_in, 1.0f);
    qmm_linear_args args = qmm_linear_args_default();
    args.M = M;
    args.x = x;
    args.x_dtype = QMM_F32;
    args.y_dtype = QMM_F32;
    args.engine = QMM_ENGINE_REF;
    args.y = ya;
    TU_CHECK_OK(qmm_linear(g_ctx, a, &args));
    args.y = yb;
    TU_CHECK_OK(qmm_linear(g_ctx, b, &args));
    int64_t bad = -1;
    for (int64_t i = 0; i < M * ia.N && bad < 0; i++)
        if (memcmp(&ya[i], &yb[i], 4)) bad = i;
    TU_CHECK(bad < 0, "%s: model weight output differs from the direct weight: M=%lld N=%lld K=%lld engine ref, first bad %lld",
             what, (long long)M, (long long)ia.N, (long long)ia.K, (long long)bad);
    free(x);
    free(ya);
    free(yb);
}

static void test_scale_shapes(void) {
    const int64_t N = 48, K = 256;
    int8_t *wq = malloc((size_t)(N * K));
    float sc[48];
    uint16_t bias[48];
    tu_fill_i8(wq, N * K, -127, 127);
    for (int i = 0; i < N; i++) sc[i] = 0.001f + 0.0001f * (float)tu_rand_int(0, 100);
    tu_fill_float(bias, QMM_F16, N, 0.5f);
    const char *jsons[] = {
        "{\"format\": \"int8_tensorwise\", \"convrot\": true, \"convrot_groupsize\": 64}",
        "{\"format\": \"int8_tensorwise\", \"params\": {\"convrot\": true, \"convrot_groupsize\": 64}}",
        "{\"format\": \"int8_tensorwise\", \"convrot\": true}",
        "{\"format\": \"int8_tensorwise\", \"full_precision_matrix_mult\": true}",
    };
    const int gs_of[] = {64, 64, 256, 0};
    const struct { int ndim; int64_t s0, s1; } shapes[] = {{2, 48, 1}, {1, 48, 0}, {1, 1, 0}, {0, 0, 0}};
    unsigned char pad[3] = {1, 2, 3};
    for (int si = 0; si < 4; si++)
        for (int ji = 0; ji < 4; ji++)
            for (int misalign = 0; misalign < 2; misalign++) {
                tu_tensor t[6];
                int n = 0;
                if (misalign) t[n++] = (tu_tensor){"aaa.pad", QMM_ST_U8, 1, {3}, pad};
                t[n++] = (tu_tensor){"blk.0.fc.weight", QMM_ST_I8, 2, {N, K}, wq};
                t[n++] = (tu_tensor){"blk.0.fc.weight_scale", QMM_ST_F32, shapes[si].ndim, {shapes[si].s0, shapes[si].s1}, sc};
                t[n++] = (tu_tensor){"blk.0.fc.bias", QMM_ST_F16, 1, {N}, bias};
                t[n++] = (tu_tensor){"blk.0.fc.comfy_quant", QMM_ST_U8, 1, {(int64_t)strlen(jsons[ji])}, jsons[ji]};
                const char *p = tmp_path("scales.safetensors");
                tu_write_ckpt(p, t, n, NULL, NULL);
                qmm_model *m = NULL;
                TU_CHECK_OK(qmm_model_open(p, NULL, &m));
                if (!m) continue;
                const qmm_layer_info *l;
                TU_CHECK_OK(qmm_model_find(m, "blk.0.fc", &l));
                int64_t ns = shapes[si].ndim == 0 || shapes[si].s0 == 1 ? 1 : N;
                TU_CHECK(l && l->kind == QMM_LAYER_INT8 && l->N == N && l->K == K && l->n_scale == ns &&
                             l->convrot_gs == gs_of[ji] && l->full_precision == (ji == 3) && l->bias,
                         "layer info (scale shape %d, json %d): kind %d N %lld K %lld n_scale %lld gs %d fp %d", si, ji,
                         l ? (int)l->kind : -1, l ? (long long)l->N : 0, l ? (long long)l->K : 0,
                         l ? (long long)l->n_scale : 0, l ? l->convrot_gs : -1, l ? l->full_precision : -1);
                const qmm_weight *w;
                TU_CHECK_OK(qmm_model_weight(m, g_ctx, "blk.0.fc", &w));
                qmm_weight_desc d = qmm_weight_desc_default();
                d.name = "direct";
                d.N = N;
                d.K = K;
                d.data = wq;
                d.scale = sc;
                d.n_scale = ns;
                d.bias = bias;
                d.bias_dtype = QMM_F16;
                d.convrot_gs = gs_of[ji];
                d.full_precision = ji == 3;
                qmm_weight *direct;
                TU_CHECK_OK(qmm_weight_create_int8(g_ctx, &d, &direct));
                if (w && direct) same_output(w, direct, K, "scale shapes");
                qmm_weight_info wi;
                qmm_weight_get_info(w, &wi);
                TU_CHECK(wi.is_int8 && wi.convrot_gs == gs_of[ji] && wi.per_tensor_scale == (ns == 1) && wi.has_bias &&
                             wi.full_precision == (ji == 3),
                         "weight info matches the file");
                const qmm_weight *w2;
                TU_CHECK_OK(qmm_model_weight(m, g_ctx, "blk.0.fc", &w2));
                TU_CHECK(w2 == w, "packed once (cached)");
                qmm_weight_destroy(direct);
                qmm_model_close(m);
            }
    free(wq);
}

static void test_quant_metadata_and_float(void) {
    const int64_t N = 32, K = 128;
    int8_t *wq = malloc((size_t)(N * K));
    float sc[32], *wf = malloc((size_t)(N * K) * 4), bf[32];
    uint16_t *wb = malloc((size_t)(N * K) * 2), *wh = malloc((size_t)(N * K) * 2);
    tu_fill_i8(wq, N * K, -127, 127);
    for (int i = 0; i < N; i++) sc[i] = 0.002f;
    tu_fill_float(wf, QMM_F32, N * K, 0.1f);
    tu_fill_float(wb, QMM_BF16, N * K, 0.1f);
    tu_fill_float(wh, QMM_F16, N * K, 0.1f);
    tu_fill_float(bf, QMM_F32, N, 0.1f);
    tu_tensor t[] = {
        {"q.weight", QMM_ST_I8, 2, {N, K}, wq},
        {"q.weight_scale", QMM_ST_F32, 1, {N}, sc},
        {"f32.weight", QMM_ST_F32, 2, {N, K}, wf},
        {"f32.bias", QMM_ST_F32, 1, {N}, bf},
        {"b16.weight", QMM_ST_BF16, 2, {N, K}, wb},
        {"h16.weight", QMM_ST_F16, 2, {N, K}, wh},
        {"norm.weight", QMM_ST_F32, 1, {N}, bf},
    };
    const char *meta = "{\"format_version\": \"1.0\", \"layers\": {\"q\": {\"format\": \"int8_tensorwise\", \"convrot\": true, "
                       "\"convrot_groupsize\": 16}}}";
    const char *p = tmp_path("qmeta.safetensors");
    tu_write_ckpt(p, t, 7, "_quantization_metadata", meta);
    qmm_model *m = NULL;
    TU_CHECK_OK(qmm_model_open(p, NULL, &m));
    if (!m) return;
    TU_CHECK(qmm_model_layer_count(m) == 4, "4 layers (q, f32, b16, h16), got %zu", qmm_model_layer_count(m));
    const qmm_layer_info *l;
    TU_CHECK_OK(qmm_model_find(m, "q", &l));
    TU_CHECK(l && l->kind == QMM_LAYER_INT8 && l->convrot_gs == 16 && l->source && !strcmp(l->source, "_quantization_metadata"),
             "_quantization_metadata layer");
    TU_CHECK(qmm_model_find(m, "norm", &l) == QMM_ERR_NOT_FOUND, "1-D norm weight is not a layer");
    const char *fl[] = {"f32", "b16", "h16"};
    const void *fd[] = {wf, wb, wh};
    const qmm_dtype fdt[] = {QMM_F32, QMM_BF16, QMM_F16};
    for (int i = 0; i < 3; i++) {
        const qmm_weight *w;
        TU_CHECK_OK(qmm_model_weight(m, g_ctx, fl[i], &w));
        qmm_weight *d;
        TU_CHECK_OK(qmm_weight_create_float(g_ctx, "direct", fd[i], fdt[i], N, K, K, i == 0 ? bf : NULL, QMM_F32, &d));
        if (w && d) same_output(w, d, K, fl[i]);
        qmm_weight_destroy(d);
    }
    TU_CHECK_OK(qmm_model_load_all(m, g_ctx));
    qmm_model_close(m);
    free(wq);
    free(wf);
    free(wb);
    free(wh);
}

typedef struct bad {
    const char *what;
    qmm_status want;
    const char *json;          /* comfy_quant text (NULL: no comfy_quant tensor) */
    qmm_st_dtype wdtype;
    int scale_kind;            /* 0 [N,1], 1 missing, 2 [N,2], 3 F16 [N] */
    int no_weight;
    const char *meta;          /* _quantization_metadata */
    int64_t K;
} bad;

static void test_malformed(void) {
    const char *ok = "{\"format\": \"int8_tensorwise\"}";
    const bad cases[] = {
        {"missing weight_scale", QMM_ERR_FORMAT, ok, QMM_ST_I8, 1, 0, NULL, 64},
        {"weight_scale [N,2]", QMM_ERR_FORMAT, ok, QMM_ST_I8, 2, 0, NULL, 64},
        {"weight_scale F16", QMM_ERR_FORMAT, ok, QMM_ST_I8, 3, 0, NULL, 64},
        {"missing weight", QMM_ERR_FORMAT, ok, QMM_ST_I8, 0, 1, NULL, 64},
        {"weight not I8", QMM_ERR_FORMAT, ok, QMM_ST_F16, 0, 0, NULL, 64},
        {"comfy_quant not JSON", QMM_ERR_FORMAT, "{\"format\": int8", QMM_ST_I8, 0, 0, NULL, 64},
        {"comfy_quant binary", QMM_ERR_FORMAT, "\xff\xfe\x01", QMM_ST_I8, 0, 0, NULL, 64},
        {"comfy_quant not an object", QMM_ERR_FORMAT, "[\"int8_tensorwise\"]", QMM_ST_I8, 0, 0, NULL, 64},
        {"comfy_quant without format", QMM_ERR_FORMAT, "{\"convrot\": true}", QMM_ST_I8, 0, 0, NULL, 64},
        {"convrot not bool", QMM_ERR_FORMAT, "{\"format\": \"int8_tensorwise\", \"convrot\": \"yes\"}", QMM_ST_I8, 0, 0, NULL, 64},
        {"K % g != 0", QMM_ERR_FORMAT, "{\"format\": \"int8_tensorwise\", \"convrot\": true}", QMM_ST_I8, 0, 0, NULL, 64},
        {"group 32", QMM_ERR_UNSUPPORTED, "{\"format\": \"int8_tensorwise\", \"convrot\": true, \"convrot_groupsize\": 32}",
         QMM_ST_I8, 0, 0, NULL, 64},
        {"unsupported format nvfp4", QMM_ERR_UNSUPPORTED, "{\"format\": \"nvfp4\"}", QMM_ST_U8, 1, 0, NULL, 64},
        {"unsupported format float8", QMM_ERR_UNSUPPORTED, "{\"format\": \"float8_e4m3fn\"}", QMM_ST_F8_E4M3, 0, 0, NULL, 64},
        {"metadata not JSON", QMM_ERR_FORMAT, NULL, QMM_ST_I8, 0, 0, "{layers", 64},
        {"metadata without layers", QMM_ERR_FORMAT, NULL, QMM_ST_I8, 0, 0, "{\"format_version\": \"1.0\"}", 64},
        {"metadata unsupported format", QMM_ERR_UNSUPPORTED, NULL, QMM_ST_I8, 0, 0,
         "{\"layers\": {\"blocks.0.attn.qkv_proj\": {\"format\": \"mxfp8\"}}}", 64},
    };
    const int64_t N = 16;
    int8_t wq[16 * 64] = {0};
    float sc[32] = {0};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const bad *b = &cases[c];
        tu_tensor t[4];
        int n = 0;
        if (!b->no_weight) t[n++] = (tu_tensor){"blocks.0.attn.qkv_proj.weight", b->wdtype, 2, {N, b->K}, wq};
        if (b->scale_kind == 0) t[n++] = (tu_tensor){"blocks.0.attn.qkv_proj.weight_scale", QMM_ST_F32, 2, {N, 1}, sc};
        if (b->scale_kind == 2) t[n++] = (tu_tensor){"blocks.0.attn.qkv_proj.weight_scale", QMM_ST_F32, 2, {N, 2}, sc};
        if (b->scale_kind == 3) t[n++] = (tu_tensor){"blocks.0.attn.qkv_proj.weight_scale", QMM_ST_F16, 1, {N}, sc};
        if (b->json)
            t[n++] = (tu_tensor){"blocks.0.attn.qkv_proj.comfy_quant", QMM_ST_U8, 1, {(int64_t)strlen(b->json)}, b->json};
        if (b->wdtype == QMM_ST_F16 || b->wdtype == QMM_ST_F8_E4M3 || b->wdtype == QMM_ST_U8) {
            /* sizes: F16 needs 2 bytes per element; wq is large enough for 16 x 64 x 1, use K/2 */
            t[0].shape[1] = qmm_st_dtype_bits(b->wdtype) == 16 ? b->K / 2 : b->K;
        }
        const char *p = tmp_path("bad.safetensors");
        tu_write_ckpt(p, t, n, b->meta ? "_quantization_metadata" : NULL, b->meta);
        qmm_model *m = (qmm_model *)1;
        qmm_status st = qmm_model_open(p, NULL, &m);
        TU_CHECK(st == b->want && m == NULL, "%s: got %s (want %s): %s", b->what, qmm_status_name(st),
                 qmm_status_name(b->want), qmm_last_error());
        if (b->json || b->want == QMM_ERR_UNSUPPORTED)
            TU_CHECK(strstr(qmm_last_error(), "blocks.0.attn.qkv_proj") != NULL, "%s: message names the layer: %s", b->what,
                 qmm_last_error());
        if (b->want == QMM_ERR_UNSUPPORTED && strstr(b->what, "format")) {
            const char *fmt = strstr(b->what, "nvfp4") ? "nvfp4" : strstr(b->what, "float8") ? "float8_e4m3fn" : "mxfp8";
            char want[200];
            snprintf(want, sizeof want, "layer blocks.0.attn.qkv_proj: format %s is not supported", fmt);
            TU_CHECK(strstr(qmm_last_error(), want) != NULL, "%s: message '%s'", b->what, qmm_last_error());
            qmm_model_options o = qmm_model_options_default();
            o.allow_unsupported = 1;
            TU_CHECK_OK(qmm_model_open(p, &o, &m));
            const qmm_layer_info *l = NULL;
            if (m) TU_CHECK_OK(qmm_model_find(m, "blocks.0.attn.qkv_proj", &l));
            TU_CHECK(l && l->kind == QMM_LAYER_UNSUPPORTED && !strcmp(l->format, fmt), "%s: listed as unsupported", b->what);
            const qmm_weight *w = (const qmm_weight *)1;
            if (m) TU_CHECK(qmm_model_weight(m, g_ctx, "blocks.0.attn.qkv_proj", &w) == QMM_ERR_UNSUPPORTED && !w,
                            "%s: refuses to load", b->what);
            if (m) TU_CHECK(qmm_model_load_all(m, g_ctx) == QMM_OK, "%s: load_all skips unsupported layers", b->what);
            qmm_model_close(m);
        }
    }
    qmm_model *m;
    TU_CHECK(qmm_model_open(tmp_path("none.safetensors"), NULL, &m) == QMM_ERR_IO, "missing file -> IO");
}

int main(int argc, char **argv) {
    tu_init(argc, argv, "test_checkpoint");
    snprintf(g_dir, sizeof g_dir, "/tmp/qmm_test_ckpt_XXXXXX");
    if (!mkdtemp(g_dir)) return 1;
    qmm_context_options o = qmm_context_options_default();
    o.n_threads = 2;
    TU_CHECK_OK(qmm_context_create(&o, &g_ctx));
    test_scale_shapes();
    test_quant_metadata_and_float();
    test_malformed();
    qmm_context_destroy(g_ctx);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd) != 0) printf("# could not remove %s\n", g_dir);
    return tu_finish();
}
