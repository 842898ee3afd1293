/*
 * safetensors_write.c — the streamed safetensors writer (contract in qmm_io.h): declare
 * tensors and metadata, write the header, stream each tensor's bytes in declared order, then
 * fsync + rename a temporary file (PATH.qmm-tmp.<pid>.XXXXXX, same folder) onto PATH; the
 * temporary paths of unfinished writers are kept in fixed slots for qmm_st_remove_temporaries. The header is
 * compact JSON ("__metadata__" first, then tensors in declared order) padded with spaces to a
 * multiple of 8, as the reference Python/Rust implementation writes it; same declarations →
 * same bytes.
 */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE
#include "io_internal.h"
#include "qmm_internal.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct wtensor {
    char *name;
    qmm_st_dtype dtype;
    int ndim;
    int64_t shape[QMM_ST_MAX_DIMS];
    uint64_t begin, end;
} wtensor;

struct qmm_st_writer {
    char *path, *tmp;
    int fd;                  /* -1 until created */
    int stage;               /* 0 declaring, 1 writing data, 2 finished, 3 failed */
    wtensor *t;
    size_t n, cap;
    qmm_st_meta *meta;
    size_t n_meta, cap_meta;
    uint64_t data_size;
    size_t cur;              /* tensor being written */
    uint64_t cur_done;       /* its bytes written so far */
    int tmp_slot;            /* its g_tmp slot (-1: none) */
    size_t *slot;            /* [n_slot] open-addressing set of declared names: index + 1, 0 empty */
    size_t n_slot;           /* a power of two, at least 2n */
};

static size_t name_hash(const char *s) {   /* FNV-1a */
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return (size_t)h;
}

/* The slot of name: the one holding it, or the empty one where it goes. */
static size_t *name_slot(const qmm_st_writer *w, const char *name) {
    size_t i = name_hash(name) & (w->n_slot - 1);
    while (w->slot[i] && strcmp(w->t[w->slot[i] - 1].name, name) != 0) i = (i + 1) & (w->n_slot - 1);
    return &w->slot[i];
}

/* Room for one more name in the set (rehashes at half full). */
static bool name_set_grow(qmm_st_writer *w) {
    if (2 * (w->n + 1) <= w->n_slot) return true;
    size_t ns = w->n_slot ? 2 * w->n_slot : 128;
    size_t *old = w->slot, old_n = w->n_slot;
    w->slot = calloc(ns, sizeof *w->slot);
    if (!w->slot) {
        w->slot = old;
        return false;
    }
    w->n_slot = ns;
    for (size_t i = 0; i < old_n; i++)
        if (old[i]) *name_slot(w, w->t[old[i] - 1].name) = old[i];
    free(old);
    return true;
}

/* ---------------------------------------------------------------- live temporary files
 * Fixed slots holding the paths of the unfinished writers' temporary files, so that a signal
 * handler can remove them (qmm_st_remove_temporaries): no allocation, no locks, the path bytes
 * never freed while a slot is live. state: 0 free, 1 being filled or emptied, 2 live. */
enum { TMP_SLOTS = 32, TMP_PATH_MAX = 4096 };
static struct {
    _Atomic int state;
    char path[TMP_PATH_MAX];
} g_tmp[TMP_SLOTS];

/* mkstemp(templ) with the file's name live in a slot from the moment it exists: mkstemp works on
 * the slot's own copy of the template (a handler may unlink a candidate name that failed; names
 * carry this process's pid, so only this process's temporaries can match). *slot = -1 when no
 * slot is free (more than TMP_SLOTS writers at once: that file is not removed on a signal). */
static int mkstemp_registered(char *templ, int *slot) {
    size_t n = strlen(templ);
    *slot = -1;
    for (int i = 0; n < TMP_PATH_MAX && i < TMP_SLOTS; i++) {
        int free_state = 0;
        if (atomic_compare_exchange_strong(&g_tmp[i].state, &free_state, 1)) {
            memcpy(g_tmp[i].path, templ, n + 1);
            atomic_store(&g_tmp[i].state, 2);
            int fd = mkstemp(g_tmp[i].path);
            if (fd < 0) {
                atomic_store(&g_tmp[i].state, 0);
                return fd;
            }
            memcpy(templ, g_tmp[i].path, n + 1);
            *slot = i;
            return fd;
        }
    }
    return mkstemp(templ);
}

static void tmp_unregister(int slot) {
    if (slot >= 0) atomic_store(&g_tmp[slot].state, 0);
}

void qmm_st_remove_temporaries(void) {
    for (int i = 0; i < TMP_SLOTS; i++)
        if (atomic_load(&g_tmp[i].state) == 2) unlink(g_tmp[i].path);
}

void qmm_st_writer_destroy(qmm_st_writer *w) {
    if (!w) return;
    if (w->fd >= 0) close(w->fd);
    if (w->stage != 2 && w->tmp) unlink(w->tmp);
    tmp_unregister(w->tmp_slot);
    for (size_t i = 0; i < w->n; i++) free(w->t[i].name);
    for (size_t i = 0; i < w->n_meta; i++) {
        free(w->meta[i].key);
        free(w->meta[i].value);
    }
    free(w->t);
    free(w->slot);
    free(w->meta);
    free(w->path);
    free(w->tmp);
    free(w);
}

qmm_status qmm_st_writer_create(const char *path, qmm_st_writer **out) {
    QMM_RETURN_IF(!out, QMM_ERR_INVALID_ARGUMENT, "qmm_st_writer_create: out is NULL");
    *out = NULL;
    QMM_RETURN_IF(!path || !*path, QMM_ERR_INVALID_ARGUMENT, "qmm_st_writer_create: empty path");
    qmm_st_writer *w = calloc(1, sizeof *w);
    QMM_RETURN_IF(!w, QMM_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    w->fd = -1;
    w->tmp_slot = -1;
    size_t n = strlen(path);
    w->path = strdup(path);
    w->tmp = malloc(n + 48);
    if (!w->path || !w->tmp) {
        qmm_st_writer_destroy(w);
        return qmm_fail(QMM_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    }
    snprintf(w->tmp, n + 48, "%s.qmm-tmp.%ld.XXXXXX", path, (long)getpid());
    w->fd = mkstemp_registered(w->tmp, &w->tmp_slot);
    if (w->fd < 0) {
        int e = errno;
        free(w->tmp);
        w->tmp = NULL;
        qmm_st_writer_destroy(w);
        return qmm_fail(QMM_ERR_IO, "%s: cannot create a temporary file beside it: %s", path, strerror(e));
    }
    *out = w;
    return QMM_OK;
}

/* Room for element n of the array *p of *cap elements of es bytes (doubled when full, `first`
 * when empty); false when out of memory (the array is left as it was). */
static bool room_for_one(void **p, size_t *cap, size_t n, size_t es, size_t first) {
    if (n < *cap) return true;
    size_t c = *cap ? 2 * *cap : first;
    void *q = c <= SIZE_MAX / es ? realloc(*p, c * es) : NULL;
    if (!q) return false;
    *p = q;
    *cap = c;
    return true;
}

static bool name_ok(const char *s) { return qmm_utf8_valid((const unsigned char *)s, strlen(s), NULL); }

qmm_status qmm_st_writer_set_metadata(qmm_st_writer *w, const char *key, const char *value) {
    QMM_RETURN_IF(!w || !key || !value, QMM_ERR_INVALID_ARGUMENT, "qmm_st_writer_set_metadata: %s is NULL", !w ? "writer" : !key ? "key" : "value");
    QMM_RETURN_IF(w->stage != 0, QMM_ERR_INVALID_ARGUMENT, "%s: metadata '%s' set after the header was written",
                  w->path, key);
    QMM_RETURN_IF(!name_ok(key) || !name_ok(value), QMM_ERR_INVALID_ARGUMENT, "%s: metadata '%s' is not UTF-8",
                  w->path, key);
    for (size_t i = 0; i < w->n_meta; i++)
        if (!strcmp(w->meta[i].key, key)) {
            char *v = strdup(value);
            QMM_RETURN_IF(!v, QMM_ERR_OUT_OF_MEMORY, "%s: out of memory", w->path);
            free(w->meta[i].value);
            w->meta[i].value = v;
            return QMM_OK;
        }
    QMM_RETURN_IF(!room_for_one((void **)&w->meta, &w->cap_meta, w->n_meta, sizeof *w->meta, 8),
                  QMM_ERR_OUT_OF_MEMORY, "%s: out of memory", w->path);
    qmm_st_meta *m = &w->meta[w->n_meta];
    m->key = strdup(key);
    m->value = strdup(value);
    if (!m->key || !m->value) {
        free(m->key);
        free(m->value);
        return qmm_fail(QMM_ERR_OUT_OF_MEMORY, "%s: out of memory", w->path);
    }
    w->n_meta++;
    return QMM_OK;
}

qmm_status qmm_st_writer_declare(qmm_st_writer *w, const char *name, qmm_st_dtype dtype, int ndim,
                                 const int64_t *shape) {
    QMM_RETURN_IF(!w || !name || (ndim > 0 && !shape), QMM_ERR_INVALID_ARGUMENT,
                  "qmm_st_writer_declare: %s is NULL", !w ? "writer" : !name ? "tensor name" : "shape");
    QMM_RETURN_IF(w->stage != 0, QMM_ERR_INVALID_ARGUMENT, "%s: tensor '%s' declared after the header was written",
                  w->path, name);
    QMM_RETURN_IF(!strcmp(name, "__metadata__") || !name_ok(name), QMM_ERR_INVALID_ARGUMENT,
                  "%s: invalid tensor name '%s'", w->path, name);
    QMM_RETURN_IF((unsigned)dtype >= QMM_ST_DTYPE_COUNT, QMM_ERR_INVALID_ARGUMENT, "%s: tensor '%s': bad dtype %d",
                  w->path, name, (int)dtype);
    QMM_RETURN_IF(ndim < 0 || ndim > QMM_ST_MAX_DIMS, QMM_ERR_INVALID_ARGUMENT, "%s: tensor '%s': %d dimensions",
                  w->path, name, ndim);
    QMM_RETURN_IF(!name_set_grow(w), QMM_ERR_OUT_OF_MEMORY, "%s: out of memory", w->path);
    QMM_RETURN_IF(*name_slot(w, name) != 0, QMM_ERR_INVALID_ARGUMENT, "%s: tensor '%s' declared twice", w->path, name);
    uint64_t numel = 1;
    for (int i = 0; i < ndim; i++) {
        QMM_RETURN_IF(shape[i] < 0 || (shape[i] && numel > (uint64_t)INT64_MAX / (uint64_t)shape[i]),
                      QMM_ERR_INVALID_ARGUMENT, "%s: tensor '%s': bad shape", w->path, name);
        numel *= (uint64_t)shape[i];
    }
    uint64_t bits = (uint64_t)qmm_st_dtype_bits(dtype);
    QMM_RETURN_IF(numel > UINT64_MAX / bits || (numel * bits) % 8, QMM_ERR_INVALID_ARGUMENT,
                  "%s: tensor '%s': size is not whole bytes", w->path, name);
    uint64_t nbytes = numel * bits / 8;
    QMM_RETURN_IF(nbytes > (uint64_t)INT64_MAX - w->data_size, QMM_ERR_INVALID_ARGUMENT, "%s: file too large",
                  w->path);
    QMM_RETURN_IF(!room_for_one((void **)&w->t, &w->cap, w->n, sizeof *w->t, 64), QMM_ERR_OUT_OF_MEMORY,
                  "%s: out of memory", w->path);
    wtensor *t = &w->t[w->n];
    memset(t, 0, sizeof *t);
    t->name = strdup(name);
    QMM_RETURN_IF(!t->name, QMM_ERR_OUT_OF_MEMORY, "%s: out of memory", w->path);
    t->dtype = dtype;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    t->begin = w->data_size;
    t->end = w->data_size + nbytes;
    w->data_size = t->end;
    w->n++;
    *name_slot(w, name) = w->n;
    return QMM_OK;
}

static qmm_status write_all(qmm_st_writer *w, const void *p, size_t n) {
    const char *c = p;
    while (n > 0) {
        size_t chunk = n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n;
        ssize_t k = write(w->fd, c, chunk);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            w->stage = 3;
            return qmm_fail(QMM_ERR_IO, "%s: write failed: %s", w->tmp, k < 0 ? strerror(errno) : "no progress");
        }
        c += k;
        n -= (size_t)k;
    }
    return QMM_OK;
}

/* Skips zero-byte tensors at the cursor. */
static void skip_empty(qmm_st_writer *w) {
    while (w->cur < w->n && w->t[w->cur].end == w->t[w->cur].begin) w->cur++;
}

qmm_status qmm_st_writer_begin(qmm_st_writer *w) {
    QMM_RETURN_IF(!w, QMM_ERR_INVALID_ARGUMENT, "qmm_st_writer_begin: NULL writer");
    QMM_RETURN_IF(w->stage != 0, QMM_ERR_INVALID_ARGUMENT, "%s: header already written", w->path);
    qmm_buf b = {0};
    qmm_buf_puts(&b, "{");
    int first = 1;
    if (w->n_meta) {
        qmm_buf_puts(&b, "\"__metadata__\":{");
        for (size_t i = 0; i < w->n_meta; i++) {
            if (i) qmm_buf_puts(&b, ",");
            qmm_buf_json_string(&b, w->meta[i].key);
            qmm_buf_puts(&b, ":");
            qmm_buf_json_string(&b, w->meta[i].value);
        }
        qmm_buf_puts(&b, "}");
        first = 0;
    }
    for (size_t i = 0; i < w->n; i++) {
        const wtensor *t = &w->t[i];
        if (!first) qmm_buf_puts(&b, ",");
        first = 0;
        qmm_buf_json_string(&b, t->name);
        qmm_buf_printf(&b, ":{\"dtype\":\"%s\",\"shape\":[", qmm_st_dtype_name(t->dtype));
        for (int d = 0; d < t->ndim; d++) qmm_buf_printf(&b, "%s%lld", d ? "," : "", (long long)t->shape[d]);
        qmm_buf_printf(&b, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)t->begin,
                       (unsigned long long)t->end);
    }
    qmm_buf_puts(&b, "}");
    while (!b.oom && b.len % 8) qmm_buf_puts(&b, " ");
    if (b.oom) {
        qmm_buf_free(&b);
        return qmm_fail(QMM_ERR_OUT_OF_MEMORY, "%s: out of memory for the header", w->path);
    }
    if (b.len > QMM_ST_MAX_HEADER) {
        size_t len = b.len;
        qmm_buf_free(&b);
        return qmm_fail(QMM_ERR_UNSUPPORTED, "%s: header of %zu bytes over the limit of %u", w->path, len,
                        QMM_ST_MAX_HEADER);
    }
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)b.len >> (8 * i));
    qmm_status st = write_all(w, len8, 8);
    if (st == QMM_OK) st = write_all(w, b.p, b.len);
    qmm_buf_free(&b);
    if (st != QMM_OK) return st;
    w->stage = 1;
    w->cur = 0;
    w->cur_done = 0;
    skip_empty(w);
    return QMM_OK;
}

qmm_status qmm_st_writer_write(qmm_st_writer *w, const void *data, size_t nbytes) {
    QMM_RETURN_IF(!w || (!data && nbytes), QMM_ERR_INVALID_ARGUMENT, "qmm_st_writer_write: %s is NULL", !w ? "writer" : "data");
    QMM_RETURN_IF(w->stage != 1, QMM_ERR_INVALID_ARGUMENT, "%s: write outside the data phase", w->path);
    while (nbytes > 0) {
        QMM_RETURN_IF(w->cur >= w->n, QMM_ERR_INVALID_ARGUMENT, "%s: %zu bytes written past the last tensor",
                      w->path, nbytes);
        const wtensor *t = &w->t[w->cur];
        uint64_t left = t->end - t->begin - w->cur_done;
        size_t k = nbytes < left ? nbytes : (size_t)left;
        QMM_FORWARD_IF_ERROR(write_all(w, data, k));
        data = (const char *)data + k;
        nbytes -= k;
        w->cur_done += k;
        if (w->cur_done == t->end - t->begin) {
            w->cur++;
            w->cur_done = 0;
            skip_empty(w);
        }
    }
    return QMM_OK;
}

qmm_status qmm_st_writer_finish(qmm_st_writer *w) {
    QMM_RETURN_IF(!w, QMM_ERR_INVALID_ARGUMENT, "qmm_st_writer_finish: NULL writer");
    if (w->stage == 0) QMM_FORWARD_IF_ERROR(qmm_st_writer_begin(w));
    QMM_RETURN_IF(w->stage != 1, QMM_ERR_INVALID_ARGUMENT, "%s: writer not in the data phase", w->path);
    QMM_RETURN_IF(w->cur < w->n, QMM_ERR_INVALID_ARGUMENT, "%s: tensor '%s' and %zu after it not written", w->path,
                  w->t[w->cur].name, w->n - w->cur - 1);
    if (fchmod(w->fd, 0644) != 0 || fsync(w->fd) != 0) {
        w->stage = 3;
        return qmm_fail(QMM_ERR_IO, "%s: %s", w->tmp, strerror(errno));
    }
    int rc = close(w->fd);
    w->fd = -1;
    if (rc != 0) {
        w->stage = 3;
        return qmm_fail(QMM_ERR_IO, "%s: close failed: %s", w->tmp, strerror(errno));
    }
    if (rename(w->tmp, w->path) != 0) {
        w->stage = 3;
        return qmm_fail(QMM_ERR_IO, "cannot rename %s to %s: %s", w->tmp, w->path, strerror(errno));
    }
    w->stage = 2;
    tmp_unregister(w->tmp_slot);
    w->tmp_slot = -1;
    return QMM_OK;
}

qmm_status qmm_st_save(const char *path, const qmm_st_tensor *tensors, size_t n, const qmm_st_file *meta_from) {
    QMM_RETURN_IF(!tensors && n, QMM_ERR_INVALID_ARGUMENT, "qmm_st_save: tensors is NULL");
    qmm_st_writer *w;
    QMM_FORWARD_IF_ERROR(qmm_st_writer_create(path, &w));
    qmm_status st = QMM_OK;
    for (size_t i = 0; st == QMM_OK && i < qmm_st_metadata_count(meta_from); i++) {
        const char *k, *v;
        qmm_st_metadata_at(meta_from, i, &k, &v);
        st = qmm_st_writer_set_metadata(w, k, v);
    }
    for (size_t i = 0; st == QMM_OK && i < n; i++)
        st = qmm_st_writer_declare(w, tensors[i].name, tensors[i].dtype, tensors[i].ndim, tensors[i].shape);
    if (st == QMM_OK) st = qmm_st_writer_begin(w);
    for (size_t i = 0; st == QMM_OK && i < n; i++) {
        uint64_t bits = (uint64_t)qmm_st_dtype_bits(tensors[i].dtype), numel = 1;
        for (int d = 0; d < tensors[i].ndim; d++) numel *= (uint64_t)tensors[i].shape[d];
        if (numel * bits / 8 != tensors[i].nbytes) {
            st = qmm_fail(QMM_ERR_INVALID_ARGUMENT, "%s: tensor '%s': %zu bytes given, shape needs %llu", path,
                          tensors[i].name, tensors[i].nbytes, (unsigned long long)(numel * bits / 8));
            break;
        }
        st = qmm_st_writer_write(w, tensors[i].data, tensors[i].nbytes);
    }
    if (st == QMM_OK) st = qmm_st_writer_finish(w);
    qmm_st_writer_destroy(w);
    return st;
}
