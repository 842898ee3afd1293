/*
 * attention_avx512.h — what the AVX-512 attention engines (avx512_f32, avx512_bf16, avx512_vnni,
 * amx_bf16) share under the attention driver (core/attention.h): the key block and tile sizes, a
 * query row's load (their pack_q), P·V's last step (O·α + ps·acc) and the bf16 kv packing of
 * avx512_bf16 and amx_bf16. Included only by files compiled with AVX-512 F/BW/VL.
 */
#ifndef QMM_ATTENTION_AVX512_H
#define QMM_ATTENTION_AVX512_H

#include "attention.h"
#include "numerics.h"
#include "simd_avx512.h"

#include <math.h>

#define QMM_ZA_NK 64     /* keys per block: 4 zmm of scores per row */
#define QMM_ZA_MQ 192    /* query rows per task: 32 micro-tiles of 6 rows (each K and V block read once per 192 rows) */
#define QMM_ZA_MR 6
#define QMM_ZA_LOG2E 1.44269504088896341f

/* the lanes of 16 values from n valid ones (n may be <= 0) */
static inline __mmask16 qmm_za_lanes(int64_t n) { return n >= 16 ? (__mmask16)0xffff : n <= 0 ? 0 : (__mmask16)((1u << n) - 1u); }

/* D rounded up to 16: the width of a Q, O and (f32) V row */
static inline int64_t qmm_za_dp(int64_t D) { return qmm_round_up(D, 16); }

/* One query row q (c->q_dtype) → Q f32 [Dp] (bf16 = 0) or bf16 [Dp] rounded to nearest even
 * (bf16 = 1), zero past D; *sq = log2(e) · scale (the scores in base 2). */
static inline void qmm_za_pack_q(const qmm_attn_call *c, const void *q, void *Q, float *sq, int64_t Dp, int bf16) {
    for (int64_t d = 0; d < Dp; d += 16) {
        const __m512 x = qmm_z_load16(q, c->q_dtype, d, qmm_za_lanes(c->D - d));
        if (bf16) qmm_z_store16((uint16_t *)Q + d, QMM_BF16, 0xffff, x);
        else _mm512_storeu_ps((float *)Q + d, x);
    }
    *sq = c->scale * QMM_ZA_LOG2E;
}

/* o[0..16·nz) = o·alpha + ps·acc (attention.h's pv step): one of alpha and ps is 1 in the
 * driver's calls, so mostly one FMA per value */
static inline __attribute__((always_inline)) void qmm_za_pv_store(float *o, const __m512 *acc, int nz, float alpha,
                                                                  float ps) {
    const __m512 a = _mm512_set1_ps(alpha), p = _mm512_set1_ps(ps);
    if (ps == 1.0f)
        for (int z = 0; z < nz; z++) _mm512_storeu_ps(o + 16 * z, _mm512_fmadd_ps(_mm512_loadu_ps(o + 16 * z), a, acc[z]));
    else if (alpha == 1.0f)
        for (int z = 0; z < nz; z++) _mm512_storeu_ps(o + 16 * z, _mm512_fmadd_ps(acc[z], p, _mm512_loadu_ps(o + 16 * z)));
    else
        for (int z = 0; z < nz; z++)
            _mm512_storeu_ps(o + 16 * z, _mm512_fmadd_ps(acc[z], p, _mm512_mul_ps(_mm512_loadu_ps(o + 16 * z), a)));
}

/* One kv head → bf16 blocks of NK keys (keys past Skv and d past D zero), Dp a multiple of 16,
 * each key shifted first, k − qmm_attn_key_mean in f32, so a common offset of the keys costs no
 * bf16 bits (the scores of a row all move by q·mean: the softmax does not change):
 * nblk K blocks [Dp/2][NK][2] (per d-pair and 16 keys one zmm: the VDPBF16PS operand against a
 * broadcast q pair, and 16 consecutive pair rows one AMX B tile at a row stride of NK·4 bytes),
 * then nblk V blocks [NK/2][Dp][2] (per key pair and 16 of D one zmm against a broadcast p pair;
 * 16 consecutive key-pair rows one AMX B tile at a row stride of Dp·4 bytes). */
static inline void qmm_za_pack_kv_bf16(const qmm_attn_call *c, const void *k, const void *v, const uint8_t *live, void *kv,
                                       int64_t Dp) {
    const int64_t D = c->D, NK = QMM_ZA_NK, nblk = (c->Skv + NK - 1) / NK;
    const size_t es = qmm_dtype_size(c->kv_dtype);
    uint16_t *K = kv, *V = (uint16_t *)kv + nblk * Dp * NK;
    uint16_t kr16[QMM_ATTN_MAX_D + 32], vr16[QMM_ATTN_MAX_D + 32];
    float mean[QMM_ATTN_MAX_D + 32] = {0};
    qmm_attn_key_mean(c, k, live, mean);
    for (int64_t j = 0; j < nblk * NK; j++) {
        for (int64_t d = 0; d < Dp; d += 16) {
            __m512 kx = _mm512_setzero_ps(), vx = _mm512_setzero_ps();
            if (j < c->Skv) {
                const __mmask16 mk = qmm_za_lanes(D - d);
                kx = _mm512_maskz_sub_ps(mk, qmm_z_load16((const char *)k + j * c->ks[2] * (int64_t)es, c->kv_dtype, d, mk),
                                         _mm512_loadu_ps(mean + d));
                vx = qmm_z_load16((const char *)v + j * c->vs[2] * (int64_t)es, c->kv_dtype, d, mk);
            }
            qmm_z_store16(kr16 + d, QMM_BF16, 0xffff, kx);
            qmm_z_store16(vr16 + d, QMM_BF16, 0xffff, vx);
        }
        /* K block: element (d, key jj) at ((d/2)·NK + jj)·2 + d%2 */
        uint32_t *kd = (uint32_t *)(K + (j / NK) * Dp * NK) + (j % NK);
        const uint32_t *kp = (const uint32_t *)kr16;
        for (int64_t p = 0; p < Dp / 2; p++) kd[p * NK] = kp[p];
        /* V block: element (key jj, d) at ((jj/2)·Dp + d)·2 + jj%2 */
        uint16_t *vd = V + (j / NK) * NK * Dp + ((j % NK) / 2) * Dp * 2 + (j % 2);
        for (int64_t d = 0; d < Dp; d++) vd[d * 2] = vr16[d];
    }
}

#endif /* QMM_ATTENTION_AVX512_H */
