/*
 * avx2_f32_attn.c — attention on avx2_f32 (SPEC §10): f32 operands, FMA, f32 accumulation: its
 * ukernels (ukernels.h) under the attention driver (core/attention.h), the frame's f32 softmax
 * for AVX2 (qmm_attn_softmax_f32__avx2). Compiled with AVX2 + FMA only (no F16C): f16 values are
 * converted one by one (numerics.h), f32 and bf16 eight at a time.
 *
 * Packed kv head (per thread, once per head): nblk = ceil(Skv / 32) K blocks [D][32] f32, then
 * the V blocks [32][Dp] f32 (Dp = D rounded up to 8); keys past Skv and d past D are zero.
 * Q: f32 [Dp]; sq = log2(e) · scale.
 * Both micro-kernels are 6 rows × 16 columns (12 ymm accumulators): qk over d (2 K loads and 6
 * broadcasts of q[i][d] per step; S = sq · acc), pv over the block's keys (2 V loads, 6
 * broadcasts of p[i][j]).
 */
#include "attention.h"
#include "avx2_attn.h"
#include "numerics.h"
#include "avx2/simd_avx2.h"
#include "ukernels.h"

#include <math.h>


#define NK 32
#define MQ 192
#define MR 6

static int64_t dp_of(int64_t D) { return qmm_round_up(D, 8); }
static size_t kb_bytes(int64_t D) { return (size_t)(D * NK) * sizeof(float); }
static size_t vb_bytes(int64_t D) { return (size_t)(NK * dp_of(D)) * sizeof(float); }
static size_t q_bytes(int64_t D) { return (size_t)qmm_round_up(dp_of(D), 16) * sizeof(float); }

/* n (<= 8) values of dtype t from x → f32 lanes, zero past n */
static inline __m256 load8(const void *x, qmm_dtype t, int64_t n) {
    if (n >= 8 && t == QMM_F32) return _mm256_loadu_ps(x);
    if (n >= 8 && t == QMM_BF16)
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)x)), 16));
    float f[8];
    for (int e = 0; e < 8; e++) f[e] = e < n ? qmm_load_f(x, t, e) : 0.0f;
    return _mm256_loadu_ps(f);
}

/* a row of D values of dtype t → f32 dst [dp_of(D)], zero padded */
static void row_f32(const void *x, qmm_dtype t, int64_t D, float *dst) {
    const size_t es = qmm_dtype_size(t);
    for (int64_t d = 0; d < dp_of(D); d += 8) _mm256_storeu_ps(dst + d, load8((const char *)x + d * (int64_t)es, t, D - d));
}

void qmm_f32_attn_pack_kv__avx2_fma(const qmm_attn_call *c, const void *k, const void *v, const uint8_t *live, void *kv) {
    (void)live; /* f32 operands: nothing formed across keys */
    const int64_t D = c->D, Dp = dp_of(D), nblk = (c->Skv + NK - 1) / NK;
    const size_t es = qmm_dtype_size(c->kv_dtype);
    float *K = kv, *V = (float *)kv + nblk * D * NK;
    float row[QMM_ATTN_MAX_D + 8];
    for (int64_t j = 0; j < nblk * NK; j++) {
        float *kd = K + (j / NK) * D * NK + j % NK, *vd = V + j * Dp;
        if (j >= c->Skv) {
            for (int64_t d = 0; d < D; d++) kd[d * NK] = 0.0f;
            for (int64_t d = 0; d < Dp; d++) vd[d] = 0.0f;
            continue;
        }
        row_f32((const char *)v + j * c->vs[2] * (int64_t)es, c->kv_dtype, D, vd);
        row_f32((const char *)k + j * c->ks[2] * (int64_t)es, c->kv_dtype, D, row);
        for (int64_t d = 0; d < D; d++) kd[d * NK] = row[d];
    }
}

void qmm_f32_attn_pack_q__avx2_fma(const qmm_attn_call *c, const void *q, void *Q, float *sq) {
    row_f32(q, c->q_dtype, c->D, Q);
    *sq = c->scale * 1.44269504088896341f;
}

/* S[i][n0 .. n0+16) = sq[i] · Σ_d Q[i][d]·K[d][n0 ..] for rows i < rows */
static inline __attribute__((always_inline)) void qk_n(const int rows, const float *Q, const float *sq, int64_t Qs,
                                                        int64_t D, const float *Kb, float *S) {
    for (int n0 = 0; n0 < NK; n0 += 16) {
        __m256 acc[MR][2];
        for (int i = 0; i < rows; i++) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
        for (int64_t d = 0; d < D; d++) {
            const __m256 k0 = _mm256_load_ps(Kb + d * NK + n0), k1 = _mm256_load_ps(Kb + d * NK + n0 + 8);
            for (int i = 0; i < rows; i++) {
                const __m256 qd = _mm256_broadcast_ss(Q + i * Qs + d);
                acc[i][0] = _mm256_fmadd_ps(qd, k0, acc[i][0]);
                acc[i][1] = _mm256_fmadd_ps(qd, k1, acc[i][1]);
            }
        }
        for (int i = 0; i < rows; i++) {
            const __m256 s = _mm256_set1_ps(sq[i]);
            _mm256_storeu_ps(S + i * NK + n0, _mm256_mul_ps(acc[i][0], s));
            _mm256_storeu_ps(S + i * NK + n0 + 8, _mm256_mul_ps(acc[i][1], s));
        }
    }
}

/* o[0..8) = o·alpha + ps·acc (one of alpha and ps is 1 in the driver's calls) */
static inline void pv_store(float *o, __m256 acc, float alpha, float ps) {
    if (ps == 1.0f) _mm256_storeu_ps(o, _mm256_fmadd_ps(_mm256_loadu_ps(o), _mm256_set1_ps(alpha), acc));
    else if (alpha == 1.0f) _mm256_storeu_ps(o, _mm256_fmadd_ps(acc, _mm256_set1_ps(ps), _mm256_loadu_ps(o)));
    else _mm256_storeu_ps(o, _mm256_fmadd_ps(acc, _mm256_set1_ps(ps), _mm256_mul_ps(_mm256_loadu_ps(o), _mm256_set1_ps(alpha))));
}

/* O[i][d0 .. d0 + 8·nz) = O·alpha[i] + ps[i]·Σ_j P[i][j]·V[j][d0 ..], nz 1 or 2 */
static inline __attribute__((always_inline)) void pv_n(const int rows, const int nz, const float *P, const float *Vb,
                                                        float *O, const float *alpha, const float *ps, int64_t Dp,
                                                        int64_t d0) {
    __m256 acc[MR][2];
    for (int i = 0; i < rows; i++) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    for (int j = 0; j < NK; j++) {
        const __m256 v0 = _mm256_loadu_ps(Vb + j * Dp + d0), v1 = nz > 1 ? _mm256_loadu_ps(Vb + j * Dp + d0 + 8) : v0;
        for (int i = 0; i < rows; i++) {
            const __m256 p = _mm256_broadcast_ss(P + i * NK + j);
            acc[i][0] = _mm256_fmadd_ps(p, v0, acc[i][0]);
            if (nz > 1) acc[i][1] = _mm256_fmadd_ps(p, v1, acc[i][1]);
        }
    }
    for (int i = 0; i < rows; i++) {
        float *o = O + i * Dp + d0;
        pv_store(o, acc[i][0], alpha[i], ps[i]);
        if (nz > 1) pv_store(o + 8, acc[i][1], alpha[i], ps[i]);
    }
}

void qmm_f32_attn_qk_ukernel_6x32__avx2_fma(int rows, const void *Q, const float *sq, const void *kblk, int64_t D,
                                            float *S) {
    QMM_ATTN_BY_ROWS(rows, qk_n, Q, sq, (int64_t)(q_bytes(D) / sizeof(float)), D, kblk, S);
}

void qmm_f32_attn_pv_ukernel_6x16__avx2_fma(int rows, const void *P, const float *ps, const float *alpha,
                                            const void *vblk, int64_t D, float *O, void *ws) {
    (void)ws;
    const int64_t Dp = dp_of(D);
    const float *Pf = P, *Vb = vblk;
    for (int64_t d0 = 0; d0 < Dp; d0 += 16) {
        if (Dp - d0 >= 16) QMM_ATTN_BY_ROWS(rows, pv_n, 2, Pf, Vb, O, alpha, ps, Dp, d0);
        else QMM_ATTN_BY_ROWS(rows, pv_n, 1, Pf, Vb, O, alpha, ps, Dp, d0);
    }
}

const qmm_attn_ukernels qmm_avx2_f32_attn = {
    .name = "avx2_f32 (f32 6x32, f32 P)", .p = QMM_ATTN_P_F32, .mr = MR, .nk = NK, .mq = MQ, .dalign = 8,
    .kb_bytes = kb_bytes, .vb_bytes = vb_bytes, .q_bytes = q_bytes,
    .pack_kv = qmm_f32_attn_pack_kv__avx2_fma, .pack_q = qmm_f32_attn_pack_q__avx2_fma,
    .qk = qmm_f32_attn_qk_ukernel_6x32__avx2_fma, .softmax = qmm_attn_softmax_f32__avx2,
    .pv = qmm_f32_attn_pv_ukernel_6x16__avx2_fma};

const char *qmm_avx2_f32_attn_admit(const void *call, char *why, size_t n) {
    const qmm_attn_call *c = call;
    (void)c; (void)why; (void)n;
    return NULL;
}
