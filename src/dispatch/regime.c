/*
 * regime.c — what an engine tells about how it runs a call beyond being chosen, for `qmm bench`
 * and logs: amx_int8's regime (decode, panel or blocked: whole K or the int8 driver's K chunks)
 * by the very rule it uses (engines/x86_amx/amx_blocking.h: plain C, no tile instructions, so it
 * runs on any CPU) and the AMX blocking in force (QMM_AMX_BLOCKING applied as the engines apply
 * it; amx_bf16, under the float GEMM driver, reads its kc and nc). Engines with one regime tell
 * no regime.
 */
#include "../engines/x86_amx/amx_blocking.h"
#include "qmm_internal.h"

#include <stdio.h>
#include <stdlib.h>

/* The AMX blocking as the engines read it: the defaults, QMM_AMX_BLOCKING applied when valid.
 * Returns 0, or -1 when QMM_AMX_BLOCKING is set and invalid (the engines then keep the defaults). */
static int amx_blocking(qmm_amx_blocking *b) {
    *b = qmm_amx_blocking_default();
    return qmm_amx_blocking_parse(getenv("QMM_AMX_BLOCKING"), b);
}

const char *qmm_engine_regime(qmm_engine_id e, const qmm_weight *w, int64_t M) {
    if (!w || M < 1 || e != QMM_ENGINE_AMX_INT8) return "";
    qmm_amx_blocking b;
    (void)amx_blocking(&b);
    /* bytes of the A operand: M × Kp (64-padded) */
    const int64_t Ka = w->is_int8 ? w->i8.Kp : qmm_round_up(w->K, 64);
    if (M > INT64_MAX / Ka) return qmm_amx_regime_name(QMM_AMX_BLOCKED);
    return qmm_amx_regime_name(qmm_amx_regime_of(&b, M, M * Ka));
}

qmm_status qmm_engine_tuning(qmm_engine_id e, char *buf, size_t size) {
    QMM_RETURN_IF(!buf && size, QMM_ERR_INVALID_ARGUMENT, "qmm_engine_tuning: buf is NULL");
    if (size) buf[0] = 0;
    if (e != QMM_ENGINE_AMX_INT8 && e != QMM_ENGINE_AMX_BF16) return QMM_OK;
    qmm_amx_blocking b;
    const int bad = amx_blocking(&b);
    if (size)
        snprintf(buf, size, "kc=%lld,nc=%lld,mc=%lld,small_m=%lld,panel_a=%lld,min_m=%lld", (long long)b.kc,
                 (long long)b.nc, (long long)b.mc, (long long)b.small_m, (long long)b.panel_a, (long long)b.min_m);
    QMM_RETURN_IF(bad, QMM_ERR_INVALID_ARGUMENT,
                  "QMM_AMX_BLOCKING='%s' is not valid (keys kc, nc, mc, small_m, panel_a, min_m): the AMX engines use "
                  "their defaults", getenv("QMM_AMX_BLOCKING"));
    return QMM_OK;
}
