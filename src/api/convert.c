/*
 * convert.c — qmm_convert: elements between f32, f16 and bf16, by the conversions of numerics.h.
 */
#include "numerics.h"
#include "qmm_internal.h"

qmm_status qmm_convert(const void *src, qmm_dtype src_dtype, void *dst, qmm_dtype dst_dtype, int64_t n) {
    QMM_RETURN_IF(!src || !dst, QMM_ERR_INVALID_ARGUMENT, "qmm_convert: %s is NULL", !src ? "src" : "dst");
    QMM_RETURN_IF(n < 0, QMM_ERR_INVALID_ARGUMENT, "qmm_convert: n=%lld", (long long)n);
    QMM_RETURN_IF(!qmm_dtype_is_float(src_dtype) || !qmm_dtype_is_float(dst_dtype), QMM_ERR_UNSUPPORTED,
                  "qmm_convert: %s to %s (needs f32, f16 or bf16)", qmm_dtype_name(src_dtype), qmm_dtype_name(dst_dtype));
    for (int64_t i = 0; i < n; i++) qmm_store_f(dst, dst_dtype, i, qmm_load_f(src, src_dtype, i));
    return QMM_OK;
}
