/*
 * test_bench.c — smoke test of `qmm bench` (the CLI next to this test binary): --quick --json on
 * a tiny shape must print a JSON array of row objects with M, N, K, engine, threads, median_ms,
 * tops, peak_tops, pct_peak, gbps (numbers, or null for a refused row, which must carry its
 * reason); every available int8 engine must have run; an ISA cap must turn engines into refused
 * rows, not a crash; a bad --shape is a usage error (exit 2). No timing thresholds. Also checks
 * the shared shape list (bench/shapes.h) parses its own format.
 */
#define _GNU_SOURCE
#include "testutil.h"

#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char g_qmm[4200];

/* Runs the CLI with args, returns its stdout (malloc'd) and exit status. */
static char *run_cli(const char *args, int *status) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "'%s' %s 2>/dev/null", g_qmm, args);
    FILE *f = popen(cmd, "r");
    if (!f) { *status = -1; return NULL; }
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    size_t k;
    while (buf && (k = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += k;
        if (len + 1 == cap) { cap *= 2; buf = realloc(buf, cap); }
    }
    int st = pclose(f);
    *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    if (buf) buf[len] = 0;
    return buf;
}

static int is_num_or_null(json_object *o) {
    return !o || json_object_is_type(o, json_type_null) || json_object_is_type(o, json_type_double) ||
           json_object_is_type(o, json_type_int);
}

/* Checks the structure; returns the number of rows with status ok for int8 engines. */
static int check_rows(const char *out, const char *what, int *refused_int8) {
    json_object *root = json_tokener_parse(out);
    int ok_int8 = 0;
    *refused_int8 = 0;
    if (!TU_CHECK(root && json_object_is_type(root, json_type_array), "%s: output is not a JSON array:\n%.400s", what,
                  out))
        return 0;
    size_t n = json_object_array_length(root);
    TU_CHECK(n > 0, "%s: no rows", what);
    static const char *const nums[] = {"median_ms", "tops", "peak_tops", "pct_peak", "gbps"};
    for (size_t i = 0; i < n; i++) {
        json_object *r = json_object_array_get_idx(root, i), *v;
        if (!TU_CHECK(json_object_is_type(r, json_type_object), "%s: row %zu is not an object", what, i)) continue;
        for (int k = 0; k < 3; k++) {
            const char *key = k == 0 ? "M" : k == 1 ? "N" : "K";
            TU_CHECK(json_object_object_get_ex(r, key, &v) && json_object_is_type(v, json_type_int) &&
                         json_object_get_int64(v) > 0,
                     "%s: row %zu: %s missing or not a positive integer", what, i, key);
        }
        TU_CHECK(json_object_object_get_ex(r, "threads", &v) && json_object_get_int(v) >= 1, "%s: row %zu: threads",
                 what, i);
        json_object *eng = NULL, *st = NULL, *kind = NULL;
        TU_CHECK(json_object_object_get_ex(r, "engine", &eng) && json_object_is_type(eng, json_type_string),
                 "%s: row %zu: engine", what, i);
        TU_CHECK(json_object_object_get_ex(r, "status", &st) && json_object_is_type(st, json_type_string),
                 "%s: row %zu: status", what, i);
        json_object_object_get_ex(r, "kind", &kind);
        int ok = st && !strcmp(json_object_get_string(st), "ok");
        for (int k = 0; k < 5; k++) {
            int has = json_object_object_get_ex(r, nums[k], &v);
            TU_CHECK(has && is_num_or_null(v), "%s: row %zu: %s missing or not a number/null", what, i, nums[k]);
            if (ok && has && k != 2 && k != 3)
                TU_CHECK(json_object_get_double(v) > 0, "%s: row %zu (%s): %s = %g should be > 0", what, i,
                         eng ? json_object_get_string(eng) : "?", nums[k], json_object_get_double(v));
        }
        if (!ok) {
            int has = json_object_object_get_ex(r, "reason", &v);
            const char *rs = has ? json_object_get_string(v) : "";
            size_t len = strlen(rs);
            TU_CHECK(len > 0 && rs[len - 1] != ' ' && rs[len - 1] != ':',
                     "%s: row %zu (kind %s): a refused row needs its reason, got '%s'", what, i,
                     kind ? json_object_get_string(kind) : "?", rs);
        }
        int int8 = kind && !strcmp(json_object_get_string(kind), "int8");
        if (int8 && ok) ok_int8++;
        if (int8 && !ok) (*refused_int8)++;
    }
    json_object_put(root);
    return ok_int8;
}

int main(int argc, char **argv) {
    tu_init(argc, argv, "test_bench");
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) { tu_skip("qmm bench", "cannot locate the test binary"); return tu_finish(); }
    self[n] = 0;
    char *slash = strrchr(self, '/');
    if (slash) *slash = 0;
    snprintf(g_qmm, sizeof g_qmm, "%s/qmm", self);
    if (access(g_qmm, X_OK) != 0) { tu_skip("qmm bench", "the qmm CLI is not built next to the test"); return tu_finish(); }

    int st, refused;
    char *out = run_cli("bench --quick --json", &st);
    TU_CHECK(st == 0 && out, "qmm bench --quick --json exited %d", st);
    if (out) {
        int ran = check_rows(out, "--quick --json", &refused);
        char why[QMM_REASON_MAX];
        int any = 0;
        qmm_engine_id i8[QMM_ENGINE_COUNT];
        for (int i = 0, n = tu_engines(TU_ENGINES_INT8, i8); i < n; i++) any |= qmm_engine_available(i8[i], why, sizeof why);
        if (any) TU_CHECK(ran > 0, "no int8 engine ran although one is available");
        else tu_skip("qmm bench int8 rows", "no int8 engine available here");
    }
    free(out);

    out = run_cli("bench --quick --json --no-float --shape 3x17x64:g16 --engines avx2_int8,avx_vnni --repeats 1", &st);
    TU_CHECK(st == 0 && out, "qmm bench --shape 3x17x64:g16 exited %d", st);
    if (out) {
        check_rows(out, "--shape 3x17x64:g16", &refused);
        json_object *root = json_tokener_parse(out);
        TU_CHECK(root && json_object_array_length(root) == 2, "--engines a,b --no-float: expected 2 rows");
        json_object_put(root);
    }
    free(out);

    /* --engines naming no float engine: the float rows say so */
    out = run_cli("bench --quick --json --shape 3x17x64 --engines avx2_int8 --repeats 1", &st);
    TU_CHECK(st == 0 && out, "qmm bench --engines avx2_int8 exited %d", st);
    if (out) check_rows(out, "--engines avx2_int8 (float rows)", &refused);
    free(out);

    /* capped below every int8 engine: rows refused with reasons, exit 0 */
    setenv("QMM_MAX_ISA", "none", 1);
    out = run_cli("bench --quick --json --no-float", &st);
    unsetenv("QMM_MAX_ISA");
    TU_CHECK(st == 0 && out, "QMM_MAX_ISA=none qmm bench exited %d", st);
    if (out) {
        int ran = check_rows(out, "QMM_MAX_ISA=none", &refused);
        qmm_engine_id i8[QMM_ENGINE_COUNT];
        const int n8 = tu_engines(TU_ENGINES_INT8, i8);
        TU_CHECK(ran == 0 && refused == n8, "QMM_MAX_ISA=none: %d int8 rows ran, %d refused (want 0, %d)", ran, refused,
                 n8);
    }
    free(out);

    /* the AMX rows carry the regime their engine's rule picks (amx_blocking.h) and the blocking
     * in force (QMM_AMX_BLOCKING applied); other engines' rows carry "" */
    static const struct { const char *shape, *blocking, *amx_regime; } rg[] = {
        {"3x17x64", "", "decode"}, {"40x17x64", "", "panel"}, {"40x17x64", "panel_a=0", "blocked"},
        {"40x17x64", "small_m=1,panel_a=2559", "blocked"}, {"64x17x64", "small_m=1,panel_a=4096", "panel"}};
    for (size_t i = 0; i < sizeof rg / sizeof rg[0]; i++) {
        char args[256];
        snprintf(args, sizeof args, "bench --quick --json --no-float --shape %s --engines amx_int8,avx512_vnni --repeats 1",
                 rg[i].shape);
        setenv("QMM_AMX_BLOCKING", rg[i].blocking, 1);
        out = run_cli(args, &st);
        unsetenv("QMM_AMX_BLOCKING");
        TU_CHECK(st == 0 && out, "%s (QMM_AMX_BLOCKING=%s) exited %d", args, rg[i].blocking, st);
        json_object *root = out ? json_tokener_parse(out) : NULL;
        for (size_t k = 0; root && k < json_object_array_length(root); k++) {
            json_object *r = json_object_array_get_idx(root, k), *eng, *reg, *bl;
            if (!TU_CHECK(json_object_object_get_ex(r, "engine", &eng) && json_object_object_get_ex(r, "regime", &reg) &&
                              json_object_object_get_ex(r, "amx_blocking", &bl),
                          "%s: row %zu lacks engine/regime/amx_blocking", args, k))
                continue;
            int amx = !strcmp(json_object_get_string(eng), "amx_int8");
            const char *want = amx ? rg[i].amx_regime : "";
            TU_CHECK(!strcmp(json_object_get_string(reg), want), "%s QMM_AMX_BLOCKING=%s: %s regime '%s', want '%s'",
                     args, rg[i].blocking, json_object_get_string(eng), json_object_get_string(reg), want);
            TU_CHECK(amx == (json_object_get_string_len(bl) > 0) &&
                         (!amx || strstr(json_object_get_string(bl), rg[i].blocking)),
                     "%s: amx_blocking '%s' (QMM_AMX_BLOCKING=%s)", args, json_object_get_string(bl), rg[i].blocking);
        }
        TU_CHECK(root != NULL, "%s: not JSON", args);
        json_object_put(root);
        free(out);
    }
    setenv("QMM_AMX_BLOCKING", "kc=100", 1); /* not a multiple of 64: refused by --regimes */
    out = run_cli("bench --quick --regimes", &st);
    unsetenv("QMM_AMX_BLOCKING");
    TU_CHECK(st == 2, "--regimes with an invalid QMM_AMX_BLOCKING must exit 2, got %d", st);
    free(out);

    out = run_cli("bench --shape 12xx5", &st);
    TU_CHECK(st == 2, "bad --shape must exit 2, got %d", st);
    free(out);
    return tu_finish();
}
