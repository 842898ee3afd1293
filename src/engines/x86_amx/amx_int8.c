/* amx_int8.c — placeholder until the amx_int8 engine lands: it refuses every call, so dispatch skips it. */
#include "qmm_internal.h"

static const char *admit(const qmm_call *c, char *why, size_t n) {
    (void)c; (void)why; (void)n;
    return "not implemented yet";
}
static qmm_status run(qmm_context *ctx, const qmm_call *c) {
    (void)ctx;
    return qmm_fail(QMM_ERR_INTERNAL, "layer %s: engine amx_int8 is not implemented", c->w->name);
}
const qmm_engine qmm_engine_amx_int8 = {
    .id = QMM_ENGINE_AMX_INT8, .name = "amx_int8", .kind = QMM_KIND_INT8, .isa = QMM_ISA_AMX, .cpu_features = QMM_CPU_AMX_TILE | QMM_CPU_AMX_INT8 | QMM_CPU_AMX_PERMITTED, .built = 1,
    .admit = admit, .pack = NULL, .run = run,
};
