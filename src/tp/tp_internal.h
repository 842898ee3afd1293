/*
 * tp_internal.h — what the tensor-parallel files share: the fixed-size agreement record every
 * rank exchanges before any collective whose size depends on the call (so that a failed or
 * mismatched rank turns into the same error on every rank instead of a hang), the split of a
 * dimension across ranks, and a run entry that carries a failure from before the call.
 */
#ifndef QMM_TP_INTERNAL_H
#define QMM_TP_INTERNAL_H

#include "qmm_dist.h"
#include "qmm_internal.h"

/* One rank's view of a create/run call. Fields that must agree are compared with rank 0's. */
typedef struct tp_rec {
    int32_t status;          /* this rank's local status so far (QMM_OK or the error) */
    int32_t kind, parts, gs, per_channel, has_bias, x_dtype, y_dtype, act, flags;
    int32_t format, group;   /* create: 0 int8, else the W4A8 code bits (+16 F32 s_rel, +32 a codebook);
                                the s_rel group (0 int8) */
    int64_t N, K, M, unit, split_hash;
    int64_t fingerprint;     /* create: tp_fingerprint of the full layer (0: not checked) */
    char msg[200];           /* this rank's error message when status != QMM_OK */
} tp_rec;

/* Fills status/msg of r from st (and qmm_last_error()). */
void tp_rec_status(tp_rec *r, qmm_status st);

/* Collective: all-gathers rec (all = comm->size records of scratch; cnt/dsp = comm->size
 * size_t of scratch, or NULL to allocate them). Returns QMM_OK on every rank, or QMM_ERR_DIST
 * on every rank naming the layer, the first failing / disagreeing rank and its reason.
 * what: "create" / "run" for messages. */
qmm_status tp_agree(qmm_comm *comm, const char *layer, const char *what, const tp_rec *rec, tp_rec *all,
                    size_t *cnt, size_t *dsp);

/* Deterministic split of [0, width) over `size` ranks into off[0..size]: the explicit split if
 * given (validated), else balanced in units of `unit`. Same result/error on every rank. */
qmm_status tp_split(const char *layer, const char *dim, int64_t width, int64_t unit, const int64_t *split, int size,
                    int64_t *off);
int64_t tp_split_hash(const int64_t *split, int size);

/* A cheap 64-bit fingerprint (never 0) of the FULL layer every rank is handed: N, K, the scale
 * layout and every scale's bits, convrot group, the bias dtype and bytes, and a sample of the
 * int8 data — up to 64 rows spread over N, in each the first, middle and last (up to) 32 bytes
 * — at positions that depend only on the shape, so every rank reads the same bytes (at most
 * 192 spans of 32 bytes beyond its own slice). Equal on every rank that loaded the same layer;
 * checkpoints or seeds that differ give different scales (and sampled bytes), so a mismatch is
 * found at create. */
int64_t tp_fingerprint(const qmm_weight_desc *d);
/* The same for either format: a W4A8 layer's head (shape, bits, group, dtypes, convrot), every
 * s_channel, the codebook and the bias, and the same sample of rows, each its first, middle and
 * last (up to) 32 bytes of codes and of s_rel. */
int64_t tp_fingerprint_layer(const qmm_tp_layer *l);

/* A full layer's fields that do not depend on its format (l->format checked by the caller). */
static inline const char *tp_layer_name(const qmm_tp_layer *l) {
    const char *n = l->format == QMM_TP_W4A8 ? l->w4a8.name : l->int8.name;
    return n && *n ? n : "(unnamed)";
}
static inline int64_t tp_layer_N(const qmm_tp_layer *l) { return l->format == QMM_TP_W4A8 ? l->w4a8.N : l->int8.N; }
static inline int64_t tp_layer_K(const qmm_tp_layer *l) { return l->format == QMM_TP_W4A8 ? l->w4a8.K : l->int8.K; }
static inline int tp_layer_gs(const qmm_tp_layer *l) {
    return l->format == QMM_TP_W4A8 ? l->w4a8.convrot_gs : l->int8.convrot_gs;
}
/* What every row-parallel K-slice must be a multiple of: the convrot group (1 without); for a
 * W4A8 layer also the s_rel group and the 16 (6 bits: 32) k of a storage step. */
int64_t tp_row_unit(const qmm_tp_layer *l);
int64_t tp_lcm(int64_t a, int64_t b);

/* qmm_tp_linear_run with a failure that happened before the call on this rank (prior !=
 * QMM_OK: the rank does no local work but takes part in every collective). */
qmm_status tp_linear_run_ex(qmm_tp_linear *L, qmm_context *ctx, const qmm_linear_args *args, unsigned flags,
                            qmm_status prior);

/* grow-only scratch buffer */
qmm_status tp_grow(void **buf, size_t *have, size_t need);

#endif
