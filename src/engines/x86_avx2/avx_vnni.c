/* avx_vnni.c — placeholder until the avx_vnni engine lands: it refuses every call, so dispatch skips it. */
#include "qmm_internal.h"

static const char *admit(const qmm_call *c, char *why, size_t n) {
    (void)c; (void)why; (void)n;
    return "not implemented yet";
}
static qmm_status run(qmm_context *ctx, const qmm_call *c) {
    (void)ctx;
    return qmm_fail(QMM_ERR_INTERNAL, "layer %s: engine avx_vnni is not implemented", c->w->name);
}
const qmm_engine qmm_engine_avx_vnni = {
    .id = QMM_ENGINE_AVX_VNNI, .name = "avx_vnni", .kind = QMM_KIND_INT8, .isa = QMM_ISA_AVX_VNNI, .cpu_features = QMM_CPU_AVX2 | QMM_CPU_AVX_VNNI, .built = 1,
    .admit = admit, .pack = NULL, .run = run,
};
