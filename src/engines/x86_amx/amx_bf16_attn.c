/*
 * amx_bf16_attn.c — attention on amx_bf16 (SPEC §10): QKᵀ and P·V on the tiles (TDPBF16PS: q, k,
 * p and v rounded to bf16, nearest even; products exact, sums in f32): its ukernels under the
 * attention driver (core/attention.h), 16 rows per group (pad_rows), the frame's bf16 softmax
 * (qmm_attn_softmax_bf16__avx512), its descriptor qmm_amx_bf16_attn (amx_kernel.h).
 * Refuses mode f32. Compiled twice, as amx_kernel.h says: for dispatch, and with
 * -DQMM_AMX_EMULATE for tests/test_amx_emulated (every symbol then ends in _emu).
 *
 * Packed kv head: qmm_za_pack_kv_bf16 with Dp = D rounded up to 32 (a whole number of 64-byte
 * A-tile rows of q): K blocks [Dp/2][64][2], V blocks [32][Dp][2]. Q: bf16 [Dp]; sq = log2(e) ·
 * scale.
 * Tiles (the 2×2 plan's configuration of amx_kernel.h, every tile 16 rows × 64 bytes, loaded once
 * per thread by the driver's begin hook):
 *   QKᵀ, per 16 query rows and block of 64 keys:  tmm0..3 = S of keys 0-15, ..., 48-63;
 *     per 32 of D: tmm4 = q (16 rows × 32 bf16, row stride Dp·2), tmm6/7 = K (16 d-pairs × 16
 *     keys, row stride 256 bytes), 4 TDPBF16PS; S stored [16][64] f32, then S = sq · S (AVX-512).
 *   P·V, per 16 query rows and 64 of D:            tmm0..3 = 16 rows × 16 of D each;
 *     tmm4, tmm5 = p of keys 0-31 and 32-63 (row stride 128 bytes), tmm6/7 = V (16 key pairs ×
 *     16 of D, row stride Dp·4 bytes), 8 TDPBF16PS, stored to ws [16][64] f32; then
 *     O = O·alpha + ps · ws (AVX-512).
 * A group of fewer than 16 rows runs on the zero q rows and zero p rows the driver puts past its
 * end (pad_rows: the tiles stay 16 × 64); nothing past the group's rows is stored into O.
 */
#include "amx_kernel.h"
#include "avx512/attention_avx512.h"
#include "ukernels.h"

const char *QMM_AMX_SYM(qmm_amx_bf16_attn_admit)(const void *call, char *why, size_t n) {
    const qmm_attn_call *c = call;
    (void)why; (void)n;
    if (c->mode == QMM_ATTN_F32) return "mode f32: this engine rounds q, k, v and p to bf16";
    return NULL;
}

#ifdef QMM_AMX_KERNELS

#define NK QMM_ZA_NK

static int64_t dp_of(int64_t D) { return qmm_round_up(D, 32); }
static size_t kb_bytes(int64_t D) { return (size_t)(dp_of(D) * NK) * 2; }
static size_t q_bytes(int64_t D) { return (size_t)dp_of(D) * 2; }

void QMM_AMX_SYM(qmm_bf16_attn_pack_kv__amx)(const qmm_attn_call *c, const void *k, const void *v, const uint8_t *live,
                                             void *kv) {
    qmm_za_pack_kv_bf16(c, k, v, live, kv, dp_of(c->D));
}

void QMM_AMX_SYM(qmm_bf16_attn_pack_q__amx)(const qmm_attn_call *c, const void *q, void *Q, float *sq) {
    qmm_za_pack_q(c, q, Q, sq, dp_of(c->D), 1);
}

/* S[0..16) × the block's 64 keys = sq · Q · Kᵀ (all 16 rows; rows: how many are the group's) */
void QMM_AMX_SYM(qmm_bf16_attn_qk_ukernel_16x64__amx)(int rows, const void *Qv, const float *sq, const void *kblk,
                                                      int64_t D, float *S) {
    (void)rows;
    const int64_t Dp = dp_of(D);
    const uint16_t *Q = Qv, *Kb = kblk;
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
    for (int r = 0; r < 16; r++) {
        const __m512 f = _mm512_set1_ps(sq[r]);
        for (int z = 0; z < 4; z++) _mm512_storeu_ps(S + r * NK + 16 * z, _mm512_mul_ps(_mm512_loadu_ps(S + r * NK + 16 * z), f));
    }
}

/* O rows [0, rows) (rows <= 16) = O·alpha + ps · P · V over the block, 64 of D at a time */
void QMM_AMX_SYM(qmm_bf16_attn_pv_ukernel_16x64__amx)(int rows, const void *Pv, const float *ps, const float *alpha,
                                                      const void *vblk, int64_t D, float *O, void *ws) {
    const int64_t Dp = dp_of(D);
    const uint16_t *P = Pv, *Vb = vblk;
    float *blk = ws;
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
        for (int r = 0; r < rows; r++) {
            __m512 acc[4];
            for (int z = 0; z < nz; z++) acc[z] = _mm512_loadu_ps(blk + r * 64 + 16 * z);
            qmm_za_pv_store(O + r * Dp + dq, acc, nz, alpha[r], ps[r]);
        }
    }
}

static void tiles_begin(void) { QMM_AMX_SYM(qmm_amx_tiles_config)(16, 16); }
static void tiles_end(void) { QMM_AMX_SYM(qmm_amx_tiles_release)(); }

const qmm_attn_ukernels QMM_AMX_SYM(qmm_amx_bf16_attn) = {
    .name = "amx_bf16 (bf16 tiles 16x64, bf16 P)", .p = QMM_ATTN_P_BF16, .mr = 16, .pad_rows = 1, .nk = NK,
    .mq = QMM_ZA_MQ, .dalign = 32, .live_keys = 1, .kb_bytes = kb_bytes, .vb_bytes = kb_bytes, .q_bytes = q_bytes,
    .ws_bytes = 16 * 64 * sizeof(float),
    .pack_kv = QMM_AMX_SYM(qmm_bf16_attn_pack_kv__amx), .pack_q = QMM_AMX_SYM(qmm_bf16_attn_pack_q__amx),
    .qk = QMM_AMX_SYM(qmm_bf16_attn_qk_ukernel_16x64__amx), .softmax = qmm_attn_softmax_bf16__avx512,
    .pv = QMM_AMX_SYM(qmm_bf16_attn_pv_ukernel_16x64__amx), .begin = tiles_begin, .end = tiles_end};

#endif
