/*
 * pool.c — a small persistent thread pool. Why not OpenMP: the library must pin workers where
 * the user asks, keep per-thread AMX tile state on threads it owns, stay usable from a static
 * library without an OpenMP runtime, and give a fixed task → thread mapping (task i runs on
 * thread i % n) so that any static partition is deterministic.
 *
 * qmm_pool_run(p, n, fn, arg): the calling thread acts as thread 0; workers 1..n-1 wake on a
 * generation counter, run their tasks and signal completion. One run at a time per pool
 * (a context is used by one thread at a time).
 */
#define _GNU_SOURCE
#include "qmm_internal.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>

struct qmm_pool {
    int n;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t wake, done;
    uint64_t generation;
    int pending;      /* workers still running the current generation */
    int quit;
    /* the current job */
    int64_t n_tasks;
    qmm_task_fn fn;
    void *arg;
};

typedef struct { qmm_pool *p; int index; int cpu; } worker_arg;

static void pin_self(int cpu) {
    if (cpu < 0) return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    (void)pthread_setaffinity_np(pthread_self(), sizeof set, &set); /* best effort */
}

static void run_share(qmm_pool *p, int index) {
    for (int64_t t = index; t < p->n_tasks; t += p->n) p->fn(t, p->n_tasks, index, p->arg);
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

qmm_status qmm_pool_create(int n_threads, int pin, const int *cpu_list, qmm_pool **out) {
    *out = NULL;
    if (n_threads < 1) n_threads = 1;
    qmm_pool *p = calloc(1, sizeof *p);
    if (!p) return qmm_fail(QMM_ERR_OUT_OF_MEMORY, "thread pool: out of memory");
    p->n = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    p->threads = calloc((size_t)n_threads, sizeof *p->threads);
    if (!p->threads) { qmm_pool_destroy(p); return qmm_fail(QMM_ERR_OUT_OF_MEMORY, "thread pool: out of memory"); }
    if (pin) pin_self(cpu_list ? cpu_list[0] : 0);
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (!wa) { p->n = i; qmm_pool_destroy(p); return qmm_fail(QMM_ERR_OUT_OF_MEMORY, "thread pool: out of memory"); }
        wa->p = p;
        wa->index = i;
        wa->cpu = pin ? (cpu_list ? cpu_list[i] : i) : -1;
        if (pthread_create(&p->threads[i], NULL, worker_main, wa) != 0) {
            free(wa);
            p->n = i;
            qmm_pool_destroy(p);
            return qmm_fail(QMM_ERR_INTERNAL, "thread pool: cannot start thread %d of %d", i, n_threads);
        }
    }
    *out = p;
    return QMM_OK;
}

void qmm_pool_destroy(qmm_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->quit = 1;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n; i++)
        if (p->threads && p->threads[i]) pthread_join(p->threads[i], NULL);
    free(p->threads);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    free(p);
}

int qmm_pool_threads(const qmm_pool *p) { return p ? p->n : 1; }

void qmm_pool_run(qmm_pool *p, int64_t n_tasks, qmm_task_fn fn, void *arg) {
    if (n_tasks <= 0) return;
    if (!p || p->n == 1 || n_tasks == 1) {
        for (int64_t t = 0; t < n_tasks; t++) fn(t, n_tasks, 0, arg);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->n_tasks = n_tasks;
    p->fn = fn;
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
