/*
 * cmd_bench.c — `qmm bench`: per-kernel benchmarks on the model shapes of SPEC §8.
 *
 * For each shape (bench/shapes.h; --shape MxNxK[:swiglu|:gelu][:gN] for others) and each int8
 * engine: the median time of qmm_linear over the repeats (bf16 x and y, pre-pass and epilogue
 * included, pinned threads), int8 TOPS = 2·M·N·K / t, the engine's peak measured in this same
 * run by a register-only loop of its core instruction (bench/peak.c) and the % reached, and
 * the GB/s of weight bytes streamed — for M ≤ 32 (BW_M, the AMX decode regime) the weight is rotated through enough copies
 * that more bytes than the last-level cache are read, and the GB/s is compared with the DRAM
 * read bandwidth measured in this run (peaks and bandwidth are measured again next to the rows
 * they judge, and the best of the run is used: this machine may be shared). Then the float paths: the W8A16 fallback (the int8
 * weight on a float engine), the BF16 linear and the FP32 linear (float weights), each with
 * its engine's peak, and the speedup of the best INT8 row over it. An engine that is
 * unavailable or refuses the call is a row with its reason, never a crash.
 * Layouts (--layouts packed,borrowed; default packed): the int8 and W8A16 rows of each engine are
 * timed on the weight qmm packs at creation (qmm_weight_create_int8, "packed") and on the same
 * values borrowed from the caller's memory (qmm_weight_borrow_int8, "borrowed"), together: their
 * calls in turn, call by call (time_rows), so that a shared machine's slow moments fall on both;
 * float weights are always "packed".
 * Output: a table, or with --json an array of row objects (M, N, K, act, gs, kind, layout, engine,
 * threads, status, reason, median_ms, min_ms, repeats, tops, peak_tops, pct_peak, gbps, dram_gbps,
 * pct_dram, speedup_int8, cpu_tops, pct_peak_cpu; numbers are null where they do not apply; for
 * the AMX engines also regime, the regime their rule picks for the row (qmm_engine_regime), and
 * amx_blocking, the blocking in force (qmm_engine_tuning: QMM_AMX_BLOCKING applied) — so a run on an AMX machine
 * can be judged regime by regime against bench/NOTES.md; "" for the other engines).
 * --regimes adds the rows that judge each AMX regime and its switch points (M = 1 .. 4096 on
 * 5376×5376, and 256 / 4096 on 5376×14336 swiglu) and lets amx_int8 run below its small-M
 * switch (min_m=1 unless QMM_AMX_BLOCKING names min_m) so that both sides of it are timed.
 * cpu_tops / pct_peak_cpu judge the same run by process CPU time (ops ÷ (CPU seconds / threads))
 * against the peak loop judged by thread CPU time: the view that survives a machine shared with
 * other processes (a descheduled thread does not count). Meaningless for bandwidth-bound rows.
 */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include "commands.h"
#include "ladder.h"
#include "peak.h"
#include "qmm.h"
#include "shapes.h"
#include "w4a8_bench.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { KIND_INT8, KIND_W8A16, KIND_BF16, KIND_F32 };
enum { LAYOUT_PACKED = 0, LAYOUT_BORROWED = 1, LAYOUT_COUNT = 2 };
static const char *const k_layout_name[] = {"packed", "borrowed"};
enum { BW_M = 32 }; /* rows up to this M are judged by bandwidth (weight copies rotated past the LLC) */
static const char *const k_kind_name[] = {"int8", "w8a16", "bf16", "f32"};

typedef struct {
    qmm_bench_shape sh;
    int kind;
    int layout;             /* LAYOUT_* */
    qmm_engine_id engine;
    int threads;
    int ok;                 /* 1 ran; 0 refused/unavailable/error (reason) */
    char reason[640];
    double median_ms, min_ms;
    int repeats, copies;
    double tops, peak_tops, pct_peak, gbps, dram_gbps, pct_dram, speedup_int8;
    double cpu_tops, pct_peak_cpu;  /* judged by process CPU time (robust to a shared machine) */
    const char *regime;     /* qmm_engine_regime: the AMX engines' regime for the row, else "" */
} row;

typedef struct {
    int threads, repeats, json, quick, no_float, full;
    uint32_t engines;       /* bit per engine; 0 = default set */
    int layouts[LAYOUT_COUNT], n_layouts; /* --layouts, in order */
    double dram_gbps;       /* best of the run */
    size_t dram_bytes;
    double peak[QMM_ENGINE_MAX], peak_cpu[QMM_ENGINE_MAX]; /* by engine id */
    char peak_why[QMM_ENGINE_MAX][QMM_REASON_MAX];
    int peak_done[QMM_ENGINE_MAX];
    row *rows;
    size_t n_rows, cap_rows;
} bench;

/* The per-regime rows of --regimes: M across every AMX regime and switch point. */
static const qmm_bench_shape k_regime_shapes[] = {
    {"regime decode M=1", 1, 28672, 5376, QMM_ACT_NONE, 256},
    {"regime decode M=4", 4, 28672, 5376, QMM_ACT_NONE, 256},
    {"regime decode M=8", 8, 28672, 5376, QMM_ACT_NONE, 256},
    {"regime decode M=16", 16, 28672, 5376, QMM_ACT_NONE, 256},
    {"regime decode M=32", 32, 28672, 5376, QMM_ACT_NONE, 256},
    {"regime panel M=64", 64, 5376, 5376, QMM_ACT_NONE, 256},
    {"regime panel M=256", 256, 5376, 5376, QMM_ACT_NONE, 256},
    {"regime blocked M=512", 512, 5376, 5376, QMM_ACT_NONE, 256},
    {"regime blocked M=1024", 1024, 5376, 5376, QMM_ACT_NONE, 256},
    {"regime blocked M=4096", 4096, 5376, 5376, QMM_ACT_NONE, 256},
    {"regime fc2 M=256", 256, 5376, 14336, QMM_ACT_SWIGLU, 256},
    {"regime fc2 M=4096", 4096, 5376, 14336, QMM_ACT_SWIGLU, 256},
};


static void usage(FILE *f) {
    fprintf(f, "usage: qmm bench [--shape MxNxK[:swiglu|:gelu][:g16|:g64|:g256]]... [--all] [--regimes] [--engines a,b]\n"
               "                 [--layouts packed,borrowed] [--threads T] [--repeats R] [--json] [--quick] [--no-float]\n"
               "                 [--full] [--dram-mb MB]\n"
               "       qmm bench --amx-ladder [--quick]\n"
               "       qmm bench --peaks [--engines a,b] [--threads T] [--json] [--quick]\n"
               "       qmm bench --w4a8 [--shape MxNxK]... [--engine E] [--bits 4|6] [--group G] [--codebook] (bench/w4a8_bench.c)\n"
               "  default shapes: the performance targets (M=4096 21504x5376 g256, 5376x14336 swiglu;\n"
               "  M=256 5376x5376; M=1 and M=16 28672x5376); --all: every N x K of SPEC §8 at M=256.\n"
               "  --layouts: the int8 weights packed at creation and/or borrowed (the caller's memory, read at every call), side by side.\n"
               "  --regimes: rows for every AMX regime and switch point (amx_int8 also below its min M).\n"
               "  --peaks: each engine's register-loop peak alone (T ops/s, wall and CPU time; what the rows'\n"
               "  %% of peak and python -m qmm.bench.attention divide by), best of 3 runs of the loop.\n"
               "  --amx-ladder: amx_int8's ladder of micro-benchmarks (bench/NOTES.md \"## The AMX ladder\"), 1 and 2\n"
               "  threads, with the driver's GEMM, the full layer and avx512_vnni; without AMX it says what is missing.\n"
               "  --quick: a tiny shape, short peak loops and bandwidth buffer (smoke test).\n"
               "  repeats (default 3) shrink to ~6 s per row; a row over 5 s per call reports its first\n"
               "  call alone (repeats 0) unless --full.\n");
}

/* xorshift fill: int8 in [-127, 127] (no -128, as qmm's quantizer), fast for 100+ MB */
static void fill_i8(int8_t *p, size_t n, uint64_t seed) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i += 8) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        uint64_t v = s;
        for (size_t j = 0; j < 8 && i + j < n; j++, v >>= 8) {
            int8_t b = (int8_t)(v & 0xff);
            p[i + j] = b == -128 ? 0 : b;
        }
    }
}
/* floats ~ U(-1, 1) stored as dtype t (F32 or BF16) */
static void fill_f(void *p, qmm_dtype t, size_t n, uint64_t seed) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 7;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        float v = (float)((int64_t)(s >> 40) - (1 << 23)) / (float)(1 << 23);
        if (t == QMM_BF16) {
            uint32_t u;
            memcpy(&u, &v, 4);
            ((uint16_t *)p)[i] = (uint16_t)(u >> 16);
        } else {
            ((float *)p)[i] = v;
        }
    }
}

/* The machine is shared and noisy: peaks and bandwidth are measured again next to the rows
 * that use them, and the best of the run is kept (an upper bound: the %s are conservative). */
static double peak_of(bench *b, qmm_engine_id e) {
    double p = qmm_peak_tops(e, b->threads, b->quick ? 0.005 : b->peak_done[e] ? 0.05 : 0.2, b->peak_why[e],
                             QMM_REASON_MAX);
    if (p > b->peak[e]) b->peak[e] = p;
    if (p > 0) {
        double pc = qmm_peak_tops_cpu(e, b->threads, b->quick ? 0.005 : 0.05);
        if (pc > b->peak_cpu[e]) b->peak_cpu[e] = pc;
    }
    b->peak_done[e] = 1;
    return b->peak[e];
}

/* --peaks: per engine of this CPU (or of --engines), its peak loop alone on b->threads threads:
 * "engine instruction T/s cpu-T/s" lines, or one JSON object per engine (engine, instruction,
 * threads, peak_tops, peak_tops_cpu; null and reason where the CPU or build cannot run it) */
static int engines_of_kind(int kind, qmm_engine_id out[QMM_ENGINE_MAX]);
static void bench_peaks(bench *b) {
    qmm_engine_id engines[QMM_ENGINE_MAX];
    const int n = engines_of_kind(-1, engines);
    if (!b->json) printf("peaks on %d threads (pinned), %s:\n", b->threads, qmm_cpu_brand());
    for (int i = 0; i < n; i++) {
        const qmm_engine_id e = engines[i];
        if (b->engines && !(b->engines & (1u << e))) continue;
        const double p = peak_of(b, e), pc = b->peak_cpu[e];
        if (b->json) {
            if (p > 0)
                printf("{\"engine\": \"%s\", \"instruction\": \"%s\", \"threads\": %d, \"peak_tops\": %.4f, "
                       "\"peak_tops_cpu\": %.4f}\n", qmm_engine_name(e), qmm_peak_instruction(e), b->threads, p, pc);
            else
                printf("{\"engine\": \"%s\", \"instruction\": \"%s\", \"threads\": %d, \"peak_tops\": null, "
                       "\"peak_tops_cpu\": null, \"reason\": \"%s\"}\n", qmm_engine_name(e), qmm_peak_instruction(e),
                       b->threads, b->peak_why[e]);
        } else if (p > 0) {
            printf("  %-12s %-34s %.3f T/s (CPU time: %.3f)\n", qmm_engine_name(e), qmm_peak_instruction(e), p, pc);
        } else {
            printf("  %-12s %-34s unavailable: %s\n", qmm_engine_name(e), qmm_peak_instruction(e), b->peak_why[e]);
        }
    }
}

static void measure_dram(bench *b, size_t bytes) {
    double g = qmm_dram_read_gbps(b->threads, bytes, b->quick ? 1 : 3);
    if (g > b->dram_gbps) b->dram_gbps = g;
}

/* Fills the ratios of every row with the best peak and bandwidth of the whole run. */
static void finish_rows(bench *b) {
    for (size_t i = 0; i < b->n_rows; i++) {
        row *r = &b->rows[i];
        if (!r->ok) continue;
        if (b->peak[r->engine] > 0) {
            r->peak_tops = b->peak[r->engine];
            r->pct_peak = 100.0 * r->tops / r->peak_tops;
        }
        if (b->peak_cpu[r->engine] > 0) r->pct_peak_cpu = 100.0 * r->cpu_tops / b->peak_cpu[r->engine];
        r->dram_gbps = b->dram_gbps;
        if (b->dram_gbps > 0) r->pct_dram = 100.0 * r->gbps / b->dram_gbps;
    }
}

static row *add_row(bench *b, const qmm_bench_shape *sh, int kind, qmm_engine_id e, int layout) {
    if (b->n_rows == b->cap_rows) {
        size_t cap = b->cap_rows ? 2 * b->cap_rows : 32;
        row *r = realloc(b->rows, cap * sizeof *r);
        if (!r) return NULL;
        b->rows = r;
        b->cap_rows = cap;
    }
    row *r = &b->rows[b->n_rows++];
    memset(r, 0, sizeof *r);
    r->sh = *sh;
    r->kind = kind;
    r->layout = layout;
    r->engine = e;
    r->threads = b->threads;
    r->median_ms = r->min_ms = r->tops = r->peak_tops = r->pct_peak = r->gbps = r->dram_gbps = r->pct_dram = r->speedup_int8 = NAN;
    r->cpu_tops = r->pct_peak_cpu = NAN;
    return r;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Times rows r[0..n) (n <= LAYOUT_COUNT; the same engine, args and shape), row j on the weights
 * w[j] (rotated through ncopies): a first call each, then the repeats with the rows' calls in
 * turn (in the given order on even repeats, reversed on odd ones), so that a shared machine's
 * slow moments fall on both; fills the rows (median and minimum). */
static void time_rows(bench *b, qmm_context *ctx, int n, qmm_weight **w[], int ncopies, qmm_linear_args *args,
                      row *r[], double weight_bytes) {
    qmm_engine_id e = r[0]->engine;
    char why[QMM_REASON_MAX];
    double warm = 0, warm_t[LAYOUT_COUNT] = {0}, warm_cpu[LAYOUT_COUNT] = {0};
    int live[LAYOUT_COUNT] = {0}, nlive = 0;
    args->engine = e;
    for (int j = 0; j < n; j++) {
        r[j]->regime = qmm_engine_regime(e, w[j][0], r[j]->sh.M); /* the AMX engines' regime, "" for the others */
        if (!qmm_engine_available(e, why, sizeof why)) {
            snprintf(r[j]->reason, sizeof r[j]->reason, "unavailable: %s", why);
            continue;
        }
        double c0 = qmm_process_cpu(), t0 = qmm_now();
        qmm_status st = qmm_linear(ctx, w[j][0], args);
        const double t = qmm_now() - t0;
        warm_cpu[j] = qmm_process_cpu() - c0;
        if (st != QMM_OK) {
            const char *msg = qmm_last_error(), *p = strstr(msg, "refuses: ");
            snprintf(r[j]->reason, sizeof r[j]->reason, "%s%s", st == QMM_ERR_UNSUPPORTED && p ? "refused: " : "error: ",
                     st == QMM_ERR_UNSUPPORTED && p ? p + 9 : msg);
            continue;
        }
        warm_t[j] = t;
        if (t > warm) warm = t;
        live[j] = 1;
        nlive++;
    }
    if (!nlive) return;
    /* keep the default run short: about 6 s of repeats per row; a row slower than 5 s per call
     * (the FP32 baseline at M=4096) reports its first call alone (repeats = 0) */
    int reps = b->repeats;
    if (!b->quick && warm * reps > 6.0) reps = (int)(6.0 / warm) > 1 ? (int)(6.0 / warm) : 1;
    if (!b->quick && warm > 5.0 && !b->full) reps = 0;
    const int ns = reps ? reps : 1;
    double *ts = malloc(sizeof(double) * (size_t)ns * 2 * LAYOUT_COUNT);
    if (!ts) {
        for (int j = 0; j < n; j++)
            if (live[j]) snprintf(r[j]->reason, sizeof r[j]->reason, "error: out of memory");
        return;
    }
    double *tsj[LAYOUT_COUNT], *csj[LAYOUT_COUNT];
    for (int j = 0; j < LAYOUT_COUNT; j++) {
        tsj[j] = ts + (size_t)ns * 2 * (size_t)j;
        csj[j] = tsj[j] + ns;
        if (j < n && reps == 0) { tsj[j][0] = warm_t[j]; csj[j][0] = warm_cpu[j]; }
    }
    for (int i = 0; i < reps; i++)
        for (int o = 0; o < n; o++) {
            const int j = i % 2 ? n - 1 - o : o;
            if (!live[j]) continue;
            double c0 = qmm_process_cpu(), t0 = qmm_now();
            qmm_status st = qmm_linear(ctx, w[j][(i + 1) % ncopies], args);
            tsj[j][i] = qmm_now() - t0;
            csj[j][i] = qmm_process_cpu() - c0;
            if (st != QMM_OK) {
                snprintf(r[j]->reason, sizeof r[j]->reason, "error: %s", qmm_last_error());
                live[j] = 0;
            }
        }
    for (int j = 0; j < n; j++) {
        if (!live[j]) continue;
        qsort(tsj[j], (size_t)ns, sizeof(double), cmp_double);
        qsort(csj[j], (size_t)ns, sizeof(double), cmp_double);
        const double t = ns % 2 ? tsj[j][ns / 2] : 0.5 * (tsj[j][ns / 2 - 1] + tsj[j][ns / 2]);
        const double tc = (ns % 2 ? csj[j][ns / 2] : 0.5 * (csj[j][ns / 2 - 1] + csj[j][ns / 2])) / b->threads;
        row *rj = r[j];
        rj->ok = 1;
        rj->repeats = reps;
        rj->copies = ncopies;
        rj->median_ms = t * 1e3;
        rj->min_ms = tsj[j][0] * 1e3;
        rj->tops = 2.0 * (double)rj->sh.M * (double)rj->sh.N * (double)rj->sh.K / t * 1e-12;
        if (tc > 0) rj->cpu_tops = 2.0 * (double)rj->sh.M * (double)rj->sh.N * (double)rj->sh.K / tc * 1e-12;
        rj->gbps = weight_bytes / t * 1e-9;
    }
    free(ts);
    (void)peak_of(b, e); /* again, next to the rows it judges */
}

/* Times engine e on the weights (rotated through ncopies); fills the row. */
static void time_row(bench *b, qmm_context *ctx, qmm_weight **w, int ncopies, qmm_linear_args *args, row *r,
                     double weight_bytes) {
    qmm_weight **ws[1] = {w};
    row *rs[1] = {r};
    time_rows(b, ctx, 1, ws, ncopies, args, rs, weight_bytes);
}

/* The layouts' rows of engine e and kind, timed together (time_rows: calls in turn) */
static void time_layouts(bench *b, qmm_context *ctx, const qmm_bench_shape *sh, int kind, qmm_engine_id e,
                         qmm_weight **wl[], int ncopies, qmm_linear_args *args, double weight_bytes) {
    qmm_weight **ws[LAYOUT_COUNT];
    row *rs[LAYOUT_COUNT];
    int n = 0;
    for (int l = 0; l < b->n_layouts; l++) {
        rs[n] = add_row(b, sh, kind, e, b->layouts[l]);
        if (!rs[n]) continue;
        ws[n++] = wl[b->layouts[l]];
    }
    if (n) time_rows(b, ctx, n, ws, ncopies, args, rs, weight_bytes);
}

/* The engines of one kind, best first (the library's order, qmm_engine_get_info); or every
 * engine but the reference when kind is -1. Returns the count. */
static int engines_of_kind(int kind, qmm_engine_id out[QMM_ENGINE_MAX]) {
    int n = 0;
    for (int i = 0; i < qmm_engine_count() && n < QMM_ENGINE_MAX; i++) {
        qmm_engine_info e;
        if (qmm_engine_get_info(i, &e) != QMM_OK || (unsigned)e.id >= QMM_ENGINE_MAX) continue;
        if (kind < 0 ? e.kind != QMM_KIND_REF : (int)e.kind == kind) out[n++] = e.id;
    }
    return n;
}

/* The float engine to time for weight w: every listed one (--engines), else the first that
 * admits per the plan; returns the count written to out. */
static int float_engines(bench *b, qmm_context *ctx, qmm_weight *w, qmm_linear_args *args, qmm_engine_id *out,
                         char *why, size_t n) {
    int k = 0;
    qmm_engine_id k_float[QMM_ENGINE_MAX];
    const int n_float = engines_of_kind(QMM_KIND_FLOAT, k_float);
    if (b->engines) {
        for (int i = 0; i < n_float; i++)
            if (b->engines & (1u << k_float[i])) out[k++] = k_float[i];
        if (!k) snprintf(why, n, "no float engine named in --engines");
        return k;
    }
    qmm_plan_info p;
    args->engine = QMM_ENGINE_AUTO;
    if (qmm_plan(ctx, w, args, &p) != QMM_OK) {
        snprintf(why, n, "plan: %s", qmm_last_error());
        return 0;
    }
    for (int i = 0; i < n_float; i++)
        if (p.admitted[k_float[i]]) { out[0] = k_float[i]; return 1; }
    size_t len = 0;
    why[0] = 0;
    for (int i = 0; i < n_float && len < n; i++) {
        int m = snprintf(why + len, n - len, "%s%s: %s", i ? "; " : "", qmm_engine_name(k_float[i]),
                         p.reason[k_float[i]]);
        if (m < 0) break;
        len += (size_t)m;
    }
    return 0;
}

static void bench_shape(bench *b, qmm_context *ctx, const qmm_bench_shape *sh) {
    const int64_t M = sh->M, N = sh->N, K = sh->K, K_in = sh->act == QMM_ACT_SWIGLU ? 2 * K : K;
    const size_t first_row = b->n_rows;
    size_t nk = (size_t)N * (size_t)K;
    int ncopies = 1;
    if (M <= BW_M) measure_dram(b, b->dram_bytes);
    if (M <= BW_M && !b->quick) {
        size_t want = 2 * qmm_llc_bytes();
        ncopies = (int)((want + nk - 1) / nk);
        if (ncopies < 2) ncopies = 2;
        if (ncopies > 8) ncopies = 8;
    }
    int8_t *wq = malloc(nk);
    float *scale = malloc(sizeof(float) * (size_t)N);
    uint16_t *x = malloc(sizeof(uint16_t) * (size_t)(M * K_in));
    float *y = malloc(sizeof(float) * (size_t)(M * N));
    qmm_weight **w = calloc((size_t)ncopies * LAYOUT_COUNT, sizeof *w), **wl[LAYOUT_COUNT] = {w, w ? w + ncopies : NULL};
    int8_t **wb = calloc((size_t)ncopies, sizeof *wb); /* the borrowed weights' memory, one per copy */
    int borrow = 0;
    for (int l = 0; l < b->n_layouts; l++) borrow |= b->layouts[l] == LAYOUT_BORROWED;
    if (!wq || !scale || !x || !y || !w || !wb) {
        fprintf(stderr, "qmm bench: out of memory for %lldx%lldx%lld\n", (long long)M, (long long)N, (long long)K);
        goto done;
    }
    fill_f(x, QMM_BF16, (size_t)(M * K_in), 3);
    for (int64_t n = 0; n < N; n++) scale[n] = 0.001f + 1e-6f * (float)(n % 100);
    for (int c = 0; c < ncopies; c++) {
        fill_i8(wq, nk, 11 + (uint64_t)c);
        qmm_weight_desc d = qmm_weight_desc_default();
        d.name = sh->name;
        d.N = N; d.K = K; d.data = wq; d.scale = scale; d.n_scale = N; d.convrot_gs = sh->gs;
        if (qmm_weight_create_int8(ctx, &d, &wl[LAYOUT_PACKED][c]) != QMM_OK) {
            fprintf(stderr, "qmm bench: %s\n", qmm_last_error());
            goto done;
        }
        if (borrow) {
            d.data = wb[c] = malloc(nk);
            if (!wb[c] || (memcpy(wb[c], wq, nk), qmm_weight_borrow_int8(ctx, &d, &wl[LAYOUT_BORROWED][c])) != QMM_OK) {
                fprintf(stderr, "qmm bench: %s\n", wb[c] ? qmm_last_error() : "out of memory");
                goto done;
            }
        }
    }
    qmm_linear_args args = qmm_linear_args_default();
    args.M = M; args.x = x; args.x_dtype = QMM_BF16; args.y = y; args.y_dtype = QMM_BF16; args.act = sh->act;
    qmm_engine_id k_int8[QMM_ENGINE_MAX];
    const int n_int8 = engines_of_kind(QMM_KIND_INT8, k_int8);
    for (int i = 0; i < n_int8; i++) {
        if (b->engines && !(b->engines & (1u << k_int8[i]))) continue;
        time_layouts(b, ctx, sh, KIND_INT8, k_int8[i], wl, ncopies, &args, (double)nk);
    }
    if (!b->no_float) {
        qmm_engine_id fe[QMM_ENGINE_MAX];
        char why[512];
        /* W8A16: the int8 weight on a float engine */
        int nf = float_engines(b, ctx, w[0], &args, fe, why, sizeof why);
        if (!nf) {
            row *r = add_row(b, sh, KIND_W8A16, QMM_ENGINE_AUTO, LAYOUT_PACKED);
            if (r) snprintf(r->reason, sizeof r->reason, "refused: %s", why);
        }
        for (int i = 0; i < nf; i++)
            time_layouts(b, ctx, sh, KIND_W8A16, fe[i], wl, ncopies, &args, (double)nk);
        /* float weights (free the int8 copies first: memory) */
        for (int c = 0; c < ncopies * LAYOUT_COUNT; c++) { qmm_weight_destroy(w[c]); w[c] = NULL; }
        for (int kind = KIND_BF16; kind <= KIND_F32; kind++) {
            qmm_dtype dt = kind == KIND_BF16 ? QMM_BF16 : QMM_F32;
            size_t es = dt == QMM_BF16 ? 2 : 4;
            /* screen with a small weight of the same dtype before making the big one */
            float small[16 * 64];
            fill_f(small, QMM_F32, 16 * 64, 5);
            uint16_t smallh[16 * 64];
            for (int i = 0; i < 16 * 64; i++) smallh[i] = 0x3f80;
            qmm_weight *ws = NULL;
            if (qmm_weight_create_float(ctx, "screen", dt == QMM_BF16 ? (const void *)smallh : (const void *)small, dt,
                                        16, 64, 64, NULL, QMM_F32, &ws) != QMM_OK) {
                row *r = add_row(b, sh, kind, QMM_ENGINE_AUTO, LAYOUT_PACKED);
                if (r) snprintf(r->reason, sizeof r->reason, "error: %s", qmm_last_error());
                continue;
            }
            qmm_linear_args a2 = args;
            nf = float_engines(b, ctx, ws, &a2, fe, why, sizeof why);
            qmm_weight_destroy(ws);
            if (!nf) {
                row *r = add_row(b, sh, kind, QMM_ENGINE_AUTO, LAYOUT_PACKED);
                if (r) snprintf(r->reason, sizeof r->reason, "refused: %s", why);
                continue;
            }
            void *wf = malloc(nk * es);
            qmm_weight *wfw = NULL;
            if (!wf) {
                row *r = add_row(b, sh, kind, fe[0], LAYOUT_PACKED);
                if (r) snprintf(r->reason, sizeof r->reason, "error: out of memory for the float weight");
                continue;
            }
            fill_f(wf, dt, nk, 17);
            qmm_status st = qmm_weight_create_float(ctx, sh->name, wf, dt, N, K, K, NULL, QMM_F32, &wfw);
            free(wf);
            for (int i = 0; i < nf; i++) {
                row *r = add_row(b, sh, kind, fe[i], LAYOUT_PACKED);
                if (!r) continue;
                if (st != QMM_OK) snprintf(r->reason, sizeof r->reason, "error: %s", qmm_last_error());
                else time_row(b, ctx, &wfw, 1, &args, r, (double)(nk * es));
            }
            qmm_weight_destroy(wfw);
        }
        /* speedup of the best INT8 row over each float row */
        double best = INFINITY;
        for (size_t i = first_row; i < b->n_rows; i++)
            if (b->rows[i].kind == KIND_INT8 && b->rows[i].ok && b->rows[i].median_ms < best) best = b->rows[i].median_ms;
        for (size_t i = first_row; i < b->n_rows; i++)
            if (b->rows[i].kind != KIND_INT8 && b->rows[i].ok && isfinite(best))
                b->rows[i].speedup_int8 = b->rows[i].median_ms / best;
    }
done:
    if (w)
        for (int c = 0; c < ncopies * LAYOUT_COUNT; c++) qmm_weight_destroy(w[c]);
    free(w);
    if (wb)
        for (int c = 0; c < ncopies; c++) free(wb[c]);
    free(wb);
    free(wq);
    free(scale);
    free(x);
    free(y);
}

static void json_num(const char *key, double v, int last) {
    if (isfinite(v)) printf("\"%s\": %.6g%s", key, v, last ? "" : ", ");
    else printf("\"%s\": null%s", key, last ? "" : ", ");
}
static void json_str(const char *key, const char *s) {
    printf("\"%s\": \"", key);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') printf("\\%c", *s);
        else if ((unsigned char)*s < 0x20) printf(" ");
        else putchar(*s);
    }
    printf("\", ");
}

static void print_json(const bench *b) {
    char bls[160];
    (void)qmm_engine_tuning(QMM_ENGINE_AMX_INT8, bls, sizeof bls); /* the AMX blocking in force */
    printf("[\n");
    for (size_t i = 0; i < b->n_rows; i++) {
        const row *r = &b->rows[i];
        printf("  {");
        json_str("shape", r->sh.name);
        printf("\"M\": %lld, \"N\": %lld, \"K\": %lld, ", (long long)r->sh.M, (long long)r->sh.N, (long long)r->sh.K);
        json_str("act", qmm_act_name(r->sh.act));
        printf("\"gs\": %d, ", r->sh.gs);
        json_str("kind", k_kind_name[r->kind]);
        json_str("layout", k_layout_name[r->layout]);
        json_str("engine", r->engine == QMM_ENGINE_AUTO ? "none" : qmm_engine_name(r->engine));
        printf("\"threads\": %d, ", r->threads);
        json_str("status", r->ok ? "ok" : "refused");
        json_str("reason", r->reason);
        json_str("peak_instruction", qmm_peak_instruction(r->engine));
        json_str("regime", r->regime ? r->regime : "");
        json_str("amx_blocking", r->regime && *r->regime ? bls : "");
        printf("\"repeats\": %d, \"weight_copies\": %d, ", r->repeats, r->copies);
        json_num("median_ms", r->median_ms, 0);
        json_num("min_ms", r->min_ms, 0);
        json_num("tops", r->tops, 0);
        json_num("peak_tops", r->peak_tops, 0);
        json_num("pct_peak", r->pct_peak, 0);
        json_num("gbps", r->gbps, 0);
        json_num("dram_gbps", r->dram_gbps, 0);
        json_num("pct_dram", r->pct_dram, 0);
        json_num("speedup_int8", r->speedup_int8, 0);
        json_num("cpu_tops", r->cpu_tops, 0);
        json_num("pct_peak_cpu", r->pct_peak_cpu, 1);
        printf("}%s\n", i + 1 < b->n_rows ? "," : "");
    }
    printf("]\n");
}

static void print_table(const bench *b) {
    printf("%-20s %-22s %-6s %-8s %-12s %3s %10s %8s %8s %6s %8s %6s %7s %7s\n", "shape", "MxNxK", "kind", "layout", "engine", "thr",
           "median_ms", "TOPS", "peak", "%peak", "GB/s", "%dram", "int8 x", "%pk cpu");
    for (size_t i = 0; i < b->n_rows; i++) {
        const row *r = &b->rows[i];
        char mnk[64];
        snprintf(mnk, sizeof mnk, "%lldx%lldx%lld%s", (long long)r->sh.M, (long long)r->sh.N, (long long)r->sh.K,
                 r->sh.act == QMM_ACT_SWIGLU ? "+sw" : r->sh.act == QMM_ACT_GELU_TANH ? "+gelu" : "");
        const char *en = r->engine == QMM_ENGINE_AUTO ? "-" : qmm_engine_name(r->engine);
        if (!r->ok) {
            printf("%-20s %-22s %-6s %-8s %-12s %3d %s\n", r->sh.name, mnk, k_kind_name[r->kind], k_layout_name[r->layout], en,
                   r->threads, r->reason);
            continue;
        }
        printf("%-20s %-22s %-6s %-8s %-12s %3d %10.3f %8.3f %8.3f %5.1f%% %8.2f ", r->sh.name, mnk, k_kind_name[r->kind],
               k_layout_name[r->layout], en, r->threads, r->median_ms, r->tops, r->peak_tops, r->pct_peak, r->gbps);
        if (r->sh.M <= BW_M && isfinite(r->pct_dram)) printf("%5.1f%% ", r->pct_dram);
        else printf("%6s ", "-");
        if (isfinite(r->speedup_int8)) printf("%6.2fx", r->speedup_int8);
        else printf("%7s", "-");
        if (isfinite(r->pct_peak_cpu)) printf(" %6.1f%%", r->pct_peak_cpu);
        if (r->regime && *r->regime) printf(" [%s]", r->regime);
        printf("\n");
    }
}

int cmd_bench(int argc, char **argv) {
    bench b;
    memset(&b, 0, sizeof b);
    b.repeats = 3;
    qmm_bench_shape shapes[64];
    size_t n_shapes = 0;
    int all = 0, regimes = 0, ladder = 0, peaks = 0;
    long dram_mb = 0;
    if (argc > 1 && !strcmp(argv[1], "--w4a8")) return qmm_bench_w4a8(argc - 1, argv + 1);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        else if (!strcmp(a, "--json")) b.json = 1;
        else if (!strcmp(a, "--quick")) b.quick = 1;
        else if (!strcmp(a, "--all")) all = 1;
        else if (!strcmp(a, "--regimes")) regimes = 1;
        else if (!strcmp(a, "--amx-ladder")) ladder = 1;
        else if (!strcmp(a, "--peaks")) peaks = 1;
        else if (!strcmp(a, "--no-float")) b.no_float = 1;
        else if (!strcmp(a, "--full")) b.full = 1;
        else if (!strcmp(a, "--shape") && v) {
            if (n_shapes == 64 || qmm_bench_parse_shape(v, &shapes[n_shapes])) {
                fprintf(stderr, "qmm bench: bad shape '%s' (MxNxK[:swiglu|:gelu][:gN])\n", v);
                return 2;
            }
            n_shapes++;
            i++;
        } else if (!strcmp(a, "--engines") && v) {
            char buf[256];
            snprintf(buf, sizeof buf, "%s", v);
            for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
                qmm_engine_id e = qmm_engine_from_name(t);
                if ((unsigned)e >= QMM_ENGINE_MAX || e == QMM_ENGINE_AUTO || e == QMM_ENGINE_REF) {
                    fprintf(stderr, "qmm bench: unknown engine '%s'\n", t);
                    return 2;
                }
                b.engines |= 1u << e;
            }
            i++;
        } else if (!strcmp(a, "--layouts") && v) {
            char buf[64];
            snprintf(buf, sizeof buf, "%s", v);
            b.n_layouts = 0;
            for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
                int l = !strcmp(t, "packed") ? LAYOUT_PACKED : !strcmp(t, "borrowed") ? LAYOUT_BORROWED : -1;
                int dup = 0;
                for (int j = 0; j < b.n_layouts; j++) dup |= b.layouts[j] == l;
                if (l < 0 || dup) {
                    fprintf(stderr, "qmm bench: bad layout '%s' (packed, borrowed; each once)\n", t);
                    return 2;
                }
                b.layouts[b.n_layouts++] = l;
            }
            i++;
        } else if (!strcmp(a, "--threads") && v) { b.threads = atoi(v); i++; }
        else if (!strcmp(a, "--repeats") && v) { b.repeats = atoi(v); i++; }
        else if (!strcmp(a, "--dram-mb") && v) { dram_mb = atol(v); i++; }
        else {
            fprintf(stderr, "qmm bench: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (b.repeats < 1 || b.threads < 0 || dram_mb < 0) { usage(stderr); return 2; }
    if (ladder) return qmm_bench_amx_ladder(b.quick);
    if (b.n_layouts == 0) b.layouts[b.n_layouts++] = LAYOUT_PACKED;
    if (b.quick && b.repeats > 2) b.repeats = 2;
    if (regimes) {
        /* before the library reads it: amx_int8 below its switch too, unless min_m is named */
        const char *env = getenv("QMM_AMX_BLOCKING");
        char tuning[160];
        if (qmm_engine_tuning(QMM_ENGINE_AMX_INT8, tuning, sizeof tuning) != QMM_OK) {
            fprintf(stderr, "qmm bench: %s\n", qmm_last_error());
            return 2;
        }
        if (!env || !strstr(env, "min_m")) {
            char buf[256];
            snprintf(buf, sizeof buf, "%s%smin_m=1", env ? env : "", env && *env ? "," : "");
            setenv("QMM_AMX_BLOCKING", buf, 1);
        }
        for (size_t i = 0; i < sizeof k_regime_shapes / sizeof k_regime_shapes[0] && n_shapes < 64; i++)
            shapes[n_shapes++] = k_regime_shapes[i];
    }
    if (n_shapes == 0) {
        if (b.quick) shapes[n_shapes++] = qmm_bench_quick_shape;
        else if (all) for (size_t i = 0; i < qmm_bench_spec_count; i++) shapes[n_shapes++] = qmm_bench_spec_shapes[i];
        else for (size_t i = 0; i < qmm_bench_default_count; i++) shapes[n_shapes++] = qmm_bench_default_shapes[i];
    }
    qmm_context_options o = qmm_context_options_default();
    o.n_threads = b.threads;
    o.pin_threads = 1;
    qmm_context *ctx;
    if (qmm_context_create(&o, &ctx) != QMM_OK) {
        fprintf(stderr, "qmm bench: %s\n", qmm_last_error());
        return 1;
    }
    b.threads = qmm_context_threads(ctx);
    if (peaks) {
        bench_peaks(&b);
        qmm_context_destroy(ctx);
        return 0;
    }
    size_t llc = qmm_llc_bytes();
    size_t dram_bytes = dram_mb ? (size_t)dram_mb << 20 : b.quick ? (size_t)16 << 20 : 3 * llc;
    if (!dram_mb && !b.quick) {
        if (dram_bytes < ((size_t)256 << 20)) dram_bytes = (size_t)256 << 20;
        if (dram_bytes > ((size_t)1 << 30)) dram_bytes = (size_t)1 << 30;
    }
    b.dram_bytes = dram_bytes;
    measure_dram(&b, dram_bytes);
    qmm_engine_id engines[QMM_ENGINE_MAX];
    const int n_engines = engines_of_kind(-1, engines);
    if (!b.json) {
        printf("qmm bench: %s, %d threads (pinned), LLC %zu MiB\n", qmm_cpu_brand(), b.threads, llc >> 20);
        printf("DRAM read bandwidth: %.1f GB/s (%zu MiB streamed by %d threads)\npeaks at start:", b.dram_gbps,
               dram_bytes >> 20, b.threads);
        for (int i = 0; i < n_engines; i++) {
            const qmm_engine_id e = engines[i];
            if (b.engines && !(b.engines & (1u << e))) continue;
            double p = peak_of(&b, e);
            if (p > 0) printf(" %s %.3f T/s (%s);", qmm_engine_name(e), p, qmm_peak_instruction(e));
        }
        printf("\nx and y bf16; pre-pass and epilogue included; M<=%d rotates weight copies past the LLC\n\n", BW_M);
        fflush(stdout);
    }
    for (size_t i = 0; i < n_shapes; i++) bench_shape(&b, ctx, &shapes[i]);
    finish_rows(&b);
    if (!b.json) {
        printf("best of the run: DRAM %.1f GB/s; peaks:", b.dram_gbps);
        for (int i = 0; i < n_engines; i++) {
            const qmm_engine_id e = engines[i];
            if (b.peak[e] > 0) printf(" %s %.3f", qmm_engine_name(e), b.peak[e]);
        }
        printf(" T/s\n\n");
    }
    if (b.json) print_json(&b);
    else print_table(&b);
    free(b.rows);
    qmm_context_destroy(ctx);
    return 0;
}
