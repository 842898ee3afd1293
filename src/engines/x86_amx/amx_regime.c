/*
 * amx_regime.c — what the AMX engines tell `qmm bench` and logs about a call beyond being chosen
 * (their qmm_engine's regime and tuning hooks, read by qmm_engine_regime and qmm_engine_tuning):
 * amx_int8's regime (decode, panel or blocked: whole K or the int8 driver's K chunks) by the very
 * rule it uses (amx_blocking.h) and the AMX blocking in force (QMM_AMX_BLOCKING applied as the
 * engines apply it; amx_bf16, under the float GEMM driver, reads its kc and nc). Plain C,
 * compiled without -m flags (QMM_FLAGS_PLAIN), so it runs on any CPU, AMX built or not.
 */
#include "amx_regime.h"

#include "amx_blocking.h"

#include <stdio.h>
#include <stdlib.h>

/* The AMX blocking as the engines read it: the defaults, QMM_AMX_BLOCKING applied when valid.
 * Returns 0, or -1 when QMM_AMX_BLOCKING is set and invalid (the engines then keep the defaults). */
static int amx_blocking(qmm_amx_blocking *b) {
    *b = qmm_amx_blocking_default();
    return qmm_amx_blocking_parse(getenv("QMM_AMX_BLOCKING"), b);
}

const char *qmm_amx_int8_regime(const qmm_weight *w, int64_t M) {
    qmm_amx_blocking b;
    (void)amx_blocking(&b);
    /* bytes of the A operand: M × Kp (64-padded) */
    const int64_t Ka = w->is_int8 ? w->i8.Kp : qmm_round_up(w->K, 64);
    if (M > INT64_MAX / Ka) return qmm_amx_regime_name(QMM_AMX_BLOCKED);
    return qmm_amx_regime_name(qmm_amx_regime_of(&b, M, M * Ka));
}

qmm_status qmm_amx_tuning(char *buf, size_t size) {
    qmm_amx_blocking b;
    const int bad = amx_blocking(&b);
    if (size)
        snprintf(buf, size, "kc=%lld,nc=%lld,mc=%lld,small_m=%lld,panel_a=%lld,min_m=%lld,borrowed_min_m=%lld",
                 (long long)b.kc, (long long)b.nc, (long long)b.mc, (long long)b.small_m, (long long)b.panel_a,
                 (long long)b.min_m, (long long)b.borrowed_min_m);
    QMM_RETURN_IF(bad, QMM_ERR_INVALID_ARGUMENT,
                  "QMM_AMX_BLOCKING='%s' is not valid (keys kc, nc, mc, small_m, panel_a, min_m, borrowed_min_m): the AMX engines use "
                  "their defaults", getenv("QMM_AMX_BLOCKING"));
    return QMM_OK;
}
