/*
 * float_gemm.c — the float GEMM driver of every float engine: chunking of M, the pre-pass per
 * chunk, the task grid, the B block of each task and k block (widened by the engine from the
 * weight's panels, panel.h: owned in place, borrowed packed per block), the kernel calls, the
 * epilogue, the engine's per-thread begin/end hooks; qmm_cancel polled between a task's k blocks
 * and between chunks. Contract: float_gemm.h.
 */
#include "float_gemm.h"

#include "numerics.h"
#include "w4a8.h"

#include <string.h>

/* ---------------------------------------------------------------- weights of the next block */
void qmm_float_prefetch_next(const qmm_weight *w, int64_t n0, int64_t nr, int64_t k0, int64_t kc) {
    const int64_t k1 = k0 + kc;
    const int64_t Np = w->is_int8 ? w->i8.Np : w->fp.Np, Kp = w->is_int8 ? w->i8.Kp : w->fp.Kp;
    if (k1 >= Kp) return;
    if (kc > Kp - k1) kc = Kp - k1;
    for (int64_t n = n0; n < n0 + nr && n < Np; n += 16) {
        const char *s;
        int64_t bytes;
        if (w->is_int8) {
            s = (const char *)(w->i8.data + ((n / 16) * (Kp / 4) + k1 / 4) * 64);
            bytes = kc * 16;
        } else if (w->fp.bf16) {
            s = (const char *)(w->fp.bf16 + ((n / 16) * (Kp / 2) + k1 / 2) * 32);
            bytes = kc * 32;
        } else {
            s = (const char *)(w->fp.f32 + ((n / 16) * Kp + k1) * 16);
            bytes = kc * 64;
        }
        for (int64_t o = 0; o < bytes; o += 64) __builtin_prefetch(s + o, 0, 2);
    }
}

/* ---------------------------------------------------------------- the epilogue */
void qmm_float_epilogue_ref(const qmm_call *c, float *C, int64_t ldc, int64_t rows, int64_t r0, int64_t n0,
                            int64_t ncols) {
    const qmm_weight *w = c->w;
    for (int64_t i = 0; i < rows; i++) {
        for (int64_t j = 0; j < ncols; j++) {
            int64_t n = n0 + j;
            float v = C[i * ldc + j];
            if (w->is_int8) v = v * w->scale[n];
            v = v + (w->bias ? w->bias[n] : 0.0f);
            qmm_store_f(c->y, c->y_dtype, (r0 + i) * c->ldy + n, v);
        }
    }
}

/* ---------------------------------------------------------------- the B block */
/* Columns [n0, n0 + nr) × k [k0, k0 + kc) of c->w (n0 a multiple of nr, k0 of 4) in the engine's
 * layout: each 16-column block below Np widened into buf + jb · b_col16 (the columns past Np are
 * left as they are: zero, see gemm_task); an int8 weight's blocks from its panel (panel.h; a
 * borrowed one's packed into pbuf). Returns the block the kernel reads. */
static const void *prep_b(const qmm_fgemm *g, const qmm_call *c, const qmm_panel_source *src, int64_t n0, int64_t k0,
                          int64_t kc, void *buf, int8_t *pbuf) {
    const qmm_weight *w = c->w;
    if (!w->borrowed) qmm_float_prefetch_next(w, n0, g->nr, k0, kc);
    const int64_t Np = w->is_int8 ? w->i8.Np : w->fp.Np, Kp = w->is_int8 ? w->i8.Kp : w->fp.Kp;
    const int64_t nbk = ((Np - n0 < g->nr ? Np - n0 : g->nr) + 15) / 16; /* blocks below Np */
    if (w->is_int8) {
        const int64_t nq = (kc + 3) / 4;
        qmm_panel p;
        qmm_panel_get(src, n0 / 16, (int)nbk, k0 / 4, nq, pbuf, NULL, 1, &p);
        for (int64_t jb = 0; jb < nbk; jb++) g->widen_i8(p.b + jb * p.ldb, nq, (char *)buf + (size_t)jb * g->b_col16);
        return buf;
    }
    if (!w->fp.bf16 && g->f32_direct) return w->fp.f32 + ((n0 / 16) * Kp + k0) * 16;
    const char *src16 = w->fp.bf16 ? (const char *)w->fp.bf16 : (const char *)w->fp.f32;
    const int64_t per_k = w->fp.bf16 ? 32 : 64;                /* source bytes per k of one 16-column block */
    const int64_t count = w->fp.bf16 ? (kc + 1) / 2 : kc;     /* source rows to widen */
    const qmm_fwiden_fn widen = w->fp.bf16 ? g->widen_bf16 : g->widen_f32;
    for (int64_t jb = 0; jb < nbk; jb++)
        widen(src16 + ((n0 / 16 + jb) * Kp + k0) * per_k, count, (char *)buf + (size_t)jb * g->b_col16);
    return buf;
}

/* ---------------------------------------------------------------- the GEMM driver */
typedef struct {
    const qmm_call *c;
    const qmm_fgemm *g;
    const void *A;             /* the chunk's panels */
    int64_t Ka;                /* A's k extent = the k extent the kernels run */
    int64_t r0, rows;          /* chunk */
    int64_t panels, pg, nrg;   /* panels in the chunk, panels per task, row groups */
    int64_t ncb;               /* column blocks */
    qmm_panel_source src;      /* an int8 weight's panels (panel.h) */
    char *tscratch;            /* [threads][tbytes]: B block, then C tile, then (borrowed) the n16k4 panel */
    size_t tbytes, bbytes, cbytes;
    int64_t kb_n, kb_steps;    /* k blocks, ka-steps of Ka (even_k) */
    qmm_fepilogue_fn epi;
    const qmm_cancel_word *cancel; /* the context's: a task stops between k blocks once set */
} gemm_job;

/* The length of k block kb (starting at k0): kc, the last one shorter; even_k: the ka-steps of
 * Ka spread over the blocks, the longer ones first. */
static int64_t block_k(const gemm_job *j, int64_t kb, int64_t k0) {
    const qmm_fgemm *g = j->g;
    if (!g->even_k) return j->Ka - k0 < g->kc ? j->Ka - k0 : g->kc;
    const int64_t ka = j->Ka / j->kb_steps;
    return (j->kb_steps / j->kb_n + (kb < j->kb_steps % j->kb_n)) * ka;
}

static void gemm_task(int64_t task, int64_t n_tasks, int thread, void *arg) {
    (void)n_tasks;
    gemm_job *j = arg;
    const qmm_fgemm *g = j->g;
    const qmm_call *c = j->c;
    const qmm_weight *w = c->w;
    const int64_t jb = task / j->nrg, rg = task % j->nrg;
    const int64_t n0 = jb * g->nr;
    const int64_t p0 = rg * j->pg;
    int64_t p1 = p0 + j->pg;
    if (p1 > j->panels) p1 = j->panels;
    char *ts = j->tscratch + (size_t)thread * j->tbytes;
    void *bbuf = ts;
    float *C = (float *)(ts + j->bbytes);     /* [(p1 - p0) * mr][nr] */
    const int64_t ncols = c->N - n0 < g->nr ? c->N - n0 : g->nr;
    /* a block with columns past Np: those stay zero for every k block */
    if (n0 + g->nr > (w->is_int8 ? w->i8.Np : w->fp.Np)) memset(bbuf, 0, j->bbytes);
    const size_t es = g->bf16 ? 2 : 4;
    for (int64_t k0 = 0, kb = 0, kc; k0 < j->Ka; k0 += kc, kb++) {
        if (qmm_cancel_requested(j->cancel)) return; /* qmm_cancel: the task's block of y is not written */
        kc = block_k(j, kb, k0);
        const void *b = prep_b(g, c, &j->src, n0, k0, kc, bbuf, (int8_t *)ts + j->bbytes + j->cbytes);
        for (int64_t p = p0; p < p1; p++) {
            int64_t prow = p * g->mr;
            int rows = (int)(j->rows - prow < g->mr ? j->rows - prow : g->mr);
            const char *a = (const char *)j->A + (size_t)(p * j->Ka * g->mr + k0 * g->mr) * es;
            float *Cp = C + (p - p0) * g->mr * g->nr;
            if (!g->kernel_aux) {
                g->kernel(g, rows, kc, a, b, Cp, k0 > 0);
                continue;
            }
            /* what this thread runs next: the task's next panel, else its first at the next k block */
            const char *an = NULL;
            int64_t kn = kc;
            if (p + 1 < p1) an = a + (size_t)(j->Ka * g->mr) * es;
            else if (k0 + kc < j->Ka) {
                kn = block_k(j, kb + 1, k0 + kc);
                an = (const char *)j->A + (size_t)(p0 * j->Ka * g->mr + (k0 + kc) * g->mr) * es;
            }
            g->kernel_aux(g, rows, kc, a, b, Cp, k0 > 0, an, kn);
        }
    }
    int64_t rfirst = p0 * g->mr;
    int64_t rlast = p1 * g->mr < j->rows ? p1 * g->mr : j->rows;
    j->epi(c, C, g->nr, rlast - rfirst, j->r0 + rfirst, n0, ncols);
}

/* the engine's per-thread hooks, around each thread's share of the tasks (the pool places them) */
static void fgemm_begin(int thread, void *arg) {
    const gemm_job *j = arg;
    j->g->begin(j->c, thread);
}

static void fgemm_end(int thread, void *arg) {
    const gemm_job *j = arg;
    j->g->end(j->c, thread);
}

/* Rows per chunk. The chunk's packed A is re-read by every column task (N / nr times), so it
 * must stay in the last-level cache: at most QMM_FLOAT_MC rows (bounds the C tile of a task and
 * the scratch) and at most QMM_FLOAT_A_BYTES of A (3/8 of the 32 MiB L3 it was tuned on;
 * bench/NOTES.md "float engines" version 3: 384 rows × K = 14336 in f32 = 22 MB fell out of L3
 * and ran at 46-55 % of the FMA peak; 16 MiB chunks 66-78 %, 12 MiB 77-80 %, 8 MiB 76-83 %).
 * Large chunks amortize the B block (widened or copied once per task and k-block, and f32
 * weights re-streamed once per chunk), so the chunks are as large as allowed and of equal size.
 * Results do not depend on the chunking (each output element is its own chain over k). */
#define QMM_FLOAT_A_BYTES ((int64_t)12 << 20)

static int64_t chunk_rows(int64_t M, int64_t Ka, size_t es, int mr) {
    int64_t row_bytes = Ka * (int64_t)es;
    if (row_bytes < 1) row_bytes = 1;
    int64_t cap = QMM_FLOAT_A_BYTES / row_bytes / mr * mr;
    const int64_t mc_max = qmm_round_up(QMM_FLOAT_MC, mr);
    if (cap > mc_max) cap = mc_max;
    if (cap < mr) cap = mr;
    if (M <= cap) return qmm_round_up(M, mr);
    const int64_t chunks = (M + cap - 1) / cap;
    return qmm_round_up((M + chunks - 1) / chunks, mr); /* <= cap: cap is a multiple of mr */
}

qmm_status qmm_float_gemm(qmm_context *ctx, const qmm_call *c, const qmm_fgemm *g) {
    const int64_t M = c->M, N = c->N, K = c->K;
    const int nt = ctx->n_threads;
    const int ka = g->ka ? g->ka : g->bf16 ? 2 : 1;
    if (g->kc % ka || g->kc % 4 || g->nr % 16 || (g->bf16 && ka % 2)) {
        qmm_call_bug(c, "qmm_float_gemm: descriptor with kc not a multiple of 4 and ka, or nr of 16");
        return QMM_OK;
    }
    const int64_t Ka = qmm_round_up(K, ka);
    const size_t es = g->bf16 ? 2 : 4;
    const int64_t mc = chunk_rows(M, Ka, es, g->mr);
    size_t abytes;
    QMM_RETURN_IF(!qmm_mul_ok((size_t)mc * (size_t)Ka, es, &abytes), QMM_ERR_UNSUPPORTED,
                  "layer %s: K=%lld too large for the float engines", c->w->name, (long long)K);
    void *A;
    QMM_FORWARD_IF_ERROR(qmm_context_scratch(ctx, QMM_SCRATCH_ACT, abytes, &A));
    gemm_job j = {
        .c = c, .g = g, .A = A, .Ka = Ka, .ncb = (N + g->nr - 1) / g->nr,
        .epi = g->epilogue ? g->epilogue : qmm_float_epilogue_ref,
        .kb_n = (Ka + g->kc - 1) / g->kc, .kb_steps = Ka / ka,
    };
    const int64_t al = g->page_bufs ? 4096 : 64;
    j.bbytes = (size_t)qmm_round_up((int64_t)g->b_bytes, al);
    const int64_t max_panels = mc / g->mr;
    j.cbytes = (size_t)qmm_round_up(max_panels * g->mr * g->nr * (int64_t)sizeof(float), al);
    /* a borrowed weight's n16k4 panel: nr/16 blocks × the quads of kc */
    const size_t pbytes = c->w->borrowed ? (size_t)qmm_round_up(g->nr * qmm_round_up(g->kc, 4), al) : 0;
    /* W4A8 (SPEC §11): 16 rows × up to 512 k at a time through the context's rows decoder, with
     * e4m3 s_rel from the call's table (read by the pool's threads during this call), then packed */
    _Alignas(64) int8_t lut[QMM_W4A8_LUT_BYTES];
    j.src = (qmm_panel_source){.w = c->w, .pack = g->pack,
                               .w4_decode = c->w->w4a8 ? qmm_w4a8_decoder(ctx) : NULL};
    if (c->w->w4a8 && c->w->w4.s_rel_dtype == QMM_F8_E4M3) {
        qmm_w4a8_lut_filler(ctx)(c->w, lut);
        j.src.w4_lut = lut;
    }
    j.tbytes = j.bbytes + j.cbytes + pbytes;
    void *ts;
    QMM_FORWARD_IF_ERROR(qmm_context_scratch(ctx, QMM_SCRATCH_ENGINE, j.tbytes * (size_t)nt, &ts));
    j.tscratch = ts;
    j.cancel = &ctx->cancel;
    for (int64_t r0 = 0; r0 < M && !qmm_cancelled(ctx); r0 += mc) {
        int64_t rows = M - r0 < mc ? M - r0 : mc;
        QMM_FORWARD_IF_ERROR(qmm_float_act_pack(ctx, c, r0, rows, g->mr, g->bf16, A, Ka));
        j.r0 = r0;
        j.rows = rows;
        j.panels = (rows + g->mr - 1) / g->mr;
        /* enough tasks for every thread: split the rows only when there are few column blocks */
        int64_t want_groups = (4 * (int64_t)nt + j.ncb - 1) / j.ncb;
        if (want_groups > j.panels) want_groups = j.panels;
        if (want_groups < 1) want_groups = 1;
        j.pg = (j.panels + want_groups - 1) / want_groups;
        j.nrg = (j.panels + j.pg - 1) / j.pg;
        qmm_pool_run_bracketed(ctx->pool, j.ncb * j.nrg, gemm_task, g->begin ? fgemm_begin : NULL,
                               g->end ? fgemm_end : NULL, &j);
    }
    return qmm_cancel_status(ctx);
}
