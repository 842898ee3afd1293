/* avx512_f32.c — placeholder until the avx512_f32 engine lands: it refuses every call, so dispatch skips it. */
#include "qmm_internal.h"

static const char *admit(const qmm_call *c, char *why, size_t n) {
    (void)c; (void)why; (void)n;
    return "not implemented yet";
}
static qmm_status run(qmm_context *ctx, const qmm_call *c) {
    (void)ctx;
    return qmm_fail(QMM_ERR_INTERNAL, "layer %s: engine avx512_f32 is not implemented", c->w->name);
}
const qmm_engine qmm_engine_avx512_f32 = {
    .id = QMM_ENGINE_AVX512_F32, .name = "avx512_f32", .kind = QMM_KIND_FLOAT, .isa = QMM_ISA_AVX512, .cpu_features = QMM_CPU_AVX512F | QMM_CPU_AVX512BW | QMM_CPU_AVX512VL | QMM_CPU_AVX512DQ, .built = 1,
    .admit = admit, .pack = NULL, .run = run,
};
