/* testutil.c — seeded randomness and reporting for the qmm tests (see testutil.h). */
#include "testutil.h"

#include "qmm_io.h"

#include "dispatch.h"
#include "int8_gemm.h"
#include "numerics.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t g_seed, g_state;
static int g_pass, g_fail, g_skip;
static const char *g_name;
static int64_t g_nan_matched; /* NaN elements of different bits matched by tu_same_elem */

void tu_init(int argc, char **argv, const char *name) {
    g_name = name;
    const char *s = getenv("QMM_SEED");
    if (argc > 1) s = argv[1];
    g_seed = s ? strtoull(s, NULL, 0) : (uint64_t)time(NULL) ^ ((uint64_t)clock() << 20);
    g_state = g_seed * 0x9E3779B97F4A7C15ull + 1;
    printf("# %s: Seed = %llu (replay: QMM_SEED=%llu or first argument)\n", name, (unsigned long long)g_seed,
           (unsigned long long)g_seed);
    fflush(stdout);
}

uint64_t tu_seed(void) { return g_seed; }

uint64_t tu_rand_u64(void) { /* splitmix64 */
    uint64_t z = (g_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

int64_t tu_rand_int(int64_t lo, int64_t hi) { return lo + (int64_t)(tu_rand_u64() % (uint64_t)(hi - lo + 1)); }

float tu_rand_normal(void) {
    double u1 = ((double)(tu_rand_u64() >> 11) + 0.5) / 9007199254740992.0;
    double u2 = (double)(tu_rand_u64() >> 11) / 9007199254740992.0;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

void tu_fill_float(void *p, qmm_dtype t, int64_t n, float scale) {
    for (int64_t i = 0; i < n; i++) qmm_store_f(p, t, i, tu_rand_normal() * scale);
}

void tu_fill_i8(int8_t *p, int64_t n, int lo, int hi) {
    for (int64_t i = 0; i < n; i++) p[i] = (int8_t)tu_rand_int(lo, hi);
}

int tu_check_(int ok, const char *file, int line, const char *fmt, ...) {
    if (ok) { g_pass++; return 1; }
    g_fail++;
    va_list ap;
    va_start(ap, fmt);
    printf("FAIL %s:%d: ", file, line);
    vprintf(fmt, ap);
    printf("  [replay: QMM_SEED=%llu]\n", (unsigned long long)g_seed);
    va_end(ap);
    fflush(stdout);
    return 0;
}

void tu_skip(const char *what, const char *why) {
    g_skip++;
    printf("skipped: %s: %s\n", what, why);
    fflush(stdout);
}

void tu_note(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("# ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
}

int tu_finish(void) {
    printf("%s: %d passed, %d failed, %d skipped\n", g_name, g_pass, g_fail, g_skip);
    return g_fail ? 1 : 0;
}

float tu_load(const void *p, qmm_dtype t, int64_t i) {
    if (t == QMM_I32) return (float)((const int32_t *)p)[i];
    return qmm_load_f(p, t, i);
}

double tu_ulp(double v, qmm_dtype t) {
    int mant = t == QMM_BF16 ? 7 : t == QMM_F16 ? 10 : 23;
    double a = fabs(v);
    int e;
    if (a == 0) return t == QMM_F16 ? ldexp(1, -24) : ldexp(1, -149);
    frexp(a, &e); /* a = f * 2^e, f in [0.5, 1) */
    double u = ldexp(1.0, e - 1 - mant);
    if (t == QMM_F16 && u < ldexp(1, -24)) u = ldexp(1, -24);
    return u;
}

void tu_store_bits(void *x, qmm_dtype t, int64_t i, uint32_t bits) {
    if (t == QMM_F32) ((uint32_t *)x)[i] = bits;
    else ((uint16_t *)x)[i] = (uint16_t)bits;
}

int tu_is_nonfinite_bits(qmm_dtype t, uint32_t b) {
    if (t == QMM_F32) return (b & 0x7f800000u) == 0x7f800000u;
    if (t == QMM_BF16) return (b & 0x7f80u) == 0x7f80u;
    return (b & 0x7c00u) == 0x7c00u;
}

int tu_is_nan_bits(qmm_dtype t, uint32_t b) {
    if (t == QMM_F32) return (b & 0x7fffffffu) > 0x7f800000u;
    if (t == QMM_BF16) return (b & 0x7fffu) > 0x7f80u;
    return (b & 0x7fffu) > 0x7c00u;
}

/* NaN payloads and signs are unspecified (SPEC §7): any NaN equals any NaN; everything else,
 * including ±0 and ±Inf, must match bit for bit. I32 and other dtypes: bits only. */
int tu_same_elem(const void *a, const void *b, qmm_dtype t, int64_t i) {
    const size_t es = qmm_dtype_size(t);
    const unsigned char *p = (const unsigned char *)a + (size_t)i * es, *q = (const unsigned char *)b + (size_t)i * es;
    if (!memcmp(p, q, es)) return 1;
    if (t != QMM_F32 && t != QMM_F16 && t != QMM_BF16) return 0;
    uint32_t x = 0, y = 0;
    if (t == QMM_F32) {
        memcpy(&x, p, 4);
        memcpy(&y, q, 4);
    } else {
        uint16_t u, v;
        memcpy(&u, p, 2);
        memcpy(&v, q, 2);
        x = u;
        y = v;
    }
    if (tu_is_nan_bits(t, x) && tu_is_nan_bits(t, y)) {
        g_nan_matched++;
        return 1;
    }
    return 0;
}

int64_t tu_first_diff(const void *a, const void *b, qmm_dtype t, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!tu_same_elem(a, b, t, i)) return i;
    return -1;
}

int64_t tu_nan_matched(void) { return g_nan_matched; }

_Static_assert((int)TU_ENGINES_INT8 == (int)QMM_KIND_INT8 && (int)TU_ENGINES_FLOAT == (int)QMM_KIND_FLOAT, "tu_engines kinds");
int tu_engines(int which, qmm_engine_id out[QMM_ENGINE_COUNT]) {
    int n = 0;
    for (int i = 0; i < QMM_ENGINE_TABLE_LEN; i++) {
        const qmm_engine *e = &qmm_engine_table[i];
        if (e->kind == QMM_KIND_REF || (which != TU_ENGINES_ALL && (int)e->kind != which)) continue;
        out[n++] = e->id;
    }
    return n;
}

int tu_engines_avail(int which, qmm_engine_id out[QMM_ENGINE_COUNT], int avail[QMM_ENGINE_COUNT]) {
    const int n = tu_engines(which, out);
    for (int i = 0; i < n; i++) {
        char why[160];
        avail[out[i]] = qmm_engine_available(out[i], why, sizeof why);
        if (!avail[out[i]]) tu_skip(qmm_engine_name(out[i]), why);
    }
    return n;
}

int tu_each_int8_engine(int (*test)(const char *name, const struct qmm_i8_engine *desc)) {
    qmm_engine_id ids[QMM_ENGINE_COUNT];
    int tested = 0;
    for (int i = 0, n = tu_engines(TU_ENGINES_INT8, ids); i < n; i++) {
        const char *name = qmm_engine_name(ids[i]);
        const qmm_i8_engine *e = qmm_i8_engine_of(ids[i]);
        char why[QMM_REASON_MAX];
        if (!qmm_engine_available(ids[i], why, sizeof why)) tu_skip(name, why);
        else if (!e) tu_skip(name, "not on the core int8 driver (no qmm_i8_engine)");
        else tested += test(name, e);
    }
    return tested;
}

size_t tu_tensor_bytes(const tu_tensor *t) {
    size_t n = (size_t)qmm_st_dtype_bits((qmm_st_dtype)t->dtype) / 8;
    for (int d = 0; d < t->ndim; d++) n *= (size_t)t->shape[d];
    return n;
}

void tu_write_ckpt(const char *path, const tu_tensor *t, size_t n, const char *mkey, const char *mval) {
    qmm_st_writer *w = NULL;
    TU_CHECK_OK(qmm_st_writer_create(path, &w));
    if (!w) return;
    if (mkey) TU_CHECK_OK(qmm_st_writer_set_metadata(w, mkey, mval));
    for (size_t i = 0; i < n; i++)
        TU_CHECK_OK(qmm_st_writer_declare(w, t[i].name, (qmm_st_dtype)t[i].dtype, t[i].ndim, t[i].shape));
    TU_CHECK_OK(qmm_st_writer_begin(w));
    for (size_t i = 0; i < n; i++) TU_CHECK_OK(qmm_st_writer_write(w, t[i].data, tu_tensor_bytes(&t[i])));
    TU_CHECK_OK(qmm_st_writer_finish(w));
    qmm_st_writer_destroy(w);
}
