/*
 * cmd_info.c — `qmm info [--json]`: the CPU's features as qmm identified them (CPUID, XCR0,
 * the AMX permission request) and each engine with whether it is available here and why not.
 */
#include "commands.h"
#include "qmm.h"

#include <stdio.h>
#include <string.h>

int cmd_info(int argc, char **argv) {
    int json = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "--help")) { printf("usage: qmm info [--json]\n"); return 0; }
        else { fprintf(stderr, "qmm info: unknown option '%s'\n", argv[i]); return 2; }
    }
    uint32_t f = qmm_cpu_features();
    if (json) {
        printf("{\"version\": \"%s\", \"cpu\": \"%s\", \"features\": [", qmm_version_string(), qmm_cpu_brand());
        int first = 1;
        for (int b = 0; b < QMM_CPU_FEATURE_COUNT; b++)
            if (f & (1u << b)) { printf("%s\"%s\"", first ? "" : ", ", qmm_cpu_feature_name(1u << b)); first = 0; }
        printf("], \"engines\": [");
        for (int e = 1; e < QMM_ENGINE_COUNT; e++) {
            char why[QMM_REASON_MAX];
            int ok = qmm_engine_available((qmm_engine_id)e, why, sizeof why);
            printf("%s{\"name\": \"%s\", \"kind\": \"%s\", \"available\": %s, \"why\": \"", e > 1 ? ", " : "",
                   qmm_engine_name((qmm_engine_id)e),
                   e == QMM_ENGINE_REF ? "reference" : qmm_engine_is_int8((qmm_engine_id)e) ? "int8" : "float",
                   ok ? "true" : "false");
            for (const char *p = ok ? "" : why; *p; p++) {
                if (*p == '"' || *p == '\\') putchar('\\');
                putchar(*p);
            }
            printf("\"}");
        }
        printf("]}\n");
        return 0;
    }
    printf("qmm %s\ncpu: %s\nfeatures:", qmm_version_string(), qmm_cpu_brand());
    for (int b = 0; b < QMM_CPU_FEATURE_COUNT; b++)
        if (f & (1u << b)) printf(" %s", qmm_cpu_feature_name(1u << b));
    printf("\nengines (best first; the reference runs only when asked for by name):\n");
    for (int e = 1; e < QMM_ENGINE_COUNT; e++) {
        char why[QMM_REASON_MAX];
        int ok = qmm_engine_available((qmm_engine_id)e, why, sizeof why);
        printf("  %-12s %-9s %s%s\n", qmm_engine_name((qmm_engine_id)e),
               e == QMM_ENGINE_REF ? "reference" : qmm_engine_is_int8((qmm_engine_id)e) ? "int8" : "float",
               ok ? "available" : "unavailable: ", ok ? "" : why);
    }
    return 0;
}
