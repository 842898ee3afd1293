/*
 * input_stage.c — the comfy-kitchen input transforms (SPEC §1a) that the engines' fused pre-pass
 * does not carry: the input acts rms_norm and situ, and the modulation a = T(a · T(1 + m[k]))
 * (with any act). qmm_input_stage() materializes
 *
 *     a [M][K] of x's dtype T = modulate(act(x))      (each value rounded to T, as torch does)
 *
 * in the context's QMM_SCRATCH_STAGE arena, threaded over rows, and rewrites the call to read
 * it with act none and no modulation. Every engine (int8, float, ref) then sees the same values,
 * so the result's bits do not depend on the engine. Definitions, per row, in x's dtype T:
 *
 *   rms_norm   ms = qmm_sumsq16(x) / K in fp32 (16 lanes, a fixed fold); r = 1 / sqrtf(ms + eps);
 *              a[k] = T((x[k] · r) · T(w[k]))               (torch: rms_norm in T's opmath f32)
 *   situ       x = [hidden | gate]; every step rounded to T as the kitchen's eager code does:
 *              gated = T(T(T(tanh(T(gate / 4))) · 4) · T(sigmoid(gate)))
 *              a = T(T(T(tanh(T(hidden / 25))) · 25) · gated)   (qmm_tanh, qmm_sigmoid: numerics.h)
 *   swiglu, gelu_tanh (only with a modulation): qmm_ref_act_rotate_row's definitions (numerics.h)
 *   modulation a = T(a · T(1 + m[k])), m: K values of T
 *
 * The row function is the AVX-512 one (input_stage_avx512.c) where the CPU and the ISA cap allow,
 * else the scalar one here; both give the same bits. tanh/sigmoid use qmm's exp and the rms sum
 * a fixed lane order; torch uses its own vector library and reduction order, so against torch
 * these acts agree within a bound (one ulp of T before quantization), not bit for bit.
 */
#include "input_stage.h"

#include "numerics.h"
#include "prepass.h"

#include <math.h>
#include <string.h>

int qmm_input_stage_needed(const qmm_call *c) {
    return c->act == QMM_ACT_RMS_NORM || c->act == QMM_ACT_SITU || c->modulation != NULL;
}

float qmm_rms_norm_factor(const qmm_call *c, float sumsq) {
    float ms = sumsq / (float)c->K;
    return 1.0f / sqrtf(ms + c->act_eps);
}

void qmm_input_stage_row_ref(const qmm_call *c, const void *x, void *out, float *tmp) {
    const qmm_dtype t = c->x_dtype;
    const int64_t K = c->K;
    float *a = tmp;
    switch (c->act) {
    case QMM_ACT_RMS_NORM: {
        const float r = qmm_rms_norm_factor(c, qmm_sumsq16(x, t, K));
        for (int64_t k = 0; k < K; k++) {
            float w = qmm_round_to(qmm_load_f(c->act_weight, c->act_weight_dtype, k), t);
            a[k] = qmm_round_to((qmm_load_f(x, t, k) * r) * w, t);
        }
        break;
    }
    case QMM_ACT_SITU:
        for (int64_t k = 0; k < K; k++) {
            float h = qmm_load_f(x, t, k), g = qmm_load_f(x, t, K + k);
            float tg = qmm_round_to(qmm_tanh(qmm_round_to(g / 4.0f, t)), t);
            float sg = qmm_round_to(qmm_sigmoid(g), t);
            float gated = qmm_round_to(qmm_round_to(tg * 4.0f, t) * sg, t);
            float th = qmm_round_to(qmm_tanh(qmm_round_to(h / 25.0f, t)), t);
            a[k] = qmm_round_to(qmm_round_to(th * 25.0f, t) * gated, t);
        }
        break;
    default: /* none, swiglu, gelu_tanh: the engines' own definitions, without rotation */
        qmm_ref_act_rotate_row(x, t, K, c->act, 0, a);
        break;
    }
    if (c->modulation)
        for (int64_t k = 0; k < K; k++) {
            float m = qmm_round_to(1.0f + qmm_load_f(c->modulation, t, k), t);
            a[k] = qmm_round_to(a[k] * m, t);
        }
    for (int64_t k = 0; k < K; k++) qmm_store_f(out, t, k, a[k]);
}

typedef struct {
    const qmm_call *c;
    void *out;            /* [M][K] of T */
    float *tmp;           /* [threads][K] */
    qmm_input_stage_row_fn row;
} stage_job;

static void stage_rows(int64_t r0, int64_t r1, int thread, void *arg) {
    const stage_job *j = arg;
    const qmm_call *c = j->c;
    const size_t es = qmm_dtype_size(c->x_dtype);
    float *a = j->tmp + (int64_t)thread * c->K;
    for (int64_t r = r0; r < r1; r++)
        j->row(c, (const char *)c->x + (size_t)(r * c->ldx) * es, (char *)j->out + (size_t)(r * c->K) * es, a);
}

qmm_input_stage_row_fn qmm_input_stage_row_select(const qmm_context *ctx) {
    if (qmm_input_stage_row_avx512_ptr && qmm_core_simd(ctx) == QMM_ISA_AVX512) return qmm_input_stage_row_avx512_ptr;
    return qmm_input_stage_row_ref;
}

qmm_status qmm_input_stage(qmm_context *ctx, qmm_call *c) {
    if (!qmm_input_stage_needed(c)) return QMM_OK;
    const size_t es = qmm_dtype_size(c->x_dtype);
    size_t out_bytes, tmp_bytes;
    if (!qmm_mul_ok((size_t)c->M, (size_t)c->K * es, &out_bytes) ||
        !qmm_mul_ok((size_t)ctx->n_threads, (size_t)c->K * sizeof(float), &tmp_bytes) ||
        out_bytes > SIZE_MAX - tmp_bytes - 64)
        return qmm_fail(QMM_ERR_UNSUPPORTED, "layer %s: M=%lld rows of the %s input stage too large", c->w->name,
                        (long long)c->M, qmm_act_name(c->act));
    void *buf;
    QMM_FORWARD_IF_ERROR(qmm_context_scratch(ctx, QMM_SCRATCH_STAGE, qmm_round_up((int64_t)out_bytes, 64) + tmp_bytes,
                                             &buf));
    stage_job j = {c, buf, (float *)((char *)buf + qmm_round_up((int64_t)out_bytes, 64)),
                   qmm_input_stage_row_select(ctx)};
    qmm_pool_run_rows(ctx->pool, c->M, 1, stage_rows, &j);
    c->x = buf;
    c->ldx = c->K;
    c->K_in = c->K;
    c->act = QMM_ACT_NONE;
    c->act_weight = NULL;
    c->modulation = NULL;
    return QMM_OK;
}
