/* shapes.c — the benchmark shape lists of SPEC §8 (see shapes.h). */
#include "shapes.h"

#include <stdlib.h>
#include <string.h>

const qmm_bench_shape qmm_bench_default_shapes[] = {
    {"dit.attn.qkv_proj", 4096, 21504, 5376, QMM_ACT_NONE, 256},
    {"dit.mlp.fc2+swiglu", 4096, 5376, 14336, QMM_ACT_SWIGLU, 256},
    {"dit.square", 256, 5376, 5376, QMM_ACT_NONE, 256},
    {"dit.mlp.fc1 decode", 1, 28672, 5376, QMM_ACT_NONE, 256},
    {"dit.mlp.fc1 M=16", 16, 28672, 5376, QMM_ACT_NONE, 256},
};
const size_t qmm_bench_default_count = sizeof qmm_bench_default_shapes / sizeof qmm_bench_default_shapes[0];

const qmm_bench_shape qmm_bench_spec_shapes[] = {
    {"dit.attn.qkv_proj", 256, 21504, 5376, QMM_ACT_NONE, 256},
    {"dit.attn.out_proj", 256, 5376, 7168, QMM_ACT_NONE, 256},
    {"dit.mlp.fc1", 256, 28672, 5376, QMM_ACT_NONE, 256},
    {"dit.mlp.fc2+swiglu", 256, 5376, 14336, QMM_ACT_SWIGLU, 256},
    {"te.qkv", 256, 8192, 5120, QMM_ACT_NONE, 256},
    {"te.kv", 256, 1024, 5120, QMM_ACT_NONE, 256},
    {"te.fc1", 256, 25600, 5120, QMM_ACT_NONE, 256},
    {"te.fc2", 256, 5120, 25600, QMM_ACT_NONE, 256},
    {"wan.attn", 256, 5120, 5120, QMM_ACT_NONE, 256},
    {"wan.fc1", 256, 13824, 5120, QMM_ACT_NONE, 256},
    {"wan.fc2", 256, 5120, 13824, QMM_ACT_NONE, 256},
    {"flux.attn", 256, 3072, 3072, QMM_ACT_NONE, 256},
    {"flux.fc1", 256, 12288, 3072, QMM_ACT_NONE, 256},
};
const size_t qmm_bench_spec_count = sizeof qmm_bench_spec_shapes / sizeof qmm_bench_spec_shapes[0];

const qmm_bench_shape qmm_bench_quick_shape = {"quick", 20, 80, 256, QMM_ACT_NONE, 64};

int qmm_bench_parse_shape(const char *s, qmm_bench_shape *out) {
    qmm_bench_shape sh = {"custom", 0, 0, 0, QMM_ACT_NONE, 0};
    char *end;
    int64_t v[3];
    const char *p = s;
    for (int i = 0; i < 3; i++) {
        v[i] = strtoll(p, &end, 10);
        if (end == p || v[i] <= 0) return -1;
        if (i < 2) {
            if (*end != 'x' && *end != 'X') return -1;
            p = end + 1;
        }
    }
    sh.M = v[0], sh.N = v[1], sh.K = v[2];
    p = end;
    while (*p == ':') {
        p++;
        if (!strncmp(p, "swiglu", 6)) { sh.act = QMM_ACT_SWIGLU; p += 6; }
        else if (!strncmp(p, "gelu", 4)) { sh.act = QMM_ACT_GELU_TANH; p += 4; }
        else if (*p == 'g') {
            long g = strtol(p + 1, &end, 10);
            if (end == p + 1 || (g != 16 && g != 64 && g != 256)) return -1;
            sh.gs = (int)g;
            p = end;
        } else return -1;
    }
    if (*p) return -1;
    *out = sh;
    return 0;
}
