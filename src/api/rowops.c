/*
 * rowops.c — the public row ops (qmm.h, SPEC §13): qmm_rope_args_default and qmm_rope, which
 * validates a call into a qmm_rope_call (every error names the argument), widens the norm weight
 * to f32 and runs the frame's driver (core/rowops.c); qmm_rms_mod_args_default and qmm_rms_mod
 * the same way for the RMSNorm + modulation rows. No engine table: the row ops are the
 * frame's own kernels, picked by the context's core SIMD level as the pre-pass is.
 */
#include "geometry.h"
#include "rowops.h"

#include "numerics.h"

#include <math.h>
#include <string.h>

qmm_rope_args qmm_rope_args_default(void) {
    qmm_rope_args a;
    memset(&a, 0, sizeof a);
    a.n[0] = a.n[1] = a.n[2] = 1;
    a.x_dtype = a.freqs_dtype = a.norm_weight_dtype = QMM_F32;
    return a;
}

/* The same elements: every leading dimension of extent > 1 has the same stride. */
static int same_view(const int64_t n[3], const int64_t a[3], const int64_t b[3]) {
    for (int i = 0; i < 3; i++)
        if (n[i] > 1 && a[i] != b[i]) return 0;
    return 1;
}

static qmm_status strides_ok(const char *name, const int64_t s[3]) {
    for (int i = 0; i < 3; i++)
        QMM_RETURN_IF(s[i] < 0, QMM_ERR_INVALID_ARGUMENT, "qmm_rope: %s_stride[%d] = %lld is negative", name, i,
                      (long long)s[i]);
    return QMM_OK;
}

qmm_status qmm_rope(qmm_context *ctx, const qmm_rope_args *a) {
    QMM_RETURN_IF(!ctx || !a, QMM_ERR_INVALID_ARGUMENT, "qmm_rope: %s is NULL", !ctx ? "ctx" : "args");
    QMM_RETURN_IF(!a->x || !a->out || !a->freqs, QMM_ERR_INVALID_ARGUMENT, "qmm_rope: %s is NULL",
                  !a->x ? "x" : !a->out ? "out" : "freqs");
    for (int i = 0; i < 3; i++)
        QMM_RETURN_IF(a->n[i] < 1, QMM_ERR_INVALID_ARGUMENT, "qmm_rope: n[%d] = %lld (needs >= 1)", i,
                      (long long)a->n[i]);
    QMM_RETURN_IF(a->D < 2 || a->D > QMM_ROPE_MAX_D || (a->D & 1), a->D > QMM_ROPE_MAX_D ? QMM_ERR_UNSUPPORTED
                  : QMM_ERR_INVALID_ARGUMENT, "qmm_rope: D = %lld (needs an even row length from 2 to %d)",
                  (long long)a->D, QMM_ROPE_MAX_D);
    const int64_t rot = a->rot_dim ? a->rot_dim : a->D;
    QMM_RETURN_IF(rot < 2 || rot > a->D || (rot & 1), QMM_ERR_INVALID_ARGUMENT,
                  "qmm_rope: rot_dim = %lld (needs 0, or even from 2 to D = %lld)", (long long)a->rot_dim,
                  (long long)a->D);
    QMM_RETURN_IF(!qmm_dtype_is_float(a->x_dtype), QMM_ERR_INVALID_ARGUMENT,
                  "qmm_rope: x_dtype %s (needs f32, f16 or bf16)", qmm_dtype_name(a->x_dtype));
    QMM_RETURN_IF(!qmm_dtype_is_float(a->freqs_dtype), QMM_ERR_INVALID_ARGUMENT,
                  "qmm_rope: freqs_dtype %s (needs f32, f16 or bf16)", qmm_dtype_name(a->freqs_dtype));
    QMM_RETURN_IF(a->norm_weight && !qmm_dtype_is_float(a->norm_weight_dtype), QMM_ERR_INVALID_ARGUMENT,
                  "qmm_rope: norm_weight_dtype %s (needs f32, f16 or bf16)", qmm_dtype_name(a->norm_weight_dtype));
    QMM_RETURN_IF(a->norm_weight && !isfinite(a->eps), QMM_ERR_INVALID_ARGUMENT, "qmm_rope: eps = %g (needs a finite value)",
                  (double)a->eps);
    QMM_RETURN_IF(a->split_half != 0 && a->split_half != 1, QMM_ERR_INVALID_ARGUMENT,
                  "qmm_rope: split_half = %d (needs 0 or 1)", a->split_half);
    QMM_FORWARD_IF_ERROR(strides_ok("x", a->x_stride));
    QMM_FORWARD_IF_ERROR(strides_ok("out", a->out_stride));
    QMM_FORWARD_IF_ERROR(strides_ok("freqs", a->freqs_stride));
    int64_t rows;
    QMM_RETURN_IF(__builtin_mul_overflow(a->n[0], a->n[1], &rows) || __builtin_mul_overflow(rows, a->n[2], &rows),
                  QMM_ERR_UNSUPPORTED, "qmm_rope: n = [%lld, %lld, %lld]: too many rows", (long long)a->n[0],
                  (long long)a->n[1], (long long)a->n[2]);
    const size_t te = qmm_dtype_size(a->x_dtype);
    const int64_t xb = qmm_extent_bytes(a->n, a->x_stride, 3, a->D, te);
    const int64_t ob = qmm_extent_bytes(a->n, a->out_stride, 3, a->D, te);
    const int64_t fb = qmm_extent_bytes(a->n, a->freqs_stride, 3, 2 * rot, qmm_dtype_size(a->freqs_dtype));
    QMM_RETURN_IF(!xb || !ob || !fb, QMM_ERR_UNSUPPORTED, "qmm_rope: the extent of %s overflows int64",
                  !xb ? "x" : !ob ? "out" : "freqs");
    QMM_RETURN_IF(!qmm_elements_distinct(a->n, a->out_stride, a->D), QMM_ERR_INVALID_ARGUMENT,
                  "qmm_rope: out_stride {%lld, %lld, %lld} makes two elements share memory",
                  (long long)a->out_stride[0], (long long)a->out_stride[1], (long long)a->out_stride[2]);
    const int in_place = a->out == a->x && same_view(a->n, a->x_stride, a->out_stride);
    QMM_RETURN_IF(!in_place && qmm_bytes_overlap(a->out, ob, a->x, xb), QMM_ERR_INVALID_ARGUMENT,
                  "qmm_rope: out overlaps x (in place: out = x with x's strides)");
    QMM_RETURN_IF(qmm_bytes_overlap(a->out, ob, a->freqs, fb), QMM_ERR_INVALID_ARGUMENT, "qmm_rope: out overlaps freqs");
    const size_t wb = qmm_dtype_size(a->norm_weight_dtype) * (size_t)a->D;
    QMM_RETURN_IF(a->norm_weight && qmm_bytes_overlap(a->out, ob, a->norm_weight, (int64_t)wb), QMM_ERR_INVALID_ARGUMENT,
                  "qmm_rope: out overlaps norm_weight");

    _Alignas(64) float w32[QMM_ROPE_MAX_D];
    qmm_rope_call c;
    memset(&c, 0, sizeof c);
    memcpy(c.n, a->n, sizeof c.n);
    c.x = a->x; memcpy(c.xs, a->x_stride, sizeof c.xs);
    c.out = a->out; memcpy(c.os, a->out_stride, sizeof c.os);
    c.freqs = a->freqs; memcpy(c.fs, a->freqs_stride, sizeof c.fs);
    c.row.D = a->D;
    c.row.rot = rot;
    c.row.split_half = a->split_half;
    c.row.t = a->x_dtype;
    c.row.c = a->freqs_dtype;
    c.row.eps = a->eps;
    if (a->norm_weight) {
        for (int64_t k = 0; k < a->D; k++) w32[k] = qmm_load_f(a->norm_weight, a->norm_weight_dtype, k);
        c.row.w = w32;
    }
    if (!in_place) qmm_advise_huge(a->out, (size_t)ob);  /* QMM_HUGEPAGES=1 only (hugepages.c) */
    return qmm_rope_run(ctx, &c, 0);
}

qmm_rms_mod_args qmm_rms_mod_args_default(void) {
    qmm_rms_mod_args a;
    memset(&a, 0, sizeof a);
    a.n[0] = a.n[1] = a.n[2] = 1;
    a.dtype = QMM_F32;
    return a;
}

qmm_status qmm_rms_mod(qmm_context *ctx, const qmm_rms_mod_args *a) {
    QMM_RETURN_IF(!ctx || !a, QMM_ERR_INVALID_ARGUMENT, "qmm_rms_mod: %s is NULL", !ctx ? "ctx" : "args");
    QMM_RETURN_IF(!a->x || !a->out || !a->a || !a->b, QMM_ERR_INVALID_ARGUMENT, "qmm_rms_mod: %s is NULL",
                  !a->x ? "x" : !a->out ? "out" : !a->a ? "a" : "b");
    for (int i = 0; i < 3; i++)
        QMM_RETURN_IF(a->n[i] < 1, QMM_ERR_INVALID_ARGUMENT, "qmm_rms_mod: n[%d] = %lld (needs >= 1)", i,
                      (long long)a->n[i]);
    QMM_RETURN_IF(a->D < 1, QMM_ERR_INVALID_ARGUMENT, "qmm_rms_mod: D = %lld (needs >= 1)", (long long)a->D);
    QMM_RETURN_IF(!qmm_dtype_is_float(a->dtype), QMM_ERR_INVALID_ARGUMENT,
                  "qmm_rms_mod: dtype %s (needs f32, f16 or bf16)", qmm_dtype_name(a->dtype));
    QMM_RETURN_IF(a->kind != QMM_RMS_ADALN && a->kind != QMM_RMS_GATED_RESIDUAL, QMM_ERR_INVALID_ARGUMENT,
                  "qmm_rms_mod: kind = %d (needs QMM_RMS_ADALN or QMM_RMS_GATED_RESIDUAL)", (int)a->kind);
    QMM_RETURN_IF(!isfinite(a->eps), QMM_ERR_INVALID_ARGUMENT, "qmm_rms_mod: eps = %g (needs a finite value)",
                  (double)a->eps);
    static const char *const names[4] = {"x", "out", "a", "b"};
    const int64_t *st[4] = {a->x_stride, a->out_stride, a->a_stride, a->b_stride};
    const void *ptr[4] = {a->x, a->out, a->a, a->b};
    int64_t bytes[4];
    const size_t te = qmm_dtype_size(a->dtype);
    for (int i = 0; i < 4; i++) {
        for (int d = 0; d < 3; d++)
            QMM_RETURN_IF(st[i][d] < 0, QMM_ERR_INVALID_ARGUMENT, "qmm_rms_mod: %s_stride[%d] = %lld is negative",
                          names[i], d, (long long)st[i][d]);
        bytes[i] = qmm_extent_bytes(a->n, st[i], 3, a->D, te);
        QMM_RETURN_IF(!bytes[i], QMM_ERR_UNSUPPORTED, "qmm_rms_mod: the extent of %s overflows int64", names[i]);
    }
    int64_t rows;
    QMM_RETURN_IF(__builtin_mul_overflow(a->n[0], a->n[1], &rows) || __builtin_mul_overflow(rows, a->n[2], &rows),
                  QMM_ERR_UNSUPPORTED, "qmm_rms_mod: n = [%lld, %lld, %lld]: too many rows", (long long)a->n[0],
                  (long long)a->n[1], (long long)a->n[2]);
    QMM_RETURN_IF(!qmm_elements_distinct(a->n, a->out_stride, a->D), QMM_ERR_INVALID_ARGUMENT,
                  "qmm_rms_mod: out_stride {%lld, %lld, %lld} makes two elements share memory",
                  (long long)a->out_stride[0], (long long)a->out_stride[1], (long long)a->out_stride[2]);
    for (int i = 0; i < 4; i++)
        QMM_RETURN_IF(i != 1 && qmm_bytes_overlap(a->out, bytes[1], ptr[i], bytes[i]), QMM_ERR_INVALID_ARGUMENT,
                      "qmm_rms_mod: out overlaps %s", names[i]);
    int64_t wb;
    QMM_RETURN_IF(__builtin_mul_overflow(a->D, (int64_t)te, &wb), QMM_ERR_UNSUPPORTED, "qmm_rms_mod: D too large");
    QMM_RETURN_IF(a->norm_weight && qmm_bytes_overlap(a->out, bytes[1], a->norm_weight, wb), QMM_ERR_INVALID_ARGUMENT,
                  "qmm_rms_mod: out overlaps norm_weight");
    qmm_rms_mod_call c;
    memset(&c, 0, sizeof c);
    memcpy(c.n, a->n, sizeof c.n);
    c.x = a->x; memcpy(c.xs, a->x_stride, sizeof c.xs);
    c.out = a->out; memcpy(c.os, a->out_stride, sizeof c.os);
    c.a = a->a; memcpy(c.as, a->a_stride, sizeof c.as);
    c.b = a->b; memcpy(c.bs, a->b_stride, sizeof c.bs);
    c.row.D = a->D;
    c.row.t = a->dtype;
    c.row.w = a->norm_weight;
    c.row.kind = (int)a->kind;
    c.row.eps = a->eps;
    qmm_advise_huge(a->out, (size_t)bytes[1]);  /* QMM_HUGEPAGES=1 only (hugepages.c) */
    return qmm_rms_mod_run(ctx, &c, 0);
}
