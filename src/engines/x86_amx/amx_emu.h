/*
 * amx_emu.h — the software model of the AMX tile unit used by the emulated build of the AMX
 * engines (-DQMM_AMX_EMULATE; see amx_kernel.h), and the test hooks that build exports.
 * Test-only: nothing here is part of the library's dispatch.
 *
 * The model follows the Intel SDM (vol. 2, LDTILECFG, TILELOADD, TILESTORED, TILEZERO,
 * TILERELEASE, TDPBSSD, TDPBUSD, TDPBF16PS): 8 tiles of 16 rows × 64 bytes per thread, the palette-1
 * configuration (rows/colsb per tile, unused tiles 0/0, reserved bytes 0), loads that zero
 * the bytes beyond colsb and the rows beyond rows, TDPBSSD (TDPBUSD) as wrapping int32 accumulation of
 * 4-byte dot products of signed (unsigned) A bytes and signed B bytes, TDPBF16PS as fp32 accumulation of bf16 pairs (even element
 * first, then odd) with bf16 inputs and fp32 accumulator denormals treated as zero, each
 * product exact and each addition rounded to nearest even, denormal results flushed to zero.
 * A configuration or shape violation that would #UD/#GP on hardware is counted as a fault
 * (with a message) and the instruction is skipped; tests assert zero faults.
 */
#ifndef QMM_AMX_EMU_H
#define QMM_AMX_EMU_H

#include "amx_blocking.h"
#include "qmm_internal.h"

#include <stddef.h>

void qmm_amx_emu_loadconfig(const void *cfg);
void qmm_amx_emu_release(void);
void qmm_amx_emu_load(int t, const void *base, size_t stride);
void qmm_amx_emu_load_t1(int t, const void *base, size_t stride); /* TILELOADDT1: a load, traced as such */
void qmm_amx_emu_store(int t, void *base, size_t stride);
void qmm_amx_emu_zero(int t);
void qmm_amx_emu_dpbssd(int c, int a, int b);
void qmm_amx_emu_dpbusd(int c, int a, int b);
void qmm_amx_emu_dpbf16ps(int c, int a, int b);

/* Faults since start (all threads) and the first fault's message ("" if none). */
long qmm_amx_emu_faults(void);
const char *qmm_amx_emu_first_fault(void);
/* Threads whose tiles are configured right now (must be 0 after every engine call). */
long qmm_amx_emu_live_configs(void);
/* Tile instructions executed (all threads): loads, dot products. */
long qmm_amx_emu_ops(void);
/* Software prefetches (T1) of the emulated engines' kernels (QMM_AMX_PREFETCH_T1; a real
 * prefetch is issued too): counted. With a watch set (qmm_amx_emu_watch: rows × K bytes at base,
 * row stride ld — the caller's rows of a borrowed weight), each must fall inside those bytes
 * (else a fault) and marks its 64-byte line of the row (line index (offset mod ld) / 64);
 * qmm_amx_emu_watched(row, line) reads the marks. Single-threaded calls only while watching. */
void qmm_amx_emu_prefetch(const void *p);
void qmm_amx_emu_watch(const void *base, int64_t ld, int64_t rows, int64_t K); /* base NULL: off */
int qmm_amx_emu_watched(int64_t row, int64_t line);
long qmm_amx_emu_prefetches(void);
/* The trace, for the traffic audits of tests/test_amx_emulated.c: qmm_amx_emu_trace(n) starts
 * recording (and drops the last trace) up to n events — every TILELOADD / TILELOADDT1 /
 * TILESTORED (tile, base address, stride, the configured rows and colsb), TILEZERO, TDPBSSD /
 * TDPBF16PS (tile = C, stride = A·8 + B) and prefetch (address) — each with the number of the
 * thread that ran it (0, 1, ... in the order threads first appear in this trace); n = 0 stops.
 * Events past n are counted (lost), not kept. */
enum { QMM_AMX_EV_LOAD = 0, QMM_AMX_EV_LOAD_T1, QMM_AMX_EV_STORE, QMM_AMX_EV_ZERO, QMM_AMX_EV_DP, QMM_AMX_EV_PREFETCH };
typedef struct qmm_amx_emu_event {
    uint8_t kind, tile, thread, rows;
    uint16_t colsb;
    uintptr_t addr;
    int64_t stride;
} qmm_amx_emu_event;
void qmm_amx_emu_trace(long capacity);
long qmm_amx_emu_trace_count(void);
long qmm_amx_emu_trace_lost(void);
const qmm_amx_emu_event *qmm_amx_emu_trace_events(void);

/* LDTILECFG (valid palette-1 configurations loaded) and TILERELEASE executed (all threads). */
long qmm_amx_emu_configs(void);
long qmm_amx_emu_releases(void);

/* amx_int8's micro-kernel (amx_int8.c), emulated: C[mr][16·nr] (int32, rows ldc apart; ldc 0:
 * tile-contiguous, tile (i, j) at c + (i·nr + j)·256) = (first ? 0 : C) + A[mr][4·nq] (s8, rows
 * lda apart) · the nr n16k4 blocks at b (ldb bytes apart), nq a multiple of 16, mr 1..32, nr 1..2;
 * flags (QMM_AMX_UK_*) and pf (NULL) as there. It configures this thread's tiles;
 * qmm_amx_tiles_release_emu releases them. */
void qmm_qd8_qc8w_gemm_ukernel_32x32c4__amx_emu(int mr, int nr, int64_t nq, const int8_t *a, int64_t lda,
                                               const int8_t *b, int64_t ldb, int32_t *c, int64_t ldc, int first,
                                               int flags, const void *pf);
void qmm_amx_tiles_release_emu(void);

/* amx_int8's ladder (amx_ladder.c), emulated: the rungs run on their small sizes (small = 1). */
#ifndef QMM_AMX_LADDER_RUNGS
#define QMM_AMX_LADDER_RUNGS 12
#endif
extern const char *const qmm_amx_ladder_names_emu[QMM_AMX_LADDER_RUNGS];
qmm_status qmm_amx_ladder_probe_emu(int rung, int64_t reps, int small, void (*ready)(void *), void *arg,
                                    qmm_probe_result *res);

/* The emulated engines (test hooks; never in the dispatch table). */
extern const qmm_engine_ops qmm_amx_int8_ops_emu;
extern const qmm_engine_ops qmm_amx_bf16_ops_emu;
/* The blocking of the emulated engines (amx_blocking.h; default the library's constants; tests
 * shrink the blocks and move the regime switches so that every loop runs on small shapes), and
 * the regime (qmm_amx_regime) the last emulated amx_int8 finalize chose (amx_regime.c). */
extern qmm_amx_blocking qmm_amx_blocking_emu;
extern int qmm_amx_last_regime_emu;
/* The default small-M crossover of amx_int8 (QMM_AMX_INT8_MIN_M) */
extern const int qmm_amx_int8_min_m_emu;
/* The fixed parts of the emulated engines' descriptors (amx_regime.h) */
extern const struct qmm_i8_engine qmm_amx_int8_kernels_emu, qmm_amx_int8_kernels_decode_emu;
extern const struct qmm_fgemm qmm_amx_bf16_kernels_emu;

#endif /* QMM_AMX_EMU_H */
