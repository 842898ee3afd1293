/*
 * linear.c — the linear call's own part: validate the arguments into a qmm_call, and its
 * qmm_op_class (dispatch.h) — the float engines are its W8A16 fallback for an int8 weight
 * (logged once per weight), AUTO's choice is cached on the weight per call class, and its run
 * does the borrowed weight's view, the input stage, the residual and the engine's row (its own
 * run, else the int8 or float driver on the row's final descriptor for the call class, which
 * dispatch decided with the engine: qmm_linear_drive). The skeleton (api/op.c) does the
 * named engine, AUTO, the fallback policy and log, and the counters. With the phase timers on
 * (qmm_profile) the call's set-up, engine and whole time are added to the context's totals. Also
 * qmm_plan and the SPEC §6 building blocks (amax, quantize_rows, epilogue).
 */
#include "borrow.h"
#include "epilogue.h"
#include "float_gemm.h"
#include "input_stage.h"
#include "int8_gemm.h"
#include "numerics.h"
#include "op.h"
#include "prepass.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

qmm_linear_args qmm_linear_args_default(void) {
    qmm_linear_args a;
    memset(&a, 0, sizeof a);
    a.x_dtype = QMM_F32;
    a.y_dtype = QMM_F32;
    return a;
}

float qmm_scale_from_amax(float amax) { return qmm_scale_of(amax); }

/* Fills a qmm_call from the arguments; need_buffers: x and y must be present. */
static qmm_status make_call(const qmm_weight *w, const qmm_linear_args *a, int need_buffers, qmm_call *c) {
    QMM_RETURN_IF(!w || !a, QMM_ERR_INVALID_ARGUMENT, "qmm_linear: %s is NULL", !w ? "weight" : "args");
    const char *nm = w->name;
    memset(c, 0, sizeof *c);
    c->w = w;
    c->M = a->M;
    c->N = w->N;
    c->K = w->K;
    c->act = a->act;
    QMM_RETURN_IF((unsigned)a->act >= QMM_ACT_COUNT, QMM_ERR_INVALID_ARGUMENT, "layer %s: input_act %d unknown", nm,
                  (int)a->act);
    const int paired = a->act == QMM_ACT_SWIGLU || a->act == QMM_ACT_SITU;
    c->K_in = paired ? 2 * w->K : w->K;
    QMM_RETURN_IF(a->M <= 0, QMM_ERR_INVALID_ARGUMENT, "layer %s [%lld, %lld]: M=%lld tokens (needs >= 1)", nm,
                  (long long)w->N, (long long)w->K, (long long)a->M);
    if (a->x_cols) {
        QMM_RETURN_IF(paired && a->x_cols % 2, QMM_ERR_INVALID_ARGUMENT,
                      "layer %s: %s input width %lld is odd (the two halves need 2K)", nm, qmm_act_name(a->act),
                      (long long)a->x_cols);
        QMM_RETURN_IF(a->x_cols != c->K_in, QMM_ERR_INVALID_ARGUMENT,
                      "layer %s [%lld, %lld]: x has %lld columns, %s needs %lld", nm, (long long)w->N,
                      (long long)w->K, (long long)a->x_cols, a->act == QMM_ACT_SWIGLU ? "swiglu (2K)" : paired ? "situ (2K)" : "K",
                      (long long)c->K_in);
    }
    QMM_RETURN_IF(!qmm_dtype_is_float(a->x_dtype), QMM_ERR_UNSUPPORTED, "layer %s: x dtype %s (needs f32, f16 or bf16)", nm,
                  qmm_dtype_name(a->x_dtype));
    QMM_RETURN_IF(!qmm_dtype_is_float(a->y_dtype) && a->y_dtype != QMM_I32, QMM_ERR_UNSUPPORTED,
                  "layer %s: out dtype %s (needs f32, f16, bf16 or i32)", nm, qmm_dtype_name(a->y_dtype));
    QMM_RETURN_IF(a->y_dtype == QMM_I32 && !w->is_int8, QMM_ERR_UNSUPPORTED,
                  "layer %s: i32 accumulator output needs an int8 weight", nm);
    c->x = a->x;
    c->x_dtype = a->x_dtype;
    c->ldx = a->ldx ? a->ldx : c->K_in;
    c->y = a->y;
    c->y_dtype = a->y_dtype;
    c->ldy = a->ldy ? a->ldy : w->N;
    QMM_RETURN_IF(c->ldx < c->K_in, QMM_ERR_INVALID_ARGUMENT, "layer %s: x row stride %lld < row width %lld", nm,
                  (long long)c->ldx, (long long)c->K_in);
    QMM_RETURN_IF(c->ldy < w->N, QMM_ERR_INVALID_ARGUMENT, "layer %s: out row stride %lld < N=%lld", nm,
                  (long long)c->ldy, (long long)w->N);
    /* byte offsets of the last row of x and y, and the int8 engines' q [M][Kp] + s [M] scratch,
     * must fit int64: refused before any engine allocates */
    const int64_t xs = (int64_t)qmm_dtype_size(a->x_dtype), ys = (int64_t)qmm_dtype_size(a->y_dtype);
    const int64_t qrow = w->is_int8 ? w->i8.Kp + 4 : (int64_t)sizeof(float) * c->K_in;
    QMM_RETURN_IF(a->M > INT64_MAX / c->ldx / xs || a->M > INT64_MAX / c->ldy / ys || a->M > INT64_MAX / qrow,
                  QMM_ERR_UNSUPPORTED, "layer %s [%lld, %lld]: M=%lld rows with ldx=%lld, ldy=%lld too large (byte sizes overflow)",
                  nm, (long long)w->N, (long long)w->K, (long long)a->M, (long long)c->ldx, (long long)c->ldy);
    if (need_buffers) {
        QMM_RETURN_IF(!a->x, QMM_ERR_INVALID_ARGUMENT, "layer %s: x is NULL", nm);
        QMM_RETURN_IF(!a->y, QMM_ERR_INVALID_ARGUMENT, "layer %s: y is NULL", nm);
    }
    c->token_scales = a->token_scales;
    c->token_scales_in = a->token_scales_in;

    /* SPEC §1a extensions */
    QMM_RETURN_IF(a->act == QMM_ACT_RMS_NORM && need_buffers && !a->act_weight, QMM_ERR_INVALID_ARGUMENT,
                  "layer %s: input_act rms_norm needs act_weight (%lld values)", nm, (long long)w->K);
    QMM_RETURN_IF(a->act == QMM_ACT_RMS_NORM && !qmm_dtype_is_float(a->act_weight_dtype), QMM_ERR_UNSUPPORTED,
                  "layer %s: rms_norm weight dtype %s (needs f32, f16 or bf16)", nm,
                  qmm_dtype_name(a->act_weight_dtype));
    QMM_RETURN_IF(a->act == QMM_ACT_RMS_NORM && !(a->act_eps >= 0.0f && a->act_eps <= 3.4e38f),
                  QMM_ERR_INVALID_ARGUMENT, "layer %s: rms_norm eps %g (needs a finite value >= 0)", nm,
                  (double)a->act_eps);
    c->act_weight = a->act == QMM_ACT_RMS_NORM ? a->act_weight : NULL;
    c->act_weight_dtype = a->act_weight_dtype;
    c->act_eps = a->act_eps;
    c->modulation = a->modulation;
    QMM_RETURN_IF(a->epilogue != QMM_EPILOGUE_FUSED && a->epilogue != QMM_EPILOGUE_KITCHEN, QMM_ERR_INVALID_ARGUMENT,
                  "layer %s: epilogue %d unknown", nm, (int)a->epilogue);
    c->epilogue = a->epilogue;
    if (a->residual) {
        QMM_RETURN_IF(!qmm_dtype_is_float(a->y_dtype), QMM_ERR_UNSUPPORTED,
                      "layer %s: a residual needs a float output (out dtype %s)", nm, qmm_dtype_name(a->y_dtype));
        QMM_RETURN_IF(!a->residual_scale, QMM_ERR_INVALID_ARGUMENT, "layer %s: residual without residual_scale",
                      nm);
        c->ldr = a->ldr ? a->ldr : w->N;
        QMM_RETURN_IF(c->ldr < w->N, QMM_ERR_INVALID_ARGUMENT, "layer %s: residual row stride %lld < N=%lld", nm,
                      (long long)c->ldr, (long long)w->N);
        QMM_RETURN_IF(a->M > INT64_MAX / c->ldr / ys, QMM_ERR_UNSUPPORTED,
                      "layer %s: M=%lld rows with ldr=%lld too large (byte sizes overflow)", nm, (long long)a->M,
                      (long long)c->ldr);
        c->residual = a->residual;
        c->residual_scale = a->residual_scale;
    }
    return QMM_OK;
}

qmm_engine_id qmm_last_engine(const qmm_context *ctx) { return ctx ? ctx->last_engine[QMM_OP_LINEAR] : QMM_ENGINE_AUTO; }

/* y = T(fmaf(y, residual_scale[n], residual[r][n])) over the output (numerics.h): the residual of
 * the engines whose epilogue does not fuse it (float engines, the reference's float path). */
static void residual_rows(int64_t r0, int64_t r1, int thread, void *arg) {
    (void)thread;
    const qmm_call *c = arg;
    for (int64_t r = r0; r < r1; r++)
        for (int64_t n = 0; n < c->N; n++) {
            float y = qmm_load_f(c->y, c->y_dtype, r * c->ldy + n);
            float v = fmaf(y, qmm_load_f(c->residual_scale, c->y_dtype, n), qmm_load_f(c->residual, c->y_dtype, r * c->ldr + n));
            qmm_store_f(c->y, c->y_dtype, r * c->ldy + n, v);
        }
}

static qmm_status residual_pass(qmm_context *ctx, const qmm_call *c) {
    qmm_pool_run_rows(ctx->pool, c->M, 1, residual_rows, (void *)c);
    return QMM_OK;
}

static qmm_status residual_copy_if_overlapping(qmm_context *ctx, qmm_call *c) {
    const size_t es = qmm_dtype_size(c->y_dtype);
    const char *r0 = c->residual, *r1 = r0 + (size_t)((c->M - 1) * c->ldr + c->N) * es;
    const char *y0 = c->y, *y1 = y0 + (size_t)((c->M - 1) * c->ldy + c->N) * es;
    if (r1 <= y0 || y1 <= r0) return QMM_OK;
    void *buf;
    QMM_FORWARD_IF_ERROR(qmm_context_scratch(ctx, QMM_SCRATCH_RESIDUAL, (size_t)(c->M * c->N) * es, &buf));
    for (int64_t r = 0; r < c->M; r++) memcpy((char *)buf + (size_t)(r * c->N) * es, r0 + (size_t)(r * c->ldr) * es, (size_t)c->N * es);
    c->residual = buf;
    c->ldr = c->N;
    return QMM_OK;
}

/* Does the message already name the layer? The library's messages about a layer begin
 * "layer NAME" followed by a space or a colon. */
static int names_layer(const char *msg, const char *name) {
    const size_t n = strlen(name);
    return strncmp(msg, "layer ", 6) == 0 && strncmp(msg + 6, name, n) == 0 && (msg[6 + n] == ' ' || msg[6 + n] == ':');
}

/* One qmm_linear call as the skeleton runs it: the call and its phase times (qmm_profile). */
typedef struct linear_job {
    qmm_call c;
    uint64_t t_call, t_engine, t_done;
} linear_job;

qmm_status qmm_linear_drive(qmm_context *ctx, const qmm_engine *e, const void *desc, const qmm_call *c) {
    const qmm_op_row *row = &e->ops->op[QMM_OP_LINEAR];
    if (row->run) return row->run(ctx, c);
    if (!desc)
        return e->ops->built ? qmm_fail(QMM_ERR_OUT_OF_MEMORY, "layer %s: engine %s: no memory for its descriptor", c->w->name, e->name)
                             : qmm_fail(QMM_ERR_UNSUPPORTED_HARDWARE, "layer %s: engine %s not built", c->w->name, e->name);
    return e->kind == QMM_KIND_FLOAT ? qmm_float_gemm(ctx, c, desc) : qmm_int8_gemm(ctx, c, desc);
}

/* The linear's qmm_op_class.run: the borrowed weight's view, the input stage, the residual's
 * copy, the engine (qmm_linear_drive on the row's final descriptor desc), then a kernel's bug
 * report, the residual pass, the layer named in any error. */
static qmm_status linear_run(qmm_context *ctx, const qmm_engine *e, const void *desc, void *call) {
    linear_job *j = (linear_job *)((char *)call - offsetof(linear_job, c));
    qmm_call *c = &j->c;
    const qmm_weight *w = c->w;
    qmm_weight view; /* a borrowed weight: this call's view of the caller's memory (borrow.c) */
    qmm_status st = qmm_weight_for_call(ctx, w, &view, &c->w);
    if (st == QMM_OK) st = qmm_input_stage(ctx, c);
    /* the int8 path fuses the residual into its epilogue (element by element, so residual may be
     * y); the float path adds it after writing y, from a copy when the two overlap */
    const int residual_after = c->residual && !(w->is_int8 && e->kind != QMM_KIND_FLOAT);
    if (st == QMM_OK && residual_after) st = residual_copy_if_overlapping(ctx, c);
    _Atomic(const char *) bug = NULL;
    c->bug = &bug;
    if (st == QMM_OK) qmm_advise_huge(c->y, (size_t)((c->M - 1) * c->ldy + c->N) * qmm_dtype_size(c->y_dtype));
    j->t_engine = ctx->profile ? qmm_now_ns() : 0;
    if (st == QMM_OK) st = qmm_linear_drive(ctx, e, desc, c);
    j->t_done = ctx->profile ? qmm_now_ns() : 0;
    if (st == QMM_OK && atomic_load(&bug))
        st = qmm_fail(QMM_ERR_INTERNAL, "layer %s [%lld, %lld] M=%lld on %s: %s (a bug in qmm: please report this message)",
                      w->name, (long long)w->N, (long long)w->K, (long long)c->M, e->name, atomic_load(&bug));
    if (st == QMM_OK && residual_after) st = residual_pass(ctx, c);
    c->w = w;
    if (st != QMM_OK && !names_layer(qmm_last_error(), w->name)) { /* e.g. a scratch allocation: name the layer */
        char msg[QMM_ERROR_MAX];
        snprintf(msg, sizeof msg, "%s", qmm_last_error());
        return qmm_fail(st, "layer %s [%lld, %lld] M=%lld on %s: %s", w->name, (long long)w->N, (long long)w->K,
                        (long long)c->M, e->name, msg);
    }
    return st;
}

static int linear_float_fallback(const void *call) { return ((const qmm_call *)call)->w->is_int8; }

static void linear_set_fallback(void *call, int fallback) { ((qmm_call *)call)->fallback = fallback; }

/* The call class of the weight's plan cache (dispatch.h):
 *   bits  0..31  ctx->usable_engines          bit  38      token_scales_in given
 *   bits 32..34  x_dtype                      bits 45..61  M (classes with M < 2^17 only)
 *   bits 35..37  y_dtype                      bit  62      w->has_neg128
 * has_neg128 is the one weight property an admit() reads (avx2_int8) that is not fixed by the
 * weight's shape and kind; it is in the key so that a weight whose int8 values are read anew per
 * call can never reuse a choice made for other values. */
static qmm_plan_cache *linear_cache_key(const qmm_context *ctx, const void *call, uint64_t *key) {
    _Static_assert(QMM_ENGINE_MAX <= 32 && QMM_DTYPE_COUNT <= 8, "the cache word's fields (qmm.h)");
    enum { M_BITS = 17 };
    const qmm_call *c = call;
    if (c->M >= ((int64_t)1 << M_BITS) || (unsigned)c->x_dtype > 7 || (unsigned)c->y_dtype > 7) return NULL;
    *key = QMM_PLAN_SLOT_FULL | (uint64_t)ctx->usable_engines | (uint64_t)c->x_dtype << 32 | (uint64_t)c->y_dtype << 35 |
           (uint64_t)(c->token_scales_in != NULL) << 38 | (uint64_t)c->M << 45 | (uint64_t)(c->w->has_neg128 != 0) << 62;
    return (qmm_plan_cache *)&c->w->plan_cache; /* with fallback_logged, a weight's only mutable state: atomic */
}

static void linear_subject(const void *call, char *buf, size_t n) {
    const qmm_call *c = call;
    snprintf(buf, n, "layer %s [%lld, %lld] M=%lld", c->w->name, (long long)c->N, (long long)c->K, (long long)c->M);
}

/* A weight's fallback is logged once (its once-flag, atomic). */
static int linear_log_fallback(void *call) {
    qmm_weight *w = (qmm_weight *)((qmm_call *)call)->w;
    return atomic_exchange(&w->fallback_logged, 1) == 0;
}

/* an int8 weight falls back to W8A16 on a float engine; cached per call class; logged once per weight */
static const qmm_op_class k_linear = {
    .op = QMM_OP_LINEAR, .float_fallback = linear_float_fallback, .set_fallback = linear_set_fallback,
    .cache_key = linear_cache_key, .subject = linear_subject, .fallback_from = "", .fallback_runs = "W8A16",
    .log_fallback = linear_log_fallback, .run = linear_run,
};

qmm_status qmm_linear(qmm_context *ctx, const qmm_weight *w, const qmm_linear_args *args) {
    QMM_RETURN_IF(!ctx, QMM_ERR_INVALID_ARGUMENT, "qmm_linear: ctx is NULL");
    linear_job j;
    j.t_call = ctx->profile ? qmm_now_ns() : 0;
    const qmm_status made = make_call(w, args, 1, &j.c);
    QMM_FORWARD_IF_ERROR(qmm_op_call(ctx, &k_linear, made, &j.c, made == QMM_OK ? args->engine : QMM_ENGINE_AUTO));
    if (ctx->profile) { /* the successful calls (qmm_profile) */
        ctx->prof.calls++;
        ctx->prof.ns[QMM_PHASE_SETUP] += j.t_engine - j.t_call;
        ctx->prof.ns[QMM_PHASE_ENGINE] += j.t_done - j.t_engine;
        ctx->prof.ns[QMM_PHASE_CALL] += qmm_now_ns() - j.t_call;
    }
    return QMM_OK;
}

qmm_status qmm_plan(qmm_context *ctx, const qmm_weight *w, const qmm_linear_args *args, qmm_plan_info *out) {
    QMM_RETURN_IF(!ctx || !out, QMM_ERR_INVALID_ARGUMENT, "qmm_plan: %s is NULL", !ctx ? "ctx" : "out");
    qmm_call c;
    QMM_FORWARD_IF_ERROR(make_call(w, args, 0, &c));
    qmm_plan_op(ctx, &k_linear, &c, out);
    const qmm_engine *e = qmm_engine_get(out->engine);
    if (w->w4a8 && e)
        snprintf(out->weight, sizeof out->weight,
                 "W%dA8: %d-bit codes%s, group %d, s_rel %s; decoded per call into %s (no int8 copy)", w->w4.bits,
                 w->w4.bits, w->w4.codebook ? " + codebook" : "", w->w4.group, qmm_dtype_name(w->w4.s_rel_dtype),
                 out->is_fallback ? "the float fallback's n16k4 blocks (W8A16)"
                                  : qmm_i8_w4a8_site(qmm_op_finalize(&e->ops->op[QMM_OP_LINEAR], &c, ctx->n_threads).desc,
                                                     w, args->M));
    return QMM_OK;
}

qmm_status qmm_activation_amax(qmm_context *ctx, const qmm_weight *w, const qmm_linear_args *args, float *amax) {
    QMM_RETURN_IF(!ctx || !amax, QMM_ERR_INVALID_ARGUMENT, "qmm_activation_amax: %s is NULL", !ctx ? "ctx" : "amax");
    QMM_RETURN_IF(!args, QMM_ERR_INVALID_ARGUMENT, "qmm_activation_amax: args is NULL");
    qmm_call c;
    qmm_linear_args a = *args;
    if (!a.y) a.y = amax; /* y is not written */
    QMM_FORWARD_IF_ERROR(make_call(w, &a, 1, &c));
    QMM_RETURN_IF(!w->is_int8, QMM_ERR_UNSUPPORTED, "layer %s: amax is for int8 weights", w->name);
    QMM_FORWARD_IF_ERROR(qmm_input_stage(ctx, &c));
    return qmm_prepass_amax(ctx, &c, amax, args->engine == QMM_ENGINE_REF);
}

qmm_status qmm_quantize_rows(qmm_context *ctx, const void *x, qmm_dtype x_dtype, int64_t M, int64_t K, int64_t ldx,
                             int convrot_gs, const float *scales_in, int8_t *q, int64_t ldq, float *scales_out) {
    QMM_RETURN_IF(!ctx || !x || !q || !scales_out, QMM_ERR_INVALID_ARGUMENT, "qmm_quantize_rows: %s is NULL",
                  !ctx ? "ctx" : !x ? "x" : !q ? "q" : "scales_out");
    QMM_RETURN_IF(M <= 0 || K <= 0, QMM_ERR_INVALID_ARGUMENT, "qmm_quantize_rows: M=%lld, K=%lld (need >= 1)",
                  (long long)M, (long long)K);
    QMM_RETURN_IF(!qmm_dtype_is_float(x_dtype), QMM_ERR_UNSUPPORTED, "qmm_quantize_rows: x dtype %s (needs f32, f16 or bf16)",
                  qmm_dtype_name(x_dtype));
    if (!ldx) ldx = K;
    if (!ldq) ldq = K;
    QMM_RETURN_IF(ldx < K || ldq < K, QMM_ERR_INVALID_ARGUMENT, "qmm_quantize_rows: strides ldx=%lld, ldq=%lld < K=%lld",
                  (long long)ldx, (long long)ldq, (long long)K);
    QMM_RETURN_IF(K > INT32_MAX || M > INT64_MAX / ldx / (int64_t)qmm_dtype_size(x_dtype) || M > INT64_MAX / ldq,
                  QMM_ERR_UNSUPPORTED, "qmm_quantize_rows: [%lld, %lld] with ldx=%lld, ldq=%lld too large", (long long)M,
                  (long long)K, (long long)ldx, (long long)ldq);
    QMM_RETURN_IF(convrot_gs && (!qmm_convrot_gs_valid(convrot_gs) || K % convrot_gs), QMM_ERR_UNSUPPORTED,
                  "qmm_quantize_rows: convrot group %d for K=%lld (needs a power of 4 from 4 to %d dividing K)",
                  convrot_gs, (long long)K, QMM_MAX_CONVROT_GS);
    qmm_weight w;  /* the pre-pass reads the name, K and the group of a weight */
    memset(&w, 0, sizeof w);
    snprintf(w.name, sizeof w.name, "quantize_rows");
    w.K = K;
    w.convrot_gs = convrot_gs;
    qmm_call c;
    memset(&c, 0, sizeof c);
    c.w = &w; c.M = M; c.K = K; c.K_in = K; c.x = x; c.x_dtype = x_dtype; c.ldx = ldx;
    c.token_scales_in = scales_in;
    return qmm_prepass(ctx, &c, q, ldq, scales_out, 0);
}

typedef struct {
    const qmm_call *c;
    const int32_t *acc;
    int64_t ldacc;
    const float *s;
} epi_job;

static void epi_rows(int64_t r0, int64_t r1, int thread, void *arg) {
    (void)thread;
    const epi_job *j = arg;
    qmm_epilogue_block_ref(j->c, j->acc + r0 * j->ldacc, j->ldacc, r0, r1 - r0, 0, j->c->N, j->s + r0);
}

qmm_status qmm_linear_epilogue(qmm_context *ctx, const qmm_weight *w, int64_t M, const int32_t *acc, int64_t ldacc,
                               const float *s, void *y, qmm_dtype yt, int64_t ldy) {
    QMM_RETURN_IF(!ctx || !w || !acc || !s || !y, QMM_ERR_INVALID_ARGUMENT, "qmm_linear_epilogue: %s is NULL",
                  !ctx ? "ctx" : !w ? "weight" : !acc ? "acc" : !s ? "token_scales" : "y");
    QMM_RETURN_IF(M <= 0, QMM_ERR_INVALID_ARGUMENT, "layer %s: epilogue M=%lld", w->name, (long long)M);
    if (!ldacc) ldacc = w->N;
    if (!ldy) ldy = w->N;
    QMM_RETURN_IF(ldacc < w->N || ldy < w->N, QMM_ERR_INVALID_ARGUMENT, "layer %s: epilogue strides < N=%lld",
                  w->name, (long long)w->N);
    QMM_RETURN_IF(!qmm_dtype_is_float(yt), QMM_ERR_UNSUPPORTED, "layer %s: epilogue out dtype %s", w->name, qmm_dtype_name(yt));
    QMM_RETURN_IF(M > INT64_MAX / ldacc / 4 || M > INT64_MAX / ldy / (int64_t)qmm_dtype_size(yt), QMM_ERR_UNSUPPORTED,
                  "layer %s: epilogue M=%lld with ldacc=%lld, ldy=%lld too large (byte sizes overflow)", w->name,
                  (long long)M, (long long)ldacc, (long long)ldy);
    QMM_RETURN_IF(!w->is_int8, QMM_ERR_UNSUPPORTED, "layer %s: epilogue is for int8 weights", w->name);
    qmm_call c;
    memset(&c, 0, sizeof c);
    qmm_weight view;
    QMM_FORWARD_IF_ERROR(qmm_weight_for_call(ctx, w, &view, &c.w));
    c.M = M; c.N = w->N; c.K = w->K; c.y = y; c.y_dtype = yt; c.ldy = ldy;
    epi_job j = {&c, acc, ldacc, s};
    qmm_pool_run_rows(ctx->pool, M, 1, epi_rows, &j);
    return QMM_OK;
}
