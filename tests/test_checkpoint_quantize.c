/*
 * test_checkpoint_quantize.c — qmm_quantize_file (what `qmm quantize` runs) on a float
 * checkpoint written here, then read back:
 *   - selection: 2-D float .weight with min(N, K) >= 256, not embeddings/norms, globs;
 *   - the output: L.weight I8 [N,K], L.weight_scale F32 [N,1] ([1] per-tensor), L.comfy_quant =
 *     the exact json.dumps bytes, right after the weight; every other tensor and __metadata__
 *     byte-identical; re-quantizing qmm's output gives identical bytes;
 *   - the SPEC §2 round trip. With r = W·H_g (rotated row), e = r − Wq·s (rotated basis):
 *       |e_k| <= s/2                                  (rne of r/s, |r/s| <= 127)
 *     and back in the original basis, e' = e·H_g (H_g orthonormal, its own inverse), per group:
 *       ||e'||_2 = ||e||_2 <= sqrt(g)·s/2   → RMS over the group <= s/2,
 *       |e'_j| <= ||e||_2 · ||H_g[:, j]||_2 = sqrt(g)·s/2   (Cauchy–Schwarz; elementwise bound).
 *     Both are checked with an fp32 slack of 1e-5·amax(row); the worst ratios are printed;
 *   - quantizing in blocks of rows (chunk_bytes) gives the same bytes;
 *   - an explicit convrot group that does not divide K fails before OUT exists;
 *   - Python's json.dumps gives the same comfy_quant bytes (skipped without safetensors/numpy).
 */
#define _POSIX_C_SOURCE 200809L
#include "numerics.h"
#include "qmm_io.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char g_dir[256];

static const char *tmp_path(const char *name) {   /* 8 live paths at most */
    static char buf[8][512];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", g_dir, name);
    return buf[k];
}

typedef struct src {
    const char *name;
    qmm_st_dtype dtype;
    int ndim;
    int64_t shape[2];
    int quant_auto;     /* expected group with --convrot auto, -1: not quantized */
    void *data;
    size_t nbytes;
} src;

static src g_src[] = {
    {"model.embed_tokens.weight", QMM_ST_BF16, 2, {300, 256}, -1, 0, 0},
    {"blocks.0.attn.qkv.weight", QMM_ST_F32, 2, {288, 512}, 256, 0, 0},
    {"blocks.0.attn.qkv.bias", QMM_ST_F32, 1, {288, 0}, -1, 0, 0},
    {"blocks.0.mlp.fc1.weight", QMM_ST_BF16, 2, {256, 320}, 64, 0, 0},
    {"blocks.0.mlp.fc2.weight", QMM_ST_F16, 2, {272, 272}, 16, 0, 0},
    {"blocks.0.x.weight", QMM_ST_F32, 2, {256, 300}, 0, 0, 0},
    {"blocks.0.small.weight", QMM_ST_F32, 2, {64, 512}, -1, 0, 0},
    {"blocks.0.norm.weight", QMM_ST_F32, 1, {512, 0}, -1, 0, 0},
    {"blocks.0.norm_out.weight", QMM_ST_F32, 2, {512, 512}, -1, 0, 0},   /* 2-D, but a norm by name */
};
enum { NSRC = sizeof g_src / sizeof g_src[0] };

static void make_input(const char *path) {
    qmm_st_writer *w;
    TU_CHECK_OK(qmm_st_writer_create(path, &w));
    TU_CHECK_OK(qmm_st_writer_set_metadata(w, "format", "pt"));
    TU_CHECK_OK(qmm_st_writer_set_metadata(w, "modelspec.title", "t\xc3\xa9st \"model\""));
    for (int i = 0; i < NSRC; i++) {
        src *s = &g_src[i];
        int64_t numel = s->shape[0] * (s->ndim == 2 ? s->shape[1] : 1);
        s->nbytes = (size_t)numel * (size_t)qmm_st_dtype_bits(s->dtype) / 8;
        s->data = malloc(s->nbytes);
        qmm_dtype dt = (qmm_dtype)qmm_st_dtype_to_qmm(s->dtype);
        tu_fill_float(s->data, dt, numel, 0.05f);
        if (s->ndim == 2) /* outlier columns, as real weights have */
            for (int64_t n = 0; n < s->shape[0]; n++)
                for (int64_t k = 0; k < s->shape[1]; k += 37)
                    qmm_store_f(s->data, dt, n * s->shape[1] + k, qmm_load_f(s->data, dt, n * s->shape[1] + k) * 20.0f);
        TU_CHECK_OK(qmm_st_writer_declare(w, s->name, s->dtype, s->ndim, s->shape));
    }
    TU_CHECK_OK(qmm_st_writer_begin(w));
    for (int i = 0; i < NSRC; i++) TU_CHECK_OK(qmm_st_writer_write(w, g_src[i].data, g_src[i].nbytes));
    TU_CHECK_OK(qmm_st_writer_finish(w));
    qmm_st_writer_destroy(w);
}

static int g_progress_calls;
static void progress(void *u, int64_t ld, int64_t lt, uint64_t bd, uint64_t bt) {
    (void)u;
    g_progress_calls++;
    TU_CHECK(ld <= lt && bd <= bt, "progress %lld/%lld layers, %llu/%llu bytes", (long long)ld, (long long)lt,
             (unsigned long long)bd, (unsigned long long)bt);
}

static unsigned char *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) { *n = 0; return NULL; }
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *p = malloc((size_t)sz + 1);
    *n = fread(p, 1, (size_t)sz, f);
    fclose(f);
    return p;
}

/* The SPEC §2 bounds for one quantized layer (see the file comment). */
static void check_roundtrip(const src *s, const qmm_st_file *f, int gs, int per_tensor, double *worst_rot,
                            double *worst_rms, double *worst_el) {
    char nm[256];
    const int64_t N = s->shape[0], K = s->shape[1];
    size_t ln = strlen(s->name) - 7;
    snprintf(nm, sizeof nm, "%.*s.weight_scale", (int)ln, s->name);
    const qmm_st_tensor *wt = qmm_st_get(f, s->name), *st = qmm_st_get(f, nm);
    if (!TU_CHECK(wt && st, "%s: weight and scale present", s->name)) return;
    int64_t ns = per_tensor ? 1 : N;
    float *sc = malloc((size_t)ns * 4), *deq = malloc((size_t)(N * K) * 4), *row = malloc((size_t)K * 4);
    memcpy(sc, st->data, (size_t)ns * 4);
    TU_CHECK_OK(qmm_dequantize_weight(wt->data, N, K, sc, ns, gs, deq));
    const int8_t *q = wt->data;
    qmm_dtype dt = (qmm_dtype)qmm_st_dtype_to_qmm(s->dtype);
    int64_t bad = -1;
    for (int64_t n = 0; n < N; n++) {
        float sn = sc[per_tensor ? 0 : n];
        for (int64_t k = 0; k < K; k++) row[k] = qmm_load_f(s->data, dt, n * K + k);
        float amax0 = qmm_amax_f32(row, K);
        double slack = 1e-5 * amax0;
        /* original basis, per group of g (or the whole row) */
        int64_t g = gs ? gs : K;
        for (int64_t b = 0; b < K; b += g) {
            double ss = 0;
            for (int64_t k = b; k < b + g; k++) {
                double e = fabs((double)row[k] - deq[n * K + k]);
                ss += e * e;
                double lim = sqrt((double)g) * sn / 2;
                if (gs == 0) lim = sn / 2;
                if (gs && e / lim > *worst_el) *worst_el = e / lim;   /* rotated layers only */
                if (e > lim + slack && bad < 0) bad = n * K + k;
            }
            double rms = sqrt(ss / (double)g);
            if (rms / (sn / 2) > *worst_rms) *worst_rms = rms / (sn / 2);
            if (rms > sn / 2 + slack && bad < 0) bad = n * K + b;
        }
        /* rotated basis: |r - q·s| <= s/2 */
        if (gs) qmm_rotate_f32(row, K, gs);
        for (int64_t k = 0; k < K; k++) {
            double e = fabs((double)row[k] - (double)q[n * K + k] * sn);
            if (e / (sn / 2) > *worst_rot) *worst_rot = e / (sn / 2);
            if (e > sn / 2 * (1 + 1e-6) + 1e-7 * amax0 && bad < 0) bad = n * K + k;
            if (q[n * K + k] == -128 && bad < 0) bad = n * K + k;
        }
    }
    TU_CHECK(bad < 0, "%s: round trip bound broken: N=%lld K=%lld g=%d per_tensor=%d, first bad index %lld", s->name,
             (long long)N, (long long)K, gs, per_tensor, (long long)bad);
    free(sc);
    free(deq);
    free(row);
}

static void check_output(const char *in, const char *out, int convrot, int per_tensor) {
    qmm_st_file *fi = NULL, *fo = NULL;
    TU_CHECK_OK(qmm_st_open(in, &fi));
    TU_CHECK_OK(qmm_st_open(out, &fo));
    if (!fi || !fo) { qmm_st_close(fi); qmm_st_close(fo); return; }
    TU_CHECK(qmm_st_metadata_count(fi) == qmm_st_metadata_count(fo), "metadata count carried over");
    for (size_t i = 0; i < qmm_st_metadata_count(fi); i++) {
        const char *k1, *v1, *k2, *v2;
        qmm_st_metadata_at(fi, i, &k1, &v1);
        qmm_st_metadata_at(fo, i, &k2, &v2);
        TU_CHECK(k2 && v2 && !strcmp(k1, k2) && !strcmp(v1, v2), "metadata %s carried over in order", k1);
    }
    double wr = 0, wrms = 0, wel = 0;
    for (int i = 0; i < NSRC; i++) {
        const src *s = &g_src[i];
        const qmm_st_tensor *t = qmm_st_get(fo, s->name);
        int gs = convrot < 0 ? s->quant_auto : s->quant_auto < 0 ? -1 : 0;
        if (!TU_CHECK(t != NULL, "%s in the output", s->name)) continue;
        if (gs < 0) {
            TU_CHECK(t->dtype == s->dtype && t->nbytes == s->nbytes && !memcmp(t->data, s->data, s->nbytes),
                     "%s carried over unchanged", s->name);
            continue;
        }
        size_t ln = strlen(s->name) - 7;
        char nm[256], json[128];
        snprintf(nm, sizeof nm, "%.*s.comfy_quant", (int)ln, s->name);
        const qmm_st_tensor *cq = qmm_st_get(fo, nm);
        size_t jl = qmm_comfy_quant_json(gs, json, sizeof json);
        TU_CHECK(cq && cq->dtype == QMM_ST_U8 && cq->nbytes == jl && !memcmp(cq->data, json, jl), "%s: comfy_quant is %s", nm,
                 json);
        snprintf(nm, sizeof nm, "%.*s.weight_scale", (int)ln, s->name);
        const qmm_st_tensor *sc = qmm_st_get(fo, nm);
        TU_CHECK(sc && sc->dtype == QMM_ST_F32 &&
                     (per_tensor ? sc->ndim == 1 && sc->shape[0] == 1
                                 : sc->ndim == 2 && sc->shape[0] == s->shape[0] && sc->shape[1] == 1),
                 "%s: shape", nm);
        TU_CHECK(t->dtype == QMM_ST_I8 && t->ndim == 2 && t->shape[0] == s->shape[0] && t->shape[1] == s->shape[1],
                 "%s: I8 [N,K]", s->name);
        TU_CHECK(sc && cq && qmm_st_at(fo, (size_t)(t - qmm_st_at(fo, 0)) + 1) == sc &&
                     qmm_st_at(fo, (size_t)(t - qmm_st_at(fo, 0)) + 2) == cq,
                 "%s: weight, weight_scale, comfy_quant in a row", s->name);
        check_roundtrip(s, fo, gs, per_tensor, &wr, &wrms, &wel);
    }
    tu_note("convrot %d per_tensor %d: worst |e|/(s/2) rotated basis %.4f; worst group RMS/(s/2) %.4f; worst rotated-layer |e'|/(sqrt(g) s/2) %.4f",
            convrot, per_tensor, wr, wrms, wel);
    /* the model view agrees */
    qmm_model *m = NULL;
    TU_CHECK_OK(qmm_model_open(out, NULL, &m));
    for (int i = 0; m && i < NSRC; i++) {
        const src *s = &g_src[i];
        if (s->ndim != 2) continue;
        char L[256];
        snprintf(L, sizeof L, "%.*s", (int)(strlen(s->name) - 7), s->name);
        const qmm_layer_info *l;
        TU_CHECK_OK(qmm_model_find(m, L, &l));
        int gs = convrot < 0 ? s->quant_auto : s->quant_auto < 0 ? -1 : 0;
        TU_CHECK(l && (gs < 0 ? l->kind == QMM_LAYER_FLOAT : l->kind == QMM_LAYER_INT8 && l->convrot_gs == gs),
                 "%s: model layer kind/group", L);
    }
    qmm_model_close(m);
    qmm_st_close(fi);
    qmm_st_close(fo);
}

static void test_quantize(void) {
    const char *in = tmp_path("float.safetensors");
    make_input(in);
    const char *out = tmp_path("int8.safetensors");
    qmm_quantize_file_options o = qmm_quantize_file_options_default();
    o.progress = progress;
    int64_t nq = 0;
    TU_CHECK_OK(qmm_quantize_file(in, out, &o, &nq));
    TU_CHECK(nq == 4, "4 layers quantized, got %lld", (long long)nq);
    TU_CHECK(g_progress_calls == NSRC, "progress after each tensor (%d)", g_progress_calls);
    check_output(in, out, -1, 0);

    /* re-quantizing qmm's output selects nothing and gives identical bytes */
    const char *out2 = tmp_path("int8_again.safetensors");
    TU_CHECK_OK(qmm_quantize_file(out, out2, &o, &nq));
    TU_CHECK(nq == 0, "nothing left to quantize");
    size_t n1, n2;
    unsigned char *a = read_all(out, &n1), *b = read_all(out2, &n2);
    TU_CHECK(a && b && n1 == n2 && !memcmp(a, b, n1), "re-writing qmm's file gives identical bytes");
    free(a);
    free(b);

    /* blocks of a few rows give the same bytes as whole layers */
    const char *out5 = tmp_path("int8_blocks.safetensors");
    qmm_quantize_file_options ob = qmm_quantize_file_options_default();
    ob.chunk_bytes = (size_t)tu_rand_int(1, 5000);
    TU_CHECK_OK(qmm_quantize_file(in, out5, &ob, &nq));
    a = read_all(out, &n1);
    b = read_all(out5, &n2);
    TU_CHECK(a && b && n1 == n2 && !memcmp(a, b, n1), "chunk_bytes %zu gives the same file", ob.chunk_bytes);
    free(a);
    free(b);

    /* no rotation, per-tensor */
    o.convrot = 0;
    o.per_tensor = 1;
    const char *out3 = tmp_path("int8_pt.safetensors");
    TU_CHECK_OK(qmm_quantize_file(in, out3, &o, &nq));
    check_output(in, out3, 0, 1);

    /* an explicit group that does not divide K: error, no output */
    o = qmm_quantize_file_options_default();
    o.convrot = 256;
    const char *out4 = tmp_path("never.safetensors");
    qmm_status st = qmm_quantize_file(in, out4, &o, &nq);
    TU_CHECK(st == QMM_ERR_UNSUPPORTED && strstr(qmm_last_error(), "blocks.0.mlp.fc1"),
             "group 256 with K=320: %s: %s", qmm_status_name(st), qmm_last_error());
    TU_CHECK(access(out4, F_OK) != 0, "no output after a failed quantize");
    char cmd[600];
    snprintf(cmd, sizeof cmd, "ls %s | grep -q tmp", g_dir);
    TU_CHECK(system(cmd) != 0, "no temporary file left");

    /* include / exclude / min size */
    qmm_st_file *f;
    TU_CHECK_OK(qmm_st_open(in, &f));
    if (f) {
        const char *inc[] = {"blocks.0.mlp.*", "model.embed_tokens", NULL}, *exc[] = {"*fc2", NULL};
        o = qmm_quantize_file_options_default();
        o.include = inc;
        o.exclude = exc;
        const char *want_sel[] = {"model.embed_tokens.weight", "blocks.0.mlp.fc1.weight"};
        int n_sel = 0;
        for (size_t i = 0; i < qmm_st_count(f); i++) {
            const qmm_st_tensor *t = qmm_st_at(f, i);
            char why[128];
            int sel = qmm_quantize_file_selects(f, t, &o, why, sizeof why);
            int want = !strcmp(t->name, want_sel[0]) || !strcmp(t->name, want_sel[1]);
            TU_CHECK(sel == want, "include/exclude: %s selected %d (%s)", t->name, sel, why);
            n_sel += sel;
        }
        TU_CHECK(n_sel == 2, "two selected");
        o = qmm_quantize_file_options_default();
        o.min_size = 64;
        TU_CHECK(qmm_quantize_file_selects(f, qmm_st_get(f, "blocks.0.small.weight"), &o, NULL, 0),
                 "--min-size 64 admits a [64, 512] layer");
        qmm_st_close(f);
    }
}

static void test_python_json(void) {
    if (system("python3 -c 'import json' >/dev/null 2>&1") != 0) {
        tu_skip("python json.dumps", "no python3");
        return;
    }
    const int gs[] = {0, 16, 64, 256};
    for (int i = 0; i < 4; i++) {
        char json[128], cmd[600];
        qmm_comfy_quant_json(gs[i], json, sizeof json);
        snprintf(cmd, sizeof cmd,
                 "python3 -c 'import json,sys; d={\"format\": \"int8_tensorwise\"}\n"
                 "if %d: d.update(convrot=True, convrot_groupsize=%d)\n"
                 "sys.exit(0 if json.dumps(d) == sys.argv[1] else 1)' '%s'",
                 gs[i], gs[i], json);
        TU_CHECK(system(cmd) == 0, "comfy_quant for g=%d equals json.dumps: %s", gs[i], json);
    }
}

int main(int argc, char **argv) {
    tu_init(argc, argv, "test_checkpoint_quantize");
    snprintf(g_dir, sizeof g_dir, "/tmp/qmm_test_q_XXXXXX");
    if (!mkdtemp(g_dir)) return 1;
    test_quantize();
    test_python_json();
    for (int i = 0; i < NSRC; i++) free(g_src[i].data);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd) != 0) printf("# could not remove %s\n", g_dir);
    return tu_finish();
}
