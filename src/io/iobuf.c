/*
 * iobuf.c — the file code's small helpers: a growable byte buffer (with JSON string
 * escaping) and a strict UTF-8 validator (RFC 3629: no overlong forms, no surrogates,
 * nothing above U+10FFFF).
 */
#include "io_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void qmm_buf_append(qmm_buf *b, const void *s, size_t n) {
    if (b->oom) return;
    if (n > SIZE_MAX - b->len - 1) { b->oom = true; return; }
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) {
            if (cap > SIZE_MAX / 2) { cap = b->len + n + 1; break; }
            cap *= 2;
        }
        char *p = realloc(b->p, cap);
        if (!p) { b->oom = true; return; }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

void qmm_buf_puts(qmm_buf *b, const char *s) { qmm_buf_append(b, s, strlen(s)); }

void qmm_buf_printf(qmm_buf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) { b->oom = true; return; }
    if ((size_t)n < sizeof tmp) { qmm_buf_append(b, tmp, (size_t)n); return; }
    char *big = malloc((size_t)n + 1);
    if (!big) { b->oom = true; return; }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    qmm_buf_append(b, big, (size_t)n);
    free(big);
}

void qmm_buf_json_string(qmm_buf *b, const char *s) {
    qmm_buf_append(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"': qmm_buf_append(b, "\\\"", 2); break;
        case '\\': qmm_buf_append(b, "\\\\", 2); break;
        case '\n': qmm_buf_append(b, "\\n", 2); break;
        case '\r': qmm_buf_append(b, "\\r", 2); break;
        case '\t': qmm_buf_append(b, "\\t", 2); break;
        case '\b': qmm_buf_append(b, "\\b", 2); break;
        case '\f': qmm_buf_append(b, "\\f", 2); break;
        default:
            if (*p < 0x20) qmm_buf_printf(b, "\\u%04x", *p);
            else qmm_buf_append(b, p, 1);
        }
    }
    qmm_buf_append(b, "\"", 1);
}

void qmm_buf_free(qmm_buf *b) {
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
    b->oom = false;
}

bool qmm_utf8_valid(const unsigned char *s, size_t n, size_t *bad_at) {
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        if (c < 0x80) { i++; continue; }
        size_t len;
        unsigned cp, min;
        if (c >= 0xC2 && c <= 0xDF) { len = 2; cp = c & 0x1F; min = 0x80; }
        else if (c >= 0xE0 && c <= 0xEF) { len = 3; cp = c & 0x0F; min = 0x800; }
        else if (c >= 0xF0 && c <= 0xF4) { len = 4; cp = c & 0x07; min = 0x10000; }
        else goto bad;
        if (n - i < len) goto bad;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) goto bad;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) goto bad;
        i += len;
    }
    return true;
bad:
    if (bad_at) *bad_at = i;
    return false;
}
