/*
 * int8_gemm.h — the int8 GEMM driver the int8 engines plug their micro-kernels into (the
 * counterpart of the float engines' qmm_float_gemm, float_gemm.h). Plain C11: the ISA-specific
 * parts are the engine's callbacks.
 *
 * What the driver owns, for one call y = epilogue(q · Wᵀ):
 *   pre-pass   one qmm_prepass_to (prepass.h: one pool run over the rows) writes the operand the
 *              kernels read, a [M][Kp] (padded with the value of q = 0), and s [M] fp32 in
 *              QMM_SCRATCH_ACT: for u8 engines (VPDPBUSD: u8 × s8) a = q + 128 (q XOR 0x80) and
 *              the engine's epilogue subtracts 128·colsum[n] (exact mod 2^32) — except in the rows
 *              regime (below), where a = q and the pre-pass adds each row's Σq and -128 flag;
 *              in the one-pass regime it also writes the packed copy ap;
 *   blocking   tasks = (mc rows) × (nc columns) of the output, a static partition on the pool
 *              (task i on thread i % n); inside a task, for each K chunk of kc bytes (all of K
 *              when M <= whole_k_m: each weight block is then streamed once, whole), for each
 *              panel of nrb 16-column blocks, for each row tile of mr rows: the engine's tile()
 *              adds the tile's int32 sums into the task's partials (a per-thread mc × nc block in
 *              QMM_SCRATCH_ENGINE) and, on the last chunk, writes its outputs (the engine's
 *              epilogue of its vector width: qmm_z_epilogue16 / qmm_y_epilogue8, epilogue.h's
 *              qmm_epilogue_store_ref for tails). Every output is summed by one task in one fixed
 *              k order: the bits never depend on the thread count or the blocking;
 *   prefetch   each tile is told its software prefetch (qmm_i8_tile.pf_mode, rows_pf) and does
 *              that, no other: whole-K row tiles of one panel share a prefetch of the panel this
 *              thread runs next (NEXT: the lines from pf on, pf_step bytes per quad, into L2); a
 *              single whole-K row tile of more than 64 quads streams (STREAM: the engine may
 *              prefetch ahead in the tile's own weight stream); otherwise NONE (K chunks: the panel
 *              is in L1/L2 already; borrowed weights: the panel was just packed). A borrowed
 *              weight's int8 rows, besides: each row tile gets its share of the caller's rows of
 *              the panel the thread packs next (rows_pf: that panel's lines split evenly over the
 *              row tiles), which the engine may fetch into cache while the tile runs, so that the
 *              pack reads cache (amx_int8, avx512_vnni; the 256-bit engines leave it);
 *   one pass   optional, for small M: the engine's one_pass() runs groups of its width in blocks
 *              with all rows in one register tile, from a copy of the rows packed [kq][wrows][4]
 *              (ap, written by the pre-pass, rows past M padded with the value of q = 0); a task's
 *              blocks from the first group that would run past the weight's last block take the
 *              row tiles;
 *   weights    the driver hands every tile its weight panel (t->b, ldb, colsum): an owned weight's
 *              n16k4 packing in place (blocks Kp·16 bytes apart, colsum from the weight); a
 *              borrowed weight's rows (the caller's [N][ld] int8, w->borrow) packed per call, per
 *              panel and K chunk, into the thread's n16k4 panel buffer (blocks nq·64 bytes
 *              apart) by the engine's pack() (panel.h, the float driver's panels too) — the u8 column sums and a -128 flag computed while
 *              packing — and run by the same micro-kernels from L1/L2. Each (task, chunk, panel)
 *              is packed once and serves every row tile of the task; for M <= rows_m the
 *              engine's rows kernel for M (rows_kernels) reads the caller's rows directly instead (small M, the rows
 *              regime: a left as q, its row sums in qsum, and where the engine asks for one
 *              (rows_ap_bytes) its own copy of q in the layout its kernel reads, ap, written by
 *              the engine's rows_ap_fill inside the pre-pass's pool run). A W4A8 weight in the
 *              rows regime: the engine's fused W4A8 kernel for M (w4a8) on the caller's codes,
 *              else a few whole rows at a time decoded into the thread's buffer and handed to the
 *              rows kernel as rows (the buffer and its stride Kp);
 *   out        token scales copied to c->token_scales when asked.
 * Every callback of an engine is handed its operands by name (the kernel families below); the
 * driver's per-call state is private to int8_gemm.c.
 * A new int8 engine is its micro-kernel(s) (declared by name in ukernels.h), a qmm_i8_engine
 * descriptor (the desc of its qmm_engine_ops linear row, or one per call class from the row's
 * finalize; test_int8_ukernels drives the kernels through it), its admit() and one row of the
 * engine table.
 */
#ifndef QMM_INT8_GEMM_H
#define QMM_INT8_GEMM_H

#include "epilogue.h"
#include "panel.h"
#include "qmm_internal.h"
#include "w4a8.h"

enum { QMM_I8_PF_NONE = 0, QMM_I8_PF_NEXT = 1, QMM_I8_PF_STREAM = 2 };

/* Lines [l0, l1) of a set of rows: line l at base + (l / per_row)·ld + (l mod per_row)·64 (the
 * caller's rows of one panel: per_row = the chunk's K bytes in 64-byte lines, rows ld bytes
 * apart); base NULL: none. */
typedef struct qmm_i8_rows_pf {
    const int8_t *base;
    int64_t ld, per_row, l0, l1;
} qmm_i8_rows_pf;

/* One tile of work: rows [r, r + mr) × 16-column blocks [n/16, n/16 + nr) over the k quads of
 * one chunk (its activations: the tile family's a, lda, s). */
typedef struct qmm_i8_tile {
    const int8_t *b;       /* the first block at the chunk's first quad; blocks ldb bytes apart */
    int64_t ldb;           /* bytes between blocks (64-byte multiple; b 64-byte aligned) */
    const int32_t *colsum; /* Σ_k W[n][k] of columns t.n.. (full K; read on the last chunk) */
    int neg128;            /* some weight of this panel and chunk is -128 (borrowed weights) */
    int64_t nq;            /* quads (4 k each) in the chunk */
    int32_t *part;         /* the tile's sums: row i, block jb at part[i·nc + jb·16] (the engine's nc);
                            * an engine with c_tiles: the tile's own mr × 16·nrb int32 in 16 × 16
                            * tiles (c_tiles) */
    int mr, nr;            /* rows (<= engine mr; one pass: M), blocks (<= engine nrb) */
    int first, last;       /* first chunk: store instead of add; last chunk: write the outputs */
    int64_t r, n;          /* output row and column of part[0] */
    int pf_mode;           /* QMM_I8_PF_*: the tile prefetches as told (and rows_pf), nothing else */
    const int8_t *pf;      /* PF_NEXT: this tile's share of the next panel (nq·pf_step bytes) */
    int64_t pf_step;       /* PF_NEXT: bytes of it per quad (<= 128: two lines per quad cover it) */
    /* A borrowed weight's int8 rows: this row tile's share of the caller's rows (w->borrow) of
     * the panel this thread packs next in its task (the task's next panel of this chunk, else its
     * first panel of the next chunk; base NULL after the task's last panel, for W4A8 codes and
     * for owned weights). The driver splits the panel's lines evenly over its row tiles; the
     * tile may fetch its lines into cache while it runs, so that the pack reads them there. */
    qmm_i8_rows_pf rows_pf;
    /* Phase timers on (qmm_profile): the running thread's epilogue sum (QMM_PROF_EPILOGUE), to
     * which an engine adds the time of its output stores; NULL when off. */
    uint64_t *epilogue_ns;
} qmm_i8_tile;

/* The rows regime's activations, as every rows kernel (the int8 and the W4A8 family) reads them:
 * the driver's pre-pass output left as q (s8, never flipped) with its row sums. */
typedef struct qmm_rows_act {
    const int8_t *q;          /* [M][lda]: q, zero past K up to lda */
    int64_t lda;              /* bytes between rows of q: Kp, a multiple of 64 */
    int64_t M, K;             /* tokens; k of q and of every weight row */
    const int32_t *qsum;      /* [M] Σ_k q[i][k] */
    const uint8_t *qneg128;   /* [M] 1 where row i of q holds -128 */
    const uint8_t *ap;        /* the engine's own copy of q in its kernels' layout (rows_ap_fill), or NULL */
    const float *s;           /* [M] token scales (the epilogue's s_r) */
} qmm_rows_act;

/* The kernel families of the int8 driver, one signature each (the kernels by name: ukernels.h).
 * Each writes its outputs through the epilogue of call `out` (epilogue.h: out's y, dtype,
 * epilogue, residual, N, and its weight's scale and bias: nothing else of out is read, except
 * where a family says so) and reports an impossible case with qmm_call_bug(out, ..). The rows
 * families write outputs y[i][n] for tokens i < a->M and columns n in [n0, n1) (n0 a multiple of
 * 16, n1 <= out->N).
 *   tile       rows [t->r, t->r + t->mr) × blocks [t->n/16, t->n/16 + t->nr) over the chunk's
 *              quads (qmm_i8_tile): a: the operand (u8 q + 128, or s8 q: the engine's u8) of row
 *              t->r at the chunk's first quad, rows lda (= Kp) bytes apart; s: the tile's token
 *              scales (row t->r + i: s[i]); the sums into t->part and, on the last chunk, the
 *              outputs of columns < out->N. An engine that prefetches a borrowed weight's rows
 *              reads out->w (borrow, w4a8) for them;
 *   one pass   all of a call's t->mr = M rows (t->r = 0) in one register tile of wrows rows
 *              (one_pass_rows) over all of K (t->nq = kq quads, first and last chunk at once): ap
 *              the rows packed [kq][wrows][4] as the tile's operand (rows past M padded with the
 *              value of q = 0); the engine's width in blocks (one_pass_rows: every one of them
 *              inside the weight's panel t->b) summed into t->part, the outputs of its first t->nr
 *              blocks written (columns < out->N); s: the token scales [M] (as a tile's);
 *   rows       the rows regime (below, qmm_i8_engine.rows_kernels), int8 weight rows: column n
 *              from row w + (n − n0)·ldw (K bytes, any alignment), all M tokens at once; each
 *              kernel is for a range of M;
 *   w4 rows    the rows regime of a W4A8 / W6A8 weight, fused (qmm_w4_rows_kernels): column n
 *              from row n of the codes w (w4a8.h qmm_w4_codes: codes, row stride, bits, group and
 *              group scales), each code looked up in the call's decode table (lut: s8 values, the
 *              table of w4a8.h; lut_u8: the same values + 128 as u8, for u8 × s8 kernels) and
 *              multiplied as it is looked up; buf: buf_bytes (>= 16·a->lda, 64-byte aligned) of
 *              the running thread's own memory, where a kernel may keep rows it looked up. */
typedef void (*qmm_i8_tile_fn)(const uint8_t *a, int64_t lda, const float *s, const qmm_call *out,
                               const qmm_i8_tile *t);
typedef void (*qmm_i8_onepass_fn)(const uint8_t *ap, int wrows, const float *s, const qmm_call *out,
                                  const qmm_i8_tile *t);
typedef void (*qmm_i8_rows_fn)(const int8_t *w, int64_t ldw, const qmm_rows_act *a, const qmm_call *out, int64_t n0,
                               int64_t n1);
typedef void (*qmm_w4_rows_fn)(const qmm_w4_codes *w, const int8_t *lut, const int8_t *lut_u8, const qmm_rows_act *a,
                               const qmm_call *out, int64_t n0, int64_t n1, int8_t *buf, int64_t buf_bytes);

/* A rows kernel of an engine, by name, and the M it runs: m_min <= M <= m_max. */
typedef struct qmm_i8_rows_ukernel {
    const char *name;
    qmm_i8_rows_fn fn;
    int m_min, m_max;
} qmm_i8_rows_ukernel;

/* A W4A8 rows kernel, by name, the M and the bit widths it runs (QMM_W4_BITS4 | QMM_W4_BITS6), and
 * whether it needs AVX512-VBMI (run only where qmm_w4a8_vbmi says so). */
enum { QMM_W4_BITS4 = 1, QMM_W4_BITS6 = 2 };
typedef struct qmm_w4_rows_ukernel {
    const char *name;
    qmm_w4_rows_fn fn;
    int m_min, m_max;
    int bits;
    int vbmi;
} qmm_w4_rows_ukernel;

/* An engine's W4A8 family: its fused rows kernels, in the order they are picked
 * (qmm_i8_w4a8_kernel_for: the first that runs the call), and optionally the token copy they
 * read when it differs from the engine's rows kernels' (ap_fill: rows_ap_fill's signature and
 * bytes, rows_ap_bytes; NULL: rows_ap_fill's copy). */
typedef struct qmm_w4_rows_kernels {
    const qmm_w4_rows_ukernel *k;
    int n;
    void (*ap_fill)(const int8_t *q, int64_t lda, uint8_t *ap, int64_t r0, int64_t r1);
} qmm_w4_rows_kernels;

typedef struct qmm_i8_engine {
    int u8;                /* A = q + 128 */
    int mr, nrb;           /* the micro-tile: up to mr rows × nrb 16-column blocks */
    int mc, nc, kc;        /* rows and columns per task (nc a multiple of 16·nrb), K chunk in bytes (of 64) */
    int whole_k_m;         /* up to this M: no K chunks */
    qmm_i8_tile_fn tile;
    /* Optional one-pass regime: one_pass_rows(M, &blocks) = rows of its register tile (0: not for
     * this M) and, in blocks, the tile's width in 16-column blocks; one_pass runs one such tile
     * (the family above). */
    int (*one_pass_rows)(int64_t M, int *blocks);
    qmm_i8_onepass_fn one_pass;
    qmm_pack_n16k4_fn pack; /* borrowed weights' panel packing (panel.h; NULL: qmm_pack_n16k4_ref) */
    int pack_bare;         /* pack writes the n16k4 bytes only, leaving cs and neg128 alone (an s8
                            * engine exact on -128 that reads no column sums: amx_int8) */
    /* Optional, borrowed weights with M <= rows_m (the rows regime): the engine's rows kernels,
     * n_rows_kernels of them, one for each M in 1..rows_m (qmm_i8_rows_kernel_for: the first whose
     * range holds M); the kernel computes the outputs of a range of columns straight from the
     * caller's rows (w->borrow: each row read once, front to back, all M rows of A against it) and
     * writes them; no panel packing. In this regime the driver leaves a = q (s8, zero past K, also
     * for u8 engines) and fills the row sums (Σ_k q per row) and -128 flags (a row holds -128):
     * the kernels' qmm_rows_act. The regime where the weights stream from memory once. */
    int rows_m;
    const qmm_i8_rows_ukernel *rows_kernels;
    int n_rows_kernels;
    qmm_thread_hook_fn begin, end; /* optional per-thread hooks (qmm_internal.h) */
    int k64;               /* tile() steps 64 bytes of K: kq = Kp/4, so every chunk is whole 64-byte
                            * steps (q, the owned packing and a borrowed panel are zero past K),
                            * and the chunks are even: nch = the k-steps ÷ kc/64 rounded to nearest
                            * (>= 1), each chunk ⌊or⌈k-steps/nch⌉ k-steps, the longer ones first
                            * (max − min <= 1 k-step, none over 1.5·kc; int8_gemm.c chunk_nq) */
    int mc_fixed;          /* borrowed weights keep mc rows per task (no 4·mc: partials sized for L2) */
    int c_tiles;           /* the partials tile-contiguous: each (panel, row tile) of a task owns
                            * mr × 16·nrb consecutive int32 of the thread's mc × nc buffer, the row
                            * tiles of one panel adjacent (the order the tiles run in); inside it
                            * 16 × 16 int32 tiles of 1 KiB, row i and column j of the tile at
                            * ((i/16)·nr + j/16)·256 + (i%16)·16 + j%16 (amx_int8: one TILESTORED each) */
    /* Optional, the rows regime: rows_ap_bytes(M, Kp) = the bytes of a copy of the activations
     * in the layout its rows kernels want (0: none), in groups of 16 rows (a full group
     * rows_ap_bytes(16, Kp) bytes); rows_ap_fill(q, lda, ap, r0, r1) writes the groups of rows
     * [r0, r1) (r0 a multiple of 16, r1 too or M) to ap (the copy's start, 64-byte aligned) from
     * q [M][lda] (lda = Kp). The driver calls it per group from the pre-pass's pool run (prepass.h
     * group_fill), on the thread that has just written the group's last rows, before any rows
     * kernel. */
    int64_t (*rows_ap_bytes)(int64_t M, int64_t Kp);
    void (*rows_ap_fill)(const int8_t *q, int64_t lda, uint8_t *ap, int64_t r0, int64_t r1);
    /* Optional, the rows regime of a W4A8 weight (w4a8.h) with e4m3 s_rel and groups of a
     * multiple of 16: the engine's fused kernels (the W4A8 family above), each computing and
     * writing columns as a rows kernel does. For an M none of them runs, the driver decodes a few
     * whole rows at a time into a buffer and hands them to the rows kernels as rows. */
    const qmm_w4_rows_kernels *w4a8;
} qmm_i8_engine;

/* Where the driver decodes a borrowed W4A8 weight w for a call of M rows on engine e (NULL: none;
 * qmm_plan's words): the n16k4 panels, the rows regime's per-thread rows, or the fused rows kernel. */
const char *qmm_i8_w4a8_site(const qmm_i8_engine *e, const qmm_weight *w, int64_t M);

/* The rows kernel of engine e for M tokens (1 <= M <= e->rows_m): the first of e->rows_kernels
 * whose range holds M; NULL if none does. */
qmm_i8_rows_fn qmm_i8_rows_kernel_for(const qmm_i8_engine *e, int64_t M);

/* The fused W4A8 rows kernel of engine e for M tokens of a weight of `bits` bits: the first of
 * e->w4a8 whose range holds M, that runs those bits, and that needs no VBMI unless vbmi; NULL if
 * none does. */
const qmm_w4_rows_ukernel *qmm_i8_w4a8_kernel_for(const qmm_i8_engine *e, int64_t M, int bits, int vbmi);

/* The int8 driver's descriptor of engine id (the desc of its linear row, qmm_op_row); NULL if it
 * has none (amx_int8: one per call class, from its row's finalize). */
const qmm_i8_engine *qmm_i8_engine_of(qmm_engine_id id);

/* The whole call on engine e (pre-pass, GEMM with the engine's tiles and epilogue, token
 * scales). */
qmm_status qmm_int8_gemm(qmm_context *ctx, const qmm_call *c, const qmm_i8_engine *e);

#endif /* QMM_INT8_GEMM_H */
