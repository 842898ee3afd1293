/*
 * qmm_base.h — the bottom of the library, included by every part of it: the error helpers
 * (common.c), aligned memory, a context's cancel word (qmm_cancel), the thread pool (pool.c) and
 * dispatch logging.
 */
#ifndef QMM_BASE_H
#define QMM_BASE_H

#include "qmm.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---------------------------------------------------------------- errors */
/* Records the message for qmm_last_error() and returns st. printf-style. */
qmm_status qmm_fail(qmm_status st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void qmm_clear_error(void);
/* The longest message the library writes: a layer name (128), its shape and M, and every
 * engine's name with its full reason (qmm_linear's "no engine admits it"). */
#define QMM_ERROR_MAX (256 + QMM_ENGINE_MAX * (QMM_REASON_MAX + 32))

#define QMM_RETURN_IF(cond, st, ...) \
    do { if (cond) return qmm_fail((st), __VA_ARGS__); } while (0)
#define QMM_FORWARD_IF_ERROR(expr) \
    do { qmm_status st_ = (expr); if (st_ != QMM_OK) return st_; } while (0)

/* F32, F16 or BF16: the dtypes of activations, outputs and float weights */
static inline int qmm_dtype_is_float(qmm_dtype t) { return t == QMM_F32 || t == QMM_F16 || t == QMM_BF16; }

/* ---------------------------------------------------------------- memory */
void *qmm_aligned_alloc(size_t bytes);   /* 64-byte aligned, NULL on failure (or overflow) */
/* Transparent huge pages for a large buffer about to be written (hugepages.c): contents unchanged,
 * only with QMM_HUGEPAGES=1, nothing under QMM_HUGE_MIN bytes. */
#define QMM_HUGE_MIN ((size_t)8 << 20)
void qmm_advise_huge(void *p, size_t bytes);
void  qmm_aligned_free(void *p);
/* a*b with overflow check: returns false on overflow */
static inline bool qmm_mul_ok(size_t a, size_t b, size_t *out) {
    if (a != 0 && b > SIZE_MAX / a) return false;
    *out = a * b;
    return true;
}
/* The largest weight accepted (N·K elements): refused as too large before any allocation. */
#define QMM_MAX_WEIGHT_ELEMS ((int64_t)1 << 36)
static inline int64_t qmm_round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/* ---------------------------------------------------------------- cancellation (qmm_cancel) */
/* A context's cancel word (SPEC §12): bits 1.. count the calls in flight on it (entered, not yet
 * returned: one, or nested ones), bit 0 is set by qmm_cancel while that count is not zero and
 * cleared when it returns to zero. So a cancel reaches exactly the calls in flight at the moment
 * of its compare-and-swap, a cancel with none in flight changes nothing, and the next call starts
 * clear. The long loops poll bit 0 with one relaxed load (qmm_cancel_requested): the pool between
 * tasks, the drivers between key blocks and panels. */
typedef struct qmm_cancel_word {
    _Atomic uint64_t w;
} qmm_cancel_word;
enum { QMM_CANCEL_BIT = 1, QMM_CANCEL_CALL = 2 };
static inline int qmm_cancel_requested(const qmm_cancel_word *c) {
    return c && (atomic_load_explicit(&c->w, memory_order_relaxed) & QMM_CANCEL_BIT);
}
/* A call enters (the count + 1) and leaves (- 1; the last one out clears bit 0). */
static inline void qmm_cancel_enter(qmm_cancel_word *c) { atomic_fetch_add(&c->w, QMM_CANCEL_CALL); }
static inline void qmm_cancel_leave(qmm_cancel_word *c) {
    uint64_t w = atomic_load(&c->w), n;
    do n = w < 2 * QMM_CANCEL_CALL ? 0 : w - QMM_CANCEL_CALL;
    while (!atomic_compare_exchange_weak(&c->w, &w, n));
}
/* Sets bit 0 if some call is in flight: 1 if so (already set included), 0 if none was. */
static inline int qmm_cancel_set(qmm_cancel_word *c) {
    uint64_t w = atomic_load(&c->w);
    do if (w < QMM_CANCEL_CALL) return 0;
    while (!atomic_compare_exchange_weak(&c->w, &w, w | QMM_CANCEL_BIT));
    return 1;
}

/* ---------------------------------------------------------------- threads (pool.c) */
typedef struct qmm_pool qmm_pool;
/* fn(task, n_tasks, thread_index, arg) for task in [0, n_tasks): task i always runs on thread
 * (i % n_threads), so a static partition gives deterministic results. */
typedef void (*qmm_task_fn)(int64_t task, int64_t n_tasks, int thread, void *arg);
/* cancel: the context's cancel word (NULL: never cancelled); once its bit 0 is set, every run
 * skips the tasks no thread has started (a thread checks it before each task; begin and end
 * still bracket what the thread ran). */
qmm_status qmm_pool_create(int n_threads, int pin, const int *cpu_list, const qmm_cancel_word *cancel,
                           qmm_pool **out);
void       qmm_pool_destroy(qmm_pool *p);
int        qmm_pool_threads(const qmm_pool *p);
void       qmm_pool_run(qmm_pool *p, int64_t n_tasks, qmm_task_fn fn, void *arg);
/* qmm_pool_run with begin(thread, arg) before each thread's first task of the run and
 * end(thread, arg) after its last, on that thread (either may be NULL). */
typedef void (*qmm_thread_fn)(int thread, void *arg);
void       qmm_pool_run_bracketed(qmm_pool *p, int64_t n_tasks, qmm_task_fn fn, qmm_thread_fn begin,
                                  qmm_thread_fn end, void *arg);
/* fn(r0, r1, thread, arg) over rows [0, rows) split into equal ranges of whole units of `unit`
 * rows (the last range may be shorter), a few ranges per thread (at most 4·threads), statically
 * as qmm_pool_run: the split depends only on rows, unit and the thread count. */
typedef void (*qmm_rows_fn)(int64_t r0, int64_t r1, int thread, void *arg);
void       qmm_pool_run_rows(qmm_pool *p, int64_t rows, int64_t unit, qmm_rows_fn fn, void *arg);

/* ---------------------------------------------------------------- time */
/* CLOCK_MONOTONIC in nanoseconds (pool.c): the phase timers (qmm_profile). */
uint64_t qmm_now_ns(void);

/* ---------------------------------------------------------------- logging */
void qmm_log(const qmm_context *ctx, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

#endif /* QMM_BASE_H */
