/*
 * attention_avx512.h — what the AVX-512 attention engines (avx512_f32, avx512_bf16) share: the
 * tile loop of the attention driver (core/attention.h) over key blocks of NK keys, the online
 * softmax of one score row in f32, the mask of a block row, the query rows' load and the
 * output's store. Each engine supplies its operand layouts and its two micro-kernels:
 *
 *   qk(rows, Q tile, K block, S)        S[i][0..NK) = Σ_d Q[i][d]·K[j][d]     (fp32 accumulation)
 *   pv(rows, P, V block, O, alpha, D)   O[i][0..D) = O[i]·alpha[i] + Σ_j P[i][j]·V[j]
 *
 * The softmax of row i on a block (SPEC §10): s = scale·S (+ additive mask; bool false, and keys
 * past Skv: -inf); m' = max(m, max s); alpha = exp(m − m'); p = exp(s − m');
 * l = l·alpha + Σ p; m = m'. While every score of a row so far is -inf, p = 0 and l stays 0;
 * out = O / l at the end, 0 where l = 0. A NaN score (one no bool mask excludes) makes the row
 * NaN: m, l, alpha and p NaN from that block on, so O and out are NaN. Included only by files
 * compiled with AVX-512 F/BW/VL/DQ.
 */
#ifndef QMM_ATTENTION_AVX512_H
#define QMM_ATTENTION_AVX512_H

#include "attention.h"
#include "numerics.h"
#include "simd_avx512.h"

#include <math.h>

#define QMM_ZA_NK 64     /* keys per block: 4 zmm of scores per row */
#define QMM_ZA_MQ 192    /* query rows per tile: 32 micro-tiles of 6 rows (each K and V block read once per 192 rows) */
#define QMM_ZA_MR 6

/* the lanes of 16 values from n valid ones (n may be <= 0) */
static inline __mmask16 qmm_za_lanes(int64_t n) { return n >= 16 ? (__mmask16)0xffff : n <= 0 ? 0 : (__mmask16)((1u << n) - 1u); }

/* D rounded up to 16: the width of a Q, O and (f32) V row */
static inline int64_t qmm_za_dp(int64_t D) { return qmm_round_up(D, 16); }

/* A tile's scratch, for rows of Dp values (D rounded up to the engine's multiple of 16):
 * S and P [MQ][NK] f32, O [MQ][Dp] f32, Q [MQ][Dp] f32 (or bf16 in its first half), m, l,
 * alpha [MQ], the mask row of a block [NK] and a [16][64] f32 block of the engine's own. */
typedef struct {
    float *S, *P, *O, *m, *l, *alpha, *mtmp, *blk;
    void *Q;
    int64_t Dp;
} qmm_za_tile;

static inline size_t qmm_za_tile_bytes(int64_t Dp) {
    return (size_t)(QMM_ZA_MQ * QMM_ZA_NK * 2 + QMM_ZA_MQ * Dp * 2 + QMM_ZA_MQ * 3 + QMM_ZA_NK + 16 * 64) * sizeof(float);
}

static inline qmm_za_tile qmm_za_tile_of(void *scratch, int64_t Dp) {
    qmm_za_tile t;
    float *f = scratch;
    t.Dp = Dp;
    t.S = f;             f += QMM_ZA_MQ * QMM_ZA_NK;
    t.P = f;             f += QMM_ZA_MQ * QMM_ZA_NK;
    t.O = f;             f += QMM_ZA_MQ * Dp;
    t.Q = f;             f += QMM_ZA_MQ * Dp;
    t.m = f;             f += QMM_ZA_MQ;
    t.l = f;             f += QMM_ZA_MQ;
    t.alpha = f;         f += QMM_ZA_MQ;
    t.mtmp = f;          f += QMM_ZA_NK;
    t.blk = f;
    return t;
}

/* Query row i of the tile (q: the tile's first row) → Q f32 [Dp] (bf16 = 0) or bf16 [Dp]
 * rounded to nearest even (bf16 = 1), zero past D. */
static inline void qmm_za_load_q(const qmm_attn_call *c, const void *q, int64_t i, void *Q, int64_t Dp, int bf16) {
    const char *row = (const char *)q + i * c->qs[2] * (int64_t)qmm_dtype_size(c->q_dtype);
    for (int64_t d = 0; d < Dp; d += 16) {
        const __m512 x = qmm_z_load16(row, c->q_dtype, d, qmm_za_lanes(c->D - d));
        if (bf16) qmm_z_store16((uint16_t *)Q + i * Dp + d, QMM_BF16, 0xffff, x);
        else _mm512_storeu_ps((float *)Q + i * Dp + d, x);
    }
}

/* The mask of row i on keys [j0, j0 + nv) → 16·z lanes of s (lanes past nv already -inf). */
static inline void qmm_za_mask(const qmm_attn_call *c, const void *mask, int64_t i, int64_t j0, int64_t nv,
                               float *tmp, __m512 s[4]) {
    const int64_t ms2 = c->ms[2], ms3 = c->ms[3];
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    if (c->mask_dtype == QMM_U8) {
        const uint8_t *r = (const uint8_t *)mask + i * ms2 + j0 * ms3;
        for (int z = 0; z < 4 && nv > 16 * z; z++) {
            const __mmask16 mk = qmm_za_lanes(nv - 16 * z);
            __mmask16 attend;
            if (ms3 == 1) {
                attend = _mm512_mask_test_epi32_mask(mk, _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(mk, r + 16 * z)),
                                                     _mm512_set1_epi32(0xff));
            } else {
                attend = 0;
                for (int e = 0; e < 16 && 16 * z + e < nv; e++)
                    if (r[(16 * z + e) * ms3]) attend |= (__mmask16)(1u << e);
            }
            s[z] = _mm512_mask_mov_ps(ninf, attend, s[z]);
        }
        return;
    }
    const size_t es = qmm_dtype_size(c->mask_dtype);
    const char *r = (const char *)mask + (i * ms2 + j0 * ms3) * (int64_t)es;
    for (int z = 0; z < 4 && nv > 16 * z; z++) {
        const __mmask16 mk = qmm_za_lanes(nv - 16 * z);
        __m512 add;
        if (ms3 == 1) {
            add = qmm_z_load16(r, c->mask_dtype, 16 * z, mk);
        } else {
            for (int e = 0; e < 16; e++)
                tmp[e] = 16 * z + e < nv ? qmm_load_f(r, c->mask_dtype, (16 * z + e) * ms3) : 0.0f;
            add = _mm512_loadu_ps(tmp);
        }
        s[z] = _mm512_mask_add_ps(s[z], mk, s[z], add);
    }
}

/* exp(x) for x <= 0, -inf or NaN (s − m' of the softmax): qmm_z_exp's polynomial and scaling,
 * without its x > 88.7 case (none here); -inf and x < -87.3 give 0, NaN stays NaN. */
static inline __m512 qmm_za_exp_le0(__m512 x) {
    __m512 n;
    const __m512 y = qmm_z_exp_core(x, &n);
    const __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(QMM_EXP_LO), _CMP_NLT_UQ); /* not below LO, or NaN */
    return _mm512_maskz_scalef_ps(keep, y, n);
}

/* The online softmax of row i on one block of nv valid keys (see the top); P row: NK values, f32
 * or bf16 (bf16 = 1: NK bf16 in the row's first half). */
static inline void qmm_za_softmax(const qmm_attn_call *c, const qmm_za_tile *t, int64_t i, int64_t j0, int64_t nv,
                                  const void *mask, int bf16) {
    const float *Srow = t->S + i * QMM_ZA_NK;
    const __m512 sc = _mm512_set1_ps(c->scale), ninf = _mm512_set1_ps(-INFINITY);
    __m512 s[4];
    for (int z = 0; z < 4; z++)
        s[z] = _mm512_mask_mul_ps(ninf, qmm_za_lanes(nv - 16 * z), _mm512_loadu_ps(Srow + 16 * z), sc);
    if (mask) qmm_za_mask(c, mask, i, j0, nv, t->mtmp, s);
    __mmask16 nan = 0;
    for (int z = 0; z < 4; z++) nan |= _mm512_cmp_ps_mask(s[z], s[z], _CMP_UNORD_Q);
    const float bm = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(s[0], s[1]), _mm512_max_ps(s[2], s[3])));
    const float m0 = t->m[i], mn = bm > m0 ? bm : m0; /* m0 NaN: mn NaN */
    void *Prow = bf16 ? (void *)((uint16_t *)t->P + i * QMM_ZA_NK) : (void *)(t->P + i * QMM_ZA_NK);
    if (nan || mn != mn) { /* a NaN score, now or before: the row is NaN */
        t->m[i] = t->l[i] = t->alpha[i] = NAN;
        if (bf16) for (int z = 0; z < 2; z++) _mm512_storeu_si512((uint16_t *)Prow + 32 * z, _mm512_set1_epi16(0x7fc0));
        else for (int z = 0; z < 4; z++) _mm512_storeu_ps((float *)Prow + 16 * z, _mm512_set1_ps(NAN));
        return;
    }
    if (mn == -INFINITY) { /* every key so far masked: nothing to add */
        t->alpha[i] = 1.0f;
        if (bf16) for (int z = 0; z < 2; z++) _mm512_storeu_si512((uint16_t *)Prow + 32 * z, _mm512_setzero_si512());
        else for (int z = 0; z < 4; z++) _mm512_storeu_ps((float *)Prow + 16 * z, _mm512_setzero_ps());
        return;
    }
    const float a = mn == m0 ? 1.0f : qmm_expf(m0 - mn); /* the running max mostly stays */
    const __m512 vm = _mm512_set1_ps(mn);
    __m512 sum = _mm512_setzero_ps();
    for (int z = 0; z < 4; z++) {
        const __m512 p = qmm_za_exp_le0(_mm512_sub_ps(s[z], vm));
        sum = _mm512_add_ps(sum, p);
        if (bf16) qmm_z_store16((uint16_t *)Prow + 16 * z, QMM_BF16, 0xffff, p);
        else _mm512_storeu_ps((float *)Prow + 16 * z, p);
    }
    t->l[i] = t->l[i] * a + _mm512_reduce_add_ps(sum);
    t->m[i] = mn;
    t->alpha[i] = a;
}

/* out row i = O[i] / l[i] in out's dtype: 0 where l = 0 (every score -inf; O may hold 0·NaN of
 * a NaN v), NaN where l is NaN */
static inline void qmm_za_store(const qmm_attn_call *c, const qmm_za_tile *t, int64_t i, void *out) {
    const int64_t Dp = t->Dp;
    const size_t es = qmm_dtype_size(c->out_dtype);
    char *row = (char *)out + i * c->os[2] * (int64_t)es;
    const float l = t->l[i];
    const __m512 inv = _mm512_set1_ps(1.0f / l);
    for (int64_t d = 0; d < c->D; d += 16)
        qmm_z_store16(row + d * (int64_t)es, c->out_dtype, qmm_z_tail_mask(c->D - d),
                      l == 0.0f ? _mm512_setzero_ps() : _mm512_mul_ps(_mm512_loadu_ps(t->O + i * Dp + d), inv));
}

/* One kv head → bf16 blocks of NK keys (keys past Skv and d past D zero), Dp a multiple of 16,
 * each key shifted first, k − qmm_attn_key_mean in f32, so a common offset of the keys costs no
 * bf16 bits (the scores of a row all move by q·mean: the softmax does not change):
 * nblk K blocks [Dp/2][NK][2] (per d-pair and 16 keys one zmm: the VDPBF16PS operand against a
 * broadcast q pair, and 16 consecutive pair rows one AMX B tile at a row stride of NK·4 bytes),
 * then nblk V blocks [NK/2][Dp][2] (per key pair and 16 of D one zmm against a broadcast p pair;
 * 16 consecutive key-pair rows one AMX B tile at a row stride of Dp·4 bytes). */
static inline void qmm_za_pack_kv_bf16(const qmm_attn_call *c, const void *k, const void *v, void *kv, int64_t Dp) {
    const int64_t D = c->D, NK = QMM_ZA_NK, nblk = (c->Skv + NK - 1) / NK;
    const size_t es = qmm_dtype_size(c->kv_dtype);
    uint16_t *K = kv, *V = (uint16_t *)kv + nblk * Dp * NK;
    uint16_t kr16[QMM_ATTN_MAX_D + 32], vr16[QMM_ATTN_MAX_D + 32];
    float mean[QMM_ATTN_MAX_D + 32] = {0};
    qmm_attn_key_mean(c, k, mean);
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

/* The f32 P·V of avx512_f32 and avx512_vnni: O[i][0..Dp) = O[i]·alpha[i] + Σ_j P[i][j]·V[j] for
 * rows i < rows (1..6), P [rows][NK] f32, the V block [NK][Dp] f32 (V's rows, Dp a multiple of 16);
 * 6 rows × 64 of D (24 zmm) per pass, per key 4 V loads and 6 broadcasts of p[i][j]. */
static inline __attribute__((always_inline)) void qmm_za_pv_f32_n(const int rows, const int nz, const float *P, const float *Vb,
                                                        float *O, const float *alpha, int64_t Dp, int64_t d0) {
    __m512 acc[QMM_ZA_MR][4];
    for (int i = 0; i < rows; i++)
        for (int z = 0; z < nz; z++) acc[i][z] = _mm512_setzero_ps();
    for (int j = 0; j < QMM_ZA_NK; j++) {
        const float *vj = Vb + j * Dp + d0;
        __m512 v[4];
        for (int z = 0; z < nz; z++) v[z] = _mm512_loadu_ps(vj + 16 * z);
        for (int i = 0; i < rows; i++) {
            const __m512 p = _mm512_set1_ps(P[i * QMM_ZA_NK + j]);
            for (int z = 0; z < nz; z++) acc[i][z] = _mm512_fmadd_ps(p, v[z], acc[i][z]);
        }
    }
    for (int i = 0; i < rows; i++) {
        const __m512 a = _mm512_set1_ps(alpha[i]);
        float *o = O + i * Dp + d0;
        for (int z = 0; z < nz; z++) _mm512_storeu_ps(o + 16 * z, _mm512_fmadd_ps(_mm512_loadu_ps(o + 16 * z), a, acc[i][z]));
    }
}

static inline void qmm_za_pv_f32(int rows, const float *P, const float *Vb, float *O, const float *alpha, int64_t Dp) {
    for (int64_t d0 = 0; d0 < Dp; d0 += 64) {
        const int64_t nz = (Dp - d0) / 16 >= 4 ? 4 : (Dp - d0) / 16;
        if (nz == 4) QMM_ATTN_BY_ROWS(rows, qmm_za_pv_f32_n, 4, P, Vb, O, alpha, Dp, d0);
        else if (nz == 3) QMM_ATTN_BY_ROWS(rows, qmm_za_pv_f32_n, 3, P, Vb, O, alpha, Dp, d0);
        else if (nz == 2) QMM_ATTN_BY_ROWS(rows, qmm_za_pv_f32_n, 2, P, Vb, O, alpha, Dp, d0);
        else QMM_ATTN_BY_ROWS(rows, qmm_za_pv_f32_n, 1, P, Vb, O, alpha, Dp, d0);
    }
}

typedef void (*qmm_za_qk_fn)(int rows, const void *Q, int64_t D, const void *Kb, float *S);
typedef void (*qmm_za_pv_fn)(int rows, const void *P, const void *Vb, float *O, const float *alpha, int64_t D);

/* The tile loop (attention.h's tile kernel) for an engine whose packed head holds nblk K blocks
 * of kb_bytes then nblk V blocks of vb_bytes. */
static inline __attribute__((always_inline)) void qmm_za_tile_run(const qmm_attn_call *c, const void *kv, const void *q,
                                                                  int64_t rows, const void *mask, void *out, void *scratch,
                                                                  int bf16, size_t kb_bytes, size_t vb_bytes,
                                                                  qmm_za_qk_fn qk, qmm_za_pv_fn pv) {
    const int64_t Dp = qmm_za_dp(c->D), nblk = (c->Skv + QMM_ZA_NK - 1) / QMM_ZA_NK;
    const qmm_za_tile t = qmm_za_tile_of(scratch, Dp);
    const size_t qrow = bf16 ? (size_t)Dp * 2 : (size_t)Dp * 4, prow = bf16 ? QMM_ZA_NK * 2 : QMM_ZA_NK * 4;
    for (int64_t i = 0; i < rows; i++) {
        qmm_za_load_q(c, q, i, t.Q, Dp, bf16);
        t.m[i] = -INFINITY;
        t.l[i] = 0.0f;
        for (int64_t d = 0; d < Dp; d += 16) _mm512_storeu_ps(t.O + i * Dp + d, _mm512_setzero_ps());
    }
    const char *K = kv, *V = (const char *)kv + (size_t)nblk * kb_bytes;
    for (int64_t kb = 0; kb < nblk; kb++) {
        const int64_t j0 = kb * QMM_ZA_NK, nv = c->Skv - j0 < QMM_ZA_NK ? c->Skv - j0 : QMM_ZA_NK;
        for (int64_t r = 0; r < rows; r += QMM_ZA_MR)
            qk((int)(rows - r < QMM_ZA_MR ? rows - r : QMM_ZA_MR), (const char *)t.Q + (size_t)r * qrow, c->D,
               K + (size_t)kb * kb_bytes, t.S + r * QMM_ZA_NK);
        for (int64_t i = 0; i < rows; i++) qmm_za_softmax(c, &t, i, j0, nv, mask, bf16);
        for (int64_t r = 0; r < rows; r += QMM_ZA_MR)
            pv((int)(rows - r < QMM_ZA_MR ? rows - r : QMM_ZA_MR), (const char *)t.P + (size_t)r * prow,
               V + (size_t)kb * vb_bytes, t.O + r * Dp, t.alpha + r, c->D);
    }
    for (int64_t i = 0; i < rows; i++) qmm_za_store(c, &t, i, out);
}

#endif /* QMM_ATTENTION_AVX512_H */
