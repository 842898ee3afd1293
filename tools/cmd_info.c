/*
 * cmd_info.c — `qmm info [--json]`: the CPU's features as qmm identified them (CPUID, XCR0,
 * the AMX permission request) and each engine of the library (qmm_engine_get_info), best first:
 * its kind, ISA level, required CPU features, peak instruction, whether it has run on real
 * hardware, and whether it is available here and why not.
 */
#include "commands.h"
#include "qmm.h"

#include <stdio.h>
#include <string.h>

static const char *kind_name(const qmm_engine_info *e) {
    return e->kind == QMM_KIND_REF ? "reference" : e->kind == QMM_KIND_INT8 ? "int8" : "float";
}

/* "avx512f avx512bw ..." (or "-") into buf */
static const char *features_text(uint32_t f, const char *sep, int quoted, char *buf, size_t n) {
    size_t len = 0;
    buf[0] = 0;
    for (int b = 0; b < QMM_CPU_FEATURE_COUNT; b++) {
        if (!(f & (1u << b))) continue;
        int k = snprintf(buf + len, n - len, "%s%s%s%s", len ? sep : "", quoted ? "\"" : "",
                         qmm_cpu_feature_name(1u << b), quoted ? "\"" : "");
        if (k < 0 || (size_t)k >= n - len) break;
        len += (size_t)k;
    }
    if (!len && !quoted) snprintf(buf, n, "-");
    return buf;
}

static void json_escaped(const char *s) {
    for (const char *p = s; *p; p++) {
        if (*p == '"' || *p == '\\') putchar('\\');
        putchar(*p);
    }
}

int cmd_info(int argc, char **argv) {
    int json = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "--help")) { printf("usage: qmm info [--json]\n"); return 0; }
        else { fprintf(stderr, "qmm info: unknown option '%s'\n", argv[i]); return 2; }
    }
    uint32_t f = qmm_cpu_features();
    char feats[512];
    if (json) {
        printf("{\"version\": \"%s\", \"cpu\": \"%s\", \"features\": [%s], \"engines\": [", qmm_version_string(),
               qmm_cpu_brand(), features_text(f, ", ", 1, feats, sizeof feats));
        for (int i = 0; i < qmm_engine_count(); i++) {
            qmm_engine_info e;
            if (qmm_engine_get_info(i, &e) != QMM_OK) continue;
            char why[QMM_REASON_MAX];
            int ok = qmm_engine_available(e.id, why, sizeof why);
            printf("%s{\"name\": \"%s\", \"kind\": \"%s\", \"isa\": \"%s\", \"cpu_features\": [%s], "
                   "\"peak_instruction\": \"%s\", \"verified_on_hardware\": %s, \"available\": %s, \"why\": \"",
                   i ? ", " : "", e.name, kind_name(&e), qmm_isa_name(e.isa),
                   features_text(e.cpu_features, ", ", 1, feats, sizeof feats), e.peak_instruction,
                   e.verified_on_hardware ? "true" : "false", ok ? "true" : "false");
            json_escaped(ok ? "" : why);
            printf("\"}");
        }
        printf("]}\n");
        return 0;
    }
    printf("qmm %s\ncpu: %s\nfeatures: %s\n", qmm_version_string(), qmm_cpu_brand(),
           features_text(f, " ", 0, feats, sizeof feats));
    printf("engines (best first; the reference runs only when asked for by name; * = only emulated so far):\n");
    for (int i = 0; i < qmm_engine_count(); i++) {
        qmm_engine_info e;
        if (qmm_engine_get_info(i, &e) != QMM_OK) continue;
        char why[QMM_REASON_MAX];
        int ok = qmm_engine_available(e.id, why, sizeof why);
        printf("  %-12s%s %-9s %-11s %-31s %s%s\n", e.name, e.verified_on_hardware ? " " : "*", kind_name(&e),
               qmm_isa_name(e.isa), e.peak_instruction, ok ? "available" : "unavailable: ", ok ? "" : why);
    }
    return 0;
}
