/*
 * quantize_file.c — SPEC §2 over a whole checkpoint: a float safetensors file in, a ComfyUI
 * INT8 checkpoint out (contract in qmm_io.h, qmm_quantize_file).
 * Per-row scales: each layer is quantized and written in blocks of rows (chunk_bytes of input),
 * each block's mapped input released after, so memory stays about one block; rows are
 * independent, so the bytes do not depend on the block size.
 *
 * Selection of a tensor `L.weight` (in this order): 2-D F32/F16/BF16; L is not already a
 * quantized layer (no L.comfy_quant / L.weight_scale, not in _quantization_metadata);
 * not excluded (--exclude); if include globs are given, L matches one; else L has no
 * dot-separated component containing "embed" or "norm" (embeddings and norms stay float by
 * default); min(N, K) >= min_size. Globs are fnmatch(3) patterns on L (not on L.weight).
 * A selected layer whose L.bias is not F32/F16/BF16 [N], or with a NaN/Inf weight, is
 * QMM_ERR_FORMAT naming it (and the row): qmm could not run the result. Finite weights up to
 * FLT_MAX quantize without overflow (qmm_quantize_weight rotates rows with |w| >= 2^100 scaled by 2^-64, exactly). Output order: the input's data order; a quantized L.weight is followed by L.weight_scale and
 * L.comfy_quant. The convrot group is chosen per layer before the output file is created, so a
 * bad explicit group fails without touching OUT.
 */
#define _POSIX_C_SOURCE 200809L
#include "io_internal.h"
#include "numerics.h"
#include "qmm_internal.h"

#include "numerics.h"

#include <fnmatch.h>
#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

qmm_quantize_file_options qmm_quantize_file_options_default(void) {
    qmm_quantize_file_options o;
    memset(&o, 0, sizeof o);
    o.convrot = -1;
    o.min_size = 256;
    return o;
}

static int any_match(const char *const *globs, const char *s) {
    for (; globs && *globs; globs++)
        if (fnmatch(*globs, s, 0) == 0) return 1;
    return 0;
}

/* Does s[0..n) contain needle? */
static int span_has(const char *s, size_t n, const char *needle) {
    size_t k = strlen(needle);
    for (size_t i = 0; i + k <= n; i++)
        if (!memcmp(s + i, needle, k)) return 1;
    return 0;
}

static int skipped_by_default(const char *L) {
    for (const char *c = L;;) {
        const char *dot = strchr(c, '.');
        size_t n = dot ? (size_t)(dot - c) : strlen(c);
        if (span_has(c, n, "embed") || span_has(c, n, "norm")) return 1;
        if (!dot) return 0;
        c = dot + 1;
    }
}

/* L + suffix, or NULL (out of memory); the caller frees. */
static char *cat(const char *L, size_t ln, const char *suffix) {
    size_t b = strlen(suffix);
    char *s = malloc(ln + b + 1);
    if (!s) return NULL;
    memcpy(s, L, ln);
    memcpy(s + ln, suffix, b + 1);
    return s;
}

/* The layer names of __metadata__["_quantization_metadata"]["layers"], sorted: parsed once per
 * file (a per-tensor parse made quantizing quadratic in the layer count). A metadata entry that
 * is not such JSON names no layer (the model reader reports it). */
typedef struct qnames { char **v; size_t n; } qnames;

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void qnames_free(qnames *q) {
    for (size_t i = 0; i < q->n; i++) free(q->v[i]);
    free(q->v);
    q->v = NULL;
    q->n = 0;
}

static qmm_status qnames_load(const qmm_st_file *f, qnames *q) {
    q->v = NULL;
    q->n = 0;
    const char *qm = qmm_st_metadata_get(f, "_quantization_metadata");
    if (!qm) return QMM_OK;
    json_object *root = json_tokener_parse(qm), *layers;
    qmm_status st = QMM_OK;
    if (root && json_object_object_get_ex(root, "layers", &layers) && json_object_is_type(layers, json_type_object)) {
        size_t n = (size_t)json_object_object_length(layers);
        q->v = calloc(n ? n : 1, sizeof *q->v);
        if (!q->v) st = qmm_fail(QMM_ERR_OUT_OF_MEMORY, "%s: out of memory", qmm_st_path(f));
        json_object_object_foreach(layers, key, val) {
            (void)val;
            if (st != QMM_OK) break;
            if (!(q->v[q->n] = strdup(key))) st = qmm_fail(QMM_ERR_OUT_OF_MEMORY, "%s: out of memory", qmm_st_path(f));
            else q->n++;
        }
        if (q->n > 1) qsort(q->v, q->n, sizeof *q->v, cmp_str);
    }
    json_object_put(root);
    if (st != QMM_OK) qnames_free(q);
    return st;
}

static int qnames_has(const qnames *q, const char *L) {
    return q->n && bsearch(&L, q->v, q->n, sizeof *q->v, cmp_str) != NULL;
}

static int selects(const qmm_st_file *f, const qmm_st_tensor *t, const qmm_quantize_file_options *opt,
                   const qnames *qn, char *why, size_t n) {
    qmm_quantize_file_options o = opt ? *opt : qmm_quantize_file_options_default();
    char tmp[100], *L = NULL, *cq = NULL, *ws = NULL;
    size_t len = strlen(t->name);
    const char *r = NULL;
    if (len < 7 || strcmp(t->name + len - 7, ".weight") != 0) r = "not a .weight tensor";
    else if (t->ndim != 2 || !qmm_st_is_float(t->dtype)) r = "not a 2-D float tensor";
    if (r) goto no;
    L = cat(t->name, len - 7, "");
    cq = cat(t->name, len - 7, ".comfy_quant");
    ws = cat(t->name, len - 7, ".weight_scale");
    if (!L || !cq || !ws) { r = "out of memory"; goto no; }
    int quant = qmm_st_get(f, cq) != NULL || qmm_st_get(f, ws) != NULL;
    if (quant || qnames_has(qn, L)) { r = "already a quantized layer"; goto no; }
    if (any_match(o.exclude, L)) { r = "excluded"; goto no; }
    if (o.include && *o.include) {
        if (!any_match(o.include, L)) { r = "not included"; goto no; }
    } else if (skipped_by_default(L)) {
        r = "embedding or norm (kept float unless --include names it)";
        goto no;
    }
    int64_t mn = t->shape[0] < t->shape[1] ? t->shape[0] : t->shape[1];
    if (mn < o.min_size) {
        snprintf(tmp, sizeof tmp, "min(N, K) = %lld < %lld", (long long)mn, (long long)o.min_size);
        r = tmp;
        goto no;
    }
    if (why && n) why[0] = 0;
    free(L);
    free(cq);
    free(ws);
    return 1;
no:
    if (why && n) snprintf(why, n, "%s", r);
    free(L);
    free(cq);
    free(ws);
    return 0;
}

int qmm_quantize_file_selects(const qmm_st_file *f, const qmm_st_tensor *t, const qmm_quantize_file_options *opt,
                              char *why, size_t n) {
    if (!f || !t || !t->name) {
        if (why && n) snprintf(why, n, "NULL argument");
        return 0;
    }
    qnames qn;
    if (qnames_load(f, &qn) != QMM_OK) {
        if (why && n) snprintf(why, n, "out of memory");
        return 0;
    }
    int r = selects(f, t, opt, &qn, why, n);
    qnames_free(&qn);
    return r;
}

static int group_for(int convrot, int64_t K) {
    if (convrot < 0) return K % 256 == 0 ? 256 : K % 64 == 0 ? 64 : K % 16 == 0 ? 16 : 0;
    return convrot;
}

/* One output item per input tensor: quantized (gs >= 0) or copied (gs == -1). */
typedef struct item { const qmm_st_tensor *t; int gs; } item;

static qmm_status declare_all(const qmm_st_file *f, const qmm_quantize_file_options *o, const qnames *qn,
                              item *items, qmm_st_writer *w, int64_t *n_layers) {
    const char *P = qmm_st_path(f);
    for (size_t i = 0; i < qmm_st_metadata_count(f); i++) {
        const char *k, *v;
        qmm_st_metadata_at(f, i, &k, &v);
        QMM_FORWARD_IF_ERROR(qmm_st_writer_set_metadata(w, k, v));
    }
    *n_layers = 0;
    for (size_t i = 0; i < qmm_st_count(f); i++) {
        const qmm_st_tensor *t = qmm_st_at(f, i);
        items[i].t = t;
        items[i].gs = -1;
        if (!selects(f, t, o, qn, NULL, 0)) {
            QMM_FORWARD_IF_ERROR(qmm_st_writer_declare(w, t->name, t->dtype, t->ndim, t->shape));
            continue;
        }
        const int64_t N = t->shape[0], K = t->shape[1];
        size_t ln = strlen(t->name) - 7;
        char *bn = cat(t->name, ln, ".bias");
        QMM_RETURN_IF(!bn, QMM_ERR_OUT_OF_MEMORY, "%s: out of memory", P);
        const qmm_st_tensor *b = qmm_st_get(f, bn);
        free(bn);
        QMM_RETURN_IF(b && (!qmm_st_is_float(b->dtype) || b->ndim != 1 || b->shape[0] != N), QMM_ERR_FORMAT,
                      "%s: layer %.*s [%lld, %lld]: its bias is %s %d-D with %lld values (needs F32/F16/BF16 [%lld])",
                      P, (int)ln, t->name, (long long)N, (long long)K, qmm_st_dtype_name(b->dtype), b->ndim,
                      (long long)b->numel, (long long)N);
        int gs = group_for(o->convrot, K);
        QMM_RETURN_IF(gs != 0 && !qmm_convrot_gs_valid(gs), QMM_ERR_INVALID_ARGUMENT,
                      "convrot group %d (needs auto, off or a power of 4 from 4 to %d)", gs, QMM_MAX_CONVROT_GS);
        QMM_RETURN_IF(gs && K % gs, QMM_ERR_UNSUPPORTED,
                      "%s: layer %.*s [%lld, %lld]: K=%lld is not a multiple of the convrot group %d (use --convrot auto, "
                      "or --exclude it)", P, (int)ln, t->name, (long long)N, (long long)K, (long long)K, gs);
        items[i].gs = gs;
        char json[128];
        size_t jl = qmm_comfy_quant_json(gs, json, sizeof json);
        int64_t sshape[2] = {o->per_tensor ? 1 : N, 1}, jshape[1] = {(int64_t)jl};
        QMM_FORWARD_IF_ERROR(qmm_st_writer_declare(w, t->name, QMM_ST_I8, 2, t->shape));
        char *ws = cat(t->name, ln, ".weight_scale"), *cq = cat(t->name, ln, ".comfy_quant");
        qmm_status st = ws && cq ? QMM_OK : qmm_fail(QMM_ERR_OUT_OF_MEMORY, "%s: out of memory", P);
        if (st == QMM_OK) st = qmm_st_writer_declare(w, ws, QMM_ST_F32, o->per_tensor ? 1 : 2, sshape);
        if (st == QMM_OK) st = qmm_st_writer_declare(w, cq, QMM_ST_U8, 1, jshape);
        free(ws);
        free(cq);
        QMM_FORWARD_IF_ERROR(st);
        ++*n_layers;
    }
    return QMM_OK;
}

/* Refuses a row holding NaN/Inf (naming tensor, row and column); *amax = the largest |w|. */
static qmm_status scan_row(const qmm_st_file *f, const qmm_st_tensor *t, const void *blk, int64_t r, int64_t row,
                           float *amax) {
    const int64_t K = t->shape[1];
    const qmm_dtype dt = (qmm_dtype)qmm_st_dtype_to_qmm(t->dtype);
    float m = 0.0f;
    for (int64_t k = 0; k < K; k++) {
        float v = qmm_load_f(blk, dt, r * K + k);
        QMM_RETURN_IF(!isfinite(v), QMM_ERR_FORMAT,
                      "%s: tensor '%s' [%lld, %lld]: row %lld holds %s at column %lld: quantize needs finite weights "
                      "(--exclude the layer to keep it float)", qmm_st_path(f), t->name, (long long)t->shape[0],
                      (long long)K, (long long)row, v != v ? "NaN" : v > 0 ? "+Inf" : "-Inf", (long long)k);
        v = fabsf(v);
        if (v > m) m = v;
    }
    *amax = m;
    return QMM_OK;
}

/* Quantizes rows [r0, r0 + nrows) of tensor t, held in blk (copied out of the file), and writes
 * their int8 bytes; their scales (or the one per-tensor scale) go to sc. */
static qmm_status quantize_block(const qmm_st_file *f, qmm_st_writer *w, const qmm_st_tensor *t, const void *blk,
                                 int64_t r0, int64_t nrows, int gs, int per_tensor, int8_t *wq, float *sc) {
    const int64_t K = t->shape[1];
    const qmm_dtype dt = (qmm_dtype)qmm_st_dtype_to_qmm(t->dtype);
    qmm_quant_options qo = {gs, per_tensor};
    int gs_used = gs;
    for (int64_t r = 0; r < nrows; r++) { /* NaN/Inf named by tensor, row and column */
        float m;
        QMM_FORWARD_IF_ERROR(scan_row(f, t, blk, r, r0 + r, &m));
    }
    /* rows near FLT_MAX: qmm_quantize_weight rotates them scaled down, exactly */
    qmm_status st = qmm_quantize_weight(blk, dt, nrows, K, K, &qo, wq, sc, &gs_used);
    QMM_FORWARD_IF_ERROR(st);
    QMM_RETURN_IF(gs_used != gs, QMM_ERR_INTERNAL, "tensor '%s': quantized with group %d, declared %d", t->name,
                  gs_used, gs);
    return qmm_st_writer_write(w, wq, (size_t)nrows * (size_t)K);
}

static qmm_status write_quantized(const qmm_st_file *f, qmm_st_writer *w, const item *it,
                                  const qmm_quantize_file_options *o) {
    const qmm_st_tensor *t = it->t;
    const int64_t N = t->shape[0], K = t->shape[1];
    const size_t es = (size_t)qmm_st_dtype_bits(t->dtype) / 8, row_bytes = (size_t)K * es;
    size_t nk;
    QMM_RETURN_IF(!qmm_mul_ok((size_t)N, (size_t)K, &nk), QMM_ERR_UNSUPPORTED, "tensor '%s': too large", t->name);
    /* rows per block: all of them per-tensor, else about chunk_bytes of input */
    size_t chunk = o->chunk_bytes ? o->chunk_bytes : ((size_t)64 << 20);
    int64_t rows = o->per_tensor ? N : (int64_t)(chunk / row_bytes);
    if (rows < 1) rows = 1;
    if (rows > N) rows = N;
    /* each block is copied out of the mapping (qmm_st_read: a file truncated underneath is an
     * error, not SIGBUS) into an aligned buffer, then its pages are released */
    void *blk = malloc((size_t)rows * row_bytes);
    int8_t *wq = malloc((size_t)rows * (size_t)K);
    float *sc = malloc((size_t)N * sizeof *sc);
    qmm_status st = QMM_OK;
    if (!blk || !wq || !sc)
        st = qmm_fail(QMM_ERR_OUT_OF_MEMORY, "tensor '%s' [%lld, %lld]: out of memory", t->name, (long long)N,
                      (long long)K);
    for (int64_t r0 = 0; st == QMM_OK && r0 < N; r0 += rows) {
        int64_t r1 = r0 + rows < N ? r0 + rows : N;
        qmm_st_tensor part = *t;
        part.data = (const char *)t->data + (size_t)r0 * row_bytes;
        part.nbytes = (size_t)(r1 - r0) * row_bytes;
        st = qmm_st_read(f, t, (uint64_t)r0 * row_bytes, part.nbytes, blk);
        qmm_st_release(f, &part);   /* drop the block's input pages from the resident set */
        if (st == QMM_OK)
            st = quantize_block(f, w, t, blk, r0, r1 - r0, it->gs, o->per_tensor, wq, sc + (o->per_tensor ? 0 : r0));
    }
    if (st == QMM_OK) st = qmm_st_writer_write(w, sc, (size_t)(o->per_tensor ? 1 : N) * sizeof *sc);
    if (st == QMM_OK) {
        char json[128];
        size_t jl = qmm_comfy_quant_json(it->gs, json, sizeof json);
        st = qmm_st_writer_write(w, json, jl);
    }
    free(blk);
    free(wq);
    free(sc);
    return st;
}

/* A tensor carried over unchanged, copied out of the mapping in pieces of at most 16 MiB. */
static qmm_status write_copied(const qmm_st_file *f, qmm_st_writer *w, const qmm_st_tensor *t, void *buf,
                               size_t buf_bytes) {
    for (size_t off = 0; off < t->nbytes; off += buf_bytes) {
        size_t k = t->nbytes - off < buf_bytes ? t->nbytes - off : buf_bytes;
        QMM_FORWARD_IF_ERROR(qmm_st_read(f, t, off, k, buf));
        QMM_FORWARD_IF_ERROR(qmm_st_writer_write(w, buf, k));
    }
    return QMM_OK;
}

qmm_status qmm_quantize_file(const char *in, const char *out, const qmm_quantize_file_options *opt,
                             int64_t *n_quantized) {
    QMM_RETURN_IF(!in || !out, QMM_ERR_INVALID_ARGUMENT, "qmm_quantize_file: NULL path");
    qmm_quantize_file_options o = opt ? *opt : qmm_quantize_file_options_default();
    if (n_quantized) *n_quantized = 0;
    QMM_RETURN_IF(o.convrot != -1 && o.convrot != 0 && !qmm_convrot_gs_valid(o.convrot), QMM_ERR_UNSUPPORTED,
                  "qmm_quantize_file %s: convrot group %d (needs -1 auto, 0 or a power of 4 from 4 to %d)", in,
                  o.convrot, QMM_MAX_CONVROT_GS);
    qmm_st_file *f;
    QMM_FORWARD_IF_ERROR(qmm_st_open(in, &f));
    item *items = calloc(qmm_st_count(f) ? qmm_st_count(f) : 1, sizeof *items);
    qmm_st_writer *w = NULL;
    qmm_status st = items ? QMM_OK : qmm_fail(QMM_ERR_OUT_OF_MEMORY, "out of memory");
    int64_t layers = 0, done = 0;
    /* every layer's group is decided while declaring: a failure there leaves OUT untouched */
    qnames qn = {NULL, 0};
    if (st == QMM_OK) st = qnames_load(f, &qn);
    if (st == QMM_OK) st = qmm_st_writer_create(out, &w);
    if (st == QMM_OK) st = declare_all(f, &o, &qn, items, w, &layers);
    qnames_free(&qn);
    if (st == QMM_OK) st = qmm_st_writer_begin(w);
    uint64_t bytes_total = 0, bytes_done = 0;
    for (size_t i = 0; i < qmm_st_count(f); i++) bytes_total += qmm_st_at(f, i)->nbytes;
    const size_t buf_bytes = (size_t)16 << 20;
    void *buf = st == QMM_OK ? malloc(buf_bytes) : NULL;
    if (st == QMM_OK && !buf) st = qmm_fail(QMM_ERR_OUT_OF_MEMORY, "out of memory");
    for (size_t i = 0; st == QMM_OK && i < qmm_st_count(f); i++) {
        const item *it = &items[i];
        if (it->gs >= 0) {
            st = write_quantized(f, w, it, &o);
            done++;
        } else {
            st = write_copied(f, w, it->t, buf, buf_bytes);
        }
        qmm_st_release(f, it->t);
        bytes_done += it->t->nbytes;
        if (st == QMM_OK && o.progress) o.progress(o.progress_user, done, layers, bytes_done, bytes_total);
    }
    if (st == QMM_OK) st = qmm_st_writer_finish(w);
    qmm_st_writer_destroy(w);
    free(buf);
    free(items);
    qmm_st_close(f);
    if (st == QMM_OK && n_quantized) *n_quantized = done;
    return st;
}
