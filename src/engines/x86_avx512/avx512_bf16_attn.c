/*
 * avx512_bf16_attn.c — attention on avx512_bf16 (SPEC §10): q, k, v and the probabilities p
 * rounded to bf16 (nearest even), products exact and sums in f32 (VDPBF16PS); the softmax, its
 * running max and sum, and O in f32: its ukernels (ukernels.h) under the attention driver
 * (core/attention.h), the frame's bf16 softmax (qmm_attn_softmax_bf16__avx512). Refuses mode F32.
 *
 * Packed kv head (per thread, once per head), Dp = D rounded up to 16, keys past Skv and d past
 * D zero: nblk = ceil(Skv / 64) K blocks [Dp/2][64][2] bf16 (per d-pair one zmm for each 16
 * keys: the VDPBF16PS operand against a broadcast q pair), then the V blocks [32][Dp][2] bf16
 * (per key pair one zmm for each 16 of D, against a broadcast p pair).
 * Q: bf16 [Dp]; sq = log2(e) · scale.
 * qk: 6 query rows × 64 keys (24 zmm), per d-pair 4 K loads and 6 dword broadcasts; S = sq · acc.
 * pv: 6 rows × 64 of D (24 zmm) per pass, per key pair 4 V loads and 6 dword broadcasts.
 */
#include "avx512/attention_avx512.h"
#include "avx512_attn.h"
#include "ukernels.h"

#define NK QMM_ZA_NK

static size_t kb_bytes(int64_t D) { return (size_t)(qmm_za_dp(D) * NK) * 2; }
static size_t vb_bytes(int64_t D) { return (size_t)(NK * qmm_za_dp(D)) * 2; }

static size_t q_bytes(int64_t D) { return (size_t)qmm_za_dp(D) * 2; }

void qmm_bf16_attn_pack_kv__avx512bf16(const qmm_attn_call *c, const void *k, const void *v, const uint8_t *live, void *kv) {
    qmm_za_pack_kv_bf16(c, k, v, live, kv, qmm_za_dp(c->D));
}

void qmm_bf16_attn_pack_q__avx512bf16(const qmm_attn_call *c, const void *q, void *Q, float *sq) {
    qmm_za_pack_q(c, q, Q, sq, qmm_za_dp(c->D), 1);
}

static inline __attribute__((always_inline)) void qk_n(const int rows, const uint16_t *Q, const float *sq, int64_t D,
                                                        const uint16_t *Kb, float *S) {
    const int64_t Dp = qmm_za_dp(D), pairs = Dp / 2;
    const uint32_t *Qw = (const uint32_t *)Q;
    __m512 acc[QMM_ZA_MR][4];
    for (int i = 0; i < rows; i++)
        for (int z = 0; z < 4; z++) acc[i][z] = _mm512_setzero_ps();
    for (int64_t p = 0; p < pairs; p++) {
        const uint16_t *kp = Kb + p * NK * 2;
        const __m512bh k0 = (__m512bh)_mm512_load_si512(kp), k1 = (__m512bh)_mm512_load_si512(kp + 32),
                       k2 = (__m512bh)_mm512_load_si512(kp + 64), k3 = (__m512bh)_mm512_load_si512(kp + 96);
        for (int i = 0; i < rows; i++) {
            const __m512bh qd = (__m512bh)_mm512_set1_epi32((int)Qw[i * pairs + p]);
            acc[i][0] = _mm512_dpbf16_ps(acc[i][0], qd, k0);
            acc[i][1] = _mm512_dpbf16_ps(acc[i][1], qd, k1);
            acc[i][2] = _mm512_dpbf16_ps(acc[i][2], qd, k2);
            acc[i][3] = _mm512_dpbf16_ps(acc[i][3], qd, k3);
        }
    }
    for (int i = 0; i < rows; i++) {
        const __m512 s = _mm512_set1_ps(sq[i]);
        for (int z = 0; z < 4; z++) _mm512_storeu_ps(S + i * NK + 16 * z, _mm512_mul_ps(acc[i][z], s));
    }
}

void qmm_bf16_attn_qk_ukernel_6x64__avx512bf16(int rows, const void *Q, const float *sq, const void *kblk, int64_t D,
                                               float *S) {
    QMM_ATTN_BY_ROWS(rows, qk_n, Q, sq, D, kblk, S);
}

static inline __attribute__((always_inline)) void pv_n(const int rows, const int nz, const uint16_t *P,
                                                        const uint16_t *Vb, float *O, const float *alpha,
                                                        const float *ps, int64_t Dp, int64_t d0) {
    const uint32_t *Pw = (const uint32_t *)P;
    __m512 acc[QMM_ZA_MR][4];
    for (int i = 0; i < rows; i++)
        for (int z = 0; z < nz; z++) acc[i][z] = _mm512_setzero_ps();
    for (int jp = 0; jp < NK / 2; jp++) {
        const uint16_t *vj = Vb + (jp * Dp + d0) * 2;
        __m512bh v[4];
        for (int z = 0; z < nz; z++) v[z] = (__m512bh)_mm512_loadu_si512(vj + 32 * z);
        for (int i = 0; i < rows; i++) {
            const __m512bh p = (__m512bh)_mm512_set1_epi32((int)Pw[i * (NK / 2) + jp]);
            for (int z = 0; z < nz; z++) acc[i][z] = _mm512_dpbf16_ps(acc[i][z], p, v[z]);
        }
    }
    for (int i = 0; i < rows; i++) qmm_za_pv_store(O + i * Dp + d0, acc[i], nz, alpha[i], ps[i]);
}

void qmm_bf16_attn_pv_ukernel_6x64__avx512bf16(int rows, const void *Pv, const float *ps, const float *alpha,
                                               const void *vblk, int64_t D, float *O, void *ws) {
    (void)ws;
    const uint16_t *P = Pv, *Vb = vblk;
    const int64_t Dp = qmm_za_dp(D);
    for (int64_t d0 = 0; d0 < Dp; d0 += 64) {
        const int64_t nz = (Dp - d0) / 16 >= 4 ? 4 : (Dp - d0) / 16;
        if (nz == 4) QMM_ATTN_BY_ROWS(rows, pv_n, 4, P, Vb, O, alpha, ps, Dp, d0);
        else if (nz == 3) QMM_ATTN_BY_ROWS(rows, pv_n, 3, P, Vb, O, alpha, ps, Dp, d0);
        else if (nz == 2) QMM_ATTN_BY_ROWS(rows, pv_n, 2, P, Vb, O, alpha, ps, Dp, d0);
        else QMM_ATTN_BY_ROWS(rows, pv_n, 1, P, Vb, O, alpha, ps, Dp, d0);
    }
}

const qmm_attn_ukernels qmm_avx512_bf16_attn = {
    .name = "avx512_bf16 (bf16 6x64, bf16 P)", .p = QMM_ATTN_P_BF16, .mr = QMM_ZA_MR, .nk = NK, .mq = QMM_ZA_MQ,
    .dalign = 16, .live_keys = 1, .kb_bytes = kb_bytes, .vb_bytes = vb_bytes, .q_bytes = q_bytes,
    .pack_kv = qmm_bf16_attn_pack_kv__avx512bf16, .pack_q = qmm_bf16_attn_pack_q__avx512bf16,
    .qk = qmm_bf16_attn_qk_ukernel_6x64__avx512bf16, .softmax = qmm_attn_softmax_bf16__avx512,
    .pv = qmm_bf16_attn_pv_ukernel_6x64__avx512bf16};

/* Where bf16 operands pay. Intel cores with AVX512-FP16 (Sapphire Rapids and later) issue
 * VDPBF16PS zmm at half the rate of FMA zmm (16 bf16 pairs per cycle against 2 × 16 f32
 * products): there avx512_f32 runs attention about 1.6× faster (bench/NOTES.md, "Attention"),
 * so mode best leaves it to avx512_f32 (or to amx_bf16's tiles). On AMD Zen 4/5, VDPBF16PS
 * gives twice FMA's products per cycle and this engine is the faster one. */
static int bf16_pays(void) { return !(qmm_cpu_features() & QMM_CPU_AVX512_FP16); }

const char *qmm_avx512_bf16_attn_admit(const void *call, char *why, size_t n) {
    const qmm_attn_call *c = call;
    (void)why; (void)n;
    if (c->mode == QMM_ATTN_F32) return "mode f32: this engine rounds q, k, v and p to bf16";
    if (!c->by_name && !bf16_pays()) return "mode best: VDPBF16PS runs at half FMA's rate on this CPU (avx512_f32 is faster)";
    return NULL;
}
