/*
 * geometry.h — what the API files check of a strided tensor before an operation reads or writes
 * it (attention.c, rowops.c): its extent in bytes (overflow-checked), whether an output's
 * elements each have their own address, and whether two byte ranges overlap. Static inline,
 * plain C.
 */
#ifndef QMM_API_GEOMETRY_H
#define QMM_API_GEOMETRY_H

#include <stddef.h>
#include <stdint.h>

/* The bytes spanned by [n_0]..[n_{nd-1}][last] elements of es bytes with strides s (each n >= 1,
 * s >= 0): (Σ (n_i − 1)·s_i + last) · es; 0 where that overflows int64. */
static inline int64_t qmm_extent_bytes(const int64_t *n, const int64_t *s, int nd, int64_t last, size_t es) {
    int64_t off = last;
    for (int i = 0; i < nd; i++) {
        int64_t t;
        if (__builtin_mul_overflow(n[i] - 1, s[i], &t) || __builtin_add_overflow(off, t, &off)) return 0;
    }
    int64_t bytes;
    if (__builtin_mul_overflow(off, (int64_t)es, &bytes)) return 0;
    return bytes;
}

/* Do the elements [n0][n1][n2][D] with strides s (D contiguous) all have distinct addresses?
 * Sorted by stride, each dimension of extent > 1 must step past everything below it. */
static inline int qmm_elements_distinct(const int64_t n[3], const int64_t s[3], int64_t D) {
    int idx[3] = {0, 1, 2};
    for (int i = 0; i < 3; i++)
        for (int j = i + 1; j < 3; j++)
            if (s[idx[j]] < s[idx[i]]) { int t = idx[i]; idx[i] = idx[j]; idx[j] = t; }
    int64_t span = D;
    for (int i = 0; i < 3; i++) {
        const int d = idx[i];
        if (n[d] == 1) continue;
        if (s[d] < span) return 0;
        span = s[d] * (n[d] - 1) + span;
    }
    return 1;
}

/* Do the byte ranges [a, a + abytes) and [b, b + bbytes) overlap? */
static inline int qmm_bytes_overlap(const void *a, int64_t abytes, const void *b, int64_t bbytes) {
    const char *a0 = a, *b0 = b;
    return a0 < b0 + bbytes && b0 < a0 + abytes;
}

#endif /* QMM_API_GEOMETRY_H */
