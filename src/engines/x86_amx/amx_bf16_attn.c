/*
 * amx_bf16_attn.c — attention on amx_bf16 (SPEC §10): QKᵀ and P·V on the tiles (TDPBF16PS: q, k,
 * p and v rounded to bf16, nearest even; products exact, sums in f32), the online softmax in f32
 * with AVX-512 (core/attention_avx512.h), under the attention driver (core/attention.h).
 * Refuses mode f32. Compiled twice, as amx_kernel.h says: for dispatch, and with
 * -DQMM_AMX_EMULATE for tests/test_amx_emulated (every symbol then ends in _emu).
 *
 * Packed kv head: qmm_za_pack_kv_bf16 with Dp = D rounded up to 32 (a whole number of 64-byte
 * A-tile rows of q): K blocks [Dp/2][64][2], V blocks [32][Dp][2].
 * Tiles (the 2×2 plan's configuration of amx_kernel.h, every tile 16 rows × 64 bytes, loaded once
 * per thread by the driver's begin hook):
 *   QKᵀ, per 16 query rows and block of 64 keys:  tmm0..3 = S of keys 0-15, ..., 48-63;
 *     per 32 of D: tmm4 = q (16 rows × 32 bf16, row stride Dp·2), tmm6/7 = K (16 d-pairs × 16
 *     keys, row stride 256 bytes), 4 TDPBF16PS; S stored [16][64] f32.
 *   P·V, per 16 query rows and 64 of D:            tmm0..3 = 16 rows × 16 of D each;
 *     tmm4, tmm5 = p of keys 0-31 and 32-63 (row stride 128 bytes), tmm6/7 = V (16 key pairs ×
 *     16 of D, row stride Dp·4 bytes), 8 TDPBF16PS; then O = O·alpha + the tiles (AVX-512).
 * A tile of fewer than 16 rows runs on zero q rows and zero p rows past its end (the tiles stay
 * 16 × 64); nothing past the tile's rows is stored.
 */
#include "amx_kernel.h"
#include "attention_avx512.h"

const char *QMM_AMX_SYM(qmm_amx_bf16_attn_admit)(const qmm_attn_call *c, char *why, size_t n);
qmm_status QMM_AMX_SYM(qmm_amx_bf16_attn_run)(qmm_context *ctx, const qmm_attn_call *c);

const char *QMM_AMX_SYM(qmm_amx_bf16_attn_admit)(const qmm_attn_call *c, char *why, size_t n) {
    (void)why; (void)n;
    if (c->mode == QMM_ATTN_F32) return "mode f32: this engine rounds q, k, v and p to bf16";
    return NULL;
}

#ifdef QMM_AMX_KERNELS

#define NK QMM_ZA_NK

static int64_t dp_of(int64_t D) { return qmm_round_up(D, 32); }
static size_t kv_bytes(int64_t Skv, int64_t D) { return qmm_attn_blocks_bytes(Skv, NK, (size_t)(2 * dp_of(D) * NK) * 2, 0); }
static size_t tile_bytes(int64_t D) { return qmm_za_tile_bytes(dp_of(D)); }

static void pack_kv(const qmm_attn_call *c, const void *k, const void *v, void *kv) {
    qmm_za_pack_kv_bf16(c, k, v, kv, dp_of(c->D));
}

/* S rows [g0, g0+16) × the block's 64 keys = Q · Kᵀ */
static void qk16(const uint16_t *Q, int64_t Dp, const uint16_t *Kb, float *S) {
    QMM_TILE_ZERO(QMM_TC00);
    QMM_TILE_ZERO(QMM_TC01);
    QMM_TILE_ZERO(QMM_TC10);
    QMM_TILE_ZERO(QMM_TC11);
    for (int64_t dc = 0; dc < Dp / 32; dc++) {
        const uint16_t *kp = Kb + dc * 16 * NK * 2;
        QMM_TILE_LOAD(QMM_TA0, Q + dc * 32, Dp * 2);
        QMM_TILE_LOAD(QMM_TB0, kp, NK * 4);
        QMM_TDPBF16PS(QMM_TC00, QMM_TA0, QMM_TB0);
        QMM_TILE_LOAD(QMM_TB1, kp + 32, NK * 4);
        QMM_TDPBF16PS(QMM_TC01, QMM_TA0, QMM_TB1);
        QMM_TILE_LOAD(QMM_TB0, kp + 64, NK * 4);
        QMM_TDPBF16PS(QMM_TC10, QMM_TA0, QMM_TB0);
        QMM_TILE_LOAD(QMM_TB1, kp + 96, NK * 4);
        QMM_TDPBF16PS(QMM_TC11, QMM_TA0, QMM_TB1);
    }
    QMM_TILE_STORE(QMM_TC00, S, NK * 4);
    QMM_TILE_STORE(QMM_TC01, S + 16, NK * 4);
    QMM_TILE_STORE(QMM_TC10, S + 32, NK * 4);
    QMM_TILE_STORE(QMM_TC11, S + 48, NK * 4);
}

/* O rows [g0, g0 + rows) (rows <= 16) = O·alpha + P · V over the block, 64 of D at a time */
static void pv16(const uint16_t *P, const uint16_t *Vb, float *O, const float *alpha, int64_t rows, int64_t Dp,
                 float *blk) {
    QMM_TILE_LOAD(QMM_TA0, P, NK * 2);
    QMM_TILE_LOAD(QMM_TA1, P + 32, NK * 2);
    for (int64_t dq = 0; dq < Dp; dq += 64) {
        const int nz = Dp - dq >= 64 ? 4 : (int)((Dp - dq) / 16);
        /* the tile numbers are immediates: one branch per tile */
        QMM_TILE_ZERO(QMM_TC00);
        QMM_TILE_ZERO(QMM_TC01);
        if (nz > 2) QMM_TILE_ZERO(QMM_TC10);
        if (nz > 3) QMM_TILE_ZERO(QMM_TC11);
        for (int kh = 0; kh < 2; kh++) {
            const uint16_t *vp = Vb + (kh * 16 * Dp + dq) * 2;
            QMM_TILE_LOAD(QMM_TB0, vp, Dp * 4);
            if (kh == 0) QMM_TDPBF16PS(QMM_TC00, QMM_TA0, QMM_TB0); else QMM_TDPBF16PS(QMM_TC00, QMM_TA1, QMM_TB0);
            QMM_TILE_LOAD(QMM_TB1, vp + 32, Dp * 4);
            if (kh == 0) QMM_TDPBF16PS(QMM_TC01, QMM_TA0, QMM_TB1); else QMM_TDPBF16PS(QMM_TC01, QMM_TA1, QMM_TB1);
            if (nz > 2) {
                QMM_TILE_LOAD(QMM_TB0, vp + 64, Dp * 4);
                if (kh == 0) QMM_TDPBF16PS(QMM_TC10, QMM_TA0, QMM_TB0); else QMM_TDPBF16PS(QMM_TC10, QMM_TA1, QMM_TB0);
            }
            if (nz > 3) {
                QMM_TILE_LOAD(QMM_TB1, vp + 96, Dp * 4);
                if (kh == 0) QMM_TDPBF16PS(QMM_TC11, QMM_TA0, QMM_TB1); else QMM_TDPBF16PS(QMM_TC11, QMM_TA1, QMM_TB1);
            }
        }
        QMM_TILE_STORE(QMM_TC00, blk, 64 * 4);
        QMM_TILE_STORE(QMM_TC01, blk + 16, 64 * 4);
        if (nz > 2) QMM_TILE_STORE(QMM_TC10, blk + 32, 64 * 4);
        if (nz > 3) QMM_TILE_STORE(QMM_TC11, blk + 48, 64 * 4);
        for (int64_t r = 0; r < rows; r++) {
            const __m512 a = _mm512_set1_ps(alpha[r]);
            float *o = O + r * Dp + dq;
            for (int z = 0; z < nz; z++)
                _mm512_storeu_ps(o + 16 * z, _mm512_fmadd_ps(_mm512_loadu_ps(o + 16 * z), a, _mm512_loadu_ps(blk + r * 64 + 16 * z)));
        }
    }
}

static void tile(const qmm_attn_call *c, const void *kv, const void *q, int64_t rows, const void *mask, void *out,
                 void *scratch) {
    const int64_t Dp = dp_of(c->D), nblk = (c->Skv + NK - 1) / NK, R = qmm_round_up(rows, 16);
    const qmm_za_tile t = qmm_za_tile_of(scratch, Dp);
    uint16_t *Q = t.Q, *P = (uint16_t *)t.P;
    for (int64_t i = 0; i < R; i++) {
        if (i < rows) qmm_za_load_q(c, q, i, Q, Dp, 1);
        else for (int64_t d = 0; d < Dp; d++) Q[i * Dp + d] = 0;
        for (int64_t d = 0; d < NK; d++) P[i * NK + d] = 0;
        for (int64_t d = 0; d < Dp; d += 16) _mm512_storeu_ps(t.O + i * Dp + d, _mm512_setzero_ps());
        t.m[i] = -INFINITY;
        t.l[i] = 0.0f;
    }
    const uint16_t *K = kv, *V = (const uint16_t *)kv + nblk * Dp * NK;
    for (int64_t kb = 0; kb < nblk; kb++) {
        const int64_t j0 = kb * NK, nv = c->Skv - j0 < NK ? c->Skv - j0 : NK;
        for (int64_t g = 0; g < R; g += 16) qk16(Q + g * Dp, Dp, K + kb * Dp * NK, t.S + g * NK);
        for (int64_t i = 0; i < rows; i++) qmm_za_softmax(c, &t, i, j0, nv, mask, 1);
        for (int64_t g = 0; g < R; g += 16)
            pv16(P + g * NK, V + kb * NK * Dp, t.O + g * Dp, t.alpha + g, rows - g < 16 ? rows - g : 16, Dp, t.blk);
    }
    for (int64_t i = 0; i < rows; i++) qmm_za_store(c, &t, i, out);
}

static void tiles_begin(void) { QMM_AMX_SYM(qmm_amx_tiles_config)(16, 16); }
static void tiles_end(void) { QMM_AMX_SYM(qmm_amx_tiles_release)(); }

static const qmm_attn_kernels kernels = {.mq = QMM_ZA_MQ, .kv_bytes = kv_bytes, .tile_bytes = tile_bytes,
                                         .pack_kv = pack_kv, .tile = tile, .begin = tiles_begin, .end = tiles_end};

qmm_status QMM_AMX_SYM(qmm_amx_bf16_attn_run)(qmm_context *ctx, const qmm_attn_call *c) {
    return qmm_attention_run(ctx, c, &kernels);
}

#else /* built without AMX compiler support */
qmm_status QMM_AMX_SYM(qmm_amx_bf16_attn_run)(qmm_context *ctx, const qmm_attn_call *c) {
    (void)ctx; (void)c;
    return qmm_fail(QMM_ERR_UNSUPPORTED_HARDWARE, "attention: amx_bf16 was not built (compiler lacks AMX)");
}
#endif
