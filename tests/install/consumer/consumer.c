/*
 * consumer.c — a program outside qmm's tree that uses the installed library through its public
 * headers only: one 16 × 64 int8 layer with known numbers, run by dispatch and by the reference
 * engine. x = 1 everywhere gives s_r = 1/127, q = 127; W = 1 everywhere and w_scale = 0.5 give
 * acc = 127·64 and y = 32 (SPEC §1 steps 3–5). Prints one line the install test checks.
 */
#include <qmm.h>
#include <qmm_io.h>

#include <stdio.h>
#include <string.h>

enum { M = 2, N = 16, K = 64 };

int main(void) {
    static int8_t w[N * K];
    static float x[M * K], y[M * N], yref[M * N], scale[N];
    for (int i = 0; i < N * K; i++) w[i] = 1;
    for (int i = 0; i < M * K; i++) x[i] = 1.0f;
    for (int n = 0; n < N; n++) scale[n] = 0.5f;

    qmm_context *ctx = NULL;
    qmm_weight *wt = NULL;
    qmm_weight_desc d = qmm_weight_desc_default();
    d.name = "consumer.fc";
    d.N = N;
    d.K = K;
    d.data = w;
    d.scale = scale;
    d.n_scale = N;
    qmm_linear_args a = qmm_linear_args_default();
    a.M = M;
    a.x = x;
    a.y = y;
    qmm_status st = qmm_context_create(NULL, &ctx);
    if (st == QMM_OK) st = qmm_weight_create_int8(ctx, &d, &wt);
    if (st == QMM_OK) st = qmm_linear(ctx, wt, &a);
    const qmm_engine_id ran = qmm_last_engine(ctx);
    a.y = yref;
    a.engine = QMM_ENGINE_REF;
    if (st == QMM_OK) st = qmm_linear(ctx, wt, &a);
    if (st != QMM_OK) {
        fprintf(stderr, "consumer: %s: %s\n", qmm_status_name(st), qmm_last_error());
        qmm_weight_destroy(wt);
        qmm_context_destroy(ctx);
        return 1;
    }
    int same = memcmp(y, yref, sizeof y) == 0;
    printf("consumer: qmm %s (%u) y[0]=%.3f y[%d]=%.3f engine=%s %s io.min_size=%lld\n", qmm_version_string(),
           qmm_version_number(), y[0], M * N - 1, y[M * N - 1], qmm_engine_name(ran),
           same ? "same-as-ref" : "DIFFERS-FROM-REF", (long long)qmm_quantize_file_options_default().min_size);
    qmm_weight_destroy(wt);
    qmm_context_destroy(ctx);
    return same ? 0 : 1;
}
