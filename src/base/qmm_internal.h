/*
 * qmm_internal.h — the engine interface, what every part of the library above base/ shares and
 * callers never see: the layout of a context and of a weight (the shared int8 packing), one
 * call's arguments (qmm_call), the engine (qmm_engine), the engine table and its usability and
 * the admission checks every engine shares (engines.c), the context's scratch (scratch.c). The
 * error helpers, memory, threads and logging below it: qmm_base.h.
 *
 * The packed int8 weight layout "n16k4" serves every int8 engine (and the W8A16 float
 * engines, which widen it in-kernel):
 *
 *     data[nb][kq][16][4]   nb = n / 16 (Np/16 blocks), kq = k / 4 (Kp/4 quads)
 *     W[n][k] = data[((n/16) * (Kp/4) + k/4) * 64 + (n%16) * 4 + k%4]
 *
 * Np = N rounded up to 16, Kp = K rounded up to 64; padding is zero. One 64-byte row holds,
 * for 4 consecutive k, 16 output channels: one zmm for VPDPBUSD, and 16 consecutive rows of
 * one block are exactly one AMX B tile (16 rows × 64 bytes, K = 64) for TDPBSSD.
 * colsum[n] = Σ_k W[n][k] lets the u8×s8 VNNI instructions run signed activations
 * (a + 128) exactly: Σ (a+128)·w − 128·colsum = Σ a·w.
 *
 * The quantized activations are row-major q [M][Kp] int8 (zero padded), with fp32 s [M].
 */
#ifndef QMM_INTERNAL_H
#define QMM_INTERNAL_H

#include "qmm_base.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* ---------------------------------------------------------------- context */
enum {
    QMM_SCRATCH_ACT = 0, QMM_SCRATCH_PREPASS = 1, QMM_SCRATCH_ENGINE = 2, QMM_SCRATCH_STAGE = 3,
    QMM_SCRATCH_RESIDUAL = 4, QMM_SCRATCH_WEIGHT = 5, QMM_SCRATCH_SLOTS = 6
};
struct qmm_context {
    int n_threads;
    qmm_fallback_policy fallback;
    int max_isa;
    int verbose;
    uint32_t disabled_engines;
    uint32_t usable_engines;     /* bit (1u << id): usable here under max_isa and disabled_engines
                                    (qmm_engine_usable), fixed at creation; what AUTO may choose */
    qmm_pool *pool;
    qmm_cancel_word cancel;      /* qmm_cancel (SPEC §12): the calls in flight and the request; the
                                    pool and the drivers poll it (qmm_cancelled) */
    /* scratch arenas: grow, never shrink; no allocation once the largest call was seen */
    void *scratch[QMM_SCRATCH_SLOTS];
    size_t scratch_bytes[QMM_SCRATCH_SLOTS];
    qmm_counters counters;
    qmm_engine_id last_engine[QMM_OP_COUNT]; /* per operation, the engine of its last successful call */
    /* phase timers (qmm_profile): on, the totals, and one slot per thread for the thread sums */
    int profile;
    qmm_profile prof;
    struct qmm_prof_slot *prof_slots; /* [n_threads], while profile is on */
};
/* One thread's sums of a parallel phase (QMM_PHASE_THREADS_*), a cache line of its own: the
 * driver adds each run's slots into ctx->prof and clears them (qmm_profile_collect). */
enum { QMM_PROF_TASKS = 0, QMM_PROF_PACK = 1, QMM_PROF_TILES = 2, QMM_PROF_EPILOGUE = 3, QMM_PROF_SLOT_NS = 4 };
typedef struct qmm_prof_slot {
    _Alignas(64) uint64_t ns[QMM_PROF_SLOT_NS];
} qmm_prof_slot;
/* Adds the threads' slots into ctx->prof (QMM_PHASE_THREADS_*) and clears them: after a pool
 * run whose threads wrote them, on the calling thread. */
static inline void qmm_profile_collect(qmm_context *ctx) {
    for (int i = 0; i < ctx->n_threads; i++) {
        qmm_prof_slot *sl = &ctx->prof_slots[i];
        ctx->prof.ns[QMM_PHASE_THREADS_TASKS] += sl->ns[QMM_PROF_TASKS];
        ctx->prof.ns[QMM_PHASE_THREADS_PACK] += sl->ns[QMM_PROF_PACK];
        ctx->prof.ns[QMM_PHASE_THREADS_TILES] += sl->ns[QMM_PROF_TILES];
        ctx->prof.ns[QMM_PHASE_THREADS_EPILOGUE] += sl->ns[QMM_PROF_EPILOGUE];
        for (int j = 0; j < QMM_PROF_SLOT_NS; j++) sl->ns[j] = 0;
    }
}
/* Whether qmm_cancel reached the call in flight on ctx (one relaxed load): a driver stops between
 * key blocks, panels or tiles, leaving its outputs undefined, and returns qmm_cancel_status. */
static inline int qmm_cancelled(const qmm_context *ctx) { return qmm_cancel_requested(&ctx->cancel); }
/* QMM_ERR_CANCELLED (recorded for qmm_last_error) if qmm_cancel reached the call, else QMM_OK. */
static inline qmm_status qmm_cancel_status(const qmm_context *ctx) {
    return qmm_cancelled(ctx) ? qmm_fail(QMM_ERR_CANCELLED, "cancelled (qmm_cancel)") : QMM_OK;
}
/* Returns a 64-byte aligned scratch block of at least `bytes` (reused across calls). Slots are
 * independent: QMM_SCRATCH_ACT (quantized activations q + scales), QMM_SCRATCH_PREPASS (per-thread
 * rows of the pre-pass), QMM_SCRATCH_ENGINE (an engine's own: partial sums, packed A, ...),
 * QMM_SCRATCH_STAGE (the kitchen input stage's output, input_stage.c), QMM_SCRATCH_RESIDUAL (a
 * copy of a residual that overlaps y, for the float path, which adds it after writing y),
 * QMM_SCRATCH_WEIGHT (a borrowed weight's per-call scales and bias; borrow.c). scratch.c. */
qmm_status qmm_context_scratch(qmm_context *ctx, int slot, size_t bytes, void **out);

/* (cpu.c) The vector level of the core's shared kernels (pre-pass rows, float panels, input stage):
 * QMM_ISA_AVX512 when the CPU has AVX-512 F/BW/VL/DQ and ctx's cap allows it, else QMM_ISA_AVX2
 * with AVX2/FMA/F16C under the cap, else QMM_ISA_NONE (scalar). All levels give the same bits. */
int qmm_core_simd(const qmm_context *ctx);

/* ---------------------------------------------------------------- weights */
typedef struct qmm_packed_i8 {
    int64_t Np, Kp;          /* N rounded up to 16, K rounded up to 64 */
    int8_t *data;            /* n16k4, Np * Kp bytes (see above) */
    int32_t *colsum;         /* [Np] Σ_k W[n][k] */
} qmm_packed_i8;

/* Packed float weights (float weights only; int8 weights are widened in-kernel from n16k4):
 *   bf16 weights: bf16 [Np/16][Kp/2][16][2], Kp = K rounded up to 32 — 16 consecutive k-pair
 *                 rows of one block are one AMX-BF16 B tile (16 rows × 64 bytes, K = 32) and one
 *                 k-pair row is one zmm for VDPBF16PS;
 *   f32 weights:  f32 [Np/16][Kp][16], Kp = K — one zmm of 16 output channels per k.
 * Padding is zero. Exactly one of bf16 / f32 is set, per the weight's dtype. */
typedef struct qmm_packed_f {
    int64_t Np, Kp;
    uint16_t *bf16;
    float *f32;
} qmm_packed_f;

static inline float qmm_packed_f_at(const qmm_packed_f *p, int64_t n, int64_t k) {
    if (p->bf16) {
        uint16_t h = p->bf16[((n / 16) * (p->Kp / 2) + k / 2) * 32 + (n % 16) * 2 + k % 2];
        uint32_t u = (uint32_t)h << 16;
        float f;
        __builtin_memcpy(&f, &u, 4);
        return f;
    }
    return p->f32[((n / 16) * p->Kp + k) * 16 + n % 16];
}

static inline int8_t qmm_packed_i8_at(const qmm_packed_i8 *p, int64_t n, int64_t k) {
    return p->data[((n / 16) * (p->Kp / 4) + k / 4) * 64 + (n % 16) * 4 + k % 4];
}


/* The engines AUTO dispatch chose for this weight, one slot per call class (dispatch.h,
 * qmm_plan_choose): the class and the choice in one word, the thread count and the chosen
 * engine's finalized descriptor (qmm_final) beside it. A slot is a sequence lock of atomics —
 * seq odd while one writer fills it (a writer that finds it odd leaves it), readers take a slot
 * only when seq is even and unchanged across their reads — so contexts on any threads share it
 * without a lock. Zero: empty. */
#define QMM_PLAN_CACHE_SLOTS 4
typedef struct qmm_plan_slot {
    _Atomic uint64_t seq;
    _Atomic uint64_t word;             /* the call class and the choice (dispatch.h), bit 63: full */
    _Atomic int threads;               /* the thread count the descriptor was finalized for */
    _Atomic(const void *) desc;        /* qmm_final.desc */
    _Atomic(const char *) name;        /* qmm_final.name */
} qmm_plan_slot;
typedef struct qmm_plan_cache {
    qmm_plan_slot slot[QMM_PLAN_CACHE_SLOTS];
} qmm_plan_cache;

struct qmm_weight {
    char name[128];
    int64_t N, K;            /* K: the GEMM depth (input width after the activation) */
    int is_int8;
    int convrot_gs;
    int full_precision;
    int per_tensor_scale;
    int has_neg128;          /* some W[n][k] == -128 (not from qmm's quantizer) */
    qmm_packed_i8 i8;        /* int8 weights */
    float *scale;            /* [N] fp32 weight scale (a per-tensor scale is repeated) */
    float *bias;             /* [N] fp32 or NULL (bf16/f16 bias widened exactly) */
    /* borrowed (qmm_weight_borrow_int8): the caller's int8 [N][ld], scales and bias, read at every
     * call. The handle holds no copy (i8.data, i8.colsum, scale, bias NULL; i8.Np/Kp set); each
     * call runs on a view of it (qmm_weight_for_call) whose scale/bias are read from that memory
     * as it is then. */
    int borrowed;
    struct {
        const int8_t *data;  /* [N][ld], any alignment */
        int64_t ld;
        const float *scale;  /* [n_scale] */
        int64_t n_scale;
        const void *bias;    /* [N] of bias_dtype, or NULL */
        qmm_dtype bias_dtype;
    } borrow;
    /* a borrowed W4A8 weight (qmm_weight_borrow_w4a8; borrowed = 1, borrow.data NULL, borrow.scale
     * = s_channel, n_scale N): the caller's codes, group scales and codebook, decoded to int8 per
     * call into the engines' panels (SPEC §11; qmm_w4a8_at is the definition) */
    int w4a8;
    struct {
        const uint8_t *codes;  /* [N][K·bits/8] */
        int64_t row_bytes;     /* K·bits/8 */
        int bits;              /* 4 or 6 */
        const void *s_rel;     /* [N][K/group] of s_rel_dtype */
        qmm_dtype s_rel_dtype; /* F8_E4M3 or F32 */
        int group;             /* group size */
        const float *codebook; /* [16] or NULL */
    } w4;
    /* float weights (is_int8 == 0): fdtype BF16 or F32 (F16 is widened to F32) */
    qmm_dtype fdtype;
    qmm_packed_f fp;
    /* shared mutable state, last: a call's view copies only the fields above (qmm_weight_copy_plain) */
    atomic_int fallback_logged;
    qmm_plan_cache plan_cache;   /* dispatch's choices (zero at creation) */
    void *adopted;               /* qmm_aligned_alloc'd memory the weight frees at destroy (qmm_weight_adopt); NULL in views */
    size_t adopted_bytes;        /* its size (qmm_weight_info.packed_bytes counts it) */
};

/* w takes ownership of block (qmm_aligned_alloc'd, bytes long; freed by qmm_weight_destroy): the memory a
 * borrowed weight reads that its creator made for it (a checkpoint's W4A8 scales, src/io/checkpoint.c;
 * a tensor-parallel rank's W4A8 slice, src/tp/tp_linear.c), counted in qmm_weight_info.packed_bytes.
 * One block per weight; a second call frees the first. (src/api/weight.c) */
void qmm_weight_adopt(qmm_weight *w, void *block, size_t bytes);

/* The checks of qmm_weight_borrow_w4a8 on a W4A8 desc's fields (shape, bits, sizes, group, dtypes,
 * pointers, convrot), reading none of its memory: an error naming the field. (src/api/weight.c) */
qmm_status qmm_w4a8_desc_check(const qmm_w4a8_desc *d);

/* *dst = the immutable fields of src (everything before fallback_logged), the shared mutable
 * state zero: a per-call view of a weight, never read atomically by anyone else. */
static inline void qmm_weight_copy_plain(qmm_weight *dst, const qmm_weight *src) {
    const size_t plain = offsetof(qmm_weight, fallback_logged);
    __builtin_memcpy(dst, src, plain);
    __builtin_memset((char *)dst + plain, 0, sizeof *dst - plain);
}

/* fp8 e4m3fn (bias 7, no infinities, 0x7f/0xff NaN) → fp32, exact. */
static inline float qmm_e4m3_to_f32(uint8_t b) {
    const uint32_t sign = (uint32_t)(b & 0x80) << 24, e = (b >> 3) & 15u, m = b & 7u;
    uint32_t u;
    if (e == 15 && m == 7) u = 0x7fc00000u;               /* NaN */
    else if (e == 0) {                                    /* zero or subnormal: m · 2^-9 */
        union { float f; uint32_t u; } v = {.f = (float)m * 0x1p-9f};
        u = v.u;
    } else u = ((e + 120u) << 23) | (m << 20);            /* 2^(e-7) · 1.m */
    union { uint32_t u; float f; } r = {.u = u | sign};
    return r.f;
}

/* s_rel[n][g] of a W4A8 weight as fp32 (exact). */
static inline float qmm_w4a8_srel(const qmm_weight *w, int64_t n, int64_t g) {
    const int64_t i = n * (w->K / w->w4.group) + g;
    return w->w4.s_rel_dtype == QMM_F32 ? ((const float *)w->w4.s_rel)[i] : qmm_e4m3_to_f32(((const uint8_t *)w->w4.s_rel)[i]);
}

/* The code of W[n][k] of a W4A8 weight (0 .. 2^bits - 1). */
static inline int qmm_w4a8_code(const qmm_weight *w, int64_t n, int64_t k) {
    const uint8_t *row = w->w4.codes + n * w->w4.row_bytes;
    int c = (row[k >> 1] >> ((k & 1) * 4)) & 15;
    if (w->w4.bits == 6) c |= ((row[w->K / 2 + (k >> 2)] >> ((k & 3) * 2)) & 3) << 4;
    return c;
}

/* The int8 value of a code given the group's s_rel (SPEC §11): v · s_rel in fp32, rounded half to
 * even, clamped to [-127, 127]; NaN gives 0. The definition every decoder reproduces. */
static inline int8_t qmm_w4a8_value(float v, float s_rel) {
    float p = v * s_rel;
    if (p != p) return 0;
    p = __builtin_rintf(p);
    return (int8_t)(p > 127.0f ? 127 : p < -127.0f ? -127 : (int)p);
}

/* The level of code c: codebook[c], or c - 2^(bits-1). */
static inline float qmm_w4a8_level(const qmm_weight *w, int c) {
    return w->w4.codebook ? w->w4.codebook[c] : (float)(c - (1 << (w->w4.bits - 1)));
}

static inline int8_t qmm_w4a8_at(const qmm_weight *w, int64_t n, int64_t k) {
    return qmm_w4a8_value(qmm_w4a8_level(w, qmm_w4a8_code(w, n, k)), qmm_w4a8_srel(w, n, k / w->w4.group));
}

/* W[n][k] of an int8 weight, borrowed (the caller's memory: int8 rows, or W4A8 codes decoded) or
 * packed. */
static inline int8_t qmm_weight_i8_at(const qmm_weight *w, int64_t n, int64_t k) {
    if (w->w4a8) return qmm_w4a8_at(w, n, k);
    return w->borrowed ? w->borrow.data[n * w->borrow.ld + k] : qmm_packed_i8_at(&w->i8, n, k);
}

/* ---------------------------------------------------------------- engines */
/* What an engine is asked to run: the weight and one call's arguments, validated. */
typedef struct qmm_call {
    const qmm_weight *w;
    int64_t M, N, K, K_in;
    const void *x; qmm_dtype x_dtype; int64_t ldx;
    void *y; qmm_dtype y_dtype; int64_t ldy;
    qmm_act act;
    float *token_scales;            /* optional out [M] */
    const float *token_scales_in;   /* optional in [M] */
    int fallback;                   /* int8 weight run by a float engine (W8A16) */
    /* SPEC §1a extensions (qmm_linear_args): rms_norm weight, modulation, epilogue, residual */
    const void *act_weight; qmm_dtype act_weight_dtype; float act_eps;
    const void *modulation;         /* [K] of x_dtype, or NULL */
    qmm_epilogue epilogue;
    const void *residual; int64_t ldr; /* [M, ldr] of y_dtype, or NULL */
    const void *residual_scale;     /* [N] of y_dtype */
    _Atomic(const char *) *bug;     /* where a kernel reports an impossible case (qmm_call_bug), or NULL */
} qmm_call;

/* A GEMM driver's per-thread hook (int8_gemm.h, float_gemm.h), for engines with thread state (AMX:
 * LDTILECFG, TILERELEASE; oneDNN's brgemm set_hw_context / release_hw_context): begin(c, thread)
 * runs on each pool thread before its first task of a pool run of call c, end(c, thread) after
 * its last (placed by the pool: qmm_pool_run_bracketed). */
typedef void (*qmm_thread_hook_fn)(const qmm_call *c, int thread);

/* A kernel met a case its preconditions exclude (a bug in qmm): recorded on the call from any
 * thread, and qmm_linear then fails with QMM_ERR_INTERNAL naming `what` (a static string). The
 * library never aborts. */
static inline void qmm_call_bug(const qmm_call *c, const char *what) {
    if (c->bug) atomic_store(c->bug, what);
}

/* What an engine is asked to run for qmm_attention (SPEC §10): the arguments, validated
 * (src/api/attention.c): sizes >= 1, H a multiple of Hkv, D <= QMM_ATTN_MAX_D, float dtypes,
 * strides >= 0 and every element's offset within int64, out's elements distinct and its memory
 * apart from the inputs', scale finite (the default already applied). */
typedef struct qmm_attn_call {
    int64_t B, H, Hkv, S, Skv, D;
    const void *q; qmm_dtype q_dtype; int64_t qs[3];
    const void *k; const void *v; qmm_dtype kv_dtype; int64_t ks[3]; int64_t vs[3];
    void *out; qmm_dtype out_dtype; int64_t os[3];
    float scale;
    const void *mask; qmm_dtype mask_dtype; int64_t ms[4];  /* mask NULL: none; U8: bool */
    qmm_attn_mode mode;
    int by_name;   /* the engine was asked for by name: an admit's preference rules (where another
                      engine is faster) give way, its capability rules do not */
} qmm_attn_call;
/* The largest per-thread scratch an attention engine takes (the driver's packed kv head and
 * tile, the reference's score row): 1 TiB; a call needing more is refused before any allocation. */
#define QMM_ATTN_MAX_SCRATCH ((size_t)1 << 40)

struct qmm_i8_engine; /* int8_gemm.h */
struct qmm_fgemm;     /* float_gemm.h */
struct qmm_attn_ukernels; /* attention.h */

/* What an engine's driver runs for one call class (oneDNN's brgemm finalize, XNNPACK's init-once
 * configs): a const descriptor and its name ("" for an engine with one descriptor). */
typedef struct qmm_final {
    const void *desc;
    const char *name;
} qmm_final;

/* One operation (qmm_op) on one engine: a row of the engine's qmm_engine_ops. The call is the
 * operation's own struct, validated by its API (linear: qmm_call; attention: qmm_attn_call).
 *   admit:    NULL if the engine runs the call, else a short reason (written into why[0..n) or a
 *             static string); runs the engine's real rules, cheaply. NULL admit: the engine does
 *             not offer this operation (and the rest of the row is empty).
 *   desc:     what the operation's core driver runs on this engine, one descriptor for every
 *             call — linear: an int8 engine's struct qmm_i8_engine (qmm_int8_gemm), a float
 *             engine's struct qmm_fgemm (qmm_float_gemm); attention: struct qmm_attn_ukernels
 *             (qmm_attention_run) — or NULL where finalize picks it (or the engine was not built).
 *   finalize: NULL, or the descriptor for call's class (linear: the weight, M and the dtypes as
 *             the plan cache keys them, dispatch.h) and n_threads: a const descriptor of the
 *             same type as desc that stays valid for the process, built at most once per class,
 *             and its name (amx_int8: its regime; qmm_plan, QMM_VERBOSE and qmm_engine_regime
 *             say it). Plain C, callable on any CPU: it reads no more of the call than the class,
 *             and gives a NULL desc (with its name) where the engine was not built.
 *   run:      the reference's own run instead of a driver (no descriptor), else NULL.
 * The plan (dispatch.h) decides once per call class: the engine and its final descriptor
 * (qmm_op_finalize), cached together on the weight; the driver then runs that descriptor and
 * never sees an engine's own types.
 * Linear: admit reads only the weight (has_neg128 is part of the cache key) and the call class —
 * M, x_dtype, y_dtype, whether token_scales_in is given, and c->fallback (an int8 weight on a
 * float engine, set by dispatch) — because dispatch caches its verdicts per class (dispatch.h,
 * qmm_plan_choose). An int8 weight is owned (the n16k4 packing w->i8) or borrowed (w->borrowed:
 * the engine reads the caller's rows w->borrow itself, packing per call what its kernels need).
 * Attention: admit reads the whole call (its choice is not cached). */
typedef struct qmm_op_row {
    const char *(*admit)(const void *call, char *why, size_t n);
    const void *desc;
    qmm_final (*finalize)(const void *call, int n_threads);
    qmm_status (*run)(qmm_context *ctx, const void *call);
} qmm_op_row;

/* Row's final descriptor for call on n_threads threads: row->finalize's, else {row->desc, ""}
 * (engines.c). */
qmm_final qmm_op_finalize(const qmm_op_row *row, const void *call, int n_threads);

/* What an engine's kernel file exports: its operations (the engine's identity is its row of the
 * engine table, engines.c). */
typedef struct qmm_engine_ops {
    int built;                   /* 0 if the compiler could not build it */
    qmm_op_row op[QMM_OP_COUNT]; /* by qmm_op id; tests drive a linear i8 descriptor's tile, pack
                                    and rows kernels directly (qmm_i8_engine_of; amx_int8: its
                                    finalized descriptors) */
    /* What the engine tells `qmm bench` and logs about its tuning beyond its finalized
     * descriptor's name, NULL when it has nothing to tell (plain C: callable on any CPU, whether
     * the engine runs here or not): tuning(buf, size), its tuning in force as text (buf non-NULL
     * when size > 0, already ""; qmm_engine_tuning). */
    qmm_status (*tuning)(char *buf, size_t size);
    /* Kernel-level micro-benchmarks of the engine's own code (qmm_engine_probe; amx_int8: the
     * ladder of amx_ladder.c), NULL/0 when it has none: n_probes names in probe_names, and
     * probe(i, reps, small, ready, arg, r): probe i once checked (r->bad), then reps times timed
     * on this thread, ready(arg) called in between (small: the test's reduced sizes). Only
     * called when the engine is available. */
    int n_probes;
    const char *const *probe_names;
    qmm_status (*probe)(int i, int64_t reps, int small, void (*ready)(void *), void *arg, qmm_probe_result *r);
} qmm_engine_ops;

/* The engines' operations, each defined beside its kernel. */
extern const qmm_engine_ops qmm_ref_ops;
extern const qmm_engine_ops qmm_amx_int8_ops;
extern const qmm_engine_ops qmm_avx512_vnni_ops;
extern const qmm_engine_ops qmm_avx_vnni_ops;
extern const qmm_engine_ops qmm_avx2_int8_ops;
extern const qmm_engine_ops qmm_amx_bf16_ops;
extern const qmm_engine_ops qmm_avx512_bf16_ops;
extern const qmm_engine_ops qmm_avx512_f32_ops;
extern const qmm_engine_ops qmm_avx2_f32_ops;

/* ---------------------------------------------------------------- the engine table (engines.c) */
/* The one list of engines: dispatch and the tests iterate it, everything outside the library
 * reads it through qmm_engine_count / qmm_engine_get_info (the CLI, bench/, Python). One row per
 * engine, best first: the int8 engines (AMX, AVX512-VNNI, AVX-VNNI, AVX2), then the float engines
 * (the W8A16 fallback and float weights), then the scalar reference (run only when asked for by
 * name). A row is the engine's identity, written once, and its operations. Adding an engine: its
 * kernel file with its `const qmm_engine_ops` (above: one qmm_op_row per operation it offers, a
 * fixed desc or a finalize that picks one per call class), its flags in CMakeLists.txt
 * (QMM_ISA_SOURCES) and tests/isa/check_isa.sh, a QMM_ENGINE_* id (qmm.h), and one row in
 * engines.c; no shared struct gains a field. */
typedef struct qmm_engine {
    qmm_engine_id id;
    const char *name;
    qmm_engine_kind kind;        /* qmm.h */
    qmm_isa isa;                 /* level needed (for the ISA cap) */
    uint32_t cpu_features;       /* QMM_CPU_* bits needed */
    qmm_dtype operands;          /* what its multiply instructions take: I8, BF16 or F32 */
    const char *peak_insn;       /* its core instruction, as bench/peak.c times it for the peak */
    int hw_verified;             /* 1: its kernels have run on a CPU with its ISA; 0: only emulated */
    const qmm_engine_ops *ops;
} qmm_engine;

/* Every engine id except AUTO, once, best first. */
#define QMM_ENGINE_TABLE_LEN (QMM_ENGINE_COUNT - 1)
extern const qmm_engine qmm_engine_table[QMM_ENGINE_TABLE_LEN];
/* The row of an engine id; NULL for AUTO and unknown ids. */
const qmm_engine *qmm_engine_get(qmm_engine_id id);

/* Runs the linear call c on engine e whose final descriptor for it is desc (qmm_op_finalize):
 * e's own run (the reference), else the core driver of e's kind on desc (qmm_int8_gemm,
 * qmm_float_gemm); desc NULL: an error, the engine was not built. (api/linear.c) */
qmm_status qmm_linear_drive(qmm_context *ctx, const qmm_engine *e, const void *desc, const qmm_call *c);

int qmm_env_max_isa(void);   /* QMM_MAX_ISA parsed, -1 if unset/unknown */
/* Availability on this machine under a cap (hardware, OS permission, build, cap, disabled). */
int qmm_engine_usable(const qmm_engine *e, int max_isa, uint32_t disabled, char *why, size_t n);
/* Bit (1u << id) for every engine usable under the cap and disabled set (qmm_context.usable_engines). */
uint32_t qmm_engines_usable(int max_isa, uint32_t disabled);

/* The deepest K an int8 engine runs: 128 * 128 * K must fit an int32 accumulator exactly
 * (activations reach -128; weights not from qmm's quantizer may hold -128). */
#define QMM_MAX_INT8_K 131071
/* The common admission checks every int8 engine shares (dtypes, act/K_in, gs, y dtype, K limit).
 * Engines call it first, then add their own. */
const char *qmm_admit_common_int8(const void *call, char *why, size_t n);
const char *qmm_admit_common_float(const void *call, char *why, size_t n);

#endif /* QMM_INTERNAL_H */
