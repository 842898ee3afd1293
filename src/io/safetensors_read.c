/*
 * safetensors_read.c — opens a .safetensors file (mmap, read-only) or bytes in memory and
 * validates all of it before handing out zero-copy tensor views:
 *   - at least 8 bytes; header length (u64 LE) <= QMM_ST_MAX_HEADER and <= file size - 8;
 *   - header bytes: no NUL, valid UTF-8, one JSON object (json-c, strict mode) followed only
 *     by whitespace (writers pad with spaces); as the reference reader (serde_json): no key twice
 *     in any object (a tensor name, "__metadata__", a field), no lone surrogate escape, no
 *     U+0000 in a name or key (qmm_json_check_strict), no U+0000 in a dtype or metadata value;
 *   - "__metadata__": an object of string values;
 *   - every other key: {"dtype": known name, "shape": [ints >= 0] (<= QMM_ST_MAX_DIMS),
 *     "data_offsets": [begin, end]} with begin <= end <= data size, numel·bits/8 computed
 *     without overflow and equal to end - begin, ranges not overlapping (gaps are tolerated).
 * Every failure is QMM_ERR_FORMAT (QMM_ERR_IO for the system calls) with a message naming the
 * file, the tensor and the problem. Nothing of a failed open survives.
 */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE
#include "io_internal.h"
#include "qmm_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static const struct { const char *name; int bits; } k_dtypes[QMM_ST_DTYPE_COUNT] = {
    {"BOOL", 8}, {"U8", 8}, {"I8", 8}, {"I16", 16}, {"U16", 16}, {"F16", 16}, {"BF16", 16},
    {"I32", 32}, {"U32", 32}, {"F32", 32}, {"F64", 64}, {"I64", 64}, {"U64", 64},
    {"F8_E4M3", 8}, {"F8_E5M2", 8}, {"F8_E8M0", 8}, {"F4", 4}, {"F6_E2M3", 6}, {"F6_E3M2", 6},
};

const char *qmm_st_dtype_name(qmm_st_dtype t) {
    return (unsigned)t < QMM_ST_DTYPE_COUNT ? k_dtypes[t].name : "?";
}
int qmm_st_dtype_bits(qmm_st_dtype t) { return (unsigned)t < QMM_ST_DTYPE_COUNT ? k_dtypes[t].bits : 0; }

int qmm_st_dtype_to_qmm(qmm_st_dtype t) {
    switch (t) {
    case QMM_ST_F32: return QMM_F32;
    case QMM_ST_F16: return QMM_F16;
    case QMM_ST_BF16: return QMM_BF16;
    case QMM_ST_I8: return QMM_I8;
    case QMM_ST_U8: return QMM_U8;
    case QMM_ST_I32: return QMM_I32;
    default: return -1;
    }
}

qmm_st_dtype qmm_st_dtype_from_qmm(qmm_dtype t) {
    switch (t) {
    case QMM_F32: return QMM_ST_F32;
    case QMM_F16: return QMM_ST_F16;
    case QMM_BF16: return QMM_ST_BF16;
    case QMM_I8: return QMM_ST_I8;
    case QMM_U8: return QMM_ST_U8;
    case QMM_I32: return QMM_ST_I32;
    default: return QMM_ST_DTYPE_COUNT;
    }
}

static int dtype_from_name(const char *s) {
    for (int i = 0; i < QMM_ST_DTYPE_COUNT; i++)
        if (!strcmp(s, k_dtypes[i].name)) return i;
    return -1;
}

void qmm_st_close(qmm_st_file *f) {
    if (!f) return;
    for (size_t i = 0; i < f->n; i++) free((char *)f->t[i].name);
    for (size_t i = 0; i < f->n_meta; i++) {
        free(f->meta[i].key);
        free(f->meta[i].value);
    }
    free(f->t);
    free(f->by_name);
    free(f->meta);
    if (f->mapped && f->base) munmap((void *)f->base, f->size);
    free(f->path);
    free(f);
}

static int cmp_data_order(const void *a, const void *b) {
    const qmm_st_tensor *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* qsort has no context argument in C11: sort (name, index) pairs for the by-name index. */
typedef struct { const char *name; size_t idx; } name_idx;
static int cmp_name_idx(const void *a, const void *b) {
    return strcmp(((const name_idx *)a)->name, ((const name_idx *)b)->name);
}

/* Parses one tensor entry into t (name already set). */
static qmm_status parse_tensor(const qmm_st_file *f, const char *name, json_object *v, uint64_t data_size,
                               qmm_st_tensor *t) {
    const char *P = f->path;
    QMM_RETURN_IF(!json_object_is_type(v, json_type_object), QMM_ERR_FORMAT,
                  "%s: tensor '%s': header entry is not an object", P, name);
    json_object *jd, *js, *jo;
    QMM_RETURN_IF(!json_object_object_get_ex(v, "dtype", &jd) || !json_object_is_type(jd, json_type_string),
                  QMM_ERR_FORMAT, "%s: tensor '%s': missing or non-string \"dtype\"", P, name);
    int dt = dtype_from_name(json_object_get_string(jd));
    QMM_RETURN_IF(dt < 0 || (size_t)json_object_get_string_len(jd) != strlen(json_object_get_string(jd)),
                  QMM_ERR_FORMAT, "%s: tensor '%s': unknown dtype \"%.40s%s\"", P, name, json_object_get_string(jd),
                  dt < 0 ? "" : "\\u0000...");
    t->dtype = (qmm_st_dtype)dt;
    QMM_RETURN_IF(!json_object_object_get_ex(v, "shape", &js) || !json_object_is_type(js, json_type_array),
                  QMM_ERR_FORMAT, "%s: tensor '%s': missing or non-array \"shape\"", P, name);
    size_t nd = json_object_array_length(js);
    QMM_RETURN_IF(nd > QMM_ST_MAX_DIMS, QMM_ERR_FORMAT, "%s: tensor '%s': %zu dimensions (at most %d)", P, name,
                  nd, QMM_ST_MAX_DIMS);
    t->ndim = (int)nd;
    uint64_t numel = 1;
    for (size_t i = 0; i < nd; i++) {
        json_object *d = json_object_array_get_idx(js, i);
        QMM_RETURN_IF(!json_object_is_type(d, json_type_int), QMM_ERR_FORMAT,
                      "%s: tensor '%s': shape[%zu] is not an integer", P, name, i);
        int64_t x = json_object_get_int64(d);
        QMM_RETURN_IF(x < 0 || x == INT64_MAX, QMM_ERR_FORMAT, "%s: tensor '%s': shape[%zu] = %lld out of range", P,
                      name, i, (long long)x);
        t->shape[i] = x;
        QMM_RETURN_IF(x != 0 && numel > (uint64_t)INT64_MAX / (uint64_t)x, QMM_ERR_FORMAT,
                      "%s: tensor '%s': element count overflows", P, name);
        numel *= (uint64_t)x;
    }
    t->numel = (int64_t)numel;
    QMM_RETURN_IF(!json_object_object_get_ex(v, "data_offsets", &jo) || !json_object_is_type(jo, json_type_array) ||
                      json_object_array_length(jo) != 2,
                  QMM_ERR_FORMAT, "%s: tensor '%s': \"data_offsets\" is not [begin, end]", P, name);
    int64_t off[2];
    for (int i = 0; i < 2; i++) {
        json_object *d = json_object_array_get_idx(jo, (size_t)i);
        QMM_RETURN_IF(!json_object_is_type(d, json_type_int), QMM_ERR_FORMAT,
                      "%s: tensor '%s': data_offsets[%d] is not an integer", P, name, i);
        off[i] = json_object_get_int64(d);
        QMM_RETURN_IF(off[i] < 0 || off[i] == INT64_MAX, QMM_ERR_FORMAT,
                      "%s: tensor '%s': data_offsets[%d] = %lld out of range", P, name, i, (long long)off[i]);
    }
    QMM_RETURN_IF(off[0] > off[1], QMM_ERR_FORMAT, "%s: tensor '%s': data_offsets [%lld, %lld] end before begin",
                  P, name, (long long)off[0], (long long)off[1]);
    QMM_RETURN_IF((uint64_t)off[1] > data_size, QMM_ERR_FORMAT,
                  "%s: tensor '%s': data_offsets [%lld, %lld] past the end of the data (%llu bytes)", P, name,
                  (long long)off[0], (long long)off[1], (unsigned long long)data_size);
    int bits = k_dtypes[dt].bits;
    QMM_RETURN_IF(numel > UINT64_MAX / (uint64_t)bits, QMM_ERR_FORMAT, "%s: tensor '%s': byte count overflows", P,
                  name);
    uint64_t nbits = numel * (uint64_t)bits;
    QMM_RETURN_IF(nbits % 8 != 0, QMM_ERR_FORMAT, "%s: tensor '%s': %llu elements of %s are not whole bytes", P,
                  name, (unsigned long long)numel, k_dtypes[dt].name);
    uint64_t want = nbits / 8, have = (uint64_t)(off[1] - off[0]);
    QMM_RETURN_IF(want != have, QMM_ERR_FORMAT,
                  "%s: tensor '%s': %s shape needs %llu bytes but data_offsets [%lld, %lld] hold %llu", P, name,
                  k_dtypes[dt].name, (unsigned long long)want, (long long)off[0], (long long)off[1],
                  (unsigned long long)have);
    t->begin = (uint64_t)off[0];
    t->end = (uint64_t)off[1];
    t->nbytes = (size_t)have;
    t->data = f->data + t->begin;
    return QMM_OK;
}

static qmm_status parse_metadata(qmm_st_file *f, json_object *v) {
    QMM_RETURN_IF(!json_object_is_type(v, json_type_object), QMM_ERR_FORMAT,
                  "%s: \"__metadata__\" is not an object", f->path);
    size_t n = (size_t)json_object_object_length(v);
    f->meta = calloc(n ? n : 1, sizeof *f->meta);
    QMM_RETURN_IF(!f->meta, QMM_ERR_OUT_OF_MEMORY, "%s: out of memory", f->path);
    json_object_object_foreach(v, key, val) {
        QMM_RETURN_IF(!json_object_is_type(val, json_type_string), QMM_ERR_FORMAT,
                      "%s: __metadata__ \"%.80s\": value is not a string", f->path, key);
        QMM_RETURN_IF((size_t)json_object_get_string_len(val) != strlen(json_object_get_string(val)), QMM_ERR_FORMAT,
                      "%s: __metadata__ \"%.80s\": value contains U+0000 (qmm keeps metadata as C strings)", f->path,
                      key);
        qmm_st_meta *m = &f->meta[f->n_meta++];
        m->key = strdup(key);
        m->value = strdup(json_object_get_string(val));
        QMM_RETURN_IF(!m->key || !m->value, QMM_ERR_OUT_OF_MEMORY, "%s: out of memory", f->path);
    }
    return QMM_OK;
}

/* head: the file's first bytes (8 + the header), a copy for mapped files. */
static qmm_status parse_header(qmm_st_file *f, const unsigned char *head) {
    const char *P = f->path;
    QMM_RETURN_IF(f->size < 8, QMM_ERR_FORMAT, "%s: truncated: %zu bytes (a safetensors file has at least 8)", P,
                  f->size);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = (hl << 8) | head[i];
    QMM_RETURN_IF(hl > QMM_ST_MAX_HEADER, QMM_ERR_FORMAT, "%s: header length %llu over the limit of %u bytes", P,
                  (unsigned long long)hl, QMM_ST_MAX_HEADER);
    QMM_RETURN_IF(hl > f->size - 8, QMM_ERR_FORMAT,
                  "%s: header length %llu beyond the file (%zu bytes): truncated or not safetensors", P,
                  (unsigned long long)hl, f->size);
    QMM_RETURN_IF(hl < 2, QMM_ERR_FORMAT, "%s: header of %llu bytes cannot be a JSON object", P,
                  (unsigned long long)hl);
    f->header_len = hl;
    f->data = f->base + 8 + hl;
    const uint64_t data_size = (uint64_t)f->size - 8 - hl;
    const char *h = (const char *)head + 8;
    QMM_RETURN_IF(memchr(h, 0, (size_t)hl) != NULL, QMM_ERR_FORMAT, "%s: header contains a NUL byte at %zu", P,
                  (size_t)((const char *)memchr(h, 0, (size_t)hl) - h));
    size_t bad;
    QMM_RETURN_IF(!qmm_utf8_valid((const unsigned char *)h, (size_t)hl, &bad), QMM_ERR_FORMAT,
                  "%s: header is not valid UTF-8 (byte %zu)", P, bad);
    QMM_RETURN_IF(h[0] != '{', QMM_ERR_FORMAT, "%s: header does not start with '{'", P);

    json_tokener *tok = json_tokener_new_ex(16);
    QMM_RETURN_IF(!tok, QMM_ERR_OUT_OF_MEMORY, "%s: out of memory", P);
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
    json_object *root = json_tokener_parse_ex(tok, h, (int)hl);
    enum json_tokener_error jerr = json_tokener_get_error(tok);
    size_t end = json_tokener_get_parse_end(tok);
    json_tokener_free(tok);
    qmm_status st = QMM_OK;
    if (!root || jerr != json_tokener_success) {
        st = qmm_fail(QMM_ERR_FORMAT, "%s: header is not valid JSON: %s (near byte %zu)", P,
                      jerr == json_tokener_continue ? "unexpected end" : json_tokener_error_desc(jerr), end);
        goto out;
    }
    for (size_t i = end; i < hl; i++)
        if (h[i] != ' ' && h[i] != '\t' && h[i] != '\n' && h[i] != '\r') {
            st = qmm_fail(QMM_ERR_FORMAT, "%s: header has bytes after the JSON object (at %zu)", P, i);
            goto out;
        }
    if (!json_object_is_type(root, json_type_object)) {
        st = qmm_fail(QMM_ERR_FORMAT, "%s: header is not a JSON object", P);
        goto out;
    }
    st = qmm_json_check_strict(h, end, P, "header");
    if (st) goto out;
    size_t n = (size_t)json_object_object_length(root);
    f->t = calloc(n ? n : 1, sizeof *f->t);
    if (!f->t) { st = qmm_fail(QMM_ERR_OUT_OF_MEMORY, "%s: out of memory", P); goto out; }
    json_object_object_foreach(root, key, val) {
        if (!strcmp(key, "__metadata__")) {
            st = parse_metadata(f, val);
            if (st) goto out;
            continue;
        }
        qmm_st_tensor *t = &f->t[f->n];
        t->name = strdup(key);
        if (!t->name) { st = qmm_fail(QMM_ERR_OUT_OF_MEMORY, "%s: out of memory", P); goto out; }
        f->n++;
        st = parse_tensor(f, key, val, data_size, t);
        if (st) goto out;
    }
    qsort(f->t, f->n, sizeof *f->t, cmp_data_order);
    const qmm_st_tensor *last = NULL;   /* the non-empty tensor reaching furthest so far */
    for (size_t i = 0; i < f->n; i++) {
        const qmm_st_tensor *b = &f->t[i];
        if (b->begin == b->end) continue;
        if (last && last->end > b->begin) {
            st = qmm_fail(QMM_ERR_FORMAT, "%s: tensors '%s' [%llu, %llu] and '%s' [%llu, %llu] overlap", P,
                          last->name, (unsigned long long)last->begin, (unsigned long long)last->end, b->name,
                          (unsigned long long)b->begin, (unsigned long long)b->end);
            goto out;
        }
        if (!last || b->end > last->end) last = b;
    }
    /* by-name index; names are unique (qmm_json_check_strict refused duplicate keys) */
    name_idx *ni = malloc((f->n ? f->n : 1) * sizeof *ni);
    f->by_name = malloc((f->n ? f->n : 1) * sizeof *f->by_name);
    if (!ni || !f->by_name) {
        free(ni);
        st = qmm_fail(QMM_ERR_OUT_OF_MEMORY, "%s: out of memory", P);
        goto out;
    }
    for (size_t i = 0; i < f->n; i++) ni[i] = (name_idx){f->t[i].name, i};
    qsort(ni, f->n, sizeof *ni, cmp_name_idx);
    for (size_t i = 0; i < f->n; i++) f->by_name[i] = ni[i].idx;
    free(ni);
out:
    json_object_put(root);
    return st;
}

static qmm_status finish_open(qmm_st_file *f, qmm_st_file **out) {
    /* a mapped file's header is parsed from a copy made by qmm_mapped_copy: a file cut short
     * after the mmap is an error, not a SIGBUS inside json-c */
    const unsigned char *head = f->base;
    unsigned char *copy = NULL;
    qmm_status st = QMM_OK;
    if (f->mapped && f->size >= 8) {
        unsigned char len8[8];
        st = qmm_mapped_copy(len8, f->base, 8, f->path, "header length");
        uint64_t hl = 0;
        for (int i = 7; st == QMM_OK && i >= 0; i--) hl = (hl << 8) | len8[i];
        size_t take = 8 + (size_t)(hl < QMM_ST_MAX_HEADER ? hl : QMM_ST_MAX_HEADER);
        if (take > f->size) take = f->size;
        if (st == QMM_OK && !(copy = malloc(take))) st = qmm_fail(QMM_ERR_OUT_OF_MEMORY, "%s: out of memory", f->path);
        if (st == QMM_OK) st = qmm_mapped_copy(copy, f->base, take, f->path, "header");
        head = copy;
    }
    if (st == QMM_OK) st = parse_header(f, head);
    free(copy);
    if (st != QMM_OK) {
        qmm_st_close(f);
        return st;
    }
    *out = f;
    return QMM_OK;
}

qmm_status qmm_st_open_memory(const void *bytes, size_t size, qmm_st_file **out) {
    QMM_RETURN_IF(!out, QMM_ERR_INVALID_ARGUMENT, "qmm_st_open_memory: out is NULL");
    *out = NULL;
    QMM_RETURN_IF(!bytes && size, QMM_ERR_INVALID_ARGUMENT, "qmm_st_open_memory: bytes is NULL");
    qmm_st_file *f = calloc(1, sizeof *f);
    QMM_RETURN_IF(!f, QMM_ERR_OUT_OF_MEMORY, "qmm_st_open_memory: out of memory");
    f->path = strdup("<memory>");
    f->base = bytes ? bytes : (const unsigned char *)"";
    f->size = size;
    if (!f->path) { free(f); return qmm_fail(QMM_ERR_OUT_OF_MEMORY, "qmm_st_open_memory: out of memory"); }
    return finish_open(f, out);
}

qmm_status qmm_st_open(const char *path, qmm_st_file **out) {
    QMM_RETURN_IF(!out, QMM_ERR_INVALID_ARGUMENT, "qmm_st_open: out is NULL");
    *out = NULL;
    QMM_RETURN_IF(!path, QMM_ERR_INVALID_ARGUMENT, "qmm_st_open: path is NULL");
    /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever; the
     * type is checked on the open descriptor, so no other file can take its place after. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    QMM_RETURN_IF(fd < 0, QMM_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return qmm_fail(QMM_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return qmm_fail(QMM_ERR_IO, "%s: not a regular file (%s)", path,
                        S_ISDIR(sb.st_mode) ? "a directory" : S_ISFIFO(sb.st_mode) ? "a FIFO"
                        : S_ISCHR(sb.st_mode) ? "a character device" : S_ISBLK(sb.st_mode) ? "a block device"
                        : S_ISSOCK(sb.st_mode) ? "a socket" : "not a plain file");
    }
    qmm_st_file *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(path))) {
        free(f);
        close(fd);
        return qmm_fail(QMM_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    }
    f->size = (size_t)sb.st_size;
    if (f->size > 0) {
        void *p = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            close(fd);
            qmm_st_close(f);
            return qmm_fail(QMM_ERR_IO, "%s: cannot mmap %zu bytes: %s", path, (size_t)sb.st_size, strerror(e));
        }
        f->base = p;
        f->mapped = 1;
    } else {
        f->base = (const unsigned char *)"";
    }
    close(fd);
    return finish_open(f, out);
}

qmm_status qmm_st_read(const qmm_st_file *f, const qmm_st_tensor *t, uint64_t offset, size_t n, void *dst) {
    QMM_RETURN_IF(!f || !t || (!dst && n), QMM_ERR_INVALID_ARGUMENT, "qmm_st_read: %s is NULL",
                  !f ? "file" : !t ? "tensor" : "dst");
    QMM_RETURN_IF(offset > t->nbytes || n > t->nbytes - offset, QMM_ERR_INVALID_ARGUMENT,
                  "%s: tensor '%.200s': bytes [%llu, +%zu) outside its %zu", f->path, t->name,
                  (unsigned long long)offset, n, t->nbytes);
    const unsigned char *src = (const unsigned char *)t->data + offset;
    if (!f->mapped) {
        if (n) memcpy(dst, src, n);
        return QMM_OK;
    }
    char what[240];
    snprintf(what, sizeof what, "tensor '%.200s'", t->name);
    return qmm_mapped_copy(dst, src, n, f->path, what);
}

size_t qmm_st_count(const qmm_st_file *f) { return f ? f->n : 0; }
const qmm_st_tensor *qmm_st_at(const qmm_st_file *f, size_t i) { return f && i < f->n ? &f->t[i] : NULL; }

const qmm_st_tensor *qmm_st_get(const qmm_st_file *f, const char *name) {
    if (!f || !name) return NULL;
    size_t lo = 0, hi = f->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(f->t[f->by_name[mid]].name, name);
        if (c == 0) return &f->t[f->by_name[mid]];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

qmm_status qmm_st_find(const qmm_st_file *f, const char *name, const qmm_st_tensor **out) {
    QMM_RETURN_IF(!f || !name || !out, QMM_ERR_INVALID_ARGUMENT, "qmm_st_find: %s is NULL", !f ? "file" : !name ? "tensor name" : "out");
    *out = qmm_st_get(f, name);
    QMM_RETURN_IF(!*out, QMM_ERR_NOT_FOUND, "%s: no tensor named '%s'", f->path, name);
    return QMM_OK;
}

size_t qmm_st_metadata_count(const qmm_st_file *f) { return f ? f->n_meta : 0; }
void qmm_st_metadata_at(const qmm_st_file *f, size_t i, const char **key, const char **value) {
    const qmm_st_meta *m = f && i < f->n_meta ? &f->meta[i] : NULL;
    if (key) *key = m ? m->key : NULL;
    if (value) *value = m ? m->value : NULL;
}
const char *qmm_st_metadata_get(const qmm_st_file *f, const char *key) {
    if (!f || !key) return NULL;
    for (size_t i = 0; i < f->n_meta; i++)
        if (!strcmp(f->meta[i].key, key)) return f->meta[i].value;
    return NULL;
}
size_t qmm_st_file_size(const qmm_st_file *f) { return f ? f->size : 0; }
uint64_t qmm_st_header_size(const qmm_st_file *f) { return f ? f->header_len : 0; }
const char *qmm_st_path(const qmm_st_file *f) { return f ? f->path : ""; }

void qmm_st_release(const qmm_st_file *f, const qmm_st_tensor *t) {
    if (!f || !t || !f->mapped || t->nbytes == 0) return;
    long pg = sysconf(_SC_PAGESIZE);
    if (pg <= 0) return;
    uintptr_t b = (uintptr_t)t->data, e = b + t->nbytes;
    b = (b + (uintptr_t)pg - 1) & ~((uintptr_t)pg - 1);   /* whole pages inside the tensor only */
    e &= ~((uintptr_t)pg - 1);
    if (e > b) madvise((void *)b, e - b, MADV_DONTNEED);
}
