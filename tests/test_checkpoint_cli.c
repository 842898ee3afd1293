/*
 * test_checkpoint_cli.c — the `qmm` CLI on checkpoints (registered with the binary's path in
 * QMM_CLI by tests/cli.cmake; skipped visibly without it):
 *   - `qmm quantize` writes a checkpoint the library reads (layers int8, groups auto);
 *   - `qmm inspect --json` and `qmm plan --json` print valid JSON (parsed with json-c) with
 *     the layers and the summary; `qmm plan --strict` exits 1 when nothing can run on int8
 *     (QMM_MAX_ISA=none) and 0 without --strict;
 *   - `qmm run` output equals the library call bit for bit: with --engine ref, with automatic
 *     dispatch (the same dispatch in both processes), with swiglu on a 3-D bf16 input and an
 *     f32 output;
 *   - exit statuses: 1 for a missing layer / malformed file, 2 for usage errors;
 *   - a FIFO as checkpoint, input or quantize source exits 1 at once (timeout-bounded);
 *   - an output that is the same file as an input (also through a symbolic link) is refused
 *     with exit 1 and the input untouched, unless --force;
 *   - SIGINT/SIGTERM/SIGHUP during quantize (of a 64 MB file, sent once its temporary file
 *     exists) and ulimit -f during quantize or run leave no temporary file;
 *   - a NaN weight scale: inspect lists the layer and row (text, JSON), plan says it cannot run;
 *   - a W4A8 checkpoint (asym_w4a8_int8, 4 and 6 bits): inspect's bits, group, codebook and bytes
 *     per weight, plan's weight line and verdict, run equal to the library call (also with
 *     --epilogue kitchen), quantize
 *     --format w4a8 refused with the reason.
 */
#define _POSIX_C_SOURCE 200809L
#include "qmm_io.h"
#include "testutil.h"

#include <json-c/json.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char g_dir[256];
static const char *g_cli;
static qmm_epilogue g_epi = QMM_EPILOGUE_FUSED;   /* the epilogue compare_run's library call uses */

static const char *P(const char *name) {
    static char buf[8][512];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", g_dir, name);
    return buf[k];
}

/* j[obj][key] is the integer want */
static int json_int_is(json_object *j, const char *obj, const char *key, int want) {
    json_object *o, *v;
    return j && json_object_object_get_ex(j, obj, &o) && json_object_object_get_ex(o, key, &v) &&
           json_object_get_int(v) == want;
}

/* runs "QMM_CLI args" (printf-style), returns the exit status */
static int cli(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int cli(const char *fmt, ...) {
    char args[2048], cmd[2600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "%s %s", g_cli, args);
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

static void make_inputs(void) {
    enum { N1 = 96, K = 256, N2 = 80 };
    float *w1 = malloc(N1 * K * 4), b1[N1];
    uint16_t *w2 = malloc(N2 * K * 2);
    tu_fill_float(w1, QMM_F32, N1 * K, 0.05f);
    tu_fill_float(b1, QMM_F32, N1, 0.1f);
    tu_fill_float(w2, QMM_BF16, N2 * K, 0.05f);
    qmm_st_tensor t[3] = {
        {.name = "blk.attn.proj.weight", .dtype = QMM_ST_F32, .ndim = 2, .shape = {N1, K}, .data = w1, .nbytes = N1 * K * 4},
        {.name = "blk.attn.proj.bias", .dtype = QMM_ST_F32, .ndim = 1, .shape = {N1}, .data = b1, .nbytes = N1 * 4},
        {.name = "blk.mlp.fc2.weight", .dtype = QMM_ST_BF16, .ndim = 2, .shape = {N2, K}, .data = w2, .nbytes = N2 * K * 2},
    };
    TU_CHECK_OK(qmm_st_save(P("float.safetensors"), t, 3, NULL));
    float *x = malloc(7 * K * 4);
    uint16_t *x2 = malloc(2 * 3 * 2 * K * 2);
    tu_fill_float(x, QMM_F32, 7 * K, 1.0f);
    tu_fill_float(x2, QMM_BF16, 2 * 3 * 2 * K, 1.0f);
    qmm_st_tensor xt = {.name = "x", .dtype = QMM_ST_F32, .ndim = 2, .shape = {7, K}, .data = x, .nbytes = 7 * K * 4};
    TU_CHECK_OK(qmm_st_save(P("x.safetensors"), &xt, 1, NULL));
    qmm_st_tensor xt2[2] = {
        {.name = "other", .dtype = QMM_ST_F32, .ndim = 1, .shape = {1}, .data = b1, .nbytes = 4},
        {.name = "hidden", .dtype = QMM_ST_BF16, .ndim = 3, .shape = {2, 3, 2 * K}, .data = x2, .nbytes = 2 * 3 * 2 * K * 2},
    };
    TU_CHECK_OK(qmm_st_save(P("x2.safetensors"), xt2, 2, NULL));
    free(w1);
    free(w2);
    free(x);
    free(x2);
}

/* y of `qmm run` (tensor "output" in ypath) against the library call */
static void compare_run(const char *ckpt, const char *layer, const char *xpath, const char *xname, qmm_act act,
                        qmm_engine_id eng, int out_f32, const char *ypath) {
    qmm_model *m = NULL;
    qmm_st_file *xf = NULL, *yf = NULL;
    qmm_context *ctx = NULL;
    TU_CHECK_OK(qmm_model_open(ckpt, NULL, &m));
    TU_CHECK_OK(qmm_st_open(xpath, &xf));
    TU_CHECK_OK(qmm_st_open(ypath, &yf));
    TU_CHECK_OK(qmm_context_create(NULL, &ctx));
    if (!m || !xf || !yf || !ctx) goto out;
    const qmm_st_tensor *x = qmm_st_get(xf, xname), *yt = qmm_st_get(yf, "output");
    const qmm_weight *w = NULL;
    TU_CHECK_OK(qmm_model_weight(m, ctx, layer, &w));
    if (!TU_CHECK(x && yt && w, "%s: input, output and weight present", layer)) goto out;
    qmm_weight_info wi;
    qmm_weight_get_info(w, &wi);
    int64_t K_in = x->shape[x->ndim - 1], M = x->numel / K_in;
    qmm_dtype xdt = (qmm_dtype)qmm_st_dtype_to_qmm(x->dtype), ydt = out_f32 ? QMM_F32 : xdt;
    size_t yb = (size_t)(M * wi.N) * qmm_dtype_size(ydt);
    void *xd = malloc(x->nbytes), *y = malloc(yb);
    memcpy(xd, x->data, x->nbytes);
    qmm_linear_args a = qmm_linear_args_default();
    a.M = M;
    a.x = xd;
    a.x_dtype = xdt;
    a.y = y;
    a.y_dtype = ydt;
    a.act = act;
    a.engine = eng;
    a.epilogue = g_epi;
    TU_CHECK_OK(qmm_linear(ctx, w, &a));
    /* `qmm run` names the engine that ran (qmm_last_engine): the one the library call just used */
    const char *ran = qmm_st_metadata_get(yf, "qmm_engine");
    TU_CHECK(ran && strcmp(ran, qmm_engine_name(qmm_last_engine(ctx))) == 0,
             "qmm run %s (engine %s): output names engine %s, the library ran %s", layer, qmm_engine_name(eng),
             ran ? ran : "(none)", qmm_engine_name(qmm_last_engine(ctx)));
    int shape_ok = yt->ndim == x->ndim && yt->shape[yt->ndim - 1] == wi.N && yt->dtype == qmm_st_dtype_from_qmm(ydt);
    size_t bad = (size_t)-1;
    for (size_t i = 0; shape_ok && i < yb && bad == (size_t)-1; i++)
        if (((const unsigned char *)yt->data)[i] != ((unsigned char *)y)[i]) bad = i / qmm_dtype_size(ydt);
    TU_CHECK(shape_ok && yt->nbytes == yb && bad == (size_t)-1,
             "qmm run %s (engine %s, act %s): output differs from the library call: M=%lld N=%lld K=%lld, first bad index %lld",
             layer, qmm_engine_name(eng), qmm_act_name(act), (long long)M, (long long)wi.N, (long long)wi.K,
             bad == (size_t)-1 ? -1LL : (long long)bad);
    free(xd);
    free(y);
out:
    qmm_context_destroy(ctx);
    qmm_st_close(xf);
    qmm_st_close(yf);
    qmm_model_close(m);
}

/* A FIFO given as any file argument: exit 1 at once, never a hang (timeout(1) bounds each call:
 * a hang exits 124 and fails the check). */
static void test_fifo(const char *ckpt) {
    const char *fifo = P("fifo.safetensors");
    if (mkfifo(fifo, 0600) != 0) {
        tu_skip("CLI on a FIFO", "mkfifo failed");
        return;
    }
    char saved[600], env_cli[700];
    snprintf(saved, sizeof saved, "%s", g_cli);
    snprintf(env_cli, sizeof env_cli, "timeout 10 %s", saved);
    g_cli = env_cli;
    TU_CHECK(cli("inspect %s 2>/dev/null", fifo) == 1, "inspect FIFO exits 1");
    TU_CHECK(cli("plan %s 2>/dev/null", fifo) == 1, "plan FIFO exits 1");
    TU_CHECK(cli("quantize %s %s 2>/dev/null", fifo, P("fifo_out.safetensors")) == 1, "quantize FIFO exits 1");
    TU_CHECK(cli("run %s --layer blk.attn.proj --input %s --output %s 2>/dev/null", ckpt, fifo, P("fifo_y.safetensors")) == 1,
             "run --input FIFO exits 1");
    TU_CHECK(cli("run %s --layer blk.attn.proj --input %s --output %s 2>/dev/null", fifo, P("x.safetensors"),
                 P("fifo_y.safetensors")) == 1, "run on a FIFO checkpoint exits 1");
    g_cli = getenv("QMM_CLI");
    unlink(fifo);
}

/* entries of the test folder whose name starts with prefix and contains "tmp" */
static int count_tmp(const char *prefix) {
    DIR *d = opendir(g_dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += !strncmp(e->d_name, prefix, strlen(prefix)) && strstr(e->d_name + strlen(prefix), "tmp") != NULL;
    if (d) closedir(d);
    return n;
}

/* SIGINT / SIGTERM / SIGHUP while `qmm quantize` writes: the process dies of the signal and leaves
 * neither OUT nor OUT.qmm-tmp.*; a file size limit (ulimit -f) during quantize or run: exit 1, no
 * temporary file. The signal is sent once the temporary file exists (polled, bounded). */
static void test_signals(void) {
    enum { N = 2048, K = 4096 };
    float *w = malloc((size_t)N * K * 4);
    if (!w) return;
    for (size_t i = 0; i < (size_t)N * K; i++) w[i] = (float)((int)(i * 2654435761u % 2001) - 1000) * 1e-4f;
    qmm_st_tensor t[2] = {
        {.name = "a.fc.weight", .dtype = QMM_ST_F32, .ndim = 2, .shape = {N, K}, .data = w, .nbytes = (size_t)N * K * 4},
        {.name = "b.fc.weight", .dtype = QMM_ST_F32, .ndim = 2, .shape = {N, K}, .data = w, .nbytes = (size_t)N * K * 4},
    };
    const char *big = P("big.safetensors");
    char bigp[512];
    snprintf(bigp, sizeof bigp, "%s", big);
    TU_CHECK_OK(qmm_st_save(bigp, t, 2, NULL));
    free(w);
    const char *cli_path = getenv("QMM_CLI");
    const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        char out[512];
        snprintf(out, sizeof out, "%s", P("out_sig.safetensors"));
        pid_t pid = fork();
        if (pid == 0) {
            int dn = open("/dev/null", O_WRONLY);
            dup2(dn, 1);
            dup2(dn, 2);
            execl(cli_path, cli_path, "quantize", bigp, out, "--min-size", "64", (char *)NULL);
            _exit(127);
        }
        int seen = 0, status = 0, done = 0;
        for (int k = 0; k < 60000 && !seen && !done; k++) {   /* up to 60 s */
            seen = count_tmp("out_sig.safetensors.") > 0;
            if (!seen) {
                done = waitpid(pid, &status, WNOHANG) == pid;
                nanosleep(&(struct timespec){0, 1000000}, NULL);
            }
        }
        if (seen) {
            kill(pid, sigs[i]);
            waitpid(pid, &status, 0);
        } else if (!done) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
        }
        TU_CHECK(seen, "signal %d: the temporary file of a running quantize was seen", sigs[i]);
        TU_CHECK(seen && WIFSIGNALED(status) && WTERMSIG(status) == sigs[i], "signal %d: quantize died of it (status %#x)",
                 sigs[i], status);
        TU_CHECK(count_tmp("out_sig.safetensors.") == 0 && access(out, F_OK) != 0,
                 "signal %d: no temporary file and no output left", sigs[i]);
        char cmd[1200];
        snprintf(cmd, sizeof cmd, "rm -f %s/out_sig.safetensors*", g_dir);
        if (system(cmd) != 0) tu_note("could not clean %s", g_dir);
    }
    /* ulimit -f (512-byte blocks in sh): the write fails, exit 1, nothing left */
    char cmd[1600];
    snprintf(cmd, sizeof cmd, "ulimit -f 16; exec %s quantize %s %s --min-size 64 >/dev/null 2>%s", cli_path, bigp,
             P("out_fsz.safetensors"), P("fsz.err"));
    int rc = system(cmd);
    TU_CHECK(WIFEXITED(rc) && WEXITSTATUS(rc) == 1, "quantize over ulimit -f exits 1 (status %#x)", rc);
    TU_CHECK(count_tmp("out_fsz.safetensors.") == 0 && access(P("out_fsz.safetensors"), F_OK) != 0,
             "quantize over ulimit -f leaves no temporary file");
    snprintf(cmd, sizeof cmd, "ulimit -f 1; exec %s run %s --layer blk.attn.proj --input %s --output %s >/dev/null 2>&1",
             cli_path, P("int8.safetensors"), P("x.safetensors"), P("y_fsz.safetensors"));
    rc = system(cmd);
    TU_CHECK(WIFEXITED(rc) && WEXITSTATUS(rc) == 1, "run over ulimit -f exits 1 (status %#x)", rc);
    TU_CHECK(count_tmp("y_fsz.safetensors.") == 0 && access(P("y_fsz.safetensors"), F_OK) != 0,
             "run over ulimit -f leaves no temporary file");
    unlink(bigp);
}

/* A layer whose weight scale of row 3 is NaN: inspect lists it (text and JSON "problem") and
 * still exits 0; plan says it cannot run; run exits 1. */
static void test_inspect_bad_numbers(void) {
    enum { N = 8, K = 64 };
    int8_t wq[N * K];
    float sc[N];
    tu_fill_i8(wq, N * K, -127, 127);
    for (int i = 0; i < N; i++) sc[i] = 0.01f;
    uint32_t nan_bits = 0x7fc00000u;
    memcpy(&sc[3], &nan_bits, 4);
    const char *cq = "{\"format\": \"int8_tensorwise\"}";
    qmm_st_tensor t[3] = {
        {.name = "blk.bad.weight", .dtype = QMM_ST_I8, .ndim = 2, .shape = {N, K}, .data = wq, .nbytes = N * K},
        {.name = "blk.bad.weight_scale", .dtype = QMM_ST_F32, .ndim = 1, .shape = {N}, .data = sc, .nbytes = sizeof sc},
        {.name = "blk.bad.comfy_quant", .dtype = QMM_ST_U8, .ndim = 1, .shape = {(int64_t)strlen(cq)}, .data = cq,
         .nbytes = strlen(cq)},
    };
    char ck[512];
    snprintf(ck, sizeof ck, "%s", P("badscale.safetensors"));
    TU_CHECK_OK(qmm_st_save(ck, t, 3, NULL));
    TU_CHECK(cli("inspect %s --json > %s", ck, P("bad.json")) == 0, "inspect of a NaN-scale checkpoint exits 0");
    json_object *j = json_object_from_file(P("bad.json")), *layers, *l0, *prob;
    int ok = j && json_object_object_get_ex(j, "layers", &layers) && (l0 = json_object_array_get_idx(layers, 0)) &&
             json_object_object_get_ex(l0, "problem", &prob) && json_object_is_type(prob, json_type_string) &&
             strstr(json_object_get_string(prob), "row 3") && strstr(json_object_get_string(prob), "NaN");
    TU_CHECK(ok, "inspect --json: the layer's problem names row 3 and NaN");
    TU_CHECK(json_int_is(j, "totals", "bad_layers", 1), "inspect --json: totals.bad_layers = 1");
    json_object_put(j);
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "%s inspect %s | grep -q 'BAD NUMBERS'", g_cli, ck);
    TU_CHECK(system(cmd) == 0, "inspect lists the layer under BAD NUMBERS");
    snprintf(cmd, sizeof cmd, "%s plan %s | grep -q 'blk.bad.*cannot run.*row 3'", g_cli, ck);
    TU_CHECK(system(cmd) == 0, "plan: the layer cannot run, naming row 3");
    float x[2 * K];
    tu_fill_float(x, QMM_F32, 2 * K, 1.0f);
    qmm_st_tensor xt = {.name = "x", .dtype = QMM_ST_F32, .ndim = 2, .shape = {2, K}, .data = x, .nbytes = sizeof x};
    char xp[512];
    snprintf(xp, sizeof xp, "%s", P("x64.safetensors"));
    TU_CHECK_OK(qmm_st_save(xp, &xt, 1, NULL));
    snprintf(cmd, sizeof cmd, "%s run %s --layer blk.bad --input %s --output %s 2>&1 | grep -q 'row 3'", g_cli, ck, xp,
             P("y_bad.safetensors"));
    TU_CHECK(system(cmd) == 0 && access(P("y_bad.safetensors"), F_OK) != 0, "run of the layer fails naming row 3");
}

/* A W4A8 checkpoint (asym_w4a8_int8: a 4-bit layer with a codebook and a bias, a 6-bit one):
 * inspect --json gives bits, group, codebook and bytes per weight; plan --json the weight line
 * (decoded into the int8 engine's panels) and verdict int8; qmm run equals the library call with
 * --engine ref and under dispatch; quantize --format w4a8 is refused naming the reason. */
static void test_w4a8(void) {
    enum { N1 = 48, K1 = 256, N2 = 40, K2 = 128 };
    uint8_t c1[N1 * K1 / 2], c2[N2 * K2 * 3 / 4], r1[N1 * K1 / 16], r2[N2 * K2 / 32];
    float s1[N1], s2[N2], cb[16], b1[N1];
    for (size_t i = 0; i < sizeof c1; i++) c1[i] = (uint8_t)tu_rand_int(0, 255);
    for (size_t i = 0; i < sizeof c2; i++) c2[i] = (uint8_t)tu_rand_int(0, 255);
    for (size_t i = 0; i < sizeof r1; i++) r1[i] = (uint8_t)tu_rand_int(0x50, 0x6e);
    for (size_t i = 0; i < sizeof r2; i++) r2[i] = (uint8_t)tu_rand_int(0x18, 0x28);
    for (int i = 0; i < N1; i++) s1[i] = 1e-3f * (float)tu_rand_int(1, 9);
    for (int i = 0; i < N2; i++) s2[i] = 1e-3f * (float)tu_rand_int(1, 9);
    for (int i = 0; i < 16; i++) cb[i] = ((float)i - 7.5f) / 7.5f;
    tu_fill_float(b1, QMM_F32, N1, 0.1f);
    const char *q1 = "{\"format\": \"asym_w4a8_int8\", \"group_size\": 16, \"convrot_groupsize\": 256}";
    const char *q2 = "{\"format\": \"asym_w4a8_int8\", \"group_size\": 32, \"convrot_groupsize\": 64}";
    qmm_st_tensor t[9] = {
        {.name = "w4.fc.weight", .dtype = QMM_ST_I8, .ndim = 2, .shape = {N1, K1 / 2}, .data = c1, .nbytes = sizeof c1},
        {.name = "w4.fc.weight_s_rel", .dtype = QMM_ST_U8, .ndim = 2, .shape = {N1, K1 / 16}, .data = r1, .nbytes = sizeof r1},
        {.name = "w4.fc.weight_s_channel", .dtype = QMM_ST_F32, .ndim = 1, .shape = {N1}, .data = s1, .nbytes = sizeof s1},
        {.name = "w4.fc.weight_codebook", .dtype = QMM_ST_F32, .ndim = 1, .shape = {16}, .data = cb, .nbytes = sizeof cb},
        {.name = "w4.fc.bias", .dtype = QMM_ST_F32, .ndim = 1, .shape = {N1}, .data = b1, .nbytes = sizeof b1},
        {.name = "w4.fc.comfy_quant", .dtype = QMM_ST_U8, .ndim = 1, .shape = {(int64_t)strlen(q1)}, .data = q1,
         .nbytes = strlen(q1)},
        {.name = "w6.fc.weight", .dtype = QMM_ST_I8, .ndim = 2, .shape = {N2, K2 * 3 / 4}, .data = c2, .nbytes = sizeof c2},
        {.name = "w6.fc.weight_s_rel", .dtype = QMM_ST_F8_E4M3, .ndim = 2, .shape = {N2, K2 / 32}, .data = r2,
         .nbytes = sizeof r2},
        {.name = "w6.fc.weight_s_channel", .dtype = QMM_ST_F32, .ndim = 1, .shape = {N2}, .data = s2, .nbytes = sizeof s2},
    };
    qmm_st_tensor t6q = {.name = "w6.fc.comfy_quant", .dtype = QMM_ST_U8, .ndim = 1, .shape = {(int64_t)strlen(q2)},
                         .data = q2, .nbytes = strlen(q2)};
    qmm_st_tensor all[10];
    memcpy(all, t, sizeof t);
    all[9] = t6q;
    char ck[512];
    snprintf(ck, sizeof ck, "%s", P("w4a8.safetensors"));
    TU_CHECK_OK(qmm_st_save(ck, all, 10, NULL));
    TU_CHECK(cli("inspect %s --json > %s", ck, P("w4.json")) == 0, "inspect of a W4A8 checkpoint exits 0");
    json_object *j = json_object_from_file(P("w4.json")), *layers = NULL;
    TU_CHECK(j && json_object_object_get_ex(j, "layers", &layers) && json_object_array_length(layers) == 2,
             "inspect --json: 2 layers");
    /* bytes per weight: codes + s_rel + s_channel + codebook (no bias) over N·K */
    const double bpw[2] = {(double)(sizeof c1 + sizeof r1 + sizeof s1 + sizeof cb) / (N1 * K1),
                           (double)(sizeof c2 + sizeof r2 + sizeof s2) / (N2 * K2)};
    const int want_bits[2] = {4, 6}, want_g[2] = {16, 32}, want_cb[2] = {1, 0};
    for (int i = 0; layers && i < 2; i++) {
        json_object *l = json_object_array_get_idx(layers, (size_t)i), *w4, *kind, *bits, *g, *c, *b, *sr;
        int ok = l && json_object_object_get_ex(l, "kind", &kind) && !strcmp(json_object_get_string(kind), "w4a8") &&
                 json_object_object_get_ex(l, "w4a8", &w4) && json_object_is_type(w4, json_type_object) &&
                 json_object_object_get_ex(w4, "bits", &bits) && json_object_get_int(bits) == want_bits[i] &&
                 json_object_object_get_ex(w4, "group_size", &g) && json_object_get_int(g) == want_g[i] &&
                 json_object_object_get_ex(w4, "codebook", &c) && json_object_get_boolean(c) == want_cb[i] &&
                 json_object_object_get_ex(w4, "s_rel_dtype", &sr) && !strcmp(json_object_get_string(sr), "F8_E4M3") &&
                 json_object_object_get_ex(w4, "bytes_per_weight", &b) &&
                 fabs(json_object_get_double(b) - bpw[i]) < 1e-5 * bpw[i];
        TU_CHECK(ok, "inspect --json: W4A8 layer %d: kind w4a8, bits %d, group %d, codebook %d, %.6f bytes per weight: %s", i,
                 want_bits[i], want_g[i], want_cb[i], bpw[i], l ? json_object_to_json_string(l) : "(none)");
    }
    TU_CHECK(json_int_is(j, "totals", "w4a8_layers", 2), "inspect --json: totals.w4a8_layers = 2");
    json_object_put(j);
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "%s inspect %s | grep -q 'w6.fc  *6  *32 F8_E4M3 no '", g_cli, ck);
    TU_CHECK(system(cmd) == 0, "inspect text: the W4A8 section lists w6.fc with bits, group, s_rel and codebook");
    TU_CHECK(cli("plan %s --tokens 9 --json > %s", ck, P("w4plan.json")) == 0, "plan of a W4A8 checkpoint exits 0");
    j = json_object_from_file(P("w4plan.json"));
    layers = NULL;
    TU_CHECK(j && json_object_object_get_ex(j, "layers", &layers) && json_object_array_length(layers) == 2,
             "plan --json: 2 layers");
    for (int i = 0; layers && i < 2; i++) {
        json_object *l = json_object_array_get_idx(layers, (size_t)i), *w, *kind, *vd, *fb, *eng, *rg;
        const int fallback = l && json_object_object_get_ex(l, "fallback", &fb) && json_object_get_boolean(fb);
        int ok = l && json_object_object_get_ex(l, "kind", &kind) && !strcmp(json_object_get_string(kind), "w4a8") &&
                 json_object_object_get_ex(l, "weight", &w) && json_object_is_type(w, json_type_string) &&
                 strstr(json_object_get_string(w), i ? "W6A8: 6-bit codes, group 32" : "W4A8: 4-bit codes + codebook, group 16") &&
                 strstr(json_object_get_string(w), fallback ? "fallback's n16k4 blocks" : "into the int8 engine's ") &&
                 json_object_object_get_ex(l, "verdict", &vd) &&
                 !strcmp(json_object_get_string(vd), fallback ? "fallback" : "int8") &&
                 json_object_object_get_ex(l, "engine", &eng) && json_object_object_get_ex(l, "regime", &rg) &&
                 json_object_is_type(rg, json_type_string) && /* a regime name on amx_int8 only */
                 (json_object_get_string_len(rg) > 0) == !strcmp(json_object_get_string(eng), "amx_int8");
        TU_CHECK(ok, "plan --json: W4A8 layer %d: kind, weight line, verdict, regime: %s", i,
                 l ? json_object_to_json_string(l) : "(none)");
    }
    json_object_put(j);
    snprintf(cmd, sizeof cmd, "%s plan %s | grep -q '    weight: W4A8: 4-bit codes + codebook, group 16, s_rel f8_e4m3'",
             g_cli, ck);
    TU_CHECK(system(cmd) == 0, "plan text: the weight line of w4.fc");
    float x1[5 * K1];
    uint16_t x2[2 * 3 * K2];
    tu_fill_float(x1, QMM_F32, 5 * K1, 1.0f);
    tu_fill_float(x2, QMM_BF16, 2 * 3 * K2, 1.0f);
    qmm_st_tensor xt1 = {.name = "x", .dtype = QMM_ST_F32, .ndim = 2, .shape = {5, K1}, .data = x1, .nbytes = sizeof x1};
    qmm_st_tensor xt2 = {.name = "x", .dtype = QMM_ST_BF16, .ndim = 3, .shape = {2, 3, K2}, .data = x2, .nbytes = sizeof x2};
    char xp1[512], xp2[512];
    snprintf(xp1, sizeof xp1, "%s", P("xw4.safetensors"));
    snprintf(xp2, sizeof xp2, "%s", P("xw6.safetensors"));
    TU_CHECK_OK(qmm_st_save(xp1, &xt1, 1, NULL));
    TU_CHECK_OK(qmm_st_save(xp2, &xt2, 1, NULL));
    TU_CHECK(cli("run %s --layer w4.fc --input %s --output %s --engine ref 2>/dev/null", ck, xp1, P("yw4_ref.safetensors")) == 0,
             "qmm run W4A8 --engine ref");
    compare_run(ck, "w4.fc", xp1, "x", QMM_ACT_NONE, QMM_ENGINE_REF, 0, P("yw4_ref.safetensors"));
    TU_CHECK(cli("run %s --layer w4.fc --input %s --output %s 2>%s", ck, xp1, P("yw4.safetensors"), P("yw4.err")) == 0,
             "qmm run W4A8 (auto)");
    compare_run(ck, "w4.fc", xp1, "x", QMM_ACT_NONE, QMM_ENGINE_AUTO, 0, P("yw4.safetensors"));
    TU_CHECK(cli("run %s --layer w4.fc --input %s --output %s --epilogue kitchen 2>/dev/null", ck, xp1,
                 P("yw4_k.safetensors")) == 0, "qmm run W4A8 --epilogue kitchen");
    g_epi = QMM_EPILOGUE_KITCHEN;
    compare_run(ck, "w4.fc", xp1, "x", QMM_ACT_NONE, QMM_ENGINE_AUTO, 0, P("yw4_k.safetensors"));
    g_epi = QMM_EPILOGUE_FUSED;
    TU_CHECK(cli("run %s --layer w4.fc --input %s --output %s --epilogue odd 2>/dev/null", ck, xp1, P("yw4_o.safetensors")) == 2,
             "qmm run --epilogue odd exits 2");
    snprintf(cmd, sizeof cmd, "grep -q 'layer w4.fc \\[48, 256\\] (W4A8, group 16, codebook)' %s", P("yw4.err"));
    TU_CHECK(system(cmd) == 0, "qmm run names the W4A8 layer on stderr");
    TU_CHECK(cli("run %s --layer w6.fc --input %s --output %s --out-dtype f32 2>/dev/null", ck, xp2, P("yw6.safetensors")) == 0,
             "qmm run W6A8 (auto, 3-D bf16 input, f32 output)");
    compare_run(ck, "w6.fc", xp2, "x", QMM_ACT_NONE, QMM_ENGINE_AUTO, 1, P("yw6.safetensors"));
    snprintf(cmd, sizeof cmd, "%s quantize %s %s --format w4a8 2>&1 | grep -q 'cannot be matched bit for bit'", g_cli,
             P("float.safetensors"), P("zw4.safetensors"));
    TU_CHECK(system(cmd) == 0 && access(P("zw4.safetensors"), F_OK) != 0, "quantize --format w4a8 is refused with the reason");
    TU_CHECK(cli("quantize %s %s --format w4a8 2>/dev/null", P("float.safetensors"), P("zw4.safetensors")) == 1,
             "quantize --format w4a8 exits 1");
    TU_CHECK(cli("quantize %s %s --format nvfp4 2>/dev/null", P("float.safetensors"), P("zw4.safetensors")) == 2,
             "quantize --format nvfp4 exits 2");
}

static int same_bytes(const char *a, const char *b) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "cmp -s '%s' '%s'", a, b);
    return system(cmd) == 0;
}

/* An output that is the same file as an input is refused (exit 1, the input untouched) unless
 * --force; a symbolic link to the input counts as the same file. */
static void test_output_over_input(const char *ckpt) {
    char cmd[1600];
    const char *fl = P("float.safetensors"), *fl_copy = P("float_copy.safetensors"), *ck_copy = P("ckpt_copy.safetensors"),
               *x_copy = P("x_copy.safetensors"), *link = P("float_link.safetensors");
    snprintf(cmd, sizeof cmd, "cp '%s' '%s' && cp '%s' '%s' && cp '%s' '%s' && ln -sf '%s' '%s'", fl, fl_copy, ckpt, ck_copy,
             P("x.safetensors"), x_copy, fl_copy, link);
    if (!TU_CHECK(system(cmd) == 0, "copies for the output-over-input checks")) return;
    TU_CHECK(cli("quantize %s %s --min-size 64 >/dev/null 2>&1", fl_copy, fl_copy) == 1 && same_bytes(fl, fl_copy),
             "quantize IN IN refused, IN untouched");
    TU_CHECK(cli("quantize %s %s --min-size 64 >/dev/null 2>&1", fl_copy, link) == 1 && same_bytes(fl, fl_copy),
             "quantize IN LINK-TO-IN refused");
    TU_CHECK(cli("run %s --layer blk.attn.proj --input %s --output %s 2>/dev/null", ck_copy, x_copy, ck_copy) == 1 &&
                 same_bytes(ckpt, ck_copy), "run --output CHECKPOINT refused, checkpoint untouched");
    TU_CHECK(cli("run %s --layer blk.attn.proj --input %s --output %s 2>/dev/null", ck_copy, x_copy, x_copy) == 1 &&
                 same_bytes(P("x.safetensors"), x_copy), "run --output INPUT refused, input untouched");
    TU_CHECK(cli("run %s --layer blk.attn.proj --input %s --output %s --force 2>/dev/null", ck_copy, x_copy, x_copy) == 0 &&
                 !same_bytes(P("x.safetensors"), x_copy), "run --output INPUT --force replaces it");
    TU_CHECK(cli("quantize %s %s --min-size 64 --force >/dev/null 2>&1", fl_copy, fl_copy) == 0 && !same_bytes(fl, fl_copy),
             "quantize IN IN --force replaces it");
}

int main(int argc, char **argv) {
    tu_init(argc, argv, "test_checkpoint_cli");
    g_cli = getenv("QMM_CLI");
    if (!g_cli || !*g_cli) {
        tu_skip("qmm CLI", "QMM_CLI is not set (tests/cli.cmake sets it to the built qmm)");
        return tu_finish();
    }
    snprintf(g_dir, sizeof g_dir, "/tmp/qmm_test_cli_XXXXXX");
    if (!mkdtemp(g_dir)) return 1;
    make_inputs();
    const char *q = P("int8.safetensors");
    char qpath[512];
    snprintf(qpath, sizeof qpath, "%s", q);
    TU_CHECK(cli("quantize %s %s --min-size 64 >/dev/null", P("float.safetensors"), qpath) == 0, "qmm quantize");

    TU_CHECK(cli("inspect %s --json --tensors > %s", qpath, P("inspect.json")) == 0, "qmm inspect --json");
    json_object *j = json_object_from_file(P("inspect.json")), *layers, *v;
    TU_CHECK(j && json_object_object_get_ex(j, "layers", &layers) && json_object_array_length(layers) == 2,
             "inspect JSON has 2 layers");
    if (j && json_object_object_get_ex(j, "totals", &v)) {
        json_object *n;
        TU_CHECK(json_object_object_get_ex(v, "int8_layers", &n) && json_object_get_int(n) == 2, "2 int8 layers");
    }
    json_object_put(j);
    TU_CHECK(cli("inspect %s > /dev/null", qpath) == 0, "qmm inspect");

    TU_CHECK(cli("plan %s --tokens 17 --json > %s", qpath, P("plan.json")) == 0, "qmm plan --json");
    j = json_object_from_file(P("plan.json"));
    TU_CHECK(j && json_object_object_get_ex(j, "summary", &v) && json_object_object_get_ex(j, "layers", &layers) &&
                 json_object_array_length(layers) == 2,
             "plan JSON has the layers and a summary");
    json_object_put(j);
    TU_CHECK(cli("plan %s --act swiglu --act-layers '*.fc2' > /dev/null", qpath) == 0, "qmm plan --act-layers");
    TU_CHECK(system("true") == 0 && cli("plan %s --strict > /dev/null 2>&1", qpath) <= 1, "qmm plan --strict runs");
    char env_cli[600];
    snprintf(env_cli, sizeof env_cli, "QMM_MAX_ISA=none %s", g_cli);
    const char *saved = g_cli;
    g_cli = env_cli;
    TU_CHECK(cli("plan %s --strict > /dev/null", qpath) == 1, "qmm plan --strict exits 1 when no int8 engine runs");
    TU_CHECK(cli("plan %s > /dev/null", qpath) == 0, "qmm plan without --strict exits 0");
    g_cli = saved;

    TU_CHECK(cli("run %s --layer blk.attn.proj --input %s --output %s --engine ref 2>/dev/null", qpath, P("x.safetensors"),
                 P("y_ref.safetensors")) == 0, "qmm run --engine ref");
    compare_run(qpath, "blk.attn.proj", P("x.safetensors"), "x", QMM_ACT_NONE, QMM_ENGINE_REF, 0, P("y_ref.safetensors"));
    TU_CHECK(cli("run %s --layer blk.attn.proj --input %s --output %s 2>/dev/null", qpath, P("x.safetensors"),
                 P("y_auto.safetensors")) == 0, "qmm run (auto)");
    compare_run(qpath, "blk.attn.proj", P("x.safetensors"), "x", QMM_ACT_NONE, QMM_ENGINE_AUTO, 0, P("y_auto.safetensors"));
    TU_CHECK(cli("run %s --layer blk.mlp.fc2 --input %s --tensor hidden --act swiglu --out-dtype f32 --output %s 2>/dev/null",
                 qpath, P("x2.safetensors"), P("y_sw.safetensors")) == 0, "qmm run --act swiglu");
    compare_run(qpath, "blk.mlp.fc2", P("x2.safetensors"), "hidden", QMM_ACT_SWIGLU, QMM_ENGINE_AUTO, 1, P("y_sw.safetensors"));

    TU_CHECK(cli("run %s --layer nope --input %s --output %s 2>/dev/null", qpath, P("x.safetensors"), P("y.safetensors")) == 1,
             "missing layer exits 1");
    TU_CHECK(cli("run %s --layer blk.mlp.fc2 --input %s --output %s 2>/dev/null", qpath, P("x2.safetensors"),
                 P("y.safetensors")) == 1, "two input tensors without --tensor exits 1");
    TU_CHECK(cli("inspect %s 2>/dev/null", P("x_missing.safetensors")) == 1, "missing file exits 1");
    FILE *bad = fopen(P("bad.safetensors"), "wb");
    if (bad) { fwrite("\x10\0\0\0\0\0\0\0{\"a\":", 1, 13, bad); fclose(bad); }
    TU_CHECK(cli("inspect %s 2>/dev/null", P("bad.safetensors")) == 1, "malformed file exits 1");
    TU_CHECK(cli("quantize 2>/dev/null") == 2, "quantize without arguments exits 2");
    TU_CHECK(cli("plan %s --tokens 0 2>/dev/null", qpath) == 2, "plan --tokens 0 exits 2");
    TU_CHECK(cli("quantize %s %s --convrot 32 2>/dev/null", P("float.safetensors"), P("z.safetensors")) == 2,
             "quantize --convrot 32 exits 2");

    test_fifo(qpath);
    test_output_over_input(qpath);
    test_signals();
    test_inspect_bad_numbers();
    test_w4a8();

    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd) != 0) printf("# could not remove %s\n", g_dir);
    return tu_finish();
}
