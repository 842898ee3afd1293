/*
 * cmd_plan.c — `qmm plan FILE [--tokens M] [--x-dtype bf16|f16|f32] [--act none|swiglu|gelu_tanh|rms_norm|situ]
 * [--act-layers GLOB] [--layers GLOB] [--strict] [--json]`: for each layer of a checkpoint, the
 * engine qmm_linear would pick for M tokens (qmm_plan), with its regime where it has one (amx_int8:
 * decode, panel, blocked; JSON "regime", "" for the others), and every refused engine's reason; then a
 * summary: int8 layers on an int8 engine (the hard path; W4A8 layers count here), int8 layers that
 * would fall back to a float engine, float layers, and layers that cannot run (unsupported format,
 * no engine). A W4A8 layer (SPEC §11) also gets the plan's weight line (qmm_plan_info.weight: code
 * bits, codebook, group, s_rel dtype, and where the chosen engine decodes the codes — the int8
 * engine's per-call panels, or the float fallback's blocks); JSON: "weight", null for the others.
 * Each layer is packed, planned and freed in turn (memory ≈ one layer). --act applies to the
 * layers matching --act-layers (default: all), e.g. --act swiglu --act-layers '*.mlp.fc2'.
 * Exit status: 0; 1 on a read error, or with --strict if any layer would fall back or cannot run.
 */
#define _POSIX_C_SOURCE 200809L
#include "commands.h"
#include "qmm_io.h"

#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void json_str(const char *s) {
    putchar('"');
    for (const unsigned char *p = (const unsigned char *)s; p && *p; p++) {
        if (*p == '"' || *p == '\\') printf("\\%c", *p);
        else if (*p < 0x20) printf("\\u%04x", *p);
        else putchar(*p);
    }
    putchar('"');
}

static void usage(FILE *f) {
    fprintf(f, "usage: qmm plan FILE.safetensors [--tokens M (256)] [--x-dtype bf16|f16|f32 (bf16)]\n"
               "                [--act none|swiglu|gelu_tanh|rms_norm|situ] [--act-layers GLOB] [--layers GLOB] [--strict] [--json]\n");
}

static int parse_dtype(const char *s, qmm_dtype *out) {
    if (!strcmp(s, "bf16")) *out = QMM_BF16;
    else if (!strcmp(s, "f16")) *out = QMM_F16;
    else if (!strcmp(s, "f32")) *out = QMM_F32;
    else return 0;
    return 1;
}

int cmd_plan(int argc, char **argv) {
    const char *path = NULL, *act_glob = NULL, *layers_glob = NULL;
    long long M = 256;
    int strict = 0, json = 0;
    qmm_dtype xdt = QMM_BF16;
    qmm_act act = QMM_ACT_NONE;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has = i + 1 < argc;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        else if (!strcmp(a, "--strict")) strict = 1;
        else if (!strcmp(a, "--json")) json = 1;
        else if (!strcmp(a, "--tokens") && has) {
            char *end;
            M = strtoll(argv[++i], &end, 10);
            if (*end || M < 1) { fprintf(stderr, "qmm plan: --tokens %s\n", argv[i]); return 2; }
        } else if (!strcmp(a, "--x-dtype") && has) {
            if (!parse_dtype(argv[++i], &xdt)) { fprintf(stderr, "qmm plan: --x-dtype %s\n", argv[i]); return 2; }
        } else if (!strcmp(a, "--act") && has) {
            act = qmm_act_from_name(argv[++i]);
            if (act == QMM_ACT_COUNT) { fprintf(stderr, "qmm plan: --act %s\n", argv[i]); return 2; }
        } else if (!strcmp(a, "--act-layers") && has) act_glob = argv[++i];
        else if (!strcmp(a, "--layers") && has) layers_glob = argv[++i];
        else if (a[0] == '-') { fprintf(stderr, "qmm plan: unknown option '%s'\n", a); usage(stderr); return 2; }
        else if (!path) path = a;
        else { fprintf(stderr, "qmm plan: extra argument '%s'\n", a); return 2; }
    }
    if (!path) { usage(stderr); return 2; }
    qmm_model_options mo = qmm_model_options_default();
    mo.allow_unsupported = 1;
    qmm_model *m;
    qmm_status st = qmm_model_open(path, &mo, &m);
    if (st != QMM_OK) {
        fprintf(stderr, "qmm plan: %s: %s\n", qmm_status_name(st), qmm_last_error());
        return 1;
    }
    qmm_context *ctx;
    st = qmm_context_create(NULL, &ctx);
    if (st != QMM_OK) {
        fprintf(stderr, "qmm plan: %s: %s\n", qmm_status_name(st), qmm_last_error());
        qmm_model_close(m);
        return 1;
    }
    int n_hard = 0, n_fallback = 0, n_float = 0, n_bad = 0, first = 1;
    if (json) printf("{\"file\": "), json_str(path), printf(", \"tokens\": %lld, \"layers\": [", M);
    else printf("%s: plan for M=%lld tokens, x %s\n", path, M, qmm_dtype_name(xdt));
    for (size_t i = 0; i < qmm_model_layer_count(m); i++) {
        const qmm_layer_info *l = qmm_model_layer(m, i);
        if (layers_glob && fnmatch(layers_glob, l->name, 0) != 0) continue;
        qmm_plan_info p;
        memset(&p, 0, sizeof p);
        char err[600] = "";
        qmm_act la = act_glob && fnmatch(act_glob, l->name, 0) != 0 ? QMM_ACT_NONE : act;
        qmm_weight *w = NULL;
        st = qmm_model_create_weight(m, ctx, l->name, &w);
        if (st == QMM_OK) {
            qmm_linear_args a = qmm_linear_args_default();
            a.M = M;
            a.x_dtype = xdt;
            a.y_dtype = xdt;
            a.act = la;
            st = qmm_plan(ctx, w, &a, &p);
        }
        if (st != QMM_OK) snprintf(err, sizeof err, "%s: %s", qmm_status_name(st), qmm_last_error());
        qmm_weight_destroy(w);
        const char *verdict;
        if (st != QMM_OK || p.status == QMM_ERR_NO_ENGINE || p.engine == QMM_ENGINE_AUTO) { verdict = "cannot run"; n_bad++; }
        else if (l->kind == QMM_LAYER_FLOAT) { verdict = "float"; n_float++; }
        else if (p.is_fallback) { verdict = "fallback"; n_fallback++; }
        else { verdict = "int8"; n_hard++; }
        if (json) {
            printf("%s{\"name\": ", first ? "" : ", ");
            json_str(l->name);
            printf(", \"kind\": \"%s\", \"shape\": [%lld, %lld], \"act\": \"%s\", \"verdict\": \"%s\", \"engine\": ",
                   l->kind == QMM_LAYER_INT8   ? "int8"
                   : l->kind == QMM_LAYER_W4A8 ? "w4a8"
                   : l->kind == QMM_LAYER_FLOAT ? "float"
                                                : "unsupported",
                   (long long)l->N, (long long)l->K, qmm_act_name(la), verdict);
            if (st == QMM_OK && p.engine != QMM_ENGINE_AUTO) json_str(qmm_engine_name(p.engine));
            else printf("null");
            printf(", \"regime\": ");
            json_str(st == QMM_OK ? p.regime : "");
            printf(", \"fallback\": %s, \"error\": ", st == QMM_OK && p.is_fallback ? "true" : "false");
            if (*err) json_str(err); else printf("null");
            printf(", \"weight\": ");
            if (st == QMM_OK && p.weight[0]) json_str(p.weight); else printf("null");
            printf(", \"refused\": {");
            int f2 = 1;
            for (int i = 0; st == QMM_OK && i < qmm_engine_count(); i++) {
                qmm_engine_info e;
                if (qmm_engine_get_info(i, &e) != QMM_OK || qmm_plan_admits(&p, e.id)) continue;
                printf("%s\"%s\": ", f2 ? "" : ", ", e.name);
                json_str(qmm_plan_reason(&p, e.id));
                f2 = 0;
            }
            printf("}}");
        } else {
            printf("%s [%lld, %lld]%s%s: ", l->name, (long long)l->N, (long long)l->K, la ? " act " : "",
                   la ? qmm_act_name(la) : "");
            if (st != QMM_OK) printf("cannot run: %s\n", err);
            else {
                printf("%s%s%s%s%s\n", p.engine == QMM_ENGINE_AUTO ? "no engine" : qmm_engine_name(p.engine),
                       p.regime[0] ? " [" : "", p.regime, p.regime[0] ? "]" : "", p.is_fallback ? " (FALLBACK)" : "");
                if (p.weight[0]) printf("    weight: %s\n", p.weight);
                for (int i = 0; i < qmm_engine_count(); i++) {
                    qmm_engine_info e;
                    if (qmm_engine_get_info(i, &e) == QMM_OK && !qmm_plan_admits(&p, e.id))
                        printf("    %-12s refuses: %s\n", e.name, qmm_plan_reason(&p, e.id));
                }
            }
        }
        first = 0;
    }
    int fail = strict && (n_fallback || n_bad);
    if (json)
        printf("], \"summary\": {\"int8\": %d, \"fallback\": %d, \"float\": %d, \"cannot_run\": %d, \"strict_ok\": %s}}\n",
               n_hard, n_fallback, n_float, n_bad, n_fallback || n_bad ? "false" : "true");
    else
        printf("summary: %d int8 layers on an int8 engine, %d would fall back to a float engine, %d float layers, "
               "%d cannot run%s\n",
               n_hard, n_fallback, n_float, n_bad, fail ? " — strict: FAIL" : "");
    qmm_context_destroy(ctx);
    qmm_model_close(m);
    return fail ? 1 : 0;
}
