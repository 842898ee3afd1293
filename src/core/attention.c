/*
 * attention.c — the attention driver (attention.h): tasks, per-thread scratch, one packing of
 * each kv head per thread, the engine's tile kernel per task. Plain C; the engines' kernels
 * carry the ISA.
 */
#include "attention.h"

#include <string.h>

typedef struct {
    const qmm_attn_call *c;
    const qmm_attn_kernels *k;
    char *scratch;             /* T × per_thread bytes */
    size_t per_thread, kv_bytes;
    int64_t *packed;           /* [T] the (b · Hkv + hk) packed in the thread's kv buffer, -1: none */
    int64_t tiles, group;      /* tiles per query head; query heads per kv head */
} attn_job;

static const char *at(const void *base, qmm_dtype t, int64_t elems) {
    return (const char *)base + elems * (int64_t)qmm_dtype_size(t);
}

static void attn_task(int64_t task, int64_t n_tasks, int thread, void *arg) {
    (void)n_tasks;
    const attn_job *j = arg;
    const qmm_attn_call *c = j->c;
    const int64_t t = task % j->tiles, head = task / j->tiles; /* head = (b · Hkv + hk) · group + g */
    const int64_t kvh = head / j->group, g = head % j->group;
    const int64_t b = kvh / c->Hkv, hk = kvh % c->Hkv, h = hk * j->group + g;
    char *kv = j->scratch + (size_t)thread * j->per_thread;
    if (j->packed[thread] != kvh) {
        j->k->pack_kv(c, at(c->k, c->kv_dtype, b * c->ks[0] + hk * c->ks[1]),
                      at(c->v, c->kv_dtype, b * c->vs[0] + hk * c->vs[1]), kv);
        j->packed[thread] = kvh;
    }
    const int64_t r0 = t * j->k->mq, rows = c->S - r0 < j->k->mq ? c->S - r0 : j->k->mq;
    const void *q = at(c->q, c->q_dtype, b * c->qs[0] + h * c->qs[1] + r0 * c->qs[2]);
    const void *mask = c->mask ? at(c->mask, c->mask_dtype, b * c->ms[0] + h * c->ms[1] + r0 * c->ms[2]) : NULL;
    void *out = (char *)c->out + (b * c->os[0] + h * c->os[1] + r0 * c->os[2]) * (int64_t)qmm_dtype_size(c->out_dtype);
    j->k->tile(c, kv, q, rows, mask, out, kv + j->kv_bytes);
}

qmm_status qmm_attention_run(qmm_context *ctx, const qmm_attn_call *c, const qmm_attn_kernels *k) {
    const int T = qmm_pool_threads(ctx->pool);
    attn_job j = {.c = c, .k = k};
    j.kv_bytes = (size_t)qmm_round_up((int64_t)k->kv_bytes(c->Skv, c->D), 64);
    j.per_thread = j.kv_bytes + (size_t)qmm_round_up((int64_t)k->tile_bytes(c->D), 64);
    size_t all;
    QMM_RETURN_IF(!qmm_mul_ok(j.per_thread, (size_t)T, &all) || all > SIZE_MAX - 64 * (size_t)T,
                  QMM_ERR_UNSUPPORTED, "attention: scratch of %d threads overflows", T);
    void *p;
    QMM_FORWARD_IF_ERROR(qmm_context_scratch(ctx, QMM_SCRATCH_ENGINE, all + (size_t)T * sizeof(int64_t), &p));
    j.scratch = p;
    j.packed = (int64_t *)(j.scratch + all);
    for (int i = 0; i < T; i++) j.packed[i] = -1;
    j.tiles = (c->S + k->mq - 1) / k->mq;
    j.group = c->H / c->Hkv;
    qmm_pool_run(ctx->pool, c->B * c->H * j.tiles, attn_task, &j);
    return QMM_OK;
}
