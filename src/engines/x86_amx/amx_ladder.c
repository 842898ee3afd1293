/*
 * amx_ladder.c — the rungs of amx_int8's ladder (issue 27; bench/NOTES.md "## The AMX ladder"):
 * micro-benchmarks of the engine's own tile code, each changing one thing from the rung before,
 * so that a loss shows up between two adjacent rungs. `qmm bench --amx-ladder` (tools/, through
 * qmm_engine_probe) times them on 1 and 2 threads beside the driver's GEMM alone, the full
 * qmm_linear and the avx512_vnni rows; tests/test_amx_emulated.c runs every rung once on small
 * sizes through the emulator and checks what it computed.
 *
 * Every rung is one unit of work on this thread's own buffers (allocated and filled before the
 * timing; ready() is called between, so that threads start together), run once and checked
 * against a plain int32 loop over the same operands (bad = the C values that differ), then run
 * reps times timed (wall: CLOCK_MONOTONIC, cpu: CLOCK_THREAD_CPUTIME_ID). ops = TDPBSSD executed
 * in the timed reps. Geometry (full / small): a task of 16 / 2 row tiles of 32 rows, 16 / 2
 * panels of 32 columns, K chunks of kc (512 unless the rung says), A rows Kp = 5376 / 1088 bytes
 * apart where A is read in place; B in the driver's n16k4 per-chunk layout (2 blocks of nq·64
 * bytes per panel, as a borrowed weight's packed panel); C partials 1 MiB (full).
 *
 *   peak4      tile-only: 4 TDPBSSD on 4 C tiles from 2 A and 2 B tiles, no memory (bench/peak.c)
 *   peak6      tile-only: 6 C tiles from 1 A and 1 B tile
 *   plain2x2   the prototype-style kernel: C in tiles over 8 k-steps × 16 rounds, A and B tiles
 *              1 KiB contiguous from L1 (16 KiB each); C stored once
 *   uk_l1      qmm's micro-kernel, one 32 × 32 × 512 call, A/B/C in L1, first (C zeroed, stored)
 *   uk_c_rows  + the C round trip of the layout at d9c1ae0: C loaded and stored through a 1 MiB
 *              row-major partials buffer (ldc 512 int32), row tiles inner, panels outer
 *   uk_c_tiles + the C round trip tile-contiguous (4 KiB per call, consecutive; the driver's
 *              c_tiles layout now)
 *   a_inplace  + A from L2 in place: the 512 × 512-byte A block of a chunk read at stride Kp
 *              (the driver's q [M][Kp]); 16 panels of B (16 KiB each) × 16 row tiles
 *   a_packed   the same with the A block contiguous [512][512] (a per-chunk repack, untimed)
 *   kc256, kc768, kc1024  a_inplace with K chunks of 256 / 768 / 1024 bytes
 *   a_t1       a_inplace with A through TILELOADDT1
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, CLOCK_THREAD_CPUTIME_ID */
#include "amx_kernel.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *const QMM_AMX_SYM(qmm_amx_ladder_names)[QMM_AMX_LADDER_RUNGS] = {
    "peak4", "peak6", "plain2x2", "uk_l1", "uk_c_rows", "uk_c_tiles", "a_inplace", "a_packed",
    "kc256", "kc768", "kc1024", "a_t1"};

#ifdef QMM_AMX_KERNELS

typedef struct {
    int rt, np;      /* row tiles, panels */
    int64_t kp, nq;  /* A row stride (in place), quads per chunk */
    int8_t *a;       /* [rt·32][kp] in place, or the rung's own layout */
    int8_t *b;       /* [np][2][nq·64] n16k4 */
    int32_t *c;      /* partials */
    int64_t cn;      /* int32 of c */
    int8_t *w;       /* [np·32][4·nq] the plain weight the B panels pack */
} lad;

static double now_s(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint32_t rnd(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

static void *zalloc(size_t n) {
    void *p = aligned_alloc(4096, (n + 4095) / 4096 * 4096);
    if (p) memset(p, 0, (n + 4095) / 4096 * 4096);
    return p;
}

/* A value of the rung's A operand for row m, byte k of the chunk (what the check reads). */
static int8_t a_at(const lad *L, int rung, int64_t m, int64_t k) {
    if (rung == 2) return L->a[(m / 16) * 16 * 4 * L->nq + (k / 64) * 1024 + (m % 16) * 64 + k % 64];
    if (rung == 7) return L->a[m * 4 * L->nq + k];
    return L->a[m * L->kp + k];
}

/* The rung's unit of work. Returns the TDPBSSD executed. */
static int64_t unit(const lad *L, int rung) {
    const int64_t nq = L->nq, kb = 4 * nq;
    switch (rung) {
    case 0:
    case 1: {
        int32_t *c = L->c;
        const int64_t it = 64;
        if (rung == 0) {
            QMM_AMX_SYM(qmm_amx_tiles_config)(16, 16);
            QMM_TILE_ZERO(QMM_TC00); QMM_TILE_ZERO(QMM_TC01); QMM_TILE_ZERO(QMM_TC10); QMM_TILE_ZERO(QMM_TC11);
            QMM_TILE_LOAD(QMM_TA0, L->a, 64); QMM_TILE_LOAD(QMM_TA1, L->a + 1024, 64);
            QMM_TILE_LOAD(QMM_TB0, L->b, 64); QMM_TILE_LOAD(QMM_TB1, L->b + 1024, 64);
            for (int64_t n = 0; n < it; n++) {
                QMM_TDPBSSD(QMM_TC00, QMM_TA0, QMM_TB0);
                QMM_TDPBSSD(QMM_TC01, QMM_TA0, QMM_TB1);
                QMM_TDPBSSD(QMM_TC10, QMM_TA1, QMM_TB0);
                QMM_TDPBSSD(QMM_TC11, QMM_TA1, QMM_TB1);
            }
            QMM_TILE_STORE(QMM_TC00, c, 64); QMM_TILE_STORE(QMM_TC01, c + 256, 64);
            QMM_TILE_STORE(QMM_TC10, c + 512, 64); QMM_TILE_STORE(QMM_TC11, c + 768, 64);
            return 4 * it;
        }
        /* 6 accumulators: tiles 0..5 C, 6 A, 7 B, all 16 × 64 (the tiles_config(16, 16) shapes of
         * tiles 4..7 are 16 × 64 too, tiles 0..3 as well: one config serves) */
        QMM_AMX_SYM(qmm_amx_tiles_config)(16, 16);
        QMM_TILE_ZERO(0); QMM_TILE_ZERO(1); QMM_TILE_ZERO(2); QMM_TILE_ZERO(3); QMM_TILE_ZERO(4); QMM_TILE_ZERO(5);
        QMM_TILE_LOAD(6, L->a, 64);
        QMM_TILE_LOAD(7, L->b, 64);
        for (int64_t n = 0; n < it; n++) {
            QMM_TDPBSSD(0, 6, 7); QMM_TDPBSSD(1, 6, 7); QMM_TDPBSSD(2, 6, 7);
            QMM_TDPBSSD(3, 6, 7); QMM_TDPBSSD(4, 6, 7); QMM_TDPBSSD(5, 6, 7);
        }
        QMM_TILE_STORE(0, c, 64); QMM_TILE_STORE(1, c + 256, 64); QMM_TILE_STORE(2, c + 512, 64);
        QMM_TILE_STORE(3, c + 768, 64); QMM_TILE_STORE(4, c + 1024, 64); QMM_TILE_STORE(5, c + 1280, 64);
        return 6 * it;
    }
    case 2: { /* plain 2x2: A tiles contiguous, [row half][k-step][16 × 64] */
        const int64_t ks = nq / 16, rounds = 16;
        const int8_t *a0 = L->a, *a1 = L->a + ks * 1024, *b0 = L->b, *b1 = L->b + nq * 64;
        QMM_AMX_SYM(qmm_amx_tiles_config)(16, 16);
        QMM_TILE_ZERO(QMM_TC00); QMM_TILE_ZERO(QMM_TC01); QMM_TILE_ZERO(QMM_TC10); QMM_TILE_ZERO(QMM_TC11);
        for (int64_t r = 0; r < rounds; r++)
            for (int64_t k = 0; k < ks; k++) {
                QMM_TILE_LOAD(QMM_TA0, a0 + k * 1024, 64);
                QMM_TILE_LOAD(QMM_TB0, b0 + k * 1024, 64);
                QMM_TDPBSSD(QMM_TC00, QMM_TA0, QMM_TB0);
                QMM_TILE_LOAD(QMM_TB1, b1 + k * 1024, 64);
                QMM_TDPBSSD(QMM_TC01, QMM_TA0, QMM_TB1);
                QMM_TILE_LOAD(QMM_TA1, a1 + k * 1024, 64);
                QMM_TDPBSSD(QMM_TC10, QMM_TA1, QMM_TB0);
                QMM_TDPBSSD(QMM_TC11, QMM_TA1, QMM_TB1);
            }
        QMM_TILE_STORE(QMM_TC00, L->c, 64); QMM_TILE_STORE(QMM_TC01, L->c + 256, 64);
        QMM_TILE_STORE(QMM_TC10, L->c + 512, 64); QMM_TILE_STORE(QMM_TC11, L->c + 768, 64);
        return rounds * ks * 4;
    }
    case 3: /* one call, all in L1, C zeroed and stored (ldc 32) */
        QMM_AMX_SYM(qmm_qd8_qc8w_gemm_ukernel_32x32c4__amx)(32, 2, nq, L->a, L->kp, L->b, nq * 64, L->c, 32, 1, 0, NULL);
        return nq / 16 * 4;
    case 4:
    case 5: { /* the C round trip, A and B in L1 (one row tile, one panel, reread) */
        int64_t n = 0;
        for (int p = 0; p < L->np; p++)
            for (int r = 0; r < L->rt; r++) {
                int32_t *c = rung == 4 ? L->c + (int64_t)r * 32 * (L->np * 32) + p * 32 : L->c + ((int64_t)p * L->rt + r) * 1024;
                QMM_AMX_SYM(qmm_qd8_qc8w_gemm_ukernel_32x32c4__amx)(32, 2, nq, L->a, L->kp, L->b, nq * 64, c,
                                                                    rung == 4 ? L->np * 32 : 0, 0, 0, NULL);
                n += nq / 16 * 4;
            }
        return n;
    }
    default: { /* 6..11: A block from L2 (in place at kp, or packed at kb), every panel */
        const int packed = rung == 7, flags = rung == 11 ? QMM_AMX_UK_A_T1 : 0;
        const int64_t lda = packed ? kb : L->kp;
        int64_t n = 0;
        for (int p = 0; p < L->np; p++)
            for (int r = 0; r < L->rt; r++) {
                QMM_AMX_SYM(qmm_qd8_qc8w_gemm_ukernel_32x32c4__amx)(32, 2, nq, L->a + (int64_t)r * 32 * lda, lda,
                                                                    L->b + (int64_t)p * 2 * nq * 64, nq * 64,
                                                                    L->c + ((int64_t)p * L->rt + r) * 1024, 0, 0, flags,
                                                                    NULL);
                n += nq / 16 * 4;
            }
        return n;
    }
    }
}

/* C of the rung after one unit on zeroed partials, against the plain int32 loop. */
static int64_t check(const lad *L, int rung) {
    const int64_t kb = 4 * L->nq;
    int64_t bad = 0;
    if (rung <= 1) { /* C = it · A·B, A = the 16 × 64 tile(s) at a, B the 16 × 64 tile(s) at b (as loaded) */
        const int nc = rung == 0 ? 4 : 6;
        for (int t = 0; t < nc; t++)
            for (int i = 0; i < 16; i++)
                for (int j = 0; j < 16; j++) {
                    const int8_t *A = L->a + (rung == 0 ? (t / 2) * 1024 : 0), *B = L->b + (rung == 0 ? (t % 2) * 1024 : 0);
                    uint32_t s = 0;
                    for (int k = 0; k < 64; k++) s += (uint32_t)((int32_t)A[i * 64 + k] * B[(k / 4) * 64 + j * 4 + k % 4]);
                    bad += L->c[t * 256 + i * 16 + j] != (int32_t)(s * 64u);
                }
        return bad;
    }
    const int64_t rts = rung == 2 || rung == 3 ? 1 : L->rt, nps = rung == 2 || rung == 3 ? 1 : L->np;
    const uint32_t times = rung == 2 ? 16u : 1u;
    for (int64_t p = 0; p < nps; p++)
        for (int64_t r = 0; r < rts; r++)
            for (int i = 0; i < 32; i++)
                for (int j = 0; j < 32; j++) {
                    const int64_t m = rung == 4 || rung == 5 ? i : r * 32 + i, n = (rung == 4 || rung == 5 ? 0 : p * 32) + j;
                    uint32_t s = 0;
                    for (int64_t k = 0; k < kb; k++) s += (uint32_t)((int32_t)a_at(L, rung, m, k) * L->w[n * kb + k]);
                    int32_t got;
                    if (rung == 3) got = L->c[i * 32 + j];
                    else if (rung == 4) got = L->c[(r * 32 + i) * (L->np * 32) + p * 32 + j];
                    else got = L->c[(p * rts + r) * 1024 + ((i / 16) * 2 + j / 16) * 256 + (i % 16) * 16 + j % 16];
                    bad += got != (int32_t)(s * times);
                }
    return bad;
}

qmm_status QMM_AMX_SYM(qmm_amx_ladder_probe)(int rung, int64_t reps, int small, void (*ready)(void *), void *arg,
                                             qmm_probe_result *res) {
    memset(res, 0, sizeof *res);
    QMM_RETURN_IF(rung < 0 || rung >= QMM_AMX_LADDER_RUNGS, QMM_ERR_INVALID_ARGUMENT, "amx ladder: no rung %d", rung);
    lad L = {.rt = small ? 2 : 16, .np = small ? 2 : 16, .kp = small ? 1088 : 5376, .nq = 128};
    if (rung == 8) L.nq = 64;
    if (rung == 9) L.nq = 192;
    if (rung == 10) L.nq = 256;
    const int64_t kb = 4 * L.nq;
    const int64_t abytes = rung == 7 ? (int64_t)L.rt * 32 * kb : (int64_t)L.rt * 32 * L.kp;
    L.cn = (int64_t)L.rt * 32 * L.np * 32;
    L.a = zalloc((size_t)abytes + 4096);
    L.b = zalloc((size_t)L.np * 2 * L.nq * 64);
    L.c = zalloc((size_t)L.cn * sizeof(int32_t));
    L.w = zalloc((size_t)L.np * 32 * kb);
    if (!L.a || !L.b || !L.c || !L.w) {
        free(L.a); free(L.b); free(L.c); free(L.w);
        return qmm_fail(QMM_ERR_OUT_OF_MEMORY, "amx ladder: no memory for rung %d", rung);
    }
    uint32_t s = 12345u + (uint32_t)rung;
    for (int64_t i = 0; i < abytes; i++) L.a[i] = (int8_t)rnd(&s);
    for (int64_t i = 0; i < (int64_t)L.np * 32 * kb; i++) L.w[i] = (int8_t)rnd(&s);
    for (int64_t p = 0; p < L.np; p++) /* n16k4 per panel: block jb of panel p, quad q, column j */
        for (int jb = 0; jb < 2; jb++)
            for (int64_t q = 0; q < L.nq; q++)
                for (int j = 0; j < 16; j++)
                    for (int t = 0; t < 4; t++)
                        L.b[(p * 2 + jb) * L.nq * 64 + q * 64 + j * 4 + t] = L.w[(p * 32 + jb * 16 + j) * kb + q * 4 + t];
    if (rung <= 1) /* the tile-only loops read the first two 1 KiB tiles of a and b as B tiles: keep them small */
        for (int i = 0; i < 2048; i++) { L.a[i] = (int8_t)(rnd(&s) % 5) - 2; L.b[i] = (int8_t)(rnd(&s) % 5) - 2; }
    unit(&L, rung);
    res->bad = check(&L, rung);
    if (ready) ready(arg);
    const double w0 = now_s(CLOCK_MONOTONIC), c0 = now_s(CLOCK_THREAD_CPUTIME_ID);
    for (int64_t i = 0; i < reps; i++) res->ops += unit(&L, rung);
    res->wall_s = now_s(CLOCK_MONOTONIC) - w0;
    res->cpu_s = now_s(CLOCK_THREAD_CPUTIME_ID) - c0;
    QMM_AMX_SYM(qmm_amx_tiles_release)();
    free(L.a); free(L.b); free(L.c); free(L.w);
    return QMM_OK;
}

#else /* built without AMX compiler support */
qmm_status QMM_AMX_SYM(qmm_amx_ladder_probe)(int rung, int64_t reps, int small, void (*ready)(void *), void *arg,
                                             qmm_probe_result *res) {
    (void)rung; (void)reps; (void)small; (void)ready; (void)arg;
    memset(res, 0, sizeof *res);
    return qmm_fail(QMM_ERR_UNSUPPORTED_HARDWARE, "amx ladder: amx_int8 was not built (compiler lacks AMX)");
}
#endif
