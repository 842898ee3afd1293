/*
 * qmm.h — the public API of libqmm: INT8 (W8A8) linear layers of transformer models on the
 * CPU's integer matrix engine (AMX-INT8, AVX512-VNNI, AVX-VNNI, AVX2), with a counted,
 * same-device float fallback and nothing silent. The numerical contract is docs/SPEC.md §1–§11.
 *
 * The model of use (select once, execute many times):
 *
 *     qmm_context *ctx;  qmm_context_create(NULL, &ctx);          // threads, policy, ISA cap
 *     qmm_weight  *w;    qmm_weight_create_int8(NULL, &desc, &w); // copies + packs once; no ctx needed
 *     qmm_linear_args a = qmm_linear_args_default();
 *     a.M = tokens; a.x = x; a.x_dtype = QMM_BF16; a.y = y; a.y_dtype = QMM_BF16;
 *     if (qmm_linear(ctx, w, &a) != QMM_OK) fprintf(stderr, "%s\n", qmm_last_error());
 *
 * Rules kept by every function here:
 *   - every fallible call returns a qmm_status; the message of the last error of the calling
 *     thread names what was wrong (layer/tensor, shape, reason): qmm_last_error();
 *   - the library never exits, aborts or prints, except dispatch logging when switched on
 *     (QMM_VERBOSE=dispatch or qmm_context_options.verbose), which goes to stderr;
 *   - handles are opaque; *_create copies what it needs (the caller keeps its buffers), except
 *     qmm_weight_borrow_int8 and qmm_weight_borrow_w4a8, which read the caller's memory at every
 *     call; *_destroy(NULL) is a no-op.
 *
 * Thread safety: a qmm_weight is immutable after creation (a borrowed one: its handle; the caller
 * owns the memory it reads) and may be used from any number of
 * contexts and threads at once. A qmm_context is used by one thread at a time (it owns the
 * worker threads and the scratch arena of the calls made through it); use one context per
 * calling thread. The counters of a context are read safely while no call is running on it.
 * The exception: qmm_cancel(ctx) may be called from any thread at any time while ctx exists.
 *
 * Fork: contexts and weights made before fork() keep working in the child (the thread that
 * called fork): a context's worker threads are started again at its next call, and
 * qmm_context_destroy there frees it without waiting for the parent's threads.
 */
#ifndef QMM_H
#define QMM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- version */
#define QMM_VERSION_MAJOR 0
#define QMM_VERSION_MINOR 2
#define QMM_VERSION_PATCH 0
#define QMM_VERSION_NUMBER (QMM_VERSION_MAJOR * 10000 + QMM_VERSION_MINOR * 100 + QMM_VERSION_PATCH)
unsigned    qmm_version_number(void); /* QMM_VERSION_NUMBER of the library actually linked */
const char *qmm_version_string(void); /* "0.2.0" */

/* ---------------------------------------------------------------- status codes (pinned) */
typedef enum qmm_status {
    QMM_OK = 0,
    QMM_ERR_INVALID_ARGUMENT = 1,     /* caller bug: NULL pointer, zero/negative size, bad stride */
    QMM_ERR_UNSUPPORTED = 2,          /* well-formed but not supported: dtype combination,
                                         group size, K % g != 0, quant format (float8, nvfp4, ...) */
    QMM_ERR_NO_ENGINE = 3,            /* no engine (int8 nor float fallback) admits the layer;
                                         the message lists every engine's reason */
    QMM_ERR_FALLBACK_REFUSED = 4,     /* strict policy: the layer would fall back to a float
                                         engine; the message names the layer and the reasons */
    QMM_ERR_UNSUPPORTED_HARDWARE = 5, /* an engine was asked for by name and this CPU/OS lacks it */
    QMM_ERR_OUT_OF_MEMORY = 6,
    QMM_ERR_IO = 7,                   /* open/read/write/rename/mmap failed (errno in message) */
    QMM_ERR_FORMAT = 8,               /* malformed file: header, JSON, ranges, shapes, dtypes */
    QMM_ERR_NOT_FOUND = 9,            /* a named tensor/layer is not in the file/model */
    QMM_ERR_DIST = 10,                /* tensor parallelism: collective failed, ranks disagree */
    QMM_ERR_INTERNAL = 11,            /* a bug in qmm: please report the message */
    QMM_ERR_CANCELLED = 12            /* qmm_cancel reached the call: its outputs are undefined */
} qmm_status;
#define QMM_STATUS_COUNT 13

const char *qmm_status_name(qmm_status s); /* "QMM_ERR_UNSUPPORTED"; never NULL */
/* Message of the last failed call made by this thread ("" if none). Valid until the next
 * failing call on the same thread. */
const char *qmm_last_error(void);

/* ---------------------------------------------------------------- dtypes, activations */
typedef enum qmm_dtype {
    QMM_F32 = 0,
    QMM_F16 = 1,
    QMM_BF16 = 2,
    QMM_I8 = 3,
    QMM_U8 = 4,
    QMM_I32 = 5,    /* as an output dtype: the int32 accumulators (SPEC §1 step 4, §6) */
    QMM_F8_E4M3 = 6, /* fp8 e4m3fn (torch.float8_e4m3fn): only as W4A8 group scales (s_rel, SPEC §11) */
    QMM_DTYPE_COUNT
} qmm_dtype;
const char *qmm_dtype_name(qmm_dtype t);  /* "f32", "f16", "bf16", "i8", "u8", "i32", "f8_e4m3" */
size_t      qmm_dtype_size(qmm_dtype t);  /* bytes per element, 0 if unknown */
/* n values of src_dtype → dst_dtype, both F32, F16 or BF16, rounded to nearest even (SPEC T()). */
qmm_status  qmm_convert(const void *src, qmm_dtype src_dtype, void *dst, qmm_dtype dst_dtype, int64_t n);

typedef enum qmm_act {
    QMM_ACT_NONE = 0,
    QMM_ACT_SWIGLU = 1,     /* K_in = 2K: a = T(T(silu(gate)) * up), gate = x[:, :K], up = x[:, K:] */
    QMM_ACT_GELU_TANH = 2,  /* a = T(gelu_tanh(float(x))) */
    QMM_ACT_RMS_NORM = 3,   /* a = T(x · rsqrt(mean(x²) + eps) · w): needs act_weight [K], act_eps */
    QMM_ACT_SITU = 4,       /* K_in = 2K, x = [hidden | gate]:
                               a = T(4·tanh(gate/4)·sigmoid(gate) · 25·tanh(hidden/25)) (SPEC §1a) */
    QMM_ACT_COUNT = 5
} qmm_act;
const char *qmm_act_name(qmm_act a);               /* "none", "swiglu", "gelu_tanh", "rms_norm", "situ" */
qmm_act     qmm_act_from_name(const char *name);   /* QMM_ACT_COUNT if unknown */

/* ---------------------------------------------------------------- engines */
/* Engine ids are pinned: an engine keeps its number and a new engine takes the next free one.
 * Every id is below QMM_ENGINE_MAX (the width of qmm_context_options.disabled_engines), and
 * QMM_ENGINE_MAX sizes every per-engine array of this header, so adding an engine changes no
 * struct. Which engines this library has, best first, and what each one is: qmm_engine_count()
 * and qmm_engine_get_info() (a library may know engines that a caller's older header does not
 * name). */
#define QMM_ENGINE_MAX 32
typedef enum qmm_engine_id {
    QMM_ENGINE_UNKNOWN = -1,    /* qmm_engine_from_name of a name that is no engine */
    QMM_ENGINE_AUTO = 0,        /* let dispatch choose (never picks REF) */
    QMM_ENGINE_REF = 1,         /* scalar reference: tests and debugging, only by name */
    /* int8 engines (W8A8), best first */
    QMM_ENGINE_AMX_INT8 = 2,
    QMM_ENGINE_AVX512_VNNI = 3,
    QMM_ENGINE_AVX_VNNI = 4,
    QMM_ENGINE_AVX2_INT8 = 5,
    /* float engines: the same-device fallback for int8 weights (W8A16: int8 weights widened
     * in-kernel, float activations) and the engines of float (bf16/f32) weights, best first */
    QMM_ENGINE_AMX_BF16 = 6,
    QMM_ENGINE_AVX512_BF16 = 7,
    QMM_ENGINE_AVX512_F32 = 8,
    QMM_ENGINE_AVX2_F32 = 9,
    QMM_ENGINE_COUNT = 10       /* one past the last id this header names; not an array size
                                   (QMM_ENGINE_MAX) and not the library's engine count */
} qmm_engine_id;
const char *qmm_engine_name(qmm_engine_id e);          /* "amx_int8", ...; "auto", "ref"; "unknown" */
/* Parses an engine name ("auto", "ref", "avx512_vnni", ...); QMM_ENGINE_UNKNOWN if none. */
qmm_engine_id qmm_engine_from_name(const char *name);
int qmm_engine_is_int8(qmm_engine_id e);                /* 1 for the int8 (W8A8) engines */

/* ISA cap (QMM_MAX_ISA environment variable, or the context option): engines that need more
 * than the cap are unavailable. Levels are ordered. Names: "none", "avx2", "avx_vnni",
 * "avx512", "avx512_vnni", "avx512_bf16", "amx". */
typedef enum qmm_isa {
    QMM_ISA_NONE = 0,          /* no SIMD engine: only the reference, by name */
    QMM_ISA_AVX2 = 1,
    QMM_ISA_AVX_VNNI = 2,
    QMM_ISA_AVX512 = 3,        /* F + BW + VL + DQ */
    QMM_ISA_AVX512_VNNI = 4,
    QMM_ISA_AVX512_BF16 = 5,
    QMM_ISA_AMX = 6,
    QMM_ISA_MAX = 6
} qmm_isa;
const char *qmm_isa_name(qmm_isa i);
qmm_isa     qmm_isa_from_name(const char *name); /* returns -1 cast to qmm_isa if unknown */

typedef enum qmm_engine_kind {
    QMM_KIND_REF = 0,           /* the scalar reference */
    QMM_KIND_INT8 = 1,          /* W8A8 on the integer instructions */
    QMM_KIND_FLOAT = 2          /* float weights, and the W8A16 fallback of int8 weights */
} qmm_engine_kind;

/* One engine of the library, as `qmm info` shows it. Strings are static. */
typedef struct qmm_engine_info {
    qmm_engine_id id;
    const char *name;             /* "avx512_vnni" */
    qmm_engine_kind kind;
    qmm_isa isa;                  /* the level it needs (what QMM_MAX_ISA caps) */
    uint32_t cpu_features;        /* the QMM_CPU_* bits it needs */
    qmm_dtype operands;           /* what its multiply instructions take: I8, BF16 or F32 */
    const char *peak_instruction; /* its core instruction, as `qmm bench` times it for the peak */
    int verified_on_hardware;     /* 1: its kernels have run on a CPU with its ISA; 0: only emulated */
    int built;                    /* 0: this build's compiler could not build it */
} qmm_engine_info;
/* The number of engines of this library (every id except AUTO, the reference included). */
int qmm_engine_count(void);
/* Engine number index (0 .. qmm_engine_count()-1) in dispatch order: the int8 engines best
 * first, then the float engines best first, then the reference. INVALID_ARGUMENT otherwise. */
qmm_status qmm_engine_get_info(int index, qmm_engine_info *out);

/* ---------------------------------------------------------------- hardware identification */
/* CPU features found once per process (CPUID + XCR0 + the Linux AMX permission request). */
enum {
    QMM_CPU_AVX2 = 1u << 0, QMM_CPU_FMA = 1u << 1, QMM_CPU_F16C = 1u << 2,
    QMM_CPU_AVX512F = 1u << 3, QMM_CPU_AVX512BW = 1u << 4, QMM_CPU_AVX512VL = 1u << 5,
    QMM_CPU_AVX512DQ = 1u << 6, QMM_CPU_AVX512_VNNI = 1u << 7, QMM_CPU_AVX_VNNI = 1u << 8,
    QMM_CPU_AVX512_BF16 = 1u << 9, QMM_CPU_AVX512_FP16 = 1u << 10, QMM_CPU_AMX_TILE = 1u << 11,
    QMM_CPU_AMX_INT8 = 1u << 12, QMM_CPU_AMX_BF16 = 1u << 13,
    QMM_CPU_AMX_PERMITTED = 1u << 14, /* the OS granted XTILEDATA (arch_prctl) */
    QMM_CPU_AVX512_VBMI = 1u << 15,   /* VPERMB (the W4A8 decoders' 6-bit table lookups) */
    QMM_CPU_FEATURE_COUNT = 16
};
uint32_t    qmm_cpu_features(void);
const char *qmm_cpu_feature_name(uint32_t single_bit); /* "avx512_vnni", ...; NULL if not one bit */
const char *qmm_cpu_brand(void);                        /* CPUID brand string */

/* Is engine e usable here (hardware, OS, build, ISA cap of the environment)? If not, and
 * why != NULL, a reason is written ("no AMX: CPUID lacks amx_int8", "capped by QMM_MAX_ISA=avx2"). */
int qmm_engine_available(qmm_engine_id e, char *why, size_t why_size);

/* ---------------------------------------------------------------- context */
typedef enum qmm_fallback_policy {
    QMM_FALLBACK_ALLOW = 0,   /* no int8 engine admits → float engine on this CPU, counted+logged */
    QMM_FALLBACK_STRICT = 1   /* → QMM_ERR_FALLBACK_REFUSED naming the layer and the reasons */
} qmm_fallback_policy;

typedef struct qmm_context_options {
    int n_threads;               /* 0: QMM_NUM_THREADS, else the online CPU count */
    qmm_fallback_policy fallback;
    int max_isa;                 /* -1: QMM_MAX_ISA or no cap; else a qmm_isa */
    int verbose;                 /* -1: from QMM_VERBOSE (=dispatch); 0 off; 1 dispatch log */
    int pin_threads;             /* 1: pin worker i to cpu_list[i] (or CPU i if cpu_list NULL);
                                    worker 0 is the thread calling qmm_context_create */
    const int *cpu_list;         /* n_threads (> 0) entries in 0..CPU_SETSIZE-1, or NULL; copied */
    uint32_t disabled_engines;   /* bit (1u << qmm_engine_id): dispatch (AUTO) never chooses this
                                    engine; an engine asked for by name still runs */
} qmm_context_options;
qmm_context_options qmm_context_options_default(void);

typedef struct qmm_context qmm_context;
qmm_status qmm_context_create(const qmm_context_options *opt /* NULL: defaults */, qmm_context **out);
void       qmm_context_destroy(qmm_context *ctx);
int        qmm_context_threads(const qmm_context *ctx);
/* Cancels the calls in flight on ctx (SPEC §12): thread-safe, and for a valid ctx
 * async-signal-safe (an atomic compare-and-swap loop; it waits for no call). The calls it
 * reaches are qmm_linear and qmm_attention (the short passes qmm_quantize_rows,
 * qmm_activation_amax and qmm_linear_epilogue run to their end); such a call is in flight from
 * its entry until it returns;
 * each one in flight at the moment of the request stops within one key block (qmm_attention),
 * one panel or tile (qmm_linear) or one task per thread, and returns QMM_ERR_CANCELLED with its
 * worker threads idle and nothing leaked; its outputs (out, y, token_scales) are then undefined
 * (partly written). A cancel with no call in flight changes nothing: the next call runs as if
 * it never happened, and a cancelled call's request ends with it. A call may also finish, and
 * return QMM_OK with every output written, when the request comes as it returns. Returns 1 if
 * a call was in flight (it was told to stop), 0 if none was (nothing changed), -1 if ctx is
 * NULL (qmm_last_error says so). Across a tensor-parallel call (qmm_dist.h) the cancelled rank's
 * local call fails and every rank returns QMM_ERR_DIST naming it. */
int        qmm_cancel(qmm_context *ctx);
int        qmm_context_max_isa(const qmm_context *ctx);

/* The operations a context runs and counts, by pinned id: qmm_linear, qmm_attention. Every id
 * is below QMM_OP_MAX, which sizes the per-operation arrays of this header, so adding an
 * operation changes no struct. */
#define QMM_OP_MAX 8
typedef enum qmm_op {
    QMM_OP_LINEAR = 0,          /* qmm_linear */
    QMM_OP_ATTENTION = 1,       /* qmm_attention */
    QMM_OP_COUNT = 2            /* one past the last id this header names; not an array size (QMM_OP_MAX) */
} qmm_op;
const char *qmm_op_name(qmm_op op);                    /* "linear", "attention"; "unknown" */

/* Counters of the calls made through a context since creation/reset, per operation. */
typedef struct qmm_op_counters {
    uint64_t calls[QMM_ENGINE_MAX];   /* by engine id: the engine that ran (REF only when asked by name) */
    uint64_t fallbacks;               /* calls run on a float engine as a fallback (linear: an int8
                                         weight, W8A16; attention: mode int8 run as mode best) */
    uint64_t errors;                  /* calls that returned an error */
} qmm_op_counters;
typedef struct qmm_counters {
    qmm_op_counters op[QMM_OP_MAX];   /* by qmm_op id */
} qmm_counters;
void qmm_get_counters(const qmm_context *ctx, qmm_counters *out);
void qmm_reset_counters(qmm_context *ctx);

/* Phase timers of the linear calls made through a context (off by default; on with
 * qmm_context_set_profile or QMM_PROFILE=1 in the environment when the context is created).
 * Off, they cost one branch per phase. Nanoseconds of CLOCK_MONOTONIC, summed over the calls
 * since creation/reset: the wall phases are timed on the calling thread; the THREADS phases are
 * sums over the worker threads of the time each spent in that part of the parallel GEMM (divide
 * by qmm_profile.threads for its share of the GEMM phase's wall time). The int8 GEMM driver
 * times PREPASS, GEMM and the thread sums (int8 and W4A8 weights on avx512_vnni, avx_vnni,
 * avx2_int8); an engine with its own driver (amx_int8's regimes) and the float engines are timed
 * by CALL, SETUP and ENGINE only. Read them while no call is running on the context. */
typedef enum qmm_phase {
    QMM_PHASE_CALL = 0,          /* qmm_linear, whole */
    QMM_PHASE_SETUP = 1,         /* before the engine: validation, dispatch, a borrowed weight's
                                    per-call scales and bias, the input stage (rms_norm, situ,
                                    modulation), the madvise of y */
    QMM_PHASE_ENGINE = 2,        /* the engine's run (PREPASS + GEMM + its own set-up) */
    QMM_PHASE_PREPASS = 3,       /* the int8 driver's pre-pass: act, rotation, quantization of x
                                    (and the copies its regime reads), one pool run */
    QMM_PHASE_GEMM = 4,          /* the int8 driver's pool run of the GEMM tasks */
    QMM_PHASE_THREADS_TASKS = 5, /* thread sum: inside GEMM tasks (the rest of threads × GEMM is idle) */
    QMM_PHASE_THREADS_PACK = 6,  /* thread sum: a borrowed weight's panels packed (W4A8: decoded) per
                                    call for the tiles (the one-pass and rows regimes' own in TILES) */
    QMM_PHASE_THREADS_TILES = 7, /* thread sum: the tile / rows / one-pass kernels, their stores included */
    QMM_PHASE_THREADS_EPILOGUE = 8, /* thread sum: the output stores (the epilogue, and the first touch
                                    of y's pages) of the engines that time them (avx512_vnni's
                                    tiles); part of THREADS_TILES; 0 for the others */
    QMM_PHASE_COUNT = 9
} qmm_phase;
#define QMM_PHASE_MAX 16
typedef struct qmm_profile {
    uint64_t calls;               /* qmm_linear calls timed */
    uint64_t ns[QMM_PHASE_MAX];   /* by qmm_phase */
    int threads;                  /* the context's threads */
    int enabled;
} qmm_profile;
const char *qmm_phase_name(qmm_phase p); /* "call", "setup", ..., "threads_epilogue"; "unknown" */
/* on = 1: time the phases from the next call on (allocates a slot per thread: OUT_OF_MEMORY);
 * 0: stop (the totals are kept until qmm_reset_profile). */
qmm_status qmm_context_set_profile(qmm_context *ctx, int on);
void       qmm_get_profile(const qmm_context *ctx, qmm_profile *out);
void       qmm_reset_profile(qmm_context *ctx);

/* ---------------------------------------------------------------- weights */
/* Weight creation uses no context: each function below takes a ctx, which may be NULL and is
 * ignored either way. It runs on the calling thread (packing is single-threaded), allocates with
 * the C allocator and reports errors through its status and qmm_last_error(). A weight belongs to
 * no context: one made before, after or without any serves every context. */
typedef struct qmm_weight qmm_weight;

/* An int8 weight W [N, K] (row-major, row stride ld elements; 0 = K) already quantized, as a
 * ComfyUI int8_tensorwise checkpoint stores it (in the rotated basis if convrot_gs != 0). */
typedef struct qmm_weight_desc {
    const char *name;         /* layer name for messages and logs (copied); may be NULL */
    int64_t N, K;
    const int8_t *data;       /* [N, ld] */
    int64_t ld;
    const float *scale;       /* n_scale fp32 values */
    int64_t n_scale;          /* 1 (per-tensor) or N (per output row) */
    const void *bias;         /* optional N values of bias_dtype */
    qmm_dtype bias_dtype;     /* F32, F16 or BF16 */
    int convrot_gs;           /* 0, or a power of 4 from 4 to 65536 dividing K (SPEC §1a) */
    int full_precision;       /* 1: the checkpoint asks for full precision matmul
                                 (full_precision_matrix_mult): run W8A16 on a float engine */
} qmm_weight_desc;
qmm_weight_desc qmm_weight_desc_default(void);
/* Shape limits of every weight function: N, K >= 1 (else INVALID_ARGUMENT); each <= 2^31,
 * N·K <= 2^36 elements and N·ld bytes within int64 (else QMM_ERR_UNSUPPORTED "too large"),
 * refused before anything is allocated. The int8 engines run K <= 131071 (exact int32
 * accumulators); a deeper layer goes to the float fallback. */
qmm_status qmm_weight_create_int8(qmm_context *ctx, const qmm_weight_desc *desc, qmm_weight **out);
/* A weight over the caller's memory: nothing is copied. data is int8 [N][ld] row-major, ld >= K (0 means K),
 * any byte alignment; scale is fp32 [n_scale] (1 or N); bias (optional) is [N] of bias_dtype; name is copied.
 * Every call reads data, scale and bias as they are then: the caller keeps them alive until qmm_weight_destroy
 * and may change them between calls (a change is seen by the next call), never during one. O(1) in N·K.
 * Same descriptor, limits and checks as qmm_weight_create_int8 (ld < K, NULL data or scale, bad n_scale,
 * N or K of 0 or past the limits: an error naming the field); nothing is read at creation. The handle
 * follows the thread-safety rule of every weight (calls from any number of contexts at once). */
qmm_status qmm_weight_borrow_int8(qmm_context *ctx, const qmm_weight_desc *desc, qmm_weight **out);

/* A W4A8 / W6A8 weight as comfy-kitchen 0.2.40 stores it (AsymW4A8Int8Layout, symmetric: no
 * correction; SPEC §11): per weight a 4- or 6-bit code, per group of group_size consecutive k a
 * relative scale s_rel, optionally a 16-entry codebook (4 bits only), per output row s_channel.
 * The int8 value of W[n][k], c its code, g = k / group_size:
 *     v = codebook ? codebook[c] : c - 2^(bits-1);   W = clamp(rne_int(v · float(s_rel[n][g])), -127, 127)
 * (one fp32 product; a NaN product gives 0), the kitchen's _dequant_int4_grouped_to_int8 bit for
 * bit; then the layer is the int8 layer of SPEC §1 with weight scale s_channel [N] and convrot_gs. */
typedef struct qmm_w4a8_desc {
    const char *name;         /* layer name for messages and logs (copied); may be NULL */
    int64_t N, K;             /* K % 16 == 0 (6 bits: K % 32 == 0) */
    int bits;                 /* 4 or 6 */
    /* [N][K·bits/8] bytes, rows contiguous: bytes [0, K/2) of a row hold the low nibbles (code of
     * even k in bits 0-3 of byte k/2, odd k in bits 4-7); at 6 bits bytes [K/2, 3K/4) hold the top
     * 2 bits of each code (k in byte K/2 + k/4 at bit 2·(k%4)) */
    const uint8_t *codes;
    int64_t codes_bytes;      /* the size of the caller's codes buffer: must be N·K·bits/8 */
    const void *s_rel;        /* [N][K/group_size] of s_rel_dtype, rows contiguous */
    qmm_dtype s_rel_dtype;    /* QMM_F8_E4M3 (the kitchen's default) or QMM_F32 */
    int64_t n_s_rel;          /* must be N·K/group_size */
    int group_size;           /* >= 4, dividing 16 or a multiple of 16, dividing K (6 bits: a multiple of 16) */
    const float *codebook;    /* 16 fp32 values (4 bits only), or NULL: uniform v = c - 2^(bits-1) */
    int64_t n_codebook;       /* 16 with a codebook, 0 without */
    const float *s_channel;   /* [N] fp32: the per-row weight scale of the int8 layer */
    const void *bias;         /* optional N values of bias_dtype */
    qmm_dtype bias_dtype;     /* F32, F16 or BF16 */
    int convrot_gs;           /* the kitchen always rotates: a power of 4 from 4 to 65536 dividing K
                                 (0: no rotation, not a kitchen layout) */
    int full_precision;       /* 1: run W8A16 on a float engine */
} qmm_w4a8_desc;
qmm_w4a8_desc qmm_w4a8_desc_default(void);  /* zero, bits 4, s_rel F8_E4M3, group 16, bias F32 */
/* A W4A8 weight over the caller's memory, nothing copied (as qmm_weight_borrow_int8): codes,
 * s_rel, codebook, s_channel and bias are read at every call as they are then; the caller keeps
 * them alive until qmm_weight_destroy and may change them between calls, never during one. No
 * int8 copy of the weight exists: every call decodes the codes into the int8 engines' per-call
 * weight panels (or the float fallback's blocks). Creation checks every field (an error naming
 * it: NULL pointers, bits, codes_bytes, n_s_rel, group_size, n_codebook, the shape limits of
 * qmm_weight_create_int8, convrot_gs) and reads the scales and the codebook once: a NaN or
 * infinite s_rel, s_channel or codebook value is INVALID_ARGUMENT naming the tensor and index. */
qmm_status qmm_weight_borrow_w4a8(qmm_context *ctx, const qmm_w4a8_desc *desc, qmm_weight **out);

/* The int8 values W[n][k] of rows [n0, n0 + rows) of an int8 weight — owned, borrowed, or a
 * W4A8 weight's codes decoded (SPEC §11) — into out [rows][ldo] (ldo >= K; 0 = K). For
 * inspection and tests (what every engine multiplies); INVALID_ARGUMENT for a float weight, NULL
 * pointers or rows outside [0, N]. */
qmm_status qmm_weight_int8_rows(const qmm_weight *w, int64_t n0, int64_t rows, int8_t *out, int64_t ldo);

/* SPEC §2: quantize a float matrix into int8 + scales. */
typedef struct qmm_quant_options {
    int convrot_gs;   /* 0 none; -1 auto (largest of 256, 64, 16 dividing K); or a power of 4 */
    int per_tensor;   /* 1: one scale for the whole matrix; 0: one per row */
} qmm_quant_options;
/* w [N, ld] of w_dtype (F32/F16/BF16) → wq [N, K] int8 in [-127, 127] (row stride K), scales
 * (N values, or 1 if per_tensor), *gs_used = the group size applied (0 if none). Caller-owned
 * buffers; uses no context. */
qmm_status qmm_quantize_weight(const void *w, qmm_dtype w_dtype, int64_t N, int64_t K, int64_t ld,
                               const qmm_quant_options *opt, int8_t *wq, float *scales,
                               int *gs_used);
/* W ≈ Wq · s (then un-rotated with H_g if gs != 0) → out [N, K] f32. */
qmm_status qmm_dequantize_weight(const int8_t *wq, int64_t N, int64_t K, const float *scales,
                                 int64_t n_scale, int gs, float *out);
/* Quantize (SPEC §2) and create the int8 weight in one call; name/bias as in the desc. */
qmm_status qmm_weight_quantize(qmm_context *ctx, const char *name, const void *w, qmm_dtype w_dtype,
                               int64_t N, int64_t K, int64_t ld, const qmm_quant_options *opt,
                               const void *bias, qmm_dtype bias_dtype, qmm_weight **out);

/* A plain float weight (not quantized) [N, K] of w_dtype F32 or BF16 (F16 is widened to F32),
 * run on the float engines: the path for layers a checkpoint keeps in float, and the BF16/FP32
 * baselines. y = act(x)·Wᵀ + bias. No rotation. */
qmm_status qmm_weight_create_float(qmm_context *ctx, const char *name, const void *w,
                                   qmm_dtype w_dtype, int64_t N, int64_t K, int64_t ld,
                                   const void *bias, qmm_dtype bias_dtype, qmm_weight **out);
void qmm_weight_destroy(qmm_weight *w);

typedef struct qmm_weight_info {
    const char *name;
    int64_t N, K;
    int is_int8;              /* 0: float weight */
    qmm_dtype dtype;          /* I8, BF16 or F32 as stored */
    int convrot_gs;
    int per_tensor_scale;
    int has_bias;
    int full_precision;
    size_t packed_bytes;      /* memory held for the weight (a borrowed weight: 0, or what it holds
                                 besides the caller's memory: a checkpoint W4A8 layer's copied
                                 scales, a tensor-parallel W4A8 rank's copy of its slice) */
    int code_bits;            /* W4A8: 4 or 6 (qmm_weight_borrow_w4a8); 0 otherwise */
    int group_size;           /* W4A8: the s_rel group; 0 otherwise */
    int has_codebook;         /* W4A8: 1 with a 16-entry codebook */
} qmm_weight_info;
void qmm_weight_get_info(const qmm_weight *w, qmm_weight_info *out);

/* ---------------------------------------------------------------- the linear call */
/* How the int32 accumulators become outputs (SPEC §1 step 5 and §1a). */
typedef enum qmm_epilogue {
    QMM_EPILOGUE_FUSED = 0,   /* y = T_out(((float)acc · s_r) · w_scale[n] + bias[n]): one rounding */
    QMM_EPILOGUE_KITCHEN = 1  /* comfy-kitchen's eager numerics: y = T_out((float)acc · (s_r · w_scale[n]))
                                 then, with a bias, y = T_out(y + T_out(bias[n])) */
} qmm_epilogue;

typedef struct qmm_linear_args {
    int64_t M;                /* tokens (rows of x and y), >= 1 */
    const void *x;            /* [M, ldx] of x_dtype; row width K_in = K (2K for swiglu) */
    qmm_dtype x_dtype;        /* F32, F16 or BF16 */
    int64_t ldx;              /* elements; 0 = K_in */
    void *y;                  /* [M, ldy] of y_dtype; row width N */
    qmm_dtype y_dtype;        /* F32, F16, BF16, or I32 for the raw accumulators (int8 engines) */
    int64_t ldy;              /* elements; 0 = N */
    qmm_act act;
    int64_t x_cols;           /* optional: the width of x's rows as the caller sees it; 0 = implied
                                 (K, or 2K for swiglu). Checked when given (odd swiglu width...) */
    /* Per-token scales s_r (M fp32). Optional output: written when non-NULL (needed with I32
     * output). If token_scales_in is non-NULL, those s_r are used instead of computing them
     * (tensor parallelism: scales shared across ranks, SPEC §6). */
    float *token_scales;
    const float *token_scales_in;
    qmm_engine_id engine;     /* AUTO, or a named engine (REF for tests) */

    /* --- the comfy-kitchen extensions (SPEC §1a); all optional, zero = off --- */
    const void *act_weight;   /* QMM_ACT_RMS_NORM: K values of act_weight_dtype (rounded to x's dtype) */
    qmm_dtype act_weight_dtype;
    float act_eps;            /* QMM_ACT_RMS_NORM: eps */
    /* Modulation (kitchen int8_linear_modulated): K values m of x_dtype; after the activation,
     * before the rotation: a = T(a · T(1 + m[k])). */
    const void *modulation;
    qmm_epilogue epilogue;    /* QMM_EPILOGUE_FUSED (SPEC §1 step 5) or QMM_EPILOGUE_KITCHEN (§1a); the
                                 int8 engines honour it, the float engines (W8A16, float weights)
                                 compute in fp32 and round once either way */
    /* Residual (kitchen int8_linear's residual + residual_scale): y = T(residual + rs[n] · y),
     * residual [M, ldr] and residual_scale [N] of y_dtype (float outputs only). residual may
     * alias y (same pointer and stride: an in-place residual add). */
    const void *residual;
    int64_t ldr;              /* elements; 0 = N */
    const void *residual_scale;
} qmm_linear_args;
qmm_linear_args qmm_linear_args_default(void);

/* y = epilogue(engine(quantize(rotate(act(x)))) · Wᵀ) per SPEC §1; for a float weight,
 * y = act(x) · Wᵀ + bias on a float engine. M whose byte sizes (M·ldx, M·ldy, the quantized
 * activations M·Kp) overflow int64 is refused with QMM_ERR_UNSUPPORTED. Thread safety: one call
 * at a time per context (see the top of this file); w may be shared. qmm_cancel from another
 * thread stops it between panels (QMM_ERR_CANCELLED; y and token_scales undefined). */
qmm_status qmm_linear(qmm_context *ctx, const qmm_weight *w, const qmm_linear_args *args);
/* The engine that ran the last successful qmm_linear on ctx (AUTO if none yet). */
qmm_engine_id qmm_last_engine(const qmm_context *ctx);

/* SPEC §6 building blocks for row-parallel layers: the per-row amax of act(x) after rotation,
 * rounded to x's dtype (M floats, before the /127); and the epilogue alone on int32
 * accumulators acc [M, ldacc] with scales s [M] → y. */
qmm_status qmm_activation_amax(qmm_context *ctx, const qmm_weight *w, const qmm_linear_args *args,
                               float *amax);
float      qmm_scale_from_amax(float amax); /* max(amax / 127, 1e-30) */
qmm_status qmm_linear_epilogue(qmm_context *ctx, const qmm_weight *w, int64_t M,
                               const int32_t *acc, int64_t ldacc, const float *token_scales,
                               void *y, qmm_dtype y_dtype, int64_t ldy);

/* The activation quantizer alone (SPEC §1 steps 2–3, kitchen-exact): each row of x [M, ldx] of
 * x_dtype (F32/F16/BF16, K values) is rotated with H_g when convrot_gs != 0 (a power of 4
 * dividing K; the result rounded to x_dtype), then quantized per row: q [M, ldq] int8 (K values,
 * columns K..ldq zero) and scales_out [M] fp32. scales_in: NULL to compute each row's scale, or
 * M given scales (one scale repeated = the kitchen's quantize_int8_tensorwise). These are the
 * kitchen's quantize_int8_rowwise / quantize_and_rotate_rowwise / quantize_int8_convrot_weight. */
qmm_status qmm_quantize_rows(qmm_context *ctx, const void *x, qmm_dtype x_dtype, int64_t M, int64_t K,
                             int64_t ldx, int convrot_gs, const float *scales_in, int8_t *q, int64_t ldq,
                             float *scales_out);

/* ---------------------------------------------------------------- plan: what would run */
#define QMM_REASON_MAX 160
typedef struct qmm_plan_info {
    qmm_engine_id engine;                    /* chosen engine; AUTO if none */
    int is_fallback;                         /* int8 weight on a float engine */
    qmm_status status;                       /* what qmm_linear would return at dispatch */
    /* by engine id (read them with qmm_plan_admits / qmm_plan_reason) */
    int admitted[QMM_ENGINE_MAX];            /* engine admits this call */
    char reason[QMM_ENGINE_MAX][QMM_REASON_MAX]; /* why each engine refused ("" if admitted) */
    char weight[QMM_REASON_MAX];             /* qmm_plan of a W4A8 weight: its storage and where the
                                                chosen engine decodes it; "" otherwise */
    char regime[32];                         /* the chosen engine's descriptor for this call class, by
                                                name: amx_int8's regime ("decode", "panel",
                                                "blocked"); "" for the other engines and for none */
} qmm_plan_info;
/* Which engine would run w for M tokens with these dtypes/act (args->x/y may be NULL here). */
qmm_status qmm_plan(qmm_context *ctx, const qmm_weight *w, const qmm_linear_args *args,
                    qmm_plan_info *out);
/* Human-readable multi-line text of a plan (the engine with its regime in brackets when there is
 * one, a "weight:" line when p->weight is set, then every engine's verdict); returns the length it
 * needed (snprintf-like). */
size_t qmm_plan_format(const qmm_plan_info *p, char *buf, size_t size);
/* A plan's verdict on engine e: 1 if e admits the call; else 0, and qmm_plan_reason says why
 * ("" if e admits or is no engine; never NULL). */
int         qmm_plan_admits(const qmm_plan_info *p, qmm_engine_id e);
const char *qmm_plan_reason(const qmm_plan_info *p, qmm_engine_id e);

/* How engine e runs M rows of w beyond being chosen, for benchmarks and logs: the name of the
 * descriptor its linear row finalizes for that call class — the one qmm_plan's regime and the
 * QMM_VERBOSE=dispatch log name — amx_int8's regime by its own rule, "decode", "panel" or
 * "blocked" (whether or not it admits or runs here); "" for the other engines (one descriptor;
 * amx_bf16's per class is unnamed) and for bad input. */
const char *qmm_engine_regime(qmm_engine_id e, const qmm_weight *w, int64_t M);
/* The tuning in force for engine e into buf (snprintf-like): for the AMX engines their blocking,
 * "kc=512,nc=512,mc=512,small_m=32,panel_a=1572864,min_m=8,borrowed_min_m=17" with QMM_AMX_BLOCKING applied
 * (amx_bf16 reads kc and nc of it); ""
 * for the others. INVALID_ARGUMENT if QMM_AMX_BLOCKING is set but not valid (the engines then
 * keep their defaults, which buf shows). */
qmm_status  qmm_engine_tuning(qmm_engine_id e, char *buf, size_t size);

/* Kernel-level micro-benchmarks of an engine's own code, for `qmm bench --amx-ladder`
 * (bench/NOTES.md "## The AMX ladder"): amx_int8 has the rungs of its ladder, the other engines
 * none. qmm_engine_probe_count: how many (0: none); qmm_engine_probe_name: the i-th's name (""
 * out of range). qmm_engine_probe runs probe i on the calling thread: once checked against a
 * plain int32 loop (bad = C values that differ: 0 when right), then ready(arg) if given (a
 * barrier, so that threads start together), then reps times timed; ops = the core instructions
 * executed in the timed reps (amx_int8: TDPBSSD), wall_s / cpu_s the reps' wall-clock and thread
 * CPU seconds. UNSUPPORTED_HARDWARE where the engine is not available (the message says why). */
typedef struct qmm_probe_result {
    int64_t ops;
    double wall_s, cpu_s;
    int64_t bad;
} qmm_probe_result;
int         qmm_engine_probe_count(qmm_engine_id e);
const char *qmm_engine_probe_name(qmm_engine_id e, int i);
qmm_status  qmm_engine_probe(qmm_engine_id e, int i, int64_t reps, void (*ready)(void *), void *arg,
                             qmm_probe_result *r);

/* ---------------------------------------------------------------- attention (SPEC §10) */
/* out = softmax(scale · q·kᵀ + mask) · v per batch and head, flash-attention style: tiles of
 * queries × keys, the softmax online in f32, nothing of size S × Skv allocated (per-thread
 * scratch of O(Skv · D) from the context). Dispatch as for linears (SPEC §4): every engine that
 * offers attention, best first (the int8 engines in mode int8 only), admits or refuses with a
 * reason; the first that admits runs; the reference only by name (args.engine = QMM_ENGINE_REF). */
typedef enum qmm_attn_mode {
    QMM_ATTN_BEST = 0,   /* the fastest engine: bf16 operands (q, k, p, v rounded to bf16, RNE)
                            with f32 accumulation where the CPU runs them faster than f32 FMA,
                            else f32 */
    QMM_ATTN_F32 = 1,    /* f32 operands only (engines with bf16 operands refuse) */
    QMM_ATTN_INT8 = 2,   /* comfy-kitchen's int8 recipe: the keys' mean subtracted, q and k rotated
                            (Hadamard) and quantized to int8 per row and key, P in u8 and V in
                            int8 per block of 64 keys, both products exact in int32 (SPEC §10),
                            on an int8 engine; where none admits, the best float engine runs
                            mode best — a fallback: counted, refused in strict mode */
    QMM_ATTN_MODE_COUNT = 3
} qmm_attn_mode;

typedef struct qmm_attention_args {
    /* q [B, H, S, D], k and v [B, Hkv, Skv, D] (H a multiple of Hkv: query head h reads kv
     * head h / (H / Hkv)), out [B, H, S, D]; 1 <= D <= QMM_ATTN_MAX_D. */
    int64_t B, H, Hkv, S, Skv, D;
    /* Each tensor: a pointer, its dtype (F32, F16 or BF16) and its strides in elements between
     * batches, heads and tokens ([0], [1], [2]); the last dimension (D) is contiguous. Input
     * strides are >= 0 (0 repeats); out's must not make two elements share memory. ComfyUI's
     * two layouts: [B, H, S, D] = {H·S·D, S·D, D}, [B, S, H·D] = {S·H·D, D, H·D}. */
    const void *q; qmm_dtype q_dtype; int64_t q_stride[3];
    const void *k; const void *v; qmm_dtype kv_dtype; int64_t k_stride[3]; int64_t v_stride[3];
    void *out; qmm_dtype out_dtype; int64_t out_stride[3];
    float scale;           /* finite; 0 = 1/sqrt(D) */
    /* Optional mask [B, H, S, Skv] read through mask_stride (batch, head, query, key; a stride
     * of 0 broadcasts, as torch's expand): U8 = bool (nonzero: attend), or F32/F16/BF16 added
     * to the scaled scores. A query row whose every key is masked (false, or -inf) gives 0. */
    const void *mask; qmm_dtype mask_dtype; int64_t mask_stride[4];
    qmm_attn_mode mode;
    qmm_engine_id engine;  /* AUTO, or a named engine (REF for tests) */
} qmm_attention_args;
#define QMM_ATTN_MAX_D 256
/* Every field zero but mode BEST, engine AUTO, the dtypes F32 and mask_dtype U8. */
qmm_attention_args qmm_attention_args_default(void);
/* Runs the attention on the engine dispatch chooses (or args->engine). Errors name the bad
 * argument. Thread safety: one call at a time per context, as qmm_linear. qmm_cancel from
 * another thread stops it between key blocks (QMM_ERR_CANCELLED; out undefined). */
qmm_status qmm_attention(qmm_context *ctx, const qmm_attention_args *args);
/* Which engine would run it, and every engine's reason (pointers may be NULL here). With
 * args->engine named, that engine's verdict decides, as in qmm_attention: engine = it and status
 * OK if it runs the call, else engine AUTO and the status qmm_attention would return. */
qmm_status qmm_attention_plan(qmm_context *ctx, const qmm_attention_args *args, qmm_plan_info *out);

/* ---------------------------------------------------------------- row ops: RMSNorm + RoPE (SPEC §13)
 * comfy-kitchen's fused rope family on the CPU, one pass over each row: optionally RMSNorm
 * (a = x · rsqrt(mean(x²) + eps) · w), then the rotation of pairs of the row's first rot_dim
 * values by a 2×2 matrix per pair, the rest of the row passing through. */
typedef struct qmm_rope_args {
    /* x and out [n0, n1, n2, D]: three leading extents (1 where absent) and the row length D
     * (even, 2 <= D <= QMM_ROPE_MAX_D); each row is contiguous. */
    int64_t n[3];
    int64_t D;
    /* x: strides in elements between the leading indices, >= 0. out: of x's dtype, strides that
     * give every element its own address; out may be x itself with x's strides (in place), and
     * must not overlap x otherwise, nor freqs or norm_weight. */
    const void *x; qmm_dtype x_dtype; int64_t x_stride[3];
    void *out; int64_t out_stride[3];
    /* freqs [n0, n1, n2, rot_dim/2, 2, 2] of any float dtype C (the rotation is computed in C, as
     * the kitchen's eager backend does), the last three dimensions contiguous; strides >= 0
     * (0 broadcasts). Pair i of a row: (y0, y1) = (f[i][0][0]·x0 + f[i][0][1]·x1,
     * f[i][1][0]·x0 + f[i][1][1]·x1). */
    const void *freqs; qmm_dtype freqs_dtype; int64_t freqs_stride[3];
    int64_t rot_dim;     /* 0 = D; else even, <= D: the rotated prefix */
    int split_half;      /* 0: pair i is (2i, 2i + 1); 1: pair i is (i, i + rot_dim/2) */
    /* Optional RMSNorm first: D weights of a float dtype (NULL: none) and eps (finite). */
    const void *norm_weight; qmm_dtype norm_weight_dtype;
    float eps;
} qmm_rope_args;
#define QMM_ROPE_MAX_D 1024
/* Every field zero but the dtypes F32 and n {1, 1, 1}. */
qmm_rope_args qmm_rope_args_default(void);
/* Runs it on the context's threads (the rows split between them; the bits do not depend on the
 * thread count). Errors name the bad argument. One call at a time per context. */
qmm_status qmm_rope(qmm_context *ctx, const qmm_rope_args *args);

/* RMSNorm, then a modulation, per row of D values (SPEC §13): comfy-kitchen's rms_adaln
 * (out = x̂ · (1 + scale) + shift) and rms_gated_residual (out = residual + gate · x̂), each step
 * rounded to the dtype as torch does; x̂ = RMSNorm(x) with the optional weight. */
typedef enum qmm_rms_mod_kind {
    QMM_RMS_ADALN = 0,           /* a = scale, b = shift */
    QMM_RMS_GATED_RESIDUAL = 1   /* a = gate, b = residual */
} qmm_rms_mod_kind;
typedef struct qmm_rms_mod_args {
    /* x and out [n0, n1, n2, D], D >= 1, rows contiguous; every tensor of one float dtype. */
    int64_t n[3];
    int64_t D;
    qmm_dtype dtype;
    const void *x; int64_t x_stride[3];    /* strides in elements, >= 0 */
    void *out; int64_t out_stride[3];      /* every element its own address; overlaps no input */
    const void *norm_weight;               /* [D], or NULL: none */
    const void *a; int64_t a_stride[3];    /* [n0, n1, n2, D] read through its strides (0 repeats) */
    const void *b; int64_t b_stride[3];
    qmm_rms_mod_kind kind;
    float eps;                              /* finite */
} qmm_rms_mod_args;
/* Every field zero but dtype F32 and n {1, 1, 1}. */
qmm_rms_mod_args qmm_rms_mod_args_default(void);
/* Runs it on the context's threads (bits independent of the thread count); errors name the bad
 * argument. One call at a time per context. */
qmm_status qmm_rms_mod(qmm_context *ctx, const qmm_rms_mod_args *args);

#ifdef __cplusplus
}
#endif
#endif /* QMM_H */
