/*
 * op.h — the API skeleton every operation's call runs through (op.c): the named engine or AUTO's
 * choice (dispatch.h), the fallback (same device, counted, refused in strict mode, logged with
 * QMM_VERBOSE=dispatch), the run (the operation's qmm_op_class.run), the counters of the
 * operation (qmm_counters.op[op]). An operation's API file keeps what is its own: validating the
 * arguments into its call, and its qmm_op_class (dispatch.h).
 */
#ifndef QMM_OP_H
#define QMM_OP_H

#include "dispatch.h"

/* Runs call on the engine named by `engine` (usable and admitting, else an error: unknown,
 * unavailable, refuses) or, for QMM_ENGINE_AUTO, on dispatch's choice (no engine admits it: the
 * error lists every engine's reason; a fallback: refused in strict mode, else logged and
 * counted); counts the call in ctx->counters.op[op->op] (calls by engine, fallbacks, errors) and
 * keeps its engine in ctx->last_engine. made: the status of validating the call; not QMM_OK, it
 * is counted as an error and returned, and call is not read. Every error's message begins with
 * the call's subject (op->subject). */
qmm_status qmm_op_call(qmm_context *ctx, const qmm_op_class *op, qmm_status made, void *call, qmm_engine_id engine);

/* A named engine's verdict on call, as qmm_op_call gives it: NULL if it runs the call, else the
 * reason (why holds QMM_REASON_MAX bytes) and *st the status the call would return
 * (UNSUPPORTED_HARDWARE: not usable here; UNSUPPORTED: its row refuses). */
const char *qmm_op_named_verdict(const qmm_context *ctx, const qmm_op_class *op, const qmm_engine *e, void *call,
                                 char *why, qmm_status *st);

#endif /* QMM_OP_H */
