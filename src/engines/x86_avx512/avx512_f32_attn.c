/*
 * avx512_f32_attn.c — attention on avx512_f32 (SPEC §10): f32 operands, FMA, f32 accumulation;
 * its ukernels (ukernels.h) under the attention driver (core/attention.h), the frame's f32
 * softmax (qmm_attn_softmax_f32__avx512).
 *
 * Packed kv head (per thread, once per head): nblk = ceil(Skv / 64) K blocks [D][64] f32 (64 keys
 * side by side per d: 4 zmm), then the V blocks [64][Dp] f32 (V's rows, D padded to 16); keys
 * past Skv and d past D are zero. Q: f32 [Dp]; sq = log2(e) · scale.
 * qk: 6 query rows × 64 keys (24 zmm), per d 4 K loads and 6 broadcasts of q[i][d]; S = sq · acc.
 * pv: 6 rows × 64 of D (24 zmm) per pass, per key 4 V loads and 6 broadcasts of p[i][j].
 * Each score and each output is one FMA chain in order of d (of j within a block).
 */
#include "avx512/attention_avx512.h"
#include "avx512_attn.h"
#include "ukernels.h"

#define NK QMM_ZA_NK

static size_t kb_bytes(int64_t D) { return (size_t)(D * NK) * sizeof(float); }
static size_t vb_bytes(int64_t D) { return (size_t)(NK * qmm_za_dp(D)) * sizeof(float); }
static size_t q_bytes(int64_t D) { return (size_t)qmm_za_dp(D) * sizeof(float); }

void qmm_f32_attn_pack_kv__avx512f(const qmm_attn_call *c, const void *k, const void *v, const uint8_t *live, void *kv) {
    (void)live; /* f32 operands: nothing formed across keys */
    const int64_t D = c->D, Dp = qmm_za_dp(D), nblk = (c->Skv + NK - 1) / NK;
    const size_t es = qmm_dtype_size(c->kv_dtype);
    float *K = kv, *V = (float *)kv + nblk * D * NK;
    float row[QMM_ATTN_MAX_D + 16];
    for (int64_t j = 0; j < nblk * NK; j++) {
        float *kd = K + (j / NK) * D * NK + j % NK, *vd = V + j * Dp;
        if (j >= c->Skv) {
            for (int64_t d = 0; d < D; d++) kd[d * NK] = 0.0f;
            for (int64_t d = 0; d < Dp; d += 16) _mm512_storeu_ps(vd + d, _mm512_setzero_ps());
            continue;
        }
        const char *kr = (const char *)k + j * c->ks[2] * (int64_t)es, *vr = (const char *)v + j * c->vs[2] * (int64_t)es;
        for (int64_t d = 0; d < Dp; d += 16) {
            const __mmask16 mk = qmm_za_lanes(D - d);
            _mm512_storeu_ps(row + d, qmm_z_load16(kr, c->kv_dtype, d, mk));
            _mm512_storeu_ps(vd + d, qmm_z_load16(vr, c->kv_dtype, d, mk));
        }
        for (int64_t d = 0; d < D; d++) kd[d * NK] = row[d];
    }
}

void qmm_f32_attn_pack_q__avx512f(const qmm_attn_call *c, const void *q, void *Q, float *sq) {
    qmm_za_pack_q(c, q, Q, sq, qmm_za_dp(c->D), 0);
}

static inline __attribute__((always_inline)) void qk_n(const int rows, const float *Q, const float *sq, int64_t D,
                                                        const float *Kb, float *S) {
    const int64_t Dp = qmm_za_dp(D);
    __m512 acc[QMM_ZA_MR][4];
    for (int i = 0; i < rows; i++)
        for (int z = 0; z < 4; z++) acc[i][z] = _mm512_setzero_ps();
    for (int64_t d = 0; d < D; d++) {
        const float *kd = Kb + d * NK;
        const __m512 k0 = _mm512_load_ps(kd), k1 = _mm512_load_ps(kd + 16), k2 = _mm512_load_ps(kd + 32),
                     k3 = _mm512_load_ps(kd + 48);
        for (int i = 0; i < rows; i++) {
            const __m512 qd = _mm512_set1_ps(Q[i * Dp + d]);
            acc[i][0] = _mm512_fmadd_ps(qd, k0, acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(qd, k1, acc[i][1]);
            acc[i][2] = _mm512_fmadd_ps(qd, k2, acc[i][2]);
            acc[i][3] = _mm512_fmadd_ps(qd, k3, acc[i][3]);
        }
    }
    for (int i = 0; i < rows; i++) {
        const __m512 s = _mm512_set1_ps(sq[i]);
        for (int z = 0; z < 4; z++) _mm512_storeu_ps(S + i * NK + 16 * z, _mm512_mul_ps(acc[i][z], s));
    }
}

void qmm_f32_attn_qk_ukernel_6x64__avx512f(int rows, const void *Q, const float *sq, const void *kblk, int64_t D,
                                           float *S) {
    QMM_ATTN_BY_ROWS(rows, qk_n, Q, sq, D, kblk, S);
}

/* O[i][0..Dp) = O[i]·alpha[i] + ps[i]·Σ_j P[i][j]·V[j] for rows
 * i < rows (1..6), P [rows][NK] f32, the V block [NK][Dp] f32 (V's rows, Dp a multiple of 16);
 * 6 rows × 64 of D (24 zmm) per pass, per key 4 V loads and 6 broadcasts of p[i][j]. */
static inline __attribute__((always_inline)) void pv_n(const int rows, const int nz, const float *P,
                                                                  const float *Vb, float *O, const float *alpha,
                                                                  const float *ps, int64_t Dp, int64_t d0) {
    __m512 acc[QMM_ZA_MR][4];
    for (int i = 0; i < rows; i++)
        for (int z = 0; z < nz; z++) acc[i][z] = _mm512_setzero_ps();
    for (int j = 0; j < NK; j++) {
        const float *vj = Vb + j * Dp + d0;
        __m512 v[4];
        for (int z = 0; z < nz; z++) v[z] = _mm512_loadu_ps(vj + 16 * z);
        for (int i = 0; i < rows; i++) {
            const __m512 p = _mm512_set1_ps(P[i * NK + j]);
            for (int z = 0; z < nz; z++) acc[i][z] = _mm512_fmadd_ps(p, v[z], acc[i][z]);
        }
    }
    for (int i = 0; i < rows; i++) qmm_za_pv_store(O + i * Dp + d0, acc[i], nz, alpha[i], ps[i]);
}

static inline void pv_f32(int rows, const float *P, const float *Vb, float *O, const float *alpha,
                                 const float *ps, int64_t Dp) {
    for (int64_t d0 = 0; d0 < Dp; d0 += 64) {
        const int64_t nz = (Dp - d0) / 16 >= 4 ? 4 : (Dp - d0) / 16;
        if (nz == 4) QMM_ATTN_BY_ROWS(rows, pv_n, 4, P, Vb, O, alpha, ps, Dp, d0);
        else if (nz == 3) QMM_ATTN_BY_ROWS(rows, pv_n, 3, P, Vb, O, alpha, ps, Dp, d0);
        else if (nz == 2) QMM_ATTN_BY_ROWS(rows, pv_n, 2, P, Vb, O, alpha, ps, Dp, d0);
        else QMM_ATTN_BY_ROWS(rows, pv_n, 1, P, Vb, O, alpha, ps, Dp, d0);
    }
}


void qmm_f32_attn_pv_ukernel_6x64__avx512f(int rows, const void *P, const float *ps, const float *alpha,
                                           const void *vblk, int64_t D, float *O, void *ws) {
    (void)ws;
    pv_f32(rows, P, vblk, O, alpha, ps, qmm_za_dp(D));
}

const qmm_attn_ukernels qmm_avx512_f32_attn = {
    .name = "avx512_f32 (f32 6x64, f32 P)", .p = QMM_ATTN_P_F32, .mr = QMM_ZA_MR, .nk = NK, .mq = QMM_ZA_MQ, .dalign = 16,
    .kb_bytes = kb_bytes, .vb_bytes = vb_bytes, .q_bytes = q_bytes,
    .pack_kv = qmm_f32_attn_pack_kv__avx512f, .pack_q = qmm_f32_attn_pack_q__avx512f,
    .qk = qmm_f32_attn_qk_ukernel_6x64__avx512f, .softmax = qmm_attn_softmax_f32__avx512,
    .pv = qmm_f32_attn_pv_ukernel_6x64__avx512f};

const char *qmm_avx512_f32_attn_admit(const void *call, char *why, size_t n) {
    const qmm_attn_call *c = call;
    (void)c; (void)why; (void)n;
    return NULL;
}
