/*
 * cmd_run.c — `qmm run FILE --layer NAME --input X.safetensors --output Y.safetensors
 * [--tensor NAME] [--act none|swiglu|gelu_tanh|rms_norm|situ] [--eps E] [--engine NAME]
 * [--out-dtype f32|f16|bf16] [--epilogue fused|kitchen] [--threads N] [--force]`: runs one layer of a checkpoint (int8 or
 * float) on an input tensor and writes the result — the smallest way to compare qmm with another
 * framework; a W4A8 layer (asym_w4a8_int8, SPEC §11) runs on its codes, decoded per call.
 * rms_norm runs with a norm weight of ones and eps E (1e-6). --epilogue kitchen: comfy-kitchen's
 * eager epilogue (SPEC §1a, QMM_EPILOGUE_KITCHEN), the numerics ComfyUI gets from the kitchen's
 * int8_linear / w4a8_int8_linear; default fused (SPEC §1 step 5).
 * Input: the only tensor of X (or --tensor NAME), F32/F16/BF16, shape [..., K_in] (rows = the
 * product of the leading dimensions; 1-D is one row). Output: tensor "output" of shape
 * [..., N], dtype --out-dtype (default: the input's), with __metadata__ {"qmm_layer", "qmm_engine"}.
 * The engine that ran is printed on stderr. An output that is the same file as FILE or X is
 * refused unless --force. Exit 0 ok, 1 failure, 2 usage.
 */
#define _POSIX_C_SOURCE 200809L
#include "cli_files.h"
#include "commands.h"
#include "qmm_io.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f, "usage: qmm run FILE.safetensors --layer NAME --input X.safetensors --output Y.safetensors\n"
               "               [--tensor NAME] [--act none|swiglu|gelu_tanh|rms_norm|situ] [--eps E (1e-6)]\n"
               "               [--engine NAME] [--out-dtype f32|f16|bf16] [--epilogue fused|kitchen]\n"
               "               [--threads N] [--force]\n"
               "--epilogue kitchen: comfy-kitchen's eager epilogue (SPEC §1a); default fused (SPEC §1)\n"
               "--force: write the output even when it is the same file as FILE or X\n");
}

static int fail(const char *what, qmm_status st) {
    fprintf(stderr, "qmm run: %s: %s: %s\n", what, qmm_status_name(st), qmm_last_error());
    return 1;
}

int cmd_run(int argc, char **argv) {
    const char *path = NULL, *layer = NULL, *in = NULL, *out = NULL, *tname = NULL;
    qmm_act act = QMM_ACT_NONE;
    qmm_engine_id eng = QMM_ENGINE_AUTO;
    int out_dt = -1, threads = 0, force = 0;
    qmm_epilogue epi = QMM_EPILOGUE_FUSED;
    float eps = 1e-6f;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has = i + 1 < argc;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        else if (!strcmp(a, "--layer") && has) layer = argv[++i];
        else if (!strcmp(a, "--input") && has) in = argv[++i];
        else if (!strcmp(a, "--output") && has) out = argv[++i];
        else if (!strcmp(a, "--tensor") && has) tname = argv[++i];
        else if (!strcmp(a, "--force")) force = 1;
        else if (!strcmp(a, "--threads") && has) threads = atoi(argv[++i]);
        else if (!strcmp(a, "--act") && has) {
            act = qmm_act_from_name(argv[++i]);
            if (act == QMM_ACT_COUNT) { fprintf(stderr, "qmm run: --act %s\n", argv[i]); return 2; }
        } else if (!strcmp(a, "--eps") && has) {
            char *end;
            eps = strtof(argv[++i], &end);
            if (*end || !(eps >= 0.0f)) { fprintf(stderr, "qmm run: --eps %s\n", argv[i]); return 2; }
        } else if (!strcmp(a, "--engine") && has) {
            eng = qmm_engine_from_name(argv[++i]);
            if (eng == QMM_ENGINE_UNKNOWN) { fprintf(stderr, "qmm run: unknown engine '%s'\n", argv[i]); return 2; }
        } else if (!strcmp(a, "--epilogue") && has) {
            const char *v = argv[++i];
            if (!strcmp(v, "fused")) epi = QMM_EPILOGUE_FUSED;
            else if (!strcmp(v, "kitchen")) epi = QMM_EPILOGUE_KITCHEN;
            else { fprintf(stderr, "qmm run: --epilogue %s (fused or kitchen)\n", v); return 2; }
        } else if (!strcmp(a, "--out-dtype") && has) {
            const char *v = argv[++i];
            out_dt = !strcmp(v, "f32") ? QMM_F32 : !strcmp(v, "f16") ? QMM_F16 : !strcmp(v, "bf16") ? QMM_BF16 : -2;
            if (out_dt == -2) { fprintf(stderr, "qmm run: --out-dtype %s\n", v); return 2; }
        } else if (a[0] == '-') { fprintf(stderr, "qmm run: unknown option '%s'\n", a); usage(stderr); return 2; }
        else if (!path) path = a;
        else { fprintf(stderr, "qmm run: extra argument '%s'\n", a); return 2; }
    }
    if (!path || !layer || !in || !out) { usage(stderr); return 2; }
    if (!force && (cli_same_file(path, out) || cli_same_file(in, out))) {
        fprintf(stderr, "qmm run: --output %s is the same file as %s: refusing to replace it (--force to do it)\n", out,
                cli_same_file(path, out) ? path : in);
        return 1;
    }

    int rc = 1;
    qmm_model *m = NULL;
    qmm_st_file *xf = NULL;
    qmm_context *ctx = NULL;
    void *xcopy = NULL, *y = NULL;
    float *norm_w = NULL;
    qmm_status st = qmm_model_open(path, NULL, &m);
    if (st != QMM_OK) { rc = fail(path, st); goto done; }
    st = qmm_st_open(in, &xf);
    if (st != QMM_OK) { rc = fail(in, st); goto done; }
    const qmm_st_tensor *x = NULL;
    if (tname) {
        st = qmm_st_find(xf, tname, &x);
        if (st != QMM_OK) { rc = fail(in, st); goto done; }
    } else if (qmm_st_count(xf) == 1) {
        x = qmm_st_at(xf, 0);
    } else {
        fprintf(stderr, "qmm run: %s holds %zu tensors: name one with --tensor\n", in, qmm_st_count(xf));
        goto done;
    }
    int xdt = qmm_st_dtype_to_qmm(x->dtype);
    if (xdt != QMM_F32 && xdt != QMM_F16 && xdt != QMM_BF16) {
        fprintf(stderr, "qmm run: input '%s' is %s (needs F32, F16 or BF16)\n", x->name, qmm_st_dtype_name(x->dtype));
        goto done;
    }
    if (x->ndim < 1 || x->numel == 0) {
        fprintf(stderr, "qmm run: input '%s' has no rows\n", x->name);
        goto done;
    }
    const int64_t K_in = x->shape[x->ndim - 1], M = x->numel / K_in;
    qmm_context_options co = qmm_context_options_default();
    co.n_threads = threads;
    st = qmm_context_create(&co, &ctx);
    if (st != QMM_OK) { rc = fail("context", st); goto done; }
    const qmm_weight *w;
    st = qmm_model_weight(m, ctx, layer, &w);
    if (st != QMM_OK) { rc = fail(layer, st); goto done; }
    qmm_weight_info wi;
    qmm_weight_get_info(w, &wi);
    qmm_dtype ydt = out_dt >= 0 ? (qmm_dtype)out_dt : (qmm_dtype)xdt;
    /* copied out of the mapping (aligned; a file truncated underneath is an error, not SIGBUS) */
    xcopy = malloc(x->nbytes);
    if (!xcopy) { fprintf(stderr, "qmm run: out of memory\n"); goto done; }
    st = qmm_st_read(xf, x, 0, x->nbytes, xcopy);
    if (st != QMM_OK) { rc = fail(in, st); goto done; }
    const void *xd = xcopy;
    y = malloc((size_t)(M * wi.N) * qmm_dtype_size(ydt));
    if (!y) { fprintf(stderr, "qmm run: out of memory\n"); goto done; }
    qmm_linear_args a = qmm_linear_args_default();
    a.M = M;
    a.x = xd;
    a.x_dtype = (qmm_dtype)xdt;
    a.x_cols = K_in;
    a.y = y;
    a.y_dtype = ydt;
    a.act = act;
    a.engine = eng;
    a.epilogue = epi;
    if (act == QMM_ACT_RMS_NORM) {
        norm_w = malloc((size_t)wi.K * sizeof(float));
        if (!norm_w) { fprintf(stderr, "qmm run: out of memory\n"); goto done; }
        for (int64_t k = 0; k < wi.K; k++) norm_w[k] = 1.0f;
        a.act_weight = norm_w;
        a.act_weight_dtype = QMM_F32;
        a.act_eps = eps;
    }
    st = qmm_linear(ctx, w, &a);
    if (st != QMM_OK) { rc = fail(layer, st); goto done; }
    const qmm_engine_id ran = qmm_last_engine(ctx);
    /* an int8 weight run by a float engine is the W8A16 fallback */
    const int fb = wi.is_int8 && ran != QMM_ENGINE_REF && !qmm_engine_is_int8(ran);
    char w4[96] = "";
    if (wi.code_bits)
        snprintf(w4, sizeof w4, " (W%dA8, group %d%s)", wi.code_bits, wi.group_size, wi.has_codebook ? ", codebook" : "");
    fprintf(stderr, "qmm run: layer %s [%lld, %lld]%s, M=%lld, act %s: engine %s%s\n", layer, (long long)wi.N,
            (long long)wi.K, w4, (long long)M, qmm_act_name(act), qmm_engine_name(ran), fb ? " (fallback)" : "");

    qmm_st_tensor yt;
    memset(&yt, 0, sizeof yt);
    yt.name = "output";
    yt.dtype = qmm_st_dtype_from_qmm(ydt);
    yt.ndim = x->ndim;
    for (int d = 0; d < x->ndim - 1; d++) yt.shape[d] = x->shape[d];
    yt.shape[x->ndim - 1] = wi.N;
    yt.data = y;
    yt.nbytes = (size_t)(M * wi.N) * qmm_dtype_size(ydt);
    qmm_st_writer *wr = NULL;
    cli_guard_temporaries();   /* a signal or ulimit -f leaves no Y.qmm-tmp.* behind */
    st = qmm_st_writer_create(out, &wr);
    if (st == QMM_OK) st = qmm_st_writer_set_metadata(wr, "qmm_layer", layer);
    if (st == QMM_OK) st = qmm_st_writer_set_metadata(wr, "qmm_engine", qmm_engine_name(ran));
    if (st == QMM_OK) st = qmm_st_writer_declare(wr, yt.name, yt.dtype, yt.ndim, yt.shape);
    if (st == QMM_OK) st = qmm_st_writer_begin(wr);
    if (st == QMM_OK) st = qmm_st_writer_write(wr, yt.data, yt.nbytes);
    if (st == QMM_OK) st = qmm_st_writer_finish(wr);
    qmm_st_writer_destroy(wr);   /* removes the temporary file if anything failed */
    if (st != QMM_OK) { rc = fail(out, st); goto done; }
    rc = 0;
done:
    free(xcopy);
    free(y);
    free(norm_w);
    qmm_context_destroy(ctx);
    qmm_st_close(xf);
    qmm_model_close(m);
    return rc;
}
