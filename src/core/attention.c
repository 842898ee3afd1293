/*
 * attention.c — the attention driver (attention.h): tasks, per-thread scratch (its size checked
 * before anything is allocated), one packing of each kv head per thread, and each tile's
 * flash-attention loop over the engine's ukernels: pack_q, then per key block qk per group of
 * mr rows and the softmax ukernel on ⌊16 / mr⌋ groups at once (P and the rows' state m, l, α,
 * ps), then pv per group; and the
 * store of O / l in out's dtype; and the key shift of the engines that quantize k
 * (qmm_attn_key_mean) over the keys some row attends (qmm_attn_live_keys, per kv head of a
 * masked call, before it is packed). qmm_cancel stops each tile between key blocks. Plain C;
 * the ukernels carry the ISA.
 */
#include "attention.h"
#include "numerics.h"

#include <math.h>
#include <string.h>

typedef struct {
    const qmm_attn_call *c;
    const qmm_attn_ukernels *u;
    char *scratch;             /* T × per_thread bytes */
    size_t per_thread, kv_bytes;
    size_t live_bytes;         /* after the packed head: the live keys (Skv bytes), 0: not needed */
    /* a tile's rows within the thread's scratch (after the packed head): Q, S, P, O, the row
     * state (sq, m, l, α, ps: mqp floats each) and the engine's ws */
    size_t q_off, s_off, p_off, o_off, f_off, ws_off;
    size_t q_row, p_row;       /* bytes of a Q row and of a P row */
    int64_t mqp, dp, nblk;     /* mq rounded up to mr; O's row; key blocks */
    int64_t *packed;           /* [T] the (b · Hkv + hk) packed in the thread's kv buffer, -1: none */
    char *shared;              /* fewer kv heads than threads: every kv head packed once, here
                                  ([B · Hkv] of kv_bytes + live_bytes), before the tiles; else NULL */
    size_t shared_stride;
    int64_t tiles, group;      /* tiles per query head; query heads per kv head */
    int64_t threads;           /* the pool's */
    const qmm_context *ctx;    /* its cancel word, polled once per key block (qmm_cancelled) */
} attn_job;

static const char *at(const void *base, qmm_dtype t, int64_t elems) {
    return (const char *)base + elems * (int64_t)qmm_dtype_size(t);
}

static size_t p_size(qmm_attn_p_kind p) { return p == QMM_ATTN_P_F32 ? 4 : p == QMM_ATTN_P_BF16 ? 2 : 1; }

/* out row = O / l in out's dtype: 0 where l = 0 (every key masked; O may hold 0·NaN of a NaN v),
 * NaN where l is NaN */
static void store_row(const qmm_attn_call *c, const float *O, float l, void *row) {
    const int64_t D = c->D;
    const float inv = 1.0f / l;
    if (c->out_dtype == QMM_F32) {
        float *y = row;
        if (l == 0.0f) for (int64_t d = 0; d < D; d++) y[d] = 0.0f;
        else for (int64_t d = 0; d < D; d++) y[d] = O[d] * inv;
    } else if (c->out_dtype == QMM_BF16) {
        uint16_t *y = row;
        if (l == 0.0f) for (int64_t d = 0; d < D; d++) y[d] = 0;
        else for (int64_t d = 0; d < D; d++) y[d] = qmm_f32_to_bf16(O[d] * inv);
    } else {
        for (int64_t d = 0; d < D; d++) qmm_store_f(row, c->out_dtype, d, l == 0.0f ? 0.0f : O[d] * inv);
    }
}

/* One tile: rows (1..mq) query rows from q (token stride c->qs[2]) against the packed head kv;
 * mask: the first row's mask row at key 0 or NULL; out: the first output row; ts: the tile's
 * scratch. */
static void attn_tile(const attn_job *j, const char *kv, const void *q, int64_t rows, const char *mask, char *out,
                      char *ts) {
    const qmm_attn_call *c = j->c;
    const qmm_attn_ukernels *u = j->u;
    const int64_t D = c->D, nk = u->nk, mr = u->mr, mqp = j->mqp, dp = j->dp;
    const int64_t R = u->pad_rows ? qmm_round_up(rows, mr) : rows;
    const int64_t sg = 16 / mr * mr; /* the softmax's rows per call: whole qk groups, <= 16 */
    char *Q = ts + j->q_off, *P = ts + j->p_off;
    float *S = (float *)(ts + j->s_off), *O = (float *)(ts + j->o_off), *sq = (float *)(ts + j->f_off);
    float *m = sq + mqp, *l = m + mqp, *al = l + mqp, *ps = al + mqp;
    void *ws = ts + j->ws_off;
    const int64_t qes = (int64_t)qmm_dtype_size(c->q_dtype), oes = (int64_t)qmm_dtype_size(c->out_dtype);
    const int64_t mes = c->mask ? (int64_t)qmm_dtype_size(c->mask_dtype) : 0;
    for (int64_t i = 0; i < rows; i++) {
        u->pack_q(c, (const char *)q + i * c->qs[2] * qes, Q + (size_t)i * j->q_row, &sq[i]);
        m[i] = -INFINITY;
        l[i] = 0.0f;
    }
    if (R > rows) { /* pad_rows: the group's rows past the tile's last are zero */
        memset(Q + (size_t)rows * j->q_row, 0, (size_t)(R - rows) * j->q_row);
        memset(P + (size_t)rows * j->p_row, 0, (size_t)(R - rows) * j->p_row);
        for (int64_t i = rows; i < R; i++) sq[i] = 0.0f;
    }
    memset(O, 0, (size_t)(R * dp) * sizeof(float));
    const size_t kb = u->kb_bytes(D), vb = u->vb_bytes(D);
    const char *K = kv, *V = kv + (size_t)j->nblk * kb;
    for (int64_t blk = 0; blk < j->nblk; blk++) {
        if (qmm_cancelled(j->ctx)) return; /* qmm_cancel: the tile's rows of out stay as they are */
        const int64_t j0 = blk * nk, nv = c->Skv - j0 < nk ? c->Skv - j0 : nk;
        const char *mb = mask ? mask + j0 * c->ms[3] * mes : NULL; /* the first row's mask at key j0 */
        for (int64_t r = 0; r < rows; r += sg) { /* qk per group of mr rows, the softmax on up to sg rows */
            const int n = (int)(rows - r < sg ? rows - r : sg);
            for (int64_t i = r; i < r + n; i += mr)
                u->qk((int)(rows - i < mr ? rows - i : mr), Q + (size_t)i * j->q_row, sq + i, K + (size_t)blk * kb, D, S + i * nk);
            u->softmax(c, n, S + r * nk, nk, nv, mb ? mb + r * c->ms[2] * mes : NULL, P + (size_t)r * j->p_row, m + r, l + r,
                       al + r, ps + r);
        }
        for (int64_t r = 0; r < rows; r += mr)
            u->pv((int)(rows - r < mr ? rows - r : mr), P + (size_t)r * j->p_row, ps + r, al + r, V + (size_t)blk * vb, D,
                  O + r * dp, ws);
    }
    for (int64_t i = 0; i < rows; i++) store_row(c, O + i * dp, l[i], out + i * c->os[2] * oes);
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
    char *ts = kv + j->kv_bytes + j->live_bytes; /* the tile's scratch */
    if (j->shared) {
        kv = j->shared + (size_t)kvh * j->shared_stride;
        ts = j->scratch + (size_t)thread * j->per_thread;
    } else if (j->packed[thread] != kvh) {
        uint8_t *live = j->live_bytes ? (uint8_t *)kv + j->kv_bytes : NULL;
        if (live && !qmm_attn_live_keys(c, b, hk, live)) live = NULL; /* every key attended */
        j->u->pack_kv(c, at(c->k, c->kv_dtype, b * c->ks[0] + hk * c->ks[1]),
                      at(c->v, c->kv_dtype, b * c->vs[0] + hk * c->vs[1]), live, kv);
        j->packed[thread] = kvh;
    }
    const int64_t mq = j->u->mq, r0 = t * mq, rows = c->S - r0 < mq ? c->S - r0 : mq;
    const void *q = at(c->q, c->q_dtype, b * c->qs[0] + h * c->qs[1] + r0 * c->qs[2]);
    const char *mask = c->mask ? at(c->mask, c->mask_dtype, b * c->ms[0] + h * c->ms[1] + r0 * c->ms[2]) : NULL;
    char *out = (char *)c->out + (b * c->os[0] + h * c->os[1] + r0 * c->os[2]) * (int64_t)qmm_dtype_size(c->out_dtype);
    attn_tile(j, kv, q, rows, mask, out, ts);
}

/* the shared packing: task kvh = b · Hkv + hk packs that kv head into its slot */
static void attn_pack_task(int64_t kvh, int64_t n_tasks, int thread, void *arg) {
    (void)n_tasks; (void)thread;
    const attn_job *j = arg;
    const qmm_attn_call *c = j->c;
    const int64_t b = kvh / c->Hkv, hk = kvh % c->Hkv;
    char *kv = j->shared + (size_t)kvh * j->shared_stride;
    uint8_t *live = j->live_bytes ? (uint8_t *)kv + j->kv_bytes : NULL;
    if (live && !qmm_attn_live_keys(c, b, hk, live)) live = NULL;
    j->u->pack_kv(c, at(c->k, c->kv_dtype, b * c->ks[0] + hk * c->ks[1]), at(c->v, c->kv_dtype, b * c->vs[0] + hk * c->vs[1]),
                  live, kv);
}

static void attn_begin(int thread, void *arg) { (void)thread; ((const attn_job *)arg)->u->begin(); }
static void attn_end(int thread, void *arg) { (void)thread; ((const attn_job *)arg)->u->end(); }

/* a mask row's keys (n of them, stride st elements) that it attends → live[j] = 1 */
static void live_row(const qmm_attn_call *c, const char *row, int64_t n, int64_t st, uint8_t *live) {
    switch (c->mask_dtype) { /* one loop per dtype: attend = nonzero (bool), not −inf (additive) */
    case QMM_U8: {
        const uint8_t *x = (const uint8_t *)row;
        for (int64_t j = 0; j < n; j++) live[j] |= x[j * st] != 0;
        break;
    }
    case QMM_F32: {
        const uint32_t *x = (const uint32_t *)row;
        for (int64_t j = 0; j < n; j++) live[j] |= x[j * st] != 0xff800000u;
        break;
    }
    default: { /* f16, bf16: −inf is 0xfc00 and 0xff80 */
        const uint16_t *x = (const uint16_t *)row, ninf = c->mask_dtype == QMM_BF16 ? 0xff80u : 0xfc00u;
        for (int64_t j = 0; j < n; j++) live[j] |= x[j * st] != ninf;
        break;
    }
    }
}

int64_t qmm_attn_live_keys(const qmm_attn_call *c, int64_t b, int64_t hk, uint8_t *live) {
    const int64_t group = c->H / c->Hkv, mes = (int64_t)qmm_dtype_size(c->mask_dtype);
    const int64_t nh = c->ms[1] ? group : 1, nr = c->ms[2] ? c->S : 1; /* the distinct rows */
    memset(live, 0, (size_t)c->Skv);
    for (int64_t g = 0; g < nh; g++)
        for (int64_t i = 0; i < nr; i++) {
            const char *row = (const char *)c->mask + (b * c->ms[0] + (hk * group + g) * c->ms[1] + i * c->ms[2]) * mes;
            live_row(c, row, c->Skv, c->ms[3], live);
            if ((i & 15) == 15 && !memchr(live, 0, (size_t)c->Skv)) return 0; /* every key live */
        }
    int64_t dead = 0;
    for (int64_t j = 0; j < c->Skv; j++) dead += !live[j];
    return dead;
}

void qmm_attn_key_mean(const qmm_attn_call *c, const void *k, const uint8_t *live, float *mean) {
    const int64_t D = c->D;
    const size_t es = qmm_dtype_size(c->kv_dtype);
    double sum[QMM_ATTN_MAX_D] = {0};
    float row[QMM_ATTN_MAX_D];
    int64_t n = 0;
    for (int64_t j = 0; j < c->Skv; j++) {
        if (live && !live[j]) continue; /* no row attends it */
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

qmm_status qmm_attention_run(qmm_context *ctx, const qmm_attn_call *c, const qmm_attn_ukernels *u) {
    const int T = qmm_pool_threads(ctx->pool);
    const int64_t D = c->D, mqp = qmm_round_up(u->mq, u->mr), dp = qmm_round_up(D, u->dalign);
    attn_job j = {.c = c, .u = u, .mqp = mqp, .dp = dp, .nblk = c->Skv / u->nk + (c->Skv % u->nk != 0), .ctx = ctx};
    const size_t kvb = scratch_part(qmm_attn_blocks_bytes(c->Skv, u->nk, u->kb_bytes(D) + u->vb_bytes(D),
                                                              u->extra_bytes ? u->extra_bytes(D) : 0));
    /* a masked call's live keys, for the engines whose packing forms numbers across keys */
    const size_t lvb = c->mask && u->live_keys ? scratch_part((size_t)c->Skv) : 0;
    QMM_RETURN_IF(kvb == SIZE_MAX || lvb == SIZE_MAX, QMM_ERR_UNSUPPORTED,
                  "attention: a kv head of Skv=%lld keys of D=%lld packs into more than 2^40 bytes per thread",
                  (long long)c->Skv, (long long)c->D);
    /* a tile's rows: D <= QMM_ATTN_MAX_D and mq, nk, ws small (no overflow) */
    j.q_row = u->q_bytes(D);
    j.p_row = (size_t)u->nk * p_size(u->p);
    size_t tb = 0;
    j.q_off = tb; tb += scratch_part((size_t)mqp * j.q_row);
    j.s_off = tb; tb += scratch_part((size_t)(mqp * u->nk) * sizeof(float));
    j.p_off = tb; tb += scratch_part((size_t)mqp * j.p_row);
    j.o_off = tb; tb += scratch_part((size_t)(mqp * dp) * sizeof(float));
    j.f_off = tb; tb += scratch_part((size_t)(5 * mqp) * sizeof(float));
    j.ws_off = tb; tb += scratch_part(u->ws_bytes);
    QMM_RETURN_IF(kvb + lvb + tb > QMM_ATTN_MAX_SCRATCH, QMM_ERR_UNSUPPORTED,
                  "attention: a kv head of Skv=%lld keys of D=%lld packs into more than 2^40 bytes per thread",
                  (long long)c->Skv, (long long)c->D);
    j.kv_bytes = kvb;
    j.live_bytes = lvb;
    /* fewer kv heads than threads (one head of a long video, say): each kv head is packed once,
     * into a slot every thread reads, instead of once per thread (T copies of the same head) */
    const int64_t nkv = c->B * c->Hkv;
    const int shared = nkv < T;
    j.per_thread = shared ? tb : kvb + lvb + tb;
    j.shared_stride = kvb + lvb;
    size_t all, sh = 0;
    QMM_RETURN_IF(!qmm_mul_ok(j.per_thread, (size_t)T, &all) || all > SIZE_MAX - 64 * (size_t)T ||
                      (shared && (!qmm_mul_ok(j.shared_stride, (size_t)nkv, &sh) || sh > SIZE_MAX - all - 64 * (size_t)T)),
                  QMM_ERR_UNSUPPORTED, "attention: scratch of %d threads overflows", T);
    void *p;
    QMM_FORWARD_IF_ERROR(qmm_context_scratch(ctx, QMM_SCRATCH_ENGINE, sh + all + (size_t)T * sizeof(int64_t), &p));
    j.shared = shared ? (char *)p : NULL;
    j.scratch = (char *)p + sh;
    j.packed = (int64_t *)(j.scratch + all);
    for (int i = 0; i < T; i++) j.packed[i] = -1;
    j.tiles = (c->S + u->mq - 1) / u->mq;
    j.group = c->H / c->Hkv;
    j.threads = T;
    if (shared) qmm_pool_run(ctx->pool, nkv, attn_pack_task, &j);
    qmm_pool_run_bracketed(ctx->pool, c->B * c->H * j.tiles, attn_task, u->begin ? attn_begin : NULL,
                           u->end ? attn_end : NULL, &j);
    return qmm_cancel_status(ctx);
}
