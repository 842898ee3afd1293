/*
 * testutil.h — what every qmm test shares: a seeded RNG (the seed is printed, and QMM_SEED=N
 * or the first argument replays it), random tensors of any dtype, and TAP-like reporting with
 * visible skips. A test file calls tu_init(argc, argv, "name") first and returns tu_finish().
 */
#ifndef QMM_TESTUTIL_H
#define QMM_TESTUTIL_H

#include "qmm.h"

#include <stdint.h>
#include <stdio.h>

void     tu_init(int argc, char **argv, const char *name);
int      tu_finish(void);               /* prints "N passed, N failed, N skipped"; exit code */
uint64_t tu_seed(void);
uint64_t tu_rand_u64(void);
int64_t  tu_rand_int(int64_t lo, int64_t hi);       /* [lo, hi] */
float    tu_rand_normal(void);
void     tu_fill_float(void *p, qmm_dtype t, int64_t n, float scale);  /* N(0, scale) in dtype t */
void     tu_fill_i8(int8_t *p, int64_t n, int lo, int hi);

/* checks: each counts one pass or one failure and prints the failure with file:line */
int tu_check_(int ok, const char *file, int line, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
#define TU_CHECK(cond, ...) tu_check_(!!(cond), __FILE__, __LINE__, __VA_ARGS__)
#define TU_CHECK_OK(expr)                                                                    \
    do {                                                                                     \
        qmm_status st__ = (expr);                                                            \
        TU_CHECK(st__ == QMM_OK, "%s -> %s: %s", #expr, qmm_status_name(st__), qmm_last_error()); \
    } while (0)
void tu_skip(const char *what, const char *why);   /* prints "skipped: <what>: <why>" */
void tu_note(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

/* raw bit patterns of f32 (32 bits) / f16 / bf16 (16 bits) elements, for hostile inputs */
void tu_store_bits(void *x, qmm_dtype t, int64_t i, uint32_t bits);
int  tu_is_nonfinite_bits(qmm_dtype t, uint32_t bits);
int  tu_is_nan_bits(qmm_dtype t, uint32_t bits);

/* Output comparisons between engines (or processes): element i of a and b (dtype t) is the same
 * when the bits are, or when t is a float dtype and both are NaN (NaN payloads and signs are
 * unspecified, SPEC §7). ±0, ±Inf and every other value must match bit for bit; I32 always.
 * tu_first_diff: the first of n elements that is not the same, or -1. tu_nan_matched: how many
 * NaN elements with different bits were matched so far (for a note). */
int     tu_same_elem(const void *a, const void *b, qmm_dtype t, int64_t i);
int64_t tu_first_diff(const void *a, const void *b, qmm_dtype t, int64_t n);
int64_t tu_nan_matched(void);

/* bytes of an output element for comparisons */
float tu_load(const void *p, qmm_dtype t, int64_t i);
/* 1 ulp of dtype t at magnitude |v| */
double tu_ulp(double v, qmm_dtype t);

/* The engines of the engine table (src/base/engines.c), best first: TU_ENGINES_INT8 or
 * TU_ENGINES_FLOAT, or TU_ENGINES_ALL (every engine but the reference). Returns the count. */
enum { TU_ENGINES_ALL = 0, TU_ENGINES_INT8 = 1, TU_ENGINES_FLOAT = 2 };
int tu_engines(int which, qmm_engine_id out[QMM_ENGINE_COUNT]);
/* The same list, and avail[id] = whether this machine runs engine id (qmm_engine_available); each
 * unavailable one is reported with tu_skip and its reason. Returns the count. */
int tu_engines_avail(int which, qmm_engine_id out[QMM_ENGINE_COUNT], int avail[QMM_ENGINE_COUNT]);
/* The kernel testers' loop: test(name, desc) for each int8 engine on the core int8 driver that this
 * machine runs, best first (desc: qmm_i8_engine_of); every other int8 engine is reported with
 * tu_skip and why (not available here, or no qmm_i8_engine). Returns the sum of test's returns (1:
 * tested, 0: skipped, it says why). */
struct qmm_i8_engine;
int tu_each_int8_engine(int (*test)(const char *name, const struct qmm_i8_engine *desc));

/* A tensor for a test checkpoint, and the writer: the tensors in this order and one optional
 * metadata entry (mkey NULL: none), through qmm_io's writer (failures are test failures). */
typedef struct tu_tensor {
    const char *name;
    int dtype;            /* qmm_st_dtype */
    int ndim;
    int64_t shape[3];
    const void *data;
} tu_tensor;
size_t tu_tensor_bytes(const tu_tensor *t);
void tu_write_ckpt(const char *path, const tu_tensor *t, size_t n, const char *mkey, const char *mval);

#endif
