/*
 * amx_emu.c — the software model of the AMX tile unit (see amx_emu.h for the semantics
 * modelled), compiled only into the emulated build (-DQMM_AMX_EMULATE) that
 * tests/test_amx_emulated links; in the library this file is empty.
 *
 * State is per thread (like the tile registers): a configuration (rows, colsb per tile) and
 * 8 tiles of 16 × 64 bytes. Shape rules of the SDM that would raise #UD/#GP on hardware
 * are counted as faults (never aborting: the instruction is skipped).
 */
#include "qmm_internal.h"

#ifdef QMM_AMX_EMULATE

#include "amx_kernel.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int configured;
    uint8_t rows[8];
    uint16_t colsb[8];
    uint8_t data[8][16][64];
} emu_tiles;

static _Thread_local emu_tiles g_t;
static atomic_long g_faults, g_live, g_ops, g_configs, g_releases;
static atomic_int g_first_set;
static char g_first[256];

static void fault(const char *fmt, ...) {
    atomic_fetch_add(&g_faults, 1);
    if (atomic_exchange(&g_first_set, 1) == 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(g_first, sizeof g_first, fmt, ap);
        va_end(ap);
    }
}

long qmm_amx_emu_faults(void) { return atomic_load(&g_faults); }
const char *qmm_amx_emu_first_fault(void) { return atomic_load(&g_first_set) ? g_first : ""; }
long qmm_amx_emu_live_configs(void) { return atomic_load(&g_live); }
long qmm_amx_emu_ops(void) { return atomic_load(&g_ops); }
long qmm_amx_emu_configs(void) { return atomic_load(&g_configs); }
long qmm_amx_emu_releases(void) { return atomic_load(&g_releases); }

/* The trace (qmm_amx_emu_trace): events appended at an atomic index, each with its thread's
 * number (given on the thread's first event). */
static qmm_amx_emu_event *g_trace;
static atomic_long g_trace_n;
static long g_trace_cap;
static atomic_int g_trace_threads;
static atomic_int g_trace_gen;
static _Thread_local int t_trace_thread = -1, t_trace_gen = -1;

void qmm_amx_emu_trace(long capacity) {
    free(g_trace);
    g_trace = capacity > 0 ? calloc((size_t)capacity, sizeof *g_trace) : NULL;
    g_trace_cap = g_trace ? capacity : 0;
    atomic_store(&g_trace_n, 0);
    atomic_store(&g_trace_threads, 0);
    atomic_fetch_add(&g_trace_gen, 1);
}

long qmm_amx_emu_trace_count(void) {
    const long n = atomic_load(&g_trace_n);
    return n < g_trace_cap ? n : g_trace_cap;
}
long qmm_amx_emu_trace_lost(void) {
    const long n = atomic_load(&g_trace_n);
    return n > g_trace_cap ? n - g_trace_cap : 0;
}
const qmm_amx_emu_event *qmm_amx_emu_trace_events(void) { return g_trace; }

static void trace(int kind, int t, const void *p, size_t stride) {
    if (!g_trace) return;
    if (t_trace_gen != atomic_load(&g_trace_gen)) { /* this thread's first event of this trace */
        t_trace_gen = atomic_load(&g_trace_gen);
        t_trace_thread = atomic_fetch_add(&g_trace_threads, 1);
    }
    const long i = atomic_fetch_add(&g_trace_n, 1);
    if (i >= g_trace_cap) return;
    qmm_amx_emu_event *e = &g_trace[i];
    e->kind = (uint8_t)kind;
    e->tile = (uint8_t)t;
    e->thread = (uint8_t)t_trace_thread;
    e->rows = t >= 0 && t < 8 ? g_t.rows[t] : 0;
    e->colsb = t >= 0 && t < 8 ? g_t.colsb[t] : 0;
    e->addr = (uintptr_t)p;
    e->stride = (int64_t)stride;
}

static atomic_long g_prefetches;
static struct {
    const char *base;
    int64_t ld, rows, K, lines;
    unsigned char *marks; /* [rows][lines] */
} g_watch;

long qmm_amx_emu_prefetches(void) { return atomic_load(&g_prefetches); }

void qmm_amx_emu_watch(const void *base, int64_t ld, int64_t rows, int64_t K) {
    free(g_watch.marks);
    memset(&g_watch, 0, sizeof g_watch);
    if (!base) return;
    g_watch.base = base;
    g_watch.ld = ld;
    g_watch.rows = rows;
    g_watch.K = K;
    g_watch.lines = (K + 63) / 64;
    g_watch.marks = calloc((size_t)(rows * g_watch.lines), 1);
}

int qmm_amx_emu_watched(int64_t row, int64_t line) {
    return g_watch.marks && row >= 0 && row < g_watch.rows && line >= 0 && line < g_watch.lines &&
           g_watch.marks[row * g_watch.lines + line];
}

void qmm_amx_emu_prefetch(const void *p) {
    atomic_fetch_add(&g_prefetches, 1);
    trace(QMM_AMX_EV_PREFETCH, -1, p, 0);
    _mm_prefetch((const char *)p, _MM_HINT_T1);
    if (!g_watch.base) return;
    const uintptr_t a = (uintptr_t)p, b = (uintptr_t)g_watch.base;
    const int64_t off = a >= b ? (int64_t)(a - b) : -1;
    if (off < 0 || off / g_watch.ld >= g_watch.rows || off % g_watch.ld >= g_watch.K) {
        fault("prefetch %p outside the watched rows (offset %lld, ld %lld, rows %lld, K %lld)", p, (long long)off,
              (long long)g_watch.ld, (long long)g_watch.rows, (long long)g_watch.K);
        return;
    }
    g_watch.marks[off / g_watch.ld * g_watch.lines + off % g_watch.ld / 64] = 1;
}

void qmm_amx_emu_release(void) {
    atomic_fetch_add(&g_releases, 1);
    if (g_t.configured) atomic_fetch_sub(&g_live, 1);
    memset(&g_t, 0, sizeof g_t);
}

void qmm_amx_emu_loadconfig(const void *cfgp) {
    const uint8_t *b = cfgp;
    qmm_amx_cfg cfg;
    memcpy(&cfg, cfgp, sizeof cfg);
    if (cfg.palette == 0) { qmm_amx_emu_release(); return; }
    if (cfg.palette != 1) { fault("ldtilecfg: palette %d (#GP)", cfg.palette); return; }
    if (cfg.start_row != 0) { fault("ldtilecfg: start_row %d != 0", cfg.start_row); return; }
    for (int i = 2; i < 16; i++)
        if (b[i]) { fault("ldtilecfg: reserved byte %d = %d (#GP)", i, b[i]); return; }
    for (int i = 0; i < 16; i++) {
        int r = cfg.rows[i], c = cfg.colsb[i];
        if (i >= 8 && (r || c)) { fault("ldtilecfg: tile %d beyond palette 1 configured (#GP)", i); return; }
        if (r > 16 || c > 64) { fault("ldtilecfg: tile %d rows=%d colsb=%d beyond 16×64 (#GP)", i, r, c); return; }
        if ((r == 0) != (c == 0)) { fault("ldtilecfg: tile %d rows=%d colsb=%d half configured (#GP)", i, r, c); return; }
    }
    if (!g_t.configured) atomic_fetch_add(&g_live, 1);
    atomic_fetch_add(&g_configs, 1);
    memset(&g_t, 0, sizeof g_t);
    g_t.configured = 1;
    for (int i = 0; i < 8; i++) { g_t.rows[i] = cfg.rows[i]; g_t.colsb[i] = cfg.colsb[i]; }
}

static int usable(int t, const char *op) {
    if (!g_t.configured) { fault("%s tmm%d: tiles not configured (#UD)", op, t); return 0; }
    if (t < 0 || t > 7 || g_t.rows[t] == 0) { fault("%s tmm%d: tile not configured (#UD)", op, t); return 0; }
    return 1;
}

static void load(int t, const void *base, size_t stride, int kind) {
    if (!usable(t, kind == QMM_AMX_EV_LOAD ? "tileloadd" : "tileloaddt1")) return;
    atomic_fetch_add(&g_ops, 1);
    trace(kind, t, base, stride);
    memset(g_t.data[t], 0, sizeof g_t.data[t]);
    for (int r = 0; r < g_t.rows[t]; r++) memcpy(g_t.data[t][r], (const uint8_t *)base + (size_t)r * stride, g_t.colsb[t]);
}

void qmm_amx_emu_load(int t, const void *base, size_t stride) { load(t, base, stride, QMM_AMX_EV_LOAD); }
void qmm_amx_emu_load_t1(int t, const void *base, size_t stride) { load(t, base, stride, QMM_AMX_EV_LOAD_T1); }

void qmm_amx_emu_store(int t, void *base, size_t stride) {
    if (!usable(t, "tilestored")) return;
    trace(QMM_AMX_EV_STORE, t, base, stride);
    for (int r = 0; r < g_t.rows[t]; r++) memcpy((uint8_t *)base + (size_t)r * stride, g_t.data[t][r], g_t.colsb[t]);
}

void qmm_amx_emu_zero(int t) {
    if (!usable(t, "tilezero")) return;
    trace(QMM_AMX_EV_ZERO, t, NULL, 0);
    memset(g_t.data[t], 0, sizeof g_t.data[t]);
}

/* The shape rules shared by TDPBSSD, TDPBUSD and TDPBF16PS (SDM: #UD otherwise). */
static int dp_ok(int c, int a, int b, const char *op) {
    if (!usable(c, op) || !usable(a, op) || !usable(b, op)) return 0;
    if (c == a || c == b || a == b) { fault("%s tmm%d, tmm%d, tmm%d: registers not distinct (#UD)", op, c, a, b); return 0; }
    if (g_t.colsb[c] % 4 || g_t.colsb[a] % 4 || g_t.colsb[b] % 4) { fault("%s: colsb not a multiple of 4 (#UD)", op); return 0; }
    if (g_t.rows[a] != g_t.rows[c]) { fault("%s: A rows %d != C rows %d (#UD)", op, g_t.rows[a], g_t.rows[c]); return 0; }
    if (g_t.colsb[a] / 4 != g_t.rows[b]) { fault("%s: A colsb/4 %d != B rows %d (#UD)", op, g_t.colsb[a] / 4, g_t.rows[b]); return 0; }
    if (g_t.colsb[c] != g_t.colsb[b]) { fault("%s: C colsb %d != B colsb %d (#UD)", op, g_t.colsb[c], g_t.colsb[b]); return 0; }
    return 1;
}

/* write_row_and_zero / zero_upper_rows of the SDM pseudocode */
static void finish_dst(int c) {
    for (int r = 0; r < 16; r++) {
        int from = r < g_t.rows[c] ? g_t.colsb[c] : 0;
        memset(&g_t.data[c][r][from], 0, (size_t)(64 - from));
    }
}

/* TDPBSSD (a_unsigned = 0) and TDPBUSD (1): A's bytes signed or unsigned, B's signed */
static void dp_int8(int c, int a, int b, int a_unsigned, const char *op) {
    if (!dp_ok(c, a, b, op)) return;
    atomic_fetch_add(&g_ops, 1);
    trace(QMM_AMX_EV_DP, c, NULL, (size_t)(a * 8 + b));
    const int M = g_t.rows[c], K = g_t.colsb[a] / 4, N = g_t.colsb[c] / 4;
    for (int m = 0; m < M; m++) {
        uint32_t tmp[16];
        memcpy(tmp, g_t.data[c][m], 64);
        for (int k = 0; k < K; k++) {
            const uint8_t *xb = &g_t.data[a][m][4 * k];
            int32_t x[4];
            for (int e = 0; e < 4; e++) x[e] = a_unsigned ? (int32_t)xb[e] : (int32_t)(int8_t)xb[e];
            for (int n = 0; n < N; n++) {
                const int8_t *y = (const int8_t *)&g_t.data[b][k][4 * n];
                int32_t p = x[0] * y[0] + x[1] * y[1] + x[2] * y[2] + x[3] * y[3];
                tmp[n] += (uint32_t)p; /* wrapping int32 accumulation */
            }
        }
        memcpy(g_t.data[c][m], tmp, (size_t)N * 4);
    }
    finish_dst(c);
}

void qmm_amx_emu_dpbssd(int c, int a, int b) { dp_int8(c, a, b, 0, "tdpbssd"); }
void qmm_amx_emu_dpbusd(int c, int a, int b) { dp_int8(c, a, b, 1, "tdpbusd"); }

static float bf16_in(const uint8_t *p) { /* bf16 → fp32, denormal → ±0 (DAZ) */
    uint16_t h;
    memcpy(&h, p, 2);
    if ((h & 0x7f80u) == 0) h &= 0x8000u;
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static float ftz(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7f800000u) == 0) u &= 0x80000000u;
    memcpy(&f, &u, 4);
    return f;
}

void qmm_amx_emu_dpbf16ps(int c, int a, int b) {
    if (!dp_ok(c, a, b, "tdpbf16ps")) return;
    atomic_fetch_add(&g_ops, 1);
    trace(QMM_AMX_EV_DP, c, NULL, (size_t)(a * 8 + b));
    const int M = g_t.rows[c], K = g_t.colsb[a] / 4, N = g_t.colsb[c] / 4;
    for (int m = 0; m < M; m++) {
        float tmp[16];
        memcpy(tmp, g_t.data[c][m], 64);
        for (int n = 0; n < N; n++) tmp[n] = ftz(tmp[n]);
        for (int k = 0; k < K; k++) {
            for (int n = 0; n < N; n++) {
                for (int e = 0; e < 2; e++) {
                    float x = bf16_in(&g_t.data[a][m][4 * k + 2 * e]);
                    float y = bf16_in(&g_t.data[b][k][4 * n + 2 * e]);
                    /* the product of two bf16 values is exact in fp32 (8 + 8 significant bits);
                     * fmaf rounds the sum once, to nearest even */
                    tmp[n] = ftz(fmaf(x, y, tmp[n]));
                }
            }
        }
        memcpy(g_t.data[c][m], tmp, (size_t)N * 4);
    }
    finish_dst(c);
}

#else
typedef int qmm_amx_emu_unused; /* the library build: nothing here */
#endif /* QMM_AMX_EMULATE */
