/*
 * rowops.h — the frame's row ops (SPEC §13): comfy-kitchen's fused RMSNorm + RoPE family, one
 * pass over each row of x [rows][D] into out, threaded over rows. One kernel signature for the
 * family (qmm_rope_row_fn), a scalar reference kernel (rowops.c) and an AVX2 one
 * (avx2/rowops_avx2.c), chosen once per call by the context's core SIMD level; both give the same
 * bits. Per row, with T = x's dtype, C = freqs' dtype, T(v) / C(v) rounding to nearest even:
 *
 *   rms      (norm weight given) r = 1 / sqrtf(qmm_sumsq16(x) / D + eps) in fp32;
 *            a[k] = T((x[k] · r) · w[k]), w of any float dtype widened to f32 (torch's rms_norm,
 *            measured: one rounding whether or not w's dtype is T); no weight: a = x
 *   rotate   pair p (x0, x1) of a's first rot values, xi = C(a[·]); with the matrix f of the pair:
 *            y0 = C(fmaf(f01, x1, C(f00 · x0))),  y1 = C(fmaf(f11, x1, C(f10 · x0)))
 *            (eager: mul, then addcmul_ — one fused multiply-add in f32, an exact product rounded
 *            once in bf16/f16, which fmaf then C() reproduces); out = T(y)
 *   the rest out[k] = a[k] for rot <= k < D
 *
 * The freqs of a row are first laid out as two f32 arrays A, B of rot values
 * (qmm_rope_freqs_prep), so that every output is y[j] = C(fmaf(B[j], xb[j], C(A[j] · xa[j]))):
 *   interleaved  pair i = (2i, 2i+1): A = f00 f10 per pair, B = f01 f11, xa = x[2i], xb = x[2i+1];
 *   split half   pair i = (i, i+h), h = rot/2: A = [f00 | f11], B = [f01 | f10], xa[j] = x[j],
 *                xb[j] = x[j ± h] (the partner).
 * The driver prepares them once per distinct freqs row (a row broadcast over heads is prepared once
 * per run of heads).
 */
#ifndef QMM_ROWOPS_H
#define QMM_ROWOPS_H

#include "qmm_internal.h"

/* What a row kernel needs besides its pointers (style: a kernel's own small argument struct). */
typedef struct qmm_rope_row {
    int64_t D;          /* row length, even, <= QMM_ROPE_MAX_D */
    int64_t rot;        /* rotated prefix, even, 2 <= rot <= D */
    int split_half;
    qmm_dtype t;        /* x and out */
    qmm_dtype c;        /* freqs: the rotation's dtype */
    const float *w;     /* NULL: no RMSNorm; else D weights widened to f32 */
    float eps;
} qmm_rope_row;

/* One row: x [D] of p->t → out [D] of p->t (out may be x); A, B: rot f32 each
 * (qmm_rope_freqs_prep); tmp: D floats of scratch, 32-byte aligned. */
typedef void (*qmm_rope_row_fn)(const qmm_rope_row *p, const void *x, void *out, const float *A, const float *B,
                                float *tmp);

void qmm_rope_row_ref(const qmm_rope_row *p, const void *x, void *out, const float *A, const float *B, float *tmp);
/* The AVX2 + FMA + F16C kernel (avx2/rowops_avx2.c), same bits. */
extern const qmm_rope_row_fn qmm_rope_row_avx2_ptr;

/* freqs of one row [rot/2][2][2] of dtype c → A, B [rot] (f32, exact). */
void qmm_rope_freqs_prep(const void *freqs, qmm_dtype c, int64_t rot, int split_half, float *A, float *B);

/* A validated call (api/rowops.c): tensors as in qmm_rope_args, the weight widened to f32. */
typedef struct qmm_rope_call {
    int64_t n[3];
    const void *x; int64_t xs[3];
    void *out; int64_t os[3];
    const void *freqs; int64_t fs[3];
    qmm_rope_row row;
} qmm_rope_call;

/* The whole call on the context's pool; ref != 0 forces the scalar kernel. */
qmm_status qmm_rope_run(qmm_context *ctx, const qmm_rope_call *c, int ref);

/* ---------------------------------------------------------------- RMSNorm + modulation
 * Per row (every tensor of dtype T), r as above, x̂[k] = T((x[k] · r) · w[k]) (no weight: T(x[k] · r)):
 *   adaln            out = T(T(x̂ · T(1 + a)) + b)      (a = scale, b = shift)
 *   gated residual   out = T(b + T(a · x̂))             (a = gate, b = residual)
 * torch's ops one by one (rms_norm, then mul and add, each rounded to T). Two reads of x (the
 * sum of squares, then the output), no scratch: any D. */
typedef struct qmm_rms_mod_row {
    int64_t D;
    qmm_dtype t;
    const void *w;      /* NULL: no weight; else D weights of dtype t */
    int kind;           /* qmm_rms_mod_kind */
    float eps;
} qmm_rms_mod_row;

typedef void (*qmm_rms_mod_row_fn)(const qmm_rms_mod_row *p, const void *x, const void *a, const void *b, void *out);
void qmm_rms_mod_row_ref(const qmm_rms_mod_row *p, const void *x, const void *a, const void *b, void *out);
extern const qmm_rms_mod_row_fn qmm_rms_mod_row_avx2_ptr;

typedef struct qmm_rms_mod_call {
    int64_t n[3];
    const void *x; int64_t xs[3];
    void *out; int64_t os[3];
    const void *a; int64_t as[3];
    const void *b; int64_t bs[3];
    qmm_rms_mod_row row;
} qmm_rms_mod_call;

qmm_status qmm_rms_mod_run(qmm_context *ctx, const qmm_rms_mod_call *c, int ref);

#endif /* QMM_ROWOPS_H */
