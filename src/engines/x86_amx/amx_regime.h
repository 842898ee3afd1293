/*
 * amx_regime.h — the AMX engines' regime and tuning hooks (qmm_engine.regime, .tuning;
 * amx_regime.c, plain C: callable on any CPU).
 */
#ifndef QMM_AMX_REGIME_H
#define QMM_AMX_REGIME_H

#include "qmm_internal.h"

/* amx_int8's regime for w at M rows: "decode", "panel" or "blocked" (amx_blocking.h's rule). */
const char *qmm_amx_int8_regime(const qmm_weight *w, int64_t M);
/* The AMX blocking in force, "kc=..,nc=..,mc=..,small_m=..,panel_a=..,min_m=.."; an error when
 * QMM_AMX_BLOCKING is invalid (the engines then use the defaults, which buf shows). */
qmm_status qmm_amx_tuning(char *buf, size_t size);

#endif /* QMM_AMX_REGIME_H */
