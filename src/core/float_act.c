/*
 * float_act.c — the float engines' activation pre-pass (act → rotation → f32 or bf16 panels):
 * the scalar panel function, the selection of the SIMD ones, the threaded pass over a chunk.
 * Contract and layouts: float_act.h.
 */
#include "float_act.h"

#include "numerics.h"

#include <string.h>

/* ---------------------------------------------------------------- one A panel */
size_t qmm_float_act_tmp_floats(int64_t K, int mr) {
    int64_t ref = qmm_round_up(K, 16), simd = (int64_t)mr * QMM_FACT_KB;
    return (size_t)(ref > simd ? ref : simd);
}

void qmm_float_act_pack_rows(const float *tmp, int64_t ldt, int i0, int nrows, int mr, int64_t k0, int64_t k1,
                             int64_t K, int bf16, void *Ap, int64_t Ka) {
    for (int i = 0; i < nrows; i++) {
        const float *t = tmp + (int64_t)i * ldt - k0;
        const int64_t ii = i0 + i;
        if (bf16) {
            uint16_t *A = (uint16_t *)Ap + 2 * ii;
            for (int64_t k = k0; k < k1; k++) A[(k / 2) * mr * 2 + (k % 2)] = qmm_f32_to_bf16(t[k]);
            if (k1 == K && Ka > K) A[(K / 2) * mr * 2 + 1] = 0; /* odd K: the last pair's second half */
        } else {
            float *A = (float *)Ap + ii;
            for (int64_t k = k0; k < k1; k++) A[k * mr] = t[k];
        }
    }
}

void qmm_float_act_panel_ref(const qmm_fact_src *src, int rows, int mr, int bf16, void *Ap, int64_t Ka, float *tmp) {
    const size_t xs = qmm_dtype_size(src->t);
    for (int i = 0; i < mr; i++) {
        if (i < rows) {
            qmm_ref_act_rotate_row((const char *)src->x + (size_t)(i * src->ldx) * xs, src->t, src->K, src->act,
                                   src->gs, tmp);
        } else {
            memset(tmp, 0, (size_t)src->K * sizeof(float));
        }
        qmm_float_act_pack_rows(tmp, src->K, i, 1, mr, 0, src->K, src->K, bf16, Ap, Ka);
    }
}

qmm_fact_panel_fn qmm_float_act_panel_select(const qmm_context *ctx) {
    const int level = qmm_core_simd(ctx);
    if (level == QMM_ISA_AVX512) return qmm_float_act_panel_avx512;
    if (level == QMM_ISA_AVX2) return qmm_float_act_panel_avx2;
    return qmm_float_act_panel_ref;
}

/* ---------------------------------------------------------------- the A pre-pass */
typedef struct {
    const qmm_call *c;
    int64_t r0;                /* the chunk's first row */
    int mr, bf16;
    void *A;
    int64_t Ka, Kn;            /* A's k extent; k written by the panel functions (K, or K rounded to 2) */
    float *tmp;                /* [threads][tmp_floats] */
    int64_t tmp_floats;
    qmm_fact_panel_fn panel;
} act_job;

/* the panels of chunk rows [i0, i1) (whole panels: i0 a multiple of mr) */
static void act_rows(int64_t i0, int64_t i1, int thread, void *arg) {
    act_job *j = arg;
    const qmm_call *c = j->c;
    const size_t xs = qmm_dtype_size(c->x_dtype);
    const size_t es = j->bf16 ? 2 : 4;
    float *tmp = j->tmp + (int64_t)thread * j->tmp_floats;
    qmm_fact_src src = {NULL, c->ldx, c->x_dtype, c->K, c->act, c->w->is_int8 ? c->w->convrot_gs : 0};
    for (int64_t i = i0; i < i1; i += j->mr) {
        const int rows = (int)(i1 - i < j->mr ? i1 - i : j->mr);
        char *Ap = (char *)j->A + (size_t)((i / j->mr) * j->Ka * j->mr) * es;
        src.x = (const char *)c->x + (size_t)((j->r0 + i) * c->ldx) * xs;
        j->panel(&src, rows, j->mr, j->bf16, Ap, j->Ka, tmp);
        if (j->Ka > j->Kn) /* the k tail [Kn, Ka): mr values per k, contiguous */
            memset(Ap + (size_t)(j->Kn * j->mr) * es, 0, (size_t)((j->Ka - j->Kn) * j->mr) * es);
    }
}

qmm_status qmm_float_act_pack(qmm_context *ctx, const qmm_call *c, int64_t r0, int64_t rows, int mr, int bf16,
                              void *A, int64_t Ka) {
    act_job j = {
        .c = c, .r0 = r0, .mr = mr, .bf16 = bf16, .A = A, .Ka = Ka,
        .Kn = bf16 ? qmm_round_up(c->K, 2) : c->K,
        .tmp_floats = qmm_round_up((int64_t)qmm_float_act_tmp_floats(c->K, mr), 16),
    };
    j.panel = qmm_float_act_panel_select(ctx);
    /* the SIMD panels work in chunks of QMM_FACT_KB k values: larger groups take the scalar one */
    if (c->w->is_int8 && c->w->convrot_gs > QMM_FACT_KB) j.panel = qmm_float_act_panel_ref;
    void *tmp;
    QMM_FORWARD_IF_ERROR(qmm_context_scratch(ctx, QMM_SCRATCH_PREPASS,
                                             (size_t)(ctx->n_threads * j.tmp_floats) * sizeof(float), &tmp));
    j.tmp = tmp;
    /* whole panels per range; the result does not depend on the split */
    qmm_pool_run_rows(ctx->pool, rows, mr, act_rows, &j);
    return QMM_OK;
}
