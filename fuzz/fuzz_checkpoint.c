/*
 * fuzz_checkpoint.c — libFuzzer target for the ComfyUI convention layer: any bytes go through
 * qmm_model_open_memory (strict, then listing unsupported layers); every layer of an accepted
 * model small enough (N·K <= 2^20) is packed into a weight and planned, which reads its
 * weight, scale and bias bytes; a W4A8 layer's weight borrows its codes from the input bytes, so
 * it also runs one row (every code decoded: a read past the codes is ASan's to see). Replayed on
 * the committed corpus by fuzz/replay.c.
 */
#include "qmm_io.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static qmm_context *g_ctx;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_ctx) {
        qmm_context_options o = qmm_context_options_default();
        o.n_threads = 1;
        if (qmm_context_create(&o, &g_ctx) != QMM_OK) return 0;
    }
    qmm_model *m = NULL;
    if (qmm_model_open_memory(data, size, NULL, &m) == QMM_OK) qmm_model_close(m);
    qmm_model_options mo = qmm_model_options_default();
    mo.allow_unsupported = 1;
    if (qmm_model_open_memory(data, size, &mo, &m) != QMM_OK) return 0;
    for (size_t i = 0; i < qmm_model_layer_count(m); i++) {
        const qmm_layer_info *l = qmm_model_layer(m, i);
        if (l->kind == QMM_LAYER_UNSUPPORTED || l->N * l->K > (1 << 20)) continue;
        qmm_weight *w = NULL;
        if (qmm_model_create_weight(m, g_ctx, l->name, &w) != QMM_OK) continue;
        qmm_linear_args a = qmm_linear_args_default();
        a.M = 3;
        a.x_dtype = QMM_BF16;
        a.y_dtype = QMM_BF16;
        qmm_plan_info p;
        qmm_plan(g_ctx, w, &a, &p);
        if (l->kind == QMM_LAYER_W4A8) {
            float *x = calloc((size_t)l->K, sizeof *x), *y = calloc((size_t)l->N, sizeof *y);
            if (x && y) {
                a.M = 1;
                a.x = x;
                a.x_dtype = QMM_F32;
                a.y = y;
                a.y_dtype = QMM_F32;
                (void)qmm_linear(g_ctx, w, &a);
            }
            free(x);
            free(y);
        }
        qmm_weight_destroy(w);
    }
    qmm_model_close(m);
    return 0;
}
