/*
 * borrow.c — the view a call runs on for a borrowed int8 weight (qmm_weight_borrow_int8): the
 * handle holds only the caller's pointers, so every call reads the caller's memory as it is
 * then. The view is a copy of the handle on the caller's stack whose
 *   scale [N], bias [N]  are fp32, read from the caller's scales (one repeated, or N) and bias
 *                        (f32/f16/bf16 widened exactly), in the context's QMM_SCRATCH_WEIGHT;
 *   i8 (packed != 0)     is the whole n16k4 packing + colsum of the caller's W, built in that
 *                        scratch by the context's threads, for engines that read the packing
 *                        (their reads_borrowed == 0); has_neg128 is then what this call saw.
 * With packed == 0 i8.data/colsum stay NULL and the engine reads view->borrow itself (the int8
 * driver packs each panel per call, int8_gemm.c). Nothing is shared between calls or contexts:
 * two threads calling one borrowed weight, each with its own context, never race.
 */
#include "numerics.h"
#include "qmm_internal.h"

#include <string.h>

typedef struct {
    const qmm_weight *w;
    qmm_packed_i8 *p;
    int64_t blocks_per_task;
    int neg128[64];   /* per thread */
} pack_job;

static void pack_task(int64_t task, int64_t n_tasks, int thread, void *arg) {
    (void)n_tasks;
    pack_job *j = arg;
    const int64_t n0 = task * j->blocks_per_task * 16;
    int64_t n1 = n0 + j->blocks_per_task * 16;
    if (n1 > j->p->Np) n1 = j->p->Np;
    if (qmm_pack_i8_rows(j->w->borrow.data, j->w->borrow.ld, j->w->N, j->w->K, n0, n1, j->p)) j->neg128[thread % 64] = 1;
}

qmm_status qmm_weight_for_call(qmm_context *ctx, const qmm_weight *w, int packed, qmm_weight *view,
                               const qmm_weight **out) {
    if (!w->borrowed) {
        *out = w;
        return QMM_OK;
    }
    const int64_t N = w->N, Np = w->i8.Np, Kp = w->i8.Kp;
    /* [Np·Kp packed (when asked)] [Np colsum] [N scale] [N bias]; Np·Kp fits (checked at creation:
     * N·K <= 2^36, Kp < K + 64) */
    const size_t pbytes = packed ? (size_t)Np * (size_t)Kp + (size_t)Np * 4 : 0;
    void *buf;
    QMM_FORWARD_IF_ERROR(qmm_context_scratch(ctx, QMM_SCRATCH_WEIGHT, pbytes + (size_t)N * 8, &buf));
    memcpy(view, w, sizeof *view);
    float *scale = (float *)((char *)buf + pbytes), *bias = scale + N;
    for (int64_t n = 0; n < N; n++) scale[n] = w->borrow.scale[w->borrow.n_scale == 1 ? 0 : n];
    view->scale = scale;
    if (w->borrow.bias) {
        for (int64_t n = 0; n < N; n++) bias[n] = qmm_load_f(w->borrow.bias, w->borrow.bias_dtype, n);
        view->bias = bias;
    }
    if (packed) {
        view->i8.data = buf;
        view->i8.colsum = (int32_t *)((char *)buf + (size_t)Np * (size_t)Kp);
        pack_job j;
        memset(&j, 0, sizeof j);
        j.w = w;
        j.p = &view->i8;
        const int64_t blocks = Np / 16;
        int64_t tasks = (int64_t)ctx->n_threads * 4 < blocks ? (int64_t)ctx->n_threads * 4 : blocks;
        j.blocks_per_task = (blocks + tasks - 1) / tasks;
        tasks = (blocks + j.blocks_per_task - 1) / j.blocks_per_task;
        qmm_pool_run(ctx->pool, tasks, pack_task, &j);
        view->has_neg128 = 0;
        for (int i = 0; i < 64; i++) view->has_neg128 |= j.neg128[i];
    }
    *out = view;
    return QMM_OK;
}
