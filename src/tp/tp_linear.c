/*
 * tp_linear.c — column- and row-parallel INT8 and W4A8 linear layers over a qmm_comm (SPEC §6),
 * built on the public API of qmm.h (and qmm_w4a8_desc_check, qmm_weight_adopt); bit-identical to
 * one process with the same engine choice. A W4A8 rank's slice is a copy of its codes and group
 * scales at the slice's width, borrowed by its local weight (make_local_w4a8).
 *
 *   column: W_r = rows [p*P + lo, p*P + hi) of each part p (P = N / parts); y_r = linear(x, W_r)
 *           [M, parts*N_r]; all-gather the ranks' blocks and place each part's columns.
 *   row:    W_r = columns [lo, hi) of W (all N rows, all scales, the bias);
 *           amax_r = qmm_activation_amax(x_r)  → all-reduce MAX → s = qmm_scale_from_amax(amax)
 *           acc_r  = qmm_linear(x_r, s, I32)   → all-reduce SUM → y = qmm_linear_epilogue(acc, s)
 *           on every rank. Exact: the amax is a max of the same rounded values, every element is
 *           quantized with the same s_r, int32 sums are exact, and the epilogue runs once.
 *
 * Every rank takes part in every collective, also after a local failure; a fixed-size
 * agreement record (tp_agree) precedes the collectives whose sizes depend on the call, and the
 * GEMM's status rides in R extra int32 slots of the SUM (so a late failure needs no extra round).
 */
#include "tp_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct qmm_tp_linear {
    qmm_comm *comm;
    char name[128];
    qmm_tp_kind kind;
    int64_t N, K;           /* full shape */
    int parts;
    int64_t width;          /* split dimension per part: N / parts (column) or K (row) */
    int64_t *off;           /* [size + 1] */
    qmm_weight *local;
    tp_rec *recs;           /* [size] agreement scratch */
    size_t *counts, *displs;/* [size] all-gather scratch */
    void *buf0, *buf1, *buf2; /* grow-only scratch: per-call data */
    size_t bytes0, bytes1, bytes2;
};

/* ---------------------------------------------------------------- shared helpers */
qmm_status tp_grow(void **buf, size_t *have, size_t need) {
    if (need <= *have) return QMM_OK;
    void *p = qmm_aligned_alloc(need);
    QMM_RETURN_IF(!p, QMM_ERR_OUT_OF_MEMORY, "tensor parallel: out of memory (%zu bytes of scratch)", need);
    qmm_aligned_free(*buf);
    *buf = p;
    *have = need;
    return QMM_OK;
}

void tp_rec_status(tp_rec *r, qmm_status st) {
    r->status = (int32_t)st;
    if (st != QMM_OK) snprintf(r->msg, sizeof r->msg, "%s", qmm_last_error());
    else r->msg[0] = 0;
}

qmm_status tp_agree(qmm_comm *comm, const char *layer, const char *what, const tp_rec *rec, tp_rec *all,
                    size_t *cnt_scratch, size_t *dsp_scratch) {
    size_t *cnt = cnt_scratch, *dsp = dsp_scratch;
    if (!cnt || !dsp) {
        cnt = malloc((size_t)comm->size * sizeof *cnt);
        dsp = malloc((size_t)comm->size * sizeof *dsp);
    }
    if (!cnt || !dsp) { /* cannot even agree: the transport will see the missing rank */
        free(cnt);
        free(dsp);
        return qmm_fail(QMM_ERR_OUT_OF_MEMORY, "layer %s: %s: out of memory", layer, what);
    }
    for (int r = 0; r < comm->size; r++) {
        cnt[r] = sizeof(tp_rec);
        dsp[r] = (size_t)r * sizeof(tp_rec);
    }
    qmm_status st = comm->allgather(comm, rec, all, cnt, dsp);
    if (cnt != cnt_scratch) {
        free(cnt);
        free(dsp);
    }
    if (st != QMM_OK) return st;
    for (int r = 0; r < comm->size; r++) {
        const tp_rec *a = &all[r];
        if (a->status != QMM_OK)
            return qmm_fail(QMM_ERR_DIST, "layer %s: %s: rank %d of %d failed (%s): %.*s", layer, what, r, comm->size,
                            qmm_status_name((qmm_status)a->status), (int)sizeof a->msg, a->msg);
    }
    const tp_rec *z = &all[0];
    for (int r = 1; r < comm->size; r++) {
        const tp_rec *a = &all[r];
#define TP_SAME(f)                                                                                              \
    if (a->f != z->f)                                                                                           \
        return qmm_fail(QMM_ERR_DIST, "layer %s: %s: rank %d disagrees with rank 0: %s = %lld vs %lld (mismatched " \
                        "shard, shape or call)", layer, what, r, #f, (long long)a->f, (long long)z->f);
        TP_SAME(kind) TP_SAME(parts) TP_SAME(N) TP_SAME(K) TP_SAME(gs) TP_SAME(per_channel) TP_SAME(has_bias)
        TP_SAME(unit) TP_SAME(split_hash) TP_SAME(M) TP_SAME(x_dtype) TP_SAME(y_dtype) TP_SAME(act) TP_SAME(flags)
        TP_SAME(format) TP_SAME(group)
#undef TP_SAME
        if (a->fingerprint != z->fingerprint && (!a->fingerprint || !z->fingerprint))
            return qmm_fail(QMM_ERR_DIST, "layer %s: %s: rank %d %s the weight fingerprint check and rank 0 %s (set "
                            "no_fingerprint the same way on every rank)", layer, what, r,
                            a->fingerprint ? "runs" : "skips", z->fingerprint ? "runs" : "skips");
        if (a->fingerprint != z->fingerprint)
            return qmm_fail(QMM_ERR_DIST, "layer %s: %s: rank %d was handed a different weight than rank 0 (same shape, "
                            "but the fingerprint of scales, bias and sampled weight bytes is %016llx vs %016llx): "
                            "ranks loaded different checkpoints or seeds", layer, what, r,
                            (unsigned long long)a->fingerprint, (unsigned long long)z->fingerprint);
    }
    return QMM_OK;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

int64_t tp_fingerprint(const qmm_weight_desc *d) {
    const int fb = d->bias_dtype == QMM_F32 || d->bias_dtype == QMM_F16 || d->bias_dtype == QMM_BF16;
    const int64_t ld = d->ld ? d->ld : d->K;
    const int64_t head[5] = {d->N, d->K, d->n_scale, d->convrot_gs, d->bias ? (int64_t)d->bias_dtype : -1};
    uint64_t h = fnv(1469598103934665603ull, head, sizeof head);
    h = fnv(h, d->scale, (size_t)d->n_scale * sizeof(float));
    if (d->bias && fb) h = fnv(h, d->bias, (size_t)d->N * qmm_dtype_size(d->bias_dtype));
    const int64_t rows = d->N < 64 ? d->N : 64, span = d->K < 32 ? d->K : 32;
    const int64_t at[3] = {0, (d->K - span) / 2, d->K - span};
    for (int64_t i = 0; i < rows; i++) {
        const int64_t n = rows > 1 ? i * (d->N - 1) / (rows - 1) : 0;
        for (int j = 0; j < 3; j++) h = fnv(h, d->data + n * ld + at[j], (size_t)span);
    }
    return (int64_t)(h >> 1) | 1;
}

/* the first, middle and last (up to) 32 bytes of a row of n bytes */
static uint64_t fnv_spans(uint64_t h, const uint8_t *row, int64_t n) {
    const int64_t span = n < 32 ? n : 32, at[3] = {0, (n - span) / 2, n - span};
    for (int j = 0; j < 3; j++) h = fnv(h, row + at[j], (size_t)span);
    return h;
}

int64_t tp_fingerprint_layer(const qmm_tp_layer *l) {
    if (l->format != QMM_TP_W4A8) return tp_fingerprint(&l->int8);
    const qmm_w4a8_desc *d = &l->w4a8;
    const int64_t G = d->K / d->group_size, rb = d->K / 8 * d->bits;
    const size_t ss = d->s_rel_dtype == QMM_F32 ? 4 : 1;
    const int64_t head[8] = {d->N, d->K, d->bits, d->group_size, (int64_t)d->s_rel_dtype, d->convrot_gs,
                             d->bias ? (int64_t)d->bias_dtype : -1, d->codebook ? 16 : 0};
    uint64_t h = fnv(0x9e3779b97f4a7c15ull, head, sizeof head);
    h = fnv(h, d->s_channel, (size_t)d->N * sizeof(float));
    if (d->codebook) h = fnv(h, d->codebook, 16 * sizeof(float));
    if (d->bias) h = fnv(h, d->bias, (size_t)d->N * qmm_dtype_size(d->bias_dtype));
    const int64_t rows = d->N < 64 ? d->N : 64;
    for (int64_t i = 0; i < rows; i++) {
        const int64_t n = rows > 1 ? i * (d->N - 1) / (rows - 1) : 0;
        h = fnv_spans(h, d->codes + n * rb, rb);
        h = fnv_spans(h, (const uint8_t *)d->s_rel + (size_t)(n * G) * ss, G * (int64_t)ss);
    }
    return (int64_t)(h >> 1) | 1;
}

int64_t tp_lcm(int64_t a, int64_t b) {
    int64_t x = a, y = b;
    while (y) {
        const int64_t t = x % y;
        x = y;
        y = t;
    }
    return a / x * b;
}

int64_t tp_row_unit(const qmm_tp_layer *l) {
    const int64_t g = tp_layer_gs(l) > 0 ? tp_layer_gs(l) : 1;
    if (l->format != QMM_TP_W4A8) return g;
    return tp_lcm(tp_lcm(g, l->w4a8.group_size), l->w4a8.bits == 6 ? 32 : 16);
}

int64_t tp_split_hash(const int64_t *split, int size) {
    if (!split) return 0;
    uint64_t h = 1469598103934665603ull;
    for (int r = 0; r <= size; r++) h = (h ^ (uint64_t)split[r]) * 1099511628211ull;
    return (int64_t)(h >> 1) | 1;
}

qmm_status tp_split(const char *layer, const char *dim, int64_t width, int64_t unit, const int64_t *split, int size,
                    int64_t *off) {
    if (split) {
        QMM_RETURN_IF(split[0] != 0 || split[size] != width, QMM_ERR_INVALID_ARGUMENT,
                      "layer %s: split of %s=%lld must run from 0 to %lld (got %lld..%lld)", layer, dim,
                      (long long)width, (long long)width, (long long)split[0], (long long)split[size]);
        for (int r = 0; r < size; r++)
            QMM_RETURN_IF(split[r + 1] <= split[r], QMM_ERR_INVALID_ARGUMENT,
                          "layer %s: rank %d gets an empty or negative %s-slice [%lld, %lld)", layer, r, dim,
                          (long long)split[r], (long long)split[r + 1]);
        memcpy(off, split, (size_t)(size + 1) * sizeof *off);
        return QMM_OK;
    }
    QMM_RETURN_IF(unit < 1 || width % unit, QMM_ERR_UNSUPPORTED,
                  "layer %s: %s=%lld is not a multiple of the split unit %lld", layer, dim, (long long)width,
                  (long long)unit);
    int64_t units = width / unit;
    QMM_RETURN_IF(units < size, QMM_ERR_UNSUPPORTED,
                  "layer %s: %s=%lld in units of %lld gives %lld slices for %d ranks (each rank needs one)", layer, dim,
                  (long long)width, (long long)unit, (long long)units, size);
    for (int r = 0; r <= size; r++) off[r] = unit * (units * r / size);
    return QMM_OK;
}

/* ---------------------------------------------------------------- create */
qmm_tp_options qmm_tp_options_default(void) {
    qmm_tp_options o;
    memset(&o, 0, sizeof o);
    o.kind = QMM_TP_COLUMN;
    o.parts = 1;
    return o;
}

void qmm_tp_linear_destroy(qmm_tp_linear *L) {
    if (!L) return;
    qmm_weight_destroy(L->local);
    free(L->off);
    free(L->recs);
    free(L->counts);
    free(L->displs);
    qmm_aligned_free(L->buf0);
    qmm_aligned_free(L->buf1);
    qmm_aligned_free(L->buf2);
    free(L);
}

/* Local checks of an int8 desc (before the first collective). */
static qmm_status check_int8(const qmm_weight_desc *d, const char *nm) {
    QMM_RETURN_IF(d->N <= 0 || d->K <= 0, QMM_ERR_INVALID_ARGUMENT, "layer %s: shape [%lld, %lld]", nm,
                  (long long)d->N, (long long)d->K);
    /* the limits of qmm_weight_create_int8, on the FULL shape, before anything is allocated or
     * read (the local slice and the gathered rows of several parts are sized from them) */
    QMM_RETURN_IF(d->N > ((int64_t)1 << 31) || d->K > ((int64_t)1 << 31), QMM_ERR_UNSUPPORTED,
                  "layer %s: shape [%lld, %lld] too large (each dimension <= 2^31)", nm, (long long)d->N,
                  (long long)d->K);
    QMM_RETURN_IF(d->N > QMM_MAX_WEIGHT_ELEMS / d->K, QMM_ERR_UNSUPPORTED,
                  "layer %s: shape [%lld, %lld] too large (N*K <= 2^36 elements)", nm, (long long)d->N,
                  (long long)d->K);
    QMM_RETURN_IF(d->ld > INT64_MAX / d->N, QMM_ERR_UNSUPPORTED,
                  "layer %s [%lld, %lld]: row stride %lld too large (N*ld bytes overflow)", nm, (long long)d->N,
                  (long long)d->K, (long long)d->ld);
    QMM_RETURN_IF(!d->data || !d->scale, QMM_ERR_INVALID_ARGUMENT, "layer %s: %s is NULL", nm,
                  !d->data ? "data" : "scale");
    QMM_RETURN_IF(d->ld && d->ld < d->K, QMM_ERR_INVALID_ARGUMENT, "layer %s: row stride %lld < K=%lld", nm,
                  (long long)d->ld, (long long)d->K);
    QMM_RETURN_IF(d->n_scale != 1 && d->n_scale != d->N, QMM_ERR_INVALID_ARGUMENT,
                  "layer %s: %lld weight scales (needs 1 or N=%lld)", nm, (long long)d->n_scale, (long long)d->N);
    return QMM_OK;
}

/* Local checks of the arguments (before the first collective): the full layer's fields (a W4A8
 * desc as qmm_weight_borrow_w4a8 checks them, reading none of its memory) and the options. */
static qmm_status check_local(const qmm_tp_layer *l, const qmm_tp_options *o, const char *nm) {
    QMM_RETURN_IF(!l, QMM_ERR_INVALID_ARGUMENT, "tensor parallel: weight desc is NULL");
    QMM_RETURN_IF(l->format != QMM_TP_INT8 && l->format != QMM_TP_W4A8, QMM_ERR_INVALID_ARGUMENT,
                  "layer %s: tensor-parallel layer format %d unknown (QMM_TP_INT8 or QMM_TP_W4A8)", nm, (int)l->format);
    if (l->format == QMM_TP_W4A8) QMM_FORWARD_IF_ERROR(qmm_w4a8_desc_check(&l->w4a8));
    else QMM_FORWARD_IF_ERROR(check_int8(&l->int8, nm));
    const int64_t N = tp_layer_N(l);
    const int full_precision = l->format == QMM_TP_W4A8 ? l->w4a8.full_precision : l->int8.full_precision;
    QMM_RETURN_IF(o->kind != QMM_TP_COLUMN && o->kind != QMM_TP_ROW, QMM_ERR_INVALID_ARGUMENT,
                  "layer %s: tensor-parallel kind %d unknown", nm, (int)o->kind);
    int parts = o->parts > 1 ? o->parts : 1;
    QMM_RETURN_IF(o->kind == QMM_TP_ROW && parts != 1, QMM_ERR_INVALID_ARGUMENT,
                  "layer %s: parts=%d is for column-parallel layers", nm, parts);
    QMM_RETURN_IF(N % parts, QMM_ERR_INVALID_ARGUMENT, "layer %s: N=%lld is not %d equal parts", nm,
                  (long long)N, parts);
    QMM_RETURN_IF(full_precision, QMM_ERR_UNSUPPORTED,
                  "layer %s: full_precision layers run on float engines; tensor parallelism needs int8 engines", nm);
    return QMM_OK;
}

/* the local weight's name: the layer's, the rank and its slice */
static void local_name(const qmm_tp_linear *L, char *nm, size_t n) {
    snprintf(nm, n, "%s[rank %d/%d %s %lld:%lld]", L->name, L->comm->rank, L->comm->size,
             L->kind == QMM_TP_ROW ? "K" : "N", (long long)L->off[L->comm->rank],
             (long long)L->off[L->comm->rank + 1]);
}

static size_t up64(size_t n) { return (n + 63) & ~(size_t)63; }

/* This rank's slice of a W4A8 layer, copied into one block its local weight adopts and borrows
 * (the same storage at the slice's width, qmm_w4a8_desc): column, every part's rows [lo, hi) whole;
 * row, every row's k in [lo, hi) — its low nibbles, its top-2-bit plane at 6 bits, its groups'
 * s_rel. Reads only those bytes of the codes and s_rel. */
static qmm_status make_local_w4a8(qmm_context *ctx, qmm_tp_linear *L, const qmm_w4a8_desc *d) {
    const int64_t lo = L->off[L->comm->rank], hi = L->off[L->comm->rank + 1], K = d->K, gsz = d->group_size;
    const int row = L->kind == QMM_TP_ROW, six = d->bits == 6;
    const int64_t nl = row ? d->N : (int64_t)L->parts * (hi - lo), kl = row ? hi - lo : K, P = L->width;
    const int64_t rb = K / 8 * d->bits, rbl = kl / 8 * d->bits, G = K / gsz, Gl = kl / gsz;
    const size_t ss = d->s_rel_dtype == QMM_F32 ? 4 : 1, bs = d->bias ? qmm_dtype_size(d->bias_dtype) : 0;
    /* nl <= N and nl * kl <= N * K <= QMM_MAX_WEIGHT_ELEMS (qmm_w4a8_desc_check): no product overflows */
    const size_t a = up64((size_t)(nl * rbl)), b = up64((size_t)(nl * Gl) * ss), c = up64((size_t)nl * sizeof(float)),
                 e = d->codebook ? up64(16 * sizeof(float)) : 0, f = up64((size_t)nl * bs);
    char *blk = qmm_aligned_alloc(a + b + c + e + f);
    QMM_RETURN_IF(!blk, QMM_ERR_OUT_OF_MEMORY, "layer %s: out of memory for the local slice (%zu bytes)", L->name,
                  a + b + c + e + f);
    uint8_t *codes = (uint8_t *)blk;
    char *srel = blk + a, *bias = bs ? blk + a + b + c + e : NULL;
    float *sch = (float *)(void *)(blk + a + b), *cb = d->codebook ? (float *)(void *)(blk + a + b + c) : NULL;
    const uint8_t *sr = d->s_rel;
    for (int64_t j = 0; j < nl; j++) {
        const int64_t n = row ? j : (j / (hi - lo)) * P + lo + j % (hi - lo); /* part j / nr, row lo + j % nr */
        const uint8_t *src = d->codes + n * rb;
        uint8_t *dst = codes + j * rbl;
        if (row) {
            memcpy(dst, src + lo / 2, (size_t)(kl / 2));
            if (six) memcpy(dst + kl / 2, src + K / 2 + lo / 4, (size_t)(kl / 4));
            memcpy(srel + (size_t)(j * Gl) * ss, sr + (size_t)(n * G + lo / gsz) * ss, (size_t)Gl * ss);
        } else {
            memcpy(dst, src, (size_t)rb);
            memcpy(srel + (size_t)(j * G) * ss, sr + (size_t)(n * G) * ss, (size_t)G * ss);
        }
        sch[j] = d->s_channel[n];
        if (bs) memcpy(bias + (size_t)j * bs, (const char *)d->bias + (size_t)n * bs, bs);
    }
    if (cb) memcpy(cb, d->codebook, 16 * sizeof(float));
    char nm[160];
    local_name(L, nm, sizeof nm);
    qmm_w4a8_desc w = *d;
    w.name = nm;
    w.N = nl;
    w.K = kl;
    w.codes = codes;
    w.codes_bytes = nl * rbl;
    w.s_rel = srel;
    w.n_s_rel = nl * Gl;
    w.codebook = cb;
    w.s_channel = sch;
    w.bias = bias;
    const qmm_status st = qmm_weight_borrow_w4a8(ctx, &w, &L->local);
    if (st == QMM_OK) qmm_weight_adopt(L->local, blk, a + b + c + e + f);
    else qmm_aligned_free(blk);
    return st;
}

/* Creates this rank's packed slice; reads only its rows/columns of d->data. */
static qmm_status make_local_int8(qmm_context *ctx, qmm_tp_linear *L, const qmm_weight_desc *d) {
    const int64_t ld = d->ld ? d->ld : d->K, lo = L->off[L->comm->rank], hi = L->off[L->comm->rank + 1];
    char nm[160];
    local_name(L, nm, sizeof nm);
    qmm_weight_desc w = *d;
    w.name = nm;
    if (L->kind == QMM_TP_ROW) { /* all N rows, columns [lo, hi): a view with the full stride */
        w.K = hi - lo;
        w.data = d->data + lo;
        w.ld = ld;
        return qmm_weight_create_int8(ctx, &w, &L->local);
    }
    const int64_t nr = hi - lo, P = L->width, rows = (int64_t)L->parts * nr;
    if (L->parts == 1) { /* rows [lo, hi): a view */
        w.N = nr;
        w.data = d->data + lo * ld;
        w.ld = ld;
        w.scale = d->n_scale == 1 ? d->scale : d->scale + lo;
        w.n_scale = d->n_scale == 1 ? 1 : nr;
        w.bias = d->bias ? (const char *)d->bias + (size_t)lo * qmm_dtype_size(d->bias_dtype) : NULL;
        return qmm_weight_create_int8(ctx, &w, &L->local);
    }
    /* several parts: gather rows [p*P + lo, p*P + hi) of each part (create copies them again) */
    size_t bs = d->bias ? qmm_dtype_size(d->bias_dtype) : 0, nd = 0, nb = 0;
    /* rows <= N and N*K <= QMM_MAX_WEIGHT_ELEMS (check_local): the products fit; checked anyway */
    const int sized = qmm_mul_ok((size_t)rows, (size_t)d->K, &nd) && qmm_mul_ok((size_t)rows, bs ? bs : 1, &nb);
    int8_t *data = sized ? malloc(nd) : NULL;
    float *scale = sized ? malloc((size_t)rows * sizeof(float)) : NULL;
    char *bias = sized && bs ? malloc(nb) : NULL;
    qmm_status st = QMM_OK;
    if (!sized) {
        st = qmm_fail(QMM_ERR_UNSUPPORTED, "layer %s: local slice of %lld rows x K=%lld too large", L->name,
                      (long long)rows, (long long)d->K);
    } else if (!data || !scale || (bs && !bias)) {
        st = qmm_fail(QMM_ERR_OUT_OF_MEMORY, "layer %s: out of memory for the local slice", L->name);
    } else {
        for (int p = 0; p < L->parts; p++)
            for (int64_t i = 0; i < nr; i++) {
                int64_t n = p * P + lo + i, j = p * nr + i;
                memcpy(data + j * d->K, d->data + n * ld, (size_t)d->K);
                scale[j] = d->scale[d->n_scale == 1 ? 0 : n];
                if (bs) memcpy(bias + (size_t)j * bs, (const char *)d->bias + (size_t)n * bs, bs);
            }
        w.N = rows;
        w.data = data;
        w.ld = d->K;
        w.scale = scale;
        w.n_scale = d->n_scale == 1 ? 1 : rows;
        w.bias = bias;
        st = qmm_weight_create_int8(ctx, &w, &L->local);
    }
    free(data);
    free(scale);
    free(bias);
    return st;
}

static qmm_status make_local(qmm_context *ctx, qmm_tp_linear *L, const qmm_tp_layer *l) {
    return l->format == QMM_TP_W4A8 ? make_local_w4a8(ctx, L, &l->w4a8) : make_local_int8(ctx, L, &l->int8);
}

qmm_status qmm_tp_linear_create(qmm_context *ctx, qmm_comm *comm, const qmm_weight_desc *d,
                                const qmm_tp_options *opt, qmm_tp_linear **out) {
    qmm_tp_layer l;
    memset(&l, 0, sizeof l);
    l.format = QMM_TP_INT8;
    if (d) l.int8 = *d;
    return qmm_tp_linear_create_layer(ctx, comm, d ? &l : NULL, opt, out);
}

qmm_status qmm_tp_linear_create_layer(qmm_context *ctx, qmm_comm *comm, const qmm_tp_layer *d,
                                      const qmm_tp_options *opt, qmm_tp_linear **out) {
    QMM_RETURN_IF(!out || !comm, QMM_ERR_INVALID_ARGUMENT, "qmm_tp_linear_create: %s is NULL", !out ? "out" : "comm");
    *out = NULL;
    qmm_tp_options o = opt ? *opt : qmm_tp_options_default();
    if (o.parts < 1) o.parts = 1;
    const int fmt_ok = d && (d->format == QMM_TP_INT8 || d->format == QMM_TP_W4A8);
    const char *nm = fmt_ok ? tp_layer_name(d) : "(unnamed)";
    qmm_tp_linear *L = calloc(1, sizeof *L);
    QMM_RETURN_IF(!L, QMM_ERR_OUT_OF_MEMORY, "layer %s: out of memory", nm);
    L->comm = comm;
    snprintf(L->name, sizeof L->name, "%s", nm);
    L->kind = o.kind;
    L->parts = o.parts;
    L->off = calloc((size_t)comm->size + 1, sizeof *L->off);
    L->recs = calloc((size_t)comm->size, sizeof *L->recs);
    L->counts = calloc((size_t)comm->size, sizeof *L->counts);
    L->displs = calloc((size_t)comm->size, sizeof *L->displs);
    if (!L->off || !L->recs || !L->counts || !L->displs) { /* nothing collective can work without these */
        qmm_tp_linear_destroy(L);
        return qmm_fail(QMM_ERR_OUT_OF_MEMORY, "layer %s: out of memory", nm);
    }
    /* 1. local checks, then agree on status and shapes */
    tp_rec rec;
    memset(&rec, 0, sizeof rec);
    qmm_status st = ctx ? check_local(d, &o, nm)
                        : qmm_fail(QMM_ERR_INVALID_ARGUMENT, "layer %s: qmm_tp_linear_create: ctx is NULL", nm);
    if (st == QMM_OK) {
        const int w4 = d->format == QMM_TP_W4A8;
        rec.N = tp_layer_N(d);
        rec.K = tp_layer_K(d);
        rec.gs = tp_layer_gs(d);
        rec.per_channel = w4 || d->int8.n_scale != 1;
        rec.has_bias = (w4 ? d->w4a8.bias : d->int8.bias) != NULL;
        /* W4A8: the bits, whether s_rel is F32 (16) and whether a codebook is given (32) */
        rec.format = w4 ? d->w4a8.bits | (d->w4a8.s_rel_dtype == QMM_F32) << 4 | (d->w4a8.codebook != NULL) << 5 : 0;
        rec.group = w4 ? d->w4a8.group_size : 0;
        rec.fingerprint = o.no_fingerprint ? 0 : tp_fingerprint_layer(d);
    }
    rec.kind = o.kind;
    rec.parts = o.parts;
    rec.unit = o.unit;
    rec.split_hash = tp_split_hash(o.split, comm->size);
    tp_rec_status(&rec, st);
    st = tp_agree(comm, nm, o.kind == QMM_TP_ROW ? "row-parallel create" : "column-parallel create", &rec, L->recs,
                  L->counts, L->displs);
    if (st != QMM_OK) {
        qmm_tp_linear_destroy(L);
        return st;
    }
    /* 2. the split: deterministic, so the same answer (or error) on every rank */
    L->N = tp_layer_N(d);
    L->K = tp_layer_K(d);
    L->width = o.kind == QMM_TP_ROW ? L->K : L->N / o.parts;
    const int g = tp_layer_gs(d), w4 = d->format == QMM_TP_W4A8;
    const int64_t ku = tp_row_unit(d); /* what a row-parallel K-slice must be a multiple of */
    int64_t unit = o.unit > 0 ? o.unit : (o.kind == QMM_TP_ROW ? ku : 1);
    st = tp_split(nm, o.kind == QMM_TP_ROW ? "K" : "N", L->width, unit, o.split, comm->size, L->off);
    /* the int32 partials are summed across ranks: the FULL K must fit the int32 accumulator, as it
     * must for one process (whose int8 engines refuse K > QMM_MAX_INT8_K and fall back to float) */
    if (st == QMM_OK && o.kind == QMM_TP_ROW && L->K > QMM_MAX_INT8_K)
        st = qmm_fail(QMM_ERR_UNSUPPORTED,
                      "layer %s [%lld, %lld]: row-parallel K=%lld > %d overflows the int32 partial sums (run it "
                      "column-parallel, or on one process where it falls back to a float engine)",
                      nm, (long long)L->N, (long long)L->K, (long long)L->K, QMM_MAX_INT8_K);
    for (int r = 0; st == QMM_OK && o.kind == QMM_TP_ROW && ku > 1 && r < comm->size; r++) {
        if (!(L->off[r] % ku) && !(L->off[r + 1] % ku)) continue;
        char why[160];
        if (w4)
            snprintf(why, sizeof why, "%lld, the lcm of the convrot group %d, the s_rel group %d and the %d k of a "
                     "W%dA8 storage step", (long long)ku, g, d->w4a8.group_size, d->w4a8.bits == 6 ? 32 : 16,
                     d->w4a8.bits);
        else
            snprintf(why, sizeof why, "the convrot group g=%d", g);
        st = qmm_fail(QMM_ERR_UNSUPPORTED,
                      "layer %s [%lld, %lld]: row-parallel rank %d K-slice [%lld, %lld) (width %lld) is not a "
                      "multiple of %s (each rank's K-slice must hold whole groups)",
                      nm, (long long)L->N, (long long)L->K, r, (long long)L->off[r], (long long)L->off[r + 1],
                      (long long)(L->off[r + 1] - L->off[r]), why);
    }
    if (st != QMM_OK) {
        qmm_tp_linear_destroy(L);
        return st;
    }
    /* 3. pack the local slice; agree (a local out-of-memory must not leave the others waiting) */
    st = make_local(ctx, L, d);
    memset(rec.msg, 0, sizeof rec.msg);
    tp_rec_status(&rec, st);
    st = tp_agree(comm, nm, "packing the local slice", &rec, L->recs, L->counts, L->displs);
    if (st != QMM_OK) {
        qmm_tp_linear_destroy(L);
        return st;
    }
    *out = L;
    return QMM_OK;
}

void qmm_tp_linear_get_info(const qmm_tp_linear *L, qmm_tp_linear_info *out) {
    if (!out) return;
    memset(out, 0, sizeof *out);
    if (!L) return;
    out->kind = L->kind;
    out->N = L->N;
    out->K = L->K;
    out->lo = L->off[L->comm->rank];
    out->hi = L->off[L->comm->rank + 1];
    out->parts = L->parts;
    out->local = L->local;
}

/* ---------------------------------------------------------------- run */

/* Do M rows of `width` elements of `es` bytes (plus `extra` elements) fit a size_t byte count
 * that is also below 2^62? Every per-call buffer is sized by such a product. */
static int rows_fit(int64_t M, int64_t width, size_t es, size_t extra) {
    size_t n = 0, b = 0;
    return M > 0 && width >= 0 && qmm_mul_ok((size_t)M, (size_t)width, &n) && n <= SIZE_MAX - extra &&
           qmm_mul_ok(n + extra, es, &b) && b <= ((size_t)1 << 62);
}

static void call_rec(tp_rec *rec, const qmm_linear_args *a, unsigned flags) {
    memset(rec, 0, sizeof *rec);
    if (a) {
        rec->M = a->M;
        rec->x_dtype = a->x_dtype;
        rec->y_dtype = a->y_dtype;
        rec->act = a->act;
    }
    rec->flags = (int32_t)flags;
}

static qmm_status run_row(qmm_tp_linear *L, qmm_context *ctx, const qmm_linear_args *args, unsigned flags,
                          qmm_status prior) {
    qmm_comm *c = L->comm;
    const int64_t M = args ? args->M : 0, N = L->N, lo = L->off[c->rank], kr = L->off[c->rank + 1] - lo;
    qmm_status st = prior;
    qmm_linear_args la = qmm_linear_args_default();
    float *amax = NULL;
    int32_t *acc = NULL;
    if (st == QMM_OK) {
        la = *args;
        if (M <= 0) st = qmm_fail(QMM_ERR_INVALID_ARGUMENT, "layer %s: M=%lld tokens", L->name, (long long)M);
        else if (!rows_fit(M, N, sizeof(int32_t), (size_t)c->size) || !rows_fit(M, 4 * L->K, sizeof(float), 0))
            st = qmm_fail(QMM_ERR_UNSUPPORTED, "layer %s [%lld, %lld]: M=%lld tokens too many (buffer sizes overflow)",
                          L->name, (long long)N, (long long)L->K, (long long)M);
        else if (!args->x || !args->y) st = qmm_fail(QMM_ERR_INVALID_ARGUMENT, "layer %s: x or y is NULL", L->name);
        else if (!qmm_dtype_is_float(args->y_dtype) || !qmm_dtype_is_float(args->x_dtype))
            st = qmm_fail(QMM_ERR_UNSUPPORTED, "layer %s: row-parallel x/y dtypes %s/%s (need f32, f16 or bf16)",
                          L->name, qmm_dtype_name(args->x_dtype), qmm_dtype_name(args->y_dtype));
    }
    if (st == QMM_OK) {
        const int swi = args->act == QMM_ACT_SWIGLU;
        const size_t xs = qmm_dtype_size(args->x_dtype);
        if (flags & QMM_TP_X_FULL) { /* my columns of the full x */
            const int64_t kin = swi ? 2 * L->K : L->K, ldx = args->ldx ? args->ldx : kin;
            if ((args->x_cols && args->x_cols != kin) || ldx < kin)
                st = qmm_fail(QMM_ERR_INVALID_ARGUMENT, "layer %s: full x has %lld columns / stride %lld, needs %lld",
                              L->name, (long long)args->x_cols, (long long)ldx, (long long)kin);
            else if (!swi) {
                la.x = (const char *)args->x + (size_t)lo * xs;
                la.ldx = ldx;
            } else { /* gate [lo, hi) and up [K + lo, K + hi) side by side */
                st = tp_grow(&L->buf2, &L->bytes2, (size_t)(M * 2 * kr) * xs);
                for (int64_t r = 0; st == QMM_OK && r < M; r++) {
                    const char *xr = (const char *)args->x + (size_t)(r * ldx) * xs;
                    char *d = (char *)L->buf2 + (size_t)(r * 2 * kr) * xs;
                    memcpy(d, xr + (size_t)lo * xs, (size_t)kr * xs);
                    memcpy(d + (size_t)kr * xs, xr + (size_t)(L->K + lo) * xs, (size_t)kr * xs);
                }
                la.x = L->buf2;
                la.ldx = 2 * kr;
            }
            la.x_cols = 0;
        }
    }
    size_t acc_n = (size_t)(M > 0 ? M : 0) * (size_t)N + (size_t)c->size;
    if (st == QMM_OK) st = tp_grow(&L->buf0, &L->bytes0, (size_t)M * 2 * sizeof(float));
    if (st == QMM_OK) st = tp_grow(&L->buf1, &L->bytes1, acc_n * sizeof(int32_t));
    if (st == QMM_OK) {
        amax = L->buf0;
        acc = L->buf1;
        st = qmm_activation_amax(ctx, L->local, &la, amax);
    }
    if (st == QMM_OK) { /* will the GEMM find an engine for int32 output? ask before any exchange */
        qmm_linear_args pa = la;
        pa.y_dtype = QMM_I32;
        pa.ldy = N;
        qmm_plan_info p;
        st = qmm_plan(ctx, L->local, &pa, &p);
        if (st == QMM_OK && pa.engine == QMM_ENGINE_AUTO && (p.status != QMM_OK || p.is_fallback))
            st = qmm_fail(QMM_ERR_NO_ENGINE,
                          "layer %s: row-parallel needs an int8 engine for the int32 partial sums (dispatch gives "
                          "%s%s)", L->name, qmm_engine_name(p.engine), p.is_fallback ? ", a float fallback" : "");
    }
    /* agree on status and call shape: after this every rank runs the same collectives */
    tp_rec rec;
    call_rec(&rec, args, flags);
    tp_rec_status(&rec, st);
    QMM_FORWARD_IF_ERROR(tp_agree(c, L->name, "row-parallel run", &rec, L->recs, L->counts, L->displs));
    /* shared per-token scales */
    QMM_FORWARD_IF_ERROR(c->allreduce_max_f32(c, amax, M));
    float *s = amax + M;
    for (int64_t r = 0; r < M; r++) s[r] = qmm_scale_from_amax(amax[r]);
    la.y = acc;
    la.y_dtype = QMM_I32;
    la.ldy = N;
    la.token_scales = NULL;
    la.token_scales_in = s;
    st = qmm_linear(ctx, L->local, &la);
    char mine[200] = "";
    if (st != QMM_OK) {
        snprintf(mine, sizeof mine, "%s", qmm_last_error());
        memset(acc, 0, (size_t)M * (size_t)N * sizeof(int32_t));
    }
    memset(acc + (size_t)M * (size_t)N, 0, (size_t)c->size * sizeof(int32_t));
    acc[(size_t)M * (size_t)N + (size_t)c->rank] = (int32_t)st;
    QMM_FORWARD_IF_ERROR(c->allreduce_sum_i32(c, acc, (int64_t)acc_n));
    for (int r = 0; r < c->size; r++) {
        int32_t sr = acc[(size_t)M * (size_t)N + (size_t)r];
        if (sr != QMM_OK)
            return qmm_fail(QMM_ERR_DIST, "layer %s: row-parallel run: rank %d of %d failed in its local GEMM (%s)%s%s",
                            L->name, r, c->size, qmm_status_name((qmm_status)sr), r == c->rank ? ": " : "",
                            r == c->rank ? mine : "");
    }
    QMM_FORWARD_IF_ERROR(qmm_linear_epilogue(ctx, L->local, M, acc, N, s, args->y, args->y_dtype, args->ldy));
    if (args->token_scales) memcpy(args->token_scales, s, (size_t)M * sizeof(float));
    return QMM_OK;
}

static qmm_status run_column(qmm_tp_linear *L, qmm_context *ctx, const qmm_linear_args *args, unsigned flags,
                             qmm_status prior) {
    qmm_comm *c = L->comm;
    const int64_t M = args ? args->M : 0, nr = L->off[c->rank + 1] - L->off[c->rank], nloc = L->parts * nr;
    const size_t es = args && qmm_dtype_is_float(args->y_dtype) ? qmm_dtype_size(args->y_dtype) : 1;
    qmm_status st = prior;
    qmm_linear_args la = qmm_linear_args_default();
    if (st == QMM_OK) {
        la = *args;
        if (M <= 0) st = qmm_fail(QMM_ERR_INVALID_ARGUMENT, "layer %s: M=%lld tokens", L->name, (long long)M);
        else if (!rows_fit(M, L->N, es, 0))
            st = qmm_fail(QMM_ERR_UNSUPPORTED, "layer %s [%lld, %lld]: M=%lld tokens too many (buffer sizes overflow)",
                          L->name, (long long)L->N, (long long)L->K, (long long)M);
        else if (!args->y) st = qmm_fail(QMM_ERR_INVALID_ARGUMENT, "layer %s: y is NULL", L->name);
        else if (!qmm_dtype_is_float(args->y_dtype))
            st = qmm_fail(QMM_ERR_UNSUPPORTED, "layer %s: column-parallel out dtype %s (needs f32, f16 or bf16)",
                          L->name, qmm_dtype_name(args->y_dtype));
        else if (!(flags & QMM_TP_Y_LOCAL) && args->ldy && args->ldy < L->N)
            st = qmm_fail(QMM_ERR_INVALID_ARGUMENT, "layer %s: out row stride %lld < N=%lld", L->name,
                          (long long)args->ldy, (long long)L->N);
    }
    if (st == QMM_OK && !(flags & QMM_TP_Y_LOCAL)) {
        st = tp_grow(&L->buf0, &L->bytes0, (size_t)M * (size_t)nloc * es);
        la.y = L->buf0;
        la.ldy = nloc;
    }
    if (st == QMM_OK) st = qmm_linear(ctx, L->local, &la);
    tp_rec rec;
    call_rec(&rec, args, flags);
    tp_rec_status(&rec, st);
    QMM_FORWARD_IF_ERROR(tp_agree(c, L->name, "column-parallel run", &rec, L->recs, L->counts, L->displs));
    if (flags & QMM_TP_Y_LOCAL) return QMM_OK;
    /* all-gather in row chunks of at most ~1 GiB in total (MPI counts are int) */
    const int64_t ldy = args->ldy ? args->ldy : L->N, P = L->width;
    int64_t rows = ((int64_t)1 << 30) / (L->N * (int64_t)es);
    if (rows < 1) rows = 1;
    if (rows > M) rows = M;
    QMM_FORWARD_IF_ERROR(tp_grow(&L->buf1, &L->bytes1, (size_t)rows * (size_t)L->N * es));
    for (int64_t r0 = 0; r0 < M; r0 += rows) {
        int64_t nrow = M - r0 < rows ? M - r0 : rows;
        size_t at = 0;
        for (int q = 0; q < c->size; q++) {
            L->counts[q] = (size_t)nrow * (size_t)(L->parts * (L->off[q + 1] - L->off[q])) * es;
            L->displs[q] = at;
            at += L->counts[q];
        }
        QMM_FORWARD_IF_ERROR(c->allgather(c, (const char *)L->buf0 + (size_t)(r0 * nloc) * es, L->buf1, L->counts,
                                          L->displs));
        for (int q = 0; q < c->size; q++) {
            const int64_t nq = L->off[q + 1] - L->off[q];
            const char *src = (const char *)L->buf1 + L->displs[q];
            for (int64_t r = 0; r < nrow; r++)
                for (int p = 0; p < L->parts; p++)
                    memcpy((char *)args->y + (size_t)((r0 + r) * ldy + p * P + L->off[q]) * es,
                           src + (size_t)(r * L->parts * nq + p * nq) * es, (size_t)nq * es);
        }
    }
    return QMM_OK;
}

qmm_status tp_linear_run_ex(qmm_tp_linear *L, qmm_context *ctx, const qmm_linear_args *args, unsigned flags,
                            qmm_status prior) {
    QMM_RETURN_IF(!L, QMM_ERR_INVALID_ARGUMENT, "qmm_tp_linear_run: layer is NULL");
    if (prior == QMM_OK && (!ctx || !args))
        prior = qmm_fail(QMM_ERR_INVALID_ARGUMENT, "layer %s: qmm_tp_linear_run: %s is NULL", L->name,
                         !ctx ? "ctx" : "args");
    return L->kind == QMM_TP_ROW ? run_row(L, ctx, args, flags, prior) : run_column(L, ctx, args, flags, prior);
}

qmm_status qmm_tp_linear_run(qmm_tp_linear *L, qmm_context *ctx, const qmm_linear_args *args, unsigned flags) {
    return tp_linear_run_ex(L, ctx, args, flags, QMM_OK);
}
