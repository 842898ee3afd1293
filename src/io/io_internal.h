/*
 * io_internal.h — what the file code shares: a growable byte buffer, UTF-8 validation, JSON
 * string escaping (for the header writer), and the layout of an open safetensors file.
 */
#ifndef QMM_IO_INTERNAL_H
#define QMM_IO_INTERNAL_H

#include "qmm_io.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A float tensor dtype of a safetensors file (F32, F16, BF16). */
static inline bool qmm_st_is_float(qmm_st_dtype t) { return t == QMM_ST_F32 || t == QMM_ST_F16 || t == QMM_ST_BF16; }

/* ---------------------------------------------------------------- byte buffer */
typedef struct qmm_buf {
    char *p;
    size_t len, cap;
    bool oom;        /* set once an append failed; later appends are no-ops */
} qmm_buf;
void qmm_buf_append(qmm_buf *b, const void *s, size_t n);
void qmm_buf_puts(qmm_buf *b, const char *s);
void qmm_buf_printf(qmm_buf *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* s as a JSON string literal: '"', '\\' and control characters escaped, UTF-8 kept as is. */
void qmm_buf_json_string(qmm_buf *b, const char *s);
void qmm_buf_free(qmm_buf *b);

/* Is s[0..n) valid UTF-8 (no overlongs, no surrogates, <= U+10FFFF)? On failure *bad_at is the
 * offset of the first bad byte. */
bool qmm_utf8_valid(const unsigned char *s, size_t n, size_t *bad_at);

/* JSON that json-c accepted, checked for what the reference safetensors reader (serde_json)
 * rejects and json-c does not: a key twice in one object, a lone surrogate escape, U+0000 in a
 * key. QMM_ERR_FORMAT "PATH: WHAT: ..." naming the key or byte. (json_strict.c) */
qmm_status qmm_json_check_strict(const char *s, size_t n, const char *path, const char *what);

/* memcpy(dst, src, n) from a file mapping; a SIGBUS during it (the file shrank underneath) is
 * QMM_ERR_IO "PATH: WHAT: ..." instead of the end of the process. (mapped_read.c) */
qmm_status qmm_mapped_copy(void *dst, const void *src, size_t n, const char *path, const char *what);

/* ---------------------------------------------------------------- open file */
typedef struct qmm_st_meta { char *key, *value; } qmm_st_meta;
struct qmm_st_file {
    char *path;
    const unsigned char *base;   /* whole file */
    size_t size;
    int mapped;                  /* 1: base is an mmap to unmap on close */
    uint64_t header_len;
    const unsigned char *data;   /* base + 8 + header_len */
    qmm_st_tensor *t;            /* [n] in data order */
    size_t n;
    size_t *by_name;             /* [n] indices sorted by name */
    qmm_st_meta *meta;           /* [n_meta] in header order */
    size_t n_meta;
};

#endif /* QMM_IO_INTERNAL_H */
