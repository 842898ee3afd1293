/*
 * rowops.c — the row ops' scalar definitions and driver (rowops.h, SPEC §13): the reference row
 * kernel (the definition every vector kernel reproduces bit for bit), the freqs layout
 * qmm_rope_freqs_prep, and qmm_rope_run, which walks the rows of a call on the context's pool,
 * preparing a row's freqs only when they differ from the previous row's; the same for the
 * RMSNorm + modulation rows (qmm_rms_mod_row_ref, qmm_rms_mod_run).
 */
#include "rowops.h"

#include "numerics.h"

#include <math.h>
#include <string.h>

void qmm_rope_freqs_prep(const void *freqs, qmm_dtype c, int64_t rot, int split_half, float *A, float *B) {
    const int64_t h = rot / 2;
    for (int64_t i = 0; i < h; i++) {
        const float f00 = qmm_load_f(freqs, c, 4 * i), f01 = qmm_load_f(freqs, c, 4 * i + 1);
        const float f10 = qmm_load_f(freqs, c, 4 * i + 2), f11 = qmm_load_f(freqs, c, 4 * i + 3);
        if (split_half) {
            A[i] = f00; B[i] = f01; A[h + i] = f11; B[h + i] = f10;
        } else {
            A[2 * i] = f00; A[2 * i + 1] = f10; B[2 * i] = f01; B[2 * i + 1] = f11;
        }
    }
}

/* The RMSNorm factor of a row: 1 / sqrtf(Σx² / D + eps), the sum in qmm_sumsq16's order. */
static float rms_factor(const qmm_rope_row *p, float sumsq) {
    return 1.0f / sqrtf(sumsq / (float)p->D + p->eps);
}

void qmm_rope_row_ref(const qmm_rope_row *p, const void *x, void *out, const float *A, const float *B, float *tmp) {
    const qmm_dtype t = p->t, c = p->c;
    const int64_t D = p->D, rot = p->rot, h = rot / 2;
    if (p->w) {
        const float r = rms_factor(p, qmm_sumsq16(x, t, D));
        for (int64_t k = 0; k < D; k++) {
            tmp[k] = qmm_round_to((qmm_load_f(x, t, k) * r) * p->w[k], t);
        }
    } else {
        for (int64_t k = 0; k < D; k++) tmp[k] = qmm_load_f(x, t, k);
    }
    /* tmp holds the row (of T values) before anything is written: out may be x */
    for (int64_t i = 0; i < h; i++) {
        const int64_t j0 = p->split_half ? i : 2 * i, j1 = p->split_half ? h + i : 2 * i + 1;
        const float x0 = qmm_round_to(tmp[j0], c), x1 = qmm_round_to(tmp[j1], c);
        /* y[j] = C(fmaf(B[j], xb[j], C(A[j] · xa[j]))): interleaved xa = x0, xb = x1 for both
         * outputs; split half xa = own, xb = partner */
        const float y0 = qmm_round_to(fmaf(B[j0], x1, qmm_round_to(A[j0] * x0, c)), c);
        const float y1 = p->split_half ? qmm_round_to(fmaf(B[j1], x0, qmm_round_to(A[j1] * x1, c)), c)
                                       : qmm_round_to(fmaf(B[j1], x1, qmm_round_to(A[j1] * x0, c)), c);
        qmm_store_f(out, t, j0, y0);
        qmm_store_f(out, t, j1, y1);
    }
    if (p->w) {
        for (int64_t k = rot; k < D; k++) qmm_store_f(out, t, k, tmp[k]);
    } else if (out != x) { /* the rest copied as it is */
        const size_t te = qmm_dtype_size(t);
        memcpy((char *)out + rot * (int64_t)te, (const char *)x + rot * (int64_t)te, (size_t)(D - rot) * te);
    }
}

typedef struct {
    const qmm_rope_call *c;
    qmm_rope_row_fn fn;
} rope_job;

static void rope_rows(int64_t r0, int64_t r1, int thread, void *arg) {
    (void)thread;
    const rope_job *j = arg;
    const qmm_rope_call *c = j->c;
    const qmm_rope_row *p = &c->row;
    const size_t te = qmm_dtype_size(p->t), ce = qmm_dtype_size(p->c);
    _Alignas(64) float tmp[QMM_ROPE_MAX_D], A[QMM_ROPE_MAX_D], B[QMM_ROPE_MAX_D];
    const char *last = NULL;
    const int64_t n1 = c->n[1], n2 = c->n[2];
    for (int64_t r = r0; r < r1; r++) {
        const int64_t i0 = r / (n1 * n2), i1 = (r / n2) % n1, i2 = r % n2;
        const char *x = (const char *)c->x + (i0 * c->xs[0] + i1 * c->xs[1] + i2 * c->xs[2]) * (int64_t)te;
        char *out = (char *)c->out + (i0 * c->os[0] + i1 * c->os[1] + i2 * c->os[2]) * (int64_t)te;
        const char *f = (const char *)c->freqs + (i0 * c->fs[0] + i1 * c->fs[1] + i2 * c->fs[2]) * (int64_t)ce;
        if (f != last) {
            qmm_rope_freqs_prep(f, p->c, p->rot, p->split_half, A, B);
            last = f;
        }
        j->fn(p, x, out, A, B, tmp);
    }
}

qmm_status qmm_rope_run(qmm_context *ctx, const qmm_rope_call *c, int ref) {
    QMM_RETURN_IF(c->row.D > QMM_ROPE_MAX_D || c->row.rot > c->row.D || c->row.rot < 2 || (c->row.rot & 1),
                  QMM_ERR_INTERNAL, "rope: D=%lld, rot=%lld reached the driver", (long long)c->row.D,
                  (long long)c->row.rot);
    rope_job j = {c, qmm_rope_row_ref};
    if (!ref && qmm_rope_row_avx2_ptr && qmm_core_simd(ctx) >= QMM_ISA_AVX2) j.fn = qmm_rope_row_avx2_ptr;
    const int64_t rows = c->n[0] * c->n[1] * c->n[2];
    /* whole runs of the innermost extent per range where it is short (a freqs row broadcast over
     * heads is then prepared once per run on each thread) */
    const int64_t unit = c->n[2] <= 256 ? c->n[2] : 1;
    qmm_pool_run_rows(ctx->pool, rows, unit, rope_rows, &j);
    return QMM_OK;
}

void qmm_rms_mod_row_ref(const qmm_rms_mod_row *p, const void *x, const void *a, const void *b, void *out) {
    const qmm_dtype t = p->t;
    const int64_t D = p->D;
    const float r = 1.0f / sqrtf(qmm_sumsq16(x, t, D) / (float)D + p->eps);
    for (int64_t k = 0; k < D; k++) {
        float v = qmm_load_f(x, t, k) * r;
        if (p->w) v = v * qmm_load_f(p->w, t, k);
        v = qmm_round_to(v, t);
        const float av = qmm_load_f(a, t, k), bv = qmm_load_f(b, t, k);
        if (p->kind == QMM_RMS_ADALN) v = qmm_round_to(v * qmm_round_to(1.0f + av, t), t) + bv;
        else v = bv + qmm_round_to(av * v, t);
        qmm_store_f(out, t, k, v);
    }
}

typedef struct {
    const qmm_rms_mod_call *c;
    qmm_rms_mod_row_fn fn;
} rms_mod_job;

static void rms_mod_rows(int64_t r0, int64_t r1, int thread, void *arg) {
    (void)thread;
    const rms_mod_job *j = arg;
    const qmm_rms_mod_call *c = j->c;
    const int64_t te = (int64_t)qmm_dtype_size(c->row.t), n1 = c->n[1], n2 = c->n[2];
    for (int64_t r = r0; r < r1; r++) {
        const int64_t i0 = r / (n1 * n2), i1 = (r / n2) % n1, i2 = r % n2;
        const char *x = (const char *)c->x + (i0 * c->xs[0] + i1 * c->xs[1] + i2 * c->xs[2]) * te;
        const char *a = (const char *)c->a + (i0 * c->as[0] + i1 * c->as[1] + i2 * c->as[2]) * te;
        const char *b = (const char *)c->b + (i0 * c->bs[0] + i1 * c->bs[1] + i2 * c->bs[2]) * te;
        char *out = (char *)c->out + (i0 * c->os[0] + i1 * c->os[1] + i2 * c->os[2]) * te;
        j->fn(&c->row, x, a, b, out);
    }
}

qmm_status qmm_rms_mod_run(qmm_context *ctx, const qmm_rms_mod_call *c, int ref) {
    rms_mod_job j = {c, qmm_rms_mod_row_ref};
    if (!ref && qmm_rms_mod_row_avx2_ptr && qmm_core_simd(ctx) >= QMM_ISA_AVX2) j.fn = qmm_rms_mod_row_avx2_ptr;
    qmm_pool_run_rows(ctx->pool, c->n[0] * c->n[1] * c->n[2], 1, rms_mod_rows, &j);
    return QMM_OK;
}
