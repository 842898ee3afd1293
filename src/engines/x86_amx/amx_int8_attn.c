/*
 * amx_int8_attn.c — attention's int8 mode on amx_int8 (SPEC §10, QMM_ATTN_INT8): avx512_vnni's
 * recipe and operands (avx512_vnni_attn.c: the packed kv head, the query rows as qq + 128 u8,
 * the u8 P of the AVX-512 softmax) with both products on the tiles, TDPBUSD (u8 × s8, exact
 * int32 sums). The sums are the ones VPDPBUSD forms and the float steps after them are
 * avx512_vnni's, in its order: the outputs are avx512_vnni's, bit for bit. Compiled twice, as
 * amx_kernel.h says: for dispatch, and with -DQMM_AMX_EMULATE for the tests (symbols _emu).
 *
 * Tiles (every tile 16 rows × 64 bytes: qmm_amx_tiles_config(16, 16), loaded once per thread by
 * the driver's begin hook); 16 query rows per call (pad_rows: the driver's Q and P rows past
 * a tile's last row are zero):
 *   QKᵀ per K block of 64 keys:   tmm0..3 = int32 sums of keys 0-15, ..., 48-63;
 *     per 64 of Dq: tmm4 = Q (16 rows × 64 u8, row stride Dq), tmm6/7 = 16 key quads × 16 keys
 *     (row stride 256 bytes), 4 TDPBUSD; stored into S as int32, then in place
 *     s = (sum − 128·Σ_d kq) · sk · sq.
 *   P·V per V block and 64 of Dp: tmm0..3 = 16 rows × 16 channels each; tmm4 = P (16 rows × 64
 *     keys u8, row stride 64), tmm6/7 = 16 key quads × 16 channels (row stride Dp·4 bytes), one
 *     TDPBUSD per C tile covers the block's 64 keys; stored into the thread's workspace, then
 *     O = O·α + sum · vs (ps = 1) or O + sum · vs · ps (α = 1), as avx512_vnni's.
 */
#include "amx_kernel.h"
#include "attention_avx512.h"

#ifdef QMM_AMX_KERNELS

#define NK 64

void QMM_AMX_SYM(qmm_qs8_attn_qk_ukernel_16x64c4__amx)(int rows, const void *Q, const float *sq, const void *kblk,
                                                       int64_t D, float *S);
void QMM_AMX_SYM(qmm_qu8_qs8_attn_pv_ukernel_16x64c4__amx)(int rows, const void *P, const float *ps,
                                                           const float *alpha, const void *vblk, int64_t D, float *O,
                                                           void *ws);

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
            _mm512_storeu_ps(S + i * NK + 16 * z, _mm512_mul_ps(_mm512_mul_ps(s, skz), _mm512_set1_ps(sq[i])));
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
            const __m512 a = _mm512_set1_ps(alpha[i]), p = _mm512_set1_ps(ps[i]);
            float *o = O + i * Dp + d0;
            for (int z = 0; z < nz; z++) {
                const __m512 x = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_loadu_si512(acc + i * 64 + 16 * z)),
                                               _mm512_loadu_ps(vsc + d0 + 16 * z));
                _mm512_storeu_ps(o + 16 * z, ps[i] == 1.0f ? _mm512_fmadd_ps(_mm512_loadu_ps(o + 16 * z), a, x)
                                                           : _mm512_fmadd_ps(x, p, _mm512_loadu_ps(o + 16 * z)));
            }
        }
    }
}

#else
typedef int qmm_amx_int8_attn_unused; /* built without AMX compiler support: amx_int8 offers no attention */
#endif
