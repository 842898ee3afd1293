/*
 * avx512_bf16_attn.c — attention on avx512_bf16 (SPEC §10): q, k, v and the probabilities p
 * rounded to bf16 (nearest even), products exact and sums in f32 (VDPBF16PS); the softmax, its
 * running max and sum, and O in f32; the tile loop of attention_avx512.h. Refuses mode F32.
 *
 * Packed kv head (per thread, once per head), Dp = D rounded up to 16, keys past Skv and d past
 * D zero: nblk = ceil(Skv / 64) K blocks [Dp/2][64][2] bf16 (per d-pair one zmm for each 16
 * keys: the VDPBF16PS operand against a broadcast q pair), then the V blocks [32][Dp][2] bf16
 * (per key pair one zmm for each 16 of D, against a broadcast p pair).
 * qk: 6 query rows × 64 keys (24 zmm), per d-pair 4 K loads and 6 dword broadcasts.
 * pv: 6 rows × 64 of D (24 zmm) per pass, per key pair 4 V loads and 6 dword broadcasts.
 */
#include "attention_avx512.h"
#include "avx512_attn.h"

#define NK QMM_ZA_NK

static size_t kb_bytes(int64_t D) { return (size_t)(qmm_za_dp(D) * NK) * 2; }
static size_t vb_bytes(int64_t D) { return (size_t)(NK * qmm_za_dp(D)) * 2; }

static size_t kv_bytes(int64_t Skv, int64_t D) { return qmm_attn_blocks_bytes(Skv, NK, kb_bytes(D) + vb_bytes(D), 0); }

static void pack_kv(const qmm_attn_call *c, const void *k, const void *v, void *kv) {
    qmm_za_pack_kv_bf16(c, k, v, kv, qmm_za_dp(c->D));
}

static inline __attribute__((always_inline)) void qk_n(const int rows, const uint16_t *Q, int64_t D,
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
    for (int i = 0; i < rows; i++)
        for (int z = 0; z < 4; z++) _mm512_storeu_ps(S + i * NK + 16 * z, acc[i][z]);
}

static void qk(int rows, const void *Q, int64_t D, const void *Kb, float *S) {
    QMM_ATTN_BY_ROWS(rows, qk_n, Q, D, Kb, S);
}

static inline __attribute__((always_inline)) void pv_n(const int rows, const int nz, const uint16_t *P,
                                                        const uint16_t *Vb, float *O, const float *alpha, int64_t Dp,
                                                        int64_t d0) {
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
    for (int i = 0; i < rows; i++) {
        const __m512 a = _mm512_set1_ps(alpha[i]);
        float *o = O + i * Dp + d0;
        for (int z = 0; z < nz; z++) _mm512_storeu_ps(o + 16 * z, _mm512_fmadd_ps(_mm512_loadu_ps(o + 16 * z), a, acc[i][z]));
    }
}

static void pv(int rows, const void *Pv, const void *Vv, float *O, const float *alpha, int64_t D) {
    const uint16_t *P = Pv, *Vb = Vv;
    const int64_t Dp = qmm_za_dp(D);
    for (int64_t d0 = 0; d0 < Dp; d0 += 64) {
        const int64_t nz = (Dp - d0) / 16 >= 4 ? 4 : (Dp - d0) / 16;
        if (nz == 4) QMM_ATTN_BY_ROWS(rows, pv_n, 4, P, Vb, O, alpha, Dp, d0);
        else if (nz == 3) QMM_ATTN_BY_ROWS(rows, pv_n, 3, P, Vb, O, alpha, Dp, d0);
        else if (nz == 2) QMM_ATTN_BY_ROWS(rows, pv_n, 2, P, Vb, O, alpha, Dp, d0);
        else QMM_ATTN_BY_ROWS(rows, pv_n, 1, P, Vb, O, alpha, Dp, d0);
    }
}

static size_t tile_bytes(int64_t D) { return qmm_za_tile_bytes(qmm_za_dp(D)); }

static void tile(const qmm_attn_call *c, const void *kv, const void *q, int64_t rows, const void *mask, void *out,
                 void *scratch) {
    qmm_za_tile_run(c, kv, q, rows, mask, out, scratch, 1, kb_bytes(c->D), vb_bytes(c->D), qk, pv);
}

static const qmm_attn_kernels kernels = {
    .mq = QMM_ZA_MQ, .kv_bytes = kv_bytes, .tile_bytes = tile_bytes, .pack_kv = pack_kv, .tile = tile};

/* Where bf16 operands pay. Intel cores with AVX512-FP16 (Sapphire Rapids and later) issue
 * VDPBF16PS zmm at half the rate of FMA zmm (16 bf16 pairs per cycle against 2 × 16 f32
 * products): there avx512_f32 runs attention about 1.6× faster (bench/NOTES.md, "Attention"),
 * so mode best leaves it to avx512_f32 (or to amx_bf16's tiles). On AMD Zen 4/5, VDPBF16PS
 * gives twice FMA's products per cycle and this engine is the faster one. */
static int bf16_pays(void) { return !(qmm_cpu_features() & QMM_CPU_AVX512_FP16); }

const char *qmm_avx512_bf16_attn_admit(const qmm_attn_call *c, char *why, size_t n) {
    (void)why; (void)n;
    if (c->mode == QMM_ATTN_F32) return "mode f32: this engine rounds q, k, v and p to bf16";
    if (!c->by_name && !bf16_pays()) return "mode best: VDPBF16PS runs at half FMA's rate on this CPU (avx512_f32 is faster)";
    return NULL;
}

qmm_status qmm_avx512_bf16_attn_run(qmm_context *ctx, const qmm_attn_call *c) {
    return qmm_attention_run(ctx, c, &kernels);
}
