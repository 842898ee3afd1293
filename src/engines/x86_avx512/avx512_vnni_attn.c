/*
 * avx512_vnni_attn.c — attention's int8 mode on avx512_vnni (SPEC §10, QMM_ATTN_INT8): both
 * products on VPDPBUSD with exact int32 sums: its ukernels (ukernels.h) under the attention
 * driver (core/attention.h) and the frame's u8 softmax (qmm_attn_softmax_u8__avx512, which also
 * updates the rows' online-softmax state in f32). Admits mode int8 only.
 *
 * Quantization (per kv head when packed, per query row by pack_q; R the rotation):
 *   k'[j] = k[j] − mean (qmm_attn_key_mean: the mean of the finite keys; the softmax rows stay
 *   as they are)
 *   R: q and k padded with zeros to Dq = D rounded up to 64, then ConvRot's rotation (numerics.h
 *      qmm_rotate_f32: x · H_64 / 8 per group of 64); orthonormal, so (R q)·(R k) = q·k
 *   sk[j] = max_d |R k'[j]| / 127, kq = round(R k' / sk);  sq[i] = max_d |R q[i]| / 127,
 *   qq = round(R q / sq)  (codes clamped to ±127; all-zero rows: scale 0; a query row or key
 *   with a non-finite value: scale NaN, so its scores are NaN — its rows NaN, as an f32 engine's
 *   are, unless a bool mask excludes the key)
 *   score[i][j] = (Σ_d (qq + 128)·kq − 128·Σ_d kq) · (sk[j] · sq[i])   (sq carries the call's
 *   scale and log2(e): the softmax runs in base 2; the scales multiplied first, so a huge key
 *   with a tiny scale cannot overflow the product where the score is finite)
 *   per block of 64 keys and query row (the u8 softmax): pq = U(s − the block's max) u8
 *   (attention.h: ≈ round(255 · 2^(s − max))), l from Σ pq / 255;  per block of 64 keys and channel:
 *   sv[d] = max_j |v[j][d]| / 127, vq = round(v / sv) (a channel with a non-finite value: sv NaN);
 *   O = O·α + (Σ_j pq[j]·vq[j][d]) · ps · sv[d] / 255, ps = 2^(block max − running max)
 * VPDPBUSD multiplies unsigned by signed bytes: qq + 128 against kq, pq against vq as they are.
 * The codes: x · pre · inv rounded to nearest even, inv = 127 / (max · pre), pre = 1, or 2^64
 * where max < 2^-100 (127 / max would overflow f32; both factors are exact powers of two apart).
 *
 * Packed kv head, Dq as above, Dp = D rounded up to 16, keys past Skv zero:
 *   per block of 64 keys: kq [Dq/4][64][4] int8 (per 4 of D and 16 keys one zmm), Σ_d kq [64]
 *   int32, sk [64] f32; then per block of 64 keys vq [16][Dp][4] int8 (per 4 keys and 16 of D
 *   one zmm) and sv/255 [Dp] f32; then the keys' mean [Dp] f32.
 * qk: 6 query rows × 64 keys (24 zmm), per 4 of D 4 K loads and 6 dword broadcasts of qq + 128.
 * pv: 6 rows × 64 of D (24 zmm), per 4 keys 4 V loads and 6 dword broadcasts of pq.
 */
#include "avx512/attention_avx512.h"
#include "avx512_attn.h"
#include "avx512_vnni_kernel.h"
#include "ukernels.h"

#include <string.h>

#define NK QMM_ZA_NK
#define MR QMM_ZA_MR

/* the lanes of x that are NaN or ±Inf (exponent all ones) */
static inline __mmask16 nonfinite(__m512 x) {
    const __m512i e = _mm512_set1_epi32(0x7f800000);
    return _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_castps_si512(x), e), e);
}

/* the width of the rotated q and k codes: D padded with zeros to a multiple of 64 */
static int64_t dq_of(int64_t D) { return qmm_round_up(D, 64); }
/* one K block: the codes, then the key sums and scales */
static size_t kb_bytes(int64_t D) { return (size_t)(dq_of(D) * NK) + NK * 4 + NK * 4; }
static size_t kb_stride(int64_t D) { return (size_t)qmm_round_up((int64_t)kb_bytes(D), 64); }
/* one V block: the codes, then the channels' scales */
static size_t vb_stride(int64_t D) { return (size_t)(NK * qmm_za_dp(D)) + (size_t)qmm_za_dp(D) * 4; }
/* after the blocks: the keys' mean */
static size_t extra_bytes(int64_t D) { return (size_t)qmm_za_dp(D) * 4; }
static size_t q_bytes(int64_t D) { return (size_t)dq_of(D); }

/* row[0..Dq) ← R row: qmm_rotate_f32 (numerics.h) with g = 64, in its vector form (simd_avx512.h) */
static void rotate(float *row, int64_t Dq) {
    for (int64_t d = 0; d < Dq; d += 16) _mm512_storeu_ps(row + d, qmm_z_rot_s4(qmm_z_rot_s1(_mm512_loadu_ps(row + d))));
    for (int64_t d = 0; d < Dq; d += 64) qmm_z_rot_wide(row + d, 64, 16);
    const __m512 sc = _mm512_set1_ps(qmm_convrot_scale(64));
    for (int64_t d = 0; d < Dq; d += 16) _mm512_storeu_ps(row + d, _mm512_mul_ps(_mm512_loadu_ps(row + d), sc));
}

/* row[0..Dp) (zero past D) → codes c8[0..Dp) round(row · 127 / max|row|), clamped to ±127;
 * returns max|row| / 127 (NaN if a value is not finite) and Σ codes in *sum */
static float quantize_row(const float *row, int64_t Dp, int8_t *c8, int32_t *sum) {
    __m512 amax = _mm512_setzero_ps();
    __mmask16 bad = 0;
    for (int64_t d = 0; d < Dp; d += 16) {
        const __m512 x = _mm512_loadu_ps(row + d);
        bad |= nonfinite(x);
        amax = _mm512_max_ps(amax, _mm512_abs_ps(x));
    }
    const float am = _mm512_reduce_max_ps(amax), pre = am < 0x1p-100f ? 0x1p64f : 1.0f,
                inv = am > 0.0f && !bad ? 127.0f / (am * pre) : 0.0f;
    __m512i s = _mm512_setzero_si512();
    for (int64_t d = 0; d < Dp; d += 16) {
        const __m512i qi =
            _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(row + d), _mm512_set1_ps(pre)), _mm512_set1_ps(inv)));
        const __m512i cl = _mm512_max_epi32(_mm512_min_epi32(qi, _mm512_set1_epi32(127)), _mm512_set1_epi32(-127));
        _mm_storeu_si128((__m128i *)(c8 + d), _mm512_cvtepi32_epi8(cl));
        s = _mm512_add_epi32(s, cl);
    }
    *sum = _mm512_reduce_add_epi32(s);
    return bad ? NAN : am / 127.0f;
}

static void pack_k(const qmm_attn_call *c, const void *k, char *K, const float *mean) {
    const int64_t D = c->D, Dq = dq_of(D), nblk = (c->Skv + NK - 1) / NK;
    const size_t es = qmm_dtype_size(c->kv_dtype), kbs = kb_stride(D);
    float row[QMM_ATTN_MAX_D + 16];
    int8_t q8[QMM_ATTN_MAX_D + 16];
    for (int64_t j = 0; j < nblk * NK; j++) {
        char *blk = K + (size_t)(j / NK) * kbs;
        int8_t *kd = (int8_t *)blk + (j % NK) * 4;
        int32_t *ksum = (int32_t *)(blk + Dq * NK);
        float *sk = (float *)(ksum + NK);
        if (j >= c->Skv) {
            for (int64_t d = 0; d < Dq; d++) kd[(d / 4) * NK * 4 + d % 4] = 0;
            ksum[j % NK] = 0;
            sk[j % NK] = 0.0f;
            continue;
        }
        const char *kr = (const char *)k + j * c->ks[2] * (int64_t)es;
        for (int64_t d = 0; d < Dq; d += 16) {
            const __mmask16 mk = qmm_za_lanes(D - d);
            _mm512_storeu_ps(row + d, _mm512_maskz_sub_ps(mk, qmm_z_load16(kr, c->kv_dtype, d, mk),
                                                          _mm512_maskz_loadu_ps(mk, mean + d)));
        }
        rotate(row, Dq);
        sk[j % NK] = quantize_row(row, Dq, q8, &ksum[j % NK]);
        for (int64_t p = 0; p < Dq / 4; p++) memcpy(kd + p * NK * 4, q8 + 4 * p, 4);
    }
}

/* V per block of NK keys and channel: the codes [16][Dp][4] (keys past Skv zero), then
 * vs = max_j |v[j][d]| / 127 over the block's live keys [Dp] (live NULL: every key; NaN for a
 * channel with a non-finite value in any key: 0 · NaN is NaN, as the reference's sum) */
static void pack_v(const qmm_attn_call *c, const void *v, const uint8_t *live, char *V) {
    const int64_t D = c->D, Dp = qmm_za_dp(D), nblk = (c->Skv + NK - 1) / NK;
    const size_t es = qmm_dtype_size(c->kv_dtype), vbs = vb_stride(D);
    for (int64_t b = 0; b < nblk; b++) {
        int8_t *codes = (int8_t *)(V + (size_t)b * vbs);
        float *vsc = (float *)(codes + NK * Dp);
        const int64_t j0 = b * NK, nv = c->Skv - j0 < NK ? c->Skv - j0 : NK;
        __m512 amax[QMM_ATTN_MAX_D / 16], inv[QMM_ATTN_MAX_D / 16], pre[QMM_ATTN_MAX_D / 16];
        __mmask16 bad[QMM_ATTN_MAX_D / 16];
        for (int64_t z = 0; z < Dp / 16; z++) { amax[z] = _mm512_setzero_ps(); bad[z] = 0; }
        for (int64_t j = j0; j < j0 + nv; j++) {
            const char *vr = (const char *)v + j * c->vs[2] * (int64_t)es;
            for (int64_t z = 0; z < Dp / 16; z++) {
                const __m512 x = qmm_z_load16(vr, c->kv_dtype, 16 * z, qmm_za_lanes(D - 16 * z));
                bad[z] |= nonfinite(x);
                if (!live || live[j]) amax[z] = _mm512_max_ps(amax[z], _mm512_abs_ps(x));
            }
        }
        for (int64_t z = 0; z < Dp / 16; z++) {
            const __mmask16 pos = _mm512_cmp_ps_mask(amax[z], _mm512_setzero_ps(), _CMP_GT_OQ) & (__mmask16)~bad[z];
            pre[z] = _mm512_mask_mov_ps(_mm512_set1_ps(1.0f), _mm512_cmp_ps_mask(amax[z], _mm512_set1_ps(0x1p-100f), _CMP_LT_OQ),
                                        _mm512_set1_ps(0x1p64f));
            inv[z] = _mm512_maskz_div_ps(pos, _mm512_set1_ps(127.0f), _mm512_mul_ps(amax[z], pre[z]));
            const __m512 sv = _mm512_div_ps(amax[z], _mm512_set1_ps(127.0f * 255.0f));
            _mm512_storeu_ps(vsc + 16 * z, _mm512_mask_mov_ps(sv, bad[z], _mm512_set1_ps(NAN)));
        }
        int8_t q8[NK][QMM_ATTN_MAX_D]; /* the block's codes by key, then 4 keys × 16 of D per zmm */
        for (int64_t jj = 0; jj < NK; jj++) {
            const char *vr = (const char *)v + (j0 + jj) * c->vs[2] * (int64_t)es;
            for (int64_t z = 0; z < Dp / 16; z++) {
                __m512i cl = _mm512_setzero_si512();
                if (jj < nv) {
                    const __m512 x = qmm_z_load16(vr, c->kv_dtype, 16 * z, qmm_za_lanes(D - 16 * z));
                    const __m512i qi = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_mul_ps(x, pre[z]), inv[z]));
                    cl = _mm512_max_epi32(_mm512_min_epi32(qi, _mm512_set1_epi32(127)), _mm512_set1_epi32(-127));
                }
                _mm_storeu_si128((__m128i *)(q8[jj] + 16 * z), _mm512_cvtepi32_epi8(cl));
            }
        }
        for (int64_t p = 0; p < NK / 4; p++)
            for (int64_t d = 0; d < Dp; d += 16) {
                const __m128i a = _mm_loadu_si128((const __m128i *)(q8[4 * p] + d)),
                              b = _mm_loadu_si128((const __m128i *)(q8[4 * p + 1] + d)),
                              e = _mm_loadu_si128((const __m128i *)(q8[4 * p + 2] + d)),
                              f = _mm_loadu_si128((const __m128i *)(q8[4 * p + 3] + d));
                const __m128i ab0 = _mm_unpacklo_epi8(a, b), ab1 = _mm_unpackhi_epi8(a, b),
                              ef0 = _mm_unpacklo_epi8(e, f), ef1 = _mm_unpackhi_epi8(e, f);
                __m128i *o = (__m128i *)(codes + (p * Dp + d) * 4);
                _mm_storeu_si128(o, _mm_unpacklo_epi16(ab0, ef0));
                _mm_storeu_si128(o + 1, _mm_unpackhi_epi16(ab0, ef0));
                _mm_storeu_si128(o + 2, _mm_unpacklo_epi16(ab1, ef1));
                _mm_storeu_si128(o + 3, _mm_unpackhi_epi16(ab1, ef1));
            }
    }
}

void qmm_qs8_attn_pack_kv__avx512vnni(const qmm_attn_call *c, const void *k, const void *v, const uint8_t *live,
                                      void *kv) {
    const int64_t D = c->D, nblk = (c->Skv + NK - 1) / NK;
    char *K = kv;
    char *V = K + (size_t)nblk * kb_stride(D);
    float *mean = (float *)(V + (size_t)nblk * vb_stride(D));
    /* the finite keys' mean (any vector subtracted from every key leaves the softmax as it is;
     * pack_k reads its D values through masks) */
    qmm_attn_key_mean(c, k, live, mean);
    pack_k(c, k, K, mean);
    pack_v(c, v, live, V);
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
            acc[i][0] = qmm_vnni_dpbusd(acc[i][0], qd, k0);
            acc[i][1] = qmm_vnni_dpbusd(acc[i][1], qd, k1);
            acc[i][2] = qmm_vnni_dpbusd(acc[i][2], qd, k2);
            acc[i][3] = qmm_vnni_dpbusd(acc[i][3], qd, k3);
        }
    }
    const int32_t *ksum = (const int32_t *)(blk + Dq * NK);
    const float *sk = (const float *)(ksum + NK);
    for (int z = 0; z < 4; z++) {
        const __m512i corr = _mm512_slli_epi32(_mm512_loadu_si512(ksum + 16 * z), 7);
        const __m512 skz = _mm512_loadu_ps(sk + 16 * z);
        for (int i = 0; i < rows; i++) {
            const __m512 s = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc[i][z], corr));
            _mm512_storeu_ps(S + i * NK + 16 * z, _mm512_mul_ps(s, _mm512_mul_ps(skz, _mm512_set1_ps(sq[i]))));
        }
    }
}

void qmm_qs8_attn_qk_ukernel_6x64c4__avx512vnni(int rows, const void *Q, const float *sq, const void *kblk, int64_t D,
                                                float *S) {
    QMM_ATTN_BY_ROWS(rows, qk_n, Q, sq, dq_of(D), kblk, S);
}

/* O[i][d0 .. d0 + 16·nz) = O[i]·alpha[i] + (Σ_j pq[i][j]·vq[j]) · ps[i] · vs for rows i < rows
 * (Vb: the block's codes, then vs = sv / 255 [Dp]); one of alpha[i] and ps[i] is 1 (the
 * driver's), so each output takes a conversion, a product and one FMA */
static inline __attribute__((always_inline)) void pv_n(const int rows, const int nz, const uint8_t *P, const float *ps,
                                                        const int8_t *Vb, float *O, const float *alpha, int64_t Dp,
                                                        int64_t d0) {
    const float *vsc = (const float *)(Vb + NK * Dp);
    __m512i acc[MR][4];
    for (int i = 0; i < rows; i++)
        for (int z = 0; z < nz; z++) acc[i][z] = _mm512_setzero_si512();
    for (int p = 0; p < NK / 4; p++) {
        const int8_t *vp = Vb + (p * Dp + d0) * 4;
        __m512i v[4];
        for (int z = 0; z < nz; z++) v[z] = _mm512_loadu_si512(vp + 64 * z);
        for (int i = 0; i < rows; i++) {
            uint32_t w;
            memcpy(&w, P + i * NK + 4 * p, 4);
            const __m512i pd = _mm512_set1_epi32((int)w);
            for (int z = 0; z < nz; z++) acc[i][z] = qmm_vnni_dpbusd(acc[i][z], pd, v[z]);
        }
    }
    for (int i = 0; i < rows; i++) {
        __m512 x[4];
        for (int z = 0; z < nz; z++) x[z] = _mm512_mul_ps(_mm512_cvtepi32_ps(acc[i][z]), _mm512_loadu_ps(vsc + d0 + 16 * z));
        qmm_za_pv_store(O + i * Dp + d0, x, nz, alpha[i], ps[i]);
    }
}

void qmm_qu8_qs8_attn_pv_ukernel_6x64c4__avx512vnni(int rows, const void *Pv, const float *ps, const float *alpha,
                                                    const void *vblk, int64_t D, float *O, void *ws) {
    (void)ws;
    const int64_t Dp = qmm_za_dp(D);
    const uint8_t *P = Pv;
    const char *Vb = vblk;
    for (int64_t d0 = 0; d0 < Dp; d0 += 64) {
        const int64_t nz = (Dp - d0) / 16 >= 4 ? 4 : (Dp - d0) / 16;
        if (nz == 4) QMM_ATTN_BY_ROWS(rows, pv_n, 4, P, ps, (const int8_t *)Vb, O, alpha, Dp, d0);
        else if (nz == 3) QMM_ATTN_BY_ROWS(rows, pv_n, 3, P, ps, (const int8_t *)Vb, O, alpha, Dp, d0);
        else if (nz == 2) QMM_ATTN_BY_ROWS(rows, pv_n, 2, P, ps, (const int8_t *)Vb, O, alpha, Dp, d0);
        else QMM_ATTN_BY_ROWS(rows, pv_n, 1, P, ps, (const int8_t *)Vb, O, alpha, Dp, d0);
    }
}

/* one query row → qq + 128 [Dq] u8 and its scale times the call's scale and log2(e) */
void qmm_qs8_attn_pack_q__avx512vnni(const qmm_attn_call *c, const void *q, void *Qv, float *sq) {
    const int64_t D = c->D, Dq = dq_of(D);
    uint8_t *Q = Qv;
    float row[QMM_ATTN_MAX_D + 16];
    int8_t q8[QMM_ATTN_MAX_D + 16];
    for (int64_t d = 0; d < Dq; d += 16) _mm512_storeu_ps(row + d, qmm_z_load16(q, c->q_dtype, d, qmm_za_lanes(D - d)));
    rotate(row, Dq);
    int32_t sum;
    *sq = quantize_row(row, Dq, q8, &sum) * (c->scale * QMM_ZA_LOG2E);
    for (int64_t d = 0; d < Dq; d++) Q[d] = (uint8_t)(q8[d] + 128);
}

const qmm_attn_ukernels qmm_avx512_vnni_attn = {
    .name = "avx512_vnni (int8 6x64c4, u8 P)", .p = QMM_ATTN_P_U8, .mr = MR, .nk = NK, .mq = QMM_ZA_MQ, .dalign = 16,
    .live_keys = 1,
    .kb_bytes = kb_stride, .vb_bytes = vb_stride, .extra_bytes = extra_bytes, .q_bytes = q_bytes,
    .pack_kv = qmm_qs8_attn_pack_kv__avx512vnni, .pack_q = qmm_qs8_attn_pack_q__avx512vnni,
    .qk = qmm_qs8_attn_qk_ukernel_6x64c4__avx512vnni, .softmax = qmm_attn_softmax_u8__avx512,
    .pv = qmm_qu8_qs8_attn_pv_ukernel_6x64c4__avx512vnni};

const char *qmm_avx512_vnni_attn_admit(const void *call, char *why, size_t n) {
    const qmm_attn_call *c = call;
    (void)why; (void)n;
    if (c->mode != QMM_ATTN_INT8) return "int8 QKᵀ and P·V run in mode int8 only";
    return NULL;
}
