/*
 * avx512_vnni_attn.c — attention's int8 mode on avx512_vnni (SPEC §10, QMM_ATTN_INT8): QKᵀ on
 * int8 operands with VPDPBUSD (SageAttention's recipe: the keys' mean over the call's keys
 * subtracted first, which leaves every softmax row unchanged), P·V in f32 (FMA), the online
 * softmax in f32; under the attention driver (core/attention.h). Admits mode int8 only.
 *
 * Quantization (per kv head when packed, per query row when its tile starts):
 *   k'[j] = k[j] − mean (qmm_attn_key_mean: the mean of the finite keys);  sk[j] = max_d |k'[j][d]| / 127;
 *   kq[j][d] = round(k'[j][d] / sk[j]); a key with a non-finite k' gets sk NaN and codes 0 (its scores
 *   NaN, as an f32 engine's are for a NaN key: its rows NaN unless a bool mask excludes it)
 *   sq[i] = max_d |q[i][d]| / 127;  qq[i][d] = round(q[i][d] / sq[i])     (all-zero rows: scale 0;
 *   a row holding NaN or Inf: scale NaN, its scores NaN)
 *   score[i][j] = (Σ_d (qq[i][d] + 128)·kq[j][d] − 128·Σ_d kq[j][d]) · sq[i] · sk[j]
 * (VPDPBUSD multiplies the unsigned qq + 128 by the signed kq; the int32 sums are exact).
 * Packed kv head, Dq = D rounded up to 4, Dp = D rounded up to 16, keys past Skv zero:
 *   per block of 64 keys: kq [Dq/4][64][4] int8 (per 4 of D and 16 keys one zmm), Σ_d kq [64]
 *   int32, sk [64] f32; then the V blocks [64][Dp] f32 (V's rows).
 * qk: 6 query rows × 64 keys (24 zmm), per 4 of D 4 K loads and 6 dword broadcasts of qq + 128.
 */
#include "attention_avx512.h"
#include "avx512_attn.h"

#include <float.h>

#define NK QMM_ZA_NK
#define MR QMM_ZA_MR

static int64_t dq_of(int64_t D) { return qmm_round_up(D, 4); }
/* one K block: the codes, then the key sums and scales */
static size_t kb_bytes(int64_t D) { return (size_t)(dq_of(D) * NK) + NK * 4 + NK * 4; }
static size_t vb_bytes(int64_t D) { return (size_t)(NK * qmm_za_dp(D)) * sizeof(float); }
static size_t kb_stride(int64_t D) { return (size_t)qmm_round_up((int64_t)kb_bytes(D), 64); }
static size_t kv_bytes(int64_t Skv, int64_t D) {
    return qmm_attn_blocks_bytes(Skv, NK, kb_stride(D) + vb_bytes(D), (size_t)qmm_za_dp(D) * 4); /* + the keys' mean */
}

static void pack_kv(const qmm_attn_call *c, const void *k, const void *v, void *kv) {
    const int64_t D = c->D, Dq = dq_of(D), Dp = qmm_za_dp(D), nblk = (c->Skv + NK - 1) / NK;
    const size_t es = qmm_dtype_size(c->kv_dtype), kbs = kb_stride(D);
    char *K = kv;
    float *V = (float *)(K + (size_t)nblk * kbs);
    float *mean = V + nblk * NK * Dp;
    /* the finite keys' mean (any vector subtracted from every key leaves the softmax as it is) */
    for (int64_t d = 0; d < Dp; d += 16) _mm512_storeu_ps(mean + d, _mm512_setzero_ps());
    qmm_attn_key_mean(c, k, mean);
    float row[QMM_ATTN_MAX_D + 16];
    int8_t q8[QMM_ATTN_MAX_D + 16];
    for (int64_t j = 0; j < nblk * NK; j++) {
        char *blk = K + (size_t)(j / NK) * kbs;
        int8_t *kd = (int8_t *)blk + (j % NK) * 4;
        int32_t *ksum = (int32_t *)(blk + Dq * NK);
        float *sk = (float *)(ksum + NK);
        float *vd = V + j * Dp;
        if (j >= c->Skv) {
            for (int64_t d = 0; d < Dq; d++) kd[(d / 4) * NK * 4 + d % 4] = 0;
            ksum[j % NK] = 0;
            sk[j % NK] = 0.0f;
            for (int64_t d = 0; d < Dp; d += 16) _mm512_storeu_ps(vd + d, _mm512_setzero_ps());
            continue;
        }
        const char *kr = (const char *)k + j * c->ks[2] * (int64_t)es, *vr = (const char *)v + j * c->vs[2] * (int64_t)es;
        __m512 amax = _mm512_setzero_ps();
        __mmask16 bad = 0; /* lanes of k' that are NaN or ±Inf */
        for (int64_t d = 0; d < Dp; d += 16) {
            const __mmask16 mk = qmm_za_lanes(D - d);
            const __m512 x = _mm512_maskz_sub_ps(mk, qmm_z_load16(kr, c->kv_dtype, d, mk), _mm512_loadu_ps(mean + d));
            _mm512_storeu_ps(row + d, x);
            amax = _mm512_max_ps(amax, _mm512_abs_ps(x));
            bad |= _mm512_cmp_ps_mask(_mm512_abs_ps(x), _mm512_set1_ps(FLT_MAX), _CMP_NLE_UQ);
            _mm512_storeu_ps(vd + d, qmm_z_load16(vr, c->kv_dtype, d, mk));
        }
        if (bad)
            for (int64_t d = 0; d < Dp; d += 16) _mm512_storeu_ps(row + d, _mm512_setzero_ps());
        const float am = bad ? 0.0f : _mm512_reduce_max_ps(amax), s = bad ? NAN : am / 127.0f,
                    inv = am > 0.0f ? 127.0f / am : 0.0f;
        int32_t sum = 0;
        for (int64_t d = 0; d < Dp; d += 16) {
            const __m512i qi = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(row + d), _mm512_set1_ps(inv)));
            const __m512i cl = _mm512_max_epi32(_mm512_min_epi32(qi, _mm512_set1_epi32(127)), _mm512_set1_epi32(-127));
            _mm_storeu_si128((__m128i *)(q8 + d), _mm512_cvtepi32_epi8(cl));
            sum += _mm512_reduce_add_epi32(cl);
        }
        for (int64_t d = 0; d < Dq; d++) kd[(d / 4) * NK * 4 + d % 4] = d < D ? q8[d] : 0;
        ksum[j % NK] = sum;
        sk[j % NK] = s;
    }
}

/* S[i][0..64) = the block's scores of rows i < rows (see the top) */
static inline __attribute__((always_inline)) void qk_n(const int rows, const uint8_t *Q, const float *sq, int64_t Dq,
                                                        const char *blk, float *S) {
    const int64_t quads = Dq / 4;
    const uint32_t *Qw = (const uint32_t *)Q;
    const int8_t *Kb = (const int8_t *)blk;
    __m512i acc[MR][4];
    for (int i = 0; i < rows; i++)
        for (int z = 0; z < 4; z++) acc[i][z] = _mm512_setzero_si512();
    for (int64_t p = 0; p < quads; p++) {
        const int8_t *kp = Kb + p * NK * 4;
        const __m512i k0 = _mm512_load_si512(kp), k1 = _mm512_load_si512(kp + 64), k2 = _mm512_load_si512(kp + 128),
                      k3 = _mm512_load_si512(kp + 192);
        for (int i = 0; i < rows; i++) {
            const __m512i qd = _mm512_set1_epi32((int)Qw[i * quads + p]);
            acc[i][0] = _mm512_dpbusd_epi32(acc[i][0], qd, k0);
            acc[i][1] = _mm512_dpbusd_epi32(acc[i][1], qd, k1);
            acc[i][2] = _mm512_dpbusd_epi32(acc[i][2], qd, k2);
            acc[i][3] = _mm512_dpbusd_epi32(acc[i][3], qd, k3);
        }
    }
    const int32_t *ksum = (const int32_t *)(blk + Dq * NK);
    const float *sk = (const float *)(ksum + NK);
    for (int z = 0; z < 4; z++) {
        const __m512i corr = _mm512_slli_epi32(_mm512_loadu_si512(ksum + 16 * z), 7);
        const __m512 skz = _mm512_loadu_ps(sk + 16 * z);
        for (int i = 0; i < rows; i++) {
            const __m512 s = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc[i][z], corr));
            _mm512_storeu_ps(S + i * NK + 16 * z, _mm512_mul_ps(_mm512_mul_ps(s, skz), _mm512_set1_ps(sq[i])));
        }
    }
}

static void qk(int rows, const uint8_t *Q, const float *sq, int64_t Dq, const char *blk, float *S) {
    QMM_ATTN_BY_ROWS(rows, qk_n, Q, sq, Dq, blk, S);
}

/* query row i → qq + 128 [Dq] u8 and its scale */
static void quantize_q(const qmm_attn_call *c, const void *q, int64_t i, uint8_t *Q, float *sq) {
    const int64_t D = c->D, Dq = dq_of(D), Dp = qmm_za_dp(D);
    const char *r = (const char *)q + i * c->qs[2] * (int64_t)qmm_dtype_size(c->q_dtype);
    float row[QMM_ATTN_MAX_D + 16];
    __m512 amax = _mm512_setzero_ps();
    for (int64_t d = 0; d < Dp; d += 16) {
        const __m512 x = qmm_z_load16(r, c->q_dtype, d, qmm_za_lanes(D - d));
        _mm512_storeu_ps(row + d, x);
        amax = _mm512_max_ps(amax, _mm512_abs_ps(x));
    }
    __mmask16 bad = 0; /* lanes of q that are NaN or ±Inf */
    for (int64_t d = 0; d < Dp; d += 16)
        bad |= _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_loadu_ps(row + d)), _mm512_set1_ps(FLT_MAX), _CMP_NLE_UQ);
    const float am = bad ? 0.0f : _mm512_reduce_max_ps(amax), inv = am > 0.0f ? 127.0f / am : 0.0f;
    uint8_t u8[QMM_ATTN_MAX_D + 16];
    for (int64_t d = 0; d < Dp; d += 16) {
        const __m512i qi = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(row + d), _mm512_set1_ps(inv)));
        const __m512i cl = _mm512_max_epi32(_mm512_min_epi32(qi, _mm512_set1_epi32(127)), _mm512_set1_epi32(-127));
        _mm_storeu_si128((__m128i *)(u8 + d), _mm512_cvtepi32_epi8(_mm512_add_epi32(cl, _mm512_set1_epi32(128))));
    }
    for (int64_t d = 0; d < Dq; d++) Q[i * Dq + d] = d < D && !bad ? u8[d] : 128;
    sq[i] = bad ? NAN : am / 127.0f;
}

static size_t tile_bytes(int64_t D) { return qmm_za_tile_bytes(qmm_za_dp(D)); }

static void tile(const qmm_attn_call *c, const void *kv, const void *q, int64_t rows, const void *mask, void *out,
                 void *scratch) {
    const int64_t Dq = dq_of(c->D), Dp = qmm_za_dp(c->D), nblk = (c->Skv + NK - 1) / NK;
    const size_t kbs = kb_stride(c->D);
    const qmm_za_tile t = qmm_za_tile_of(scratch, Dp);
    uint8_t *Q = t.Q;
    float *sq = t.blk;
    for (int64_t i = 0; i < rows; i++) {
        quantize_q(c, q, i, Q, sq);
        t.m[i] = -INFINITY;
        t.l[i] = 0.0f;
        for (int64_t d = 0; d < Dp; d += 16) _mm512_storeu_ps(t.O + i * Dp + d, _mm512_setzero_ps());
    }
    const char *K = kv;
    const float *V = (const float *)(K + (size_t)nblk * kbs);
    for (int64_t kb = 0; kb < nblk; kb++) {
        const int64_t j0 = kb * NK, nv = c->Skv - j0 < NK ? c->Skv - j0 : NK;
        for (int64_t r = 0; r < rows; r += MR)
            qk((int)(rows - r < MR ? rows - r : MR), Q + r * Dq, sq + r, Dq, K + (size_t)kb * kbs, t.S + r * NK);
        for (int64_t i = 0; i < rows; i++) qmm_za_softmax(c, &t, i, j0, nv, mask, 0);
        for (int64_t r = 0; r < rows; r += MR)
            qmm_za_pv_f32((int)(rows - r < MR ? rows - r : MR), t.P + r * NK, V + kb * NK * Dp, t.O + r * Dp, t.alpha + r, Dp);
    }
    for (int64_t i = 0; i < rows; i++) qmm_za_store(c, &t, i, out);
}

static const qmm_attn_kernels kernels = {
    .mq = QMM_ZA_MQ, .kv_bytes = kv_bytes, .tile_bytes = tile_bytes, .pack_kv = pack_kv, .tile = tile};

const char *qmm_avx512_vnni_attn_admit(const qmm_attn_call *c, char *why, size_t n) {
    (void)why; (void)n;
    if (c->mode != QMM_ATTN_INT8) return "int8 QKᵀ runs in mode int8 only";
    return NULL;
}

qmm_status qmm_avx512_vnni_attn_run(qmm_context *ctx, const qmm_attn_call *c) {
    return qmm_attention_run(ctx, c, &kernels);
}
