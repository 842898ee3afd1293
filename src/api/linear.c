/*
 * linear.c — the linear call: validate the arguments, ask dispatch for the engine
 * (dispatch/plan.c: the engines best-first, the first that admits; a float engine on the same
 * CPU only when no int8 engine admits; the choice cached on the weight per call class, every
 * engine's reason made only for a message), run it, count it (a fallback is counted, logged once
 * per weight, refused in strict mode), and never pick the scalar reference unless asked for by
 * name; with the phase timers on (qmm_profile) the call's set-up, engine and whole time are
 * added to the context's totals. Also qmm_plan and the SPEC §6 building blocks (amax, epilogue).
 */
#include "borrow.h"
#include "dispatch.h"
#include "epilogue.h"
#include "float_gemm.h"
#include "input_stage.h"
#include "int8_gemm.h"
#include "numerics.h"
#include "prepass.h"

#include <math.h>
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

qmm_status qmm_plan(qmm_context *ctx, const qmm_weight *w, const qmm_linear_args *args, qmm_plan_info *out) {
    QMM_RETURN_IF(!ctx || !out, QMM_ERR_INVALID_ARGUMENT, "qmm_plan: %s is NULL", !ctx ? "ctx" : "out");
    qmm_call c;
    QMM_FORWARD_IF_ERROR(make_call(w, args, 0, &c));
    qmm_plan_call(ctx, &c, out);
    if (w->w4a8 && out->engine != QMM_ENGINE_AUTO)
        snprintf(out->weight, sizeof out->weight,
                 "W%dA8: %d-bit codes%s, group %d, s_rel %s; decoded per call into %s (no int8 copy)", w->w4.bits,
                 w->w4.bits, w->w4.codebook ? " + codebook" : "", w->w4.group, qmm_dtype_name(w->w4.s_rel_dtype),
                 out->is_fallback ? "the float fallback's n16k4 blocks (W8A16)"
                                  : qmm_i8_w4a8_site(qmm_i8_engine_of(out->engine), w, args->M));
    return QMM_OK;
}

qmm_engine_id qmm_last_engine(const qmm_context *ctx) { return ctx ? ctx->last_engine : QMM_ENGINE_AUTO; }

static void count(qmm_context *ctx, qmm_engine_id id, int fallback) {
    ctx->last_engine = id;
    ctx->counters.calls[id]++;
    if (fallback) ctx->counters.fallbacks++;
}

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

/* The error of an AUTO call that dispatch refused (no engine admits it, or strict policy and a
 * fallback), with every refusing engine's reason: the full plan, made only here. */
static qmm_status refusal(const qmm_context *ctx, qmm_call *c) {
    const qmm_weight *w = c->w;
    qmm_plan_info p;
    char reasons[QMM_REASONS_TEXT_MAX];
    qmm_plan_call(ctx, c, &p);
    qmm_plan_reasons_text(&p, p.status == QMM_ERR_FALLBACK_REFUSED, reasons);
    if (p.status == QMM_ERR_FALLBACK_REFUSED)
        return qmm_fail(QMM_ERR_FALLBACK_REFUSED, "layer %s [%lld, %lld] M=%lld: would fall back to %s (strict policy): %s",
                        w->name, (long long)w->N, (long long)w->K, (long long)c->M, qmm_engine_name(p.engine), reasons);
    if (p.status == QMM_ERR_NO_ENGINE)
        return qmm_fail(QMM_ERR_NO_ENGINE, "layer %s [%lld, %lld] M=%lld: no engine admits it: %s", w->name,
                        (long long)w->N, (long long)w->K, (long long)c->M, reasons);
    return qmm_fail(QMM_ERR_INTERNAL, "layer %s [%lld, %lld] M=%lld: dispatch refused a call its plan admits (%s)",
                    w->name, (long long)w->N, (long long)w->K, (long long)c->M, qmm_engine_name(p.engine));
}

/* The call on engine e: its own run, or the core driver its operations name (qmm_engine_ops). */
static qmm_status engine_run(const qmm_engine *e, qmm_context *ctx, const qmm_call *c) {
    if (e->ops->run) return e->ops->run(ctx, c);
    if (e->ops->i8) return qmm_int8_gemm(ctx, c, e->ops->i8);
    if (e->ops->f) return qmm_float_gemm(ctx, c, e->ops->f);
    return qmm_fail(QMM_ERR_INTERNAL, "layer %s: engine %s has no run (not built)", c->w->name, e->name);
}

qmm_status qmm_linear(qmm_context *ctx, const qmm_weight *w, const qmm_linear_args *args) {
    QMM_RETURN_IF(!ctx, QMM_ERR_INVALID_ARGUMENT, "qmm_linear: ctx is NULL");
    const uint64_t t_call = ctx->profile ? qmm_now_ns() : 0;
    qmm_call c;
    qmm_status st = make_call(w, args, 1, &c);
    if (st != QMM_OK) { ctx->counters.errors++; return st; }
    char why[QMM_REASON_MAX];
    const qmm_engine *e;
    int fallback = 0;
    if (args->engine != QMM_ENGINE_AUTO) {
        e = qmm_engine_get(args->engine);
        if (!e) { ctx->counters.errors++; return qmm_fail(QMM_ERR_INVALID_ARGUMENT, "layer %s: engine %d unknown", w->name, (int)args->engine); }
        if (!qmm_engine_usable(e, ctx->max_isa, 0, why, sizeof why)) {
            ctx->counters.errors++;
            return qmm_fail(QMM_ERR_UNSUPPORTED_HARDWARE, "layer %s: engine %s unavailable: %s", w->name, e->name, why);
        }
        c.fallback = w->is_int8 && e->kind == QMM_KIND_FLOAT;
        const char *r = e->ops->admit(&c, why, sizeof why);
        if (r) {
            ctx->counters.errors++;
            return qmm_fail(QMM_ERR_UNSUPPORTED, "layer %s [%lld, %lld] M=%lld: engine %s refuses: %s", w->name,
                            (long long)w->N, (long long)w->K, (long long)c.M, e->name, r);
        }
    } else {
        /* the choice alone (cached on the weight); every engine's reason only when a message needs them */
        e = qmm_engine_get(qmm_plan_choose(ctx, &c));
        fallback = c.fallback;
        if (!e || (fallback && ctx->fallback == QMM_FALLBACK_STRICT)) {
            ctx->counters.errors++;
            return refusal(ctx, &c);
        }
        if (fallback) {
            qmm_weight *mw = (qmm_weight *)w; /* the once-flag, with the plan cache, is the weight's mutable state */
            if (ctx->verbose && atomic_exchange(&mw->fallback_logged, 1) == 0) {
                qmm_plan_info p;
                char reasons[QMM_REASONS_TEXT_MAX];
                qmm_plan_call(ctx, &c, &p);
                qmm_plan_reasons_text(&p, 1, reasons);
                qmm_log(ctx, "fallback: layer %s [%lld, %lld] runs W8A16 on %s: %s", w->name, (long long)w->N,
                        (long long)w->K, e->name, reasons);
            }
        } else {
            qmm_log(ctx, "dispatch: layer %s [%lld, %lld] M=%lld → %s", w->name, (long long)w->N, (long long)w->K,
                    (long long)c.M, e->name);
        }
    }
    qmm_weight view; /* a borrowed weight: this call's view of the caller's memory (borrow.c) */
    st = qmm_weight_for_call(ctx, w, &view, &c.w);
    if (st == QMM_OK) st = qmm_input_stage(ctx, &c);
    /* the int8 path fuses the residual into its epilogue (element by element, so residual may be
     * y); the float path adds it after writing y, from a copy when the two overlap */
    const int residual_after = c.residual && !(w->is_int8 && e->kind != QMM_KIND_FLOAT);
    if (st == QMM_OK && residual_after) st = residual_copy_if_overlapping(ctx, &c);
    _Atomic(const char *) bug = NULL;
    c.bug = &bug;
    if (st == QMM_OK) qmm_advise_huge(c.y, (size_t)((c.M - 1) * c.ldy + c.N) * qmm_dtype_size(c.y_dtype));
    const uint64_t t_engine = ctx->profile ? qmm_now_ns() : 0;
    if (st == QMM_OK) st = engine_run(e, ctx, &c);
    const uint64_t t_done = ctx->profile ? qmm_now_ns() : 0;
    if (st == QMM_OK && atomic_load(&bug))
        st = qmm_fail(QMM_ERR_INTERNAL, "layer %s [%lld, %lld] M=%lld on %s: %s (a bug in qmm: please report this message)",
                      w->name, (long long)w->N, (long long)w->K, (long long)c.M, e->name, atomic_load(&bug));
    if (st == QMM_OK && residual_after) st = residual_pass(ctx, &c);
    if (st != QMM_OK) {
        ctx->counters.errors++;
        if (!names_layer(qmm_last_error(), w->name)) { /* e.g. a scratch allocation: name the layer */
            char msg[QMM_ERROR_MAX];
            snprintf(msg, sizeof msg, "%s", qmm_last_error());
            return qmm_fail(st, "layer %s [%lld, %lld] M=%lld on %s: %s", w->name, (long long)w->N, (long long)w->K,
                            (long long)c.M, e->name, msg);
        }
        return st;
    }
    count(ctx, e->id, fallback);
    if (ctx->profile) { /* the successful calls (qmm_profile) */
        ctx->prof.calls++;
        ctx->prof.ns[QMM_PHASE_SETUP] += t_engine - t_call;
        ctx->prof.ns[QMM_PHASE_ENGINE] += t_done - t_engine;
        ctx->prof.ns[QMM_PHASE_CALL] += qmm_now_ns() - t_call;
    }
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
