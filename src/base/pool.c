/*
 * pool.c — a small persistent thread pool. Why not OpenMP: the library must pin workers where
 * the user asks, keep per-thread AMX tile state on threads it owns, stay usable from a static
 * library without an OpenMP runtime, and give a fixed task → thread mapping (task i runs on
 * thread i % n) so that any static partition is deterministic.
 *
 * qmm_pool_run(p, n, fn, arg): the calling thread acts as thread 0; workers 1..n-1 wake on a
 * generation counter, run their tasks and signal completion. One run at a time per pool
 * (a context is used by one thread at a time). Once the context's cancel word is set (qmm_cancel),
 * each thread runs no further task of the run: the run returns within one task per thread.
 *
 * qmm_pool_run_bracketed(p, n, fn, begin, end, arg): the same, with begin(thread) before a thread's
 * first task of the run and end(thread) after its last (threads with no task: neither) — per-thread
 * state of an engine (AMX tile configuration), placed by the pool that knows which thread runs what.
 * qmm_now_ns: the monotonic clock of the phase timers (qmm_profile).
 * qmm_pool_run_rows(p, rows, unit, fn, arg): the row-range form of it that the passes over
 * tokens use (pre-pass, input stage, epilogues): ranges of whole `unit`s of rows.
 *
 * Fork: a child process has only the thread that called fork(); the workers of every pool made
 * before it are gone and the pool's mutex may have been held by one of them. A pthread_atfork
 * child handler bumps a process-wide fork count; a pool made under an older count is re-made in
 * place at its next run (fresh mutex and conditions, new workers; no join of the parent's
 * threads), and destroying it only frees memory. If its workers cannot be started again, its
 * tasks run on the calling thread.
 */
#define _GNU_SOURCE
#include "qmm_base.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct qmm_pool {
    int n;
    int pin;
    int *cpus;        /* n entries when pinned to a list, else NULL */
    unsigned forks;   /* fork_count when the workers were started */
    const qmm_cancel_word *cancel; /* the context's (NULL: none): polled before each task */
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t wake, done;
    uint64_t generation;
    int pending;      /* workers still running the current generation */
    int quit;
    /* the current job */
    int64_t n_tasks;
    qmm_task_fn fn;
    qmm_thread_fn begin, end;
    void *arg;
};

typedef struct { qmm_pool *p; int index; int cpu; } worker_arg;

static volatile unsigned fork_count;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static void on_fork_child(void) { fork_count++; }
static void install_atfork(void) { (void)pthread_atfork(NULL, NULL, on_fork_child); }

static void pin_self(int cpu) {
    if (cpu < 0) return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    (void)pthread_setaffinity_np(pthread_self(), sizeof set, &set); /* best effort */
}

static void run_share(qmm_pool *p, int index) {
    if (index >= p->n_tasks) return;
    if (p->begin) p->begin(index, p->arg);
    for (int64_t t = index; t < p->n_tasks && !qmm_cancel_requested(p->cancel); t += p->n)
        p->fn(t, p->n_tasks, index, p->arg);
    if (p->end) p->end(index, p->arg);
}

static void *worker_main(void *varg) {
    worker_arg wa = *(worker_arg *)varg;
    free(varg);
    qmm_pool *p = wa.p;
    pin_self(wa.cpu);
    uint64_t seen = 0;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        while (!p->quit && p->generation == seen) pthread_cond_wait(&p->wake, &p->mu);
        if (p->quit) { pthread_mutex_unlock(&p->mu); break; }
        seen = p->generation;
        pthread_mutex_unlock(&p->mu);
        run_share(p, wa.index);
        pthread_mutex_lock(&p->mu);
        if (--p->pending == 0) pthread_cond_signal(&p->done);
        pthread_mutex_unlock(&p->mu);
    }
    return NULL;
}

/* Starts workers 1..n-1 of p (its mutex and conditions initialized); on failure p->n is the
 * number of threads that run (the started workers and the caller). */
static qmm_status start_workers(qmm_pool *p, int n_threads) {
    p->forks = fork_count;
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (!wa) { p->n = i; return qmm_fail(QMM_ERR_OUT_OF_MEMORY, "thread pool: out of memory"); }
        wa->p = p;
        wa->index = i;
        wa->cpu = p->pin ? (p->cpus ? p->cpus[i] : i) : -1;
        if (pthread_create(&p->threads[i], NULL, worker_main, wa) != 0) {
            free(wa);
            p->n = i;
            return qmm_fail(QMM_ERR_INTERNAL, "thread pool: cannot start thread %d of %d", i, n_threads);
        }
    }
    p->n = n_threads;
    return QMM_OK;
}

static void init_sync(qmm_pool *p) {
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    p->generation = 0;
    p->pending = 0;
    p->quit = 0;
}

qmm_status qmm_pool_create(int n_threads, int pin, const int *cpu_list, const qmm_cancel_word *cancel,
                           qmm_pool **out) {
    *out = NULL;
    (void)pthread_once(&atfork_once, install_atfork);
    if (n_threads < 1) n_threads = 1;
    qmm_pool *p = calloc(1, sizeof *p);
    if (!p) return qmm_fail(QMM_ERR_OUT_OF_MEMORY, "thread pool: out of memory");
    p->n = 1;
    p->pin = pin;
    p->cancel = cancel;
    init_sync(p);
    p->threads = calloc((size_t)n_threads, sizeof *p->threads);
    if (!p->threads) { qmm_pool_destroy(p); return qmm_fail(QMM_ERR_OUT_OF_MEMORY, "thread pool: out of memory"); }
    if (pin && cpu_list) {
        p->cpus = malloc((size_t)n_threads * sizeof *p->cpus);
        if (!p->cpus) { qmm_pool_destroy(p); return qmm_fail(QMM_ERR_OUT_OF_MEMORY, "thread pool: out of memory"); }
        memcpy(p->cpus, cpu_list, (size_t)n_threads * sizeof *p->cpus);
    }
    if (pin) pin_self(p->cpus ? p->cpus[0] : 0);
    qmm_status st = start_workers(p, n_threads);
    if (st != QMM_OK) { qmm_pool_destroy(p); return st; }
    *out = p;
    return QMM_OK;
}

/* In a child of fork(): the parent's workers do not exist here. Re-make the pool in place with
 * as many threads as before (a failure leaves fewer: the caller runs the rest). */
static void respawn_after_fork(qmm_pool *p) {
    const int n = p->n;
    init_sync(p);
    memset(p->threads, 0, (size_t)n * sizeof *p->threads);
    p->n = 1;
    (void)start_workers(p, n);
}

void qmm_pool_destroy(qmm_pool *p) {
    if (!p) return;
    if (p->forks != fork_count) { /* made before a fork: its workers are the parent's */
        free(p->threads);
        free(p->cpus);
        free(p);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->quit = 1;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n; i++)
        if (p->threads && p->threads[i]) pthread_join(p->threads[i], NULL);
    free(p->threads);
    free(p->cpus);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    free(p);
}

int qmm_pool_threads(const qmm_pool *p) { return p ? p->n : 1; }

uint64_t qmm_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void qmm_pool_run(qmm_pool *p, int64_t n_tasks, qmm_task_fn fn, void *arg) {
    qmm_pool_run_bracketed(p, n_tasks, fn, NULL, NULL, arg);
}

void qmm_pool_run_bracketed(qmm_pool *p, int64_t n_tasks, qmm_task_fn fn, qmm_thread_fn begin, qmm_thread_fn end,
                            void *arg) {
    if (n_tasks <= 0) return;
    if (p && p->forks != fork_count) respawn_after_fork(p);
    if (!p || p->n == 1 || n_tasks == 1) {
        const qmm_cancel_word *cancel = p ? p->cancel : NULL;
        if (begin) begin(0, arg);
        for (int64_t t = 0; t < n_tasks && !qmm_cancel_requested(cancel); t++) fn(t, n_tasks, 0, arg);
        if (end) end(0, arg);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->n_tasks = n_tasks;
    p->fn = fn;
    p->begin = begin;
    p->end = end;
    p->arg = arg;
    p->pending = p->n - 1;
    p->generation++;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    run_share(p, 0);
    pthread_mutex_lock(&p->mu);
    while (p->pending > 0) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

typedef struct {
    int64_t rows, per_task;
    qmm_rows_fn fn;
    void *arg;
} rows_job;

static void rows_task(int64_t task, int64_t n_tasks, int thread, void *arg) {
    (void)n_tasks;
    const rows_job *j = arg;
    int64_t r0 = task * j->per_task, r1 = r0 + j->per_task;
    if (r1 > j->rows) r1 = j->rows;
    j->fn(r0, r1, thread, j->arg);
}

void qmm_pool_run_rows(qmm_pool *p, int64_t rows, int64_t unit, qmm_rows_fn fn, void *arg) {
    if (rows <= 0) return;
    if (unit < 1) unit = 1;
    int64_t units = (rows + unit - 1) / unit;
    int64_t tasks = (int64_t)(p ? p->n : 1) * 4;
    if (tasks > units) tasks = units;
    rows_job j = {rows, (units + tasks - 1) / tasks * unit, fn, arg};
    qmm_pool_run(p, (rows + j.per_task - 1) / j.per_task, rows_task, &j);
}
