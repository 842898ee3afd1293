/*
 * avx512_f32_attn.c — attention on avx512_f32 (SPEC §10): f32 operands, FMA, f32 accumulation;
 * the tile loop and softmax of attention_avx512.h.
 *
 * Packed kv head (per thread, once per head): nblk = ceil(Skv / 64) K blocks [D][64] f32 (64 keys
 * side by side per d: 4 zmm), then the V blocks [64][Dp] f32 (V's rows, D padded to 16); keys
 * past Skv and d past D are zero.
 * qk: 6 query rows × 64 keys (24 zmm), per d 4 K loads and 6 broadcasts of q[i][d].
 * pv: qmm_za_pv_f32 (attention_avx512.h).
 * Each score and each output is one FMA chain in order of d (of j within a block).
 */
#include "attention_avx512.h"
#include "avx512_attn.h"

#define NK QMM_ZA_NK

static size_t kb_bytes(int64_t D) { return (size_t)(D * NK) * sizeof(float); }
static size_t vb_bytes(int64_t D) { return (size_t)(NK * qmm_za_dp(D)) * sizeof(float); }

static size_t kv_bytes(int64_t Skv, int64_t D) { return qmm_attn_blocks_bytes(Skv, NK, kb_bytes(D) + vb_bytes(D), 0); }

static void pack_kv(const qmm_attn_call *c, const void *k, const void *v, void *kv) {
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

static inline __attribute__((always_inline)) void qk_n(const int rows, const float *Q, int64_t D, const float *Kb,
                                                        float *S) {
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
    for (int i = 0; i < rows; i++)
        for (int z = 0; z < 4; z++) _mm512_storeu_ps(S + i * NK + 16 * z, acc[i][z]);
}

static void qk(int rows, const void *Q, int64_t D, const void *Kb, float *S) {
    QMM_ATTN_BY_ROWS(rows, qk_n, Q, D, Kb, S);
}

static void pv(int rows, const void *P, const void *Vb, float *O, const float *alpha, int64_t D) {
    qmm_za_pv_f32(rows, P, Vb, O, alpha, qmm_za_dp(D));
}

static size_t tile_bytes(int64_t D) { return qmm_za_tile_bytes(qmm_za_dp(D)); }

static void tile(const qmm_attn_call *c, const void *kv, const void *q, int64_t rows, const void *mask, void *out,
                 void *scratch) {
    qmm_za_tile_run(c, kv, q, rows, mask, out, scratch, 0, kb_bytes(c->D), vb_bytes(c->D), qk, pv);
}

static const qmm_attn_kernels kernels = {
    .mq = QMM_ZA_MQ, .kv_bytes = kv_bytes, .tile_bytes = tile_bytes, .pack_kv = pack_kv, .tile = tile};

const char *qmm_avx512_f32_attn_admit(const qmm_attn_call *c, char *why, size_t n) {
    (void)c; (void)why; (void)n;
    return NULL;
}

qmm_status qmm_avx512_f32_attn_run(qmm_context *ctx, const qmm_attn_call *c) {
    return qmm_attention_run(ctx, c, &kernels);
}
