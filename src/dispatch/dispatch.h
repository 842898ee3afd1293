/*
 * dispatch.h — the ordered engine table and the plan (SPEC §4). The API calls (core/linear.c:
 * qmm_linear, qmm_plan) ask dispatch which engine runs a call; dispatch walks the table
 * best-first, asks each engine's availability (dispatch/engines.c) and its admit() (beside its
 * kernel), and returns the choice (cached per call class) or the whole plan. Below dispatch, the
 * engines and core's helpers (pre-pass, numerics, pool) never call back into it.
 *
 * The table (dispatch/engines.c) is the one list of engines: dispatch and the tests iterate it,
 * everything outside the library reads it through qmm_engine_count / qmm_engine_get_info (the
 * CLI, bench/, Python). One row per engine, best first: the int8
 * engines (AMX, AVX512-VNNI, AVX-VNNI, AVX2), then the float engines (the W8A16 fallback and float
 * weights), then the scalar reference (run only when asked for by name). Adding an engine: its
 * kernel file with its admit() and its `const qmm_engine` (qmm_internal.h), its flags in
 * CMakeLists.txt (QMM_ISA_SOURCES) and tests/isa/check_isa.sh, a QMM_ENGINE_* id (qmm.h), and one
 * row here.
 */
#ifndef QMM_DISPATCH_H
#define QMM_DISPATCH_H

#include "qmm_internal.h"

typedef struct qmm_engine_row {
    const qmm_engine *engine;  /* id, name, kind, ISA level, CPU features, admit(), run() */
    qmm_dtype operands;        /* what its multiply instructions take: I8, BF16 or F32 */
    const char *peak_insn;     /* its core instruction, as bench/peak.c times it for the peak */
    int hw_verified;           /* 1: its kernels have run on a CPU with its ISA; 0: only emulated */
} qmm_engine_row;

/* Every engine id except AUTO, once, best first. */
#define QMM_ENGINE_TABLE_LEN (QMM_ENGINE_COUNT - 1)
extern const qmm_engine_row qmm_engine_table[QMM_ENGINE_TABLE_LEN];
/* The row of an engine id; NULL for AUTO and unknown ids. */
const qmm_engine_row *qmm_engine_row_of(qmm_engine_id id);

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

/* The same walk for an attention call (SPEC §9): the engines whose attn_admit admits c, best
 * first (the int8 engines offer no attention; a float engine is no fallback there). _choose is
 * the choice alone (not cached: an attention call's verdicts read the whole call). */
void qmm_plan_attention(const qmm_context *ctx, const qmm_attn_call *c, qmm_plan_info *p);
qmm_engine_id qmm_plan_attention_choose(const qmm_context *ctx, const qmm_attn_call *c);

/* "amx_int8, amx_bf16: no AMX; avx512_vnni: ..." for the refusing engines (of one kind when
 * int8_only): engines with the same reason are listed together so that a reason shared by all
 * (an ISA cap, say) is written once. buf holds QMM_REASONS_TEXT_MAX bytes: every engine's name and
 * its own reason always fit, so the message never loses its end. */
#define QMM_REASONS_TEXT_MAX (QMM_ENGINE_TABLE_LEN * (QMM_REASON_MAX + 32))
void qmm_plan_reasons_text(const qmm_plan_info *p, int int8_only, char buf[QMM_REASONS_TEXT_MAX]);

#endif /* QMM_DISPATCH_H */
