/*
 * amx_blocking.h — the cache blocking of the AMX engines (amx_int8.c; amx_bf16.c takes kc and
 * nc for the float GEMM driver) and the rule that picks amx_int8's regime from the call's shape. Plain C (no intrinsics, no library state), so
 * that `qmm bench` labels its rows with the very rule the engines use.
 *
 * The sizes come from the tile-load costs measured on a Sapphire/Emerald Rapids VM
 * (bench/NOTES.md "## amx", "Version 2"): TILELOADD ≈ 8 cycles from L1, 19–27 from L2, ≈ 110
 * beyond; L1d 48 KiB, L2 2 MiB per core. Each is an estimate from those facts, not a
 * measurement of this code: `QMM_AMX_BLOCKING="kc=512,nc=512,mc=512,panel_a=1572864,min_m=8"`
 * (any subset, comma-separated) overrides them for one process, to re-measure on an AMX machine.
 *
 * Regimes of amx_int8 (bytes of A = M × Kp):
 *   decode   M <= QMM_AMX_SMALL_M (one 32-row panel): each thread streams its share of the
 *            weight once, full K per 32 × 32 block, software prefetch of B ahead.
 *   panel    A fits L2 (bytes of A <= panel_a): N outer, full K per block with C in tiles for
 *            the whole K; each 32 × K B panel is reused from L2 by every row panel, A from L2.
 *   blocked  otherwise: K blocks of kc bytes with C partials in a per-thread mc × nc buffer (L2)
 *            between them. amx_int8, under the core int8 driver: tasks of mc rows × nc columns,
 *            per K chunk each 32-column B panel (16 KiB at kc = 512, L1) against every 32-row
 *            tile of the task's mc × kc A block (L2); amx_bf16: M blocks of mc rows, each
 *            pre-passed and packed per K block into tile layout, then nc → kc → m32 → n32 (the
 *            32 × kc A panel in L1 across the nc/32 column panels, the nc × kc B block in L2).
 * Borrowed int8 weights run the same regimes on the driver's per-call n16k4 panels.
 */
#ifndef QMM_AMX_BLOCKING_H
#define QMM_AMX_BLOCKING_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define QMM_AMX_KC 512                      /* bytes of K per K block (int8: 512 k, bf16: 256 k) */
#define QMM_AMX_NC 512                      /* output columns per N block */
#define QMM_AMX_MC 512                      /* rows per M block */
#define QMM_AMX_SMALL_M 32                  /* M at most: decode regime */
#define QMM_AMX_PANEL_A_BYTES (3 << 19)     /* 1.5 MiB: A up to this stays in L2 (panel regime) */
#define QMM_AMX_INT8_MIN_M 8                /* amx_int8 refuses M below (dispatch: avx512_vnni) */
/* amx_int8 refuses a borrowed weight below this M (dispatch: avx512_vnni, whose rows kernel reads
 * the caller's rows in place once): measured at d9c1ae0 (../shared/measurements/AMX-d9c1ae0.md,
 * 28672x5376 g256, borrowed) at M = 8 / 16 / 32: amx_int8 8.45 / 8.63 / 9.05 ms, avx512_vnni
 * 5.77 / 6.13 / 9.98 ms — avx512_vnni wins at 8 and 16 (the per-call pack of amx_int8 is a second
 * pass over W where the DRAM stream is the whole cost), amx_int8 at 32; M = 17..31 was not
 * measured, so the rule holds what was: M <= 16. QMM_AMX_BLOCKING=borrowed_min_m=N moves it to
 * re-measure (qmm bench --layouts borrowed --shape 24x28672x5376:g256 ...). */
#define QMM_AMX_INT8_BORROWED_MIN_M 17
#define QMM_AMX_DECODE_PF_STEPS 8           /* decode: B prefetch distance, in 64-k steps */

typedef struct qmm_amx_blocking {
    int64_t kc;       /* multiple of 64 */
    int64_t nc, mc;   /* multiples of 32 */
    int64_t small_m;  /* 1..32 */
    int64_t panel_a;  /* bytes */
    int64_t min_m;    /* >= 1 */
    int64_t borrowed_min_m; /* >= 1: amx_int8's min M for borrowed weights */
} qmm_amx_blocking;

typedef enum { QMM_AMX_DECODE = 0, QMM_AMX_PANEL = 1, QMM_AMX_BLOCKED = 2 } qmm_amx_regime;

static inline qmm_amx_blocking qmm_amx_blocking_default(void) {
    qmm_amx_blocking b = {QMM_AMX_KC, QMM_AMX_NC, QMM_AMX_MC, QMM_AMX_SMALL_M, QMM_AMX_PANEL_A_BYTES,
                          QMM_AMX_INT8_MIN_M, QMM_AMX_INT8_BORROWED_MIN_M};
    return b;
}

/* Applies "key=value,..." (keys kc, nc, mc, small_m, panel_a, min_m, borrowed_min_m) to *b. Returns 0, or -1
 * (and leaves *b unchanged) for an unknown key or a value out of range. */
static inline int qmm_amx_blocking_parse(const char *s, qmm_amx_blocking *b) {
    qmm_amx_blocking t = *b;
    while (s && *s) {
        const char *eq = strchr(s, '=');
        if (!eq) return -1;
        char *end;
        long long v = strtoll(eq + 1, &end, 10);
        if (end == eq + 1 || (*end && *end != ',')) return -1;
        size_t n = (size_t)(eq - s);
#define QMM_AMX_KEY(k) (n == sizeof(k) - 1 && !strncmp(s, k, n))
        if (QMM_AMX_KEY("kc") && v >= 64 && v <= (1 << 20) && v % 64 == 0) t.kc = v;
        else if (QMM_AMX_KEY("nc") && v >= 32 && v <= (1 << 16) && v % 32 == 0) t.nc = v;
        else if (QMM_AMX_KEY("mc") && v >= 32 && v <= (1 << 16) && v % 32 == 0) t.mc = v;
        else if (QMM_AMX_KEY("small_m") && v >= 1 && v <= 32) t.small_m = v;
        else if (QMM_AMX_KEY("panel_a") && v >= 0) t.panel_a = v;
        else if (QMM_AMX_KEY("min_m") && v >= 1) t.min_m = v;
        else if (QMM_AMX_KEY("borrowed_min_m") && v >= 1) t.borrowed_min_m = v;
        else return -1;
#undef QMM_AMX_KEY
        if (*end == ',' && !end[1]) return -1; /* a trailing comma */
        s = *end ? end + 1 : end;
    }
    *b = t;
    return 0;
}

/* The regime for M rows whose A operand takes a_bytes (M × Kp). */
static inline qmm_amx_regime qmm_amx_regime_of(const qmm_amx_blocking *b, int64_t M, int64_t a_bytes) {
    if (M <= b->small_m) return QMM_AMX_DECODE;
    if (a_bytes <= b->panel_a) return QMM_AMX_PANEL;
    return QMM_AMX_BLOCKED;
}

static inline const char *qmm_amx_regime_name(qmm_amx_regime r) {
    return r == QMM_AMX_DECODE ? "decode" : r == QMM_AMX_PANEL ? "panel" : "blocked";
}

#endif /* QMM_AMX_BLOCKING_H */
