/*
 * attention.c — the attention driver (attention.h): tasks, per-thread scratch (its size checked
 * before anything is allocated), one packing of each kv head per thread, the engine's tile kernel
 * per task; and the key shift of the engines that quantize k (qmm_attn_key_mean). Plain C; the
 * engines' kernels carry the ISA.
 */
#include "attention.h"
#include "numerics.h"

#include <math.h>
#include <string.h>

typedef struct {
    const qmm_attn_call *c;
    const qmm_attn_kernels *k;
    char *scratch;             /* T × per_thread bytes */
    size_t per_thread, kv_bytes;
    int64_t *packed;           /* [T] the (b · Hkv + hk) packed in the thread's kv buffer, -1: none */
    int64_t tiles, group;      /* tiles per query head; query heads per kv head */
    int64_t threads;           /* the pool's */
} attn_job;

static const char *at(const void *base, qmm_dtype t, int64_t elems) {
    return (const char *)base + elems * (int64_t)qmm_dtype_size(t);
}

static void attn_task(int64_t task, int64_t n_tasks, int thread, void *arg) {
    const attn_job *j = arg;
    const qmm_attn_call *c = j->c;
    /* the pool's task i (on thread i mod T) → entry e of the thread's contiguous share */
    const int64_t T = j->threads, th = task % T, share = n_tasks / T, extra = n_tasks % T;
    const int64_t e = th * share + (th < extra ? th : extra) + task / T;
    const int64_t t = e % j->tiles, head = e / j->tiles; /* head = (b · Hkv + hk) · group + g */
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

static void attn_begin(int thread, void *arg) { (void)thread; ((const attn_job *)arg)->k->begin(); }
static void attn_end(int thread, void *arg) { (void)thread; ((const attn_job *)arg)->k->end(); }

void qmm_attn_key_mean(const qmm_attn_call *c, const void *k, float *mean) {
    const int64_t D = c->D;
    const size_t es = qmm_dtype_size(c->kv_dtype);
    double sum[QMM_ATTN_MAX_D] = {0};
    float row[QMM_ATTN_MAX_D];
    int64_t n = 0;
    for (int64_t j = 0; j < c->Skv; j++) {
        const char *kr = (const char *)k + j * c->ks[2] * (int64_t)es;
        const uint16_t *h = (const uint16_t *)kr;
        switch (c->kv_dtype) { /* the row in f32, one loop per dtype (the compiler vectorizes them) */
        case QMM_F32: memcpy(row, kr, (size_t)D * sizeof(float)); break;
        case QMM_BF16: for (int64_t d = 0; d < D; d++) row[d] = qmm_bf16_to_f32(h[d]); break;
        default: for (int64_t d = 0; d < D; d++) row[d] = qmm_f16_to_f32(h[d]); break;
        }
        uint32_t inf = 0; /* some element with an all-ones exponent: NaN or ±Inf */
        for (int64_t d = 0; d < D; d++) inf |= (qmm_f32_bits(row[d]) & 0x7f800000u) == 0x7f800000u;
        if (inf) continue;
        for (int64_t d = 0; d < D; d++) sum[d] += row[d];
        n++;
    }
    for (int64_t d = 0; d < D; d++) mean[d] = n ? (float)(sum[d] / (double)n) : 0.0f;
}

/* a byte count rounded up to 64, or SIZE_MAX where it passes QMM_ATTN_MAX_SCRATCH */
static size_t scratch_part(size_t bytes) {
    return bytes > QMM_ATTN_MAX_SCRATCH ? SIZE_MAX : (bytes + 63) / 64 * 64;
}

qmm_status qmm_attention_run(qmm_context *ctx, const qmm_attn_call *c, const qmm_attn_kernels *k) {
    const int T = qmm_pool_threads(ctx->pool);
    attn_job j = {.c = c, .k = k};
    const size_t kvb = scratch_part(k->kv_bytes(c->Skv, c->D)), tb = scratch_part(k->tile_bytes(c->D));
    QMM_RETURN_IF(kvb == SIZE_MAX || tb == SIZE_MAX || kvb + tb > QMM_ATTN_MAX_SCRATCH, QMM_ERR_UNSUPPORTED,
                  "attention: a kv head of Skv=%lld keys of D=%lld packs into more than 2^40 bytes per thread",
                  (long long)c->Skv, (long long)c->D);
    j.kv_bytes = kvb;
    j.per_thread = kvb + tb;
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
    j.threads = T;
    qmm_pool_run_bracketed(ctx->pool, c->B * c->H * j.tiles, attn_task, k->begin ? attn_begin : NULL,
                           k->end ? attn_end : NULL, &j);
    return QMM_OK;
}
