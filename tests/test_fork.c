/*
 * test_fork.c — a context made before fork() works in the child: the child's first
 * multi-threaded qmm_linear re-makes the pool (the parent's workers do not exist there) and
 * gives the parent's bits; destroying the inherited context and making a new one work too.
 * Each child runs under alarm(): a hang is a failure (SIGALRM), never a stuck test.
 */
#define _POSIX_C_SOURCE 200809L
#include "qmm.h"
#include "testutil.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

enum { M = 64, N = 256, K = 512, THREADS = 4, CHILD_SECONDS = 20 };

static int run(qmm_context *ctx, const qmm_weight *w, const float *x, float *y) {
    qmm_linear_args a = qmm_linear_args_default();
    a.M = M; a.x = x; a.x_dtype = QMM_F32; a.y = y; a.y_dtype = QMM_F32;
    return qmm_linear(ctx, w, &a) == QMM_OK;
}

/* What a child does; its exit status: 0 all good, 1 a wrong or failed call. */
static int child(int what, qmm_context *ctx, const qmm_weight *w, const float *x, const float *want) {
    static float y[M * N];
    alarm(CHILD_SECONDS);
    if (what == 0) { /* the inherited context, twice */
        for (int r = 0; r < 2; r++) {
            memset(y, 0, sizeof y);
            if (!run(ctx, w, x, y) || memcmp(y, want, sizeof y) != 0) return 1;
        }
        return 0;
    }
    if (what == 1) { /* destroy the inherited context, make a new one */
        qmm_context_destroy(ctx);
        qmm_context_options o = qmm_context_options_default();
        o.n_threads = THREADS;
        qmm_context *c2 = NULL;
        if (qmm_context_create(&o, &c2) != QMM_OK) return 1;
        int ok = run(c2, w, x, y) && memcmp(y, want, sizeof y) == 0;
        qmm_context_destroy(c2);
        return ok ? 0 : 1;
    }
    /* what == 2: a grandchild of the child, after the child used the context */
    if (!run(ctx, w, x, y) || memcmp(y, want, sizeof y) != 0) return 1;
    pid_t g = fork();
    if (g == 0) _exit(run(ctx, w, x, y) && memcmp(y, want, sizeof y) == 0 ? 0 : 1);
    int st = 0;
    if (g < 0 || waitpid(g, &st, 0) != g) return 1;
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}

int main(int argc, char **argv) {
    tu_init(argc, argv, "fork");
    static int8_t w8[N * K];
    static float sc[N], x[M * K], want[M * N];
    tu_fill_i8(w8, N * K, -127, 127);
    for (int i = 0; i < N; i++) sc[i] = 0.001f * (float)(1 + i % 7);
    tu_fill_float(x, QMM_F32, M * K, 1.0f);

    qmm_context_options o = qmm_context_options_default();
    o.n_threads = THREADS;
    qmm_context *ctx = NULL;
    TU_CHECK_OK(qmm_context_create(&o, &ctx));
    qmm_weight_desc d = qmm_weight_desc_default();
    d.name = "fork.fc"; d.N = N; d.K = K; d.data = w8; d.scale = sc; d.n_scale = N;
    qmm_weight *w = NULL;
    TU_CHECK_OK(qmm_weight_create_int8(ctx, &d, &w));
    if (!ctx || !w) return tu_finish();
    TU_CHECK(run(ctx, w, x, want), "parent call: %s", qmm_last_error());

    static const char *what[] = {"inherited context, two calls", "destroy + new context",
                                 "fork again in the child"};
    for (int k = 0; k < 3; k++) {
        fflush(stdout);
        pid_t p = fork();
        if (p == 0) _exit(child(k, ctx, w, x, want));
        TU_CHECK(p > 0, "fork failed");
        int st = 0;
        TU_CHECK(waitpid(p, &st, 0) == p, "waitpid");
        if (WIFSIGNALED(st))
            TU_CHECK(0, "child (%s) killed by signal %d%s", what[k], WTERMSIG(st),
                     WTERMSIG(st) == SIGALRM ? " (hung past the alarm)" : "");
        else
            TU_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child (%s) exit status %d", what[k],
                     WEXITSTATUS(st));
    }
    /* the parent's pool is untouched by its children */
    static float y[M * N];
    TU_CHECK(run(ctx, w, x, y) && memcmp(y, want, sizeof y) == 0, "parent after the forks");
    qmm_weight_destroy(w);
    qmm_context_destroy(ctx);
    return tu_finish();
}
