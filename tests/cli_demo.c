/*
 * cli_demo.c — runs a tiny `qmm demo` (the README's main job) and checks what a user relies on:
 * the human table's structure, that --json parses (json-c) with engine / median_ms / rel_err /
 * cosine for every path and part (the four linears and the attention), that the INT8 rows ran on
 * an int8 engine (not a fallback) where this machine has one, that the accuracy figures are
 * within expected bounds — with ConvRot clearly better than no rotation on the inputs with outlier
 * channels — and that the totals are the five parts' sums. The attention is checked in both
 * outputs: present, named, on an engine, timed > 0, its error finite and bounded. FP32 runs fewer
 * tokens than the others (16 of 24), as in a real run: its attention still reads all of them. Also `qmm info
 * --json` (features + engines with available/why) and `QMM_MAX_ISA` seen by the CLI.
 * Usage: cli_demo /path/to/qmm
 */
#define _POSIX_C_SOURCE 200809L
#include "qmm.h"
#include "testutil.h"

#include <json-c/json.h>
#include <math.h>
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

static const char *str(json_object *r, const char *key) {
    json_object *v;
    return json_object_object_get_ex(r, key, &v) ? json_object_get_string(v) : "";
}

static const char *const k_paths[] = {"int8_convrot", "int8_norot", "w8a16", "bf16", "fp32"};
static const char *const k_path_names[] = {"INT8 convrot", "INT8 no-rot", "W8A16", "BF16", "FP32"};
/* The attention's bounds against FP32's attention, per path: its q, k, v come from each path's
 * own qkv_proj, so this is the chain's error (qkv_proj's, then the attention's own). */
static const double k_attn_rel[] = {0.1, 0.3, 0.05, 0.05, 1e-5}, k_attn_cos[] = {0.99, 0.95, 0.998, 0.998, 0.99999};

/* The attention's five rows of the human table (one per path, the part named on the first):
 * "attention <shape> <path> <engine> <ms> <T(FL)OP/s> <vs BF16> <vs FP32> <rel err> <cosine>". */
static void check_text_attention(const char *table) {
    const char *line = strstr(table, "\nattention ");
    if (!TU_CHECK(line != NULL, "demo table has no attention row:\n%s", table)) return;
    for (int p = 0; p < 5 && line; p++) {
        line++;
        const char *eol = strchr(line, '\n');
        char row[512];
        snprintf(row, sizeof row, "%.*s", eol ? (int)(eol - line) : (int)strlen(line), line);
        line = eol;
        const char *at = strstr(row, k_path_names[p]);
        if (!TU_CHECK(at != NULL, "attention row %d is not %s's: '%s'", p, k_path_names[p], row)) continue;
        char eng[64] = "", sb[32], sf[32], rel[32] = "", cs[32] = "";
        double ms = 0, tops = 0;
        int n = sscanf(at + strlen(k_path_names[p]), "%63s %lf %lf %31s %31s %31s %31s", eng, &ms, &tops, sb, sf, rel, cs);
        if (!TU_CHECK(n >= 6, "attention %s: row unreadable: '%s'", k_path_names[p], row)) continue;
        size_t el = strlen(eng);
        if (el && eng[el - 1] == '*') eng[el - 1] = 0; /* a mode-int8 fallback's mark */
        TU_CHECK(qmm_engine_from_name(eng) != QMM_ENGINE_AUTO, "attention %s: engine '%s' unknown", k_path_names[p], eng);
        /* T/s is printed to 3 decimals: the tiny demo shape on a loaded machine can round to 0 */
        TU_CHECK(ms > 0 && tops >= 0, "attention %s: median %g ms, %g T/s", k_path_names[p], ms, tops);
        if (p == 4) {
            TU_CHECK(!strcmp(rel, "(ref)"), "attention FP32: rel err column '%s', not (ref)", rel);
        } else {
            double r = strtod(rel, NULL), c = strtod(cs, NULL);
            TU_CHECK(n == 7 && r >= 0 && r <= k_attn_rel[p] && c >= k_attn_cos[p], "attention %s: rel err '%s', cosine '%s'",
                     k_path_names[p], rel, cs);
        }
    }
}

int main(int argc, char **argv) {
    tu_init(1, argv, "cli_demo");
    if (argc < 2) { printf("usage: cli_demo QMM\n"); return 2; }
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s demo --small --tokens 24 --fp32-tokens 16 --repeats 1 2>/dev/null", argv[1]);
    char *table = run(cmd);
    if (table) {
        const char *want[] = {"part", "median ms", "INT8 convrot", "INT8 no-rot", "W8A16", "BF16", "FP32",
                              "qkv_proj", "attention", "out_proj", "fc1", "fc2", "total", "vs BF16", "rel err",
                              "cosine", "16h x 128"};
        for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
            TU_CHECK(strstr(table, want[i]) != NULL, "demo table lacks '%s':\n%s", want[i], table);
        check_text_attention(table);
    }
    snprintf(cmd, sizeof cmd, "%s demo --small --tokens 24 --fp32-tokens 16 --repeats 1 --json", argv[1]);
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
        for (int l = 0; l < 4; l++)
            for (int p = 0; p < 5; p++) {
                json_object *r = find_row(rows, layers[l], k_paths[p]), *ok = NULL, *eng = NULL;
                if (!TU_CHECK(r != NULL, "no row for %s / %s", layers[l], k_paths[p])) continue;
                json_object_object_get_ex(r, "ok", &ok);
                json_object_object_get_ex(r, "engine", &eng);
                if (p <= 1 && have_int8) {
                    TU_CHECK(ok && json_object_get_boolean(ok), "%s %s did not run on an int8 engine", layers[l],
                             k_paths[p]);
                    qmm_engine_id id = qmm_engine_from_name(eng ? json_object_get_string(eng) : "");
                    TU_CHECK(qmm_engine_is_int8(id), "%s %s ran on '%s', not an int8 engine", layers[l], k_paths[p],
                             eng ? json_object_get_string(eng) : "?");
                }
                if (!ok || !json_object_get_boolean(ok)) {
                    if (p > 1) tu_skip(k_paths[p], "no engine for this path here");
                    continue;
                }
                TU_CHECK(num(r, "median_ms") > 0, "%s %s: median_ms", layers[l], k_paths[p]);
                double rel = num(r, "rel_err"), cs = num(r, "cosine");
                double bound = p == 3 ? 0.01 : p == 4 ? 1e-6 : p == 1 ? 0.2 : 0.05;
                if (l == 1 && p != 4) bound *= 2; /* out_proj reads the attention's output: the chain's error */
                TU_CHECK(rel >= 0 && rel <= bound, "%s %s: rel_err %g > %g", layers[l], k_paths[p], rel, bound);
                TU_CHECK(p == 4 || cs >= (p == 1 ? 0.98 : 0.998), "%s %s: cosine %g", layers[l], k_paths[p], cs);
            }
        /* the attention: a row per path, named, on an engine (mode int8 on an int8 engine where
         * one offers attention), timed, its error finite and bounded */
        const int have_int8_attn = qmm_engine_available(QMM_ENGINE_AVX512_VNNI, NULL, 0);
        for (int p = 0; p < 5; p++) {
            json_object *r = find_row(rows, "attention", k_paths[p]), *ok = NULL, *fb = NULL;
            if (!TU_CHECK(r != NULL, "no row for attention / %s", k_paths[p])) continue;
            json_object_object_get_ex(r, "ok", &ok);
            json_object_object_get_ex(r, "fallback", &fb);
            if (!TU_CHECK(ok && json_object_get_boolean(ok), "attention %s did not run: %s", k_paths[p], str(r, "error")))
                continue;
            const char *want_mode = p <= 1 ? "int8" : p == 4 ? "f32" : "best";
            TU_CHECK(!strcmp(str(r, "kind"), "attention") && !strcmp(str(r, "mode"), want_mode) &&
                         num(r, "heads") == 16 && num(r, "head_dim") == 128 && num(r, "Skv") == 24,
                     "attention %s: kind '%s', mode '%s' (want %s), heads %g, head_dim %g, Skv %g", k_paths[p],
                     str(r, "kind"), str(r, "mode"), want_mode, num(r, "heads"), num(r, "head_dim"), num(r, "Skv"));
            qmm_engine_id id = qmm_engine_from_name(str(r, "engine"));
            TU_CHECK(id != QMM_ENGINE_AUTO, "attention %s: engine '%s'", k_paths[p], str(r, "engine"));
            if (p <= 1 && have_int8_attn)
                TU_CHECK(id == QMM_ENGINE_AVX512_VNNI && fb && !json_object_get_boolean(fb),
                         "attention %s ran on '%s'%s, not avx512_vnni", k_paths[p], str(r, "engine"),
                         fb && json_object_get_boolean(fb) ? " (a fallback)" : "");
            TU_CHECK(num(r, "median_ms") > 0 && num(r, "tops") > 0, "attention %s: median_ms %g", k_paths[p],
                     num(r, "median_ms"));
            double rel = num(r, "rel_err"), cs = num(r, "cosine");
            TU_CHECK(rel >= 0 && rel <= k_attn_rel[p] && cs >= k_attn_cos[p] && cs <= 1.000001,
                     "attention %s: rel_err %g (bound %g), cosine %g (bound %g)", k_paths[p], rel, k_attn_rel[p], cs,
                     k_attn_cos[p]);
        }
        /* the totals are the block's whole matrix work: the five parts' sums */
        const char *parts[] = {"qkv_proj", "attention", "out_proj", "fc1", "fc2"};
        for (int p = 0; p < 5; p++) {
            json_object *t = find_row(rows, "total", k_paths[p]);
            if (!TU_CHECK(t != NULL, "no total row for %s", k_paths[p]) || num(t, "median_ms") < 0) continue;
            double ms = 0, ops = 0;
            for (int l = 0; l < 5; l++) {
                json_object *r = find_row(rows, parts[l], k_paths[p]);
                ms += r ? num(r, "median_ms") : 0;
                ops += r ? num(r, "ops") : 0;
            }
            TU_CHECK(fabs(ms - num(t, "median_ms")) <= 1e-3 * ms + 0.01 && fabs(ops - num(t, "ops")) <= 1e-5 * ops,
                     "total %s: %g ms, %g ops; the parts sum to %g ms, %g ops", k_paths[p], num(t, "median_ms"),
                     num(t, "ops"), ms, ops);
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
