/*
 * attention.h — the attention driver every attention engine runs under (SPEC §10): it splits a
 * call into tasks of one query head × one tile of query rows, gives each thread its scratch
 * from the context, has the engine pack each kv head once per thread (K and V in the engine's
 * operand layout, padded to whole key blocks with zeros), and calls the engine's tile kernel,
 * which runs the flash-attention loop over the key blocks for its rows: S = Q·Kᵀ on a block,
 * the softmax online in f32, O = O·α + P·V, and at the end out = O / l.
 *
 * Tasks: (b, kv head, query head of its group, tile), tile-major within a head; thread th of T
 * runs one contiguous share of that list, in order (the pool's task i, run on thread i mod T, is
 * list entry th·⌊n/T⌋ + min(th, n mod T) + ⌊i/T⌋), so a thread packs each kv head of its share
 * once and every output row
 * is computed by one task in one fixed order: the bits never depend on the thread count.
 * Scratch: per thread kv_bytes(Skv, D) + tile_bytes(D) — O(Skv · D), nothing of size S × Skv.
 * Sizes: every byte count is computed overflow-checked; an engine's kv_bytes returns SIZE_MAX
 * where the packed head's size is not representable (qmm_attn_blocks_bytes), and the driver
 * refuses a call whose per-thread scratch passes QMM_ATTN_MAX_SCRATCH (QMM_ERR_UNSUPPORTED naming
 * Skv and D) before it allocates or packs anything: k and v broadcast with stride 0 make Skv
 * any int64 without any memory behind it.
 * Key shift: the engines that quantize k (bf16, int8) subtract qmm_attn_key_mean's vector from
 * every key first; a vector subtracted from every key leaves each softmax row as it is.
 */
#ifndef QMM_ATTENTION_H
#define QMM_ATTENTION_H

#include "qmm_internal.h"

typedef struct qmm_attn_kernels {
    int64_t mq;      /* query rows per tile call (the last tile may have fewer) */
    /* bytes of one kv head packed (K and V, Skv keys of D values; SIZE_MAX where that overflows
     * size_t) and of a tile's own scratch (D <= QMM_ATTN_MAX_D: small) */
    size_t (*kv_bytes)(int64_t Skv, int64_t D);
    size_t (*tile_bytes)(int64_t D);
    /* k, v: row 0 of one kv head (token strides c->ks[2], c->vs[2]) → kv (kv_bytes, 64-aligned) */
    void (*pack_kv)(const qmm_attn_call *c, const void *k, const void *v, void *kv);
    /* rows (1..mq) query rows from q (token stride c->qs[2]) against the packed head kv; mask:
     * the first row's mask row (strides c->ms[2], c->ms[3]) or NULL; out: the first output row
     * (token stride c->os[2]); scratch: tile_bytes, 64-aligned. */
    void (*tile)(const qmm_attn_call *c, const void *kv, const void *q, int64_t rows, const void *mask,
                 void *out, void *scratch);
    /* optional, on each thread before its first task and after its last (AMX: LDTILECFG and
     * TILERELEASE) */
    void (*begin)(void);
    void (*end)(void);
} qmm_attn_kernels;

/* ceil(Skv / nk) · block_bytes + extra (Skv >= 1, nk >= 1), or SIZE_MAX where it overflows size_t */
static inline size_t qmm_attn_blocks_bytes(int64_t Skv, int64_t nk, size_t block_bytes, size_t extra) {
    const size_t blocks = (size_t)(Skv / nk) + (Skv % nk != 0);
    size_t b;
    if (!qmm_mul_ok(blocks, block_bytes, &b) || b > SIZE_MAX - extra) return SIZE_MAX;
    return b + extra;
}

/* The shift the bf16 and int8 engines subtract from every key of one kv head before rounding
 * (k: its row 0, token stride c->ks[2]): mean[0..D) = the mean of the keys whose every element
 * is finite, summed in f64 (no overflow for any f32 keys) and rounded to f32 once; 0 where no
 * key is finite. Non-finite keys (whose scores are NaN or ±Inf in every engine) and the keys
 * a mask excludes cannot move it out of the finite keys' range. Plain C; deterministic. */
void qmm_attn_key_mean(const qmm_attn_call *c, const void *k, float *mean);

/* The engines' micro-kernels take their row count as a constant (their accumulators then stay in
 * registers): QMM_ATTN_BY_ROWS(rows, K, ...) calls K(r, ...) with the constant r = rows, 1..6. */
#define QMM_ATTN_BY_ROWS(rows, K, ...)    \
    do {                                  \
        switch (rows) {                   \
        case 6: K(6, __VA_ARGS__); break; \
        case 5: K(5, __VA_ARGS__); break; \
        case 4: K(4, __VA_ARGS__); break; \
        case 3: K(3, __VA_ARGS__); break; \
        case 2: K(2, __VA_ARGS__); break; \
        default: K(1, __VA_ARGS__); break; \
        }                                 \
    } while (0)

/* Runs c with the engine's kernels k on ctx's threads. */
qmm_status qmm_attention_run(qmm_context *ctx, const qmm_attn_call *c, const qmm_attn_kernels *k);

#endif /* QMM_ATTENTION_H */
