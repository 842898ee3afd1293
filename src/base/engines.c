/*
 * engines.c — the ordered engine table (qmm_internal.h: best first, one row per engine), engine
 * and ISA names, availability on this machine (hardware, OS permission, build, ISA cap, disabled
 * set), the admission checks that all int8 or all float engines share, and the table's public
 * view (qmm_engine_count, qmm_engine_get_info; qmm_engine_regime through the linear row's
 * finalize, qmm_engine_tuning through the engine's hook), and a row's final descriptor for a call
 * (qmm_op_finalize). Each engine's own admit() lives beside its kernel and calls the common
 * check first.
 */
#include "qmm_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The engines' identities, one row each, best first. hw_verified: amx_int8 and amx_bf16 have run
 * only in the tile emulator (tests/test_amx_emulated); every other engine has run on CPUs with its
 * ISA (bench/NOTES.md); column hw. The CPU features an engine needs: */
#define F_AVX2 (QMM_CPU_AVX2 | QMM_CPU_FMA | QMM_CPU_F16C)
#define F_ZMM (QMM_CPU_AVX512F | QMM_CPU_AVX512BW | QMM_CPU_AVX512VL)
#define F_AVX512 (F_ZMM | QMM_CPU_AVX512DQ)
#define F_AMX (F_AVX512 | QMM_CPU_AMX_TILE | QMM_CPU_AMX_PERMITTED) /* the AMX engines' other code is AVX-512 */
const qmm_engine qmm_engine_table[QMM_ENGINE_TABLE_LEN] = {
    /* id                     name           kind            isa                  cpu features                 operands  peak instruction                   hw  ops */
    {QMM_ENGINE_AMX_INT8,    "amx_int8",    QMM_KIND_INT8,  QMM_ISA_AMX,         F_AMX | QMM_CPU_AMX_INT8,    QMM_I8,   "TDPBSSD",                         0, &qmm_amx_int8_ops},
    {QMM_ENGINE_AVX512_VNNI, "avx512_vnni", QMM_KIND_INT8,  QMM_ISA_AVX512_VNNI, F_ZMM | QMM_CPU_AVX512_VNNI, QMM_I8,   "VPDPBUSD zmm",                    1, &qmm_avx512_vnni_ops},
    {QMM_ENGINE_AVX_VNNI,    "avx_vnni",    QMM_KIND_INT8,  QMM_ISA_AVX_VNNI,    F_AVX2 | QMM_CPU_AVX_VNNI,   QMM_I8,   "VPDPBUSD ymm",                    1, &qmm_avx_vnni_ops},
    {QMM_ENGINE_AVX2_INT8,   "avx2_int8",   QMM_KIND_INT8,  QMM_ISA_AVX2,        F_AVX2,                      QMM_I8,   "VPSIGNB+VPMADDUBSW+VPMADDWD ymm", 1, &qmm_avx2_int8_ops},
    {QMM_ENGINE_AMX_BF16,    "amx_bf16",    QMM_KIND_FLOAT, QMM_ISA_AMX,         F_AMX | QMM_CPU_AMX_BF16,    QMM_BF16, "TDPBF16PS",                       0, &qmm_amx_bf16_ops},
    {QMM_ENGINE_AVX512_BF16, "avx512_bf16", QMM_KIND_FLOAT, QMM_ISA_AVX512_BF16, F_ZMM | QMM_CPU_AVX512_BF16, QMM_BF16, "VDPBF16PS zmm",                   1, &qmm_avx512_bf16_ops},
    {QMM_ENGINE_AVX512_F32,  "avx512_f32",  QMM_KIND_FLOAT, QMM_ISA_AVX512,      F_AVX512,                    QMM_F32,  "VFMADD zmm",                      1, &qmm_avx512_f32_ops},
    {QMM_ENGINE_AVX2_F32,    "avx2_f32",    QMM_KIND_FLOAT, QMM_ISA_AVX2,        QMM_CPU_AVX2 | QMM_CPU_FMA,  QMM_F32,  "VFMADD ymm",                      1, &qmm_avx2_f32_ops},
    {QMM_ENGINE_REF,         "ref",         QMM_KIND_REF,   QMM_ISA_NONE,        0,                           QMM_I8,   "-",                               1, &qmm_ref_ops}, /* float weights: F32 */
};

_Static_assert(QMM_ENGINE_COUNT <= QMM_ENGINE_MAX, "engine ids must stay below QMM_ENGINE_MAX (qmm.h)");

int qmm_engine_count(void) { return QMM_ENGINE_TABLE_LEN; }

qmm_status qmm_engine_get_info(int index, qmm_engine_info *out) {
    QMM_RETURN_IF(!out, QMM_ERR_INVALID_ARGUMENT, "qmm_engine_get_info: out is NULL");
    QMM_RETURN_IF(index < 0 || index >= QMM_ENGINE_TABLE_LEN, QMM_ERR_INVALID_ARGUMENT,
                  "qmm_engine_get_info: index %d (the library has %d engines)", index, QMM_ENGINE_TABLE_LEN);
    const qmm_engine *r = &qmm_engine_table[index];
    memset(out, 0, sizeof *out);
    out->id = r->id;
    out->name = r->name;
    out->kind = r->kind;
    out->isa = r->isa;
    out->cpu_features = r->cpu_features;
    out->operands = r->operands;
    out->peak_instruction = r->peak_insn;
    out->verified_on_hardware = r->hw_verified;
    out->built = r->ops->built;
    return QMM_OK;
}

const qmm_engine *qmm_engine_get(qmm_engine_id id) {
    for (int i = 0; i < QMM_ENGINE_TABLE_LEN; i++)
        if (qmm_engine_table[i].id == id) return &qmm_engine_table[i];
    return NULL;
}

const char *qmm_engine_name(qmm_engine_id e) {
    if (e == QMM_ENGINE_AUTO) return "auto";
    const qmm_engine *en = qmm_engine_get(e);
    return en ? en->name : "unknown";
}

qmm_engine_id qmm_engine_from_name(const char *name) {
    if (!name) return QMM_ENGINE_UNKNOWN;
    if (strcmp(name, "auto") == 0) return QMM_ENGINE_AUTO;
    for (int i = 0; i < QMM_ENGINE_TABLE_LEN; i++)
        if (strcmp(qmm_engine_table[i].name, name) == 0) return qmm_engine_table[i].id;
    return QMM_ENGINE_UNKNOWN;
}

qmm_final qmm_op_finalize(const qmm_op_row *row, const void *call, int n_threads) {
    if (row->finalize) return row->finalize(call, n_threads);
    return (qmm_final){row->desc, ""};
}

/* The name of the linear row's final descriptor for the class of M rows of w (one thread: no
 * engine's name depends on the thread count), as the plan names it. */
const char *qmm_engine_regime(qmm_engine_id e, const qmm_weight *w, int64_t M) {
    const qmm_engine *en = qmm_engine_get(e);
    if (!w || M < 1 || !en || !en->ops->op[QMM_OP_LINEAR].finalize) return "";
    const qmm_call c = {.w = w, .M = M, .N = w->N, .K = w->K, .K_in = w->K, .x_dtype = QMM_F32, .y_dtype = QMM_F32};
    const char *name = qmm_op_finalize(&en->ops->op[QMM_OP_LINEAR], &c, 1).name;
    return name ? name : "";
}

qmm_status qmm_engine_tuning(qmm_engine_id e, char *buf, size_t size) {
    QMM_RETURN_IF(!buf && size, QMM_ERR_INVALID_ARGUMENT, "qmm_engine_tuning: buf is NULL");
    if (size) buf[0] = 0;
    const qmm_engine *en = qmm_engine_get(e);
    return en && en->ops->tuning ? en->ops->tuning(buf, size) : QMM_OK;
}

int qmm_engine_probe_count(qmm_engine_id e) {
    const qmm_engine *en = qmm_engine_get(e);
    return en && en->ops->probe ? en->ops->n_probes : 0;
}

const char *qmm_engine_probe_name(qmm_engine_id e, int i) {
    const qmm_engine *en = qmm_engine_get(e);
    return en && en->ops->probe && i >= 0 && i < en->ops->n_probes ? en->ops->probe_names[i] : "";
}

qmm_status qmm_engine_probe(qmm_engine_id e, int i, int64_t reps, void (*ready)(void *), void *arg,
                            qmm_probe_result *r) {
    QMM_RETURN_IF(!r, QMM_ERR_INVALID_ARGUMENT, "qmm_engine_probe: r is NULL");
    memset(r, 0, sizeof *r);
    const qmm_engine *en = qmm_engine_get(e);
    QMM_RETURN_IF(!en || !en->ops->probe || i < 0 || i >= en->ops->n_probes || reps < 0, QMM_ERR_INVALID_ARGUMENT,
                  "qmm_engine_probe: engine %s has no probe %d (or reps < 0)", qmm_engine_name(e), i);
    char why[QMM_REASON_MAX];
    QMM_RETURN_IF(!qmm_engine_available(e, why, sizeof why), QMM_ERR_UNSUPPORTED_HARDWARE, "%s: %s",
                  qmm_engine_name(e), why);
    return en->ops->probe(i, reps, 0, ready, arg, r);
}

int qmm_engine_is_int8(qmm_engine_id e) {
    const qmm_engine *en = qmm_engine_get(e);
    return en && en->kind == QMM_KIND_INT8;
}

static const char *const g_isa_names[QMM_ISA_MAX + 1] = {
    "none", "avx2", "avx_vnni", "avx512", "avx512_vnni", "avx512_bf16", "amx"};

const char *qmm_isa_name(qmm_isa i) {
    if ((unsigned)i > QMM_ISA_MAX) return "unknown";
    return g_isa_names[i];
}

qmm_isa qmm_isa_from_name(const char *name) {
    if (!name) return (qmm_isa)-1;
    for (int i = 0; i <= QMM_ISA_MAX; i++)
        if (strcmp(g_isa_names[i], name) == 0) return (qmm_isa)i;
    return (qmm_isa)-1;
}

int qmm_engine_usable(const qmm_engine *e, int max_isa, uint32_t disabled, char *why, size_t n) {
    char tmp[QMM_REASON_MAX];
    if (!why) { why = tmp; n = sizeof tmp; }
    if (!e) { snprintf(why, n, "no such engine"); return 0; }
    if (e->kind == QMM_KIND_REF) return 1;
    if (!e->ops->built) { snprintf(why, n, "not built: the compiler lacks this ISA"); return 0; }
    uint32_t have = qmm_cpu_features();
    uint32_t missing = e->cpu_features & ~have;
    if (missing) {
        for (int b = 0; b < QMM_CPU_FEATURE_COUNT; b++) {
            if (!(missing & (1u << b))) continue;
            if ((1u << b) == QMM_CPU_AMX_PERMITTED && (have & QMM_CPU_AMX_TILE))
                snprintf(why, n, "no AMX: the OS refused tile permission (arch_prctl XTILEDATA)");
            else if ((e->cpu_features & QMM_CPU_AMX_TILE) && !(have & QMM_CPU_AMX_TILE))
                snprintf(why, n, "no AMX: CPU lacks %s", qmm_cpu_feature_name(1u << b));
            else
                snprintf(why, n, "CPU lacks %s", qmm_cpu_feature_name(1u << b));
            return 0;
        }
    }
    if (max_isa >= 0 && (int)e->isa > max_isa) {
        snprintf(why, n, "ISA capped at %s (QMM_MAX_ISA), engine needs %s", qmm_isa_name((qmm_isa)max_isa),
                 qmm_isa_name(e->isa));
        return 0;
    }
    if (disabled & (1u << e->id)) { snprintf(why, n, "disabled in this context"); return 0; }
    return 1;
}

uint32_t qmm_engines_usable(int max_isa, uint32_t disabled) {
    uint32_t m = 0;
    for (int i = 0; i < QMM_ENGINE_TABLE_LEN; i++) {
        const qmm_engine *e = &qmm_engine_table[i];
        if (qmm_engine_usable(e, max_isa, disabled, NULL, 0)) m |= 1u << e->id;
    }
    return m;
}

int qmm_env_max_isa(void) {
    const char *s = getenv("QMM_MAX_ISA");
    if (!s || !*s) return -1;
    qmm_isa i = qmm_isa_from_name(s);
    return (int)i >= 0 ? (int)i : -1;
}

int qmm_engine_available(qmm_engine_id e, char *why, size_t why_size) {
    if (why && why_size) why[0] = 0;
    if (e == QMM_ENGINE_AUTO) return 1;
    return qmm_engine_usable(qmm_engine_get(e), qmm_env_max_isa(), 0, why, why_size);
}

const char *qmm_admit_common_int8(const void *call, char *why, size_t n) {
    const qmm_call *c = call;
    const qmm_weight *w = c->w;
    if (!w->is_int8) return "float weight: int8 engines run int8 weights only";
    if (w->full_precision) return "layer asks for full precision (full_precision_matrix_mult)";
    if (!qmm_dtype_is_float(c->x_dtype)) {
        snprintf(why, n, "x dtype %s: needs f32, f16 or bf16", qmm_dtype_name(c->x_dtype));
        return why;
    }
    if (!qmm_dtype_is_float(c->y_dtype) && c->y_dtype != QMM_I32) {
        snprintf(why, n, "out dtype %s: needs f32, f16, bf16 or i32", qmm_dtype_name(c->y_dtype));
        return why;
    }
    if (w->convrot_gs && (w->K % w->convrot_gs) != 0) {
        snprintf(why, n, "K=%lld is not a multiple of the convrot group %d", (long long)w->K, w->convrot_gs);
        return why;
    }
    if (w->K > QMM_MAX_INT8_K) {
        snprintf(why, n, "K=%lld > %d: exact int32 accumulators could overflow (|q*w| <= 128*128 per k)",
                 (long long)w->K, QMM_MAX_INT8_K);
        return why;
    }
    return NULL;
}

const char *qmm_admit_common_float(const void *call, char *why, size_t n) {
    const qmm_call *c = call;
    if (!qmm_dtype_is_float(c->x_dtype)) {
        snprintf(why, n, "x dtype %s: needs f32, f16 or bf16", qmm_dtype_name(c->x_dtype));
        return why;
    }
    if (!qmm_dtype_is_float(c->y_dtype)) {
        snprintf(why, n, "out dtype %s: float engines write f32, f16 or bf16", qmm_dtype_name(c->y_dtype));
        return why;
    }
    if (c->token_scales_in) return "shared token scales (tensor parallel) need an int8 engine";
    return NULL;
}
