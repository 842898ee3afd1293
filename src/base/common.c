/*
 * common.c — version, status/dtype/act names, the per-thread last-error message, aligned memory
 * and dispatch logging.
 */
#include "qmm_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

unsigned qmm_version_number(void) { return QMM_VERSION_NUMBER; }
#define QMM_STR_(x) #x
#define QMM_STR(x) QMM_STR_(x)
const char *qmm_version_string(void) {
    return QMM_STR(QMM_VERSION_MAJOR) "." QMM_STR(QMM_VERSION_MINOR) "." QMM_STR(QMM_VERSION_PATCH);
}

const char *qmm_status_name(qmm_status s) {
    static const char *const names[QMM_STATUS_COUNT] = {
        "QMM_OK", "QMM_ERR_INVALID_ARGUMENT", "QMM_ERR_UNSUPPORTED", "QMM_ERR_NO_ENGINE",
        "QMM_ERR_FALLBACK_REFUSED", "QMM_ERR_UNSUPPORTED_HARDWARE", "QMM_ERR_OUT_OF_MEMORY",
        "QMM_ERR_IO", "QMM_ERR_FORMAT", "QMM_ERR_NOT_FOUND", "QMM_ERR_DIST", "QMM_ERR_INTERNAL",
        "QMM_ERR_CANCELLED"};
    if ((unsigned)s >= QMM_STATUS_COUNT) return "QMM_ERR_UNKNOWN";
    return names[s];
}

const char *qmm_dtype_name(qmm_dtype t) {
    static const char *const names[QMM_DTYPE_COUNT] = {"f32", "f16", "bf16", "i8", "u8", "i32", "f8_e4m3"};
    if ((unsigned)t >= QMM_DTYPE_COUNT) return "unknown";
    return names[t];
}

size_t qmm_dtype_size(qmm_dtype t) {
    static const size_t sizes[QMM_DTYPE_COUNT] = {4, 2, 2, 1, 1, 4, 1};
    if ((unsigned)t >= QMM_DTYPE_COUNT) return 0;
    return sizes[t];
}

const char *qmm_act_name(qmm_act a) {
    switch (a) {
    case QMM_ACT_NONE: return "none";
    case QMM_ACT_SWIGLU: return "swiglu";
    case QMM_ACT_GELU_TANH: return "gelu_tanh";
    case QMM_ACT_RMS_NORM: return "rms_norm";
    case QMM_ACT_SITU: return "situ";
    case QMM_ACT_COUNT: break;
    }
    return "unknown";
}

const char *qmm_op_name(qmm_op op) {
    switch (op) {
    case QMM_OP_LINEAR: return "linear";
    case QMM_OP_ATTENTION: return "attention";
    case QMM_OP_COUNT: break;
    }
    return "unknown";
}

qmm_act qmm_act_from_name(const char *name) {
    for (int a = 0; name && a < QMM_ACT_COUNT; a++)
        if (strcmp(name, qmm_act_name((qmm_act)a)) == 0) return (qmm_act)a;
    return QMM_ACT_COUNT;
}

static _Thread_local char g_last_error[QMM_ERROR_MAX];

qmm_status qmm_fail(qmm_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_last_error, sizeof g_last_error, fmt, ap);
    va_end(ap);
    return st;
}
void qmm_clear_error(void) { g_last_error[0] = 0; }
const char *qmm_last_error(void) { return g_last_error; }

/* 64-byte aligned; from 4 KiB up, page aligned, so that a 1 KiB AMX tile or a 4 KiB block of
 * tile-contiguous partials (int8_gemm.h c_tiles) at a 1 KiB / 4 KiB offset lies in one page
 * (the traffic audit of tests/test_amx_emulated.c counts the pages per tile load). */
void *qmm_aligned_alloc(size_t bytes) {
    if (bytes == 0) bytes = 64;
    const size_t al = bytes >= 4096 ? 4096 : 64;
    if (bytes > SIZE_MAX - (al - 1)) return NULL;
    bytes = (bytes + al - 1) & ~(al - 1);
    return aligned_alloc(al, bytes);
}
void qmm_aligned_free(void *p) { free(p); }

void qmm_log(const qmm_context *ctx, const char *fmt, ...) {
    if (!ctx || !ctx->verbose) return;
    va_list ap;
    va_start(ap, fmt);
    fputs("qmm: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}
