/*
 * int8_gemm.c — the int8 GEMM driver (contract in int8_gemm.h): the pre-pass asked for the
 * engine's operand (u8 or s8, the one-pass row copy, the rows regime's row sums), the task grid,
 * K chunks, the prefetch schedule, the weight panels (panel.h: owned in place, borrowed packed per call),
 * token scales; the engines' descriptors for the unit tests (qmm_i8_engine_of); qmm_cancel polled
 * between a task's panels (and the W4A8 rows regime's decoded rows). With the phase
 * timers on (qmm_profile) it times the pre-pass and the GEMM run on the calling thread and, per
 * thread, its tasks, the panels it packs and the kernels it runs.
 */
#include "int8_gemm.h"

#include "prepass.h"

#include <string.h>

/* One call's state: the driver's own, never handed to an engine. */
typedef struct qmm_i8_gemm {
    const qmm_call *c;
    const qmm_i8_engine *e;
    uint8_t *a;            /* [M][Kp]: q, or q + 128 */
    const float *s;        /* [M] token scales */
    int32_t *part;         /* [threads][mc·nc] */
    int64_t Kp, kq, kcq;   /* padded K; quads of K; quads per chunk (even chunks: the longest) */
    int64_t kc_long;       /* even chunks (k64): quads before which chunks are kcq long, kcq - 16 after */
    int64_t mtasks, ntasks, nthreads, rows_per_task;
    int64_t mc;            /* rows per task (part: [threads][mc·nc]) */
    uint8_t *ap;           /* one-pass regime: [kq][wrows][4]; rows regime: the engine's rows_ap copy; else NULL */
    int wrows, wblocks;    /* one-pass regime: the register tile's rows and blocks (one_pass_rows) */
    int borrowed;          /* the weight is the caller's rows (w->borrow), packed per panel */
    int rows;              /* the rows regime (borrowed, M <= e->rows_m): a is q (never flipped) */
    qmm_i8_rows_fn rows_fn; /* the rows regime: the engine's kernel for M (qmm_i8_rows_kernel_for) */
    qmm_rows_act act;      /* the rows regime: the activations its kernels read */
    qmm_panel_source src;  /* the weight's panels (panel.h) */
    int8_t *panels;        /* borrowed: [threads][panel_bytes] panel buffers (a W4A8 weight's rows
                              regime: its decoded rows, or a fused kernel's buf) */
    int32_t *colsums;      /* borrowed: [threads][nc] column sums of the thread's task */
    int64_t panel_bytes;
    const int8_t *w4_lut;  /* a W4A8 weight with e4m3 s_rel: the call's decode table (w4a8.h), else NULL */
    const qmm_w4_rows_ukernel *w4_fused; /* a W4A8 weight's rows regime, fused: the kernel for M, or NULL */
    qmm_w4_codes w4;       /* with w4_fused: the weight's codes */
    const int8_t *w4_lut_u8; /* with w4_fused: the table's values as u8 (v ^ 0x80 = v + 128) */
    qmm_prof_slot *prof;   /* phase timers on: the context's [threads] slots (qmm_profile), else NULL */
    const qmm_cancel_word *cancel; /* the context's: a task stops between panels once set */
} qmm_i8_gemm;

/* The length in quads of the K chunk that starts at quad q0 (< g->kq). */
static inline int64_t chunk_nq(const qmm_i8_gemm *g, int64_t q0) {
    const int64_t n = g->e->k64 && q0 >= g->kc_long ? g->kcq - 16 : g->kcq;
    return g->kq - q0 < n ? g->kq - q0 : n;
}

const qmm_i8_engine *qmm_i8_engine_of(qmm_engine_id id) {
    const qmm_engine *e = qmm_engine_get(id);
    return e && e->kind == QMM_KIND_INT8 ? e->ops->op[QMM_OP_LINEAR].desc : NULL;
}

static qmm_i8_rows_fn kernel_for(const qmm_i8_rows_ukernel *k, int n, int64_t M) {
    for (int i = 0; i < n; i++)
        if (M >= k[i].m_min && M <= k[i].m_max) return k[i].fn;
    return NULL;
}

qmm_i8_rows_fn qmm_i8_rows_kernel_for(const qmm_i8_engine *e, int64_t M) {
    return kernel_for(e->rows_kernels, e->n_rows_kernels, M);
}

const qmm_w4_rows_ukernel *qmm_i8_w4a8_kernel_for(const qmm_i8_engine *e, int64_t M, int bits, int vbmi) {
    const int mask = bits == 6 ? QMM_W4_BITS6 : QMM_W4_BITS4;
    for (int i = 0; e->w4a8 && i < e->w4a8->n; i++) {
        const qmm_w4_rows_ukernel *k = &e->w4a8->k[i];
        if (M >= k->m_min && M <= k->m_max && (k->bits & mask) && (vbmi || !k->vbmi)) return k;
    }
    return NULL;
}

/* The weights of blocks [nb, nb + nr) over quads [q0, q0 + nq) for thread `thread`: qmm_panel_get
 * (panel.h) of g->src into the thread's panel buffer (nr·nq·64 <= panel_bytes), the chunk's
 * column sums added into cs[0 .. nr·16) (stored when first). Fills t->b, t->ldb, t->colsum
 * (cs, or the weight's), t->neg128. */
static void get_panel(const qmm_i8_gemm *g, int thread, int64_t nb, int nr, int64_t q0, int64_t nq, int32_t *cs,
                      int first, qmm_i8_tile *t) {
    qmm_panel p;
    qmm_panel_get(&g->src, nb, nr, q0, nq, g->panels + (int64_t)thread * g->panel_bytes, cs, first, &p);
    t->b = p.b;
    t->ldb = p.ldb;
    t->colsum = p.colsum;
    t->neg128 = p.neg128;
}

/* A W4A8 weight's rows regime on engine e runs fused: the engine's W4A8 kernel for M and the
 * weight's bits (with vbmi: one that needs VBMI, where the engine has it), with e4m3 s_rel (the
 * table) and groups of a multiple of 16 (NULL: unfused). */
static const qmm_w4_rows_ukernel *w4a8_fused(const qmm_i8_engine *e, const qmm_weight *w, int64_t M, int vbmi) {
    return w->w4.s_rel_dtype == QMM_F8_E4M3 && w->w4.group % 16 == 0
               ? qmm_i8_w4a8_kernel_for(e, M, w->w4.bits, vbmi)
               : NULL;
}

const char *qmm_i8_w4a8_site(const qmm_i8_engine *e, const qmm_weight *w, int64_t M) {
    if (!e || M > e->rows_m || !qmm_i8_rows_kernel_for(e, M)) return "the int8 engine's n16k4 panels";
    const qmm_w4_rows_ukernel *k = w4a8_fused(e, w, M, 0);
    if (!k) return "the int8 engine's rows regime (a few whole rows per thread)";
    /* a kernel whose range starts past one group of 16 tokens keeps its rows for the later groups */
    return k->m_min > 16 ? "the int8 engine's fused rows kernel (multiplied as looked up; kept for the later token "
                           "groups)"
                         : "the int8 engine's fused rows kernel (multiplied, never stored)";
}

/* Columns [n0, n1) of the rows regime: the caller's int8 rows from row n0 (w->borrow) */
static void int8_rows(const qmm_i8_gemm *g, int64_t n0, int64_t n1) {
    const qmm_weight *w = g->c->w;
    if (n0 < n1) g->rows_fn(w->borrow.data + n0 * w->borrow.ld, w->borrow.ld, &g->act, g->c, n0, n1);
}

/* Columns [n0, n1) of the rows regime of a W4A8 weight: the fused kernel on the caller's codes
 * (the thread's buffer, g->panel_bytes, its own), else a few rows at a time (that many rows of Kp
 * bytes, a multiple of 16) decoded into the thread's buffer (row-major, Kp bytes apart, the rows'
 * codes read once) and handed to the engine's rows kernel (g->rows_fn) as rows. */
static void w4a8_rows(const qmm_i8_gemm *g, int thread, int64_t n0, int64_t n1) {
    const qmm_call *c = g->c;
    int8_t *buf = g->panels + (int64_t)thread * g->panel_bytes;
    if (n0 >= n1) return;
    if (g->w4_fused) {
        g->w4_fused->fn(&g->w4, g->w4_lut, g->w4_lut_u8, &g->act, c, n0, n1, buf, g->panel_bytes);
        return;
    }
    const int64_t step = g->panel_bytes / g->Kp; /* rows per buffer */
    for (int64_t n = n0; n < n1 && !qmm_cancel_requested(g->cancel); n += step) {
        const int64_t ne = n + step < n1 ? n + step : n1;
        g->src.w4_decode(c->w, g->w4_lut, n, ne - n, 0, c->K, buf, g->Kp);
        g->rows_fn(buf, g->Kp, &g->act, c, n, ne);
    }
}

/* the time from t0 added to a thread's slot entry (phase timers on) */
static inline uint64_t prof_add(uint64_t *ns, uint64_t t0) {
    const uint64_t t = qmm_now_ns();
    *ns += t - t0;
    return t;
}

/* The caller's rows (w->borrow) of the borrowed int8 panel of the e->nrb blocks from nb (not past
 * block b1) over quads [q0, q0 + nq): rows [16·nb, N), bytes [4·q0, K) of each, clipped; as
 * lines [0, all of them) (qmm_i8_rows_pf; base NULL if none). */
static qmm_i8_rows_pf panel_rows(const qmm_i8_gemm *g, int64_t nb, int64_t b1, int64_t q0, int64_t nq) {
    const qmm_call *c = g->c;
    const int64_t nr = b1 - nb < g->e->nrb ? b1 - nb : g->e->nrb;
    const int64_t n0 = nb * 16, n1 = (nb + nr) * 16 < c->N ? (nb + nr) * 16 : c->N;
    const int64_t k0 = q0 * 4, k1 = (q0 + nq) * 4 < c->K ? (q0 + nq) * 4 : c->K;
    qmm_i8_rows_pf p = {NULL, 0, 1, 0, 0};
    if (n0 >= n1 || k0 >= k1) return p;
    p.ld = c->w->borrow.ld;
    p.base = c->w->borrow.data + n0 * p.ld + k0;
    p.per_row = (k1 - k0 + 63) / 64;
    p.l1 = (n1 - n0) * p.per_row;
    return p;
}

static void gemm_task_run(int64_t task, int64_t n_tasks, int thread, const qmm_i8_gemm *g, qmm_prof_slot *pf) {
    const qmm_i8_engine *e = g->e;
    const qmm_call *c = g->c;
    const int8_t *wdata = c->w->i8.data;
    const int64_t blk = g->Kp * 16; /* bytes of one 16-column block over all of K */
    const int64_t mt = task / g->ntasks, nt = task % g->ntasks;
    const int64_t m0 = mt * g->rows_per_task, m1 = m0 + g->rows_per_task < c->M ? m0 + g->rows_per_task : c->M;
    const int64_t nblocks = c->w->i8.Np / 16, bpt = e->nc / 16;
    int64_t b0 = nt * bpt;
    const int64_t b1 = b0 + bpt < nblocks ? b0 + bpt : nblocks;
    int32_t *part = g->part + (int64_t)thread * g->mc * e->nc;
    int32_t *cs = g->borrowed ? g->colsums + (int64_t)thread * e->nc : NULL; /* the task's columns */
    uint64_t t0 = pf ? qmm_now_ns() : 0;
    if (g->rows && c->w->w4a8) { /* one task per thread, each an equal share of the blocks */
        const int64_t e0 = nblocks * nt / g->ntasks * 16, e1 = nblocks * (nt + 1) / g->ntasks * 16;
        w4a8_rows(g, thread, e0, e1 < c->N ? e1 : c->N);
        if (pf) prof_add(&pf->ns[QMM_PROF_TILES], t0);
        return;
    }
    if (g->rows) {
        int8_rows(g, b0 * 16, b1 * 16 < c->N ? b1 * 16 : c->N);
        if (pf) prof_add(&pf->ns[QMM_PROF_TILES], t0);
        return;
    }
    if (g->ap) { /* the one-pass tiles, all rows × wblocks blocks, each inside the weight */
        const int64_t nblocks = c->w->i8.Np / 16;
        qmm_i8_tile t;
        memset(&t, 0, sizeof t);
        t.nq = g->kq;
        t.part = part;
        t.mr = (int)c->M;
        t.first = t.last = 1;
        for (; b0 < b1 && b0 + g->wblocks <= nblocks; b0 += g->wblocks) {
            if (qmm_cancel_requested(g->cancel)) return;
            get_panel(g, thread, b0, g->wblocks, 0, g->kq, cs, 1, &t);
            t.nr = (int)(b1 - b0 < g->wblocks ? b1 - b0 : g->wblocks); /* the task's blocks of it */
            t.n = b0 * 16;
            e->one_pass(g->ap, g->wrows, g->s, c, &t);
        }
        if (pf) t0 = prof_add(&pf->ns[QMM_PROF_TILES], t0);
        if (b0 >= b1) return; /* else the weight's last blocks: the row tiles below */
    }
    const int64_t passes = (m1 - m0 + e->mr - 1) / e->mr; /* row tiles per panel */
    const int whole_k = g->kcq == g->kq;
    const int64_t panel_bytes = e->nrb * blk;             /* whole K, nrb blocks: contiguous */
    for (int64_t q0 = 0, nq; q0 < g->kq; q0 += nq) {
        nq = chunk_nq(g, q0);
        qmm_i8_tile t;
        t.epilogue_ns = pf ? &pf->ns[QMM_PROF_EPILOGUE] : NULL;
        t.nq = nq;
        t.first = q0 == 0;
        t.last = q0 + nq >= g->kq;
        for (int64_t nb = b0; nb < b1; nb += e->nrb) {
            if (qmm_cancel_requested(g->cancel)) return; /* qmm_cancel: y stays partly written */
            t.nr = (int)(b1 - nb < e->nrb ? b1 - nb : e->nrb);
            if (pf) t0 = qmm_now_ns();
            get_panel(g, thread, nb, t.nr, q0, nq, cs ? cs + (nb - b0) * 16 : NULL, t.first, &t);
            if (pf) t0 = prof_add(&pf->ns[QMM_PROF_PACK], t0);
            t.n = nb * 16;
            /* whole-K panels with several row tiles: they share the prefetch of the panel this
             * thread runs next (this task's next, else its next task's first), one share each;
             * a borrowed weight's panel is packed just before its tiles run: no PF_NEXT of it,
             * the tiles may fetch the caller's rows packed next instead (rows_pf) */
            const int8_t *next = NULL;
            if (whole_k && passes > 1 && !g->borrowed) {
                if (nb + e->nrb < b1) next = wdata + (nb + e->nrb) * blk;
                else if (task + g->nthreads < n_tasks) next = wdata + ((task + g->nthreads) % g->ntasks) * bpt * blk;
            }
            const int64_t share = (panel_bytes + passes - 1) / passes;
            int64_t step = (share + nq - 1) / nq;
            if (step > 128) step = 128;
            /* a borrowed weight's int8 rows: the caller's rows of the panel this thread packs
             * next (this task's next panel of the chunk, else its first of the next chunk; none
             * after its last), its lines split evenly over this panel's row tiles */
            qmm_i8_rows_pf next_rows = {NULL, 0, 1, 0, 0};
            if (g->borrowed && !c->w->w4a8) {
                if (nb + e->nrb < b1) next_rows = panel_rows(g, nb + e->nrb, b1, q0, nq);
                else if (!t.last) next_rows = panel_rows(g, b0, b1, q0 + nq, chunk_nq(g, q0 + nq));
            }
            const int64_t next_lines = next_rows.l1;
            t.rows_pf = next_rows;
            for (int64_t r = m0, i = 0; r < m1; r += e->mr, i++) {
                if (next_lines) {
                    t.rows_pf.l0 = next_lines * i / passes;
                    t.rows_pf.l1 = next_lines * (i + 1) / passes;
                }
                t.mr = (int)(m1 - r < e->mr ? m1 - r : e->mr);
                t.part = e->c_tiles ? part + ((nb - b0) / e->nrb * passes + i) * e->mr * 16 * e->nrb
                                    : part + (r - m0) * e->nc + (nb - b0) * 16;
                t.r = r;
                t.pf_mode = next ? QMM_I8_PF_NEXT
                            : whole_k && passes == 1 && nq > 64 && !g->borrowed ? QMM_I8_PF_STREAM : QMM_I8_PF_NONE;
                t.pf = next ? next + i * share : NULL;
                t.pf_step = step;
                e->tile(g->a + r * g->Kp + q0 * 4, g->Kp, g->s + r, c, &t);
            }
            if (pf) prof_add(&pf->ns[QMM_PROF_TILES], t0);
        }
    }
}

static void gemm_task(int64_t task, int64_t n_tasks, int thread, void *arg) {
    const qmm_i8_gemm *g = arg;
    if (!g->prof) {
        gemm_task_run(task, n_tasks, thread, g, NULL);
        return;
    }
    qmm_prof_slot *pf = &g->prof[thread];
    const uint64_t t0 = qmm_now_ns();
    gemm_task_run(task, n_tasks, thread, g, pf);
    prof_add(&pf->ns[QMM_PROF_TASKS], t0);
}

/* the pre-pass's group_fill: the rows regime's copy of q for rows [r0, r1), in the layout of the
 * kernel that reads it (a fused W4A8 kernel's family may have its own) */
static void rows_ap_group(const void *arg, int64_t r0, int64_t r1) {
    const qmm_i8_gemm *g = arg;
    if (g->w4_fused && g->e->w4a8->ap_fill) g->e->w4a8->ap_fill((const int8_t *)g->a, g->Kp, g->ap, r0, r1);
    else g->e->rows_ap_fill((const int8_t *)g->a, g->Kp, g->ap, r0, r1);
}

/* the engine's per-thread hooks, around each thread's share of the tasks (the pool places them) */
static void gemm_begin(int thread, void *arg) {
    const qmm_i8_gemm *g = arg;
    g->e->begin(g->c, thread);
}

static void gemm_end(int thread, void *arg) {
    const qmm_i8_gemm *g = arg;
    g->e->end(g->c, thread);
}

qmm_status qmm_int8_gemm(qmm_context *ctx, const qmm_call *c, const qmm_i8_engine *e) {
    const qmm_weight *w = c->w;
    const int64_t M = c->M, Kp = w->i8.Kp;
    const int nt = ctx->n_threads;
    size_t qbytes, pbytes;
    QMM_RETURN_IF(!qmm_mul_ok((size_t)M, (size_t)Kp, &qbytes) || qbytes > SIZE_MAX - (size_t)M * 9, QMM_ERR_UNSUPPORTED,
                  "layer %s: M=%lld x Kp=%lld activations too large", w->name, (long long)M, (long long)Kp);
    void *buf, *pbuf;
    QMM_FORWARD_IF_ERROR(qmm_context_scratch(ctx, QMM_SCRATCH_ACT, qbytes + (size_t)M * 9, &buf));
    const int64_t kq = e->k64 ? Kp / 4 : (c->K + 3) / 4;
    const qmm_i8_rows_fn rows_fn = w->borrowed && M <= e->rows_m ? qmm_i8_rows_kernel_for(e, M) : NULL;
    const int borrowed = w->borrowed, rows = rows_fn != NULL;
    int wblocks = 0;
    const int wrows = e->one_pass_rows && !rows ? e->one_pass_rows(M, &wblocks) : 0;
    int64_t kcq = M <= e->whole_k_m ? kq : e->kc / 4, kc_long = kq;
    if (e->k64 && kcq < kq) { /* even chunks of whole 64-byte k-steps (int8_gemm.h, k64) */
        const int64_t steps = kq / 16, cs = kcq / 16, nch = (steps + cs / 2) / cs > 1 ? (steps + cs / 2) / cs : 1;
        kcq = (steps + nch - 1) / nch * 16;
        kc_long = steps % nch ? steps % nch * kcq : kq;
    }
    /* rows per task: the engine's mc; a borrowed weight's panels are packed once per task, so up
     * to 4·mc rows (in equal row tasks) while that still leaves two tasks per thread (measured on
     * avx512_vnni, M = 1024 and 4096: packing is 10–15 % of a call at 2·mc; 4·mc runs 5–10 %
     * faster, 8·mc no faster, all of M slower: the partials leave L2; bench/NOTES.md) */
    int64_t mc = e->mc;
    const int64_t ntasks = (w->i8.Np / 16 + e->nc / 16 - 1) / (e->nc / 16);
    if (borrowed && M > mc && !e->mc_fixed) {
        const int64_t mtasks = (M + 4 * mc - 1) / (4 * mc), mc2 = qmm_round_up((M + mtasks - 1) / mtasks, e->mr);
        if (mtasks * ntasks >= 2 * (int64_t)nt) mc = mc2;
    }
    /* [threads][mc·nc] partials, the one-pass rows [kq][wrows][4], and for a borrowed weight the
     * threads' panel buffers (nrb blocks × one chunk) and column sums, each 64-byte aligned */
    pbytes = (size_t)nt * (size_t)mc * (size_t)e->nc * sizeof(int32_t);
    const int64_t rows_ap = rows && e->rows_ap_bytes ? e->rows_ap_bytes(M, Kp) : 0;
    const size_t apbytes = (size_t)qmm_round_up(rows_ap ? rows_ap : kq * wrows * 4, 64);
    /* a W4A8 weight in the rows regime: the decoded rows' buffer instead (w4a8_rows) */
    const int64_t w4_rows = qmm_w4a8_rows_step(Kp);
    const int64_t panel_bytes = rows && w->w4a8 ? w4_rows * Kp
                                : borrowed ? (int64_t)e->nrb * (kcq < kq ? kcq : kq) * 64 : 0;
    const size_t bbytes = borrowed ? (size_t)nt * ((size_t)panel_bytes + (size_t)qmm_round_up((int64_t)e->nc * 4, 64)) : 0;
    QMM_FORWARD_IF_ERROR(qmm_context_scratch(ctx, QMM_SCRATCH_ENGINE, pbytes + apbytes + bbytes, &pbuf));
    int8_t *q = buf;                  /* [M][Kp] */
    float *s = (float *)(q + qbytes); /* [M] (Kp is a multiple of 64: aligned) */
    int32_t *qsum = (int32_t *)(s + M); /* [M], the rows regime */
    uint8_t *qneg = (uint8_t *)(qsum + M); /* [M], the rows regime */
    qmm_i8_gemm g;
    memset(&g, 0, sizeof g);
    g.c = c;
    g.e = e;
    g.cancel = &ctx->cancel;
    g.a = (uint8_t *)q;
    g.s = s;
    g.part = pbuf;
    g.Kp = Kp;
    g.kq = kq;
    g.nthreads = nt;
    if (wrows) {
        g.ap = (uint8_t *)pbuf + pbytes;
        g.wrows = wrows;
        g.wblocks = wblocks;
    }
    if (borrowed) {
        g.borrowed = 1;
        g.panel_bytes = panel_bytes;
        g.panels = (int8_t *)pbuf + pbytes + apbytes;
        g.colsums = (int32_t *)(g.panels + (size_t)nt * (size_t)panel_bytes);
    }
    /* read by the pool's threads during this call: the table, and for a fused kernel its u8 form */
    _Alignas(64) int8_t lut[QMM_W4A8_LUT_BYTES], lut_u8[QMM_W4A8_LUT_BYTES];
    g.src = (qmm_panel_source){.w = w, .pack = e->pack,
                               .w4_decode = w->w4a8 ? qmm_w4a8_decoder(ctx) : NULL};
    if (w->w4a8 && w->w4.s_rel_dtype == QMM_F8_E4M3) {
        qmm_w4a8_lut_filler(ctx)(w, lut);
        g.w4_lut = g.src.w4_lut = lut;
        if (rows) g.w4_fused = w4a8_fused(e, w, M, qmm_w4a8_vbmi(ctx));
        if (g.w4_fused) {
            const size_t n = (size_t)256 << w->w4.bits;
            for (size_t i = 0; i < n; i++) lut_u8[i] = (int8_t)(lut[i] ^ (int8_t)0x80);
            g.w4_lut_u8 = lut_u8;
            g.w4 = qmm_w4_codes_of(w);
        }
    }
    if (rows_ap) g.ap = (uint8_t *)pbuf + pbytes; /* the rows kernel's copy of q */
    if (rows) {
        g.rows = 1;
        g.rows_fn = rows_fn;
        g.act = (qmm_rows_act){.q = q, .lda = Kp, .M = M, .K = c->K, .qsum = qsum, .qneg128 = qneg, .ap = g.ap, .s = s};
    }
    /* one pass over the rows writes what the kernels read: a (u8 engines: q XOR 0x80, except in
     * the rows regime), the one-pass copy, the rows regime's sums and its copy in the engine's
     * layout (per group of 16 rows, on the thread that wrote its last rows) */
    const qmm_prepass_out po = {.q = q, .ldq = Kp, .s = s, .flip = e->u8 && !rows ? 0x80 : 0,
                                .qsum = rows ? qsum : NULL, .qneg128 = rows ? qneg : NULL, .ap = wrows ? g.ap : NULL,
                                .kq = kq, .wrows = wrows, .group_fill = rows_ap ? rows_ap_group : NULL, .group_arg = &g,
                                .group_rows = 16};
    const uint64_t t_pre = ctx->profile ? qmm_now_ns() : 0;
    QMM_FORWARD_IF_ERROR(qmm_prepass_to(ctx, c, &po, 0));
    g.rows_per_task = mc;
    g.mc = mc;
    g.kcq = kcq;
    g.kc_long = kc_long;
    g.mtasks = (M + mc - 1) / mc;
    g.ntasks = rows && w->w4a8 ? (ntasks < nt ? ntasks : nt) : ntasks;
    g.prof = ctx->profile ? ctx->prof_slots : NULL;
    const uint64_t t_gemm = ctx->profile ? qmm_now_ns() : 0;
    qmm_pool_run_bracketed(ctx->pool, g.mtasks * g.ntasks, gemm_task, e->begin ? gemm_begin : NULL,
                           e->end ? gemm_end : NULL, &g);
    if (ctx->profile) {
        const uint64_t t = qmm_now_ns();
        ctx->prof.ns[QMM_PHASE_PREPASS] += t_gemm - t_pre;
        ctx->prof.ns[QMM_PHASE_GEMM] += t - t_gemm;
        qmm_profile_collect(ctx);
    }
    if (c->token_scales) memcpy(c->token_scales, s, (size_t)M * sizeof(float));
    return qmm_cancel_status(ctx);
}
