/*
 * dispatch.h — the plan (SPEC §4), one walk for every operation. The API calls (api/op.c's
 * skeleton for qmm_linear and qmm_attention; qmm_plan, qmm_attention_plan) ask dispatch which
 * engine runs a call; dispatch walks the engine table (base/engines.c, qmm_internal.h)
 * best-first, asks each engine's availability (base/engines.c) and the admit() of its row for
 * the operation (beside its kernel), and returns the choice (cached per call class where the
 * operation has one) or the whole plan. An operation is a qmm_op_class (below). Below dispatch,
 * base, core and the engines never include it (tests/layers.py).
 */
#ifndef QMM_DISPATCH_H
#define QMM_DISPATCH_H

#include "qmm_internal.h"

/* An operation (qmm_op) as dispatch and the API run it: one const qmm_op_class per operation,
 * defined by its API file (api/linear.c, api/attention.c), which also validates the call and
 * builds it. The call is that operation's own struct (linear: qmm_call; attention:
 * qmm_attn_call); every engine's verdict and work for it is its row e->ops->op[op]
 * (qmm_internal.h). The first part is dispatch's, the rest the API skeleton's (api/op.h). */
typedef struct qmm_op_class {
    qmm_op op;
    /* Are float engines a fallback for this call — chosen only when no int8 engine admits it,
     * counted, refused in strict mode (the linear: an int8 weight, run W8A16; attention: mode
     * int8)? Else they are the call's own engines. */
    int (*float_fallback)(const void *call);
    /* Tells the call whether the engine it is about to be asked about or run on takes it as a
     * fallback (the linear's c->fallback, which its float engines read); NULL if it keeps none. */
    void (*set_fallback)(void *call, int fallback);
    /* AUTO's choice cached per call class: the cache (on the weight) and *key, the call class
     * in the bits outside QMM_PLAN_CHOICE_MASK (bit 63 set: a full slot); NULL (the hook, or its
     * result for a call of no class) when the choice is not cached. The class holds all that the
     * engines' admits and usability read that the cache's owner does not fix. */
    qmm_plan_cache *(*cache_key)(const qmm_context *ctx, const void *call, uint64_t *key);
    /* --- the API skeleton's (api/op.c, qmm_op_call) */
    /* The subject of the call's messages into buf[n]: "layer NAME [N, K] M=M", "attention B=.. D=..". */
    void (*subject)(const void *call, char *buf, size_t n);
    const char *fallback_from;   /* after the subject, what a fallback leaves: "" (linear), ", mode int8" */
    const char *fallback_runs;   /* how it runs instead: "W8A16", "mode best" */
    /* With the dispatch log on, is this fallback logged? NULL: every one; the linear: once per weight. */
    int (*log_fallback)(void *call);
    /* The name the dispatch log gives engine e's work: NULL, the engine's; attention: its ukernels'. */
    const char *(*work_name)(const qmm_engine *e);
    /* Runs an admitted call on engine e: the operation's set-up, its core driver on desc (the
     * row's final descriptor for the call, qmm_op_finalize; or the row's own run), what
     * follows; an error names the call. */
    qmm_status (*run)(qmm_context *ctx, const qmm_engine *e, const void *desc, void *call);
} qmm_op_class;

/* A plan cache word: bits 39..44 the chosen engine id and whether it is a fallback, bit 63 full;
 * the other bits are the operation's call class (qmm_op_class.cache_key). Its slot also keys the
 * thread count and holds the final descriptor (qmm_plan_slot). */
#define QMM_PLAN_CHOICE_MASK ((uint64_t)0x3f << 39)
#define QMM_PLAN_SLOT_FULL ((uint64_t)1 << 63)

/* Engine e's verdict on call c for operation op: NULL if its row admits it, else the reason
 * (written into why[0..n) or static; "offers no <op>" for an engine without the row). fallback:
 * e runs c as a fallback (op->set_fallback is told). */
const char *qmm_plan_admit(const qmm_op_class *op, const qmm_engine *e, void *call, int fallback, char *why, size_t n);

/* Walks the table for call c (SPEC §4): every int8 engine, then every float engine; fills p with
 * the first usable engine that admits, each engine's admission and reason, the name of its final
 * descriptor for c on ctx's threads (p->regime, qmm_op_finalize), and the status the call would
 * return (NO_ENGINE, FALLBACK_REFUSED in strict mode, OK). The call is left told p->is_fallback
 * (op->set_fallback). */
void qmm_plan_op(const qmm_context *ctx, const qmm_op_class *op, void *call, qmm_plan_info *p);

/* The engine AUTO dispatch runs call c on, for ctx — the choice of qmm_plan_op without its
 * reasons: the first engine of ctx->usable_engines whose row admits c, int8 engines first, then
 * float ones; QMM_ENGINE_AUTO if none; *fallback (and the call, op->set_fallback) told whether it
 * is a fallback; *fin the chosen row's final descriptor for c on ctx->n_threads threads
 * (qmm_op_finalize; unset for AUTO). Both cached per call class and thread count where the
 * operation has a class (op->cache_key: the linear's, on the weight), so a repeated call costs
 * one lookup: one decision serves the run, the log and the plan. */
qmm_engine_id qmm_plan_choose(const qmm_context *ctx, const qmm_op_class *op, void *call, int *fallback,
                              qmm_final *fin);

/* "amx_int8, amx_bf16: no AMX; avx512_vnni: ..." for the refusing engines (of one kind when
 * int8_only): engines with the same reason are listed together so that a reason shared by all
 * (an ISA cap, say) is written once. buf holds QMM_REASONS_TEXT_MAX bytes: every engine's name and
 * its own reason always fit, so the message never loses its end. */
#define QMM_REASONS_TEXT_MAX (QMM_ENGINE_TABLE_LEN * (QMM_REASON_MAX + 32))
void qmm_plan_reasons_text(const qmm_plan_info *p, int int8_only, char buf[QMM_REASONS_TEXT_MAX]);

#endif /* QMM_DISPATCH_H */
