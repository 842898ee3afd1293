/*
 * amx_int8.c — the AMX-INT8 engine (QMM_ENGINE_AMX_INT8): y = epilogue(q · Wᵀ) with TDPBSSD
 * (signed × signed: no +128 compensation, no column sums), SPEC §1, bit-identical to the
 * reference engine (int32 accumulators and float outputs alike).
 *
 * It is a micro-kernel under the core int8 driver (int8_gemm.h: pre-pass, tasks of mc rows × nc
 * columns, K chunks of kc bytes, the prefetch schedule, the weight panels — owned in place,
 * borrowed packed per call), which it hands:
 *   tile     qmm_qd8_qc8w_gemm_ukernel_32x32c4__amx (qd8: per-token dynamic int8 activations,
 *            qc8w: per-channel int8 weights, 32 rows × 32 columns, k in groups of 4): the 2×2
 *            tile plan of amx_kernel.h over one K chunk, C in tiles for the whole chunk, loaded
 *            from / stored to the driver's per-thread partials between chunks (tile-contiguous,
 *            the driver's c_tiles: each C tile load and store one 1 KiB run); on the last chunk
 *            the outputs through qmm_z_epilogue16 (simd_avx512.h: fused or kitchen, bias,
 *            residual, f32/f16/bf16, or the int32 itself), the same epilogue as avx512_vnni;
 *   A        the driver's q [M][Kp] as it is (s8: u8 = 0, no flip), the tile loads 16 rows × 64
 *            bytes at stride Kp;
 *   B        the driver's n16k4 blocks (the tile's b) as they are: a block's 64-byte k-step is 16
 *            quads × 16 columns × 4 bytes = one 1 KiB B tile (stride 64), so TDPBSSD reads the
 *            owned packing in place and a borrowed weight's per-call panel the same way;
 *   pack     a borrowed weight's panel: qmm_z_pack_n16k4 (the 16 × 16 dword transpose), no
 *            column sums or -128 flag (pack_bare: TDPBSSD is exact on -128);
 *   begin/end  per thread: LDTILECFG before its first task, TILERELEASE after its last (tile()
 *            reloads the configuration only for a partial row tile: amx_common.c caches it);
 *   k64      whole 64-byte k-steps: the chunks cover Kp, zeros past K (q, the packing, the panel),
 *            and are even (max − min <= 1 k-step: no short last chunk paying a full C round trip);
 *   mc_fixed the partials stay mc × nc (1 MiB at 512 × 512, L2) for borrowed weights too.
 * The regimes are three descriptors (decode, panel, blocked): this file's fixed parts
 * (qmm_amx_int8_kernels; decode: qmm_amx_int8_kernels_decode) with the blocking in force (amx_blocking.h; QMM_AMX_BLOCKING applies),
 * built once by amx_regime.c, whose finalize (the engine's linear row) picks the one of a call
 * class by the rule of amx_blocking.h, once per class in the plan —
 *   decode   (M <= small_m)          whole K, one row tile per task: B streams from memory once,
 *                                    prefetched QMM_AMX_DECODE_PF_STEPS k-steps ahead (PF_STREAM)
 *   panel    (M × Kp <= panel_a)     whole K, C in tiles for all of K; the task's row tiles run
 *                                    one 32 × Kp B panel from L2 and share the T1 prefetch of the
 *                                    next (PF_NEXT)
 *   blocked  (otherwise)             K chunks of kc: per chunk, for each 32-column panel (16 KiB
 *                                    of B at kc = 512, L1) every 32-row tile of the task (the
 *                                    mc × kc A block, 256 KiB, L2); C partials in the driver's
 *                                    mc × nc buffer (1 MiB, L2) between chunks
 *
 * Arithmetic (one k-step of a 32 × 32 block: 4 TDPBSSD = 4 × 16 × 16 × 64 MACs = 64 cycles at
 * 1024 MAC/cycle, 4 tile loads of 1 KiB; load costs of amx_blocking.h: 8 cycles from L1, ≈ 23
 * from L2, ≈ 110 beyond; bench/NOTES.md "## amx" for the model and the AMX measurements):
 *   blocked  2 A loads from L2 + 2 B loads from L1 + C (4 loads + 4 stores per kc/64 = 8 k-steps,
 *            L2) ≈ 2 × 23 + 2 × 8 + 23 = 85 cycles per 64 of TDPBSSD: ≈ 75 % of peak. The L1
 *            operand is the B panel, two contiguous kc·16-byte runs (owned) or one contiguous
 *            buffer (borrowed). An L2 risk: with Kp a multiple of 4 KiB and huge pages the
 *            mc × kc A block (512 rows × 8 lines) maps to 1/8 of the L2 sets, 16 lines per set =
 *            the whole associativity; QMM_AMX_BLOCKING=mc=256 halves it. First touches: the A
 *            block comes from L3/DRAM for the first panel of a chunk (1 of nc/32 = 16), the B
 *            panel for the first row tile (1 of mc/32 = 16), both in sequential runs the hardware
 *            prefetchers follow; no software prefetch in this regime. DRAM: W read ⌈M/mc⌉ times,
 *            the task's A block (mc × Kp) from L3 for each of its thread's N tasks.
 *   panel    A and B from L2: 4 × 23 ≈ 92–114 cycles per 64: ≈ 56 %.
 *   decode   W streams once, 2 B tiles per k-step per thread: bound by DRAM bandwidth.
 *   Measured on AMX at d9c1ae0 (../shared/measurements/AMX-d9c1ae0.md, 2 threads): 22–26 % of
 *   the same-run peak packed, 18–22 % borrowed at M >= 256; the ladder (amx_ladder.c, `qmm bench
 *   --amx-ladder`) splits that gap into its rungs.
 * Borrowed weights: the driver packs each (task, chunk, panel) of the caller's rows once, N × Kp
 * bytes per row task (⌈M/mc⌉ times); the pack (qmm_z_n16k4_step, 64 shuffles per KiB) runs at
 * 51 ns per KiB with its source in L2 and 75–100 ns per KiB from DRAM on one Zen 5 core
 * (bench/NOTES.md "## AMX under the int8 driver"). So each row tile prefetches (T1) its share of
 * the caller's rows of the panel the driver packs next (qmm_i8_tile.rows_pf: the next panel of the
 * chunk, else the first of the next chunk), spread over its k-steps, their DRAM stream running
 * under this panel's TDPBSSD, and the pack reads L2. One packed KiB feeds min(M, mc)/16 TDPBSSD of 16 cycles: at
 * M >= mc = 512, 512 cycles = 256 ns at 2 GHz at peak, so the pack is ≈ 5–8 % of the time at
 * 25–40 % of peak, 10–15 % at M = 256 (one row task, 8 row tiles per panel). At M = 8..32 both
 * layouts read W from DRAM once and are bound by it (measured: borrowed 0.67× packed at
 * M <= 32, so amx_int8 refuses borrowed weights below borrowed_min_m).
 * Threads: the driver's static grid (task i on thread i mod T; M tasks of mc rows, N tasks of nc
 * columns): every output is summed by one task in one k order, so the bits never depend on the
 * thread count or the blocking.
 *
 * Admission (beside the kernel): qmm_admit_common_int8, then the small-M rules: M below
 * min_m (QMM_AMX_INT8_MIN_M = 8, QMM_AMX_BLOCKING can move it to re-measure) goes to
 * avx512_vnni — a tile op costs as much for 1 row as for 16 (the AMX box measured both at the
 * DRAM limit for M <= 16); a borrowed weight below borrowed_min_m (QMM_AMX_INT8_BORROWED_MIN_M =
 * 17, amx_blocking.h: the measurement) goes to avx512_vnni too, whose rows kernel reads the
 * caller's rows once in place where this engine packs them per call.
 *
 * Verification: tests/test_amx_emulated.c, test_int8_ukernels (through its finalized descriptors) and
 * fuzz_corpus_engines_amx_emu run this source with every tile instruction replaced by the
 * software model of amx_emu.c; on an AMX machine the same tests run the real engine.
 */
#include "amx_kernel.h"
#include "amx_regime.h"
#include "int8_gemm.h"
#include "numerics.h"
#include "avx512/pack_avx512.h"
#include "avx512/simd_avx512.h"

#include <stdio.h>

const int QMM_AMX_SYM(qmm_amx_int8_min_m) = QMM_AMX_INT8_MIN_M; /* the default (tests) */

static const char *amx_int8_admit(const void *call, char *why, size_t n) {
    const qmm_call *c = call;
    const char *r = qmm_admit_common_int8(c, why, n);
    if (r) return r;
    const qmm_amx_blocking b = QMM_AMX_SYM(qmm_amx_blocking_now)();
    if (c->M < b.min_m) {
        snprintf(why, n, "M=%lld < %lld: avx512_vnni is faster for tiny M (a tile op costs as much for 1 row as 16)",
                 (long long)c->M, (long long)b.min_m);
        return why;
    }
    if (c->w->borrowed && c->M < b.borrowed_min_m) { /* a borrowed weight (the dispatch cache is per weight) */
        snprintf(why, n,
                 "borrowed weight at M=%lld < %lld: avx512_vnni reads the caller's rows in place, amx_int8 packs them per "
                 "call (measured 0.67x of packed, slower than avx512_vnni at M <= 16)",
                 (long long)c->M, (long long)b.borrowed_min_m);
        return why;
    }
    return NULL;
}

#ifdef QMM_AMX_KERNELS

/* A software prefetch (T1) spread over a tile's k-steps: lines [l0, l1) of a set of rows, line l
 * at base + (l / per_row)·ld + (l mod per_row)·64, per_step of them per k-step (base NULL: none).
 * A contiguous range is one row (ld 0). */
typedef struct {
    const char *base;
    int64_t ld, per_row, l0, l1, per_step;
} amx_pf;

/* The 2×2 tile plan over nq quads (a multiple of 16) with its shape as compile-time flags:
 * r1 — a second 16-row A tile, two — a second B block, at1 — A through TILELOADDT1 (the
 * streaming hint: A reused from L2, not L1). C at c: loaded, or zeroed when first; stored at the
 * end. Its layout: ldc > 0, int32 rows ldc apart (C01 at c + 16, C10 at c + 16·ldc); ldc == 0,
 * tile-contiguous (QMM_AMX_C_TILES): tile (i, j) the 1 KiB at c + (i·nr + j)·256 int32, rows 64
 * bytes apart. stream: prefetch (T1) both blocks QMM_AMX_DECODE_PF_STEPS k-steps ahead (the
 * address runs on into the blocks after, which come next). pf: the prefetch of what runs next
 * (amx_pf). */
static inline __attribute__((always_inline)) void kloop(const int r1, const int two, const int at1, int64_t nq,
                                                        const int8_t *a, int64_t lda, const int8_t *b, int64_t ldb,
                                                        int32_t *c, int64_t ldc, int first, int stream,
                                                        const amx_pf *pf) {
    const int8_t *b1 = b + ldb;
    const int64_t ldcb = ldc ? ldc * (int64_t)sizeof(int32_t) : 64;
    int32_t *c01 = ldc ? c + 16 : c + 256, *c10 = ldc ? c + 16 * ldc : c + (two ? 512 : 256);
    int32_t *c11 = ldc ? c + 16 * ldc + 16 : c + 768;
    if (first) {
        QMM_TILE_ZERO(QMM_TC00);
        if (two) QMM_TILE_ZERO(QMM_TC01);
        if (r1) QMM_TILE_ZERO(QMM_TC10);
        if (r1 && two) QMM_TILE_ZERO(QMM_TC11);
    } else {
        QMM_TILE_LOAD(QMM_TC00, c, ldcb);
        if (two) QMM_TILE_LOAD(QMM_TC01, c01, ldcb);
        if (r1) QMM_TILE_LOAD(QMM_TC10, c10, ldcb);
        if (r1 && two) QMM_TILE_LOAD(QMM_TC11, c11, ldcb);
    }
    const char *prow = pf->base ? pf->base + pf->l0 / pf->per_row * pf->ld : NULL; /* the prefetch position */
    int64_t pcol = pf->base ? pf->l0 % pf->per_row : 0, pleft = pf->base ? pf->l1 - pf->l0 : 0;
    for (int64_t ks = 0; ks < nq / 16; ks++) {
        for (int64_t n = pleft < pf->per_step ? pleft : pf->per_step; n > 0; n--, pleft--) {
            QMM_AMX_PREFETCH_T1(prow + pcol * 64);
            if (++pcol == pf->per_row) {
                pcol = 0;
                prow += pf->ld;
            }
        }
        if (stream) {
            const char *p0 = (const char *)(b + (ks + QMM_AMX_DECODE_PF_STEPS) * 1024);
            const char *p1 = (const char *)(b1 + (ks + QMM_AMX_DECODE_PF_STEPS) * 1024);
            for (int l = 0; l < 1024; l += 64) {
                QMM_AMX_PREFETCH_T1(p0 + l);
                if (two) QMM_AMX_PREFETCH_T1(p1 + l);
            }
        }
        if (at1) QMM_TILE_LOAD_T1(QMM_TA0, a + ks * 64, lda);
        else QMM_TILE_LOAD(QMM_TA0, a + ks * 64, lda);
        QMM_TILE_LOAD(QMM_TB0, b + ks * 1024, 64);
        QMM_TDPBSSD(QMM_TC00, QMM_TA0, QMM_TB0);
        if (two) {
            QMM_TILE_LOAD(QMM_TB1, b1 + ks * 1024, 64);
            QMM_TDPBSSD(QMM_TC01, QMM_TA0, QMM_TB1);
        }
        if (r1) {
            if (at1) QMM_TILE_LOAD_T1(QMM_TA1, a + 16 * lda + ks * 64, lda);
            else QMM_TILE_LOAD(QMM_TA1, a + 16 * lda + ks * 64, lda);
            QMM_TDPBSSD(QMM_TC10, QMM_TA1, QMM_TB0);
            if (two) QMM_TDPBSSD(QMM_TC11, QMM_TA1, QMM_TB1);
        }
    }
    QMM_TILE_STORE(QMM_TC00, c, ldcb);
    if (two) QMM_TILE_STORE(QMM_TC01, c01, ldcb);
    if (r1) QMM_TILE_STORE(QMM_TC10, c10, ldcb);
    if (r1 && two) QMM_TILE_STORE(QMM_TC11, c11, ldcb);
}

/* The micro-kernel: C[mr][16·nr] (int32; ldc > 0: rows ldc apart; ldc == 0: tile-contiguous,
 * tile (i, j) at c + (i·nr + j)·256, see kloop) = (first ? 0 : C) + A · B over nq quads (a
 * multiple of 16) — A: mr (1..32) rows of s8, lda bytes apart; B: nr (1..2) n16k4 blocks, ldb
 * bytes apart (64-byte multiples). flags: QMM_AMX_UK_STREAM (the decode prefetch of B ahead),
 * QMM_AMX_UK_A_T1 (A through TILELOADDT1; full 32 × 32 tiles only, else ignored). The thread's
 * tiles are configured here for mr rows (a no-op unless the row count changed; the caller
 * releases them). Prefetch as kloop (pfv: an amx_pf, or NULL: none). External for the
 * kernel-level test (amx_emu.h) and the ladder (amx_ladder.c). */
void QMM_AMX_SYM(qmm_qd8_qc8w_gemm_ukernel_32x32c4__amx)(int mr, int nr, int64_t nq, const int8_t *a, int64_t lda,
                                                        const int8_t *b, int64_t ldb, int32_t *c, int64_t ldc,
                                                        int first, int flags, const void *pfv) {
    static const amx_pf none = {NULL, 0, 1, 0, 0, 0};
    const amx_pf *pf = pfv ? (const amx_pf *)pfv : &none; /* an amx_pf (pfv: untyped for the test's prototype) */
    const int r0 = mr < 16 ? mr : 16, stream = (flags & QMM_AMX_UK_STREAM) != 0;
    QMM_AMX_SYM(qmm_amx_tiles_config)(r0, mr - r0);
    if (mr > 16 && nr > 1) {
        if (flags & QMM_AMX_UK_A_T1) kloop(1, 1, 1, nq, a, lda, b, ldb, c, ldc, first, stream, pf);
        else kloop(1, 1, 0, nq, a, lda, b, ldb, c, ldc, first, stream, pf);
    } else if (mr > 16) kloop(1, 0, 0, nq, a, lda, b, ldb, c, ldc, first, stream, pf);
    else if (nr > 1) kloop(0, 1, 0, nq, a, lda, b, ldb, c, ldc, first, stream, pf);
    else kloop(0, 0, 0, nq, a, lda, b, ldb, c, ldc, first, stream, pf);
}

/* ---------------------------------------------------------------- the driver's callbacks */
/* The tile (qmm_i8_tile_fn) on a rows lda bytes apart; decode (the decode regime): B streamed with
 * a prefetch ahead where the driver says PF_STREAM. */
static inline __attribute__((always_inline)) void tile_run(const uint8_t *a, int64_t lda, const float *s,
                                                           const qmm_call *c, const qmm_i8_tile *t, const int decode) {
    const int flags = t->pf_mode == QMM_I8_PF_STREAM && decode ? QMM_AMX_UK_STREAM : 0;
    amx_pf pf = {NULL, 0, 1, 0, 0, 0};
    if (t->pf_mode == QMM_I8_PF_NEXT) { /* owned, whole K: this row tile's share of the next panel */
        pf.base = (const char *)t->pf;
        pf.per_row = INT64_MAX;
        pf.l1 = (t->nq * t->pf_step + 63) / 64;
        pf.per_step = (16 * t->pf_step + 63) / 64;
    } else if (t->rows_pf.base) { /* a borrowed weight: this row tile's share of the rows packed next */
        const int64_t steps = t->nq / 16;
        pf.base = (const char *)t->rows_pf.base;
        pf.ld = t->rows_pf.ld;
        pf.per_row = t->rows_pf.per_row;
        pf.l0 = t->rows_pf.l0;
        pf.l1 = t->rows_pf.l1;
        pf.per_step = (pf.l1 - pf.l0 + steps - 1) / steps;
    }
    /* the partials tile-contiguous (the driver's c_tiles: this tile's 4 KiB, ldc 0) */
    QMM_AMX_SYM(qmm_qd8_qc8w_gemm_ukernel_32x32c4__amx)(t->mr, t->nr, t->nq, (const int8_t *)a, lda, t->b, t->ldb,
                                                        t->part, 0, t->first, flags, &pf);
    if (!t->last) return;
    for (int i = 0; i < t->mr; i++)
        for (int jb = 0; jb < t->nr; jb++) {
            const int64_t n = t->n + 16 * jb;
            const int32_t *row = t->part + ((i / 16) * t->nr + jb) * 256 + (i % 16) * 16; /* tile (i/16, jb), row i%16 */
            if (n < c->N)
                qmm_z_epilogue16(c, _mm512_loadu_si512(row), t->r + i, n, s[i], qmm_z_tail_mask(c->N - n));
        }
}

static void tile(const uint8_t *a, int64_t lda, const float *s, const qmm_call *out, const qmm_i8_tile *t) {
    tile_run(a, lda, s, out, t, 0);
}

static void tile_decode(const uint8_t *a, int64_t lda, const float *s, const qmm_call *out, const qmm_i8_tile *t) {
    tile_run(a, lda, s, out, t, 1);
}

/* qmm_pack_n16k4_fn: the 16 rows transposed into n16k4, nothing else (cs and neg128 unread) */
static void pack_block(const int8_t *W, int64_t ld, int rows, int64_t k0, int64_t k1, int8_t *dst, int64_t nq,
                       int32_t *cs, int first, int *neg128) {
    qmm_z_pack_n16k4(W, ld, rows, k0, k1, dst, nq, cs, first, neg128);
}

/* LDTILECFG for the thread's usual row tile (32 rows, or all of M), TILERELEASE at the end */
static void begin(const qmm_call *c, int thread) {
    (void)thread;
    const int rows = c->M < 32 ? (int)c->M : 32, r0 = rows < 16 ? rows : 16;
    QMM_AMX_SYM(qmm_amx_tiles_config)(r0, rows - r0);
}

static void end(const qmm_call *c, int thread) {
    (void)c;
    (void)thread;
    QMM_AMX_SYM(qmm_amx_tiles_release)();
}

/* The descriptors' fixed parts — the kernels, the 32 × 32 tile, the driver's options — of the
 * decode regime (its tile streams B ahead where the driver says PF_STREAM) and of the others;
 * amx_regime.c adds each regime's blocking (mc, nc, kc, whole_k_m). */
const qmm_i8_engine QMM_AMX_SYM(qmm_amx_int8_kernels) = {
    .u8 = 0, .mr = 32, .nrb = 2, .tile = tile, .pack = pack_block, .pack_bare = 1, .begin = begin, .end = end,
    .k64 = 1, .mc_fixed = 1, .c_tiles = 1,
};
const qmm_i8_engine QMM_AMX_SYM(qmm_amx_int8_kernels_decode) = {
    .u8 = 0, .mr = 32, .nrb = 2, .tile = tile_decode, .pack = pack_block, .pack_bare = 1, .begin = begin, .end = end,
    .k64 = 1, .mc_fixed = 1, .c_tiles = 1,
};

#else /* built without AMX compiler support: no kernels (finalize gives no descriptor) */
const qmm_i8_engine QMM_AMX_SYM(qmm_amx_int8_kernels) = {.u8 = 0};
const qmm_i8_engine QMM_AMX_SYM(qmm_amx_int8_kernels_decode) = {.u8 = 0};
#endif

const qmm_engine_ops QMM_AMX_SYM(qmm_amx_int8_ops) = {
    .built = QMM_AMX_BUILT,
    /* linear: the descriptor of the class's regime (amx_regime.c) */
    .op[QMM_OP_LINEAR] = {.admit = amx_int8_admit, .finalize = QMM_AMX_SYM(qmm_amx_int8_finalize)},
#ifdef QMM_AMX_KERNELS
    .op[QMM_OP_ATTENTION] = {.admit = QMM_AMX_SYM(qmm_amx_int8_attn_admit), .desc = &QMM_AMX_SYM(qmm_amx_int8_attn)},
#else
    .op[QMM_OP_ATTENTION] = {.admit = QMM_AMX_SYM(qmm_amx_int8_attn_admit)},
#endif
    .tuning = QMM_AMX_SYM(qmm_amx_tuning),
    .n_probes = QMM_AMX_LADDER_RUNGS,
    .probe_names = QMM_AMX_SYM(qmm_amx_ladder_names),
    .probe = QMM_AMX_SYM(qmm_amx_ladder_probe),
};
