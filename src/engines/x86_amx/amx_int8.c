/*
 * amx_int8.c — the AMX-INT8 engine (QMM_ENGINE_AMX_INT8): y = epilogue(q · Wᵀ) with TDPBSSD
 * (signed × signed: no +128 compensation), SPEC §1, bit-identical to the reference engine
 * (int32 accumulators and float outputs alike).
 *
 * Owned weights:
 *   q, s  = qmm_prepass(x)               q [M][Kp] int8 (row stride Kp), s [M] fp32
 *   W     = w->i8.data, n16k4             block nb, k-step ks (64 k): the 1 KiB B tile at
 *                                          data + nb*Kp*16 + ks*1024, 16 rows × 64 bytes
 *   acc   = Σ over ks of A(m-panel, ks) · B(nb, ks)   in the 2×2 tiles of amx_kernel.h
 *   y     = epilogue(acc): out(((float)acc * s_r) * w_scale[n] + bias[n])  (numerics.h
 *           qmm_epilogue_f), or acc itself for an i32 output — epilogue() (owned) and
 *           epilogue_t() (borrowed, below) are the only writers of y, each called once per
 *           finished 32 × 32 block by every regime, both through qmm_z_epilogue16
 *
 * Regimes (amx_blocking.h; version 2 in bench/NOTES.md "## amx" with each one's prediction):
 *   decode  (M <= 32)            panel_task, B prefetched ahead: one pass over the weights
 *   panel   (M × Kp <= 1.5 MiB)  panel_task: N outer, full K per 32 × 32 block, C in tiles for
 *                                the whole K, each 32 × Kp B panel reused from L2 by all rows
 *   blocked (otherwise)          per M block of mc rows: qmm_prepass on those rows, repacked
 *                                per K block (qmm_amx_pack_a), then blocked_task: nc(512) →
 *                                kc(512) → m32 → n32, C partials in tiles within a K block and
 *                                in a per-thread C buffer between K blocks
 * Borrowed weights (w->borrow: the caller's int8 [N][ld], any alignment, read at every call)
 * are read in place, nothing of W copied: yᵀ = W·xᵀ, the roles of A and B swapped —
 *   A  = 16 rows of W straight from the caller's memory (TILELOADD, stride ld, 64 bytes of K)
 *   B  = 16 tokens of q in token blocks [⌈M/16⌉][Kp/4][16][4] (the n16k4 transpose of q, written
 *        per call after qmm_prepass by token_blocks: one pass over M × Kp, like the owned blocked
 *        regime's repack)
 *   C  = [16 n][16 tokens] int32; epilogue_t transposes each 16 × 16 quarter in registers and
 *        stores rows of y through qmm_z_epilogue16, like epilogue()
 * with the same 2×2 tile plan (amx_kernel.h: A rows = W rows r0/r1, B = token blocks), the same
 * kblock and the same regimes, grid and threads (N = W rows split first). The K tail (K % 64 != 0:
 * the last k-step) is read from a zeroed per-thread copy of the rows' last K % 64 bytes (copy_tail,
 * once per 32-row W panel, reused by every token panel), so no tile load reads past byte K of a
 * row nor past the caller's last byte, and no tile configuration changes inside a block (LDTILECFG
 * zeroes every tile: a narrower tile for the tail would cost 4 C stores and reloads per block).
 * N not a multiple of 16: fewer A and C tile rows (the partial configuration); M not a multiple
 * of 16: zero tokens in the last token block (their outputs are not stored).
 *   decode/panel  W panel outer (32 rows × K, from DRAM for the first token panel, L2 after),
 *                 every token panel over the full K, C in tiles; the next W panel prefetched (T1),
 *                 one line per row per k-step, its rows shared among the token panels
 *   blocked       per M block: nc → mc → kc → m32 → n32 — the 32 × kc token panel (16 KiB) in L1
 *                 across the nc/32 W panels, the nc × kc block of W rows (256 KiB) in L2 across
 *                 the mc/32 token panels, the next W block prefetched (T1) over this one's work
 * Arithmetic (one k-step of a 32 × 32 block: 4 TDPBSSD = 4 × 16 × 16 × 64 MACs = 64 cycles at
 * 1024 MAC/cycle, 4 tile loads of 1 KiB = 1 byte loaded per 32 MACs; load costs of amx_blocking.h:
 * 8 cycles from L1, ≈ 23 from L2, ≈ 110 beyond):
 *   blocked  2 A loads from L2 + 2 B loads from L1 + 1 C tile per k-step at kc = 512 (4 stores +
 *            4 loads per 8 k-steps) ≈ 2 × 23 + 2 × 8 + 23 = 85 cycles of loads per 64 of
 *            TDPBSSD: ≈ 75 % of peak at most (the owned blocked regime's model, A and B swapped);
 *            W read from DRAM ⌈M / mc⌉ times, the token blocks (mc × Kp) ⌈N / nc⌉ times from L3
 *   panel    A and B from L2: 4 × 23 ≈ 92–114 cycles per 64: ≈ 56 % (as owned)
 *   decode   W streams once: 32 rows × 64 bytes per k-step per thread, bound by DRAM bandwidth
 * against the per-call packing it replaces (≈ 100 AVX-512 instructions per 1 KiB B tile, each
 * tile used by M/16 TDPBSSD: 15–25 % at M = 256), the in-place path transposes the activations
 * once per call (M × Kp bytes, ≈ 100 instructions per KiB = 16 tokens × 64 k; measured 50–60 ns
 * per KiB on one Zen 5 core; that KiB feeds N/16 TDPBSSD = N cycles at peak (2.7 µs at N = 5376,
 * 2 GHz): ≈ 2 % of the peak GEMM time at N = 5376, ≈ 10 % at N = 1024) and reads W with the same
 * tile traffic as the owned path.
 * Whether owned weights should use it too is for an AMX measurement (bench/NOTES.md).
 * Threads: a static grid, N split first (each thread streams only its share of W), M split
 * only when N has fewer 32-column panels than threads. The partition and the blocking change
 * nothing in the result: int32 sums are exact, so every regime gives the reference's bits.
 *
 * Admission (beside the kernel): qmm_admit_common_int8, then the small-M rule: M below
 * min_m (QMM_AMX_INT8_MIN_M = 8, QMM_AMX_BLOCKING can move it to re-measure) goes to
 * avx512_vnni — a tile op costs as much for 1 row as for 16; an estimate, no AMX machine was
 * available to measure the crossover.
 *
 * Verification: written against the real AMX intrinsics, not yet executed on AMX hardware;
 * the evidence is tests/test_amx_emulated.c, which runs this same source with every tile
 * instruction replaced by the software model of amx_emu.c.
 */
#include "amx_kernel.h"
#include "numerics.h"
#include "prepass.h"
#include "pack_avx512.h"
#include "simd_avx512.h"

#include <stdio.h>
#include <string.h>

const int QMM_AMX_SYM(qmm_amx_int8_min_m) = QMM_AMX_INT8_MIN_M; /* the default (tests) */

static const char *amx_int8_admit(const qmm_call *c, char *why, size_t n) {
    const char *r = qmm_admit_common_int8(c, why, n);
    if (r) return r;
    const int64_t min_m = QMM_AMX_SYM(qmm_amx_blocking_now)().min_m;
    if (c->M < min_m) {
        snprintf(why, n, "M=%lld < %lld: avx512_vnni is faster for tiny M (a tile op costs as much for 1 row as 16)",
                 (long long)c->M, (long long)min_m);
        return why;
    }
    return NULL;
}

#ifdef QMM_AMX_KERNELS

typedef struct {
    const qmm_call *c;
    qmm_amx_blocking bl;
    qmm_amx_regime regime;
    const int8_t *q;   /* decode/panel: row-major [M][Kp]; blocked: the K-blocked tile layout */
    const float *s;    /* [M] */
    int64_t Kp, nblocks, npanels_n, npanels_m;
    int tm, tn;        /* task grid: tm M ranges × tn N ranges */
    int32_t *cbuf;     /* blocked: [threads][mc/32][nc/32][32][32] int32 C partials between K blocks */
    int32_t *stage;    /* [threads][32][32] int32: the C tiles of one block for the epilogue */
    size_t cbuf_ints;  /* per thread */
    int8_t *tbuf;      /* borrowed: [threads][tbuf_rows][64] the K tail of the W rows in use, zero-padded */
    int64_t tbuf_rows; /* 32 (decode, panel) or nc (blocked) */
} int8_job;

/* One 32 × 32 block over nsteps k-steps of 64: A rows at a (row stride lda, k-step s at +64s),
 * B column blocks at b0 and b0 + bstride (k-step s at +1024s). keep != 0: the C tiles hold the
 * partials already (continue); else cin: the C partials to load ([32][32] int32, the stage
 * layout), NULL to start from zero. r1: a second A row block, two: a second B column block.
 * pf_b != 0: prefetch B QMM_AMX_DECODE_PF_STEPS k-steps ahead (decode: B streams from DRAM once;
 * the address runs on into the next column blocks, which come next). pfs: at k-step s, prefetch
 * (T1) lines pfs + l·pfs_ld + s·pfs_step for l < pfs_lines (NULL: none). */
static inline __attribute__((always_inline)) void kblock(const int8_t *a, int64_t lda, const int8_t *b0,
                                                         int64_t bstride, int64_t nsteps, const int32_t *cin,
                                                         int keep, int r1, int two, int pf_b, const char *pfs,
                                                         int64_t pfs_lines, int64_t pfs_ld, int64_t pfs_step) {
    const int8_t *b1 = b0 + bstride;
    if (!keep && cin) {
        QMM_TILE_LOAD(QMM_TC00, cin, 128);
        if (two) QMM_TILE_LOAD(QMM_TC01, cin + 16, 128);
        if (r1) QMM_TILE_LOAD(QMM_TC10, cin + 16 * 32, 128);
        if (r1 && two) QMM_TILE_LOAD(QMM_TC11, cin + 16 * 32 + 16, 128);
    } else if (!keep) {
        QMM_TILE_ZERO(QMM_TC00);
        if (two) QMM_TILE_ZERO(QMM_TC01);
        if (r1) QMM_TILE_ZERO(QMM_TC10);
        if (r1 && two) QMM_TILE_ZERO(QMM_TC11);
    }
    for (int64_t ks = 0; ks < nsteps; ks++) {
        for (int64_t l = 0; l < pfs_lines; l++) _mm_prefetch(pfs + l * pfs_ld + ks * pfs_step, _MM_HINT_T1);
        if (pf_b) {
            const char *p0 = (const char *)(b0 + (ks + QMM_AMX_DECODE_PF_STEPS) * 1024);
            const char *p1 = (const char *)(b1 + (ks + QMM_AMX_DECODE_PF_STEPS) * 1024);
            for (int l = 0; l < 1024; l += 64) {
                _mm_prefetch(p0 + l, _MM_HINT_T1);
                if (two) _mm_prefetch(p1 + l, _MM_HINT_T1);
            }
        }
        QMM_TILE_LOAD(QMM_TA0, a + ks * 64, lda);
        QMM_TILE_LOAD(QMM_TB0, b0 + ks * 1024, 64);
        QMM_TDPBSSD(QMM_TC00, QMM_TA0, QMM_TB0);
        if (two) {
            QMM_TILE_LOAD(QMM_TB1, b1 + ks * 1024, 64);
            QMM_TDPBSSD(QMM_TC01, QMM_TA0, QMM_TB1);
        }
        if (r1) {
            QMM_TILE_LOAD(QMM_TA1, a + 16 * lda + ks * 64, lda);
            QMM_TDPBSSD(QMM_TC10, QMM_TA1, QMM_TB0);
            if (two) QMM_TDPBSSD(QMM_TC11, QMM_TA1, QMM_TB1);
        }
    }
}

/* kblock with its shape flags as compile-time constants (8 specialised copies) */
#define QMM_KBLOCK_ARGS a, lda, b0, bstride, nsteps, cin, keep
#define QMM_KBLOCK_PF pfs, pfs_lines, pfs_ld, pfs_step
static void kblock_any(const int8_t *a, int64_t lda, const int8_t *b0, int64_t bstride, int64_t nsteps,
                       const int32_t *cin, int keep, int r1, int two, int pf_b, const char *pfs,
                       int64_t pfs_lines, int64_t pfs_ld, int64_t pfs_step) {
    if (pf_b) {
        if (r1 && two) kblock(QMM_KBLOCK_ARGS, 1, 1, 1, QMM_KBLOCK_PF);
        else if (r1) kblock(QMM_KBLOCK_ARGS, 1, 0, 1, QMM_KBLOCK_PF);
        else if (two) kblock(QMM_KBLOCK_ARGS, 0, 1, 1, QMM_KBLOCK_PF);
        else kblock(QMM_KBLOCK_ARGS, 0, 0, 1, QMM_KBLOCK_PF);
    } else {
        if (r1 && two) kblock(QMM_KBLOCK_ARGS, 1, 1, 0, QMM_KBLOCK_PF);
        else if (r1) kblock(QMM_KBLOCK_ARGS, 1, 0, 0, QMM_KBLOCK_PF);
        else if (two) kblock(QMM_KBLOCK_ARGS, 0, 1, 0, QMM_KBLOCK_PF);
        else kblock(QMM_KBLOCK_ARGS, 0, 0, 0, QMM_KBLOCK_PF);
    }
}
#undef QMM_KBLOCK_ARGS
#undef QMM_KBLOCK_PF

/* The C tiles → [32][32] int32 at dst (the stage / C-buffer layout). */
static inline void store_c(int32_t *dst, int r1, int two) {
    QMM_TILE_STORE(QMM_TC00, dst, 128);
    if (two) QMM_TILE_STORE(QMM_TC01, dst + 16, 128);
    if (r1) QMM_TILE_STORE(QMM_TC10, dst + 16 * 32, 128);
    if (r1 && two) QMM_TILE_STORE(QMM_TC11, dst + 16 * 32 + 16, 128);
}

/* ---------------------------------------------------------------- the output epilogue */
/* The per-element output epilogue of one block, and the only code that writes y: stage
 * [rows][32] int32 → y rows [m0, m0+rows), columns [n0, n0+cols): qmm_z_epilogue16 (simd_avx512.h:
 * the fused or kitchen epilogue, bias, residual; an i32 output copies the accumulators), the
 * reference's operations. Every regime calls it once per finished 32 × 32 block. */
static void epilogue(const qmm_call *c, const int32_t *stage, int64_t m0, int rows, int64_t n0, int64_t cols,
                     const float *s) {
    for (int r = 0; r < rows; r++)
        for (int64_t j = 0; j < cols; j += 16)
            qmm_z_epilogue16(c, _mm512_loadu_si512(stage + r * 32 + j), m0 + r, n0 + j, s[m0 + r], qmm_z_tail_mask(cols - j));
}

/* ---------------------------------------------------------------- decode and panel regimes */
/* N outer: for each 32-column panel of the task's range, every 32-row panel of its M range
 * over the full K with C in tiles throughout; the panel's 32 × Kp of B (two n16k4 blocks,
 * contiguous) comes from L2 for every row panel — prefetched during the previous column panel
 * (panel), or streamed from DRAM with a prefetch ahead in the k loop (decode: one row panel). */
static void panel_task(int64_t task, int64_t n_tasks, int thread, void *arg) {
    (void)n_tasks;
    int8_job *j = arg;
    const qmm_call *c = j->c;
    const int ti = (int)(task / j->tn), tj = (int)(task % j->tn);
    const int64_t p_lo = j->npanels_n * tj / j->tn, p_hi = j->npanels_n * (tj + 1) / j->tn;
    const int64_t m_lo = j->npanels_m * ti / j->tm, m_hi = j->npanels_m * (ti + 1) / j->tm;
    int32_t *stage = j->stage + (size_t)thread * 32 * 32;
    const int8_t *wdata = c->w->i8.data;
    const int pf_b = j->regime == QMM_AMX_DECODE;
    for (int64_t p = p_lo; p < p_hi; p++) {
        const int64_t nb = 2 * p, n0 = nb * 16, cols = c->N - n0 < 32 ? c->N - n0 : 32;
        const int two = nb + 1 < j->nblocks;
        const int8_t *b0 = wdata + nb * j->Kp * 16;
        /* panel: the next column panel's B (contiguous after this one), prefetched (T1) in equal
         * shares by this panel's row panels, k-step by k-step */
        const int64_t nk = j->Kp / 64, nm = m_hi - m_lo;
        const int64_t pfs_lines = !pf_b && p + 1 < p_hi ? (32 + nm - 1) / nm : 0;
        for (int64_t mp = m_lo; mp < m_hi; mp++) {
            const int64_t m0 = mp * 32;
            const int rows = (int)(c->M - m0 < 32 ? c->M - m0 : 32);
            const int r0 = rows < 16 ? rows : 16, r1 = rows - r0;
            QMM_AMX_SYM(qmm_amx_tiles_config)(r0, r1);
            const char *pfs = pfs_lines ? (const char *)(b0 + 2 * j->Kp * 16) + (mp - m_lo) * nk * pfs_lines * 64 : NULL;
            kblock_any(j->q + m0 * j->Kp, j->Kp, b0, j->Kp * 16, nk, NULL, 0, r1, two, pf_b && mp == m_lo, pfs, pfs_lines,
                       64, pfs_lines * 64);
            store_c(stage, r1, two);
            epilogue(c, stage, m0, rows, n0, cols, j->s);
        }
    }
    QMM_AMX_SYM(qmm_amx_tiles_release)();
}

/* ---------------------------------------------------------------- blocked regime */
/* Prefetches lines [l0, l1) of a B block: nbl column blocks of kw/4 lines each, block i at
 * b + i * bstride (the n16k4 blocks of a K block are bstride apart, each contiguous). */
static inline void prefetch_b(const int8_t *b, int64_t bstride, int64_t kw, int64_t l0, int64_t l1) {
    const int64_t per = kw / 4;
    for (int64_t l = l0; l < l1; l++) _mm_prefetch((const char *)(b + (l / per) * bstride + (l % per) * 64), _MM_HINT_T1);
}

/* nc → mc → kc → m32 → n32 (amx_blocking.h). For each K block, the 32 × kw A panel (packed,
 * contiguous) is read from beyond L1 by the first column panel and from L1 by the others,
 * and the next one is prefetched (T0) meanwhile; the nc × kw B block is read from beyond L2
 * by the first row panel, from L2 by the others, and the next B block is prefetched (T1)
 * spread over the whole block's work. C: tiles within a K block, the thread's C buffer
 * between K blocks, the stage (then the epilogue) after the last. */
static void blocked_task(int64_t task, int64_t n_tasks, int thread, void *arg) {
    (void)n_tasks;
    int8_job *j = arg;
    const qmm_call *c = j->c;
    const int64_t M = c->M, Kp = j->Kp, kc = j->bl.kc, ncp = j->bl.nc / 32, mcp = j->bl.mc / 32;
    const int64_t nkb = (Kp + kc - 1) / kc;
    const int ti = (int)(task / j->tn), tj = (int)(task % j->tn);
    const int64_t p_lo = j->npanels_n * tj / j->tn, p_hi = j->npanels_n * (tj + 1) / j->tn;
    const int64_t m_lo = j->npanels_m * ti / j->tm, m_hi = j->npanels_m * (ti + 1) / j->tm;
    int32_t *stage = j->stage + (size_t)thread * 32 * 32;
    int32_t *cbuf = j->cbuf + (size_t)thread * j->cbuf_ints;
    const int8_t *wdata = c->w->i8.data;
    for (int64_t pc = p_lo; pc < p_hi; pc += ncp) {
        const int64_t pe = pc + ncp < p_hi ? pc + ncp : p_hi;
        const int64_t nb_hi = 2 * pe < j->nblocks ? 2 * pe : j->nblocks;
        for (int64_t mc = m_lo; mc < m_hi; mc += mcp) {
            const int64_t me = mc + mcp < m_hi ? mc + mcp : m_hi;
            for (int64_t kb = 0; kb < nkb; kb++) {
                const int64_t k0 = kb * kc, kw = Kp - k0 < kc ? Kp - k0 : kc;
                const int8_t *ablk = j->q + k0 * M;
                const int8_t *bblk = wdata + 2 * pc * Kp * 16 + k0 * 16;
                const int64_t bstride = Kp * 16; /* between the n16k4 blocks of bblk */
                /* the next B block of this thread: next K block, else K block 0 of the next M
                 * block (same columns), else of the next N block */
                const int64_t kw_next = Kp - k0 - kw < kc ? Kp - k0 - kw : kc; /* of K block kb+1 */
                const int8_t *bnext = NULL;
                int64_t kw_b = 0, nbl_next = 0;
                if (kb + 1 < nkb) {
                    bnext = bblk + kw * 16;
                    kw_b = kw_next;
                    nbl_next = nb_hi - 2 * pc;
                } else if (me < m_hi || pe < p_hi) {
                    const int64_t pn = me < m_hi ? pc : pe;
                    const int64_t pen = pn + ncp < p_hi ? pn + ncp : p_hi;
                    bnext = wdata + 2 * pn * Kp * 16;
                    kw_b = Kp < kc ? Kp : kc;
                    nbl_next = (2 * pen < j->nblocks ? 2 * pen : j->nblocks) - 2 * pn;
                }
                const int64_t pf_lines = bnext ? nbl_next * kw_b / 4 : 0;
                const int64_t iters = (me - mc) * (pe - pc);
                int64_t it = 0;
                for (int64_t mp = mc; mp < me; mp++) {
                    const int64_t m0 = mp * 32;
                    const int rows = (int)(M - m0 < 32 ? M - m0 : 32);
                    const int r0 = rows < 16 ? rows : 16, r1 = rows - r0;
                    QMM_AMX_SYM(qmm_amx_tiles_config)(r0, r1);
                    const int8_t *a = ablk + m0 * kw;
                    /* the next A panel: the next rows of this K block, else the first rows of
                     * this M block in the next K block (none after the last K block) */
                    const int8_t *anext = NULL;
                    int64_t a_pf = 0;
                    if (mp + 1 < me) {
                        anext = a + 32 * kw;
                        a_pf = 32 * kw < (M - m0 - 32) * kw ? 32 * kw : (M - m0 - 32) * kw;
                    } else if (kb + 1 < nkb) {
                        anext = j->q + (k0 + kw) * M + mc * 32 * kw_next;
                        a_pf = 32 * kw_next < (M - mc * 32) * kw_next ? 32 * kw_next : (M - mc * 32) * kw_next;
                    }
                    for (int64_t p = pc; p < pe; p++, it++) {
                        const int64_t nb = 2 * p, n0 = nb * 16, cols = c->N - n0 < 32 ? c->N - n0 : 32;
                        const int two = nb + 1 < j->nblocks;
                        int32_t *cb = cbuf + ((mp - mc) * ncp + (p - pc)) * 1024;
                        /* prefetch: this iteration's share of the next A panel and next B block */
                        const int64_t pi = p - pc, np = pe - pc;
                        for (int64_t o = a_pf * pi / np / 64 * 64; o < a_pf * (pi + 1) / np; o += 64)
                            _mm_prefetch((const char *)(anext + o), _MM_HINT_T0);
                        if (pf_lines)
                            prefetch_b(bnext, Kp * 16, kw_b, pf_lines * it / iters, pf_lines * (it + 1) / iters);
                        kblock_any(a, kw, bblk + (nb - 2 * pc) * bstride, bstride, kw / 64, kb ? cb : NULL, 0, r1, two, 0,
                                   NULL, 0, 0, 0);
                        if (kb + 1 < nkb) {
                            store_c(cb, r1, two);
                        } else {
                            store_c(stage, r1, two);
                            epilogue(c, stage, m0, rows, n0, cols, j->s);
                        }
                    }
                }
            }
        }
    }
    QMM_AMX_SYM(qmm_amx_tiles_release)();
}

/* ---------------------------------------------------------------- borrowed weights, read in place */
/* yᵀ = W·xᵀ (see the header): A = the caller's W rows, B = token blocks, C = [n][tokens].
 * Token blocks: q [M][Kp] → [⌈M/16⌉][Kp/4][16][4] (qmm_z_pack_n16k4: a 16 × 16 dword transpose
 * per 64 bytes of K; tokens past M zero), so the B tile of tokens [16t, 16t+16) at k-step s is
 * the 1 KiB at dst + t·Kp·16 + s·1024. Threaded over token blocks. */
typedef struct {
    const int8_t *q;
    int64_t Kp, M, per_task;
    int8_t *dst;
} tokens_job;

static void tokens_task(int64_t task, int64_t n_tasks, int thread, void *arg) {
    (void)n_tasks;
    (void)thread;
    const tokens_job *j = arg;
    const int64_t nblk = (j->M + 15) / 16, t1 = (task + 1) * j->per_task < nblk ? (task + 1) * j->per_task : nblk;
    for (int64_t t = task * j->per_task; t < t1; t++) {
        const int rows = j->M - t * 16 < 16 ? (int)(j->M - t * 16) : 16;
        qmm_z_pack_n16k4(j->q + t * 16 * j->Kp, j->Kp, rows, 0, j->Kp, j->dst + t * j->Kp * 16, j->Kp / 4);
    }
}

static void token_blocks(qmm_context *ctx, const void *q, int64_t Kp, int64_t M, void *dst) {
    tokens_job j = {q, Kp, M, 0, dst};
    const int64_t nblk = (M + 15) / 16;
    int64_t tasks = (int64_t)ctx->n_threads * 4 < nblk ? (int64_t)ctx->n_threads * 4 : nblk;
    j.per_task = (nblk + tasks - 1) / tasks;
    tasks = (nblk + j.per_task - 1) / j.per_task;
    qmm_pool_run(ctx->pool, tasks, tokens_task, &j);
}

/* The K tail of the caller's rows [n0, n0 + rows) (rows <= 32): bytes [64·⌊K/64⌋, K) of each,
 * K % 64 != 0, → dst [32][64], zero past them: the A operand of the last k-step, read from here
 * so that no tile load reads past a row's K bytes (nor past the caller's last byte). */
static void copy_tail(const qmm_weight *w, int64_t n0, int64_t rows, int64_t K, int8_t *dst) {
    const int64_t k0 = K / 64 * 64;
    memset(dst, 0, 32 * 64);
    for (int64_t r = 0; r < rows; r++) memcpy(dst + r * 64, w->borrow.data + (n0 + r) * w->borrow.ld + k0, (size_t)(K - k0));
}

/* The output epilogue of one in-place block: stage [32 n][32 tokens] int32 (C of yᵀ, row stride
 * 32) → y rows [t0, t0 + tokens) (of the call c, whose scales are s), columns [n0, n0 + cols):
 * each 16 × 16 quarter transposed in registers (the dword transpose of qmm_z_n16k4_step: lane j
 * of out[t] = C[n0 + j][t0 + t]) and stored by qmm_z_epilogue16 row by row of y, as the owned
 * epilogue() does. */
static void epilogue_t(const qmm_call *c, const int32_t *stage, int64_t t0, int tokens, int64_t n0, int64_t cols,
                       const float *s) {
    for (int nh = 0; nh * 16 < cols; nh++) {
        const int nr = cols - nh * 16 < 16 ? (int)(cols - nh * 16) : 16;
        for (int th = 0; th * 16 < tokens; th++) {
            __m512i v[16];
            qmm_z_n16k4_step((const int8_t *)(stage + nh * 16 * 32 + th * 16), 128, nr, 0, 64, v);
            const int nt = tokens - th * 16 < 16 ? tokens - th * 16 : 16;
            for (int t = 0; t < nt; t++) {
                const int64_t r = t0 + th * 16 + t;
                qmm_z_epilogue16(c, v[t], r, n0 + nh * 16, s[r], qmm_z_tail_mask(nr));
            }
        }
    }
}

/* One in-place 32 × 32 block (W rows n0.. as A, tokens of the B tiles at b0, b0 + Kp·16), k-steps
 * [s0, s1) of the call: the whole 64-byte steps straight from the caller's rows, the K tail (step
 * K/64, if in range) from tail. cin / keep as kblock; pfs.. as kblock (the next W rows). */
static void inplace_block(const int8_t *W, int64_t ld, int64_t K, int64_t s0, int64_t s1, const int8_t *tail,
                          const int8_t *b0, int64_t Kp, const int32_t *cin, int r1, int two, const char *pfs,
                          int64_t pfs_lines, int64_t pfs_ld) {
    const int64_t sfull = K / 64 < s1 ? K / 64 : s1, nf = sfull > s0 ? sfull - s0 : 0;
    kblock_any(W + s0 * 64, ld, b0 + s0 * 1024, Kp * 16, nf, cin, 0, r1, two, 0, pfs, pfs_lines, pfs_ld, 64);
    if (K % 64 && K / 64 >= s0 && K / 64 < s1)
        kblock_any(tail, 64, b0 + (K / 64) * 1024, Kp * 16, 1, NULL, 1, r1, two, 0, NULL, 0, 0, 0);
}

/* Decode and panel, in place: N outer — for each 32-row panel of W in the task's range, every
 * 32-token panel of its M range over the full K, C in tiles; the W panel (32 × K, read from DRAM
 * by the first token panel) is re-read from L2 by the others, and the next W panel is prefetched
 * (T1) meanwhile, its rows shared among the token panels, one line per row per k-step. */
static void inplace_panel_task(int64_t task, int64_t n_tasks, int thread, void *arg) {
    (void)n_tasks;
    int8_job *j = arg;
    const qmm_call *c = j->c;
    const qmm_weight *w = c->w;
    const int64_t ld = w->borrow.ld, K = c->K, Kp = j->Kp, nsteps = Kp / 64;
    const int ti = (int)(task / j->tn), tj = (int)(task % j->tn);
    const int64_t p_lo = j->npanels_n * tj / j->tn, p_hi = j->npanels_n * (tj + 1) / j->tn;
    const int64_t m_lo = j->npanels_m * ti / j->tm, m_hi = j->npanels_m * (ti + 1) / j->tm, nm = m_hi - m_lo;
    int32_t *stage = j->stage + (size_t)thread * 32 * 32;
    int8_t *tail = j->tbuf + (size_t)thread * (size_t)j->tbuf_rows * 64;
    for (int64_t p = p_lo; p < p_hi; p++) {
        const int64_t n0 = p * 32, nrows = c->N - n0 < 32 ? c->N - n0 : 32;
        const int r0 = nrows < 16 ? (int)nrows : 16, r1 = (int)nrows - r0;
        if (K % 64) copy_tail(w, n0, nrows, K, tail);
        const int64_t next_rows = p + 1 < p_hi ? (c->N - n0 - 32 < 32 ? c->N - n0 - 32 : 32) : 0;
        QMM_AMX_SYM(qmm_amx_tiles_config)(r0, r1);
        for (int64_t mp = m_lo; mp < m_hi; mp++) {
            const int64_t t0 = mp * 32;
            const int tokens = (int)(c->M - t0 < 32 ? c->M - t0 : 32);
            const int64_t i = mp - m_lo, pr0 = next_rows * i / nm, pr1 = next_rows * (i + 1) / nm;
            const char *pfs = pr1 > pr0 ? (const char *)(w->borrow.data + (n0 + 32 + pr0) * ld) : NULL;
            inplace_block(w->borrow.data + n0 * ld, ld, K, 0, nsteps, tail, j->q + (t0 / 16) * Kp * 16, Kp, NULL, r1,
                          tokens > 16, pfs, pr1 - pr0, ld);
            store_c(stage, r1, tokens > 16);
            epilogue_t(c, stage, t0, tokens, n0, nrows, j->s);
        }
    }
    QMM_AMX_SYM(qmm_amx_tiles_release)();
}

/* Prefetches (T1) lines [l0, l1) of the W block rows [n0, ..) × bytes [k0, k0 + kw): line l is row
 * n0 + l / ⌈kw/64⌉, bytes k0 + (l mod ⌈kw/64⌉)·64; lines at or past K are skipped. */
static void prefetch_w(const qmm_weight *w, int64_t n0, int64_t k0, int64_t kw, int64_t K, int64_t l0, int64_t l1) {
    const int64_t per = (kw + 63) / 64;
    for (int64_t l = l0; l < l1; l++) {
        const int64_t k = k0 + (l % per) * 64;
        if (k < K) _mm_prefetch((const char *)(w->borrow.data + (n0 + l / per) * w->borrow.ld + k), _MM_HINT_T1);
    }
}

/* Blocked, in place: nc → mc → kc → m32 → n32 (amx_blocking.h) over W panels and token panels.
 * For each K block, the 32 × kw token panel (two contiguous kw·16-byte runs of the token blocks)
 * stays in L1 across the nc/32 W panels; the nc × kw block of W rows (read in place: 256 KiB at
 * the defaults) stays in L2 across the mc/32 token panels, and the next one is prefetched (T1)
 * spread over this block's work. C: tiles within a K block, the thread's C buffer between K
 * blocks, the stage (then epilogue_t) after the last. The K tails of the N block's rows are copied
 * once per N block. */
static void inplace_blocked_task(int64_t task, int64_t n_tasks, int thread, void *arg) {
    (void)n_tasks;
    int8_job *j = arg;
    const qmm_call *c = j->c;
    const qmm_weight *w = c->w;
    const int64_t M = c->M, N = c->N, K = c->K, ld = w->borrow.ld, Kp = j->Kp, kc = j->bl.kc;
    const int64_t ncp = j->bl.nc / 32, mcp = j->bl.mc / 32, nkb = (Kp + kc - 1) / kc;
    const int ti = (int)(task / j->tn), tj = (int)(task % j->tn);
    const int64_t p_lo = j->npanels_n * tj / j->tn, p_hi = j->npanels_n * (tj + 1) / j->tn;
    const int64_t m_lo = j->npanels_m * ti / j->tm, m_hi = j->npanels_m * (ti + 1) / j->tm;
    int32_t *stage = j->stage + (size_t)thread * 32 * 32;
    int32_t *cbuf = j->cbuf + (size_t)thread * j->cbuf_ints;
    int8_t *tails = j->tbuf + (size_t)thread * (size_t)j->tbuf_rows * 64;
    for (int64_t pc = p_lo; pc < p_hi; pc += ncp) {
        const int64_t pe = pc + ncp < p_hi ? pc + ncp : p_hi;
        const int64_t blk_rows = (pe * 32 < N ? pe * 32 : N) - pc * 32;
        if (K % 64)
            for (int64_t p = pc; p < pe; p++) copy_tail(w, p * 32, N - p * 32 < 32 ? N - p * 32 : 32, K, tails + (p - pc) * 32 * 64);
        for (int64_t mc = m_lo; mc < m_hi; mc += mcp) {
            const int64_t me = mc + mcp < m_hi ? mc + mcp : m_hi;
            for (int64_t kb = 0; kb < nkb; kb++) {
                const int64_t k0 = kb * kc, kw = Kp - k0 < kc ? Kp - k0 : kc;
                /* the next W block of this thread: next K block, else K block 0 of the next M
                 * block (same rows), else of the next N block */
                int64_t nx_n0 = -1, nx_rows = 0, nx_k0 = 0, nx_kw = 0;
                if (kb + 1 < nkb) {
                    nx_n0 = pc * 32, nx_rows = blk_rows, nx_k0 = k0 + kw, nx_kw = Kp - k0 - kw < kc ? Kp - k0 - kw : kc;
                } else if (me < m_hi || pe < p_hi) {
                    const int64_t pn = me < m_hi ? pc : pe, pen = pn + ncp < p_hi ? pn + ncp : p_hi;
                    nx_n0 = pn * 32, nx_rows = (pen * 32 < N ? pen * 32 : N) - pn * 32, nx_kw = Kp < kc ? Kp : kc;
                }
                const int64_t pf_lines = nx_n0 >= 0 ? nx_rows * ((nx_kw + 63) / 64) : 0;
                const int64_t iters = (me - mc) * (pe - pc);
                int64_t it = 0;
                for (int64_t mp = mc; mp < me; mp++) {
                    const int64_t t0 = mp * 32;
                    const int tokens = (int)(M - t0 < 32 ? M - t0 : 32);
                    const int8_t *b0 = j->q + (t0 / 16) * Kp * 16;
                    for (int64_t p = pc; p < pe; p++, it++) {
                        const int64_t n0 = p * 32, nrows = N - n0 < 32 ? N - n0 : 32;
                        const int r0 = nrows < 16 ? (int)nrows : 16, r1 = (int)nrows - r0;
                        int32_t *cb = cbuf + ((mp - mc) * ncp + (p - pc)) * 1024;
                        if (pf_lines) prefetch_w(w, nx_n0, nx_k0, nx_kw, K, pf_lines * it / iters, pf_lines * (it + 1) / iters);
                        QMM_AMX_SYM(qmm_amx_tiles_config)(r0, r1);
                        inplace_block(w->borrow.data + n0 * ld, ld, K, k0 / 64, (k0 + kw) / 64, tails + (p - pc) * 32 * 64, b0,
                                      Kp, kb ? cb : NULL, r1, tokens > 16, NULL, 0, 0);
                        if (kb + 1 < nkb) {
                            store_c(cb, r1, tokens > 16);
                        } else {
                            store_c(stage, r1, tokens > 16);
                            epilogue_t(c, stage, t0, tokens, n0, nrows, j->s);
                        }
                    }
                }
            }
        }
    }
    QMM_AMX_SYM(qmm_amx_tiles_release)();
}

/* The task grid of one GEMM launch over M rows: N split first (each thread streams only its
 * share of W), then M when N has fewer 32-column panels than threads. */
static void grid(int8_job *j, int64_t M, int nt) {
    j->npanels_m = (M + 31) / 32;
    j->tn = j->npanels_n < nt ? (int)j->npanels_n : nt;
    j->tm = nt / j->tn;
    if (j->tm > j->npanels_m) j->tm = (int)j->npanels_m;
    if (j->tm < 1) j->tm = 1;
}

static qmm_status amx_int8_run(qmm_context *ctx, const qmm_call *c) {
    const qmm_weight *w = c->w;
    const int64_t M = c->M, Kp = w->i8.Kp;
    const int nt = ctx->n_threads;
    const int inplace = w->i8.data == NULL; /* borrowed: W read in place (yᵀ = W·xᵀ) */
    int8_job j;
    memset(&j, 0, sizeof j);
    j.c = c;
    j.bl = QMM_AMX_SYM(qmm_amx_blocking_now)();
    j.Kp = Kp;
    j.nblocks = w->i8.Np / 16;
    j.npanels_n = (j.nblocks + 1) / 2;
    size_t qbytes;
    QMM_RETURN_IF(!qmm_mul_ok((size_t)qmm_round_up(M, 16), (size_t)Kp, &qbytes), QMM_ERR_OUT_OF_MEMORY,
                  "layer %s: M=%lld × Kp=%lld activations too large", w->name, (long long)M, (long long)Kp);
    j.regime = qmm_amx_regime_of(&j.bl, M, M * Kp);
    QMM_AMX_NOTE_REGIME(j.regime);
    void *buf, *ebuf;
    if (j.regime != QMM_AMX_BLOCKED) { /* the pre-pass over all rows, then one launch */
        /* act scratch: [q] [s]; engine scratch: [token blocks (in place)] [stage, tail buffer per thread] */
        const size_t tbytes = inplace ? qbytes : 0;
        j.tbuf_rows = inplace ? 32 : 0;
        QMM_FORWARD_IF_ERROR(qmm_context_scratch(ctx, QMM_SCRATCH_ACT, qbytes + (size_t)M * sizeof(float), &buf));
        QMM_FORWARD_IF_ERROR(qmm_context_scratch(
            ctx, QMM_SCRATCH_ENGINE, tbytes + (size_t)nt * (32 * 32 * sizeof(int32_t) + (size_t)j.tbuf_rows * 64), &ebuf));
        j.s = (const float *)((char *)buf + qbytes);
        QMM_FORWARD_IF_ERROR(qmm_prepass(ctx, c, (int8_t *)buf, Kp, (float *)j.s, 0));
        if (c->token_scales) memcpy(c->token_scales, j.s, (size_t)M * sizeof(float));
        j.q = buf;
        j.stage = (int32_t *)((char *)ebuf + tbytes);
        j.tbuf = (int8_t *)(j.stage + (size_t)nt * 32 * 32);
        if (inplace) {
            token_blocks(ctx, buf, Kp, M, ebuf);
            j.q = ebuf;
        }
        grid(&j, M, nt);
        qmm_pool_run(ctx->pool, (int64_t)j.tm * j.tn, inplace ? inplace_panel_task : panel_task, &j);
        return QMM_OK;
    }
    /* blocked: M blocks of mc rows, each pre-passed (the shared qmm_prepass on those rows),
     * laid out for its kernel (owned: repacked into the K-blocked layout; in place: token blocks)
     * and multiplied by the whole weight before the next, so that the block's activations (mc ×
     * Kp: 2.75 MB at K=5376) are re-read by every N block from the last-level cache rather than
     * DRAM, and the scratch holds one block, not all of them */
    const int64_t mb = M < j.bl.mc ? M : j.bl.mc, nkb = (Kp + j.bl.kc - 1) / j.bl.kc;
    j.cbuf_ints = nkb > 1 ? (size_t)(j.bl.mc / 32) * (size_t)(j.bl.nc / 32) * 1024 : 0;
    j.tbuf_rows = inplace ? j.bl.nc : 0;
    /* act scratch: [q of one M block] [s, all rows]; engine scratch: [the block laid out] [stage,
     * C buffer, tail buffer per thread] */
    const size_t abytes = (size_t)qmm_round_up(qmm_round_up(mb, 16) * Kp, 64);
    QMM_FORWARD_IF_ERROR(qmm_context_scratch(ctx, QMM_SCRATCH_ACT, abytes + (size_t)M * sizeof(float), &buf));
    QMM_FORWARD_IF_ERROR(qmm_context_scratch(
        ctx, QMM_SCRATCH_ENGINE,
        abytes + (size_t)nt * ((32 * 32 + j.cbuf_ints) * sizeof(int32_t) + (size_t)j.tbuf_rows * 64), &ebuf));
    float *s = (float *)((char *)buf + abytes);
    j.q = ebuf;
    j.stage = (int32_t *)((char *)ebuf + abytes);
    j.cbuf = j.stage + (size_t)nt * 32 * 32;
    j.tbuf = (int8_t *)(j.cbuf + (size_t)nt * j.cbuf_ints);
    for (int64_t r0 = 0; r0 < M; r0 += mb) {
        const int64_t rows = M - r0 < mb ? M - r0 : mb;
        const qmm_call sub = QMM_AMX_SYM(qmm_amx_rows)(c, r0, rows);
        QMM_FORWARD_IF_ERROR(qmm_prepass(ctx, &sub, (int8_t *)buf, Kp, s + r0, 0));
        if (inplace) token_blocks(ctx, buf, Kp, rows, ebuf);
        else QMM_AMX_SYM(qmm_amx_pack_a)(ctx, buf, Kp, rows, Kp, j.bl.kc, ebuf);
        j.c = &sub;
        j.s = s + r0;
        grid(&j, rows, nt);
        qmm_pool_run(ctx->pool, (int64_t)j.tm * j.tn, inplace ? inplace_blocked_task : blocked_task, &j);
    }
    if (c->token_scales) memcpy(c->token_scales, s, (size_t)M * sizeof(float));
    return QMM_OK;
}

#else /* built without AMX compiler support */
static qmm_status amx_int8_run(qmm_context *ctx, const qmm_call *c) {
    (void)ctx;
    return qmm_fail(QMM_ERR_UNSUPPORTED_HARDWARE, "layer %s: amx_int8 was not built (compiler lacks AMX)", c->w->name);
}
#endif

const qmm_engine QMM_AMX_SYM(qmm_engine_amx_int8) = {
    .id = QMM_ENGINE_AMX_INT8,
    .name = "amx_int8",
    .kind = QMM_KIND_INT8,
    .isa = QMM_ISA_AMX,
    .cpu_features = QMM_CPU_AVX512F | QMM_CPU_AVX512BW | QMM_CPU_AVX512VL | QMM_CPU_AVX512DQ | QMM_CPU_AMX_TILE |
                    QMM_CPU_AMX_INT8 | QMM_CPU_AMX_PERMITTED, /* its pre-pass and epilogue are AVX-512 */
    .built = QMM_AMX_BUILT,
    .admit = amx_int8_admit,
    .run = amx_int8_run,
};
