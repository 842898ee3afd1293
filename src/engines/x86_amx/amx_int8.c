/*
 * amx_int8.c — the AMX-INT8 engine (QMM_ENGINE_AMX_INT8): y = epilogue(q · Wᵀ) with TDPBSSD
 * (signed × signed: no +128 compensation), SPEC §1, bit-identical to the reference engine
 * (int32 accumulators and float outputs alike).
 *
 *   q, s  = qmm_prepass(x)               q [M][Kp] int8 (row stride Kp), s [M] fp32
 *   W     = w->i8.data, n16k4             block nb, k-step ks (64 k): the 1 KiB B tile at
 *                                          data + nb*Kp*16 + ks*1024, 16 rows × 64 bytes
 *   acc   = Σ over ks of A(m-panel, ks) · B(nb, ks)   in the 2×2 tiles of amx_kernel.h
 *   y     = epilogue(acc): out(((float)acc * s_r) * w_scale[n] + bias[n])  (numerics.h
 *           qmm_epilogue_f), or acc itself for an i32 output — one function, epilogue(), the
 *           only writer of y, called once per finished 32 × 32 block by every regime
 *
 * Regimes (amx_blocking.h; version 2 in bench/NOTES.md "## amx" with each one's prediction):
 *   decode  (M <= 32)            panel_task, B prefetched ahead: one pass over the weights
 *   panel   (M × Kp <= 1.5 MiB)  panel_task: N outer, full K per 32 × 32 block, C in tiles for
 *                                the whole K, each 32 × Kp B panel reused from L2 by all rows
 *   blocked (otherwise)          per M block of mc rows: qmm_prepass on those rows, repacked
 *                                per K block (qmm_amx_pack_a), then blocked_task: nc(512) →
 *                                kc(512) → m32 → n32, C partials in tiles within a K block and
 *                                in a per-thread C buffer between K blocks
 * Borrowed weights (w->borrow: the caller's int8 [N][ld], read at every call): the same kernels on
 * the weights packed per call into the thread's buffer (qmm_z_pack_n16k4, pack_avx512.h), since
 * one n16k4 block is exactly a B tile: decode/panel pack each 32-column panel over the whole K
 * (2 blocks Kp·16 bytes apart, as owned) before its row panels; blocked packs each nc × kc B
 * block (blocks kw·16 bytes apart) before its row panels. TDPBSSD needs no column sums.
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
    int8_t *bbuf;      /* borrowed: [threads][bbuf_bytes] packed B (a panel, or a blocked B block) */
    size_t bbuf_bytes;
} int8_job;

/* Borrowed: blocks [nb0, nb1) of the caller's rows over bytes [k0, k0 + kw) of K (kw a multiple of
 * 64) → dst, blocks kw·16 bytes apart. */
static void pack_b(const qmm_call *c, int64_t nb0, int64_t nb1, int64_t k0, int64_t kw, int8_t *dst) {
    const qmm_weight *w = c->w;
    const int64_t k1 = k0 + kw < c->K ? k0 + kw : c->K;
    for (int64_t nb = nb0; nb < nb1; nb++) {
        const int64_t n0 = nb * 16;
        const int rows = c->N - n0 < 16 ? (int)(c->N - n0) : 16;
        qmm_z_pack_n16k4(w->borrow.data + n0 * w->borrow.ld, w->borrow.ld, rows, k0, k1, dst + (nb - nb0) * kw * 16, kw / 4);
    }
}

/* One 32 × 32 block over nsteps k-steps of 64: A rows at a (row stride lda, k-step s at +64s),
 * B column blocks at b0 and b0 + bstride (k-step s at +1024s). cin: the C partials to continue
 * ([32][32] int32, the stage layout), NULL to start from zero. r1: a second A row block, two: a
 * second B column block. pf_b != 0: prefetch B QMM_AMX_DECODE_PF_STEPS k-steps ahead (decode:
 * B streams from DRAM once; the address runs on into the next column blocks, which come next). */
static inline __attribute__((always_inline)) void kblock(const int8_t *a, int64_t lda, const int8_t *b0,
                                                         int64_t bstride, int64_t nsteps, const int32_t *cin,
                                                         int r1, int two, int pf_b,
                                                         const char *pfs, int64_t pfs_lines) {
    const int8_t *b1 = b0 + bstride;
    if (cin) {
        QMM_TILE_LOAD(QMM_TC00, cin, 128);
        if (two) QMM_TILE_LOAD(QMM_TC01, cin + 16, 128);
        if (r1) QMM_TILE_LOAD(QMM_TC10, cin + 16 * 32, 128);
        if (r1 && two) QMM_TILE_LOAD(QMM_TC11, cin + 16 * 32 + 16, 128);
    } else {
        QMM_TILE_ZERO(QMM_TC00);
        if (two) QMM_TILE_ZERO(QMM_TC01);
        if (r1) QMM_TILE_ZERO(QMM_TC10);
        if (r1 && two) QMM_TILE_ZERO(QMM_TC11);
    }
    for (int64_t ks = 0; ks < nsteps; ks++) {
        for (int64_t l = 0; l < pfs_lines; l++) _mm_prefetch(pfs + (ks * pfs_lines + l) * 64, _MM_HINT_T1);
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

/* kblock with its shape flags as compile-time constants (4 specialised copies) */
static void kblock_any(const int8_t *a, int64_t lda, const int8_t *b0, int64_t bstride, int64_t nsteps,
                       const int32_t *cin, int r1, int two, int pf_b, const char *pfs,
                       int64_t pfs_lines) {
    if (pf_b) {
        if (r1 && two) kblock(a, lda, b0, bstride, nsteps, cin, 1, 1, 1, pfs, pfs_lines);
        else if (r1) kblock(a, lda, b0, bstride, nsteps, cin, 1, 0, 1, pfs, pfs_lines);
        else if (two) kblock(a, lda, b0, bstride, nsteps, cin, 0, 1, 1, pfs, pfs_lines);
        else kblock(a, lda, b0, bstride, nsteps, cin, 0, 0, 1, pfs, pfs_lines);
    } else {
        if (r1 && two) kblock(a, lda, b0, bstride, nsteps, cin, 1, 1, 0, pfs, pfs_lines);
        else if (r1) kblock(a, lda, b0, bstride, nsteps, cin, 1, 0, 0, pfs, pfs_lines);
        else if (two) kblock(a, lda, b0, bstride, nsteps, cin, 0, 1, 0, pfs, pfs_lines);
        else kblock(a, lda, b0, bstride, nsteps, cin, 0, 0, 0, pfs, pfs_lines);
    }
}

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
    const int borrowed = wdata == NULL;
    const int pf_b = j->regime == QMM_AMX_DECODE && !borrowed;
    for (int64_t p = p_lo; p < p_hi; p++) {
        const int64_t nb = 2 * p, n0 = nb * 16, cols = c->N - n0 < 32 ? c->N - n0 : 32;
        const int two = nb + 1 < j->nblocks;
        const int8_t *b0 = wdata + nb * j->Kp * 16;
        if (borrowed) { /* the panel over the whole K, packed now (L2) */
            int8_t *dst = j->bbuf + (size_t)thread * j->bbuf_bytes;
            pack_b(c, nb, nb + 1 + two, 0, j->Kp, dst);
            b0 = dst;
        }
        /* panel: the next column panel's B (contiguous after this one), prefetched (T1) in equal
         * shares by this panel's row panels, k-step by k-step */
        const int64_t nk = j->Kp / 64, nm = m_hi - m_lo;
        const int64_t pfs_lines = !pf_b && !borrowed && p + 1 < p_hi ? (32 + nm - 1) / nm : 0;
        for (int64_t mp = m_lo; mp < m_hi; mp++) {
            const int64_t m0 = mp * 32;
            const int rows = (int)(c->M - m0 < 32 ? c->M - m0 : 32);
            const int r0 = rows < 16 ? rows : 16, r1 = rows - r0;
            QMM_AMX_SYM(qmm_amx_tiles_config)(r0, r1);
            const char *pfs = pfs_lines ? (const char *)(b0 + 2 * j->Kp * 16) + (mp - m_lo) * nk * pfs_lines * 64 : NULL;
            kblock_any(j->q + m0 * j->Kp, j->Kp, b0, j->Kp * 16, nk, NULL, r1, two, pf_b && mp == m_lo, pfs, pfs_lines);
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
    const int borrowed = wdata == NULL;
    for (int64_t pc = p_lo; pc < p_hi; pc += ncp) {
        const int64_t pe = pc + ncp < p_hi ? pc + ncp : p_hi;
        const int64_t nb_hi = 2 * pe < j->nblocks ? 2 * pe : j->nblocks;
        for (int64_t mc = m_lo; mc < m_hi; mc += mcp) {
            const int64_t me = mc + mcp < m_hi ? mc + mcp : m_hi;
            for (int64_t kb = 0; kb < nkb; kb++) {
                const int64_t k0 = kb * kc, kw = Kp - k0 < kc ? Kp - k0 : kc;
                const int8_t *ablk = j->q + k0 * M;
                const int8_t *bblk = wdata + 2 * pc * Kp * 16 + k0 * 16;
                int64_t bstride = Kp * 16; /* between the n16k4 blocks of bblk */
                if (borrowed) {            /* the nc × kw B block, packed now (L2) */
                    int8_t *dst = j->bbuf + (size_t)thread * j->bbuf_bytes;
                    pack_b(c, 2 * pc, nb_hi, k0, kw, dst);
                    bblk = dst;
                    bstride = kw * 16;
                }
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
                const int64_t pf_lines = bnext && !borrowed ? nbl_next * kw_b / 4 : 0;
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
                        kblock_any(a, kw, bblk + (nb - 2 * pc) * bstride, bstride, kw / 64, kb ? cb : NULL, r1, two, 0, NULL, 0);
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
    int8_job j;
    memset(&j, 0, sizeof j);
    j.c = c;
    j.bl = QMM_AMX_SYM(qmm_amx_blocking_now)();
    j.Kp = Kp;
    j.nblocks = w->i8.Np / 16;
    j.npanels_n = (j.nblocks + 1) / 2;
    size_t qbytes;
    QMM_RETURN_IF(!qmm_mul_ok((size_t)M, (size_t)Kp, &qbytes), QMM_ERR_OUT_OF_MEMORY,
                  "layer %s: M=%lld × Kp=%lld activations too large", w->name, (long long)M, (long long)Kp);
    j.regime = qmm_amx_regime_of(&j.bl, M, M * Kp);
    QMM_AMX_NOTE_REGIME(j.regime);
    void *buf, *ebuf;
    if (j.regime != QMM_AMX_BLOCKED) { /* the pre-pass over all rows, then one launch */
        QMM_FORWARD_IF_ERROR(qmm_context_scratch(ctx, QMM_SCRATCH_ACT, qbytes + (size_t)M * sizeof(float), &buf));
        j.bbuf_bytes = w->i8.data ? 0 : (size_t)Kp * 32; /* borrowed: one 2-block panel per thread */
        QMM_FORWARD_IF_ERROR(qmm_context_scratch(ctx, QMM_SCRATCH_ENGINE,
                                                 (size_t)nt * (32 * 32 * sizeof(int32_t) + j.bbuf_bytes), &ebuf));
        j.bbuf = (int8_t *)ebuf + (size_t)nt * 32 * 32 * sizeof(int32_t);
        j.s = (const float *)((char *)buf + qbytes);
        QMM_FORWARD_IF_ERROR(qmm_prepass(ctx, c, (int8_t *)buf, Kp, (float *)j.s, 0));
        if (c->token_scales) memcpy(c->token_scales, j.s, (size_t)M * sizeof(float));
        j.q = buf;
        j.stage = ebuf;
        grid(&j, M, nt);
        qmm_pool_run(ctx->pool, (int64_t)j.tm * j.tn, panel_task, &j);
        return QMM_OK;
    }
    /* blocked: M blocks of mc rows, each pre-passed (the shared qmm_prepass on those rows),
     * repacked into the K-blocked layout and multiplied by the whole weight before the next,
     * so that the block's A (mc × Kp: 2.75 MB at K=5376) is re-read by every N block from the
     * last-level cache rather than DRAM, and the scratch holds one block, not all of A */
    const int64_t mb = M < j.bl.mc ? M : j.bl.mc, nkb = (Kp + j.bl.kc - 1) / j.bl.kc;
    const size_t bbytes = (size_t)(mb * Kp);
    j.cbuf_ints = nkb > 1 ? (size_t)(j.bl.mc / 32) * (size_t)(j.bl.nc / 32) * 1024 : 0;
    /* act scratch: [q of one M block] [s, all rows]; engine scratch: [packed block] [stage,
     * C buffer per thread] */
    const size_t abytes = (size_t)qmm_round_up((int64_t)bbytes, 64);
    /* borrowed: one nc × kc B block per thread */
    j.bbuf_bytes = w->i8.data ? 0 : (size_t)qmm_round_up(j.bl.nc, 32) * (size_t)(j.bl.kc < Kp ? j.bl.kc : Kp);
    QMM_FORWARD_IF_ERROR(qmm_context_scratch(ctx, QMM_SCRATCH_ACT, abytes + (size_t)M * sizeof(float), &buf));
    QMM_FORWARD_IF_ERROR(qmm_context_scratch(
        ctx, QMM_SCRATCH_ENGINE, abytes + (size_t)nt * ((32 * 32 + j.cbuf_ints) * sizeof(int32_t) + j.bbuf_bytes), &ebuf));
    float *s = (float *)((char *)buf + abytes);
    j.q = ebuf;
    j.stage = (int32_t *)((char *)ebuf + abytes);
    j.cbuf = j.stage + (size_t)nt * 32 * 32;
    j.bbuf = (int8_t *)(j.cbuf + (size_t)nt * j.cbuf_ints);
    for (int64_t r0 = 0; r0 < M; r0 += mb) {
        const int64_t rows = M - r0 < mb ? M - r0 : mb;
        const qmm_call sub = QMM_AMX_SYM(qmm_amx_rows)(c, r0, rows);
        QMM_FORWARD_IF_ERROR(qmm_prepass(ctx, &sub, (int8_t *)buf, Kp, s + r0, 0));
        QMM_AMX_SYM(qmm_amx_pack_a)(ctx, buf, Kp, rows, Kp, j.bl.kc, ebuf);
        j.c = &sub;
        j.s = s + r0;
        grid(&j, rows, nt);
        qmm_pool_run(ctx->pool, (int64_t)j.tm * j.tn, blocked_task, &j);
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
