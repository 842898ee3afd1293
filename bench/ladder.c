/*
 * ladder.c — `qmm bench --amx-ladder`: amx_int8's ladder (issue 27; bench/NOTES.md "## The AMX
 * ladder"). Each rung changes one thing from the one above, so that where the peak goes shows
 * as a step between two adjacent rows:
 *   rungs     the engine's probes (qmm_engine_probe: src/engines/x86_amx/amx_ladder.c, the
 *             library's own micro-kernel and tile macros, built with the library's AMX flags):
 *             tile-only peak with 4 and 6 accumulators, the plain 2×2 kernel (the same-run
 *             baseline), the micro-kernel all in L1, + the C round trip (the d9c1ae0 row layout
 *             and tile-contiguous), + A from L2 (in place at Kp = 5376 and packed), K chunks of
 *             256 / 768 / 1024 bytes, A through TILELOADDT1;
 *   driver    qmm_linear on amx_int8 with i32 output, no act, no rotation (the driver's GEMM with
 *             the pre-pass's quantization only), owned and borrowed weights;
 *   full      qmm_linear bf16 → bf16 with convrot g256 (what a layer costs), owned and borrowed;
 *   vnni      the same two on avx512_vnni, against its own same-run peak (bench/peak.c).
 * Each on 1 and 2 threads (pinned to CPUs 0, 1), best of 3 rounds that alternate the rows;
 * printed: ns per TDPBSSD and % of the same-run peak4 rung, by wall clock and by thread CPU time
 * (CPU time does not count a descheduled thread: the figure robust to host steal). For the
 * driver and full rows a TDPBSSD is one 16 × 16 × 64 tile product of the call's M × N × K
 * (rounded up to tiles), per thread. About 1–3 minutes; --quick: seconds.
 * Without AMX: one line naming what is missing, exit 0.
 */
#define _GNU_SOURCE
#include "ladder.h"

#include "peak.h"
#include "qmm.h"

#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    int rung, cpu;
    int64_t reps;
    pthread_barrier_t *bar;
    qmm_probe_result r;
    qmm_status st;
} job;

static void ready(void *arg) { pthread_barrier_wait((pthread_barrier_t *)arg); }

static void *run_job(void *p) {
    job *j = p;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(j->cpu, &set);
    (void)pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    j->st = qmm_engine_probe(QMM_ENGINE_AMX_INT8, j->rung, j->reps, ready, j->bar, &j->r);
    if (j->st != QMM_OK) pthread_barrier_wait(j->bar); /* never reached ready(): keep the others going */
    return NULL;
}

/* One rung on T threads at once: per-thread ns per TDPBSSD (the slowest thread) by wall and CPU. */
static int rung_on(int rung, int T, int64_t reps, double *ns_wall, double *ns_cpu, int64_t *bad) {
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, (unsigned)T);
    job j[2];
    pthread_t th[2];
    for (int t = 0; t < T; t++) {
        j[t] = (job){.rung = rung, .cpu = t, .reps = reps, .bar = &bar};
        pthread_create(&th[t], NULL, run_job, &j[t]);
    }
    int ok = 1;
    *ns_wall = *ns_cpu = 0;
    *bad = 0;
    for (int t = 0; t < T; t++) {
        pthread_join(th[t], NULL);
        if (j[t].st != QMM_OK || j[t].r.ops <= 0) { ok = 0; continue; }
        const double w = j[t].r.wall_s * 1e9 / (double)j[t].r.ops, c = j[t].r.cpu_s * 1e9 / (double)j[t].r.ops;
        if (w > *ns_wall) *ns_wall = w;
        if (c > *ns_cpu) *ns_cpu = c;
        *bad += j[t].r.bad;
    }
    pthread_barrier_destroy(&bar);
    return ok;
}

static uint32_t g_seed = 2027;
static uint32_t rnd(void) {
    g_seed = g_seed * 1664525u + 1013904223u;
    return g_seed >> 8;
}

static uint16_t bf16_of(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

typedef struct {
    int64_t M, N, K;
    int8_t *w;
    float *scale;
    uint16_t *x;
    void *y;
} layer_bufs;

/* One qmm_linear row: best of `rounds` timed calls (after one warm call); 0 on failure. */
static double linear_s(qmm_context *ctx, const layer_bufs *L, qmm_engine_id e, int borrowed, int full, int reps) {
    qmm_weight_desc d = qmm_weight_desc_default();
    d.name = "ladder";
    d.N = L->N;
    d.K = L->K;
    d.data = L->w;
    d.scale = L->scale;
    d.n_scale = L->N;
    d.convrot_gs = full ? 256 : 0;
    qmm_weight *w = NULL;
    if ((borrowed ? qmm_weight_borrow_int8(ctx, &d, &w) : qmm_weight_create_int8(ctx, &d, &w)) != QMM_OK) return 0;
    qmm_linear_args a = qmm_linear_args_default();
    a.M = L->M;
    a.x = L->x;
    a.x_dtype = QMM_BF16;
    a.y = L->y;
    a.y_dtype = full ? QMM_BF16 : QMM_I32;
    a.engine = e;
    double best = 0;
    for (int i = 0; i <= reps; i++) {
        const double t0 = qmm_now();
        if (qmm_linear(ctx, w, &a) != QMM_OK || qmm_last_engine(ctx) != e) { best = 0; break; }
        const double t = qmm_now() - t0;
        if (i && (best == 0 || t < best)) best = t;
    }
    qmm_weight_destroy(w);
    return best;
}

static void thp_line(void) {
    const char *files[2] = {"/sys/kernel/mm/transparent_hugepage/enabled", "/sys/kernel/mm/transparent_hugepage/defrag"};
    printf("THP:");
    for (int i = 0; i < 2; i++) {
        char buf[160] = "?";
        FILE *f = fopen(files[i], "r");
        if (f) {
            if (!fgets(buf, sizeof buf, f)) strcpy(buf, "?");
            fclose(f);
            buf[strcspn(buf, "\n")] = 0;
        }
        printf(" %s [%s]", i ? "defrag" : "enabled", buf);
    }
    printf("\n");
}

int qmm_bench_amx_ladder(int quick) {
    char why[256] = "";
    if (!qmm_engine_available(QMM_ENGINE_AMX_INT8, why, sizeof why) || qmm_engine_probe_count(QMM_ENGINE_AMX_INT8) <= 0) {
        printf("qmm bench --amx-ladder: needs AMX (AMX-TILE + AMX-INT8, the OS permitting them, and a build with them): "
               "amx_int8 is not available here: %s\n", why[0] ? why : "it has no probes in this build");
        return 0;
    }
    const long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    const int Tmax = ncpu >= 2 ? 2 : 1, rounds = quick ? 1 : 3, nr = qmm_engine_probe_count(QMM_ENGINE_AMX_INT8);
    const double target = quick ? 0.01 : 0.12; /* seconds per timed rung run */
    printf("amx ladder: %ld CPUs online, threads 1%s; best of %d round(s); ns per TDPBSSD per thread\n", ncpu,
           Tmax > 1 ? " and 2" : "", rounds);
    thp_line();
    int fail = 0;
    for (int T = 1; T <= Tmax; T++) {
        double wall[32], cpu[32];
        int64_t reps[32], bad[32];
        for (int i = 0; i < nr && i < 32; i++) wall[i] = cpu[i] = 0, bad[i] = 0;
        /* units differ in size: time 4 reps, scale to the target */
        for (int i = 0; i < nr && i < 32; i++) {
            job j = {.rung = i, .cpu = 0, .reps = 4};
            pthread_barrier_t bar;
            pthread_barrier_init(&bar, NULL, 1);
            j.bar = &bar;
            run_job(&j);
            pthread_barrier_destroy(&bar);
            if (j.st != QMM_OK) {
                printf("rung %s: %s\n", qmm_engine_probe_name(QMM_ENGINE_AMX_INT8, i), qmm_last_error());
                return 1;
            }
            const double s = j.r.wall_s > 1e-7 ? j.r.wall_s / 4 : 1e-7;
            reps[i] = (int64_t)(target / s) + 1;
        }
        for (int r = 0; r < rounds; r++)
            for (int k = 0; k < nr && k < 32; k++) {
                const int i = r % 2 ? nr - 1 - k : k; /* alternate the order */
                double w, c;
                int64_t b;
                if (!rung_on(i, T, reps[i], &w, &c, &b)) fail = 1;
                if (b) bad[i] = b;
                if (wall[i] == 0 || w < wall[i]) wall[i] = w;
                if (cpu[i] == 0 || c < cpu[i]) cpu[i] = c;
            }
        printf("\nthreads %d\n%-12s %12s %8s %12s %8s %6s\n", T, "rung", "ns/TDP wall", "%peak", "ns/TDP cpu", "%peak",
               "bad C");
        for (int i = 0; i < nr && i < 32; i++) {
            printf("%-12s %12.2f %7.1f%% %12.2f %7.1f%% %6lld\n", qmm_engine_probe_name(QMM_ENGINE_AMX_INT8, i), wall[i],
                   100 * wall[0] / wall[i], cpu[i], 100 * cpu[0] / cpu[i], (long long)bad[i]);
            if (bad[i]) fail = 1;
        }
        /* the driver's GEMM alone and the full layer, amx_int8 and avx512_vnni */
        qmm_context_options o = qmm_context_options_default();
        o.n_threads = T;
        o.pin_threads = 1;
        qmm_context *ctx = NULL;
        if (qmm_context_create(&o, &ctx) != QMM_OK) return 1;
        static const int64_t shapes[][3] = {{1024, 5376, 5376}, {256, 5376, 5376}, {16, 28672, 5376}};
        const int nshapes = quick ? 1 : 3;
        const double peak_amx = qmm_peak_tops(QMM_ENGINE_AMX_INT8, T, quick ? 0.02 : 0.2, NULL, 0);
        const double peak_amx_cpu = qmm_peak_tops_cpu(QMM_ENGINE_AMX_INT8, T, quick ? 0.02 : 0.2);
        char vwhy[160] = "";
        const int vnni = qmm_engine_available(QMM_ENGINE_AVX512_VNNI, vwhy, sizeof vwhy);
        const double peak_vnni = vnni ? qmm_peak_tops(QMM_ENGINE_AVX512_VNNI, T, quick ? 0.02 : 0.2, NULL, 0) : 0;
        printf("peak loops (bench/peak.c): amx_int8 %.2f TOPS wall, %.2f by CPU time; avx512_vnni %.2f TOPS%s%s\n",
               peak_amx, peak_amx_cpu, peak_vnni, vnni ? "" : " (", vnni ? "" : vwhy);
        printf("%-22s %-8s %-11s %-9s %10s %12s %8s %8s\n", "shape", "layout", "engine", "row", "ms", "ns/TDP", "%peak4",
               "TOPS");
        for (int s = 0; s < nshapes; s++) {
            layer_bufs L = {quick ? 256 : shapes[s][0], quick ? 1024 : shapes[s][1], quick ? 1024 : shapes[s][2], 0, 0, 0, 0};
            L.w = malloc((size_t)(L.N * L.K));
            L.scale = malloc((size_t)L.N * sizeof(float));
            L.x = malloc((size_t)(L.M * L.K) * 2);
            L.y = malloc((size_t)(L.M * L.N) * 4);
            if (!L.w || !L.scale || !L.x || !L.y) return 1;
            for (int64_t i = 0; i < L.N * L.K; i++) L.w[i] = (int8_t)(rnd() % 255 - 127);
            for (int64_t i = 0; i < L.N; i++) L.scale[i] = 1e-3f;
            for (int64_t i = 0; i < L.M * L.K; i++) L.x[i] = bf16_of((float)((int)(rnd() % 2001) - 1000) * 1e-3f);
            const double tdp = (double)((L.M + 15) / 16) * (double)((L.N + 15) / 16) * (double)((L.K + 63) / 64);
            for (int full = 0; full < 2; full++)
                for (int borrowed = 0; borrowed < 2; borrowed++)
                    for (int ei = 0; ei < 1 + vnni; ei++) {
                        const qmm_engine_id e = ei ? QMM_ENGINE_AVX512_VNNI : QMM_ENGINE_AMX_INT8;
                        const double t = linear_s(ctx, &L, e, borrowed, full, quick ? 1 : 3);
                        char sh[40];
                        snprintf(sh, sizeof sh, "%lldx%lldx%lld", (long long)L.M, (long long)L.N, (long long)L.K);
                        if (t <= 0) {
                            printf("%-22s %-8s %-11s %-9s failed: %s\n", sh, borrowed ? "borrowed" : "packed",
                                   qmm_engine_name(e), full ? "full" : "driver", qmm_last_error());
                            continue;
                        }
                        const double ns = t * 1e9 * T / tdp, tops = 2.0 * L.M * L.N * L.K / t * 1e-12;
                        const double pk = ei ? peak_vnni : peak_amx;
                        printf("%-22s %-8s %-11s %-9s %10.3f %12.2f %7.1f%% %8.2f (%.0f%% of its peak loop)\n", sh,
                               borrowed ? "borrowed" : "packed", qmm_engine_name(e), full ? "full" : "driver", t * 1e3,
                               ns, ei ? 0.0 : 100 * wall[0] / ns, tops, pk > 0 ? 100 * tops / pk : 0.0);
                    }
            free(L.w); free(L.scale); free(L.x); free(L.y);
        }
        qmm_context_destroy(ctx);
    }
    printf("\nrungs: src/engines/x86_amx/amx_ladder.c; rows: bench/ladder.c; reading them: bench/NOTES.md \"## The AMX ladder\"\n");
    if (fail) printf("amx ladder FAILED: a rung computed a wrong C (bad C > 0) or a row failed\n");
    return fail;
}
