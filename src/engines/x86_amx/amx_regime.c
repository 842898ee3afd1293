/*
 * amx_regime.c — the AMX engines' decisions per call class (amx_regime.h), plain C: compiled
 * without -m flags (QMM_FLAGS_PLAIN), so it runs on any CPU, AMX built or not; the emulated build
 * compiles it again beside the emulated kernels (tests/amx_emu.cmake).
 *   blocking   the blocking in force (amx_blocking.h): QMM_AMX_BLOCKING read once per process;
 *   amx_int8   its three descriptors (decode, panel, blocked: whole K or the int8 driver's K
 *              chunks; the decode tile's prefetch), built once from the blocking and the kernels' fixed
 *              part; finalize picks one by the regime rule (amx_blocking.h) and names it — the
 *              one decision dispatch caches, the driver runs, and qmm_plan, QMM_VERBOSE and
 *              `qmm bench` (qmm_engine_regime) name;
 *   amx_bf16   its float driver descriptor per block width nr (block_cols: N, M, the threads)
 *              and kc (the blocking's kc/2), built the first time a class needs it and kept for
 *              the process (a list, never freed), so that every descriptor it gives stays valid;
 *   tuning     the blocking in force as text (qmm_engine_tuning).
 * The emulated build's blocking is qmm_amx_blocking_emu, which tests change between calls (one
 * call at a time): amx_int8's table is rebuilt when it changed, amx_bf16's list is keyed by kc.
 */
#include "amx_regime.h"

#include "float_gemm.h"
#include "int8_gemm.h"

#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- the blocking */
#ifdef QMM_AMX_EMULATE
qmm_amx_blocking qmm_amx_blocking_emu = {QMM_AMX_KC, QMM_AMX_NC, QMM_AMX_MC, QMM_AMX_SMALL_M, QMM_AMX_PANEL_A_BYTES,
                                         QMM_AMX_INT8_MIN_M, QMM_AMX_INT8_BORROWED_MIN_M};
int qmm_amx_last_regime_emu = -1;

qmm_amx_blocking QMM_AMX_SYM(qmm_amx_blocking_now)(void) { return qmm_amx_blocking_emu; }
#else
static qmm_amx_blocking g_blocking;
static atomic_int g_blocking_state; /* 0 unread, 1 being read, 2 ready */

qmm_amx_blocking QMM_AMX_SYM(qmm_amx_blocking_now)(void) {
    if (atomic_load_explicit(&g_blocking_state, memory_order_acquire) == 2) return g_blocking;
    int expect = 0;
    if (atomic_compare_exchange_strong(&g_blocking_state, &expect, 1)) {
        qmm_amx_blocking b = qmm_amx_blocking_default();
        (void)qmm_amx_blocking_parse(getenv("QMM_AMX_BLOCKING"), &b); /* invalid: the defaults stay */
        g_blocking = b;
        atomic_store_explicit(&g_blocking_state, 2, memory_order_release);
        return b;
    }
    while (atomic_load_explicit(&g_blocking_state, memory_order_acquire) != 2) {
    }
    return g_blocking;
}
#endif

/* ---------------------------------------------------------------- amx_int8 */
/* The descriptors of the regimes (decode, panel, blocked) for blocking b: the kernels' fixed part
 * (the decode regime's: its tile streams B ahead) with b's mc, nc, kc; whole K outside the
 * blocked regime. */
static qmm_i8_engine g_int8[3];

static void int8_build(const qmm_amx_blocking *b) {
    for (int r = 0; r < 3; r++) {
        qmm_i8_engine e = r == QMM_AMX_DECODE ? QMM_AMX_SYM(qmm_amx_int8_kernels_decode) : QMM_AMX_SYM(qmm_amx_int8_kernels);
        e.mc = (int)b->mc;
        e.nc = (int)b->nc;
        e.kc = (int)b->kc;
        e.whole_k_m = r == QMM_AMX_BLOCKED ? 0 : INT_MAX;
        g_int8[r] = e;
    }
}

/* The table for the blocking in force (*b), built once per process (the emulated build: whenever
 * tests changed qmm_amx_blocking_emu). */
static const qmm_i8_engine *int8_table(const qmm_amx_blocking *b) {
#ifdef QMM_AMX_EMULATE
    static int built_once;
    static qmm_amx_blocking built;
    if (!built_once || memcmp(&built, b, sizeof built)) {
        int8_build(b);
        built = *b;
        built_once = 1;
    }
#else
    static atomic_int state; /* 0 unbuilt, 1 being built, 2 ready */
    if (atomic_load_explicit(&state, memory_order_acquire) != 2) {
        int expect = 0;
        if (atomic_compare_exchange_strong(&state, &expect, 1)) {
            int8_build(b);
            atomic_store_explicit(&state, 2, memory_order_release);
        }
        while (atomic_load_explicit(&state, memory_order_acquire) != 2) {
        }
    }
#endif
    return g_int8;
}

qmm_final QMM_AMX_SYM(qmm_amx_int8_finalize)(const void *call, int n_threads) {
    (void)n_threads;
    const qmm_call *c = call;
    const qmm_weight *w = c->w;
    const qmm_amx_blocking b = QMM_AMX_SYM(qmm_amx_blocking_now)();
    /* bytes of the A operand: M × Kp (64-padded) */
    const int64_t Ka = w->is_int8 ? w->i8.Kp : qmm_round_up(w->K, 64);
    const qmm_amx_regime r = c->M > INT64_MAX / Ka ? QMM_AMX_BLOCKED : qmm_amx_regime_of(&b, c->M, c->M * Ka);
    QMM_AMX_NOTE_REGIME(r);
    const qmm_i8_engine *t = QMM_AMX_SYM(qmm_amx_int8_kernels).tile ? int8_table(&b) : NULL;
    return (qmm_final){t ? &t[r] : NULL, qmm_amx_regime_name(r)};
}

/* ---------------------------------------------------------------- amx_bf16 */
/* Columns per task block: at most nc, a multiple of 32, the N columns in blocks of equal width
 * with the fewest columns past N (over a few block counts), and at least enough blocks for 4
 * tasks per thread when the rows give few panels (of mr rows). */
static int64_t block_cols(int64_t N, int64_t M, int64_t nc, int nt, int mr) {
    const int64_t panels = ((M < QMM_FLOAT_MC ? M : QMM_FLOAT_MC) + mr - 1) / mr, most = (N + 31) / 32;
    int64_t nb = (N + nc - 1) / nc;
    const int64_t want = (4 * (int64_t)nt + panels - 1) / panels;
    if (nb < want) nb = want;
    if (nb > most) nb = most;
    int64_t best = 0, best_cols = 0;
    for (int64_t b = nb; b < nb + 4 && b <= most; b++) {
        const int64_t nr = qmm_round_up((N + b - 1) / b, 32), cols = nr * ((N + nr - 1) / nr);
        if (!best || cols < best_cols) best = nr, best_cols = cols;
    }
    return best;
}

/* The descriptors made so far, newest first: pushed once each, never changed or freed. */
typedef struct bf16_final {
    qmm_fgemm g;
    struct bf16_final *next;
} bf16_final;
static _Atomic(bf16_final *) g_bf16;

qmm_final QMM_AMX_SYM(qmm_amx_bf16_finalize)(const void *call, int n_threads) {
    const qmm_call *c = call;
    const qmm_fgemm *k = &QMM_AMX_SYM(qmm_amx_bf16_kernels);
    if (!k->kernel_aux) return (qmm_final){NULL, ""};
    const qmm_amx_blocking bl = QMM_AMX_SYM(qmm_amx_blocking_now)();
    const int64_t kc = bl.kc / 2, nr = block_cols(c->N, c->M, bl.nc, n_threads, k->mr);
    bf16_final *head = atomic_load_explicit(&g_bf16, memory_order_acquire);
    for (const bf16_final *f = head; f; f = f->next)
        if (f->g.nr == nr && f->g.kc == kc) return (qmm_final){&f->g, ""};
    bf16_final *f = malloc(sizeof *f);
    if (!f) return (qmm_final){NULL, ""};
    f->g = *k;
    f->g.nr = (int)nr;
    f->g.kc = kc;
    f->g.b_bytes = (size_t)(nr * kc) * sizeof(uint16_t);
    f->g.b_col16 = (size_t)(16 * kc) * sizeof(uint16_t);
    /* two threads finalizing the same class may both push one: both stay valid */
    do f->next = head;
    while (!atomic_compare_exchange_weak_explicit(&g_bf16, &head, f, memory_order_release, memory_order_acquire));
    return (qmm_final){&f->g, ""};
}

/* ---------------------------------------------------------------- tuning */
qmm_status QMM_AMX_SYM(qmm_amx_tuning)(char *buf, size_t size) {
    qmm_amx_blocking b = qmm_amx_blocking_default();
    const int bad = qmm_amx_blocking_parse(getenv("QMM_AMX_BLOCKING"), &b);
    if (size)
        snprintf(buf, size, "kc=%lld,nc=%lld,mc=%lld,small_m=%lld,panel_a=%lld,min_m=%lld,borrowed_min_m=%lld",
                 (long long)b.kc, (long long)b.nc, (long long)b.mc, (long long)b.small_m, (long long)b.panel_a,
                 (long long)b.min_m, (long long)b.borrowed_min_m);
    QMM_RETURN_IF(bad, QMM_ERR_INVALID_ARGUMENT,
                  "QMM_AMX_BLOCKING='%s' is not valid (keys kc, nc, mc, small_m, panel_a, min_m, borrowed_min_m): the AMX engines use "
                  "their defaults", getenv("QMM_AMX_BLOCKING"));
    return QMM_OK;
}
