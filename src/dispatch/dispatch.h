/*
 * dispatch.h — the plan (SPEC §4). The API calls (api/linear.c: qmm_linear, qmm_plan) ask
 * dispatch which engine runs a call; dispatch walks the engine table (base/engines.c,
 * qmm_internal.h) best-first, asks each engine's availability (base/engines.c) and its admit()
 * (beside its kernel), and returns the choice (cached per call class) or the whole plan. Below
 * dispatch, base, core and the engines never include it (tests/layers.py).
 */
#ifndef QMM_DISPATCH_H
#define QMM_DISPATCH_H

#include "qmm_internal.h"

/* Walks the table for call c: every int8 engine, then every float engine (c->fallback set for an
 * int8 weight on a float engine); fills p with the first usable engine that admits, each engine's
 * admission and reason, and the status qmm_linear would return (NO_ENGINE, FALLBACK_REFUSED in
 * strict mode, OK). On return c->fallback is p->is_fallback. */
void qmm_plan_call(const qmm_context *ctx, qmm_call *c, qmm_plan_info *p);

/* The engine AUTO dispatch runs call c on, for ctx — the choice of qmm_plan_call without its
 * reasons: the first engine of ctx->usable_engines whose admit() admits c, int8 engines first,
 * then float ones; QMM_ENGINE_AUTO if none. Sets c->fallback. The choice is cached on the weight
 * per call class (M, x and y dtypes, token_scales_in given or not, the weight's has_neg128,
 * ctx->usable_engines: all that admit() and usability read that a weight does not fix), so a
 * repeated call costs one lookup. */
qmm_engine_id qmm_plan_choose(const qmm_context *ctx, qmm_call *c);

/* The same walk for an attention call (SPEC §10): the engines whose attn_admit admits c, best
 * first — int8 engines (mode int8 only), then float engines, which are a fallback for mode int8
 * and the choice for the other modes. _choose is the choice alone, *fallback set (not cached: an
 * attention call's verdicts read the whole call). */
void qmm_plan_attention(const qmm_context *ctx, const qmm_attn_call *c, qmm_plan_info *p);
qmm_engine_id qmm_plan_attention_choose(const qmm_context *ctx, const qmm_attn_call *c, int *fallback);

/* "amx_int8, amx_bf16: no AMX; avx512_vnni: ..." for the refusing engines (of one kind when
 * int8_only): engines with the same reason are listed together so that a reason shared by all
 * (an ISA cap, say) is written once. buf holds QMM_REASONS_TEXT_MAX bytes: every engine's name and
 * its own reason always fit, so the message never loses its end. */
#define QMM_REASONS_TEXT_MAX (QMM_ENGINE_TABLE_LEN * (QMM_REASON_MAX + 32))
void qmm_plan_reasons_text(const qmm_plan_info *p, int int8_only, char buf[QMM_REASONS_TEXT_MAX]);

#endif /* QMM_DISPATCH_H */
