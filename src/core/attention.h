/*
 * attention.h — the attention driver every attention engine but the reference runs under (SPEC
 * §10), and the contract of the engines' ukernels. The driver (attention.c) splits a call into
 * tasks of one query head × one tile of query rows, gives each thread its scratch from the
 * context, has the engine pack each kv head once per thread (pack_kv: K and V blocks in the
 * engine's operand layout, padded to whole key blocks with zeros) and runs the flash-attention
 * loop of each tile itself: pack_q per query row; per key block S = qk per group of <= mr rows,
 * the frame's softmax ukernel on ⌊16 / mr⌋ groups at once (per row the block max bm,
 * P = 2^(s − bm) and the online softmax's state m, l, α, ps in f32), then O = pv (O·α + ps·P·V)
 * per group; at the end
 * out = O / l in out's dtype (0 where l = 0: every key masked; NaN where l is NaN: an unmasked
 * NaN score).
 *
 * Tasks: (b, kv head, query head of its group, tile), tile-major within a head; thread th of T
 * runs one contiguous share of that list, in order (the pool's task i, run on thread i mod T, is
 * list entry th·⌊n/T⌋ + min(th, n mod T) + ⌊i/T⌋), so a thread packs each kv head of its share
 * once and every output row is computed by one task in one fixed order: the bits never depend on
 * the thread count.
 * Scratch: per thread the packed head (O(Skv · D)) + a tile's rows (Q, S, P, O, the row state,
 * the engine's ws: O(mq · (D + nk))), nothing of size S × Skv. With fewer kv heads (B · Hkv)
 * than threads, every kv head is packed once, by one task each, into a slot all threads read,
 * before the tiles run (the same bytes as a thread's own packing: the bits do not change), so a
 * call on one head of a long video holds one packed head, not one per thread.
 * Sizes: every byte count is computed overflow-checked; qmm_attn_blocks_bytes gives SIZE_MAX
 * where the packed head's size is not representable, and the driver refuses a call whose
 * per-thread scratch passes QMM_ATTN_MAX_SCRATCH (QMM_ERR_UNSUPPORTED naming Skv and D) before
 * it allocates or packs anything: k and v broadcast with stride 0 make Skv any int64 without any
 * memory behind it.
 * Key shift: the engines that quantize k (bf16, int8) subtract qmm_attn_key_mean's vector from
 * every key first; a vector subtracted from every key leaves each softmax row as it is.
 */
#ifndef QMM_ATTENTION_H
#define QMM_ATTENTION_H

#include "qmm_internal.h"

/* ---------------------------------------------------------------- the ukernel contract
 * An attention engine is a const qmm_attn_ukernels (its row in qmm_engine_ops): named ukernels
 * per operand kind (ukernels.h) and the sizes of its operands. The driver (attention.c) owns
 * everything else: tasks, scratch, the key-block loop, the rows' online-softmax state (m, l, α,
 * ps: arrays the softmax ukernel updates) and the output's store (O / l in out's dtype).
 *
 * Scores are in base 2: s = log2(e) · scale · q·k, so p = 2^(s − m). Per key block of nk keys
 * and group of query rows, the softmax ukernel (the frame's, by SIMD level and P kind) finds
 * each row's block max bm, writes P = 2^(s − bm) in the engine's P kind and sets the row's
 * m' = max(m, bm), α = 2^(m − m'), ps = 2^(bm − m'), l = l·α + ps·Σ P, m = m'; the P·V
 * ukernel then adds ps·P·V to O·α. One of α and ps is 1.
 *
 * The packed kv head (pack_kv writes it, per thread, once per kv head): nblk = ceil(Skv / nk)
 * K blocks of kb_bytes(D), then nblk V blocks of vb_bytes(D), then extra_bytes(D) of the
 * engine's own (int8: the keys' mean); each block 64-byte aligned (the sizes are multiples of
 * 64); keys past Skv are zero (their scores the softmax ignores: lanes past nv are −inf).
 * Rows: O [mq][Dp] f32 with Dp = D rounded up to dalign; Q [mq'][q_bytes(D)], P [mq'][nk] in
 * P's kind, S [mq'][nk] f32, mq' = mq rounded up to mr. The driver calls qk and pv on groups of
 * rows <= mr and the softmax on up to ⌊16 / mr⌋ of them at once (per key block: qk on each
 * group of ⌊16 / mr⌋·mr rows, then the softmax on them; then pv on each group; each row's
 * numbers are the same whatever the grouping); where pad_rows is set it zeroes Q and P rows past
 * a tile's last row, softmax gets the tile's rows only, and qk and pv may compute (not store
 * into O) all mr rows of a group.
 * The row state: the driver sets m = −inf, l = 0 at a tile's start; out = O / l at its end, 0
 * where l = 0 (every key so far masked), NaN where l is NaN (an unmasked NaN score). */
typedef enum qmm_attn_p_kind { QMM_ATTN_P_F32, QMM_ATTN_P_BF16, QMM_ATTN_P_U8 } qmm_attn_p_kind;

/* One kv head (k, v: its row 0, token strides c->ks[2], c->vs[2]) → kv, laid out as above.
 * live: NULL where every key takes part, else live[j] != 0 for the keys j < Skv that some query
 * row of the call attends (qmm_attn_live_keys); the numbers pack_kv forms across keys (the key
 * shift, a block's V scales) read the live keys only, so a key the mask excludes from every row
 * cannot move any output (its own codes still pack: its scores are masked, its P is 0). */
typedef void (*qmm_attn_pack_kv_fn)(const qmm_attn_call *c, const void *k, const void *v, const uint8_t *live, void *kv);
/* One query row (q: the row, in c->q_dtype) → Q (q_bytes(D)) and *sq, the row's score factor:
 * the row's scores are sq · (the engine's product of Q and a key) — log2(e) · c->scale times the
 * row's quantization scale where Q is quantized; NaN where the row holds a non-finite value and
 * the engine quantizes q. */
typedef void (*qmm_attn_pack_q_fn)(const qmm_attn_call *c, const void *q, void *Q, float *sq);
/* S[i][0..nk) = sq[i] · Q[i]·K[j] (times the key's scale where K is quantized), i < rows, for
 * the K block kblk; Q: rows rows of q_bytes(D); S: row stride nk floats. */
typedef void (*qmm_attn_qk_fn)(int rows, const void *Q, const float *sq, const void *kblk, int64_t D, float *S);
/* A group of rows (1..16) of one key block: S [rows][nk] their scores (row stride nk), of which
 * the first nv (1..nk) are keys j0.. (lanes past nv: −inf, whatever S holds); mask: the first
 * row's mask at key j0 (rows c->ms[2], keys c->ms[3] elements apart; additive in base e, or
 * bool) or NULL. Per row i: bm = the max of its masked scores (−inf where every key is masked),
 * P[i] (nk values of the P kind, row stride nk) = 2^(s − bm) (u8: U(s − bm)), Σ = Σ P[i] in
 * units of 1 (f32, bf16: summed from the f32 values; u8: (float)(Σ pq, an exact integer) ·
 * (1/255 in f32), one rounding); then its state (m[i], l[i] in and out; alpha[i], ps[i] out):
 *   a NaN score no bool mask excludes (Σ NaN; P 0), or l NaN from an earlier block, or (u8 P)
 *   bm = +inf (+inf − +inf; P 0): l = NaN, m as it was, α = 1, ps = 0;
 *   else every key masked (bm = −inf): m and l as they were, α = 1, ps = 0, P 0;
 *   else m' = max(m, bm), α = (m' = m ? 1 : E(m − m')), ps = (m' = bm ? 1 : E(bm − m')),
 *   l = l·α + ps·Σ (each product and the sum rounded to f32: no FMA), m = m'.
 * E(x) (x <= 0): 2^n · q(f), n = −trunc(0.5 − x) (0.5 − x rounded to f32), f = x − n, q the
 * softmax's degree-5 polynomial of 2^f, QMM_ATTN_E_C5·f⁵ + … + QMM_ATTN_E_C0 (relative error
 * 8e-8 on |f| <= 1/2; the f32 and bf16 P take it with FMA), evaluated in Horner form, one f32
 * product and one f32 sum per step (no FMA), times 2^n; 0 where x < −126 or x is −inf.
 * U(x) (x <= 0 or −inf; the u8 P): x' = max(x, −16) (f32; −inf → −16), n = x' rounded to the
 * nearest integer (ties to even), f = x' − n (exact), q = ((C3·f + C2)·f + C1)·f + C0 with
 * each step one FMA (one rounding), C0..C3 = QMM_ATTN_U8_C0..C3 (255 · 2^f on |f| <= 1/2,
 * relative error 7.6e-5: 0.02 of P's step), U = q · 2^n (exact) rounded to the nearest integer
 * (ties to even), in 0..255. */
#define QMM_ATTN_E_C0 1.0000001192092896f
#define QMM_ATTN_E_C1 0.6931469440460205f
#define QMM_ATTN_E_C2 0.24022121727466583f
#define QMM_ATTN_E_C3 0.05550742521882057f
#define QMM_ATTN_E_C4 0.009675469249486923f
#define QMM_ATTN_E_C5 0.001326697994954884f
#define QMM_ATTN_U8_XMIN (-16.0f)/* 255 · 2^-16 rounds to 0 */
#define QMM_ATTN_U8_C0 254.9815216064453f
#define QMM_ATTN_U8_C1 176.7815704345703f
#define QMM_ATTN_U8_C2 61.86748123168945f
#define QMM_ATTN_U8_C3 14.06940746307373f
typedef void (*qmm_attn_softmax_fn)(const qmm_attn_call *c, int rows, const float *S, int64_t nk, int64_t nv,
                                    const void *mask, void *P, float *m, float *l, float *alpha, float *ps);
/* O[i][0..Dp) = O[i]·alpha[i] + ps[i] · Σ_j P[i][j]·V[j] (times V's scales where V is
 * quantized; u8 P: its 1/255 included), i < rows, for the V block vblk; P: row stride nk
 * values, O: row stride Dp; ws: ws_bytes of the thread's own, 64-aligned. */
typedef void (*qmm_attn_pv_fn)(int rows, const void *P, const float *ps, const float *alpha, const void *vblk,
                               int64_t D, float *O, void *ws);

typedef struct qmm_attn_ukernels {
    const char *name;          /* how QMM_VERBOSE and the tester name it */
    qmm_attn_p_kind p;
    int mr;                    /* rows per qk, softmax and pv call, <= 16 */
    int pad_rows;              /* see above (AMX: 16-row tiles) */
    int64_t nk, mq, dalign;    /* keys per block; query rows per task; O's row multiple */
    int live_keys;             /* pack_kv forms numbers across keys (a key shift, V block scales):
                                  the driver gives it the live keys of a masked call */
    size_t (*kb_bytes)(int64_t D), (*vb_bytes)(int64_t D), (*extra_bytes)(int64_t D), (*q_bytes)(int64_t D);
    size_t ws_bytes;
    qmm_attn_pack_kv_fn pack_kv;
    qmm_attn_pack_q_fn pack_q;
    qmm_attn_qk_fn qk;
    qmm_attn_softmax_fn softmax;
    qmm_attn_pv_fn pv;
    void (*begin)(void), (*end)(void);  /* optional, per thread around its tasks (AMX tiles) */
} qmm_attn_ukernels;

/* ceil(Skv / nk) · block_bytes + extra (Skv >= 1, nk >= 1), or SIZE_MAX where it overflows size_t */
static inline size_t qmm_attn_blocks_bytes(int64_t Skv, int64_t nk, size_t block_bytes, size_t extra) {
    const size_t blocks = (size_t)(Skv / nk) + (Skv % nk != 0);
    size_t b;
    if (!qmm_mul_ok(blocks, block_bytes, &b) || b > SIZE_MAX - extra) return SIZE_MAX;
    return b + extra;
}

/* The keys of kv head hk of batch b that some query row of the call attends (c->mask set):
 * live[j] = 1 where a row of a query head of the kv head's group has a bool mask value other
 * than 0 or an additive one other than −inf at key j (NaN included: it makes its row NaN), else
 * 0. Reads each distinct mask row once (a stride 0 broadcasts) and stops once every key is live.
 * Returns the number of keys that are not live. Plain C; deterministic. */
int64_t qmm_attn_live_keys(const qmm_attn_call *c, int64_t b, int64_t hk, uint8_t *live);

/* The shift the bf16 and int8 engines subtract from every key of one kv head before rounding
 * (k: its row 0, token stride c->ks[2]): mean[0..D) = the mean of the keys that are live (live
 * NULL: every key) and whose every element is finite, summed in f64 (no overflow for any f32
 * keys) and rounded to f32 once; 0 where no such key. Non-finite keys (whose scores are NaN or
 * ±Inf in every engine) and the keys a mask excludes from every row cannot move it; a key that
 * only some rows attend moves it within the finite keys' range. Plain C; deterministic. */
void qmm_attn_key_mean(const qmm_attn_call *c, const void *k, const uint8_t *live, float *mean);

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

/* Runs c (admitted by the engine, validated) with the engine's ukernels u on ctx's threads;
 * QMM_ERR_CANCELLED where qmm_cancel stopped it between key blocks (out undefined). */
qmm_status qmm_attention_run(qmm_context *ctx, const qmm_attn_call *c, const qmm_attn_ukernels *u);

#endif /* QMM_ATTENTION_H */
