/*
 * cmd_inspect.c — `qmm inspect FILE [--json] [--tensors]`: a checkpoint's layers as qmm reads
 * them (SPEC §3): per layer the kind (int8 / w4a8 / float / unsupported format), dtype, shape,
 * bytes, quant format, convrot group, weight-scale kind, bias; for W4A8 layers (SPEC §11) the code
 * bits, s_rel group and dtype, codebook yes/no and bytes per weight (text: a section of their own;
 * JSON: each layer's "w4a8", null for the others); then totals (int8 and W4A8 bytes against the
 * bf16 equivalent) and the file's other tensors and metadata. --tensors lists every tensor.
 * Layers whose numbers would refuse to load (qmm_model_check_layer: a NaN/Inf/0/negative/denormal
 * weight scale or s_channel, a non-finite s_rel, codebook value or bias) are listed under "BAD NUMBERS" with layer and row (JSON: each
 * layer's "problem", null when fine; totals.bad_layers); inspect still exits 0.
 * A malformed file prints the reader's error and exits 1.
 */
#define _POSIX_C_SOURCE 200809L
#include "commands.h"
#include "qmm_io.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void json_str(const char *s) {
    putchar('"');
    for (const unsigned char *p = (const unsigned char *)s; p && *p; p++) {
        if (*p == '"' || *p == '\\') printf("\\%c", *p);
        else if (*p < 0x20) printf("\\u%04x", *p);
        else putchar(*p);
    }
    putchar('"');
}

static const char *kind_name(qmm_layer_kind k) {
    return k == QMM_LAYER_INT8 ? "int8" : k == QMM_LAYER_W4A8 ? "w4a8" : k == QMM_LAYER_FLOAT ? "float" : "unsupported";
}

static const char *scale_kind(const qmm_layer_info *l, char *buf, size_t n) {
    if (l->kind == QMM_LAYER_W4A8) {
        snprintf(buf, n, "s_channel [%lld]", (long long)l->N);
        return buf;
    }
    if (l->kind != QMM_LAYER_INT8) return "-";
    const qmm_st_tensor *s = l->weight_scale;
    if (s->ndim == 0) snprintf(buf, n, "per-tensor []");
    else if (s->ndim == 1) snprintf(buf, n, "%s [%lld]", l->n_scale == 1 ? "per-tensor" : "per-row", (long long)s->shape[0]);
    else snprintf(buf, n, "per-row [%lld,1]", (long long)s->shape[0]);
    return buf;
}

static size_t layer_bytes(const qmm_layer_info *l) {
    size_t b = 0;
    if (l->weight) b += l->weight->nbytes;
    if (l->weight_scale) b += l->weight_scale->nbytes;
    if (l->bias) b += l->bias->nbytes;
    if (l->s_rel) b += l->s_rel->nbytes;
    if (l->s_channel) b += l->s_channel->nbytes;
    if (l->codebook) b += l->codebook->nbytes;
    return b;
}

/* A W4A8 layer's bytes (codes, scales, codebook; no bias) per weight */
static double w4a8_bytes_per_weight(const qmm_layer_info *l) {
    const size_t b = layer_bytes(l) - (l->bias ? l->bias->nbytes : 0);
    return (double)b / ((double)l->N * (double)l->K);
}

/* s_rel's dtype as the layer runs it: U8 bytes are fp8 e4m3 */
static const char *s_rel_dtype(const qmm_layer_info *l) {
    return l->s_rel->dtype == QMM_ST_F32 ? "F32" : "F8_E4M3";
}

int cmd_inspect(int argc, char **argv) {
    int json = 0, tensors = 0;
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "--tensors")) tensors = 1;
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: qmm inspect FILE.safetensors [--json] [--tensors]\n");
            return 0;
        } else if (argv[i][0] == '-') { fprintf(stderr, "qmm inspect: unknown option '%s'\n", argv[i]); return 2; }
        else if (!path) path = argv[i];
        else { fprintf(stderr, "qmm inspect: extra argument '%s'\n", argv[i]); return 2; }
    }
    if (!path) { fprintf(stderr, "usage: qmm inspect FILE.safetensors [--json] [--tensors]\n"); return 2; }
    qmm_model_options mo = qmm_model_options_default();
    mo.allow_unsupported = 1;
    qmm_model *m;
    qmm_status st = qmm_model_open(path, &mo, &m);
    if (st != QMM_OK) {
        fprintf(stderr, "qmm inspect: %s: %s\n", qmm_status_name(st), qmm_last_error());
        return 1;
    }
    const qmm_st_file *f = qmm_model_file(m);
    size_t nl = qmm_model_layer_count(m), n_int8 = 0, n_w4 = 0, n_float = 0, n_uns = 0, n_bad = 0;
    /* the numbers of each layer (scales, bias): what would refuse to load, and why */
    char **problem = calloc(nl ? nl : 1, sizeof *problem);
    if (!problem) {
        fprintf(stderr, "qmm inspect: out of memory\n");
        qmm_model_close(m);
        return 1;
    }
    for (size_t i = 0; i < nl; i++)
        if (qmm_model_check_layer(m, qmm_model_layer(m, i)->name) != QMM_OK) {
            problem[i] = strdup(qmm_last_error());
            n_bad++;
        }
    unsigned long long int8_bytes = 0, int8_bf16_equiv = 0, float_bytes = 0, w4_bytes = 0, w4_bf16_equiv = 0;
    for (size_t i = 0; i < nl; i++) {
        const qmm_layer_info *l = qmm_model_layer(m, i);
        if (l->kind == QMM_LAYER_INT8) {
            n_int8++;
            int8_bytes += layer_bytes(l);
            int8_bf16_equiv += (unsigned long long)(l->N * l->K * 2) + (l->bias ? l->bias->nbytes : 0);
        } else if (l->kind == QMM_LAYER_W4A8) {
            n_w4++;
            w4_bytes += layer_bytes(l);
            w4_bf16_equiv += (unsigned long long)(l->N * l->K * 2) + (l->bias ? l->bias->nbytes : 0);
        } else if (l->kind == QMM_LAYER_FLOAT) {
            n_float++;
            float_bytes += layer_bytes(l);
        } else n_uns++;
    }
    if (json) {
        printf("{\"file\": ");
        json_str(path);
        printf(", \"file_bytes\": %zu, \"header_bytes\": %llu, \"tensors\": %zu, \"layers\": [", qmm_st_file_size(f),
               (unsigned long long)qmm_st_header_size(f), qmm_st_count(f));
        for (size_t i = 0; i < nl; i++) {
            const qmm_layer_info *l = qmm_model_layer(m, i);
            char sk[64];
            printf("%s{\"name\": ", i ? ", " : "");
            json_str(l->name);
            printf(", \"kind\": \"%s\", \"format\": ", kind_name(l->kind));
            if (l->format) json_str(l->format); else printf("null");
            printf(", \"dtype\": \"%s\", \"shape\": [%lld, %lld], \"bytes\": %zu, \"convrot_groupsize\": %d, "
                   "\"scale\": \"%s\", \"bias\": %s, \"full_precision\": %s, \"problem\": ",
                   l->weight ? qmm_st_dtype_name(l->weight->dtype) : "?", (long long)l->N, (long long)l->K,
                   layer_bytes(l), l->convrot_gs, scale_kind(l, sk, sizeof sk), l->bias ? "true" : "false",
                   l->full_precision ? "true" : "false");
            if (problem[i]) json_str(problem[i]); else printf("null");
            printf(", \"w4a8\": ");
            if (l->kind == QMM_LAYER_W4A8)
                printf("{\"bits\": %d, \"group_size\": %d, \"s_rel_dtype\": \"%s\", \"codebook\": %s, "
                       "\"bytes_per_weight\": %.6g}", l->code_bits, l->group_size, s_rel_dtype(l),
                       l->codebook ? "true" : "false", w4a8_bytes_per_weight(l));
            else printf("null");
            printf("}");
        }
        printf("], \"totals\": {\"int8_layers\": %zu, \"w4a8_layers\": %zu, \"float_layers\": %zu, "
               "\"unsupported_layers\": %zu, \"bad_layers\": %zu, \"int8_bytes\": %llu, "
               "\"int8_bf16_equivalent_bytes\": %llu, \"w4a8_bytes\": %llu, \"w4a8_bf16_equivalent_bytes\": %llu, "
               "\"float_layer_bytes\": %llu}, \"metadata\": {",
               n_int8, n_w4, n_float, n_uns, n_bad, int8_bytes, int8_bf16_equiv, w4_bytes, w4_bf16_equiv, float_bytes);
        for (size_t i = 0; i < qmm_st_metadata_count(f); i++) {
            const char *k, *v;
            qmm_st_metadata_at(f, i, &k, &v);
            printf("%s", i ? ", " : "");
            json_str(k);
            printf(": ");
            json_str(v);
        }
        printf("}");
        if (tensors) {
            printf(", \"all_tensors\": [");
            for (size_t i = 0; i < qmm_st_count(f); i++) {
                const qmm_st_tensor *t = qmm_st_at(f, i);
                printf("%s{\"name\": ", i ? ", " : "");
                json_str(t->name);
                printf(", \"dtype\": \"%s\", \"shape\": [", qmm_st_dtype_name(t->dtype));
                for (int d = 0; d < t->ndim; d++) printf("%s%lld", d ? ", " : "", (long long)t->shape[d]);
                printf("], \"data_offsets\": [%llu, %llu]}", (unsigned long long)t->begin, (unsigned long long)t->end);
            }
            printf("]");
        }
        printf("}\n");
        goto done;
    }
    printf("%s: %zu bytes, %zu tensors, %zu layers\n", path, qmm_st_file_size(f), qmm_st_count(f), nl);
    printf("%-48s %-11s %-5s %-16s %12s %-16s %5s %-18s %s\n", "layer", "kind", "dtype", "shape", "bytes", "format",
           "group", "scale", "bias");
    for (size_t i = 0; i < nl; i++) {
        const qmm_layer_info *l = qmm_model_layer(m, i);
        char shape[48], sk[64];
        snprintf(shape, sizeof shape, "[%lld, %lld]", (long long)l->N, (long long)l->K);
        printf("%-48s %-11s %-5s %-16s %12zu %-16s %5d %-18s %s%s\n", l->name, kind_name(l->kind),
               l->weight ? qmm_st_dtype_name(l->weight->dtype) : "?", shape, layer_bytes(l),
               l->format ? l->format : "-", l->convrot_gs, scale_kind(l, sk, sizeof sk), l->bias ? "yes" : "no",
               l->full_precision ? " (full_precision_matrix_mult)" : "");
    }
    printf("totals: %zu int8 layers (%.2f MiB; %.2f MiB as bf16, %.2fx smaller), %zu float layers (%.2f MiB), "
           "%zu in unsupported formats\n",
           n_int8, int8_bytes / 1048576.0, int8_bf16_equiv / 1048576.0,
           int8_bytes ? (double)int8_bf16_equiv / (double)int8_bytes : 0.0, n_float, float_bytes / 1048576.0, n_uns);
    if (n_w4) {
        printf("w4a8: %zu layers (%.2f MiB; %.2f MiB as bf16, %.2fx smaller):\n", n_w4, w4_bytes / 1048576.0,
               w4_bf16_equiv / 1048576.0, (double)w4_bf16_equiv / (double)w4_bytes);
        printf("  %-46s %4s %5s %-7s %-8s %s\n", "layer", "bits", "group", "s_rel", "codebook", "bytes/weight");
        for (size_t i = 0; i < nl; i++) {
            const qmm_layer_info *l = qmm_model_layer(m, i);
            if (l->kind != QMM_LAYER_W4A8) continue;
            printf("  %-46s %4d %5d %-7s %-8s %.4f\n", l->name, l->code_bits, l->group_size, s_rel_dtype(l),
                   l->codebook ? "yes" : "no", w4a8_bytes_per_weight(l));
        }
    }
    if (n_bad) {
        printf("BAD NUMBERS: %zu layer%s refuse to load:\n", n_bad, n_bad == 1 ? "" : "s");
        for (size_t i = 0; i < nl; i++)
            if (problem[i]) printf("  %s\n", problem[i]);
    }
    if (qmm_st_metadata_count(f)) {
        printf("metadata:\n");
        for (size_t i = 0; i < qmm_st_metadata_count(f); i++) {
            const char *k, *v;
            qmm_st_metadata_at(f, i, &k, &v);
            printf("  %s: %.100s%s\n", k, v, strlen(v) > 100 ? "..." : "");
        }
    }
    if (tensors) {
        printf("tensors (data order):\n");
        for (size_t i = 0; i < qmm_st_count(f); i++) {
            const qmm_st_tensor *t = qmm_st_at(f, i);
            printf("  %-56s %-8s [", t->name, qmm_st_dtype_name(t->dtype));
            for (int d = 0; d < t->ndim; d++) printf("%s%lld", d ? ", " : "", (long long)t->shape[d]);
            printf("] %zu bytes\n", t->nbytes);
        }
    }
done:
    for (size_t i = 0; i < nl; i++) free(problem[i]);
    free(problem);
    qmm_model_close(m);
    return 0;
}
