/*
 * test_checkpoint_hardening.c — checkpoints built to break the reader:
 *   - corpus: the committed fuzz/corpus/checkpoint files: bad_* refused, the others open;
 *   - long_names: layer names of 1 100 to 60 000 bytes open, are found, keep their bias, pack,
 *     and `quantize` quantizes them;
 *   - float_bias_length: a float layer whose L.bias is not F32/F16/BF16 [N] fails the open
 *     (QMM_ERR_FORMAT naming the bias) and `quantize` (no output);
 *   - truncated_underneath: a mapped checkpoint cut short after open (before a layer is packed,
 *     during quantize, under qmm_st_read) gives QMM_ERR_IO, not SIGBUS; quantize leaves nothing;
 *   - bad_numbers: weight scales NaN/±Inf/±0/negative/denormal (per row and per tensor) and
 *     non-finite biases (F32/F16/BF16, int8 and float layers) open but refuse to pack, naming
 *     layer and row; quantize refuses NaN/Inf weights (naming tensor and row) and quantizes finite
 *     rows near FLT_MAX to finite scales, bit-equal to the rows scaled by 2^-64;
 *   - many_layers: 20 001 layers (comfy_quant, _quantization_metadata, float) open with the right
 *     kinds and the float ones quantize (times printed, not checked);
 */
#define _POSIX_C_SOURCE 200809L
#include "qmm_io.h"
#include "testutil.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char g_dir[256];
static qmm_context *g_ctx;

static const char *tmp_path(const char *name) {   /* 4 live paths at most */
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", g_dir, name);
    return buf[k];
}


static char *repeat_name(size_t len, char c, const char *suffix) {
    size_t s = strlen(suffix);
    char *p = malloc(len + s + 1);
    memset(p, c, len);
    memcpy(p + len, suffix, s + 1);
    return p;
}

/* ---------------------------------------------------------------- long names */
static void test_long_names(void) {
    const size_t lens[] = {1100, 5000, 60000};
    enum { N = 16, K = 64 };
    static int8_t wq[N * K];
    static float sc[N], wf[N * K], bias[N];
    tu_fill_i8(wq, N * K, -127, 127);
    tu_fill_float(wf, QMM_F32, N * K, 0.1f);
    tu_fill_float(bias, QMM_F32, N, 0.1f);
    for (int i = 0; i < N; i++) sc[i] = 0.01f;
    const char *cq = "{\"format\": \"int8_tensorwise\"}";
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        char *qL = repeat_name(lens[li], 'q', ""), *fL = repeat_name(lens[li], 'f', "");
        char *n1 = repeat_name(lens[li], 'q', ".weight"), *n2 = repeat_name(lens[li], 'q', ".weight_scale"),
             *n3 = repeat_name(lens[li], 'q', ".comfy_quant"), *n4 = repeat_name(lens[li], 'f', ".weight"),
             *n5 = repeat_name(lens[li], 'f', ".bias");
        tu_tensor t[] = {
            {n1, QMM_ST_I8, 2, {N, K}, wq},
            {n2, QMM_ST_F32, 1, {N}, sc},
            {n3, QMM_ST_U8, 1, {(int64_t)strlen(cq)}, cq},
            {n4, QMM_ST_F32, 2, {N, K}, wf},
            {n5, QMM_ST_F32, 1, {N}, bias},
        };
        const char *p = tmp_path("long.safetensors");
        tu_write_ckpt(p, t, 5, NULL, NULL);
        qmm_model *m = NULL;
        TU_CHECK_OK(qmm_model_open(p, NULL, &m));
        const qmm_layer_info *lq = NULL, *lf = NULL;
        if (m) {
            TU_CHECK_OK(qmm_model_find(m, qL, &lq));
            TU_CHECK_OK(qmm_model_find(m, fL, &lf));
        }
        TU_CHECK(lq && lq->kind == QMM_LAYER_INT8 && lq->weight_scale, "%zu-byte int8 layer name", lens[li]);
        TU_CHECK(lf && lf->kind == QMM_LAYER_FLOAT && lf->bias, "%zu-byte float layer name keeps its bias", lens[li]);
        if (m) TU_CHECK_OK(qmm_model_load_all(m, g_ctx));
        qmm_model_close(m);

        /* quantize: the float layer (selected by an include glob) becomes int8 */
        const char *in = tmp_path("long_float.safetensors"), *out = tmp_path("long_int8.safetensors");
        tu_write_ckpt(in, t + 3, 2, NULL, NULL);
        qmm_quantize_file_options o = qmm_quantize_file_options_default();
        const char *inc[] = {"f*", NULL};
        o.include = inc;
        o.min_size = 1;
        int64_t nq = -1;
        TU_CHECK_OK(qmm_quantize_file(in, out, &o, &nq));
        TU_CHECK(nq == 1, "%zu-byte name: quantized %lld layers (want 1)", lens[li], (long long)nq);
        m = NULL;
        TU_CHECK_OK(qmm_model_open(out, NULL, &m));
        lf = NULL;
        if (m) TU_CHECK_OK(qmm_model_find(m, fL, &lf));
        TU_CHECK(lf && lf->kind == QMM_LAYER_INT8 && lf->bias, "%zu-byte name: quantized layer reads back int8 with bias",
                 lens[li]);
        qmm_model_close(m);
        free(qL); free(fL); free(n1); free(n2); free(n3); free(n4); free(n5);
    }
}

/* ---------------------------------------------------------------- float bias length */
static void test_float_bias_length(void) {
    enum { N = 16, K = 64 };
    static float wf[N * K], bias[2 * N];
    static int8_t bi8[N];
    tu_fill_float(wf, QMM_F32, N * K, 0.1f);
    tu_fill_float(bias, QMM_F32, 2 * N, 0.1f);
    const struct { const char *what; qmm_st_dtype dt; int ndim; int64_t s0, s1; const void *data; } cases[] = {
        {"bias [N-1]", QMM_ST_F32, 1, N - 1, 0, bias},
        {"bias [N+1]", QMM_ST_F32, 1, N + 1, 0, bias},
        {"bias [N, 1]", QMM_ST_F32, 2, N, 1, bias},
        {"bias I8 [N]", QMM_ST_I8, 1, N, 0, bi8},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        tu_tensor t[] = {
            {"blk.proj.weight", QMM_ST_F32, 2, {N, K}, wf},
            {"blk.proj.bias", cases[c].dt, cases[c].ndim, {cases[c].s0, cases[c].s1}, cases[c].data},
        };
        const char *p = tmp_path("fbias.safetensors");
        tu_write_ckpt(p, t, 2, NULL, NULL);
        qmm_model *m = (qmm_model *)1;
        qmm_status st = qmm_model_open(p, NULL, &m);
        TU_CHECK(st == QMM_ERR_FORMAT && !m && strstr(qmm_last_error(), "blk.proj.bias"),
                 "float layer with %s refused at open: %s: %s", cases[c].what, qmm_status_name(st), qmm_last_error());
        qmm_quantize_file_options o = qmm_quantize_file_options_default();
        o.min_size = 1;
        const char *out = tmp_path("fbias_q.safetensors");
        st = qmm_quantize_file(p, out, &o, NULL);
        TU_CHECK(st == QMM_ERR_FORMAT && strstr(qmm_last_error(), "blk.proj") && access(out, F_OK) != 0,
                 "quantize of a float layer with %s refused, no output: %s: %s", cases[c].what, qmm_status_name(st),
                 qmm_last_error());
    }
}

/* ---------------------------------------------------------------- many layers */
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* n layers, a third each: a comfy_quant tensor, a _quantization_metadata entry, float. The open
 * must find every one with its kind; then the float ones are quantized (the metadata parse and
 * the layer lookups used to be per tensor: quadratic). Times are printed, not checked. */
static void test_many_layers(int n) {
    enum { K = 16 };
    static int8_t wq[K];
    static float wf[K], sc[1] = {0.01f};
    tu_fill_i8(wq, K, -127, 127);
    tu_fill_float(wf, QMM_F32, K, 0.1f);
    const char *cq = "{\"format\": \"int8_tensorwise\"}";
    size_t mcap = (size_t)n * 64 + 64, ml = 0;
    char *meta = malloc(mcap);
    ml += (size_t)snprintf(meta + ml, mcap - ml, "{\"format_version\": \"1.0\", \"layers\": {");
    for (int i = 1, first = 1; i < n; i += 3, first = 0)
        ml += (size_t)snprintf(meta + ml, mcap - ml, "%s\"blocks.%d.fc\": {\"format\": \"int8_tensorwise\"}",
                               first ? "" : ", ", i);
    snprintf(meta + ml, mcap - ml, "}}");
    const char *p = tmp_path("many.safetensors");
    double t0 = now_s();
    qmm_st_writer *w;
    TU_CHECK_OK(qmm_st_writer_create(p, &w));
    if (!w) { free(meta); return; }
    TU_CHECK_OK(qmm_st_writer_set_metadata(w, "_quantization_metadata", meta));
    int64_t s2[2] = {1, K}, s1[1] = {1}, sj[1] = {(int64_t)strlen(cq)};
    char name[64];
    int bad = 0;
    for (int i = 0; i < n; i++) {
        snprintf(name, sizeof name, "blocks.%d.fc.weight", i);
        bad |= qmm_st_writer_declare(w, name, i % 3 == 2 ? QMM_ST_F32 : QMM_ST_I8, 2, s2) != QMM_OK;
        if (i % 3 == 2) continue;
        snprintf(name, sizeof name, "blocks.%d.fc.weight_scale", i);
        bad |= qmm_st_writer_declare(w, name, QMM_ST_F32, 1, s1) != QMM_OK;
        snprintf(name, sizeof name, "blocks.%d.fc.comfy_quant", i);
        if (i % 3 == 0) bad |= qmm_st_writer_declare(w, name, QMM_ST_U8, 1, sj) != QMM_OK;
    }
    bad |= qmm_st_writer_begin(w) != QMM_OK;
    for (int i = 0; i < n; i++) {
        bad |= qmm_st_writer_write(w, i % 3 == 2 ? (const void *)wf : (const void *)wq, i % 3 == 2 ? sizeof wf : sizeof wq) != QMM_OK;
        if (i % 3 != 2) bad |= qmm_st_writer_write(w, sc, sizeof sc) != QMM_OK;
        if (i % 3 == 0) bad |= qmm_st_writer_write(w, cq, strlen(cq)) != QMM_OK;
    }
    bad |= qmm_st_writer_finish(w) != QMM_OK;
    qmm_st_writer_destroy(w);
    free(meta);
    TU_CHECK(!bad, "%d layers written: %s", n, qmm_last_error());
    double t1 = now_s();
    qmm_model *m = NULL;
    TU_CHECK_OK(qmm_model_open(p, NULL, &m));
    double t2 = now_s();
    if (m) {
        TU_CHECK(qmm_model_layer_count(m) == (size_t)n, "%d layers found, want %d", (int)qmm_model_layer_count(m), n);
        int wrong = -1;
        for (int i = 0; i < n && wrong < 0; i++) {
            snprintf(name, sizeof name, "blocks.%d.fc", i);
            const qmm_layer_info *l = NULL;
            qmm_model_find(m, name, &l);
            const char *src = i % 3 == 0 ? "comfy_quant" : i % 3 == 1 ? "_quantization_metadata" : NULL;
            int ok = l && l->kind == (i % 3 == 2 ? QMM_LAYER_FLOAT : QMM_LAYER_INT8) &&
                     (src ? l->source && !strcmp(l->source, src) : l->source == NULL);
            if (!ok) wrong = i;
        }
        TU_CHECK(wrong < 0, "%d layers: layer %d has the wrong kind or source", n, wrong);
        qmm_model_close(m);
    }
    double t3 = now_s();
    qmm_quantize_file_options o = qmm_quantize_file_options_default();
    o.min_size = 1;
    int64_t nq = -1;
    TU_CHECK_OK(qmm_quantize_file(p, tmp_path("many_q.safetensors"), &o, &nq));
    TU_CHECK(nq == n / 3, "quantized %lld of %d layers (want the %d float ones)", (long long)nq, n, n / 3);
    double t4 = now_s();
    tu_note("%d layers: write %.2f s, open %.2f s, quantize %.2f s", n, t1 - t0, t2 - t1, t4 - t3);
}

/* ---------------------------------------------------------------- truncated underneath */
/* Each case runs in a child: before the fix a SIGBUS ended it (the parent sees the signal). */
static const char *g_trunc_path;
static int g_trunc_after;   /* progress calls before the truncation */
static void truncate_in_progress(void *u, int64_t ld, int64_t lt, uint64_t bd, uint64_t bt) {
    (void)u; (void)ld; (void)lt; (void)bd; (void)bt;
    if (--g_trunc_after == 0 && truncate(g_trunc_path, 4096) != 0) printf("# truncate failed\n");
}

static int child_model(const char *p) {
    qmm_model *m = NULL;
    if (qmm_model_open(p, NULL, &m) != QMM_OK) return 10;
    if (truncate(p, 4096) != 0) return 11;
    const qmm_weight *w;
    qmm_status a = qmm_model_weight(m, g_ctx, "big", &w);
    int a_ok = a == QMM_ERR_IO && strstr(qmm_last_error(), "shrank") != NULL;
    qmm_status b = qmm_model_weight(m, g_ctx, "fl", &w);
    int b_ok = b == QMM_ERR_IO && strstr(qmm_last_error(), "shrank") != NULL;
    printf("# truncated model: int8 layer %s, float layer %s: %s\n", qmm_status_name(a), qmm_status_name(b), qmm_last_error());
    qmm_model_close(m);
    return a_ok && b_ok ? 0 : 12;
}

static int child_quantize(const char *in, const char *out) {
    qmm_quantize_file_options o = qmm_quantize_file_options_default();
    g_trunc_path = in;
    g_trunc_after = 1;
    o.progress = truncate_in_progress;
    o.min_size = 1;
    qmm_status st = qmm_quantize_file(in, out, &o, NULL);
    printf("# quantize of an input truncated after its first tensor: %s: %s\n", qmm_status_name(st), qmm_last_error());
    char cmd[700];
    snprintf(cmd, sizeof cmd, "ls %s | grep -q tmp", g_dir);
    int tmp_left = system(cmd) == 0;
    return st == QMM_ERR_IO && access(out, F_OK) != 0 && !tmp_left ? 0 : 13;
}

static int child_st_read(const char *p) {
    qmm_st_file *f = NULL;
    if (qmm_st_open(p, &f) != QMM_OK) return 14;
    if (truncate(p, 4096) != 0) return 15;
    const qmm_st_tensor *t = qmm_st_get(f, "big.weight");
    void *buf = t ? malloc(t->nbytes) : NULL;
    qmm_status st = buf ? qmm_st_read(f, t, 0, t->nbytes, buf) : QMM_ERR_OUT_OF_MEMORY;
    qmm_status st2 = buf ? qmm_st_read(f, t, 0, 16, buf) : QMM_ERR_OUT_OF_MEMORY;   /* bytes still in the file */
    free(buf);
    qmm_st_close(f);
    return st == QMM_ERR_IO && st2 == QMM_OK ? 0 : 16;
}

static void run_child(const char *what, int (*fn)(const char *, const char *), const char *a, const char *b) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        int rc = fn(a, b);
        fflush(stdout);
        _exit(rc);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    TU_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s: %s %d", what,
             WIFSIGNALED(status) ? "died of signal" : "exit", WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
}

static int c_model(const char *a, const char *b) { (void)b; return child_model(a); }
static int c_quantize(const char *a, const char *b) { return child_quantize(a, b); }
static int c_st_read(const char *a, const char *b) { (void)b; return child_st_read(a); }

static void write_trunc_ckpt(const char *p, const void *wq, const float *sc, const float *wf) {
    const char *cq = "{\"format\": \"int8_tensorwise\"}";
    tu_tensor t[] = {
        {"big.comfy_quant", QMM_ST_U8, 1, {(int64_t)strlen(cq)}, cq},
        {"big.weight_scale", QMM_ST_F32, 1, {64}, sc},
        {"big.weight", QMM_ST_I8, 2, {64, 8192}, wq},
        {"fl.weight", QMM_ST_F32, 2, {64, 2048}, wf},
    };
    tu_write_ckpt(p, t, 4, NULL, NULL);
}

static void test_truncated_underneath(void) {
    int8_t *wq = calloc(64 * 8192, 1);
    float *wf = calloc(64 * 2048, 4), sc[64];
    for (int i = 0; i < 64; i++) sc[i] = 0.01f;
    for (int i = 0; i < 64 * 2048; i++) wf[i] = (float)(i % 17) * 0.01f;
    const char *p = tmp_path("trunc.safetensors");
    char path[512];
    snprintf(path, sizeof path, "%s", p);
    write_trunc_ckpt(path, wq, sc, wf);
    run_child("packing layers of a checkpoint truncated after open: QMM_ERR_IO", c_model, path, NULL);
    write_trunc_ckpt(path, wq, sc, wf);
    run_child("qmm_st_read past the new end: QMM_ERR_IO, before it: OK", c_st_read, path, NULL);
    /* quantize: three float layers, the input cut after the first is written */
    tu_tensor in[] = {
        {"a.weight", QMM_ST_F32, 2, {64, 2048}, wf},
        {"b.weight", QMM_ST_F32, 2, {64, 2048}, wf},
        {"c.weight", QMM_ST_F32, 2, {64, 2048}, wf},
    };
    tu_write_ckpt(path, in, 3, NULL, NULL);
    char out[512];
    snprintf(out, sizeof out, "%s", tmp_path("trunc_q.safetensors"));
    run_child("quantize of an input truncated underneath: QMM_ERR_IO, no output, no temporary", c_quantize, path, out);
    free(wq);
    free(wf);
}

/* ---------------------------------------------------------------- bad numbers */
static float f32_of_bits(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* Scales that are not positive normal floats and non-finite biases: the model opens (the header
 * is fine) but the layer refuses to pack, naming layer and row; quantize refuses NaN/Inf rows and
 * quantizes finite rows near FLT_MAX without overflow (same bits as the row scaled by 2^-64). */
static void test_bad_numbers(void) {
    enum { N = 8, K = 64 };
    static int8_t wq[N * K];
    static float wf[N * K];
    tu_fill_i8(wq, N * K, -127, 127);
    tu_fill_float(wf, QMM_F32, N * K, 0.1f);
    const char *cq = "{\"format\": \"int8_tensorwise\"}";
    const struct { const char *what; float v; } bad_scales[] = {
        {"NaN", f32_of_bits(0x7fc00000u)}, {"+Inf", f32_of_bits(0x7f800000u)}, {"-Inf", f32_of_bits(0xff800000u)},
        {"zero", 0.0f}, {"-0", -0.0f}, {"negative", -0.01f}, {"denormal", f32_of_bits(0x00000123u)},
    };
    for (size_t c = 0; c < sizeof bad_scales / sizeof bad_scales[0]; c++)
        for (int per_tensor = 0; per_tensor < 2; per_tensor++) {
            float sc[N];
            for (int i = 0; i < N; i++) sc[i] = 0.01f;
            sc[per_tensor ? 0 : 3] = bad_scales[c].v;
            tu_tensor t[] = {
                {"blk.q.weight", QMM_ST_I8, 2, {N, K}, wq},
                {"blk.q.weight_scale", QMM_ST_F32, 1, {per_tensor ? 1 : N}, sc},
                {"blk.q.comfy_quant", QMM_ST_U8, 1, {(int64_t)strlen(cq)}, cq},
            };
            const char *p = tmp_path("badscale.safetensors");
            tu_write_ckpt(p, t, 3, NULL, NULL);
            qmm_model *m = NULL;
            TU_CHECK_OK(qmm_model_open(p, NULL, &m));
            if (!m) continue;
            const qmm_weight *w = (const qmm_weight *)1;
            qmm_status st = qmm_model_weight(m, g_ctx, "blk.q", &w);
            char want[64];
            snprintf(want, sizeof want, "%s", per_tensor ? "per-tensor weight_scale" : "weight_scale of row 3");
            TU_CHECK(st == QMM_ERR_FORMAT && !w && strstr(qmm_last_error(), "blk.q") && strstr(qmm_last_error(), want) &&
                         strstr(qmm_last_error(), bad_scales[c].what),
                     "%s %s scale refused at load: %s: %s", per_tensor ? "per-tensor" : "row-3", bad_scales[c].what,
                     qmm_status_name(st), qmm_last_error());
            TU_CHECK(qmm_model_check_layer(m, "blk.q") == QMM_ERR_FORMAT, "check_layer reports the %s scale",
                     bad_scales[c].what);
            qmm_model_close(m);
        }
    /* non-finite biases (F32 NaN, F16 NaN, BF16 -Inf) on int8 and float layers */
    const struct { qmm_st_dtype dt; uint32_t bits; const char *what; } bad_bias[] = {
        {QMM_ST_F32, 0x7fc00000u, "NaN"}, {QMM_ST_F16, 0x7e00u, "NaN"}, {QMM_ST_BF16, 0xff80u, "-Inf"},
    };
    for (size_t c = 0; c < sizeof bad_bias / sizeof bad_bias[0]; c++) {
        float sc[N], bias32[N];
        uint16_t bias16[N];
        for (int i = 0; i < N; i++) { sc[i] = 0.01f; bias32[i] = 0.5f; bias16[i] = bad_bias[c].dt == QMM_ST_F16 ? 0x3800 : 0x3f00; }
        if (bad_bias[c].dt == QMM_ST_F32) memcpy(&bias32[5], &bad_bias[c].bits, 4);
        else bias16[5] = (uint16_t)bad_bias[c].bits;
        const void *b = bad_bias[c].dt == QMM_ST_F32 ? (const void *)bias32 : (const void *)bias16;
        tu_tensor t[] = {
            {"q.weight", QMM_ST_I8, 2, {N, K}, wq},
            {"q.weight_scale", QMM_ST_F32, 2, {N, 1}, sc},
            {"q.bias", bad_bias[c].dt, 1, {N}, b},
            {"q.comfy_quant", QMM_ST_U8, 1, {(int64_t)strlen(cq)}, cq},
            {"f.weight", QMM_ST_F32, 2, {N, K}, wf},
            {"f.bias", bad_bias[c].dt, 1, {N}, b},
        };
        const char *p = tmp_path("badbias.safetensors");
        tu_write_ckpt(p, t, 6, NULL, NULL);
        qmm_model *m = NULL;
        TU_CHECK_OK(qmm_model_open(p, NULL, &m));
        if (!m) continue;
        const char *layers[] = {"q", "f"};
        for (int i = 0; i < 2; i++) {
            const qmm_weight *w;
            qmm_status st = qmm_model_weight(m, g_ctx, layers[i], &w);
            TU_CHECK(st == QMM_ERR_FORMAT && strstr(qmm_last_error(), "bias of row 5") && strstr(qmm_last_error(), bad_bias[c].what),
                     "layer %s with a %s %s bias refused at load: %s", layers[i], qmm_st_dtype_name(bad_bias[c].dt),
                     bad_bias[c].what, qmm_last_error());
        }
        qmm_model_close(m);
    }

    /* quantize: a NaN or Inf weight is refused naming layer and row; no output */
    const struct { uint32_t bits; const char *what; } bad_w[] = {{0x7fc00000u, "NaN"}, {0xff800000u, "-Inf"}};
    for (int per_tensor = 0; per_tensor < 2; per_tensor++)
        for (size_t c = 0; c < 2; c++) {
            float *x = malloc(sizeof wf);
            memcpy(x, wf, sizeof wf);
            memcpy(&x[7 * K + 11], &bad_w[c].bits, 4);
            tu_tensor t[] = {{"blk.fc.weight", QMM_ST_F32, 2, {N, K}, x}};
            const char *in = tmp_path("nan_in.safetensors"), *out = tmp_path("nan_out.safetensors");
            tu_write_ckpt(in, t, 1, NULL, NULL);
            qmm_quantize_file_options o = qmm_quantize_file_options_default();
            o.min_size = 1;
            o.per_tensor = per_tensor;
            qmm_status st = qmm_quantize_file(in, out, &o, NULL);
            TU_CHECK(st == QMM_ERR_FORMAT && strstr(qmm_last_error(), "blk.fc.weight") && strstr(qmm_last_error(), "row 7") &&
                         strstr(qmm_last_error(), bad_w[c].what) && access(out, F_OK) != 0,
                     "quantize refuses a %s weight (per_tensor %d): %s", bad_w[c].what, per_tensor, qmm_last_error());
            free(x);
        }

    /* quantize: finite rows near FLT_MAX (rotation on, per row and per tensor) give finite scales and
     * the bits of the same rows scaled by 2^-64 with the scale scaled back; ordinary rows are untouched */
    for (int per_tensor = 0; per_tensor < 2; per_tensor++) {
        float *x = malloc(sizeof wf);
        memcpy(x, wf, sizeof wf);
        for (int k = 0; k < K; k++) {
            x[2 * K + k] = (k % 3 ? 1.0f : -1.0f) * 3.4e38f * ((float)(k + 1) / (float)K);   /* row 2: huge */
            x[5 * K + k] = k == 9 ? 3.4028235e38f : x[5 * K + k];                          /* row 5: one FLT_MAX */
        }
        tu_tensor t[] = {{"blk.big.weight", QMM_ST_F32, 2, {N, K}, x}};
        const char *in = tmp_path("big_in.safetensors"), *out = tmp_path("big_out.safetensors");
        tu_write_ckpt(in, t, 1, NULL, NULL);
        qmm_quantize_file_options o = qmm_quantize_file_options_default();
        o.min_size = 1;
        o.per_tensor = per_tensor;
        TU_CHECK_OK(qmm_quantize_file(in, out, &o, NULL));
        qmm_st_file *f = NULL;
        TU_CHECK_OK(qmm_st_open(out, &f));
        const qmm_st_tensor *qw = f ? qmm_st_get(f, "blk.big.weight") : NULL, *qs = f ? qmm_st_get(f, "blk.big.weight_scale") : NULL;
        if (TU_CHECK(qw && qs, "quantized tensors present")) {
            int ns = per_tensor ? 1 : N;
            float got_s[N];
            memcpy(got_s, qs->data, (size_t)ns * 4);
            /* the reference: each huge row (or, per tensor, the whole tensor) scaled by 2^-64 */
            float *down = malloc(sizeof wf), want_s[N];
            int8_t want_q[N * K];
            int gs = 0;
            qmm_quant_options qo = {-1, per_tensor};
            for (int r = 0; r < N; r++)
                for (int k = 0; k < K; k++)
                    down[r * K + k] = x[r * K + k] * (per_tensor || r == 2 || r == 5 ? 0x1p-64f : 1.0f);
            TU_CHECK_OK(qmm_quantize_weight(down, QMM_F32, N, K, K, &qo, want_q, want_s, &gs));
            int finite = 1, same_s = 1;
            for (int r = 0; r < ns; r++) {
                float ws = want_s[r] * (per_tensor || r == 2 || r == 5 ? 0x1p64f : 1.0f);
                finite &= isfinite(got_s[r]) && got_s[r] > 0;
                same_s &= memcmp(&ws, &got_s[r], 4) == 0;
            }
            TU_CHECK(finite, "per_tensor %d: scales of rows near FLT_MAX are finite (row 2: %g)", per_tensor,
                     (double)got_s[per_tensor ? 0 : 2]);
            TU_CHECK(same_s && !memcmp(qw->data, want_q, sizeof want_q),
                     "per_tensor %d: bits equal the rows scaled by 2^-64 (scale scaled back)", per_tensor);
            free(down);
        }
        qmm_st_close(f);
        free(x);
    }
}

/* ---------------------------------------------------------------- committed corpus */
/* fuzz/corpus/checkpoint (beside this file's folder): bad_* files fail the open, the others open. */
static void test_corpus(void) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", __FILE__);
    char *slash = strrchr(dir, '/');
    if (!slash) { tu_skip("corpus", "source path unknown"); return; }
    snprintf(slash, sizeof dir - (size_t)(slash - dir), "/../fuzz/corpus/checkpoint");
    DIR *d = opendir(dir);
    if (!d) { tu_skip("corpus", "fuzz/corpus/checkpoint not found beside tests/"); return; }
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.' || !strncmp(e->d_name, "regress_", 8)) continue;
        int bad = !strncmp(e->d_name, "bad_", 4);
        char path[1400];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        qmm_model_options o = qmm_model_options_default();
        o.allow_unsupported = 1;
        qmm_model *m = NULL;
        qmm_status st = qmm_model_open(path, &o, &m);
        TU_CHECK(bad ? st != QMM_OK : st == QMM_OK, "corpus %s: %s (%s)", e->d_name, qmm_status_name(st),
                 st ? qmm_last_error() : "");
        qmm_model_close(m);
        n++;
    }
    closedir(d);
    TU_CHECK(n >= 15, "%d corpus files checked", n);
}

int main(int argc, char **argv) {
    tu_init(argc, argv, "test_checkpoint_hardening");
    snprintf(g_dir, sizeof g_dir, "/tmp/qmm_test_hard_XXXXXX");
    if (!mkdtemp(g_dir)) return 1;
    qmm_context_options o = qmm_context_options_default();
    o.n_threads = 2;
    TU_CHECK_OK(qmm_context_create(&o, &g_ctx));
    test_corpus();
    test_long_names();
    test_float_bias_length();
    test_truncated_underneath();
    test_bad_numbers();
    test_many_layers(getenv("QMM_TEST_QUICK") ? 6000 : 20001);
    qmm_context_destroy(g_ctx);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd) != 0) printf("# could not remove %s\n", g_dir);
    return tu_finish();
}
