/*
 * weight.c — weight handles: an int8 weight copied once into the shared n16k4 packing (see
 * qmm_internal.h; panel.h's qmm_pack_i8_rows), the one layout every owned int8 weight has, with
 * its fp32 scales and bias; a borrowed int8 weight (the caller's memory, read at every call;
 * borrow.c builds each call's view); or a float weight in its packed float layout. Also SPEC §2: quantizing a float matrix to int8
 * (optionally rotated with H_g) and dequantizing it back. No weight function uses a context (each
 * takes one, which may be NULL, and ignores it): creation runs on the calling thread with the C
 * allocator and reports errors through the status and qmm_last_error().
 */
#include "numerics.h"
#include "panel.h"
#include "qmm_internal.h"
#include "w4a8.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

qmm_weight_desc qmm_weight_desc_default(void) {
    qmm_weight_desc d;
    memset(&d, 0, sizeof d);
    d.bias_dtype = QMM_F32;
    return d;
}

static int valid_gs(int g) { return g == 0 || qmm_convrot_gs_valid(g); }

void qmm_weight_destroy(qmm_weight *w) {
    if (!w) return;
    qmm_aligned_free(w->i8.data);
    qmm_aligned_free(w->i8.colsum);
    free(w->scale);
    free(w->bias);
    qmm_aligned_free(w->fp.bf16);
    qmm_aligned_free(w->fp.f32);
    qmm_aligned_free(w->adopted);
    free(w);
}

void qmm_weight_adopt(qmm_weight *w, void *block, size_t bytes) {
    if (!w) { qmm_aligned_free(block); return; }
    qmm_aligned_free(w->adopted);
    w->adopted = block;
    w->adopted_bytes = block ? bytes : 0;
}

static const char *wname(const char *name) { return name && *name ? name : "(unnamed)"; }

/* Shape limits of every weight entry point, checked before anything is allocated or read:
 * N, K >= 1; each <= 2^31; N·K <= QMM_MAX_WEIGHT_ELEMS; ld (0 = K) >= K and N·ld·es fits int64. */
static qmm_status check_shape(const char *nm, int64_t N, int64_t K, int64_t ld, size_t es) {
    QMM_RETURN_IF(N <= 0 || K <= 0, QMM_ERR_INVALID_ARGUMENT, "weight %s: shape [%lld, %lld] (needs N, K >= 1)",
                  nm, (long long)N, (long long)K);
    QMM_RETURN_IF(N > ((int64_t)1 << 31) || K > ((int64_t)1 << 31), QMM_ERR_UNSUPPORTED,
                  "weight %s: shape [%lld, %lld] too large (each dimension <= 2^31)", nm, (long long)N,
                  (long long)K);
    QMM_RETURN_IF(N > QMM_MAX_WEIGHT_ELEMS / K, QMM_ERR_UNSUPPORTED,
                  "weight %s: shape [%lld, %lld] too large (N*K <= 2^36 elements)", nm, (long long)N, (long long)K);
    QMM_RETURN_IF(ld != 0 && ld < K, QMM_ERR_INVALID_ARGUMENT, "weight %s: row stride %lld < K=%lld", nm,
                  (long long)ld, (long long)K);
    QMM_RETURN_IF(ld > INT64_MAX / N / (int64_t)es, QMM_ERR_UNSUPPORTED,
                  "weight %s [%lld, %lld]: row stride %lld too large (N*ld bytes overflow)", nm, (long long)N,
                  (long long)K, (long long)ld);
    return QMM_OK;
}

static qmm_status weight_common(const char *name, int64_t N, int64_t K, int64_t ld, size_t es, const void *bias,
                                qmm_dtype bias_dtype, qmm_weight **out) {
    const char *nm = wname(name);
    QMM_FORWARD_IF_ERROR(check_shape(nm, N, K, ld, es));
    QMM_RETURN_IF(bias && !qmm_dtype_is_float(bias_dtype), QMM_ERR_UNSUPPORTED,
                  "weight %s: bias dtype %s (needs f32, f16 or bf16)", nm, qmm_dtype_name(bias_dtype));
    qmm_weight *w = calloc(1, sizeof *w);
    QMM_RETURN_IF(!w, QMM_ERR_OUT_OF_MEMORY, "weight %s: out of memory", nm);
    snprintf(w->name, sizeof w->name, "%s", nm);
    w->N = N;
    w->K = K;
    if (bias) {
        w->bias = malloc((size_t)N * sizeof(float));
        if (!w->bias) { free(w); return qmm_fail(QMM_ERR_OUT_OF_MEMORY, "weight %s: out of memory", nm); }
        for (int64_t n = 0; n < N; n++) w->bias[n] = qmm_load_f(bias, bias_dtype, n);
    }
    *out = w;
    return QMM_OK;
}

/* The descriptor checks of both int8 entry points (fn: the function, for a NULL desc), before
 * anything is allocated or read; then the handle with its shape, flags and bias (bias: copied
 * for an owned weight, not for a borrowed one). */
static qmm_status int8_handle(const char *fn, const qmm_weight_desc *d, int copy_bias, qmm_weight **out) {
    QMM_RETURN_IF(!out, QMM_ERR_INVALID_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    QMM_RETURN_IF(!d, QMM_ERR_INVALID_ARGUMENT, "%s: desc is NULL", fn);
    const char *nm = wname(d->name);
    QMM_FORWARD_IF_ERROR(check_shape(nm, d->N, d->K, d->ld, 1));
    QMM_RETURN_IF(!d->data, QMM_ERR_INVALID_ARGUMENT, "weight %s: data is NULL", nm);
    QMM_RETURN_IF(!d->scale, QMM_ERR_INVALID_ARGUMENT, "weight %s: weight_scale is NULL", nm);
    QMM_RETURN_IF(d->n_scale != 1 && d->n_scale != d->N, QMM_ERR_INVALID_ARGUMENT,
                  "weight %s [%lld, %lld]: %lld scales (needs 1 or N=%lld)", nm, (long long)d->N,
                  (long long)d->K, (long long)d->n_scale, (long long)d->N);
    QMM_RETURN_IF(!valid_gs(d->convrot_gs), QMM_ERR_UNSUPPORTED,
                  "weight %s: convrot group size %d (needs 0 or a power of 4 from 4 to 65536)", nm, d->convrot_gs);
    QMM_RETURN_IF(d->convrot_gs && d->K % d->convrot_gs != 0, QMM_ERR_UNSUPPORTED,
                  "weight %s [%lld, %lld]: K=%lld is not a multiple of the convrot group %d", nm,
                  (long long)d->N, (long long)d->K, (long long)d->K, d->convrot_gs);
    QMM_RETURN_IF(d->bias && !qmm_dtype_is_float(d->bias_dtype), QMM_ERR_UNSUPPORTED,
                  "weight %s: bias dtype %s (needs f32, f16 or bf16)", nm, qmm_dtype_name(d->bias_dtype));
    qmm_weight *w;
    QMM_FORWARD_IF_ERROR(weight_common(d->name, d->N, d->K, d->ld, 1, copy_bias ? d->bias : NULL, d->bias_dtype, &w));
    w->is_int8 = 1;
    w->convrot_gs = d->convrot_gs;
    w->full_precision = d->full_precision != 0;
    w->per_tensor_scale = d->n_scale == 1;
    w->i8.Np = qmm_round_up(d->N, 16);
    w->i8.Kp = qmm_round_up(d->K, 64);
    *out = w;
    return QMM_OK;
}

qmm_status qmm_weight_create_int8(qmm_context *ctx, const qmm_weight_desc *d, qmm_weight **out) {
    (void)ctx;
    QMM_FORWARD_IF_ERROR(int8_handle("qmm_weight_create_int8", d, 1, out));
    qmm_weight *w = *out;
    const int64_t N = d->N, K = d->K, ld = d->ld ? d->ld : d->K;
    size_t bytes;
    if (!qmm_mul_ok((size_t)w->i8.Np, (size_t)w->i8.Kp, &bytes)) bytes = SIZE_MAX;
    w->i8.data = qmm_aligned_alloc(bytes);
    w->i8.colsum = qmm_aligned_alloc((size_t)w->i8.Np * sizeof(int32_t));
    w->scale = malloc((size_t)N * sizeof(float));
    if (!w->i8.data || !w->i8.colsum || !w->scale) {
        qmm_weight_destroy(w);
        *out = NULL;
        return qmm_fail(QMM_ERR_OUT_OF_MEMORY, "weight %s [%lld, %lld]: cannot allocate %zu packed bytes",
                        wname(d->name), (long long)N, (long long)K, bytes);
    }
    w->has_neg128 = qmm_pack_i8_rows(d->data, ld, N, K, 0, w->i8.Np, &w->i8);
    for (int64_t n = 0; n < N; n++) w->scale[n] = d->scale[d->n_scale == 1 ? 0 : n];
    *out = w;
    return QMM_OK;
}

qmm_status qmm_weight_borrow_int8(qmm_context *ctx, const qmm_weight_desc *d, qmm_weight **out) {
    (void)ctx;
    QMM_FORWARD_IF_ERROR(int8_handle("qmm_weight_borrow_int8", d, 0, out));
    qmm_weight *w = *out;
    w->borrowed = 1;
    w->borrow.data = d->data;
    w->borrow.ld = d->ld ? d->ld : d->K;
    w->borrow.scale = d->scale;
    w->borrow.n_scale = d->n_scale;
    w->borrow.bias = d->bias;
    w->borrow.bias_dtype = d->bias_dtype;
    *out = w;
    return QMM_OK;
}

qmm_w4a8_desc qmm_w4a8_desc_default(void) {
    qmm_w4a8_desc d;
    memset(&d, 0, sizeof d);
    d.bits = 4;
    d.s_rel_dtype = QMM_F8_E4M3;
    d.group_size = 16;
    d.bias_dtype = QMM_F32;
    return d;
}

/* the first non-finite value of n fp32 values, or -1 */
static int64_t first_nonfinite_f32(const float *v, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(v[i])) return i;
    return -1;
}

qmm_status qmm_w4a8_desc_check(const qmm_w4a8_desc *d) {
    QMM_RETURN_IF(!d, QMM_ERR_INVALID_ARGUMENT, "W4A8 desc is NULL");
    const char *nm = wname(d->name);
    const int64_t N = d->N, K = d->K;
    QMM_FORWARD_IF_ERROR(check_shape(nm, N, K, 0, 1));
    QMM_RETURN_IF(d->bits != 4 && d->bits != 6, QMM_ERR_INVALID_ARGUMENT, "weight %s: bits %d (needs 4 or 6)", nm, d->bits);
    QMM_RETURN_IF(K % (d->bits == 6 ? 32 : 16) != 0, QMM_ERR_INVALID_ARGUMENT,
                  "weight %s [%lld, %lld]: K=%lld is not a multiple of %d (W%dA8 storage)", nm, (long long)N,
                  (long long)K, (long long)K, d->bits == 6 ? 32 : 16, d->bits);
    QMM_RETURN_IF(!d->codes, QMM_ERR_INVALID_ARGUMENT, "weight %s: codes is NULL", nm);
    const int64_t want_codes = N * K / 8 * d->bits;
    QMM_RETURN_IF(d->codes_bytes != want_codes, QMM_ERR_INVALID_ARGUMENT,
                  "weight %s [%lld, %lld]: codes_bytes %lld (needs N*K*bits/8 = %lld at %d bits)", nm, (long long)N,
                  (long long)K, (long long)d->codes_bytes, (long long)want_codes, d->bits);
    const int gsz = d->group_size;
    QMM_RETURN_IF(gsz < 4 || (16 % gsz != 0 && gsz % 16 != 0) || K % gsz != 0 || (d->bits == 6 && gsz % 16 != 0),
                  QMM_ERR_INVALID_ARGUMENT,
                  "weight %s [%lld, %lld]: group_size %d (needs >= 4, dividing 16 or a multiple of 16%s, and "
                  "dividing K=%lld)", nm, (long long)N, (long long)K, gsz, d->bits == 6 ? "; 6 bits: a multiple of 16" : "",
                  (long long)K);
    QMM_RETURN_IF(!d->s_rel, QMM_ERR_INVALID_ARGUMENT, "weight %s: s_rel is NULL", nm);
    QMM_RETURN_IF(d->s_rel_dtype != QMM_F8_E4M3 && d->s_rel_dtype != QMM_F32, QMM_ERR_INVALID_ARGUMENT,
                  "weight %s: s_rel dtype %s (needs f8_e4m3 or f32)", nm, qmm_dtype_name(d->s_rel_dtype));
    const int64_t groups = K / gsz;
    QMM_RETURN_IF(d->n_s_rel != N * groups, QMM_ERR_INVALID_ARGUMENT,
                  "weight %s [%lld, %lld]: %lld s_rel values (needs N*K/group_size = %lld)", nm, (long long)N,
                  (long long)K, (long long)d->n_s_rel, (long long)(N * groups));
    QMM_RETURN_IF((d->codebook != NULL) != (d->n_codebook != 0) || (d->codebook && d->n_codebook != 16),
                  QMM_ERR_INVALID_ARGUMENT, "weight %s: codebook %s with n_codebook %lld (needs 16 values, or NULL and 0)",
                  nm, d->codebook ? "given" : "NULL", (long long)d->n_codebook);
    QMM_RETURN_IF(d->codebook && d->bits == 6, QMM_ERR_INVALID_ARGUMENT,
                  "weight %s: codebook with 6-bit codes (6-bit storage is uniform: no codebook)", nm);
    QMM_RETURN_IF(!d->s_channel, QMM_ERR_INVALID_ARGUMENT, "weight %s: s_channel is NULL", nm);
    QMM_RETURN_IF(!valid_gs(d->convrot_gs), QMM_ERR_UNSUPPORTED,
                  "weight %s: convrot group size %d (needs 0 or a power of 4 from 4 to 65536)", nm, d->convrot_gs);
    QMM_RETURN_IF(d->convrot_gs && K % d->convrot_gs != 0, QMM_ERR_UNSUPPORTED,
                  "weight %s [%lld, %lld]: K=%lld is not a multiple of the convrot group %d", nm, (long long)N,
                  (long long)K, (long long)K, d->convrot_gs);
    QMM_RETURN_IF(d->bias && !qmm_dtype_is_float(d->bias_dtype), QMM_ERR_UNSUPPORTED,
                  "weight %s: bias dtype %s (needs f32, f16 or bf16)", nm, qmm_dtype_name(d->bias_dtype));
    return QMM_OK;
}

qmm_status qmm_weight_borrow_w4a8(qmm_context *ctx, const qmm_w4a8_desc *d, qmm_weight **out) {
    static const char fn[] = "qmm_weight_borrow_w4a8";
    (void)ctx;
    QMM_RETURN_IF(!out, QMM_ERR_INVALID_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    QMM_RETURN_IF(!d, QMM_ERR_INVALID_ARGUMENT, "%s: desc is NULL", fn);
    QMM_FORWARD_IF_ERROR(qmm_w4a8_desc_check(d));
    const char *nm = wname(d->name);
    const int64_t N = d->N, K = d->K, groups = K / d->group_size;
    const int gsz = d->group_size;
    /* the scales and the codebook, once: finite values only */
    int64_t bad = first_nonfinite_f32(d->s_channel, N);
    QMM_RETURN_IF(bad >= 0, QMM_ERR_INVALID_ARGUMENT, "weight %s: s_channel[%lld] is %s (needs finite scales)", nm,
                  (long long)bad, isnan(d->s_channel[bad]) ? "NaN" : "infinite");
    if (d->codebook) {
        bad = first_nonfinite_f32(d->codebook, 16);
        QMM_RETURN_IF(bad >= 0, QMM_ERR_INVALID_ARGUMENT, "weight %s: codebook[%lld] is %s (needs finite values)", nm,
                      (long long)bad, isnan(d->codebook[bad]) ? "NaN" : "infinite");
    }
    if (d->s_rel_dtype == QMM_F32) {
        bad = first_nonfinite_f32(d->s_rel, N * groups);
    } else {
        const uint8_t *b = d->s_rel;
        bad = -1;
        for (int64_t i = 0; i < N * groups && bad < 0; i++)
            if ((b[i] & 0x7f) == 0x7f) bad = i;
    }
    QMM_RETURN_IF(bad >= 0, QMM_ERR_INVALID_ARGUMENT, "weight %s: s_rel[%lld][%lld] is %s (needs finite scales)", nm,
                  (long long)(bad / groups), (long long)(bad % groups),
                  d->s_rel_dtype == QMM_F32 && isinf(((const float *)d->s_rel)[bad]) ? "infinite" : "NaN");
    qmm_weight *w = NULL;
    QMM_FORWARD_IF_ERROR(weight_common(d->name, N, K, 0, 1, NULL, d->bias_dtype, &w));
    w->is_int8 = 1;
    w->convrot_gs = d->convrot_gs;
    w->full_precision = d->full_precision != 0;
    w->i8.Np = qmm_round_up(N, 16);
    w->i8.Kp = qmm_round_up(K, 64);
    w->borrowed = 1;
    w->borrow.ld = K;
    w->borrow.scale = d->s_channel;
    w->borrow.n_scale = N;
    w->borrow.bias = d->bias;
    w->borrow.bias_dtype = d->bias_dtype;
    w->w4a8 = 1;
    w->w4.codes = d->codes;
    w->w4.row_bytes = K / 8 * d->bits;
    w->w4.bits = d->bits;
    w->w4.s_rel = d->s_rel;
    w->w4.s_rel_dtype = d->s_rel_dtype;
    w->w4.group = gsz;
    w->w4.codebook = d->codebook;
    *out = w;
    return QMM_OK;
}

qmm_status qmm_weight_create_float(qmm_context *ctx, const char *name, const void *wdata, qmm_dtype wt,
                                   int64_t N, int64_t K, int64_t ld, const void *bias, qmm_dtype bias_dtype,
                                   qmm_weight **out) {
    (void)ctx;
    QMM_RETURN_IF(!out, QMM_ERR_INVALID_ARGUMENT, "qmm_weight_create_float: out is NULL");
    *out = NULL;
    const char *nm = wname(name);
    QMM_RETURN_IF(!wdata, QMM_ERR_INVALID_ARGUMENT, "weight %s: data is NULL", nm);
    QMM_RETURN_IF(!qmm_dtype_is_float(wt), QMM_ERR_UNSUPPORTED, "weight %s: dtype %s (float weights are f32, f16 or bf16)",
                  nm, qmm_dtype_name(wt));
    qmm_weight *w;
    QMM_FORWARD_IF_ERROR(weight_common(name, N, K, ld, qmm_dtype_size(wt), bias, bias_dtype, &w));
    if (!ld) ld = K;
    w->is_int8 = 0;
    w->fdtype = wt == QMM_BF16 ? QMM_BF16 : QMM_F32;
    qmm_packed_f *fp = &w->fp;
    fp->Np = qmm_round_up(N, 16);
    fp->Kp = w->fdtype == QMM_BF16 ? qmm_round_up(K, 32) : K;
    size_t es = qmm_dtype_size(w->fdtype), bytes;
    if (!qmm_mul_ok((size_t)fp->Np * (size_t)fp->Kp, es, &bytes)) bytes = SIZE_MAX;
    void *buf = qmm_aligned_alloc(bytes);
    if (!buf) {
        qmm_weight_destroy(w);
        return qmm_fail(QMM_ERR_OUT_OF_MEMORY, "weight %s [%lld, %lld]: cannot allocate %zu bytes", nm,
                        (long long)N, (long long)K, bytes);
    }
    memset(buf, 0, bytes);
    if (w->fdtype == QMM_BF16) {
        fp->bf16 = buf;
        const uint16_t *src = wdata;
        for (int64_t n = 0; n < N; n++)
            for (int64_t k = 0; k < K; k++)
                fp->bf16[((n / 16) * (fp->Kp / 2) + k / 2) * 32 + (n % 16) * 2 + k % 2] = src[n * ld + k];
    } else {
        fp->f32 = buf;
        for (int64_t n = 0; n < N; n++)
            for (int64_t k = 0; k < K; k++)
                fp->f32[((n / 16) * fp->Kp + k) * 16 + n % 16] = qmm_load_f(wdata, wt, n * ld + k);
    }
    *out = w;
    return QMM_OK;
}

qmm_status qmm_weight_int8_rows(const qmm_weight *w, int64_t n0, int64_t rows, int8_t *out, int64_t ldo) {
    QMM_RETURN_IF(!w || !out, QMM_ERR_INVALID_ARGUMENT, "qmm_weight_int8_rows: %s is NULL", !w ? "w" : "out");
    QMM_RETURN_IF(!w->is_int8, QMM_ERR_INVALID_ARGUMENT, "qmm_weight_int8_rows: weight %s is a float weight", w->name);
    QMM_RETURN_IF(n0 < 0 || rows < 0 || n0 > w->N || rows > w->N - n0, QMM_ERR_INVALID_ARGUMENT,
                  "qmm_weight_int8_rows: rows [%lld, %lld + %lld) outside weight %s's N=%lld", (long long)n0,
                  (long long)n0, (long long)rows, w->name, (long long)w->N);
    if (!ldo) ldo = w->K;
    QMM_RETURN_IF(ldo < w->K, QMM_ERR_INVALID_ARGUMENT, "qmm_weight_int8_rows: ldo %lld < K=%lld", (long long)ldo,
                  (long long)w->K);
    for (int64_t i = 0; i < rows; i++) {
        if (w->w4a8) qmm_w4a8_decode_row(w, n0 + i, 0, w->K, out + i * ldo);
        else
            for (int64_t k = 0; k < w->K; k++) out[i * ldo + k] = qmm_weight_i8_at(w, n0 + i, k);
    }
    return QMM_OK;
}

void qmm_weight_get_info(const qmm_weight *w, qmm_weight_info *o) {
    if (!o) return;
    memset(o, 0, sizeof *o);
    if (!w) return;
    o->name = w->name;
    o->N = w->N;
    o->K = w->K;
    o->is_int8 = w->is_int8;
    o->dtype = w->is_int8 ? QMM_I8 : w->fdtype;
    o->convrot_gs = w->convrot_gs;
    o->per_tensor_scale = w->per_tensor_scale;
    o->has_bias = w->bias != NULL || w->borrow.bias != NULL;
    o->full_precision = w->full_precision;
    size_t b = 0;
    if (w->borrowed) b += w->adopted_bytes; /* the caller's memory, and what the weight adopted */
    else if (w->is_int8) b += (size_t)(w->i8.Np * w->i8.Kp) + (size_t)w->i8.Np * 4 + (size_t)w->N * 4;
    else b += (size_t)(w->fp.Np * w->fp.Kp) * qmm_dtype_size(w->fdtype);
    if (w->bias) b += (size_t)w->N * 4;
    o->packed_bytes = b;
    if (w->w4a8) {
        o->code_bits = w->w4.bits;
        o->group_size = w->w4.group;
        o->has_codebook = w->w4.codebook != NULL;
    }
}

/* ---------------------------------------------------------------- SPEC §2 */
static int auto_gs(int64_t K) { return K % 256 == 0 ? 256 : K % 64 == 0 ? 64 : K % 16 == 0 ? 16 : 0; }

/* max |w[off + k]|, k < K */
static float row_amax(const void *w, qmm_dtype wt, int64_t off, int64_t K) {
    float m = 0.0f;
    for (int64_t k = 0; k < K; k++) {
        float v = fabsf(qmm_load_f(w, wt, off + k));
        if (v > m) m = v;
    }
    return m;
}

qmm_status qmm_quantize_weight(const void *w, qmm_dtype wt, int64_t N, int64_t K, int64_t ld,
                               const qmm_quant_options *opt, int8_t *wq, float *scales, int *gs_used) {
    QMM_RETURN_IF(!w || !wq || !scales, QMM_ERR_INVALID_ARGUMENT, "qmm_quantize_weight: %s is NULL",
                  !w ? "w" : !wq ? "wq" : "scales");
    QMM_RETURN_IF(!qmm_dtype_is_float(wt), QMM_ERR_UNSUPPORTED, "qmm_quantize_weight: dtype %s (needs f32, f16 or bf16)",
                  qmm_dtype_name(wt));
    QMM_FORWARD_IF_ERROR(check_shape("(qmm_quantize_weight)", N, K, ld, qmm_dtype_size(wt)));
    if (!ld) ld = K;
    int gs = opt ? opt->convrot_gs : 0;
    int per_tensor = opt ? opt->per_tensor : 0;
    if (gs < 0) {
        gs = auto_gs(K);
    } else {
        QMM_RETURN_IF(!valid_gs(gs), QMM_ERR_UNSUPPORTED, "qmm_quantize_weight: convrot group %d (needs a power of 4 from 4 to 65536)", gs);
        QMM_RETURN_IF(gs && K % gs, QMM_ERR_UNSUPPORTED,
                      "qmm_quantize_weight: K=%lld is not a multiple of the convrot group %d", (long long)K, gs);
    }
    float *row = malloc((size_t)K * sizeof(float));
    QMM_RETURN_IF(!row, QMM_ERR_OUT_OF_MEMORY, "qmm_quantize_weight: out of memory");
    /* pass 0: finite weights only; rows whose largest |w| reaches 2^100 are rotated scaled down by
     * 2^-64 (exact) and their scale scaled back up — the rotation's sums reach g·|w| and would
     * overflow near FLT_MAX. Per tensor, the whole matrix when its largest |w| does. Other rows
     * take the plain path, bit for bit (× 1.0f). */
    float rawmax = 0.0f;
    for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < K; k++) {
            float v = qmm_load_f(w, wt, n * ld + k);
            if (!isfinite(v)) {
                free(row);
                return qmm_fail(QMM_ERR_UNSUPPORTED, "qmm_quantize_weight: row %lld holds %s at column %lld (needs finite weights)",
                                (long long)n, v != v ? "NaN" : v > 0 ? "+Inf" : "-Inf", (long long)k);
            }
            if (fabsf(v) > rawmax) rawmax = fabsf(v);
        }
    const float big = 0x1p100f, down = 0x1p-64f, up = 0x1p64f;
    /* the factor of row n: 2^-64 when that row (per tensor: the matrix) reaches 2^100, else 1 */
#define ROW_FACTOR(n) (per_tensor ? (rawmax >= big ? down : 1.0f) : (row_amax(w, wt, (n) * ld, K) >= big ? down : 1.0f))
    /* pass 1: rotated amax per row (and the global one) */
    float gmax = 0.0f;
    for (int64_t n = 0; n < N; n++) {
        const float f = ROW_FACTOR(n);
        for (int64_t k = 0; k < K; k++) row[k] = qmm_load_f(w, wt, n * ld + k) * f;
        if (gs) qmm_rotate_f32(row, K, gs);
        float m = qmm_amax_f32(row, K);
        if (!per_tensor) scales[n] = qmm_scale_of(m);
        if (m != m || m > gmax) gmax = m;
    }
    if (per_tensor) scales[0] = qmm_scale_of(gmax);
    /* pass 2: quantize (division in fp32, symmetric [-127, 127], NaN → 0) */
    for (int64_t n = 0; n < N; n++) {
        const float f = ROW_FACTOR(n);
        for (int64_t k = 0; k < K; k++) row[k] = qmm_load_f(w, wt, n * ld + k) * f;
        if (gs) qmm_rotate_f32(row, K, gs);
        float s = scales[per_tensor ? 0 : n];
        for (int64_t k = 0; k < K; k++) {
            float v = row[k] / s;
            if (v != v) v = 0.0f;
            v = rintf(v);
            v = v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v;
            wq[n * K + k] = (int8_t)v;
        }
    }
    /* the scaled-down rows' scales back to the weights' range */
    if (per_tensor) {
        if (rawmax >= big) scales[0] *= up;
    } else {
        for (int64_t n = 0; n < N; n++)
            if (row_amax(w, wt, n * ld, K) >= big) scales[n] *= up;
    }
#undef ROW_FACTOR
    free(row);
    if (gs_used) *gs_used = gs;
    return QMM_OK;
}

qmm_status qmm_dequantize_weight(const int8_t *wq, int64_t N, int64_t K, const float *scales, int64_t n_scale,
                                 int gs, float *out) {
    QMM_RETURN_IF(!wq || !scales || !out, QMM_ERR_INVALID_ARGUMENT, "qmm_dequantize_weight: %s is NULL",
                  !wq ? "wq" : !scales ? "scales" : "out");
    QMM_FORWARD_IF_ERROR(check_shape("(qmm_dequantize_weight)", N, K, 0, sizeof(float)));
    QMM_RETURN_IF(n_scale != 1 && n_scale != N, QMM_ERR_INVALID_ARGUMENT,
                  "qmm_dequantize_weight: %lld scales for N=%lld", (long long)n_scale, (long long)N);
    QMM_RETURN_IF(!valid_gs(gs) || (gs && K % gs), QMM_ERR_UNSUPPORTED,
                  "qmm_dequantize_weight: convrot group %d with K=%lld", gs, (long long)K);
    for (int64_t n = 0; n < N; n++) {
        float s = scales[n_scale == 1 ? 0 : n];
        for (int64_t k = 0; k < K; k++) out[n * K + k] = (float)wq[n * K + k] * s;
        if (gs) qmm_rotate_f32(out + n * K, K, gs);
    }
    return QMM_OK;
}

qmm_status qmm_weight_quantize(qmm_context *ctx, const char *name, const void *wf, qmm_dtype wt, int64_t N,
                               int64_t K, int64_t ld, const qmm_quant_options *opt, const void *bias,
                               qmm_dtype bias_dtype, qmm_weight **out) {
    QMM_RETURN_IF(!out, QMM_ERR_INVALID_ARGUMENT, "qmm_weight_quantize: out is NULL");
    *out = NULL;
    QMM_RETURN_IF(!wf, QMM_ERR_INVALID_ARGUMENT, "weight %s: w is NULL", wname(name));
    QMM_RETURN_IF(!qmm_dtype_is_float(wt), QMM_ERR_UNSUPPORTED, "weight %s: dtype %s (needs f32, f16 or bf16)", wname(name),
                  qmm_dtype_name(wt));
    QMM_FORWARD_IF_ERROR(check_shape(wname(name), N, K, ld, qmm_dtype_size(wt)));
    size_t bytes;
    QMM_RETURN_IF(!qmm_mul_ok((size_t)N, (size_t)K, &bytes), QMM_ERR_UNSUPPORTED, "weight %s: too large", wname(name));
    int8_t *wq = malloc(bytes);
    float *sc = malloc((size_t)N * sizeof(float));
    if (!wq || !sc) {
        free(wq);
        free(sc);
        return qmm_fail(QMM_ERR_OUT_OF_MEMORY, "weight %s: out of memory", wname(name));
    }
    int gs = 0;
    qmm_status st = qmm_quantize_weight(wf, wt, N, K, ld, opt, wq, sc, &gs);
    if (st == QMM_OK) {
        qmm_weight_desc d = {.name = name, .N = N, .K = K, .data = wq, .scale = sc,
                             .n_scale = opt && opt->per_tensor ? 1 : N, .bias = bias, .bias_dtype = bias_dtype,
                             .convrot_gs = gs};
        st = qmm_weight_create_int8(ctx, &d, out);
    }
    free(wq);
    free(sc);
    return st;
}
