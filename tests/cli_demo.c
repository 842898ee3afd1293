/*
 * cli_demo.c — runs a tiny `qmm demo` (the README's main job) and checks what a user relies on:
 * the human table's structure, that --json parses (json-c) with engine / median_ms / rel_err /
 * cosine for every path and layer, that the INT8 rows ran on an int8 engine (not a fallback)
 * where this machine has one, and that the accuracy figures are within expected bounds — with
 * ConvRot clearly better than no rotation on the inputs with outlier channels. Also `qmm info
 * --json` (features + engines with available/why) and `QMM_MAX_ISA` seen by the CLI.
 * Usage: cli_demo /path/to/qmm
 */
#define _POSIX_C_SOURCE 200809L
#include "qmm.h"
#include "testutil.h"

#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *run(const char *cmd) {
    FILE *f = popen(cmd, "r");
    if (!f) return NULL;
    size_t cap = 1 << 16, len = 0;
    char *out = malloc(cap);
    size_t n;
    while ((n = fread(out + len, 1, cap - len - 1, f)) > 0) {
        len += n;
        if (len + 1 == cap) out = realloc(out, cap *= 2);
    }
    out[len] = 0;
    int rc = pclose(f);
    TU_CHECK(rc == 0, "'%s' exited with %d", cmd, rc);
    return out;
}

static json_object *find_row(json_object *rows, const char *layer, const char *path) {
    for (size_t i = 0; i < json_object_array_length(rows); i++) {
        json_object *r = json_object_array_get_idx(rows, i), *l, *p;
        if (json_object_object_get_ex(r, "layer", &l) && json_object_object_get_ex(r, "path", &p) &&
            !strcmp(json_object_get_string(l), layer) && !strcmp(json_object_get_string(p), path))
            return r;
    }
    return NULL;
}

static double num(json_object *r, const char *key) {
    json_object *v;
    return json_object_object_get_ex(r, key, &v) ? json_object_get_double(v) : -1.0;
}

int main(int argc, char **argv) {
    tu_init(1, argv, "cli_demo");
    if (argc < 2) { printf("usage: cli_demo QMM\n"); return 2; }
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s demo --small --tokens 24 --repeats 1 2>/dev/null", argv[1]);
    char *table = run(cmd);
    if (table) {
        const char *want[] = {"layer", "median ms", "INT8 convrot", "INT8 no-rot", "W8A16", "BF16", "FP32",
                              "qkv_proj", "out_proj", "fc1", "fc2", "total", "vs BF16", "rel err", "cosine"};
        for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
            TU_CHECK(strstr(table, want[i]) != NULL, "demo table lacks '%s':\n%s", want[i], table);
    }
    snprintf(cmd, sizeof cmd, "%s demo --small --tokens 24 --repeats 1 --json", argv[1]);
    char *js = run(cmd);
    json_object *root = js ? json_tokener_parse(js) : NULL;
    TU_CHECK(root != NULL, "demo --json does not parse:\n%s", js ? js : "(no output)");
    json_object *rows = NULL;
    if (root) TU_CHECK(json_object_object_get_ex(root, "rows", &rows) && json_object_is_type(rows, json_type_array),
                       "demo --json has no rows array");
    if (rows) {
        int have_int8 = 0;
        qmm_engine_id i8[QMM_ENGINE_COUNT];
        for (int i = 0, n = tu_engines(TU_ENGINES_INT8, i8); i < n; i++) have_int8 |= qmm_engine_available(i8[i], NULL, 0);
        const char *layers[] = {"qkv_proj", "out_proj", "fc1", "fc2"};
        const char *paths[] = {"int8_convrot", "int8_norot", "w8a16", "bf16", "fp32"};
        for (int l = 0; l < 4; l++)
            for (int p = 0; p < 5; p++) {
                json_object *r = find_row(rows, layers[l], paths[p]), *ok = NULL, *eng = NULL;
                if (!TU_CHECK(r != NULL, "no row for %s / %s", layers[l], paths[p])) continue;
                json_object_object_get_ex(r, "ok", &ok);
                json_object_object_get_ex(r, "engine", &eng);
                if (p <= 1 && have_int8) {
                    TU_CHECK(ok && json_object_get_boolean(ok), "%s %s did not run on an int8 engine", layers[l],
                             paths[p]);
                    qmm_engine_id id = qmm_engine_from_name(eng ? json_object_get_string(eng) : "");
                    TU_CHECK(qmm_engine_is_int8(id), "%s %s ran on '%s', not an int8 engine", layers[l], paths[p],
                             eng ? json_object_get_string(eng) : "?");
                }
                if (!ok || !json_object_get_boolean(ok)) {
                    if (p > 1) tu_skip(paths[p], "no engine for this path here");
                    continue;
                }
                TU_CHECK(num(r, "median_ms") > 0, "%s %s: median_ms", layers[l], paths[p]);
                double rel = num(r, "rel_err"), cs = num(r, "cosine");
                double bound = p == 3 ? 0.01 : p == 4 ? 1e-6 : p == 1 ? 0.2 : 0.05;
                TU_CHECK(rel >= 0 && rel <= bound, "%s %s: rel_err %g > %g", layers[l], paths[p], rel, bound);
                TU_CHECK(p == 4 || cs >= (p == 1 ? 0.98 : 0.998), "%s %s: cosine %g", layers[l], paths[p], cs);
            }
        /* the rotation's value on inputs with outlier channels */
        for (int l = 0; l < 3; l += 2) {
            json_object *a = find_row(rows, layers[l], "int8_convrot"), *b = find_row(rows, layers[l], "int8_norot");
            if (a && b && num(a, "rel_err") > 0)
                TU_CHECK(num(b, "rel_err") > 1.5 * num(a, "rel_err"), "%s: convrot rel err %g not clearly below %g",
                         layers[l], num(a, "rel_err"), num(b, "rel_err"));
        }
    }
    json_object_put(root);
    free(js);
    free(table);

    /* qmm info --json: {"features": [...], "engines": [{"name", "available", "why"}]} */
    snprintf(cmd, sizeof cmd, "QMM_MAX_ISA=avx2 %s info --json", argv[1]);
    char *info = run(cmd);
    json_object *ij = info ? json_tokener_parse(info) : NULL, *feat = NULL, *engs = NULL;
    TU_CHECK(ij && json_object_object_get_ex(ij, "features", &feat) && json_object_is_type(feat, json_type_array) &&
                 json_object_object_get_ex(ij, "engines", &engs) && json_object_is_type(engs, json_type_array) &&
                 json_object_array_length(engs) == (size_t)qmm_engine_count(),
             "qmm info --json structure:\n%s", info ? info : "");
    for (size_t i = 0; engs && i < json_object_array_length(engs); i++) {
        json_object *e = json_object_array_get_idx(engs, i), *nm, *av, *why;
        TU_CHECK(json_object_object_get_ex(e, "name", &nm) && json_object_object_get_ex(e, "available", &av) &&
                     json_object_object_get_ex(e, "why", &why),
                 "engine entry %zu lacks name/available/why", i);
        const char *name = json_object_get_string(nm);
        if (!strcmp(name, "avx512_vnni") || !strcmp(name, "amx_int8"))
            TU_CHECK(!json_object_get_boolean(av) && strlen(json_object_get_string(why)) > 0,
                     "QMM_MAX_ISA=avx2: %s should be unavailable with a reason", name);
    }
    json_object_put(ij);
    free(info);
    return tu_finish();
}
