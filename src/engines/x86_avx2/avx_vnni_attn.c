/*
 * avx_vnni_attn.c — attention's int8 mode on avx_vnni (SPEC §10, QMM_ATTN_INT8) for CPUs with
 * AVX-VNNI (256-bit VPDPBUSD {vex}) and no AVX-512: the ukernels of the attention contract
 * (core/attention.h, "the ukernel contract"), both products on VPDPBUSD with exact int32 sums.
 * The driver owns the tiles and the key-block loop; the softmax ukernel (P and the rows'
 * online-softmax state) is the frame's (qmm_attn_softmax_u8__avx2). Admits mode int8 only.
 *
 * The recipe is comfy-kitchen's INT8 attention, as avx512_vnni_attn.c runs it, on 32-key blocks
 * (R the rotation):
 *   k'[j] = k[j] − mean (qmm_attn_key_mean: the finite keys' mean; the softmax rows stay as they are)
 *   R: q and k padded with zeros to Dq = D rounded up to 64, then ConvRot's rotation (numerics.h
 *      qmm_rotate_f32 with g = 64, in its vector form simd_avx2.h); orthonormal: (R q)·(R k) = q·k
 *   sk[j] = max_d |R k'[j]| / 127, kq = round(R k' · 127 / max) (clamped to ±127); the same per
 *   query row: sq = max_d |R q| / 127 · c->scale · log2(e) (the scores in base 2), Q = qq + 128 u8.
 *   All-zero rows: scale 0, codes 0; a row with a non-finite value: scale NaN, codes 0.
 *   score[i][j] = (Σ_d (qq + 128)·kq − 128·Σ_d kq) · (sk[j] · sq[i])   (exact int32, then f32;
 *   the two scales multiplied first: a huge key's sk times the sum cannot overflow where the
 *   score is finite)
 *   per block of 32 keys and channel: sv[d] = max_j |v[j][d]| / 127, vq = round(v · 127 / max)
 *   (a channel with a non-finite value: scale NaN, codes 0); vs = sv / 255 = max / (127·255)
 *   O = O·α + ps · (Σ_j pq[j]·vq[j][d]) · vs[d]   (pq = U(s − block max) ≈ round(255 · 2^(s − block max)), u8)
 * VPDPBUSD multiplies unsigned by signed bytes: qq + 128 against kq, pq against vq as they are.
 * The codes: x · pre · inv rounded to nearest even, inv = 127 / (max · pre), pre = 1, or 2^64
 * where max < 2^-100 (127 / max would overflow f32; both factors are exact powers of two apart).
 *
 * Packed kv head (Dq as above, Dp = D rounded up to dalign = 8, nblk = ceil(Skv / 32), keys
 * past Skv zero):
 *   K block (kb_bytes): kq [Dq/4][32][4] int8 (per 4 of D, 8 keys per ymm), Σ_d kq [32] int32,
 *     sk [32] f32
 *   V block (vb_bytes): vq [8][Dp][4] int8 (per 4 keys, 8 channels per ymm), vs [Dp] f32;
 *     padded to 64 bytes
 *   extra: the keys' mean [D] f32, padded to 64 bytes.   Q row (q_bytes): qq + 128 [Dq] u8.
 *
 * Tiles, for 16 ymm registers: mr = 6 rows; qk is 6 rows × 16 keys (12 int32 accumulators, per 4
 * of D 2 K loads and 6 dword broadcasts of qq + 128), twice per 32-key block; pv is 6 rows × 16
 * channels (12 accumulators, per 4 keys 2 V loads and 6 dword broadcasts of pq; 8 channels
 * where Dp ends on 8). 12 accumulators + 2 operands + 1 broadcast = 15 registers, and 12
 * independent VPDPBUSD chains cover its latency at two per cycle — the int8 gemm's tile on this
 * engine (avx_vnni.c). The other fit, 3 rows × 32, holds 4 operand registers for 3 rows: each
 * K and V byte is then read from cache for every 3 rows instead of every 6. Both kernels store
 * their int32 sums first (qk into S, pv into ws: ws_bytes = 6 × 16 int32) and scale them from
 * there: with the scaling's registers live past the loop, gcc spills the accumulators inside it.
 * nk = 32: one P row is one ymm of u8; V's scales per 32 keys (finer than 64); at most 31
 * padded keys; the per-block softmax and α/ps work is over 32 keys (64 would halve it, at the
 * price of coarser V scales and more padding).
 */
#include "avx2_attn.h"

#include "attention.h"
#include "numerics.h"
#include "avx2/simd_avx2.h"
#include "ukernels.h"

#include <math.h>
#include <string.h>

const char *qmm_avx_vnni_attn_admit(const void *call, char *why, size_t n) {
    const qmm_attn_call *c = call;
    (void)why; (void)n;
    if (c->mode != QMM_ATTN_INT8) return "int8 QKᵀ and P·V run in mode int8 only";
    return NULL;
}

#if defined(__AVXVNNI__)

#define NK 32
#define MR 6
#define DALIGN 8
#define WS_BYTES (MR * 16 * 4) /* pv's int32 sums of one 6 × 16 tile */

static int64_t dq_of(int64_t D) { return qmm_round_up(D, 64); }
static int64_t dp_of(int64_t D) { return qmm_round_up(D, DALIGN); }
static size_t kb_bytes(int64_t D) { return (size_t)(dq_of(D) * NK) + NK * 4 + NK * 4; } /* Dq·32 + 256: ×64 */
static size_t vb_bytes(int64_t D) { return (size_t)qmm_round_up(NK * dp_of(D) + 4 * dp_of(D), 64); }
static size_t extra_bytes(int64_t D) { return (size_t)qmm_round_up(4 * D, 64); }
static size_t q_bytes(int64_t D) { return (size_t)dq_of(D); }

/* the lanes of x that are NaN or ±Inf (exponent all ones), as all-ones lanes */
static inline __m256i nonfinite(__m256 x) {
    const __m256i e = _mm256_set1_epi32(0x7f800000);
    return _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_castps_si256(x), e), e);
}

static inline __m256 abs8(__m256 x) { return _mm256_and_ps(x, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff))); }

/* round(x) clamped to ±127 → 8 int8 at dst; returns the 8 codes as int32 */
static inline __m256i store_codes8(__m256 x, int8_t *dst) {
    __m256i q = _mm256_cvtps_epi32(x); /* RNE; NaN → INT_MIN, clamped below (callers mask it) */
    q = _mm256_max_epi32(_mm256_min_epi32(q, _mm256_set1_epi32(127)), _mm256_set1_epi32(-127));
    __m256i b = _mm256_packs_epi32(q, q); /* per 128 bits: 0..3 0..3 | 4..7 4..7 (int16) */
    b = _mm256_packs_epi16(b, b);         /* per 128 bits: 0..3 ×4 | 4..7 ×4 (int8) */
    b = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4));
    _mm_storel_epi64((__m128i *)dst, _mm256_castsi256_si128(b));
    return q;
}

/* dst[0..n) ← x[0..D) of dtype t in f32, zero past D (n >= D, a multiple of 8) */
static void load_row(const void *x, qmm_dtype t, int64_t D, int64_t n, float *dst) {
    int64_t d = 0;
    for (; d + 8 <= D; d += 8) _mm256_storeu_ps(dst + d, qmm_y_load8(x, t, d));
    for (; d < D; d++) dst[d] = qmm_load_f(x, t, d);
    for (; d < n; d++) dst[d] = 0.0f;
}

/* row[0..Dq) ← R row: qmm_rotate_f32 with g = 64, 8 lanes at a time (the same butterflies) */
static void rotate(float *row, int64_t Dq) {
    for (int64_t d = 0; d < Dq; d += 16) {
        __m256 a = qmm_y_rot_s1(_mm256_loadu_ps(row + d)), b = qmm_y_rot_s1(_mm256_loadu_ps(row + d + 8));
        qmm_y_rot_s4(&a, &b);
        _mm256_storeu_ps(row + d, a);
        _mm256_storeu_ps(row + d + 8, b);
    }
    for (int64_t d = 0; d < Dq; d += 64) qmm_y_rot_wide(row + d, 64, 16);
    const __m256 sc = _mm256_set1_ps(qmm_convrot_scale(64));
    for (int64_t d = 0; d < Dq; d += 8) _mm256_storeu_ps(row + d, _mm256_mul_ps(_mm256_loadu_ps(row + d), sc));
}

static inline int32_t hsum_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

/* row[0..n) (n a multiple of 8) → codes c8[0..n) and Σ codes in *sum; returns max|row| / 127,
 * NaN (codes 0) where a value is not finite */
static float quantize_row(const float *row, int64_t n, int8_t *c8, int32_t *sum) {
    __m256 amax = _mm256_setzero_ps();
    __m256i bad = _mm256_setzero_si256();
    for (int64_t d = 0; d < n; d += 8) {
        const __m256 x = _mm256_loadu_ps(row + d);
        bad = _mm256_or_si256(bad, nonfinite(x));
        amax = _mm256_max_ps(amax, abs8(x));
    }
    if (!_mm256_testz_si256(bad, bad)) {
        memset(c8, 0, (size_t)n);
        *sum = 0;
        return NAN;
    }
    const float am = qmm_y_hmax8(amax), pre = am < 0x1p-100f ? 0x1p64f : 1.0f, inv = am > 0.0f ? 127.0f / (am * pre) : 0.0f;
    const __m256 vp = _mm256_set1_ps(pre), vi = _mm256_set1_ps(inv);
    __m256i s = _mm256_setzero_si256();
    for (int64_t d = 0; d < n; d += 8)
        s = _mm256_add_epi32(s, store_codes8(_mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(row + d), vp), vi), c8 + d));
    *sum = hsum_epi32(s);
    return am / 127.0f;
}

/* K blocks: each key shifted by the mean, rotated, quantized (see the top) */
static void pack_k(const qmm_attn_call *c, const void *k, char *K, const float *mean) {
    const int64_t D = c->D, Dq = dq_of(D), nblk = (c->Skv + NK - 1) / NK;
    const size_t es = qmm_dtype_size(c->kv_dtype), kbs = kb_bytes(D);
    float row[QMM_ATTN_MAX_D], mp[QMM_ATTN_MAX_D];
    int8_t q8[QMM_ATTN_MAX_D];
    for (int64_t d = 0; d < Dq; d++) mp[d] = d < D ? mean[d] : 0.0f;
    for (int64_t j = 0; j < nblk * NK; j++) {
        char *blk = K + (size_t)(j / NK) * kbs;
        int32_t *ksum = (int32_t *)(blk + Dq * NK);
        float *sk = (float *)(ksum + NK);
        int32_t sum = 0;
        if (j < c->Skv) {
            load_row((const char *)k + j * c->ks[2] * (int64_t)es, c->kv_dtype, D, Dq, row);
            for (int64_t d = 0; d < Dq; d += 8)
                _mm256_storeu_ps(row + d, _mm256_sub_ps(_mm256_loadu_ps(row + d), _mm256_loadu_ps(mp + d)));
            rotate(row, Dq);
            sk[j % NK] = quantize_row(row, Dq, q8, &sum);
        } else {
            memset(q8, 0, (size_t)Dq);
            sk[j % NK] = 0.0f;
        }
        ksum[j % NK] = sum;
        for (int64_t p = 0; p < Dq / 4; p++) memcpy(blk + (p * NK + j % NK) * 4, q8 + 4 * p, 4);
    }
}

/* V blocks: per 32 keys and channel, int8 codes and vs = max / (127·255) (see the top) */
static void pack_v(const qmm_attn_call *c, const void *v, const uint8_t *live, char *V) {
    const int64_t D = c->D, Dp = dp_of(D), nz = Dp / 8, nblk = (c->Skv + NK - 1) / NK;
    const size_t es = qmm_dtype_size(c->kv_dtype), vbs = vb_bytes(D);
    float row[QMM_ATTN_MAX_D];
    int8_t q8[NK][QMM_ATTN_MAX_D]; /* the block's codes by key */
    __m256 amax[QMM_ATTN_MAX_D / 8], pre[QMM_ATTN_MAX_D / 8], inv[QMM_ATTN_MAX_D / 8];
    __m256i bad[QMM_ATTN_MAX_D / 8];
    for (int64_t b = 0; b < nblk; b++) {
        int8_t *codes = (int8_t *)(V + (size_t)b * vbs);
        float *vsc = (float *)(codes + NK * Dp);
        const int64_t j0 = b * NK, nv = c->Skv - j0 < NK ? c->Skv - j0 : NK;
        for (int64_t z = 0; z < nz; z++) {
            amax[z] = _mm256_setzero_ps();
            bad[z] = _mm256_setzero_si256();
        }
        for (int64_t j = j0; j < j0 + nv; j++) {
            load_row((const char *)v + j * c->vs[2] * (int64_t)es, c->kv_dtype, D, Dp, row);
            for (int64_t z = 0; z < nz; z++) {
                const __m256 x = _mm256_loadu_ps(row + 8 * z);
                bad[z] = _mm256_or_si256(bad[z], nonfinite(x));
                if (!live || live[j]) amax[z] = _mm256_max_ps(amax[z], abs8(x)); /* the live keys' max */
            }
        }
        for (int64_t z = 0; z < nz; z++) {
            const __m256 small = _mm256_cmp_ps(amax[z], _mm256_set1_ps(0x1p-100f), _CMP_LT_OQ),
                         pos = _mm256_andnot_ps(_mm256_castsi256_ps(bad[z]),
                                                _mm256_cmp_ps(amax[z], _mm256_setzero_ps(), _CMP_GT_OQ));
            pre[z] = _mm256_blendv_ps(_mm256_set1_ps(1.0f), _mm256_set1_ps(0x1p64f), small);
            inv[z] = _mm256_and_ps(pos, _mm256_div_ps(_mm256_set1_ps(127.0f), _mm256_mul_ps(amax[z], pre[z])));
            const __m256 vs = _mm256_div_ps(amax[z], _mm256_set1_ps(127.0f * 255.0f));
            _mm256_storeu_ps(vsc + 8 * z, _mm256_blendv_ps(vs, _mm256_set1_ps(NAN), _mm256_castsi256_ps(bad[z])));
        }
        for (int64_t jj = 0; jj < NK; jj++) {
            if (jj >= nv) {
                memset(q8[jj], 0, (size_t)Dp);
                continue;
            }
            load_row((const char *)v + (j0 + jj) * c->vs[2] * (int64_t)es, c->kv_dtype, D, Dp, row);
            for (int64_t z = 0; z < nz; z++) {
                /* a non-finite channel: codes 0 (x · 0 may be NaN; the blend drops it) */
                const __m256 x = _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(row + 8 * z), pre[z]), inv[z]);
                store_codes8(_mm256_blendv_ps(x, _mm256_setzero_ps(), _mm256_castsi256_ps(bad[z])), q8[jj] + 8 * z);
            }
        }
        /* per 4 keys p and 8 channels: [d][4 keys] — one ymm for VPDPBUSD against a pq dword */
        for (int64_t p = 0; p < NK / 4; p++)
            for (int64_t d = 0; d < Dp; d += 8) {
                const __m128i a = _mm_loadl_epi64((const __m128i *)(q8[4 * p] + d)),
                              e = _mm_loadl_epi64((const __m128i *)(q8[4 * p + 1] + d)),
                              f = _mm_loadl_epi64((const __m128i *)(q8[4 * p + 2] + d)),
                              g = _mm_loadl_epi64((const __m128i *)(q8[4 * p + 3] + d));
                const __m128i ae = _mm_unpacklo_epi8(a, e), fg = _mm_unpacklo_epi8(f, g);
                __m128i *o = (__m128i *)(codes + (p * Dp + d) * 4);
                _mm_storeu_si128(o, _mm_unpacklo_epi16(ae, fg));
                _mm_storeu_si128(o + 1, _mm_unpackhi_epi16(ae, fg));
            }
    }
}

void qmm_qs8_attn_pack_kv__avxvnni(const qmm_attn_call *c, const void *k, const void *v, const uint8_t *live, void *kv) {
    const int64_t D = c->D, nblk = (c->Skv + NK - 1) / NK;
    char *K = kv;
    char *V = K + (size_t)nblk * kb_bytes(D);
    float *mean = (float *)(V + (size_t)nblk * vb_bytes(D));
    qmm_attn_key_mean(c, k, live, mean); /* mean[0..D) */
    pack_k(c, k, K, mean);
    pack_v(c, v, live, V);
}

void qmm_qs8_attn_pack_q__avxvnni(const qmm_attn_call *c, const void *q, void *Q, float *sq) {
    const int64_t D = c->D, Dq = dq_of(D);
    float row[QMM_ATTN_MAX_D];
    int8_t q8[QMM_ATTN_MAX_D];
    int32_t sum;
    load_row(q, c->q_dtype, D, Dq, row);
    rotate(row, Dq);
    *sq = quantize_row(row, Dq, q8, &sum) * (c->scale * 1.44269504088896341f);
    for (int64_t d = 0; d < Dq; d += 32)
        _mm256_storeu_si256((__m256i *)((uint8_t *)Q + d),
                            _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(q8 + d)), _mm256_set1_epi8((char)0x80)));
}

/* S[i][h .. h + 16) = the scores of keys h.. of the block, rows i < rows (see the top). The row
 * loops run over the constant 6 with r < rows tested (rows constant too: QMM_ATTN_BY_ROWS), so
 * the 12 accumulators stay in registers. */
static inline __attribute__((always_inline)) void qk_16(const int rows, const uint8_t *Q, const float *sq,
                                                         const int8_t *Kb, int64_t Dq, int h, float *S) {
    const int64_t quads = Dq / 4;
    const int32_t *ksum = (const int32_t *)(Kb + Dq * NK);
    const float *sk = (const float *)(ksum + NK);
    __m256i lo[MR], hi[MR];
#pragma GCC unroll 6
    for (int i = 0; i < MR; i++)
        if (i < rows) {
            lo[i] = _mm256_setzero_si256();
            hi[i] = _mm256_setzero_si256();
        }
    for (int64_t p = 0; p < quads; p++) {
        const int8_t *kp = Kb + (p * NK + h) * 4;
        const __m256i k0 = _mm256_loadu_si256((const __m256i *)kp), k1 = _mm256_loadu_si256((const __m256i *)(kp + 32));
#pragma GCC unroll 6
        for (int i = 0; i < MR; i++)
            if (i < rows) {
                int32_t w;
                memcpy(&w, Q + i * Dq + 4 * p, 4);
                const __m256i qd = _mm256_set1_epi32(w);
                lo[i] = _mm256_dpbusd_avx_epi32(lo[i], qd, k0);
                hi[i] = _mm256_dpbusd_avx_epi32(hi[i], qd, k1);
            }
    }
    /* the sums into S first, then the scaling from S: the scaling's registers past the loop's
     * 15 would otherwise make gcc spill the accumulators inside the loop */
#pragma GCC unroll 6
    for (int i = 0; i < MR; i++)
        if (i < rows) {
            _mm256_storeu_si256((__m256i *)(S + i * NK + h), lo[i]);
            _mm256_storeu_si256((__m256i *)(S + i * NK + h + 8), hi[i]);
        }
    const __m256i c0 = _mm256_slli_epi32(_mm256_loadu_si256((const __m256i *)(ksum + h)), 7),
                  c1 = _mm256_slli_epi32(_mm256_loadu_si256((const __m256i *)(ksum + h + 8)), 7);
    const __m256 s0 = _mm256_loadu_ps(sk + h), s1 = _mm256_loadu_ps(sk + h + 8);
    for (int i = 0; i < rows; i++) {
        const __m256 f = _mm256_set1_ps(sq[i]);
        float *o = S + i * NK + h;
        const __m256i a0 = _mm256_loadu_si256((const __m256i *)o), a1 = _mm256_loadu_si256((const __m256i *)(o + 8));
        _mm256_storeu_ps(o, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(a0, c0)), _mm256_mul_ps(s0, f)));
        _mm256_storeu_ps(o + 8, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(a1, c1)), _mm256_mul_ps(s1, f)));
    }
}

static inline __attribute__((always_inline)) void qk_n(const int rows, const uint8_t *Q, const float *sq,
                                                        const int8_t *Kb, int64_t Dq, float *S) {
    qk_16(rows, Q, sq, Kb, Dq, 0, S);
    qk_16(rows, Q, sq, Kb, Dq, 16, S);
}

void qmm_qs8_attn_qk_ukernel_6x32c4__avxvnni(int rows, const void *Q, const float *sq, const void *kblk, int64_t D,
                                              float *S) {
    QMM_ATTN_BY_ROWS(rows, qk_n, (const uint8_t *)Q, sq, (const int8_t *)kblk, dq_of(D), S);
}

/* O[i][d0 .. d0 + 8·nz) = O[i]·alpha[i] + ps[i] · (Σ_j pq[i][j]·vq[j]) · vs, rows i < rows (row
 * loops as qk_16's); the update as one FMA: O·α + x where ps = 1, x·ps + O where α = 1, else
 * x·ps + O·α */
static inline __attribute__((always_inline)) void pv_n(const int rows, const int nz, const uint8_t *P, const float *ps,
                                                        const float *alpha, const int8_t *Vb, int64_t Dp, int64_t d0,
                                                        float *O, int32_t *ws) {
    const float *vsc = (const float *)(Vb + NK * Dp);
    __m256i lo[MR], hi[MR];
#pragma GCC unroll 6
    for (int i = 0; i < MR; i++)
        if (i < rows) {
            lo[i] = _mm256_setzero_si256();
            hi[i] = _mm256_setzero_si256();
        }
    for (int p = 0; p < NK / 4; p++) {
        const int8_t *vp = Vb + (p * Dp + d0) * 4;
        const __m256i v0 = _mm256_loadu_si256((const __m256i *)vp),
                      v1 = nz > 1 ? _mm256_loadu_si256((const __m256i *)(vp + 32)) : v0;
#pragma GCC unroll 6
        for (int i = 0; i < MR; i++)
            if (i < rows) {
                int32_t w;
                memcpy(&w, P + i * NK + 4 * p, 4);
                const __m256i pd = _mm256_set1_epi32(w);
                lo[i] = _mm256_dpbusd_avx_epi32(lo[i], pd, v0);
                if (nz > 1) hi[i] = _mm256_dpbusd_avx_epi32(hi[i], pd, v1);
            }
    }
    /* the sums into ws first (as qk_16's into S), then the update from there */
#pragma GCC unroll 6
    for (int i = 0; i < MR; i++)
        if (i < rows) {
            _mm256_store_si256((__m256i *)(ws + 16 * i), lo[i]);
            if (nz > 1) _mm256_store_si256((__m256i *)(ws + 16 * i + 8), hi[i]);
        }
    for (int i = 0; i < rows; i++) {
        const __m256 a = _mm256_set1_ps(alpha[i]), f = _mm256_set1_ps(ps[i]);
        float *o = O + i * Dp + d0;
        for (int z = 0; z < nz; z++) {
            const __m256 x = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_load_si256((const __m256i *)(ws + 16 * i + 8 * z))),
                                           _mm256_loadu_ps(vsc + d0 + 8 * z)),
                         ov = _mm256_loadu_ps(o + 8 * z);
            const __m256 r = ps[i] == 1.0f      ? _mm256_fmadd_ps(ov, a, x)
                             : alpha[i] == 1.0f ? _mm256_fmadd_ps(x, f, ov)
                                                : _mm256_fmadd_ps(x, f, _mm256_mul_ps(ov, a));
            _mm256_storeu_ps(o + 8 * z, r);
        }
    }
}

/* all of O's Dp columns for rows rows: 16 at a time, the last 8 alone where Dp ends on 8 */
static inline __attribute__((always_inline)) void pv_rows(const int rows, const uint8_t *P, const float *ps,
                                                           const float *alpha, const int8_t *Vb, int64_t Dp, float *O,
                                                           int32_t *ws) {
    int64_t d0 = 0;
    for (; d0 + 16 <= Dp; d0 += 16) pv_n(rows, 2, P, ps, alpha, Vb, Dp, d0, O, ws);
    if (d0 < Dp) pv_n(rows, 1, P, ps, alpha, Vb, Dp, d0, O, ws);
}

void qmm_qu8_qs8_attn_pv_ukernel_6x16c4__avxvnni(int rows, const void *P, const float *ps, const float *alpha,
                                                  const void *vblk, int64_t D, float *O, void *ws) {
    QMM_ATTN_BY_ROWS(rows, pv_rows, (const uint8_t *)P, ps, alpha, (const int8_t *)vblk, dp_of(D), O, (int32_t *)ws);
}

const qmm_attn_ukernels qmm_avx_vnni_attn = {
    .name = "avx_vnni int8 (qk 6x32c4, pv 6x16c4)",
    .p = QMM_ATTN_P_U8,
    .mr = MR,
    .pad_rows = 0,
    .live_keys = 1,
    .nk = NK,
    .mq = 192,
    .dalign = DALIGN,
    .kb_bytes = kb_bytes,
    .vb_bytes = vb_bytes,
    .extra_bytes = extra_bytes,
    .q_bytes = q_bytes,
    .ws_bytes = WS_BYTES,
    .pack_kv = qmm_qs8_attn_pack_kv__avxvnni,
    .pack_q = qmm_qs8_attn_pack_q__avxvnni,
    .qk = qmm_qs8_attn_qk_ukernel_6x32c4__avxvnni,
    .softmax = qmm_attn_softmax_u8__avx2,
    .pv = qmm_qu8_qs8_attn_pv_ukernel_6x16c4__avxvnni,
};

#else /* the compiler lacks AVX-VNNI: named, no kernels */
const qmm_attn_ukernels qmm_avx_vnni_attn = {.name = "avx_vnni int8 (not built)", .p = QMM_ATTN_P_U8};
#endif
