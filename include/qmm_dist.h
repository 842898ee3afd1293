/*
 * qmm_dist.h — tensor parallelism (SPEC §6): INT8 and W4A8 linear layers split across processes/hosts,
 * bit-identical to one process. Present only when libqmm was built with MPI (QMM_WITH_MPI is
 * then defined publicly by the build); without MPI these functions do not exist.
 *
 *   - qmm_comm: a small collective interface (struct of function pointers) with an MPI
 *     implementation; an NCCL/HCCL-style backend fills the same struct.
 *   - qmm_tp_linear: one layer split across the ranks of a communicator.
 *       column-parallel: rank r holds a slice of the output rows N (of each "part": 2 for a
 *         fc1 whose rows are [gate; up], 3 for [q; k; v]); every rank sees the full x; the
 *         outputs are all-gathered (or kept local for a following row-parallel layer).
 *       row-parallel: rank r holds a K-slice of W and the matching slice of x. Local amax per
 *         row → all-reduce MAX → shared s_r = qmm_scale_from_amax → local int8 GEMM to int32 →
 *         all-reduce SUM → the epilogue once, on every rank (every rank ends with the full y;
 *         cheaper than a broadcast of y). Needs an int8 engine (or REF by name).
 *   - qmm_tp_pair: a Megatron-style pair column → (local function) → row with no gather in
 *     between: an MLP (fc1 [gate; up] → swiglu → fc2) or attention (qkv → core → out_proj).
 *
 * Weights: each rank is handed the FULL int8 matrix [N, ld] (e.g. an mmapped checkpoint view)
 * and reads only its own rows (column) or columns (row) — so only its pages are touched — then
 * packs only its slice. Per-channel scales and bias are sliced accordingly. A W4A8 layer
 * (qmm_tp_layer) likewise: the rank copies its slice of the codes and group scales, no int8 copy.
 *
 * Collective discipline (no hang on errors): every create/run call is collective over the
 * communicator, and every rank always takes part in the same collectives, even after a local
 * failure. Ranks first exchange a fixed-size record (status, shapes, dtypes); if any rank
 * failed or ranks disagree (mismatched shard or shape, different M), EVERY rank returns an
 * error (QMM_ERR_DIST, or the shared error of a deterministic check such as QMM_ERR_UNSUPPORTED
 * for a K-slice that is not a multiple of the convrot group) whose message names the layer, the
 * rank and the reason. A rank that dies or never calls is not detected by qmm (the transport /
 * mpirun ends the job).
 *
 * Thread safety: a qmm_comm and the handles built on it are used by one thread at a time, and
 * all ranks must issue the same sequence of collective calls.
 */
#ifndef QMM_DIST_H
#define QMM_DIST_H

#include "qmm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- the collective interface */
typedef struct qmm_comm qmm_comm;
struct qmm_comm {
    int rank, size;
    const char *backend;   /* "mpi", ... */
    void *impl;            /* backend state */
    /* all in place over n elements; every rank calls with the same n */
    qmm_status (*allreduce_max_f32)(qmm_comm *c, float *buf, int64_t n);
    qmm_status (*allreduce_sum_i32)(qmm_comm *c, int32_t *buf, int64_t n); /* wraps mod 2^32 */
    /* all-gather with per-rank byte counts: rank r's `send` (counts[r] bytes) lands at
     * recv + displs[r] on every rank (recv may not overlap send) */
    qmm_status (*allgather)(qmm_comm *c, const void *send, void *recv, const size_t *counts, const size_t *displs);
    qmm_status (*broadcast)(qmm_comm *c, void *buf, size_t bytes, int root);
    qmm_status (*barrier)(qmm_comm *c);
    /* Ends every rank of the job (MPI_Abort). For tools; the library never calls it. */
    void (*abort)(qmm_comm *c, int code);
    void (*destroy)(qmm_comm *c);
};

/* An MPI communicator as a qmm_comm. mpi_comm points to an MPI_Comm (NULL: MPI_COMM_WORLD);
 * it is duplicated (errors return instead of aborting). MPI must be initialized by the caller
 * (MPI_Init / MPI_Init_thread) and finalized after qmm_comm_destroy. */
qmm_status qmm_comm_create_mpi(const void *mpi_comm, qmm_comm **out);
void       qmm_comm_destroy(qmm_comm *c); /* NULL-safe; calls c->destroy */

/* Collective: do all ranks pass the same n values (names[i] names vals[i] in messages)? Returns
 * QMM_OK on every rank, or QMM_ERR_DIST on every rank whose message names `what`, the first value
 * that differs and every rank's value of it (also when ranks pass different n, or a rank passes
 * invalid arguments). Call it before a sequence of collectives that the values drive (iteration
 * counts, M, engine, seed...), so a disagreement is an error instead of a hang. n <= QMM_AGREE_MAX;
 * strings can be agreed on through a hash. */
#define QMM_AGREE_MAX 32
qmm_status qmm_comm_agree_i64(qmm_comm *c, const char *what, int n, const char *const *names, const int64_t *vals);

/* ---------------------------------------------------------------- tensor-parallel layers */
typedef enum qmm_tp_kind {
    QMM_TP_COLUMN = 0,   /* split N (output rows of W) */
    QMM_TP_ROW = 1       /* split K (input columns of W) */
} qmm_tp_kind;

typedef struct qmm_tp_options {
    qmm_tp_kind kind;
    /* column only: W's rows are `parts` equal blocks ([gate; up] = 2, [q; k; v] = 3); rank r
     * takes the same slice of every block, so its local output is [part0_r | part1_r | ...].
     * 0 or 1: one block. */
    int parts;
    /* the split granularity in elements of the split dimension (per part); 0 = automatic:
     * the convrot group for row-parallel, else 1. A split is balanced in units. */
    int64_t unit;
    /* optional explicit split: size+1 offsets 0 = o[0] < o[1] < ... < o[size] = width (per
     * part width for column, K for row); rank r takes [o[r], o[r+1]). NULL: balanced. */
    const int64_t *split;
    /* 1: skip the weight fingerprint agreement of create (see qmm_tp_linear_create). Every rank
     * must pass the same value. */
    int no_fingerprint;
} qmm_tp_options;
qmm_tp_options qmm_tp_options_default(void); /* column, 1 part, automatic unit, no split */

typedef struct qmm_tp_linear qmm_tp_linear;

/* Collective. full describes the FULL weight [N, K] (data [N, ld], scale 1 or N values, bias N
 * values); every rank passes the same shapes (checked) and the same weight: a 64-bit fingerprint
 * of the full layer (shape, every scale, the bias, and the first/middle/last 32 bytes of up to 64
 * rows spread over N) is agreed on, and a rank handed a different weight (another checkpoint or
 * seed of the same shapes) makes create fail with QMM_ERR_DIST on every rank, naming the layer.
 * Apart from that sample (at most 192 spans of 32 bytes), only this rank's slice of the data is
 * read. */
qmm_status qmm_tp_linear_create(qmm_context *ctx, qmm_comm *comm, const qmm_weight_desc *full,
                                const qmm_tp_options *opt, qmm_tp_linear **out);

/* The FULL layer a tensor-parallel create is handed, in either of the formats qmm runs: an int8
 * layer (qmm_weight_desc) or a W4A8 / W6A8 one (qmm_w4a8_desc, SPEC §11). */
typedef enum qmm_tp_format { QMM_TP_INT8 = 0, QMM_TP_W4A8 = 1 } qmm_tp_format;
typedef struct qmm_tp_layer {
    qmm_tp_format format;
    qmm_weight_desc int8;   /* format QMM_TP_INT8 */
    qmm_w4a8_desc w4a8;     /* format QMM_TP_W4A8 */
} qmm_tp_layer;

/* Collective: qmm_tp_linear_create for either format. A W4A8 layer is split as an int8 one and
 * runs on each rank as a borrowed W4A8 weight (qmm_weight_borrow_w4a8) over the layer's own copy
 * of its slice — codes, s_rel, s_channel, codebook, bias: its share of the code bytes, no int8
 * weight — so the rank reads only its slice of the codes (and the fingerprint's sample), and the
 * caller may free the full layer after create. Each row's decoded int8 values are the full
 * layer's, so the outputs are bit-identical to one process running the full W4A8 weight.
 * Row-parallel W4A8: every K-slice holds whole s_rel groups, whole convrot groups and a multiple
 * of 16 k (32 at 6 bits); the automatic unit is their least common multiple, and an explicit
 * split or unit that cuts one fails on every rank with QMM_ERR_UNSUPPORTED naming the rank.
 * The full desc gets qmm_weight_borrow_w4a8's checks of its fields before anything is read, the
 * rank's slice its checks of the values (a NaN s_rel: QMM_ERR_DIST on every rank, naming it). */
qmm_status qmm_tp_linear_create_layer(qmm_context *ctx, qmm_comm *comm, const qmm_tp_layer *full,
                                      const qmm_tp_options *opt, qmm_tp_linear **out);
void qmm_tp_linear_destroy(qmm_tp_linear *L);

typedef struct qmm_tp_linear_info {
    qmm_tp_kind kind;
    int64_t N, K;           /* full shape */
    int64_t lo, hi;         /* this rank's slice of the split dimension (per part) */
    int parts;
    const qmm_weight *local;/* the packed local slice (N_r*parts rows or K_r columns) */
} qmm_tp_linear_info;
void qmm_tp_linear_get_info(const qmm_tp_linear *L, qmm_tp_linear_info *out);

enum {
    QMM_TP_X_FULL = 1u << 0,  /* row-parallel: args->x is the FULL x [M, K_in]; take my columns
                                 (with swiglu, my gate and up columns). Default: x is my local
                                 slice [M, K_r] ([gate_r | up_r] for swiglu). */
    QMM_TP_Y_LOCAL = 1u << 1  /* column-parallel: write only my slice [M, parts*N_r] to y (no
                                 gather). Default: y is the full [M, N] on every rank. */
};

/* Collective. args as for qmm_linear (M, x, y, dtypes, act, engine; y_dtype float — the
 * accumulators are exchanged internally). args->token_scales (optional) receives the shared
 * s_r. Returns the same status on every rank. */
qmm_status qmm_tp_linear_run(qmm_tp_linear *L, qmm_context *ctx, const qmm_linear_args *args, unsigned flags);

/* ---------------------------------------------------------------- column → row pairs */
/* The local function between the two layers of an attention pair: from this rank's slice of
 * the qkv output [M, 3*F_r] (ld_in) to its slice of the out_proj input [M, F_r] (ld_out), both
 * of dtype t. It must act per head (column-local), as attention does. */
typedef qmm_status (*qmm_tp_core_fn)(void *user, int64_t M, const void *in, int64_t ld_in, void *out,
                                     int64_t ld_out, int64_t F_r, qmm_dtype t);

typedef struct qmm_tp_pair_options {
    /* QMM_ACT_SWIGLU: MLP (first has rows [gate; up], N1 = 2F, second K = F, no core);
     * QMM_ACT_NONE with parts = 3 and a core: attention (first [q; k; v], N1 = 3F, second K = F) */
    qmm_act act;
    int parts;               /* 2 (MLP) or 3 (attention) */
    int64_t unit;            /* split granularity of F (head_dim for attention); 0 = 1. The
                                second layer's convrot group is folded in (lcm). */
    const int64_t *split;    /* optional explicit split of F (size+1 offsets) */
    qmm_tp_core_fn core;     /* attention core (NULL for the MLP) */
    void *core_user;
    int no_fingerprint;      /* 1: skip the weight fingerprint agreement (qmm_tp_options) */
} qmm_tp_pair_options;

typedef struct qmm_tp_pair qmm_tp_pair;
qmm_status qmm_tp_pair_create(qmm_context *ctx, qmm_comm *comm, const qmm_weight_desc *first,
                              const qmm_weight_desc *second, const qmm_tp_pair_options *opt, qmm_tp_pair **out);
/* Collective: qmm_tp_pair_create for layers of either format (each its own: an int8 fc1 and a
 * W4A8 fc2 pair as well). The split of F is balanced in units of the lcm of opt->unit and the
 * row-parallel K granularity of the second layer (qmm_tp_linear_create_layer). */
qmm_status qmm_tp_pair_create_layers(qmm_context *ctx, qmm_comm *comm, const qmm_tp_layer *first,
                                     const qmm_tp_layer *second, const qmm_tp_pair_options *opt, qmm_tp_pair **out);
void qmm_tp_pair_destroy(qmm_tp_pair *p);
/* Collective: y [M, N2] (full, every rank) = second(core_or_act(first(x))). x is the full
 * [M, K1] on every rank; the intermediate has dtype mid_dtype (F32/F16/BF16; as one process
 * would store it). engine: AUTO or a named int8 engine (REF for tests), used by both layers. */
qmm_status qmm_tp_pair_run(qmm_tp_pair *p, qmm_context *ctx, int64_t M, const void *x, qmm_dtype x_dtype,
                           int64_t ldx, qmm_dtype mid_dtype, void *y, qmm_dtype y_dtype, int64_t ldy,
                           qmm_engine_id engine);

/* ---------------------------------------------------------------- from a checkpoint */
struct qmm_model; /* qmm_io.h */
/* Fills *desc with the FULL int8 layer `layer` of an open model (qmm_io.h): data points into the
 * file's mapping (so a tensor-parallel create touches only this rank's pages), scale and bias are
 * small copies owned by *owned (release with qmm_tp_desc_release after the create). The desc's
 * name points into the model. Float or full-precision layers: QMM_ERR_UNSUPPORTED. */
qmm_status qmm_tp_desc_from_model(const struct qmm_model *m, const char *layer, qmm_weight_desc *desc, void **owned);
/* Either format (qmm_tp_layer): an int8 layer as qmm_tp_desc_from_model fills it; a W4A8 layer
 * (asym_w4a8_int8) with its codes in the file's mapping and copies of s_rel, s_channel, the
 * codebook and the bias owned by *owned, their values checked as qmm_model_check_layer checks
 * them. Float, full-precision or unsupported layers: QMM_ERR_UNSUPPORTED. */
qmm_status qmm_tp_layer_from_model(const struct qmm_model *m, const char *layer, qmm_tp_layer *out, void **owned);
void       qmm_tp_desc_release(void *owned); /* NULL-safe */

#ifdef __cplusplus
}
#endif
#endif /* QMM_DIST_H */
