/*
 * w4a8_bench.c — `qmm bench --w4a8`: a borrowed W4A8 layer (qmm_weight_borrow_w4a8) against the
 * borrowed INT8 layer of the same shape (qmm_weight_borrow_int8), on the same engine, in one run.
 * Per shape: enough copies of each weight that more bytes than twice the last-level cache are
 * rotated through at M <= 32 (so the weights come from DRAM), then R rounds, each one call of
 * either side, the order alternating by round; the best call of each side is kept. The DRAM read
 * rate is measured in the same run (bench/peak.c, before every shape; the best of the run is
 * used), and each side's weight bytes per second is given as a % of it: the W4A8 side's bytes are
 * its codes and s_rel (what it reads), the INT8 side's its N·K bytes. x and y f32, pinned threads.
 * Options: --shape MxNxK[:gN] (repeatable; default the issue-26 targets), --engine NAME (default
 * the first int8 engine this CPU runs), --threads T, --rounds R (default 7), --bits 4|6,
 * --group G (default 16), --codebook, --f32-srel, --quick (a small shape, 2 rounds: a smoke test),
 * --only int8|w4a8 (one side's calls alone, for a profiler: perf stat / perf record), --resident
 * (one copy of each weight: at a shape that fits the last-level cache, the compute side alone).
 */
#include "w4a8_bench.h"

#include "peak.h"
#include "qmm.h"
#include "shapes.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int threads, rounds, bits, group, codebook, f32_srel, quick, only, resident; /* only: 0 both, 1 int8, 2 w4a8 */
    qmm_engine_id engine;
    double dram_gbps;
    size_t dram_bytes;
} w4bench;

static uint64_t xs_next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* bytes: int8 in [-127, 127] (mask 0xff) or any (codes) */
static void fill_bytes(uint8_t *p, size_t n, uint64_t seed, int no_m128) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i += 8) {
        uint64_t v = xs_next(&s);
        for (size_t j = 0; j < 8 && i + j < n; j++, v >>= 8) p[i + j] = no_m128 && (uint8_t)v == 0x80 ? 0 : (uint8_t)v;
    }
}

static const qmm_bench_shape k_default[] = {
    {"fc1 decode", 1, 28672, 5376, QMM_ACT_NONE, 0},   {"fc1 M=16", 16, 28672, 5376, QMM_ACT_NONE, 0},
    {"attn decode", 1, 5376, 5376, QMM_ACT_NONE, 0},   {"attn M=16", 16, 5376, 5376, QMM_ACT_NONE, 0},
    {"attn M=256", 256, 5376, 5376, QMM_ACT_NONE, 0},  {"fc1 M=256", 256, 28672, 5376, QMM_ACT_NONE, 0},
    {"attn M=1024", 1024, 5376, 5376, QMM_ACT_NONE, 0},
};

static int bench_one(w4bench *b, qmm_context *ctx, const qmm_bench_shape *sh) {
    const int64_t M = sh->M, N = sh->N, K = sh->K, G = K / b->group;
    const size_t nk = (size_t)N * (size_t)K, cbytes = nk * (size_t)b->bits / 8;
    const size_t sbytes = (size_t)(N * G) * (b->f32_srel ? 4 : 1);
    int n8 = 1, n4 = 1;
    if (M <= 32 && !b->quick && !b->resident) {
        const size_t want = 2 * qmm_llc_bytes();
        n8 = (int)((want + nk - 1) / nk);
        n4 = (int)((want + cbytes + sbytes - 1) / (cbytes + sbytes));
        n8 = n8 < 2 ? 2 : n8 > 16 ? 16 : n8;
        n4 = n4 < 2 ? 2 : n4 > 16 ? 16 : n4;
        const double g = qmm_dram_read_gbps(b->threads, b->dram_bytes, 3);
        if (g > b->dram_gbps) b->dram_gbps = g;
    }
    int rc = 1;
    uint8_t *mem8[16] = {0}, *mc[16] = {0};
    void *ms[16] = {0};
    qmm_weight *w8[16] = {0}, *w4[16] = {0};
    float *sch = malloc((size_t)N * 4), *x = malloc((size_t)(M * K) * 4), *y = malloc((size_t)(M * N) * 4);
    float cb[16];
    for (int i = 0; i < 16; i++) cb[i] = -1.0f + (float)i * (2.0f / 15.0f);
    if (!sch || !x || !y) goto done;
    for (int64_t n = 0; n < N; n++) sch[n] = 0.001f + 1e-6f * (float)(n % 100);
    uint64_t s = 99;
    for (int64_t i = 0; i < M * K; i++) x[i] = (float)((int64_t)(xs_next(&s) >> 40) - (1 << 23)) / (float)(1 << 23);
    for (int c = 0; c < n8; c++) {
        qmm_weight_desc d = qmm_weight_desc_default();
        d.name = "int8";
        d.N = N; d.K = K; d.scale = sch; d.n_scale = N; d.convrot_gs = sh->gs;
        d.data = (const int8_t *)(mem8[c] = malloc(nk));
        if (!mem8[c]) goto done;
        fill_bytes(mem8[c], nk, 11 + (uint64_t)c, 1);
        if (qmm_weight_borrow_int8(ctx, &d, &w8[c]) != QMM_OK) goto fail;
    }
    for (int c = 0; c < n4; c++) {
        qmm_w4a8_desc d = qmm_w4a8_desc_default();
        d.name = "w4a8";
        d.N = N; d.K = K; d.bits = b->bits; d.group_size = b->group;
        d.codes = mc[c] = malloc(cbytes);
        d.codes_bytes = (int64_t)cbytes;
        d.s_rel = ms[c] = malloc(sbytes);
        d.s_rel_dtype = b->f32_srel ? QMM_F32 : QMM_F8_E4M3;
        d.n_s_rel = N * G;
        d.codebook = b->codebook ? cb : NULL;
        d.n_codebook = b->codebook ? 16 : 0;
        d.s_channel = sch;
        d.convrot_gs = sh->gs;
        if (!mc[c] || !ms[c]) goto done;
        fill_bytes(mc[c], cbytes, 21 + (uint64_t)c, 0);
        /* s_rel in the kitchen's range: s · max|level| ≈ 127 · U(0.2, 1.1) */
        uint64_t t = 5 + (uint64_t)c;
        const float lmax = b->codebook ? 1.0f : (float)(1 << (b->bits - 1));
        for (int64_t i = 0; i < N * G; i++) {
            const float v = 127.0f / lmax * (0.2f + 0.9f * (float)(xs_next(&t) % 1000) / 1000.0f);
            if (b->f32_srel) ((float *)ms[c])[i] = v;
            else { /* the e4m3 byte at or below v: 2^(e-7)·(1 + m/8) */
                int e = (int)floorf(log2f(v));
                int m = (int)floorf((v / ldexpf(1.0f, e) - 1.0f) * 8.0f);
                ((uint8_t *)ms[c])[i] = (uint8_t)(((e + 7) << 3) | (m > 7 ? 7 : m));
            }
        }
        if (qmm_weight_borrow_w4a8(ctx, &d, &w4[c]) != QMM_OK) goto fail;
    }
    qmm_linear_args a = qmm_linear_args_default();
    a.M = M; a.x = x; a.x_dtype = QMM_F32; a.y = y; a.y_dtype = QMM_F32; a.engine = b->engine;
    double best8 = INFINITY, best4 = INFINITY;
    /* a warm call of each, then the rounds */
    a.engine = b->engine;
    if ((b->only != 2 && qmm_linear(ctx, w8[0], &a) != QMM_OK) || (b->only != 1 && qmm_linear(ctx, w4[0], &a) != QMM_OK))
        goto fail;
    for (int r = 0; r < b->rounds; r++)
        for (int side = 0; side < 2; side++) {
            const int four = (side + r) % 2;
            if (b->only && four != b->only - 1) continue;
            qmm_weight *w = four ? w4[(r + 1) % n4] : w8[(r + 1) % n8];
            const double t0 = qmm_now();
            if (qmm_linear(ctx, w, &a) != QMM_OK) goto fail;
            const double t = qmm_now() - t0;
            if (four && t < best4) best4 = t;
            if (!four && t < best8) best8 = t;
        }
    const double g4 = (double)(cbytes + sbytes) / best4 * 1e-9, g8 = (double)nk / best8 * 1e-9;
    char mnk[64];
    snprintf(mnk, sizeof mnk, "%lldx%lldx%lld", (long long)M, (long long)N, (long long)K);
    printf("%-12s %-18s %9.3f %9.3f %7.2fx %8.1f", sh->name, mnk, best8 * 1e3, best4 * 1e3, best8 / best4, g4);
    if (M <= 32 && b->dram_gbps > 0)
        printf(" %6.1f%% %8.1f %6.1f%%\n", 100.0 * g4 / b->dram_gbps, g8, 100.0 * g8 / b->dram_gbps);
    else printf(" %7s %8.1f %7s\n", "-", g8, "-");
    fflush(stdout);
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "qmm bench --w4a8: %s: %s\n", sh->name, qmm_last_error());
done:
    for (int c = 0; c < 16; c++) {
        qmm_weight_destroy(w8[c]);
        qmm_weight_destroy(w4[c]);
        free(mem8[c]);
        free(mc[c]);
        free(ms[c]);
    }
    free(sch);
    free(x);
    free(y);
    return rc;
}

int qmm_bench_w4a8(int argc, char **argv) {
    w4bench b;
    memset(&b, 0, sizeof b);
    b.rounds = 7;
    b.bits = 4;
    b.group = 16;
    b.engine = QMM_ENGINE_AUTO;
    qmm_bench_shape shapes[32];
    size_t n_shapes = 0;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(o, "--quick")) b.quick = 1;
        else if (!strcmp(o, "--codebook")) b.codebook = 1;
        else if (!strcmp(o, "--resident")) b.resident = 1;
        else if (!strcmp(o, "--f32-srel")) b.f32_srel = 1;
        else if (!strcmp(o, "--only") && v && (!strcmp(v, "int8") || !strcmp(v, "w4a8"))) {
            b.only = !strcmp(v, "int8") ? 1 : 2;
            i++;
        } else if (!strcmp(o, "--threads") && v) { b.threads = atoi(v); i++; }
        else if (!strcmp(o, "--rounds") && v) { b.rounds = atoi(v); i++; }
        else if (!strcmp(o, "--bits") && v) { b.bits = atoi(v); i++; }
        else if (!strcmp(o, "--group") && v) { b.group = atoi(v); i++; }
        else if (!strcmp(o, "--engine") && v) {
            b.engine = qmm_engine_from_name(v);
            if ((unsigned)b.engine >= QMM_ENGINE_MAX || b.engine == QMM_ENGINE_AUTO) {
                fprintf(stderr, "qmm bench --w4a8: unknown engine '%s'\n", v);
                return 2;
            }
            i++;
        } else if (!strcmp(o, "--shape") && v && n_shapes < 32) {
            if (qmm_bench_parse_shape(v, &shapes[n_shapes])) {
                fprintf(stderr, "qmm bench --w4a8: bad shape '%s'\n", v);
                return 2;
            }
            n_shapes++;
            i++;
        } else {
            fprintf(stderr, "usage: qmm bench --w4a8 [--shape MxNxK[:gN]]... [--engine NAME] [--threads T] [--rounds R]\n"
                            "                        [--bits 4|6] [--group G] [--codebook] [--f32-srel] [--quick] [--only int8|w4a8] [--resident]\n");
            return 2;
        }
    }
    if (b.rounds < 1 || (b.bits != 4 && b.bits != 6) || b.group < 4 || b.threads < 0) {
        fprintf(stderr, "qmm bench --w4a8: bad --rounds, --bits, --group or --threads\n");
        return 2;
    }
    if (b.quick) {
        b.rounds = 2;
        if (!n_shapes) shapes[n_shapes++] = (qmm_bench_shape){"quick", 4, 256, 512, QMM_ACT_NONE, 0};
    }
    for (size_t i = 0; !n_shapes && i < sizeof k_default / sizeof k_default[0]; i++) shapes[i] = k_default[i];
    if (!n_shapes) n_shapes = sizeof k_default / sizeof k_default[0];
    qmm_context_options o = qmm_context_options_default();
    o.n_threads = b.threads;
    o.pin_threads = 1;
    qmm_context *ctx;
    if (qmm_context_create(&o, &ctx) != QMM_OK) {
        fprintf(stderr, "qmm bench --w4a8: %s\n", qmm_last_error());
        return 1;
    }
    b.threads = qmm_context_threads(ctx);
    if (b.engine == QMM_ENGINE_AUTO) /* the first int8 engine this CPU runs: both sides on it */
        for (int i = 0; i < qmm_engine_count(); i++) {
            qmm_engine_info e;
            if (qmm_engine_get_info(i, &e) == QMM_OK && e.kind == QMM_KIND_INT8 && qmm_engine_available(e.id, NULL, 0)) {
                b.engine = e.id;
                break;
            }
        }
    size_t llc = qmm_llc_bytes();
    b.dram_bytes = b.quick ? (size_t)16 << 20 : 3 * llc < ((size_t)256 << 20) ? (size_t)256 << 20
                                              : 3 * llc > ((size_t)1 << 30) ? (size_t)1 << 30 : 3 * llc;
    b.dram_gbps = qmm_dram_read_gbps(b.threads, b.dram_bytes, b.quick ? 1 : 3);
    printf("qmm bench --w4a8: %s, %d threads (pinned), engine %s, W%dA8 group %d, %s, s_rel %s; x, y f32\n",
           qmm_cpu_brand(), b.threads, b.engine == QMM_ENGINE_AUTO ? "auto" : qmm_engine_name(b.engine), b.bits,
           b.group, b.codebook ? "codebook" : "uniform", b.f32_srel ? "f32" : "e4m3");
    printf("both borrowed; best of %d rounds, sides alternating; M<=32: weights rotated past 2x LLC (%zu MiB)\n",
           b.rounds, llc >> 20);
    printf("DRAM read at start: %.1f GB/s (%zu MiB, %d threads)\n\n", b.dram_gbps, b.dram_bytes >> 20, b.threads);
    printf("%-12s %-18s %9s %9s %8s %8s %7s %8s %7s\n", "shape", "MxNxK", "int8 ms", "w4a8 ms", "speedup", "w4 GB/s",
           "%dram", "i8 GB/s", "%dram");
    int rc = 0;
    for (size_t i = 0; i < n_shapes; i++) rc |= bench_one(&b, ctx, &shapes[i]);
    printf("\nDRAM read, best of the run: %.1f GB/s (the %%dram column uses it; w4 GB/s = codes + s_rel bytes / time)\n",
           b.dram_gbps);
    qmm_context_destroy(ctx);
    return rc;
}
