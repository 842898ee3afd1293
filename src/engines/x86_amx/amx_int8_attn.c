/*
 * amx_int8_attn.c — attention's int8 mode on amx_int8 (SPEC §10, QMM_ATTN_INT8): avx512_vnni's
 * recipe and operands (avx512_vnni_attn.c: the packed kv head, the query rows as qq + 128 u8,
 * the u8 P of the AVX-512 softmax) with both products on the tiles, TDPBUSD (u8 × s8, exact
 * int32 sums). The sums are the ones VPDPBUSD forms and the float steps after them are
 * avx512_vnni's, in its order: the outputs are avx512_vnni's, bit for bit. Compiled twice, as
 * amx_kernel.h says: for dispatch, and with -DQMM_AMX_EMULATE for the tests (symbols _emu).
 * Descriptor: qmm_amx_int8_attn (amx_kernel.h; avx512_vnni's pack_kv, pack_q and sizes, the
 * frame's AVX-512 u8 softmax, these two tiles). Admits mode int8 only.
 *
 * Tiles (every tile 16 rows × 64 bytes: qmm_amx_tiles_config(16, 16), loaded once per thread by
 * the driver's begin hook); 16 query rows per call (pad_rows: the driver's Q and P rows past
 * a tile's last row are zero):
 *   QKᵀ per K block of 64 keys:   tmm0..3 = int32 sums of keys 0-15, ..., 48-63;
 *     per 64 of Dq: tmm4 = Q (16 rows × 64 u8, row stride Dq), tmm6/7 = 16 key quads × 16 keys
 *     (row stride 256 bytes), 4 TDPBUSD; stored into S as int32, then in place
 *     s = (sum − 128·Σ_d kq) · (sk · sq).
 *   P·V per V block and 64 of Dp: tmm0..3 = 16 rows × 16 channels each; tmm4 = P (16 rows × 64
 *     keys u8, row stride 64), tmm6/7 = 16 key quads × 16 channels (row stride Dp·4 bytes), one
 *     TDPBUSD per C tile covers the block's 64 keys; stored into the thread's workspace, then
 *     O = O·α + ps · sum · vs in avx512_vnni's steps (qmm_za_pv_store).
 */
#include "amx_kernel.h"
#include "avx512/attention_avx512.h"
#include "ukernels.h"

#ifdef QMM_AMX_KERNELS

#define NK 64

/* the rotated codes' width: D rounded up to 64 (avx512_vnni_attn.c's Dq) */
static int64_t dq_of(int64_t D) { return qmm_round_up(D, 64); }

void QMM_AMX_SYM(qmm_qs8_attn_qk_ukernel_16x64c4__amx)(int rows, const void *Q, const float *sq, const void *kblk,
                                                       int64_t D, float *S) {
    const int64_t Dq = dq_of(D);
    const int8_t *K = kblk;
    QMM_TILE_ZERO(QMM_TC00);
    QMM_TILE_ZERO(QMM_TC01);
    QMM_TILE_ZERO(QMM_TC10);
    QMM_TILE_ZERO(QMM_TC11);
    for (int64_t d = 0; d < Dq; d += 64) {
        const int8_t *kp = K + (d / 4) * NK * 4; /* 16 quads of d: rows of 256 bytes */
        QMM_TILE_LOAD(QMM_TA0, (const uint8_t *)Q + d, Dq);
        QMM_TILE_LOAD(QMM_TB0, kp, NK * 4);
        QMM_TDPBUSD(QMM_TC00, QMM_TA0, QMM_TB0);
        QMM_TILE_LOAD(QMM_TB1, kp + 64, NK * 4);
        QMM_TDPBUSD(QMM_TC01, QMM_TA0, QMM_TB1);
        QMM_TILE_LOAD(QMM_TB0, kp + 128, NK * 4);
        QMM_TDPBUSD(QMM_TC10, QMM_TA0, QMM_TB0);
        QMM_TILE_LOAD(QMM_TB1, kp + 192, NK * 4);
        QMM_TDPBUSD(QMM_TC11, QMM_TA0, QMM_TB1);
    }
    int32_t *Si = (int32_t *)S;
    QMM_TILE_STORE(QMM_TC00, Si, NK * 4);
    QMM_TILE_STORE(QMM_TC01, Si + 16, NK * 4);
    QMM_TILE_STORE(QMM_TC10, Si + 32, NK * 4);
    QMM_TILE_STORE(QMM_TC11, Si + 48, NK * 4);
    const int32_t *ksum = (const int32_t *)(K + Dq * NK);
    const float *sk = (const float *)(ksum + NK);
    for (int z = 0; z < 4; z++) {
        const __m512i corr = _mm512_slli_epi32(_mm512_loadu_si512(ksum + 16 * z), 7);
        const __m512 skz = _mm512_loadu_ps(sk + 16 * z);
        for (int i = 0; i < rows; i++) {
            const __m512 s = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_loadu_si512(Si + i * NK + 16 * z), corr));
            _mm512_storeu_ps(S + i * NK + 16 * z, _mm512_mul_ps(s, _mm512_mul_ps(skz, _mm512_set1_ps(sq[i]))));
        }
    }
}

void QMM_AMX_SYM(qmm_qu8_qs8_attn_pv_ukernel_16x64c4__amx)(int rows, const void *P, const float *ps,
                                                           const float *alpha, const void *vblk, int64_t D, float *O,
                                                           void *ws) {
    const int64_t Dp = qmm_za_dp(D);
    const int8_t *V = vblk;
    const float *vsc = (const float *)(V + NK * Dp);
    int32_t *acc = ws; /* [16][64] */
    QMM_TILE_LOAD(QMM_TA0, P, NK);
    for (int64_t d0 = 0; d0 < Dp; d0 += 64) {
        const int nz = Dp - d0 >= 64 ? 4 : (int)((Dp - d0) / 16);
        const int8_t *vp = V + d0 * 4;
        /* the tile numbers are immediates: one branch per tile */
        QMM_TILE_ZERO(QMM_TC00);
        QMM_TILE_LOAD(QMM_TB0, vp, Dp * 4);
        QMM_TDPBUSD(QMM_TC00, QMM_TA0, QMM_TB0);
        QMM_TILE_STORE(QMM_TC00, acc, 64 * 4);
        if (nz > 1) {
            QMM_TILE_ZERO(QMM_TC01);
            QMM_TILE_LOAD(QMM_TB1, vp + 64, Dp * 4);
            QMM_TDPBUSD(QMM_TC01, QMM_TA0, QMM_TB1);
            QMM_TILE_STORE(QMM_TC01, acc + 16, 64 * 4);
        }
        if (nz > 2) {
            QMM_TILE_ZERO(QMM_TC10);
            QMM_TILE_LOAD(QMM_TB0, vp + 128, Dp * 4);
            QMM_TDPBUSD(QMM_TC10, QMM_TA0, QMM_TB0);
            QMM_TILE_STORE(QMM_TC10, acc + 32, 64 * 4);
        }
        if (nz > 3) {
            QMM_TILE_ZERO(QMM_TC11);
            QMM_TILE_LOAD(QMM_TB1, vp + 192, Dp * 4);
            QMM_TDPBUSD(QMM_TC11, QMM_TA0, QMM_TB1);
            QMM_TILE_STORE(QMM_TC11, acc + 48, 64 * 4);
        }
        for (int i = 0; i < rows; i++) {
            __m512 x[4];
            for (int z = 0; z < nz; z++)
                x[z] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_loadu_si512(acc + i * 64 + 16 * z)),
                                     _mm512_loadu_ps(vsc + d0 + 16 * z));
            qmm_za_pv_store(O + i * Dp + d0, x, nz, alpha[i], ps[i]);
        }
    }
}

static void tiles_begin(void) { QMM_AMX_SYM(qmm_amx_tiles_config)(16, 16); }
static void tiles_end(void) { QMM_AMX_SYM(qmm_amx_tiles_release)(); }
/* avx512_vnni's operand sizes (its packed head, its query rows) */
static size_t kb_bytes(int64_t D) { return qmm_avx512_vnni_attn.kb_bytes(D); }
static size_t vb_bytes(int64_t D) { return qmm_avx512_vnni_attn.vb_bytes(D); }
static size_t extra_bytes(int64_t D) { return qmm_avx512_vnni_attn.extra_bytes(D); }
static size_t q_bytes(int64_t D) { return qmm_avx512_vnni_attn.q_bytes(D); }

const qmm_attn_ukernels QMM_AMX_SYM(qmm_amx_int8_attn) = {
    .name = "amx_int8 (int8 tiles 16x64c4, u8 P)", .p = QMM_ATTN_P_U8, .mr = 16, .pad_rows = 1, .nk = NK,
    .mq = QMM_ZA_MQ, .dalign = 16, .live_keys = 1, .kb_bytes = kb_bytes, .vb_bytes = vb_bytes, .extra_bytes = extra_bytes,
    .q_bytes = q_bytes, .ws_bytes = 16 * 64 * sizeof(int32_t),
    .pack_kv = qmm_qs8_attn_pack_kv__avx512vnni, .pack_q = qmm_qs8_attn_pack_q__avx512vnni,
    .qk = QMM_AMX_SYM(qmm_qs8_attn_qk_ukernel_16x64c4__amx), .softmax = qmm_attn_softmax_u8__avx512,
    .pv = QMM_AMX_SYM(qmm_qu8_qs8_attn_pv_ukernel_16x64c4__amx), .begin = tiles_begin, .end = tiles_end};

#endif /* QMM_AMX_KERNELS */

const char *QMM_AMX_SYM(qmm_amx_int8_attn_admit)(const void *call, char *why, size_t n) {
    const qmm_attn_call *c = call;
    (void)why; (void)n;
    if (c->mode != QMM_ATTN_INT8) return "int8 QKᵀ and P·V run in mode int8 only";
    /* its packing and query rows are avx512_vnni's kernels (every AMX CPU has AVX512-VNNI; the
     * engine table requires only AVX-512 F/BW/VL/DQ of the AMX engines) */
    if (!(qmm_cpu_features() & QMM_CPU_AVX512_VNNI)) return "mode int8 packs with avx512_vnni's kernels: CPU lacks AVX512-VNNI";
    return NULL;
}
