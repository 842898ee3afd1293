/*
 * tp_load.c — a tensor-parallel layer's FULL weight description from a ComfyUI checkpoint
 * (qmm_io.h): the int8 [N, K] data, or a W4A8 layer's codes, stay a view into the file's mapping,
 * so the per-rank create (tp_linear.c) reads only that rank's rows or columns — only those pages
 * are touched. The scale (N or 1 fp32) and bias (N floats) are copied: they are small and the
 * file may leave them unaligned; a W4A8 layer's s_rel, s_channel, codebook and bias are copied
 * (and checked) by qmm_model_w4a8_desc.
 */
#include "qmm_io.h"
#include "tp_internal.h"

#include <stdlib.h>
#include <string.h>

void qmm_tp_desc_release(void *owned) { qmm_aligned_free(owned); } /* ours or qmm_model_w4a8_desc's block */

qmm_status qmm_tp_layer_from_model(const qmm_model *m, const char *layer, qmm_tp_layer *out, void **owned) {
    QMM_RETURN_IF(!m || !layer || !out || !owned, QMM_ERR_INVALID_ARGUMENT, "qmm_tp_layer_from_model: %s is NULL",
                  !m ? "model" : !layer ? "layer name" : !out ? "out" : "owned");
    *owned = NULL;
    memset(out, 0, sizeof *out);
    const qmm_layer_info *li = NULL;
    QMM_FORWARD_IF_ERROR(qmm_model_find(m, layer, &li));
    if (li->kind != QMM_LAYER_W4A8) {
        out->format = QMM_TP_INT8;
        return qmm_tp_desc_from_model(m, layer, &out->int8, owned);
    }
    QMM_RETURN_IF(li->full_precision, QMM_ERR_UNSUPPORTED,
                  "layer %s: full_precision_matrix_mult layers run on float engines, not split", layer);
    out->format = QMM_TP_W4A8;
    return qmm_model_w4a8_desc(m, layer, &out->w4a8, owned);
}

qmm_status qmm_tp_desc_from_model(const qmm_model *m, const char *layer, qmm_weight_desc *desc, void **owned) {
    QMM_RETURN_IF(!m || !layer || !desc || !owned, QMM_ERR_INVALID_ARGUMENT, "qmm_tp_desc_from_model: %s is NULL", !m ? "model" : !layer ? "layer name" : !desc ? "desc" : "owned");
    *owned = NULL;
    const qmm_layer_info *li = NULL;
    QMM_FORWARD_IF_ERROR(qmm_model_find(m, layer, &li));
    QMM_RETURN_IF(li->kind != QMM_LAYER_INT8, QMM_ERR_UNSUPPORTED,
                  "layer %s: %s; qmm_tp_desc_from_model gives int8_tensorwise layers (qmm_tp_layer_from_model: "
                  "W4A8 too)", layer,
                  li->kind == QMM_LAYER_FLOAT  ? "a float layer"
                  : li->kind == QMM_LAYER_W4A8 ? "a W4A8 layer (asym_w4a8_int8)"
                                               : "an unsupported quant format");
    QMM_RETURN_IF(li->full_precision, QMM_ERR_UNSUPPORTED,
                  "layer %s: full_precision_matrix_mult layers run on float engines, not split", layer);
    QMM_RETURN_IF(!li->weight || !li->weight_scale, QMM_ERR_FORMAT, "layer %s: weight or weight_scale missing", layer);
    const int64_t N = li->N, ns = li->n_scale;
    int bt = -1;
    if (li->bias) {
        bt = qmm_st_dtype_to_qmm(li->bias->dtype);
        QMM_RETURN_IF(bt != QMM_F32 && bt != QMM_F16 && bt != QMM_BF16, QMM_ERR_UNSUPPORTED,
                      "layer %s: bias dtype %s", layer, qmm_st_dtype_name(li->bias->dtype));
        QMM_RETURN_IF(li->bias->numel != N, QMM_ERR_FORMAT, "layer %s: bias has %lld values for N=%lld", layer,
                      (long long)li->bias->numel, (long long)N);
    }
    QMM_RETURN_IF(qmm_st_dtype_to_qmm(li->weight_scale->dtype) != QMM_F32 || li->weight_scale->numel != ns,
                  QMM_ERR_FORMAT, "layer %s: weight_scale is %s with %lld values (needs F32, %lld)", layer,
                  qmm_st_dtype_name(li->weight_scale->dtype), (long long)li->weight_scale->numel, (long long)ns);
    size_t bias_bytes = li->bias ? li->bias->nbytes : 0;
    char *buf = qmm_aligned_alloc((size_t)ns * sizeof(float) + bias_bytes + 1);
    QMM_RETURN_IF(!buf, QMM_ERR_OUT_OF_MEMORY, "layer %s: out of memory", layer);
    memcpy(buf, li->weight_scale->data, (size_t)ns * sizeof(float));
    if (bias_bytes) memcpy(buf + (size_t)ns * sizeof(float), li->bias->data, bias_bytes);
    *desc = qmm_weight_desc_default();
    desc->name = li->name;
    desc->N = N;
    desc->K = li->K;
    desc->data = li->weight->data;
    desc->ld = li->K;
    desc->scale = (const float *)(const void *)buf;
    desc->n_scale = ns;
    desc->bias = bias_bytes ? buf + (size_t)ns * sizeof(float) : NULL;
    desc->bias_dtype = bias_bytes ? (qmm_dtype)bt : QMM_F32;
    desc->convrot_gs = li->convrot_gs;
    *owned = buf;
    return QMM_OK;
}
