/*
 * avx2_f32_attn.c — attention on avx2_f32 (SPEC §10): f32 operands, FMA, f32 accumulation, the
 * online softmax in f32; under the attention driver (core/attention.h). Compiled with AVX2 + FMA
 * only (no F16C): f16 values are converted one by one (numerics.h), f32 and bf16 eight at a time.
 *
 * Packed kv head (per thread, once per head): nblk = ceil(Skv / 32) K blocks [D][32] f32, then
 * the V blocks [32][Dp] f32 (Dp = D rounded up to 8); keys past Skv and d past D are zero.
 * Both micro-kernels are 6 rows × 16 columns (12 ymm accumulators): qk over d (2 K loads and 6
 * broadcasts of q[i][d] per step), pv over the block's keys (2 V loads, 6 broadcasts of p[i][j]).
 * A tile: 48 query rows; per block S = Q·Kᵀ, the softmax of each row, O = O·α + P·V.
 */
#include "attention.h"
#include "numerics.h"
#include "simd_avx2.h"

#include <math.h>

const char *qmm_avx2_f32_attn_admit(const qmm_attn_call *c, char *why, size_t n);
qmm_status qmm_avx2_f32_attn_run(qmm_context *ctx, const qmm_attn_call *c);

#define NK 32
#define MQ 192
#define MR 6

static int64_t dp_of(int64_t D) { return qmm_round_up(D, 8); }
static size_t kb_bytes(int64_t D) { return (size_t)(D * NK) * sizeof(float); }
static size_t vb_bytes(int64_t D) { return (size_t)(NK * dp_of(D)) * sizeof(float); }
static size_t kv_bytes(int64_t Skv, int64_t D) { return qmm_attn_blocks_bytes(Skv, NK, kb_bytes(D) + vb_bytes(D), 0); }
/* S and P [MQ][NK], O and Q [MQ][Dp], m, l, alpha [MQ] */
static size_t tile_bytes(int64_t D) { return (size_t)(MQ * NK * 2 + MQ * dp_of(D) * 2 + MQ * 3) * sizeof(float); }

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

static void pack_kv(const qmm_attn_call *c, const void *k, const void *v, void *kv) {
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

/* S[i][n0 .. n0+16) = Σ_d Q[i][d]·K[d][n0 ..] for rows i < rows */
static inline __attribute__((always_inline)) void qk_n(const int rows, const float *Q, int64_t Dp, int64_t D,
                                                        const float *Kb, float *S) {
    for (int n0 = 0; n0 < NK; n0 += 16) {
        __m256 acc[MR][2];
        for (int i = 0; i < rows; i++) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
        for (int64_t d = 0; d < D; d++) {
            const __m256 k0 = _mm256_load_ps(Kb + d * NK + n0), k1 = _mm256_load_ps(Kb + d * NK + n0 + 8);
            for (int i = 0; i < rows; i++) {
                const __m256 qd = _mm256_broadcast_ss(Q + i * Dp + d);
                acc[i][0] = _mm256_fmadd_ps(qd, k0, acc[i][0]);
                acc[i][1] = _mm256_fmadd_ps(qd, k1, acc[i][1]);
            }
        }
        for (int i = 0; i < rows; i++) {
            _mm256_storeu_ps(S + i * NK + n0, acc[i][0]);
            _mm256_storeu_ps(S + i * NK + n0 + 8, acc[i][1]);
        }
    }
}

/* O[i][d0 .. d0 + 8·nz) = O·alpha[i] + Σ_j P[i][j]·V[j][d0 ..], nz 1 or 2 */
static inline __attribute__((always_inline)) void pv_n(const int rows, const int nz, const float *P, const float *Vb,
                                                        float *O, const float *alpha, int64_t Dp, int64_t d0) {
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
        const __m256 a = _mm256_set1_ps(alpha[i]);
        float *o = O + i * Dp + d0;
        _mm256_storeu_ps(o, _mm256_fmadd_ps(_mm256_loadu_ps(o), a, acc[i][0]));
        if (nz > 1) _mm256_storeu_ps(o + 8, _mm256_fmadd_ps(_mm256_loadu_ps(o + 8), a, acc[i][1]));
    }
}

static void qk(int rows, const float *Q, int64_t Dp, int64_t D, const float *Kb, float *S) {
    QMM_ATTN_BY_ROWS(rows, qk_n, Q, Dp, D, Kb, S);
}

static void pv(int rows, const float *P, const float *Vb, float *O, const float *alpha, int64_t Dp) {
    for (int64_t d0 = 0; d0 < Dp; d0 += 16) {
        if (Dp - d0 >= 16) QMM_ATTN_BY_ROWS(rows, pv_n, 2, P, Vb, O, alpha, Dp, d0);
        else QMM_ATTN_BY_ROWS(rows, pv_n, 1, P, Vb, O, alpha, Dp, d0);
    }
}

static inline float hmax8(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
}

static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

/* The online softmax of row i on keys [j0, j0 + nv) (attention_avx512.h's, 8 lanes at a time):
 * scale, mask (bool false and keys past Skv: -inf), running max, p = exp(s − m'), l, alpha; a
 * NaN score (now or in an earlier block) makes m, l, alpha and p NaN: the row is NaN. */
static void softmax_row(const qmm_attn_call *c, float *S, float *P, float *m, float *l, float *alpha, int64_t i,
                        int64_t j0, int64_t nv, const void *mask) {
    float *s = S + i * NK, *p = P + i * NK;
    const __m256 sc = _mm256_set1_ps(c->scale), ninf = _mm256_set1_ps(-INFINITY);
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256 vmax = ninf, nan = _mm256_setzero_ps();
    for (int j = 0; j < NK; j += 8) {
        /* lanes j + e < nv are keys */
        const __m256 live = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32((int)(nv - j)), lane));
        __m256 x = _mm256_blendv_ps(ninf, _mm256_mul_ps(_mm256_loadu_ps(s + j), sc), live);
        if (mask) { /* bool false replaces the score by -inf (a NaN score too); additive adds */
            float add[8];
            int32_t dead[8];
            for (int e = 0; e < 8; e++) {
                add[e] = 0.0f;
                dead[e] = 0;
                if (j + e >= nv) continue;
                const int64_t mi = i * c->ms[2] + (j0 + j + e) * c->ms[3];
                if (c->mask_dtype == QMM_U8) dead[e] = ((const uint8_t *)mask)[mi] ? 0 : -1;
                else add[e] = qmm_load_f(mask, c->mask_dtype, mi);
            }
            x = _mm256_blendv_ps(_mm256_add_ps(x, _mm256_loadu_ps(add)), ninf,
                                 _mm256_castsi256_ps(_mm256_loadu_si256((const __m256i *)dead)));
        }
        _mm256_storeu_ps(s + j, x);
        vmax = _mm256_max_ps(vmax, x);
        nan = _mm256_or_ps(nan, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    }
    const float bm = hmax8(vmax), m0 = m[i], mn = bm > m0 ? bm : m0; /* m0 NaN: mn NaN */
    if (_mm256_movemask_ps(nan) || mn != mn) {
        for (int j = 0; j < NK; j++) p[j] = NAN;
        m[i] = l[i] = alpha[i] = NAN;
        return;
    }
    if (mn == -INFINITY) {
        for (int j = 0; j < NK; j++) p[j] = 0.0f;
        alpha[i] = 1.0f;
        return;
    }
    const __m256 vm = _mm256_set1_ps(mn);
    __m256 sum = _mm256_setzero_ps();
    for (int j = 0; j < NK; j += 8) {
        const __m256 e = qmm_y_exp(_mm256_sub_ps(_mm256_loadu_ps(s + j), vm));
        _mm256_storeu_ps(p + j, e);
        sum = _mm256_add_ps(sum, e);
    }
    alpha[i] = mn == m0 ? 1.0f : qmm_expf(m0 - mn); /* the running max mostly stays */
    l[i] = l[i] * alpha[i] + hsum8(sum);
    m[i] = mn;
}

static void tile(const qmm_attn_call *c, const void *kv, const void *q, int64_t rows, const void *mask, void *out,
                 void *scratch) {
    const int64_t D = c->D, Dp = dp_of(D), nblk = (c->Skv + NK - 1) / NK;
    float *S = scratch, *P = S + MQ * NK, *O = P + MQ * NK, *Q = O + MQ * Dp, *m = Q + MQ * Dp, *l = m + MQ,
          *alpha = l + MQ;
    const size_t qes = qmm_dtype_size(c->q_dtype), oes = qmm_dtype_size(c->out_dtype);
    for (int64_t i = 0; i < rows; i++) {
        row_f32((const char *)q + i * c->qs[2] * (int64_t)qes, c->q_dtype, D, Q + i * Dp);
        for (int64_t d = 0; d < Dp; d++) O[i * Dp + d] = 0.0f;
        m[i] = -INFINITY;
        l[i] = 0.0f;
    }
    const float *K = kv, *V = (const float *)kv + nblk * D * NK;
    for (int64_t kb = 0; kb < nblk; kb++) {
        const int64_t j0 = kb * NK, nv = c->Skv - j0 < NK ? c->Skv - j0 : NK;
        for (int64_t r = 0; r < rows; r += MR)
            qk((int)(rows - r < MR ? rows - r : MR), Q + r * Dp, Dp, D, K + kb * D * NK, S + r * NK);
        for (int64_t i = 0; i < rows; i++) softmax_row(c, S, P, m, l, alpha, i, j0, nv, mask);
        for (int64_t r = 0; r < rows; r += MR)
            pv((int)(rows - r < MR ? rows - r : MR), P + r * NK, V + kb * NK * Dp, O + r * Dp, alpha + r, Dp);
    }
    for (int64_t i = 0; i < rows; i++) {
        /* 0 where l = 0 (every score -inf; O may hold 0·NaN of a NaN v), NaN where l is NaN */
        const float inv = 1.0f / l[i];
        char *row = (char *)out + i * c->os[2] * (int64_t)oes;
        if (l[i] == 0.0f) {
            for (int64_t d = 0; d < D; d++) qmm_store_f(row, c->out_dtype, d, 0.0f);
            continue;
        }
        for (int64_t d = 0; d < D; d++) {
            if (c->out_dtype == QMM_F32 && d + 8 <= D) {
                _mm256_storeu_ps((float *)row + d, _mm256_mul_ps(_mm256_loadu_ps(O + i * Dp + d), _mm256_set1_ps(inv)));
                d += 7;
                continue;
            }
            qmm_store_f(row, c->out_dtype, d, O[i * Dp + d] * inv);
        }
    }
}

static const qmm_attn_kernels kernels = {
    .mq = MQ, .kv_bytes = kv_bytes, .tile_bytes = tile_bytes, .pack_kv = pack_kv, .tile = tile};

const char *qmm_avx2_f32_attn_admit(const qmm_attn_call *c, char *why, size_t n) {
    (void)c; (void)why; (void)n;
    return NULL;
}

qmm_status qmm_avx2_f32_attn_run(qmm_context *ctx, const qmm_attn_call *c) {
    return qmm_attention_run(ctx, c, &kernels);
}
