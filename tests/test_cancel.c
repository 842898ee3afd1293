/*
 * test_cancel.c — qmm_cancel (SPEC §12): long calls on 1 and 2 threads — an attention call (mode
 * int8, dispatch's engine), linears on an owned int8 weight, a borrowed int8 weight and an f32
 * weight (the int8 and the float drivers) — cancelled from another thread at random moments (the
 * seed is printed). Each cancelled call returns QMM_ERR_CANCELLED naming the call (or QMM_OK with
 * the full result, when the request met its return; a request that found no call in flight
 * returns 0 and the call its full result), within a generous bound (1 s: CI machines are noisy;
 * the latencies are printed, not asserted tighter); no thread is left (the process's thread count
 * before and after); the next call gives the bits of an uncancelled one. A cancel with nothing in
 * flight changes nothing (returns 0; the next call runs whole, bit-identical); qmm_cancel(NULL)
 * is -1 with a message. QMM_TEST_QUICK=1: smaller calls, fewer rounds, and smaller still under
 * ASan (its leak check covers "no memory lost"): a few seconds either way.
 */
#define _POSIX_C_SOURCE 200809L
#include "testutil.h"

#include <dirent.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void sleep_s(double s) {
    if (s <= 0) return;
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* the threads of this process now */
static int thread_count(void) {
    DIR *d = opendir("/proc/self/task");
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* One long call on ctx: an attention or a linear, its output and its size. */
typedef struct {
    const char *name;
    qmm_context *ctx;
    int attention;
    qmm_attention_args a;        /* attention */
    const qmm_weight *w;         /* linear */
    qmm_linear_args l;
    void *out;
    size_t out_bytes;
} call_t;

static qmm_status run_call(call_t *c) {
    return c->attention ? qmm_attention(c->ctx, &c->a) : qmm_linear(c->ctx, c->w, &c->l);
}

typedef struct {
    call_t *c;
    qmm_status st;
    double t_end;
    char msg[512];   /* the call's qmm_last_error (per thread) */
} runner;

static void *run_thread(void *arg) {
    runner *r = arg;
    r->st = run_call(r->c);
    r->t_end = now_s();
    snprintf(r->msg, sizeof r->msg, "%s", r->st == QMM_OK ? "" : qmm_last_error());
    return NULL;
}

typedef struct {
    double worst, sum;
    int n;
} lat_t;

/* rounds cancels of c at random moments within [0, 0.9 · its time]; want: the uncancelled bits */
static void cancel_rounds(call_t *c, const void *want, double t_call, int rounds, lat_t *lat) {
    qmm_counters before, after;
    qmm_get_counters(c->ctx, &before);
    int cancelled = 0, missed = 0;
    for (int i = 0; i < rounds; i++) {
        /* the first round cancels early (dispatch, the pre-pass, the first panels), the others
         * anywhere in the call */
        const double delay = i == 0 ? 1e-3 : t_call * 0.9 * (double)tu_rand_int(0, 1000) / 1000.0;
        const int threads0 = thread_count();
        memset(c->out, 0x5a, c->out_bytes);
        runner r = {c, QMM_OK, 0, ""};
        pthread_t th;
        if (!TU_CHECK(pthread_create(&th, NULL, run_thread, &r) == 0, "%s: pthread_create", c->name)) return;
        sleep_s(delay);
        const double t0 = now_s();
        const int reached = qmm_cancel(c->ctx);
        pthread_join(th, NULL);
        const double ms = (r.t_end - t0) * 1e3;
        TU_CHECK(thread_count() == threads0, "%s: %d threads after the cancelled call, %d before", c->name,
                 thread_count(), threads0);
        TU_CHECK(reached == 0 || reached == 1, "%s: qmm_cancel returned %d", c->name, reached);
        if (r.st == QMM_ERR_CANCELLED) {
            cancelled++;
            TU_CHECK(reached == 1, "%s: QMM_ERR_CANCELLED though qmm_cancel found no call in flight", c->name);
            TU_CHECK(strstr(r.msg, "cancelled by qmm_cancel") != NULL, "%s: message %s", c->name, r.msg);
            TU_CHECK(ms < 1000.0, "%s: returned %.1f ms after qmm_cancel (delay %.3f s)", c->name, ms, delay);
            if (ms > lat->worst) lat->worst = ms;
            lat->sum += ms;
            lat->n++;
        } else {
            /* the request met the call's return, or came after it: the whole result */
            missed++;
            TU_CHECK(r.st == QMM_OK, "%s: %s: %s", c->name, qmm_status_name(r.st), r.msg);
            TU_CHECK(memcmp(c->out, want, c->out_bytes) == 0, "%s: a call the cancel missed differs", c->name);
        }
        /* the next call clears the request: whole and bit-identical */
        memset(c->out, 0x5a, c->out_bytes);
        qmm_status st = run_call(c);
        TU_CHECK(st == QMM_OK, "%s: the call after a cancel: %s: %s", c->name, qmm_status_name(st), qmm_last_error());
        TU_CHECK(memcmp(c->out, want, c->out_bytes) == 0, "%s: the call after a cancel (delay %.3f s) differs", c->name,
                 delay);
    }
    qmm_get_counters(c->ctx, &after);
    const int op = c->attention ? QMM_OP_ATTENTION : QMM_OP_LINEAR;
    TU_CHECK(after.op[op].errors - before.op[op].errors == (uint64_t)cancelled, "%s: %llu errors counted for %d cancels",
             c->name, (unsigned long long)(after.op[op].errors - before.op[op].errors), cancelled);
    tu_note("%s: %d cancelled, %d finished first", c->name, cancelled, missed);
}

/* The uncancelled bits of c, its time; then a cancel with nothing in flight, which changes nothing. */
static double reference(call_t *c, void *want) {
    memset(c->out, 0x5a, c->out_bytes);
    const double t0 = now_s();
    TU_CHECK_OK(run_call(c));
    const double t = now_s() - t0;
    memcpy(want, c->out, c->out_bytes);
    TU_CHECK(qmm_cancel(c->ctx) == 0, "%s: qmm_cancel with no call in flight did not return 0", c->name);
    TU_CHECK(qmm_cancel(c->ctx) == 0, "%s: a second qmm_cancel with no call in flight did not return 0", c->name);
    memset(c->out, 0x5a, c->out_bytes);
    TU_CHECK_OK(run_call(c));
    TU_CHECK(memcmp(c->out, want, c->out_bytes) == 0, "%s: the call after an idle qmm_cancel differs", c->name);
    return t;
}

static void one(call_t *c, int threads, int rounds) {
    void *want = malloc(c->out_bytes);
    const double t = reference(c, want);
    lat_t lat = {0, 0, 0};
    cancel_rounds(c, want, t, rounds, &lat);
    tu_note("%s, %d thread%s: a call %.0f ms; cancel latency mean %.2f ms, worst %.2f ms over %d cancels", c->name, threads,
            threads > 1 ? "s" : "", t * 1e3, lat.n ? lat.sum / lat.n : 0.0, lat.worst, lat.n);
    free(want);
}

static void attention_case(qmm_context *ctx, int threads, int64_t S, int rounds) {
    const int64_t D = 128;
    float *q = malloc((size_t)(S * D) * 4), *k = malloc((size_t)(S * D) * 4), *v = malloc((size_t)(S * D) * 4);
    float *o = malloc((size_t)(S * D) * 4);
    tu_fill_float(q, QMM_F32, S * D, 1.0f);
    tu_fill_float(k, QMM_F32, S * D, 1.0f);
    tu_fill_float(v, QMM_F32, S * D, 1.0f);
    call_t c = {.name = "attention [1,1,S,128] mode int8", .ctx = ctx, .attention = 1, .out = o,
                .out_bytes = (size_t)(S * D) * 4};
    qmm_attention_args a = qmm_attention_args_default();
    a.B = a.H = a.Hkv = 1; a.S = a.Skv = S; a.D = D;
    a.q = q; a.k = k; a.v = v; a.out = o;
    for (int i = 0; i < 3; i++) {
        const int64_t st = i == 0 ? S * D : i == 1 ? S * D : D;
        a.q_stride[i] = a.k_stride[i] = a.v_stride[i] = a.out_stride[i] = st;
    }
    a.mode = QMM_ATTN_INT8;
    c.a = a;
    tu_note("attention S = Skv = %lld", (long long)S);
    one(&c, threads, rounds);
    free(q); free(k); free(v); free(o);
}

/* kind 0: an owned int8 weight, 1: a borrowed int8 weight, 2: an f32 weight (the float driver);
 * N = K */
static void linear_case(qmm_context *ctx, int threads, int kind, int64_t M, int64_t N, int rounds) {
    const int64_t K = N;
    static const char *const names[3] = {"linear, owned int8 weight", "linear, borrowed int8 weight", "linear, f32 weight"};
    int8_t *w8 = malloc((size_t)(N * K));
    float *wf = malloc((size_t)(N * K) * 4), *sc = malloc((size_t)N * 4);
    float *x = malloc((size_t)(M * K) * 4), *y = malloc((size_t)(M * N) * 4);
    tu_fill_i8(w8, N * K, -127, 127);
    tu_fill_float(wf, QMM_F32, N * K, 0.05f);
    for (int64_t n = 0; n < N; n++) sc[n] = 0.001f * (float)(1 + n % 5);
    tu_fill_float(x, QMM_F32, M * K, 1.0f);
    qmm_weight *w = NULL;
    qmm_weight_desc d = qmm_weight_desc_default();
    d.name = names[kind]; d.N = N; d.K = K; d.data = w8; d.scale = sc; d.n_scale = N;
    qmm_status st = kind == 0   ? qmm_weight_create_int8(NULL, &d, &w)
                    : kind == 1 ? qmm_weight_borrow_int8(NULL, &d, &w)
                                : qmm_weight_create_float(NULL, names[kind], wf, QMM_F32, N, K, K, NULL, QMM_F32, &w);
    if (TU_CHECK(st == QMM_OK, "%s: %s", names[kind], qmm_last_error())) {
        call_t c = {.name = names[kind], .ctx = ctx, .w = w, .out = y, .out_bytes = (size_t)(M * N) * 4};
        c.l = qmm_linear_args_default();
        c.l.M = M; c.l.x = x; c.l.x_dtype = QMM_F32; c.l.y = y; c.l.y_dtype = QMM_F32;
        one(&c, threads, rounds);
    }
    qmm_weight_destroy(w);
    free(w8); free(wf); free(sc); free(x); free(y);
}

int main(int argc, char **argv) {
    tu_init(argc, argv, "cancel");
    const int quick = getenv("QMM_TEST_QUICK") && atoi(getenv("QMM_TEST_QUICK"));
    TU_CHECK(strcmp(qmm_status_name(QMM_ERR_CANCELLED), "QMM_ERR_CANCELLED") == 0, "status name %s",
             qmm_status_name(QMM_ERR_CANCELLED));
    TU_CHECK(qmm_cancel(NULL) == -1 && strstr(qmm_last_error(), "ctx is NULL"), "qmm_cancel(NULL): %s", qmm_last_error());
    const int rounds = quick ? 3 : 8;
    const int small = quick && SANITIZED; /* ASan: calls 5-20x slower */
    const int64_t S = small ? 1024 : quick ? 3072 : 8192, NK = small ? 1024 : 2048;
    const int64_t M8 = small ? 256 : quick ? 512 : 2048, Mf = small ? 128 : quick ? 256 : 1024;
    for (int threads = 1; threads <= 2; threads++) {
        qmm_context_options o = qmm_context_options_default();
        o.n_threads = threads;
        qmm_context *ctx = NULL;
        if (!TU_CHECK(qmm_context_create(&o, &ctx) == QMM_OK, "context: %s", qmm_last_error())) continue;
        attention_case(ctx, threads, S, rounds);
        linear_case(ctx, threads, 0, M8, NK, rounds);
        linear_case(ctx, threads, 1, M8, NK, rounds);
        linear_case(ctx, threads, 2, Mf, NK, rounds);
        qmm_context_destroy(ctx);
    }
    return tu_finish();
}
