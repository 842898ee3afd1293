/*
 * json_strict.c — what json-c lets through but the reference safetensors reader (serde_json)
 * rejects, checked on the raw text of a document json-c has already parsed:
 *   - a key twice in one object (json-c keeps the last value): keys are compared decoded, so
 *     "a" and "\u0061" are the same key;
 *   - a lone surrogate escape (\udc00, or \ud800 not followed by a low-surrogate escape; json-c
 *     turns it into U+FFFD);
 *   - U+0000 (\u0000) inside a key (json-c cuts the key there).
 * The text is trusted to be syntactically valid JSON (json-c said so) nested at most a few
 * levels deep (json-c's depth limit): the walk is recursive descent and returns QMM_ERR_FORMAT
 * for anything unexpected rather than assuming.
 */
#include "io_internal.h"
#include "qmm_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct walker {
    const char *s;
    size_t n, i;
    const char *path, *what;
} walker;

typedef struct key { size_t off, len; const char *p; } key;   /* a decoded key: p = buffer + off once complete */

static void skip_ws(walker *w) {
    while (w->i < w->n && (w->s[w->i] == ' ' || w->s[w->i] == '\t' || w->s[w->i] == '\n' || w->s[w->i] == '\r')) w->i++;
}

static int hex4(const walker *w, size_t at, unsigned *out) {
    if (at + 4 > w->n) return 0;
    unsigned v = 0;
    for (size_t k = at; k < at + 4; k++) {
        char c = w->s[k];
        unsigned d = c >= '0' && c <= '9' ? (unsigned)(c - '0') : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
                   : c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10) : 16u;
        if (d > 15) return 0;
        v = v * 16 + d;
    }
    *out = v;
    return 1;
}

static void put_utf8(qmm_buf *b, unsigned cp) {
    unsigned char u[4];
    size_t k;
    if (cp < 0x80) { u[0] = (unsigned char)cp; k = 1; }
    else if (cp < 0x800) { u[0] = (unsigned char)(0xc0 | cp >> 6); u[1] = (unsigned char)(0x80 | (cp & 0x3f)); k = 2; }
    else if (cp < 0x10000) {
        u[0] = (unsigned char)(0xe0 | cp >> 12);
        u[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
        u[2] = (unsigned char)(0x80 | (cp & 0x3f));
        k = 3;
    } else {
        u[0] = (unsigned char)(0xf0 | cp >> 18);
        u[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3f));
        u[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
        u[3] = (unsigned char)(0x80 | (cp & 0x3f));
        k = 4;
    }
    qmm_buf_append(b, u, k);
}

/* A string at w->i (the opening quote): checks its escapes; decoded into out when out != NULL;
 * *has_nul = it holds U+0000. */
static qmm_status string(walker *w, qmm_buf *out, int *has_nul) {
    *has_nul = 0;
    const size_t start = w->i;
    w->i++;   /* the quote */
    while (w->i < w->n && w->s[w->i] != '"') {
        char c = w->s[w->i];
        if (c != '\\') {
            size_t j = w->i;
            while (j < w->n && w->s[j] != '"' && w->s[j] != '\\') j++;
            if (out) qmm_buf_append(out, w->s + w->i, j - w->i);
            w->i = j;
            continue;
        }
        QMM_RETURN_IF(w->i + 1 >= w->n, QMM_ERR_FORMAT, "%s: %s: unterminated escape", w->path, w->what);
        char e = w->s[w->i + 1];
        if (e != 'u') {
            const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t", *p = strchr(from, e);
            QMM_RETURN_IF(!p || !e, QMM_ERR_FORMAT, "%s: %s: bad escape at byte %zu", w->path, w->what, w->i);
            if (out) qmm_buf_append(out, to + (p - from), 1);
            w->i += 2;
            continue;
        }
        unsigned cp, lo;
        QMM_RETURN_IF(!hex4(w, w->i + 2, &cp), QMM_ERR_FORMAT, "%s: %s: bad \\u escape at byte %zu", w->path, w->what,
                      w->i);
        w->i += 6;
        if (cp >= 0xdc00 && cp <= 0xdfff)
            return qmm_fail(QMM_ERR_FORMAT, "%s: %s: lone surrogate escape \\u%04x at byte %zu (not a character)",
                            w->path, w->what, cp, w->i - 6);
        if (cp >= 0xd800 && cp <= 0xdbff) {
            int paired = w->i + 1 < w->n && w->s[w->i] == '\\' && w->s[w->i + 1] == 'u' && hex4(w, w->i + 2, &lo) &&
                         lo >= 0xdc00 && lo <= 0xdfff;
            QMM_RETURN_IF(!paired, QMM_ERR_FORMAT,
                          "%s: %s: lone surrogate escape \\u%04x at byte %zu (no low surrogate after it)", w->path,
                          w->what, cp, w->i - 6);
            w->i += 6;
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
        }
        if (cp == 0) *has_nul = 1;
        if (out) put_utf8(out, cp);
    }
    QMM_RETURN_IF(w->i >= w->n, QMM_ERR_FORMAT, "%s: %s: unterminated string at byte %zu", w->path, w->what, start);
    w->i++;   /* the closing quote */
    return QMM_OK;
}

static int cmp_key(const void *a, const void *b) {
    const key *x = a, *y = b;
    size_t m = x->len < y->len ? x->len : y->len;
    int c = m ? memcmp(x->p, y->p, m) : 0;
    return c ? c : (x->len > y->len) - (x->len < y->len);
}

static qmm_status value(walker *w, int depth);

static qmm_status object(walker *w, int depth) {
    qmm_buf names = {0};
    key *keys = NULL;
    size_t nk = 0, cap = 0;
    qmm_status st = QMM_OK;
    w->i++;   /* '{' */
    skip_ws(w);
    if (w->i < w->n && w->s[w->i] == '}') {
        w->i++;
        return QMM_OK;
    }
    for (;;) {
        skip_ws(w);
        if (w->i >= w->n || w->s[w->i] != '"') { st = qmm_fail(QMM_ERR_FORMAT, "%s: %s: expected a key at byte %zu", w->path, w->what, w->i); break; }
        size_t key_at = w->i, off = names.len;
        int nul;
        if ((st = string(w, &names, &nul)) != QMM_OK) break;
        if (nul) {
            st = qmm_fail(QMM_ERR_FORMAT, "%s: %s: key at byte %zu contains U+0000 (\"%.200s\")", w->path, w->what,
                          key_at, names.oom ? "" : names.p + off);
            break;
        }
        if (nk == cap) {
            size_t nc = cap ? 2 * cap : 16;
            key *k2 = realloc(keys, nc * sizeof *k2);
            if (!k2) { st = qmm_fail(QMM_ERR_OUT_OF_MEMORY, "%s: out of memory", w->path); break; }
            keys = k2;
            cap = nc;
        }
        keys[nk++] = (key){off, names.len - off, NULL};
        skip_ws(w);
        if (w->i >= w->n || w->s[w->i] != ':') { st = qmm_fail(QMM_ERR_FORMAT, "%s: %s: expected ':' at byte %zu", w->path, w->what, w->i); break; }
        w->i++;
        if ((st = value(w, depth + 1)) != QMM_OK) break;
        skip_ws(w);
        if (w->i < w->n && w->s[w->i] == ',') { w->i++; continue; }
        if (w->i < w->n && w->s[w->i] == '}') { w->i++; break; }
        st = qmm_fail(QMM_ERR_FORMAT, "%s: %s: expected ',' or '}' at byte %zu", w->path, w->what, w->i);
        break;
    }
    if (st == QMM_OK && names.oom) st = qmm_fail(QMM_ERR_OUT_OF_MEMORY, "%s: out of memory", w->path);
    if (st == QMM_OK && nk > 1) {
        for (size_t k = 0; k < nk; k++) keys[k].p = names.p + keys[k].off;
        qsort(keys, nk, sizeof *keys, cmp_key);
        for (size_t k = 1; k < nk; k++)
            if (cmp_key(&keys[k - 1], &keys[k]) == 0) {
                st = qmm_fail(QMM_ERR_FORMAT, "%s: %s: key \"%.*s\" appears more than once", w->path, w->what,
                              (int)(keys[k].len < 300 ? keys[k].len : 300), keys[k].p);
                break;
            }
    }
    free(keys);
    qmm_buf_free(&names);
    return st;
}

static qmm_status value(walker *w, int depth) {
    QMM_RETURN_IF(depth > 64, QMM_ERR_FORMAT, "%s: %s: nested too deeply", w->path, w->what);
    skip_ws(w);
    QMM_RETURN_IF(w->i >= w->n, QMM_ERR_FORMAT, "%s: %s: value expected at the end", w->path, w->what);
    char c = w->s[w->i];
    if (c == '{') return object(w, depth);
    if (c == '"') {
        int nul;
        return string(w, NULL, &nul);
    }
    if (c == '[') {
        w->i++;
        skip_ws(w);
        if (w->i < w->n && w->s[w->i] == ']') { w->i++; return QMM_OK; }
        for (;;) {
            QMM_FORWARD_IF_ERROR(value(w, depth + 1));
            skip_ws(w);
            if (w->i < w->n && w->s[w->i] == ',') { w->i++; continue; }
            if (w->i < w->n && w->s[w->i] == ']') { w->i++; return QMM_OK; }
            return qmm_fail(QMM_ERR_FORMAT, "%s: %s: expected ',' or ']' at byte %zu", w->path, w->what, w->i);
        }
    }
    /* number, true, false, null: up to the next delimiter */
    size_t j = w->i;
    while (j < w->n && !strchr(",]} \t\r\n", w->s[j])) j++;
    QMM_RETURN_IF(j == w->i, QMM_ERR_FORMAT, "%s: %s: unexpected '%c' at byte %zu", w->path, w->what, c, w->i);
    w->i = j;
    return QMM_OK;
}

qmm_status qmm_json_check_strict(const char *s, size_t n, const char *path, const char *what) {
    walker w = {s, n, 0, path, what};
    return value(&w, 0);
}
