/*
 * checkpoint.c — the ComfyUI INT8 convention (SPEC §3) over an open safetensors file, and the
 * model object of qmm_io.h.
 *
 * A quantized layer L is marked by a tensor `L.comfy_quant` (U8 bytes of a JSON object) or, in
 * older files, by `__metadata__["_quantization_metadata"]` = {"format_version": .., "layers":
 * {"L": {...}}} (the tensor wins when both exist). Its keys, at the top level or nested in
 * "params": "format" (string, required), "convrot" (bool), "convrot_groupsize" (16/64/256,
 * absent = 256 when convrot), "full_precision_matrix_mult" (bool).
 * format "int8_tensorwise": L.weight I8 [N, K]; L.weight_scale F32 [N,1], [N], [1] or [];
 * L.bias optional F32/F16/BF16 [N]; K % g == 0.
 * format "asym_w4a8_int8" (comfy-kitchen's AsymW4A8Int8Layout, the keys ComfyUI v0.30's
 * _load_quantized_module reads; SPEC §3, §11): L.weight the codes I8/U8 [N, K·bits/8];
 * L.weight_s_rel F8_E4M3, U8 (its bytes) or F32 [N, K/group_size]; L.weight_s_channel F32 [N];
 * L.weight_codebook optional float [16] (4 bits only); L.bias optional; comfy_quant "group_size"
 * (default 16), "convrot_groupsize" (default 256; always rotated), "bits" (optional, must match the
 * codes' width). K is s_rel's columns × group_size; the width gives the bits. L.weight_correction
 * (asymmetric) is QMM_ERR_UNSUPPORTED. Its weight borrows the codes where they lie and owns a copy
 * of the rest (qmm_weight_borrow_w4a8 + qmm_weight_adopt).
 * Any other format is QMM_ERR_UNSUPPORTED naming layer and format (or, with allow_unsupported, a
 * listed QMM_LAYER_UNSUPPORTED layer).
 * A float layer: a 2-D F32/F16/BF16 L.weight without a quant marker; L.bias absent or
 * F32/F16/BF16 [N] (any other L.bias is QMM_ERR_FORMAT: it is never silently dropped).
 * Every layer is validated at open; a failed open returns nothing. The values of a layer's
 * weight_scale and bias are checked when it is packed (qmm_model_check_layer): a scale that is
 * NaN, ±Inf, ±0, negative or denormal, or a NaN/±Inf bias, is QMM_ERR_FORMAT naming layer and row;
 * for W4A8 the same for s_channel, and a NaN/±Inf s_rel (row, group) or codebook entry.
 */
#define _POSIX_C_SOURCE 200809L
#include "io_internal.h"
#include "numerics.h"
#include "qmm_internal.h"

#include <float.h>
#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct qmm_model {
    qmm_st_file *f;
    qmm_layer_info *layers;     /* [n] sorted by name; name/format strings owned */
    size_t n, cap;
    qmm_weight **cache;         /* [n] packed on first request */
};

qmm_model_options qmm_model_options_default(void) {
    qmm_model_options o;
    memset(&o, 0, sizeof o);
    o.float_layers = 1;
    return o;
}

size_t qmm_comfy_quant_json(int gs, char *buf, size_t size) {
    int n = gs ? snprintf(buf, size, "{\"format\": \"int8_tensorwise\", \"convrot\": true, \"convrot_groupsize\": %d}", gs)
               : snprintf(buf, size, "{\"format\": \"int8_tensorwise\"}");
    return n < 0 ? 0 : (size_t)n;
}

void qmm_model_close(qmm_model *m) {
    if (!m) return;
    for (size_t i = 0; i < m->n; i++) {
        free((char *)m->layers[i].name);
        free((char *)m->layers[i].format);
        if (m->cache) qmm_weight_destroy(m->cache[i]);
    }
    free(m->layers);
    free(m->cache);
    qmm_st_close(m->f);
    free(m);
}

static int ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

/* The tensor LAYER+SUFFIX, or NULL. Names of any length (up to the header's) are looked up:
 * *oom is set when the name cannot be built. */
static const qmm_st_tensor *part(const qmm_st_file *f, const char *layer, const char *suffix, int *oom) {
    char small[256], *name = small;
    size_t a = strlen(layer), b = strlen(suffix);
    if (a + b + 1 > sizeof small && !(name = malloc(a + b + 1))) {
        *oom = 1;
        return NULL;
    }
    memcpy(name, layer, a);
    memcpy(name + a, suffix, b + 1);
    const qmm_st_tensor *t = qmm_st_get(f, name);
    if (name != small) free(name);
    return t;
}

/* Is a layer named name[0..len) among layers[0..n) (sorted by name)? Binary search. */
static int has_layer(const qmm_layer_info *layers, size_t n, const char *name, size_t len) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const char *x = layers[mid].name;
        int c = strncmp(x, name, len);
        if (c == 0) c = x[len] != 0;   /* x has name as a proper prefix: x sorts after */
        if (c == 0) return 1;
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return 0;
}

static qmm_status add_layer(qmm_model *m, const char *name, size_t name_len, qmm_layer_info **out) {
    if (m->n == m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 32;
        qmm_layer_info *l = realloc(m->layers, cap * sizeof *l);
        QMM_RETURN_IF(!l, QMM_ERR_OUT_OF_MEMORY, "out of memory");
        m->layers = l;
        m->cap = cap;
    }
    qmm_layer_info *l = &m->layers[m->n];
    memset(l, 0, sizeof *l);
    char *s = malloc(name_len + 1);
    QMM_RETURN_IF(!s, QMM_ERR_OUT_OF_MEMORY, "out of memory");
    memcpy(s, name, name_len);
    s[name_len] = 0;
    l->name = s;
    m->n++;
    *out = l;
    return QMM_OK;
}

/* Parses JSON text (not NUL-terminated) strictly; NULL + FORMAT message on failure. */
static json_object *parse_json(const char *s, size_t n, const char *what, const char *path, qmm_status *st) {
    *st = QMM_OK;
    if (n > (1u << 24) || memchr(s, 0, n) || !qmm_utf8_valid((const unsigned char *)s, n, NULL)) {
        *st = qmm_fail(QMM_ERR_FORMAT, "%s: %s is not JSON (binary or not UTF-8)", path, what);
        return NULL;
    }
    json_tokener *tok = json_tokener_new_ex(16);
    if (!tok) { *st = qmm_fail(QMM_ERR_OUT_OF_MEMORY, "out of memory"); return NULL; }
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
    json_object *o = json_tokener_parse_ex(tok, s, (int)n);
    enum json_tokener_error e = json_tokener_get_error(tok);
    size_t end = json_tokener_get_parse_end(tok);
    json_tokener_free(tok);
    int trailing = 0;
    for (size_t i = end; i < n; i++) trailing |= !(s[i] == ' ' || s[i] == '\n' || s[i] == '\t' || s[i] == '\r');
    if (!o || e != json_tokener_success || trailing || !json_object_is_type(o, json_type_object)) {
        json_object_put(o);
        *st = qmm_fail(QMM_ERR_FORMAT, "%s: %s is not a JSON object%s%s", path, what,
                       o || e == json_tokener_success ? "" : ": ",
                       o || e == json_tokener_success ? "" : json_tokener_error_desc(e));
        return NULL;
    }
    if ((*st = qmm_json_check_strict(s, end, path, what)) != QMM_OK) {   /* duplicate keys, lone surrogates */
        json_object_put(o);
        return NULL;
    }
    return o;
}

/* cfg[key], else cfg["params"][key], else NULL */
static json_object *cfg_get(json_object *cfg, const char *key) {
    json_object *v, *p;
    if (json_object_object_get_ex(cfg, key, &v)) return v;
    if (json_object_object_get_ex(cfg, "params", &p) && json_object_is_type(p, json_type_object) &&
        json_object_object_get_ex(p, key, &v))
        return v;
    return NULL;
}

static int as_bool(json_object *v, int *out) {
    if (!v) { *out = 0; return 1; }
    if (json_object_is_type(v, json_type_boolean)) { *out = json_object_get_boolean(v); return 1; }
    if (json_object_is_type(v, json_type_int)) {
        int64_t x = json_object_get_int64(v);
        if (x == 0 || x == 1) { *out = (int)x; return 1; }
    }
    return 0;
}

/* cfg[key] (or cfg["params"][key]) as an integer into *out, def when absent; 0 if not an integer */
static int cfg_int(json_object *cfg, const char *key, int64_t def, int64_t *out) {
    json_object *v = cfg_get(cfg, key);
    *out = def;
    if (!v) return 1;
    if (!json_object_is_type(v, json_type_int)) return 0;
    *out = json_object_get_int64(v);
    return 1;
}

/* A tensor's dtype and shape for messages: "F32 [16]" */
static const char *tensor_desc(const qmm_st_tensor *t, char *buf, size_t n) {
    int k = snprintf(buf, n, "%s [", qmm_st_dtype_name(t->dtype));
    for (int d = 0; d < t->ndim && k > 0 && (size_t)k < n; d++)
        k += snprintf(buf + k, n - (size_t)k, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
    if (k > 0 && (size_t)k < n) snprintf(buf + k, n - (size_t)k, "]");
    return buf;
}

/* format "asym_w4a8_int8" (comfy-kitchen's AsymW4A8Int8Layout as ComfyUI v0.30's
 * _load_quantized_module reads it; SPEC §3, §11): the geometry of the kitchen's _w4a8_geometry
 * (K = s_rel columns × group_size, bits = the codes' row width × 8 / K) and the rules of its
 * validate_w4a8_operands, every tensor's dtype and shape checked here; the values (scales,
 * codebook, bias) when the layer is packed (check_values). */
static qmm_status read_w4a8_layer(qmm_model *m, qmm_layer_info *l, json_object *cfg) {
    const qmm_st_file *f = m->f;
    const char *P = f->path, *L = l->name;
    char d1[96];
    l->kind = QMM_LAYER_W4A8;
    l->weight_scale = NULL;   /* not part of the format: a stray L.weight_scale is another tensor */
    int oom = 0;
    l->s_rel = part(f, L, ".weight_s_rel", &oom);
    l->s_channel = part(f, L, ".weight_s_channel", &oom);
    l->codebook = part(f, L, ".weight_codebook", &oom);
    const qmm_st_tensor *corr = part(f, L, ".weight_correction", &oom);
    QMM_RETURN_IF(oom, QMM_ERR_OUT_OF_MEMORY, "%s: layer %.200s: out of memory", P, L);
    int64_t gsz, crg, bits_cfg;
    QMM_RETURN_IF(!cfg_int(cfg, "group_size", 16, &gsz), QMM_ERR_FORMAT, "%s: layer %s: \"group_size\" is not an integer",
                  P, L);
    QMM_RETURN_IF(!cfg_int(cfg, "convrot_groupsize", 256, &crg), QMM_ERR_FORMAT,
                  "%s: layer %s: \"convrot_groupsize\" is not an integer", P, L);
    QMM_RETURN_IF(!cfg_int(cfg, "bits", 0, &bits_cfg), QMM_ERR_FORMAT, "%s: layer %s: \"bits\" is not an integer", P, L);
    QMM_RETURN_IF(bits_cfg != 0 && bits_cfg != 4 && bits_cfg != 6, QMM_ERR_FORMAT,
                  "%s: layer %s: \"bits\" is %lld (asym_w4a8_int8 stores 4- or 6-bit codes)", P, L, (long long)bits_cfg);
    int convrot, fp;
    QMM_RETURN_IF(!as_bool(cfg_get(cfg, "convrot"), &convrot), QMM_ERR_FORMAT,
                  "%s: layer %s: \"convrot\" is not a boolean", P, L);
    QMM_RETURN_IF(cfg_get(cfg, "convrot") && !convrot, QMM_ERR_FORMAT,
                  "%s: layer %s: \"convrot\" is false, but asym_w4a8_int8 always runs with ConvRot", P, L);
    QMM_RETURN_IF(!as_bool(cfg_get(cfg, "full_precision_matrix_mult"), &fp), QMM_ERR_FORMAT,
                  "%s: layer %s: \"full_precision_matrix_mult\" is not a boolean", P, L);
    l->full_precision = fp;
    QMM_RETURN_IF(gsz < 4 || gsz > (1 << 24) || (16 % gsz != 0 && gsz % 16 != 0), QMM_ERR_FORMAT,
                  "%s: layer %s: \"group_size\" %lld (needs >= 4, dividing 16 or a multiple of 16)", P, L, (long long)gsz);
    QMM_RETURN_IF(crg < 4 || crg > QMM_MAX_CONVROT_GS || !qmm_convrot_gs_valid((int)crg), QMM_ERR_UNSUPPORTED,
                  "%s: layer %s: convrot group size %lld is not supported (a power of 4 from 4 to %d)", P, L,
                  (long long)crg, QMM_MAX_CONVROT_GS);
    l->group_size = (int)gsz;
    l->convrot_gs = (int)crg;
    QMM_RETURN_IF(corr, QMM_ERR_UNSUPPORTED,
                  "%s: layer %s: %s.weight_correction: asymmetric W4A8 (symmetric=False) is not supported (no int8 "
                  "path exists for it; ComfyUI v0.30 does not load it either)", P, L, L);
    const qmm_st_tensor *w = l->weight, *sr = l->s_rel, *sc = l->s_channel, *cb = l->codebook, *b = l->bias;
    QMM_RETURN_IF(!w, QMM_ERR_FORMAT, "%s: layer %s: %s.weight is missing", P, L, L);
    QMM_RETURN_IF((w->dtype != QMM_ST_I8 && w->dtype != QMM_ST_U8) || w->ndim != 2, QMM_ERR_FORMAT,
                  "%s: layer %s: %s.weight is %s (asym_w4a8_int8 needs the packed codes, I8 or U8 [N, K*bits/8])", P, L,
                  L, tensor_desc(w, d1, sizeof d1));
    const int64_t N = w->shape[0], C = w->shape[1];
    QMM_RETURN_IF(N < 1 || C < 1, QMM_ERR_FORMAT, "%s: layer %s: %s.weight is empty [%lld, %lld]", P, L, L,
                  (long long)N, (long long)C);
    QMM_RETURN_IF(!sr, QMM_ERR_FORMAT, "%s: layer %s: %s.weight_s_rel (the group scales) is missing", P, L, L);
    QMM_RETURN_IF((sr->dtype != QMM_ST_F8_E4M3 && sr->dtype != QMM_ST_U8 && sr->dtype != QMM_ST_F32) || sr->ndim != 2 ||
                      sr->shape[0] != N || sr->shape[1] < 1,
                  QMM_ERR_FORMAT,
                  "%s: layer %s: %s.weight_s_rel is %s (needs F8_E4M3, U8 (its bytes) or F32 [N, K/group_size], N=%lld)",
                  P, L, L, tensor_desc(sr, d1, sizeof d1), (long long)N);
    const int64_t G = sr->shape[1];
    QMM_RETURN_IF(G > ((int64_t)1 << 31) / gsz, QMM_ERR_UNSUPPORTED,
                  "%s: layer %s: K = %lld groups x %lld is too large (<= 2^31)", P, L, (long long)G, (long long)gsz);
    const int64_t K = G * gsz;
    const int bits = C * 8 == K * 4 ? 4 : C * 8 == K * 6 ? 6 : 0;
    QMM_RETURN_IF(!bits, QMM_ERR_FORMAT,
                  "%s: layer %s: %s.weight rows are %lld bytes, but K = %lld (%s.weight_s_rel columns %lld x group_size "
                  "%lld) needs %lld (4 bits) or %lld (6 bits)", P, L, L, (long long)C, (long long)K, L, (long long)G,
                  (long long)gsz, (long long)(K / 2), (long long)(K * 3 / 4));
    QMM_RETURN_IF(bits_cfg && bits_cfg != bits, QMM_ERR_FORMAT,
                  "%s: layer %s: \"bits\" is %lld, but %s.weight rows of %lld bytes for K = %lld are %d-bit codes", P, L,
                  (long long)bits_cfg, L, (long long)C, (long long)K, bits);
    l->code_bits = bits;
    l->N = N;
    l->K = K;
    QMM_RETURN_IF(K % 16 != 0 || (bits == 6 && (K % 32 != 0 || gsz % 16 != 0)), QMM_ERR_FORMAT,
                  "%s: layer %s: K = %lld, group_size %lld: %d-bit storage needs K %% %d == 0%s", P, L, (long long)K,
                  (long long)gsz, bits, bits == 6 ? 32 : 16, bits == 6 ? " and group_size a multiple of 16" : "");
    QMM_RETURN_IF(K % crg != 0, QMM_ERR_FORMAT, "%s: layer %s: K=%lld is not a multiple of the convrot group %lld", P, L,
                  (long long)K, (long long)crg);
    QMM_RETURN_IF(!sc, QMM_ERR_FORMAT, "%s: layer %s: %s.weight_s_channel (the row scales) is missing", P, L, L);
    QMM_RETURN_IF(sc->dtype != QMM_ST_F32 || sc->ndim != 1 || sc->shape[0] != N, QMM_ERR_FORMAT,
                  "%s: layer %s: %s.weight_s_channel is %s (needs F32 [%lld])", P, L, L, tensor_desc(sc, d1, sizeof d1),
                  (long long)N);
    l->n_scale = N;
    if (cb) {
        QMM_RETURN_IF(bits == 6, QMM_ERR_FORMAT,
                      "%s: layer %s: %s.weight_codebook with 6-bit codes (6-bit storage is uniform: no codebook)", P, L, L);
        QMM_RETURN_IF(!qmm_st_is_float(cb->dtype) || cb->ndim != 1 || cb->shape[0] != 16, QMM_ERR_FORMAT,
                      "%s: layer %s: %s.weight_codebook is %s (needs 16 values, F32/F16/BF16 [16])", P, L, L,
                      tensor_desc(cb, d1, sizeof d1));
    }
    if (b) {
        QMM_RETURN_IF(!qmm_st_is_float(b->dtype) || b->ndim != 1 || b->shape[0] != N, QMM_ERR_FORMAT,
                      "%s: layer %s: %s.bias is %s (needs F32/F16/BF16 [%lld])", P, L, L, tensor_desc(b, d1, sizeof d1),
                      (long long)N);
    }
    return QMM_OK;
}

/* Reads a quant config into layer l (whose name is set) and validates the layer's tensors. */
static qmm_status read_quant_layer(qmm_model *m, qmm_layer_info *l, json_object *cfg, const char *src,
                                   const qmm_model_options *o) {
    const qmm_st_file *f = m->f;
    const char *P = f->path, *L = l->name;
    l->source = src;
    json_object *jf = cfg_get(cfg, "format");
    QMM_RETURN_IF(!jf || !json_object_is_type(jf, json_type_string), QMM_ERR_FORMAT,
                  "%s: layer %s: %s has no \"format\" string", P, L, src);
    l->format = strdup(json_object_get_string(jf));
    QMM_RETURN_IF(!l->format, QMM_ERR_OUT_OF_MEMORY, "out of memory");
    int oom = 0;
    l->weight = part(f, L, ".weight", &oom);
    l->weight_scale = part(f, L, ".weight_scale", &oom);
    l->bias = part(f, L, ".bias", &oom);
    QMM_RETURN_IF(oom, QMM_ERR_OUT_OF_MEMORY, "%s: layer %.200s: out of memory", P, L);
    if (!strcmp(l->format, "asym_w4a8_int8")) return read_w4a8_layer(m, l, cfg);
    if (strcmp(l->format, "int8_tensorwise") != 0) {
        QMM_RETURN_IF(!o->allow_unsupported, QMM_ERR_UNSUPPORTED,
                      "%s: layer %s: format %.60s is not supported (qmm runs int8_tensorwise and asym_w4a8_int8)", P,
                      L, l->format);
        l->kind = QMM_LAYER_UNSUPPORTED;
        if (l->weight && l->weight->ndim == 2) {
            l->N = l->weight->shape[0];
            l->K = l->weight->shape[1];
        }
        return QMM_OK;
    }
    l->kind = QMM_LAYER_INT8;
    int convrot, fp;
    QMM_RETURN_IF(!as_bool(cfg_get(cfg, "convrot"), &convrot), QMM_ERR_FORMAT,
                  "%s: layer %s: \"convrot\" is not a boolean", P, L);
    QMM_RETURN_IF(!as_bool(cfg_get(cfg, "full_precision_matrix_mult"), &fp), QMM_ERR_FORMAT,
                  "%s: layer %s: \"full_precision_matrix_mult\" is not a boolean", P, L);
    l->full_precision = fp;
    if (convrot) {
        json_object *jg = cfg_get(cfg, "convrot_groupsize");
        int64_t g = 256;
        if (jg) {
            QMM_RETURN_IF(!json_object_is_type(jg, json_type_int), QMM_ERR_FORMAT,
                          "%s: layer %s: \"convrot_groupsize\" is not an integer", P, L);
            g = json_object_get_int64(jg);
        }
        QMM_RETURN_IF(g < 4 || g > QMM_MAX_CONVROT_GS || !qmm_convrot_gs_valid((int)g), QMM_ERR_UNSUPPORTED,
                      "%s: layer %s: convrot group size %lld is not supported (a power of 4 from 4 to %d)", P, L,
                      (long long)g, QMM_MAX_CONVROT_GS);
        l->convrot_gs = (int)g;
    }
    const qmm_st_tensor *w = l->weight, *s = l->weight_scale, *b = l->bias;
    QMM_RETURN_IF(!w, QMM_ERR_FORMAT, "%s: layer %s: %s.weight is missing", P, L, L);
    QMM_RETURN_IF(w->dtype != QMM_ST_I8 || w->ndim != 2, QMM_ERR_FORMAT,
                  "%s: layer %s: %s.weight is %s %d-D (int8_tensorwise needs I8 [N, K])", P, L, L,
                  qmm_st_dtype_name(w->dtype), w->ndim);
    l->N = w->shape[0];
    l->K = w->shape[1];
    QMM_RETURN_IF(l->N < 1 || l->K < 1, QMM_ERR_FORMAT, "%s: layer %s: empty weight [%lld, %lld]", P, L,
                  (long long)l->N, (long long)l->K);
    QMM_RETURN_IF(l->convrot_gs && l->K % l->convrot_gs, QMM_ERR_FORMAT,
                  "%s: layer %s: K=%lld is not a multiple of the convrot group %d", P, L, (long long)l->K,
                  l->convrot_gs);
    QMM_RETURN_IF(!s, QMM_ERR_FORMAT, "%s: layer %s: %s.weight_scale is missing", P, L, L);
    int shape_ok = (s->ndim == 0) || (s->ndim == 1 && (s->shape[0] == 1 || s->shape[0] == l->N)) ||
                   (s->ndim == 2 && s->shape[0] == l->N && s->shape[1] == 1);
    QMM_RETURN_IF(s->dtype != QMM_ST_F32 || !shape_ok, QMM_ERR_FORMAT,
                  "%s: layer %s: %s.weight_scale is %s %d-D with %lld values (needs F32 [N,1], [N], [1] or [], N=%lld)",
                  P, L, L, qmm_st_dtype_name(s->dtype), s->ndim, (long long)s->numel, (long long)l->N);
    l->n_scale = s->numel == 1 ? 1 : l->N;
    if (b) {
        QMM_RETURN_IF(!qmm_st_is_float(b->dtype) || b->ndim != 1 || b->shape[0] != l->N, QMM_ERR_FORMAT,
                      "%s: layer %s: %s.bias is %s %d-D (needs F32/F16/BF16 [%lld])", P, L, L,
                      qmm_st_dtype_name(b->dtype), b->ndim, (long long)l->N);
    }
    return QMM_OK;
}


static int cmp_layer(const void *a, const void *b) {
    return strcmp(((const qmm_layer_info *)a)->name, ((const qmm_layer_info *)b)->name);
}

/* Layers are found by binary search over the ones read so far (kept sorted between steps):
 * opening is O(n log n) in the number of tensors. */
static qmm_status read_convention(qmm_model *m, const qmm_model_options *o) {
    const qmm_st_file *f = m->f;
    const char *P = f->path;
    /* 1. per-layer comfy_quant tensors */
    for (size_t i = 0; i < qmm_st_count(f); i++) {
        const qmm_st_tensor *t = qmm_st_at(f, i);
        if (!ends_with(t->name, ".comfy_quant")) continue;
        size_t ln = strlen(t->name) - strlen(".comfy_quant");
        QMM_RETURN_IF(t->dtype != QMM_ST_U8 || t->ndim != 1, QMM_ERR_FORMAT,
                      "%s: tensor '%s' is %s %d-D (comfy_quant is U8 bytes of JSON)", P, t->name,
                      qmm_st_dtype_name(t->dtype), t->ndim);
        qmm_layer_info *l;
        QMM_FORWARD_IF_ERROR(add_layer(m, t->name, ln, &l));
        l->comfy_quant = t;
        char what[300];
        snprintf(what, sizeof what, "layer %.200s%s: comfy_quant", l->name, strlen(l->name) > 200 ? "..." : "");
        QMM_RETURN_IF(t->nbytes > (1u << 24), QMM_ERR_FORMAT, "%s: %s is not JSON (%zu bytes)", P, what, t->nbytes);
        char *text = malloc(t->nbytes ? t->nbytes : 1);
        QMM_RETURN_IF(!text, QMM_ERR_OUT_OF_MEMORY, "%s: out of memory", P);
        qmm_status st = qmm_st_read(f, t, 0, t->nbytes, text);
        json_object *cfg = st == QMM_OK ? parse_json(text, t->nbytes, what, P, &st) : NULL;
        free(text);
        if (!cfg) return st;
        st = read_quant_layer(m, l, cfg, "comfy_quant", o);
        json_object_put(cfg);
        QMM_FORWARD_IF_ERROR(st);
    }
    /* 2. the file-level alternative */
    if (m->n > 1) qsort(m->layers, m->n, sizeof *m->layers, cmp_layer);
    const size_t n_tensor_quant = m->n;
    const char *qm = qmm_st_metadata_get(f, "_quantization_metadata");
    if (qm) {
        qmm_status st;
        json_object *root = parse_json(qm, strlen(qm), "__metadata__[\"_quantization_metadata\"]", P, &st);
        if (!root) return st;
        json_object *layers;
        if (!json_object_object_get_ex(root, "layers", &layers) || !json_object_is_type(layers, json_type_object)) {
            json_object_put(root);
            return qmm_fail(QMM_ERR_FORMAT, "%s: _quantization_metadata has no \"layers\" object", P);
        }
        json_object_object_foreach(layers, key, cfg) {
            if (has_layer(m->layers, n_tensor_quant, key, strlen(key))) continue;  /* its comfy_quant tensor wins */
            if (!json_object_is_type(cfg, json_type_object)) {
                json_object_put(root);
                return qmm_fail(QMM_ERR_FORMAT, "%s: _quantization_metadata: layer %.200s is not an object", P, key);
            }
            qmm_layer_info *l;
            st = add_layer(m, key, strlen(key), &l);
            if (st == QMM_OK) st = read_quant_layer(m, l, cfg, "_quantization_metadata", o);
            if (st != QMM_OK) {
                json_object_put(root);
                return st;
            }
        }
        json_object_put(root);
    }
    /* 3. float layers: 2-D float L.weight without a quant marker */
    if (m->n > 1) qsort(m->layers, m->n, sizeof *m->layers, cmp_layer);
    const size_t n_quant = m->n;
    for (size_t i = 0; o->float_layers && i < qmm_st_count(f); i++) {
        const qmm_st_tensor *t = qmm_st_at(f, i);
        if (!ends_with(t->name, ".weight") || t->ndim != 2 || !qmm_st_is_float(t->dtype)) continue;
        if (t->shape[0] < 1 || t->shape[1] < 1) continue;
        size_t ln = strlen(t->name) - strlen(".weight");
        if (has_layer(m->layers, n_quant, t->name, ln)) continue;
        qmm_layer_info *l;
        QMM_FORWARD_IF_ERROR(add_layer(m, t->name, ln, &l));
        l->kind = QMM_LAYER_FLOAT;
        l->weight = t;
        l->N = t->shape[0];
        l->K = t->shape[1];
        int oom = 0;
        const qmm_st_tensor *b = part(f, l->name, ".bias", &oom);
        QMM_RETURN_IF(oom, QMM_ERR_OUT_OF_MEMORY, "%s: layer %.200s: out of memory", P, l->name);
        QMM_RETURN_IF(b && (!qmm_st_is_float(b->dtype) || b->ndim != 1 || b->shape[0] != l->N), QMM_ERR_FORMAT,
                      "%s: layer %s: %s.bias is %s %d-D with %lld values (the float layer [%lld, %lld] needs "
                      "F32/F16/BF16 [%lld])", P, l->name, l->name, qmm_st_dtype_name(b->dtype), b->ndim,
                      (long long)b->numel, (long long)l->N, (long long)l->K, (long long)l->N);
        l->bias = b;
    }
    if (m->n > 1) qsort(m->layers, m->n, sizeof *m->layers, cmp_layer);
    return QMM_OK;
}

static qmm_status model_from_file(qmm_st_file *f, const qmm_model_options *opt, qmm_model **out) {
    qmm_model_options o = opt ? *opt : qmm_model_options_default();
    qmm_model *m = calloc(1, sizeof *m);
    if (!m) {
        qmm_st_close(f);
        return qmm_fail(QMM_ERR_OUT_OF_MEMORY, "out of memory");
    }
    m->f = f;
    qmm_status st = read_convention(m, &o);
    if (st == QMM_OK) {
        m->cache = calloc(m->n ? m->n : 1, sizeof *m->cache);
        if (!m->cache) st = qmm_fail(QMM_ERR_OUT_OF_MEMORY, "out of memory");
    }
    if (st != QMM_OK) {
        qmm_model_close(m);
        return st;
    }
    *out = m;
    return QMM_OK;
}

qmm_status qmm_model_open(const char *path, const qmm_model_options *opt, qmm_model **out) {
    QMM_RETURN_IF(!out, QMM_ERR_INVALID_ARGUMENT, "qmm_model_open: out is NULL");
    *out = NULL;
    qmm_st_file *f;
    QMM_FORWARD_IF_ERROR(qmm_st_open(path, &f));
    return model_from_file(f, opt, out);
}

qmm_status qmm_model_open_memory(const void *bytes, size_t size, const qmm_model_options *opt, qmm_model **out) {
    QMM_RETURN_IF(!out, QMM_ERR_INVALID_ARGUMENT, "qmm_model_open_memory: out is NULL");
    *out = NULL;
    qmm_st_file *f;
    QMM_FORWARD_IF_ERROR(qmm_st_open_memory(bytes, size, &f));
    return model_from_file(f, opt, out);
}

const qmm_st_file *qmm_model_file(const qmm_model *m) { return m ? m->f : NULL; }
size_t qmm_model_layer_count(const qmm_model *m) { return m ? m->n : 0; }
const qmm_layer_info *qmm_model_layer(const qmm_model *m, size_t i) { return m && i < m->n ? &m->layers[i] : NULL; }

static size_t layer_index(const qmm_model *m, const char *name) {
    size_t lo = 0, hi = m->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(m->layers[mid].name, name);
        if (c == 0) return mid;
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return (size_t)-1;
}

qmm_status qmm_model_find(const qmm_model *m, const char *layer, const qmm_layer_info **out) {
    QMM_RETURN_IF(!m || !layer || !out, QMM_ERR_INVALID_ARGUMENT, "qmm_model_find: %s is NULL", !m ? "model" : !layer ? "layer name" : "out");
    size_t i = layer_index(m, layer);
    *out = i == (size_t)-1 ? NULL : &m->layers[i];
    QMM_RETURN_IF(!*out, QMM_ERR_NOT_FOUND, "%s: no layer named '%s' (%zu layers)", m->f->path, layer, m->n);
    return QMM_OK;
}

/* A malloc'd copy of a tensor's bytes (aligned for typed access), read with qmm_st_read: a file
 * truncated underneath is QMM_ERR_IO, not SIGBUS. */
static qmm_status read_copy(const qmm_st_file *f, const qmm_st_tensor *t, void **out) {
    *out = malloc(t->nbytes ? t->nbytes : 1);
    QMM_RETURN_IF(!*out, QMM_ERR_OUT_OF_MEMORY, "%s: tensor '%.200s' (%zu bytes): out of memory", f->path, t->name,
                  t->nbytes);
    qmm_status st = qmm_st_read(f, t, 0, t->nbytes, *out);
    if (st != QMM_OK) {
        free(*out);
        *out = NULL;
    }
    return st;
}

/* Why scale s cannot scale a row (NULL: it can): a scale is a positive, normal, finite float. */
static const char *bad_scale(float s) {
    if (s != s) return "NaN";
    if (isinf(s)) return s > 0 ? "+Inf" : "-Inf";
    if (s == 0.0f) return signbit(s) ? "-0" : "zero";
    if (s < 0.0f) return "negative";
    if (s < FLT_MIN) return "denormal";
    return NULL;
}

/* The values of a layer checked (scale: n_scale F32 values, aligned; bias: the bias tensor's
 * bytes, aligned; either may be NULL): QMM_ERR_FORMAT naming layer, tensor, row and value. */
static qmm_status check_values(const qmm_model *m, const qmm_layer_info *l, const float *scale, const void *bias) {
    const char *P = m->f->path, *L = l->name;
    for (int64_t r = 0; scale && r < l->n_scale; r++) {
        const char *why = bad_scale(scale[r]);
        if (!why) continue;
        if (l->n_scale == 1)
            return qmm_fail(QMM_ERR_FORMAT, "%s: layer %s: the per-tensor weight_scale is %s (%g): a scale must be a "
                            "positive normal float", P, L, why, (double)scale[r]);
        return qmm_fail(QMM_ERR_FORMAT, "%s: layer %s: weight_scale of row %lld is %s (%g): a scale must be a positive "
                        "normal float", P, L, (long long)r, why, (double)scale[r]);
    }
    if (bias) {
        qmm_dtype bt = (qmm_dtype)qmm_st_dtype_to_qmm(l->bias->dtype);
        for (int64_t r = 0; r < l->N; r++) {
            float v = qmm_load_f(bias, bt, r);
            QMM_RETURN_IF(!isfinite(v), QMM_ERR_FORMAT, "%s: layer %s: bias of row %lld is %s", P, L, (long long)r,
                          v != v ? "NaN" : v > 0 ? "+Inf" : "-Inf");
        }
    }
    return QMM_OK;
}

/* The memory a W4A8 layer's weight reads besides its codes, copied out of the file and owned by
 * the weight (qmm_weight_adopt): one block, each part 64-byte aligned. */
typedef struct w4a8_side {
    float *s_channel;      /* [N] */
    void *s_rel;           /* [N][K/group] bytes of e4m3, or F32 */
    float *codebook;       /* [16] widened to F32, or NULL */
    void *bias;            /* the bias tensor's bytes, or NULL */
    void *block;
    size_t bytes;          /* the block's size */
} w4a8_side;

static size_t up64(size_t n) { return (n + 63) & ~(size_t)63; }

/* Copies s_channel, s_rel, the codebook and the bias of W4A8 layer l into one malloc'd block. */
static qmm_status w4a8_side_read(const qmm_model *m, const qmm_layer_info *l, w4a8_side *sd) {
    const qmm_st_file *f = m->f;
    memset(sd, 0, sizeof *sd);
    const size_t a = up64(l->s_channel->nbytes), b = up64(l->s_rel->nbytes), c = l->codebook ? up64(16 * 4) : 0,
                 d = l->bias ? up64(l->bias->nbytes) : 0;
    char *blk = qmm_aligned_alloc(a + b + c + d + 64);
    QMM_RETURN_IF(!blk, QMM_ERR_OUT_OF_MEMORY, "%s: layer %.200s: out of memory (%zu bytes of scales)", f->path,
                  l->name, a + b + c + d);
    sd->block = blk;
    sd->bytes = a + b + c + d + 64;
    sd->s_channel = (float *)blk;
    sd->s_rel = blk + a;
    qmm_status st = qmm_st_read(f, l->s_channel, 0, l->s_channel->nbytes, sd->s_channel);
    if (st == QMM_OK) st = qmm_st_read(f, l->s_rel, 0, l->s_rel->nbytes, sd->s_rel);
    if (st == QMM_OK && l->codebook) {
        sd->codebook = (float *)(blk + a + b);
        uint16_t raw[16];
        void *dst = l->codebook->dtype == QMM_ST_F32 ? (void *)sd->codebook : (void *)raw;
        st = qmm_st_read(f, l->codebook, 0, l->codebook->nbytes, dst);
        qmm_dtype ct = (qmm_dtype)qmm_st_dtype_to_qmm(l->codebook->dtype);
        for (int i = 0; st == QMM_OK && ct != QMM_F32 && i < 16; i++) sd->codebook[i] = qmm_load_f(raw, ct, i);
    }
    if (st == QMM_OK && l->bias) {
        sd->bias = blk + a + b + c;
        st = qmm_st_read(f, l->bias, 0, l->bias->nbytes, sd->bias);
    }
    if (st != QMM_OK) {
        qmm_aligned_free(blk);
        memset(sd, 0, sizeof *sd);
    }
    return st;
}

/* The values of a W4A8 layer: s_channel as a weight scale (a positive normal float), s_rel and
 * the codebook finite (an s_rel of 0 or below is the kitchen's underflowed group: it decodes). */
static qmm_status check_w4a8_values(const qmm_model *m, const qmm_layer_info *l, const w4a8_side *sd) {
    const char *P = m->f->path, *L = l->name;
    for (int64_t r = 0; r < l->N; r++) {
        const char *why = bad_scale(sd->s_channel[r]);
        QMM_RETURN_IF(why, QMM_ERR_FORMAT, "%s: layer %s: %s.weight_s_channel of row %lld is %s (%g): a scale must be a "
                      "positive normal float", P, L, L, (long long)r, why, (double)sd->s_channel[r]);
    }
    const int64_t G = l->K / l->group_size, n = l->N * G;
    for (int64_t i = 0; i < n; i++) {
        const float v = l->s_rel->dtype == QMM_ST_F32 ? ((const float *)sd->s_rel)[i]
                                                      : qmm_e4m3_to_f32(((const uint8_t *)sd->s_rel)[i]);
        QMM_RETURN_IF(!isfinite(v), QMM_ERR_FORMAT, "%s: layer %s: %s.weight_s_rel of row %lld, group %lld is %s", P, L,
                      L, (long long)(i / G), (long long)(i % G), v != v ? "NaN" : v > 0 ? "+Inf" : "-Inf");
    }
    for (int i = 0; sd->codebook && i < 16; i++)
        QMM_RETURN_IF(!isfinite(sd->codebook[i]), QMM_ERR_FORMAT, "%s: layer %s: %s.weight_codebook[%d] is %s", P, L, L,
                      i, sd->codebook[i] != sd->codebook[i] ? "NaN" : sd->codebook[i] > 0 ? "+Inf" : "-Inf");
    return check_values(m, l, NULL, sd->bias);
}

/* qmm_model_w4a8_desc of layer l; *bytes the size of the block */
static qmm_status w4a8_desc_of(const qmm_model *m, const qmm_layer_info *l, qmm_w4a8_desc *desc, void **owned,
                               size_t *bytes) {
    QMM_RETURN_IF(l->kind != QMM_LAYER_W4A8, QMM_ERR_UNSUPPORTED, "%s: layer %s is not an asym_w4a8_int8 layer",
                  m->f->path, l->name);
    w4a8_side sd;
    QMM_FORWARD_IF_ERROR(w4a8_side_read(m, l, &sd));
    unsigned char last;
    qmm_status st = check_w4a8_values(m, l, &sd);
    if (st == QMM_OK) st = qmm_st_read(m->f, l->weight, l->weight->nbytes - 1, 1, &last);
    if (st != QMM_OK) {
        qmm_aligned_free(sd.block);
        return st;
    }
    qmm_w4a8_desc d = qmm_w4a8_desc_default();
    d.name = l->name;
    d.N = l->N;
    d.K = l->K;
    d.bits = l->code_bits;
    d.codes = l->weight->data;
    d.codes_bytes = (int64_t)l->weight->nbytes;
    d.s_rel = sd.s_rel;
    d.s_rel_dtype = l->s_rel->dtype == QMM_ST_F32 ? QMM_F32 : QMM_F8_E4M3;
    d.n_s_rel = l->s_rel->numel;
    d.group_size = l->group_size;
    d.codebook = sd.codebook;
    d.n_codebook = sd.codebook ? 16 : 0;
    d.s_channel = sd.s_channel;
    d.bias = sd.bias;
    d.bias_dtype = l->bias ? (qmm_dtype)qmm_st_dtype_to_qmm(l->bias->dtype) : QMM_F32;
    d.convrot_gs = l->convrot_gs;
    d.full_precision = l->full_precision;
    *desc = d;
    *owned = sd.block;
    *bytes = sd.bytes;
    return QMM_OK;
}

qmm_status qmm_model_w4a8_desc(const qmm_model *m, const char *layer, qmm_w4a8_desc *desc, void **owned) {
    QMM_RETURN_IF(!m || !layer || !desc || !owned, QMM_ERR_INVALID_ARGUMENT, "qmm_model_w4a8_desc: %s is NULL",
                  !m ? "model" : !layer ? "layer name" : !desc ? "desc" : "owned");
    *owned = NULL;
    const qmm_layer_info *l;
    QMM_FORWARD_IF_ERROR(qmm_model_find(m, layer, &l));
    size_t bytes;
    return w4a8_desc_of(m, l, desc, owned, &bytes);
}

void qmm_model_desc_release(void *owned) { qmm_aligned_free(owned); }

/* A W4A8 layer's weight: qmm_model_w4a8_desc borrowed, the block of its side tensors adopted. */
static qmm_status create_w4a8(const qmm_model *m, qmm_context *ctx, const qmm_layer_info *l, qmm_weight **out) {
    qmm_w4a8_desc d;
    void *block;
    size_t bytes;
    QMM_FORWARD_IF_ERROR(w4a8_desc_of(m, l, &d, &block, &bytes));
    qmm_status st = qmm_weight_borrow_w4a8(ctx, &d, out);
    if (st == QMM_OK) qmm_weight_adopt(*out, block, bytes);
    else qmm_aligned_free(block);
    return st;
}

qmm_status qmm_model_check_layer(const qmm_model *m, const char *layer) {
    const qmm_layer_info *l;
    QMM_FORWARD_IF_ERROR(qmm_model_find(m, layer, &l));
    if (l->kind == QMM_LAYER_UNSUPPORTED) return QMM_OK;
    if (l->kind == QMM_LAYER_W4A8) {
        w4a8_side sd;
        QMM_FORWARD_IF_ERROR(w4a8_side_read(m, l, &sd));
        qmm_status st = check_w4a8_values(m, l, &sd);
        qmm_aligned_free(sd.block);
        return st;
    }
    void *scale = NULL, *bias = NULL;
    qmm_status st = l->bias ? read_copy(m->f, l->bias, &bias) : QMM_OK;
    if (st == QMM_OK && l->kind == QMM_LAYER_INT8) st = read_copy(m->f, l->weight_scale, &scale);
    if (st == QMM_OK) st = check_values(m, l, scale, bias);
    free(scale);
    free(bias);
    return st;
}

qmm_status qmm_model_create_weight(const qmm_model *m, qmm_context *ctx, const char *layer, qmm_weight **out) {
    QMM_RETURN_IF(!out, QMM_ERR_INVALID_ARGUMENT, "qmm_model_create_weight: out is NULL");
    *out = NULL;
    const qmm_layer_info *l;
    QMM_FORWARD_IF_ERROR(qmm_model_find(m, layer, &l));
    QMM_RETURN_IF(l->kind == QMM_LAYER_UNSUPPORTED, QMM_ERR_UNSUPPORTED,
                  "%s: layer %s: format %.60s is not supported (qmm runs int8_tensorwise and asym_w4a8_int8)",
                  m->f->path, l->name, l->format);
    if (l->kind == QMM_LAYER_W4A8) return create_w4a8(m, ctx, l, out);
    /* every byte is copied out of the mapping first (qmm_st_read), then packed */
    void *bias = NULL, *scale = NULL, *wd = NULL;
    qmm_dtype bias_dt = l->bias ? (qmm_dtype)qmm_st_dtype_to_qmm(l->bias->dtype) : QMM_F32;
    qmm_status st = l->bias ? read_copy(m->f, l->bias, &bias) : QMM_OK;
    if (st == QMM_OK && l->kind == QMM_LAYER_INT8) st = read_copy(m->f, l->weight_scale, &scale);
    if (st == QMM_OK) st = check_values(m, l, scale, bias);
    if (st == QMM_OK) st = read_copy(m->f, l->weight, &wd);
    if (st == QMM_OK && l->kind == QMM_LAYER_INT8) {
        qmm_weight_desc d = {.name = l->name, .N = l->N, .K = l->K, .data = wd, .ld = l->K, .scale = scale,
                             .n_scale = l->n_scale, .bias = bias, .bias_dtype = bias_dt,
                             .convrot_gs = l->convrot_gs, .full_precision = l->full_precision};
        st = qmm_weight_create_int8(ctx, &d, out);
    } else if (st == QMM_OK) {
        st = qmm_weight_create_float(ctx, l->name, wd, (qmm_dtype)qmm_st_dtype_to_qmm(l->weight->dtype), l->N, l->K,
                                     l->K, bias, bias_dt, out);
    }
    free(bias);
    free(scale);
    free(wd);
    return st;
}

qmm_status qmm_model_weight(qmm_model *m, qmm_context *ctx, const char *layer, const qmm_weight **out) {
    QMM_RETURN_IF(!out, QMM_ERR_INVALID_ARGUMENT, "qmm_model_weight: out is NULL");
    *out = NULL;
    QMM_RETURN_IF(!m || !layer, QMM_ERR_INVALID_ARGUMENT, "qmm_model_weight: %s is NULL", !m ? "model" : "layer name");
    size_t i = layer_index(m, layer);
    QMM_RETURN_IF(i == (size_t)-1, QMM_ERR_NOT_FOUND, "%s: no layer named '%s' (%zu layers)", m->f->path, layer,
                  m->n);
    if (!m->cache[i]) QMM_FORWARD_IF_ERROR(qmm_model_create_weight(m, ctx, layer, &m->cache[i]));
    *out = m->cache[i];
    return QMM_OK;
}

qmm_status qmm_model_load_all(qmm_model *m, qmm_context *ctx) {
    QMM_RETURN_IF(!m, QMM_ERR_INVALID_ARGUMENT, "qmm_model_load_all: model is NULL");
    for (size_t i = 0; i < m->n; i++) {
        if (m->layers[i].kind == QMM_LAYER_UNSUPPORTED) continue;
        const qmm_weight *w;
        QMM_FORWARD_IF_ERROR(qmm_model_weight(m, ctx, m->layers[i].name, &w));
    }
    return QMM_OK;
}
