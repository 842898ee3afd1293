/*
 * float_gemm.c — the float GEMM driver of every float engine: chunking of M, the pre-pass per
 * chunk, the task grid, the B block of each task and k block (widened by the engine from the
 * weight's packing, or from a borrowed weight's rows packed per block), the kernel calls, the
 * epilogue, the engine's per-task begin/end hooks. Contract: float_gemm.h.
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

/* ---------------------------------------------------------------- borrowed int8 weights */
void qmm_float_pack_i8_ref(const int8_t *W, int64_t ld, int rows, int64_t k0, int64_t k1, int8_t *dst, int64_t nq) {
    for (int64_t q = 0; q < nq; q++)
        for (int j = 0; j < 16; j++)
            for (int t = 0; t < 4; t++) {
                const int64_t k = k0 + q * 4 + t;
                dst[q * 64 + j * 4 + t] = j < rows && k < k1 ? W[j * ld + k] : 0;
            }
}

/* The B block [n0, n0 + nr) × [k0, k0 + kc) of a borrowed weight, packed into pb (n16k4, blocks
 * nq·64 bytes apart), and *pv: a view of w whose packing is that buffer (the block then lies at
 * n = 0, k = 0 of the view). */
static const qmm_weight *borrowed_block(const qmm_call *c, const qmm_fgemm *g, int64_t n0, int64_t k0, int64_t kc,
                                        int8_t *pb, qmm_weight *pv) {
    const qmm_weight *w = c->w;
    const qmm_fpack_i8_fn pack = g->pack_i8 ? g->pack_i8 : qmm_float_pack_i8_ref;
    const int64_t nq = (kc + 3) / 4, k1 = k0 + kc < c->K ? k0 + kc : c->K;
    const int64_t ncols = c->N - n0 < g->nr ? c->N - n0 : g->nr, nbk = (ncols + 15) / 16;
    for (int64_t b = 0; b < nbk; b++) {
        const int64_t n = n0 + 16 * b;
        if (w->w4a8) { /* the codes decoded into the n16k4 block (SPEC §11) */
            qmm_w4a8_pack_block_ref(w, n, c->N - n < 16 ? (int)(c->N - n) : 16, k0, k1, pb + b * nq * 64, nq, NULL, 1);
            continue;
        }
        pack(w->borrow.data + n * w->borrow.ld, w->borrow.ld, c->N - n < 16 ? (int)(c->N - n) : 16, k0, k1,
             pb + b * nq * 64, nq);
    }
    qmm_weight_copy_plain(pv, w);
    pv->i8.data = pb;
    pv->i8.Kp = nq * 4;
    pv->i8.Np = nbk * 16;
    return pv;
}

/* ---------------------------------------------------------------- the B block */
/* Columns [n0, n0 + nr) × k [k0, k0 + kc) of w (n0 and k0 in w's packing) in the engine's
 * layout: each 16-column block below Np widened into buf + jb · b_col16 (the columns past Np are
 * left as they are: zero, see gemm_task). Returns the block the kernel reads. */
static const void *prep_b(const qmm_fgemm *g, const qmm_weight *w, int64_t n0, int64_t k0, int64_t kc, void *buf) {
    qmm_float_prefetch_next(w, n0, g->nr, k0, kc);
    const int64_t Np = w->is_int8 ? w->i8.Np : w->fp.Np, Kp = w->is_int8 ? w->i8.Kp : w->fp.Kp;
    if (!w->is_int8 && !w->fp.bf16 && g->f32_direct) return w->fp.f32 + ((n0 / 16) * Kp + k0) * 16;
    const char *src;
    int64_t per_k, count;          /* source bytes per k of one 16-column block; source rows to widen */
    qmm_fwiden_fn widen;
    if (w->is_int8) {
        src = (const char *)w->i8.data;
        per_k = 16;
        count = (kc + 3) / 4;
        widen = g->widen_i8;
    } else if (w->fp.bf16) {
        src = (const char *)w->fp.bf16;
        per_k = 32;
        count = (kc + 1) / 2;
        widen = g->widen_bf16;
    } else {
        src = (const char *)w->fp.f32;
        per_k = 64;
        count = kc;
        widen = g->widen_f32;
    }
    for (int64_t n = n0; n < n0 + g->nr && n < Np; n += 16)
        widen(src + ((n / 16) * Kp + k0) * per_k, count, (char *)buf + (size_t)((n - n0) / 16) * g->b_col16);
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
    char *tscratch;            /* [threads][tbytes]: B block, then C tile, then (borrowed) the n16k4 block */
    size_t tbytes, bbytes, cbytes;
    int64_t kb_n, kb_steps;    /* k blocks, ka-steps of Ka (even_k) */
    qmm_fepilogue_fn epi;
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
    const int borrowed = w->is_int8 && !w->i8.data;
    const int64_t ncols = c->N - n0 < g->nr ? c->N - n0 : g->nr;
    /* a block with columns past Np (past N when borrowed): those stay zero for every k block */
    if (!borrowed ? n0 + g->nr > (w->is_int8 ? w->i8.Np : w->fp.Np) : ncols < g->nr) memset(bbuf, 0, j->bbytes);
    const size_t es = g->bf16 ? 2 : 4;
    for (int64_t k0 = 0, kb = 0, kc; k0 < j->Ka; k0 += kc, kb++) {
        kc = block_k(j, kb, k0);
        const void *b;
        if (borrowed) {
            qmm_weight pv;
            b = prep_b(g, borrowed_block(c, g, n0, k0, kc, (int8_t *)ts + j->bbytes + j->cbytes, &pv), 0, 0, kc, bbuf);
        } else {
            b = prep_b(g, w, n0, k0, kc, bbuf);
        }
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
    (void)thread;
    ((const gemm_job *)arg)->g->begin();
}

static void fgemm_end(int thread, void *arg) {
    (void)thread;
    ((const gemm_job *)arg)->g->end();
}

/* Rows per chunk. The chunk's packed A is re-read by every column task (N / nr times), so it
 * must stay in the last-level cache: at most QMM_FLOAT_MC rows (bounds the C tile of a task and
 * the scratch) and at most QMM_FLOAT_A_BYTES of A (3/8 of the 32 MiB L3 it was tuned on;
 * bench/NOTES.md "float engines" version 3: 384 rows × K = 14336 in f32 = 22 MB fell out of L3
 * and ran at 46-55 % of the FMA peak; 16 MiB chunks 66-78 %, 12 MiB 77-80 %, 8 MiB 76-83 %).
 * Large chunks amortize the B block (widened or copied once per task and k-block, and f32
 * weights re-streamed once per chunk), so the chunks are as large as allowed and of equal size.
 * Results do not depend on the chunking (each output element is its own chain over k). */
#define QMM_FLOAT_MC 384
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
    /* a borrowed weight's n16k4 block: nr/16 blocks × the quads of kc */
    const size_t pbytes = c->w->is_int8 && !c->w->i8.data ? (size_t)qmm_round_up(g->nr * qmm_round_up(g->kc, 4), al) : 0;
    j.tbytes = j.bbytes + j.cbytes + pbytes;
    void *ts;
    QMM_FORWARD_IF_ERROR(qmm_context_scratch(ctx, QMM_SCRATCH_ENGINE, j.tbytes * (size_t)nt, &ts));
    j.tscratch = ts;
    for (int64_t r0 = 0; r0 < M; r0 += mc) {
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
    return QMM_OK;
}
