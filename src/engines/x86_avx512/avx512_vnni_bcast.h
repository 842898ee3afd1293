/*
 * avx512_vnni_bcast.h — the steps of the AVX512-VNNI broadcast kernels (W broadcast, tokens in
 * lanes: yᵀ = W·xᵀ), shared by the int8 rows regime (avx512_vnni_rows.c: each W row read in
 * place) and the fused W4A8 one (avx512_vnni_w4a8.c: each row's decoded values staged in L1).
 * The token copy ap is the rows regime's (qmm_vnni_rows_ap_fill; the W4A8 family's,
 * qmm_vnni_w4_ap_fill, holds its groups of 16 as k16): u8 q + 128, pad lanes 128 (the value of
 * q = 0), in one of three layouts:
 *   16 lanes   [kq][16][4]: one zmm per k quad, each 4 bytes of a W row the s8 operand broadcast
 *              to the 16 lanes (VPDPBUSD m32{1to16}): qmm_vnni_bcast_step;
 *   k16        [k16][4][4][16]: per 16 k four zmm, zmm g holding tokens g, g + 4, g + 8, g + 12
 *              (16 bytes each, k..k+15), each against the same 16 bytes of a W row broadcast to
 *              the 4 lanes (VBROADCASTI32X4 m128): 4 broadcast loads per 64 bytes of a row where
 *              the 16-lane form needs 16, 4 accumulators per row (lane t of zmm g: token 4t + g's
 *              partial sums, added into lane 4t + g at the end): qmm_vnni_k16_step. The W4A8
 *              family's form (its lookups add loads: bench/NOTES.md); the int8 rows read W from
 *              DRAM faster in the 16-lane form with 8 rows per step;
 *   12, 8, 4   per 16 k, 2·n8 + n4 zmm: n8 (tokens 0..7, token t at byte 8t of two zmm: k..k+7,
 *              then k+8..k+15) against 8 bytes of W broadcast to the qwords (VPBROADCASTQ m64),
 *              n4 (the next 4 tokens, token t at byte 16t: k..k+15) against 16 bytes broadcast
 *              to the 4 lanes (VBROADCASTI32X4 m128): qmm_vnni_lanes_step, qmm_vnni_lanes_out.
 * A lane t of a row's sum is Σ_k (q[t][k] + 128)·W[n][k]; qmm_vnni_bcast_correct takes 128·Σ_k
 * W[n][k] off (from a pad lane, or from row sums). qmm_vnni_tokens_out turns 16 rows' lanes into
 * the epilogue's 16 columns per token. The dot kernels over whole rows (qmm_vnni_bcast_dot: one
 * group of 16 lanes; qmm_vnni_lanes_dot: 12, 8 or 4) serve the int8 rows regime and the W4A8
 * groups kernel's later groups. Include only from files built with the engine's flags.
 */
#ifndef QMM_AVX512_VNNI_BCAST_H
#define QMM_AVX512_VNNI_BCAST_H

#include "avx512_vnni_kernel.h"
#include "avx512/pack_avx512.h"

#include <string.h>

enum { QMM_BC_PAD = 0, QMM_BC_SUMS = 1, QMM_BC_GIVEN = 2 }; /* the correction: a pad lane, row sums computed, given */
enum {
    QMM_BC_RMAX = 8,  /* the most rows of W per step */
    QMM_K16_R = 4,    /* the k16 form's most: 4·R accumulators, R row sums, 4 zmm of ap */
    QMM_BC_PF = 2048  /* the prefetch distance per row stream, bytes, into L2 (measured: bench/NOTES.md) */
};

/* acc += Σ4 u8(a) · s8(the 4 bytes at p, broadcast to every lane) */
static inline __m512i qmm_vnni_dpbusd_bc(__m512i acc, __m512i a, const int8_t *p) {
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(a), "m"(*(const int32_t *)p));
    return acc;
}

/* 16 lanes, nx quads (nx <= 16) from the quad at ap: acc[r][0] += Σ over them of the token copy
 * against the 4 bytes of w[r] per quad (R rows sharing each load of ap). */
static inline __attribute__((always_inline)) void qmm_vnni_bcast_step(const int R, const int nx,
                                                                      const int8_t *const w[], const uint8_t *ap,
                                                                      __m512i acc[][4]) {
    for (int x = 0; x < nx; x++) {
        const __m512i t = _mm512_load_si512(ap + 64 * x);
        for (int r = 0; r < R; r++) acc[r][0] = qmm_vnni_dpbusd_bc(acc[r][0], t, w[r] + 4 * x);
    }
}

/* k16, n16 blocks of 16 k (n16 <= 4) from the block at ap: acc[r][g] += zmm g of each block against
 * the 16 bytes of w[r] at its k broadcast to the 4 lanes (R rows sharing each load of ap, the 4 zmm
 * each broadcast). */
static inline __attribute__((always_inline)) void qmm_vnni_k16_step(const int R, const int n16, const int8_t *const w[],
                                                                    const uint8_t *ap, __m512i acc[][4]) {
    for (int x = 0; x < n16; x++) {
        __m512i t[4];
        for (int g = 0; g < 4; g++) t[g] = _mm512_load_si512(ap + 256 * x + 64 * g);
        for (int r = 0; r < R; r++) {
            const __m512i b = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(w[r] + 16 * x)));
            for (int g = 0; g < 4; g++) acc[r][g] = qmm_vnni_dpbusd(acc[r][g], t[g], b);
        }
    }
}

/* A row's 4 k16 accumulators (lane t of a[g]: token 4t + g's 4 partial sums) as its 16 token
 * sums in the 16-lane order: lane 4t + g = the sum of lane t of a[g]. */
static inline __m512i qmm_vnni_k16_sum(const __m512i a[4]) {
    const __m512i u01 = _mm512_add_epi32(_mm512_unpacklo_epi32(a[0], a[1]), _mm512_unpackhi_epi32(a[0], a[1]));
    const __m512i u23 = _mm512_add_epi32(_mm512_unpacklo_epi32(a[2], a[3]), _mm512_unpackhi_epi32(a[2], a[3]));
    return _mm512_add_epi32(_mm512_unpacklo_epi64(u01, u23), _mm512_unpackhi_epi64(u01, u23));
}

/* 12, 8 or 4 lanes, 16 k from the token copy's block ap (2·n8 + n4 zmm): a0, a1 (the 8-token
 * group's two accumulators, short dependency chains), b (the 4-token group) of each row r
 * against the 16 bytes at w[r]. */
static inline __attribute__((always_inline)) void qmm_vnni_lanes_step(const int n8, const int n4, const int R,
                                                                      const int8_t *const w[], const uint8_t *ap,
                                                                      __m512i a0[], __m512i a1[], __m512i b[]) {
    const __m512i t0 = n8 ? _mm512_load_si512(ap) : _mm512_setzero_si512();
    const __m512i t1 = n8 ? _mm512_load_si512(ap + 64) : t0;
    const __m512i t2 = n4 ? _mm512_load_si512(ap + 128 * n8) : t0;
    for (int r = 0; r < R; r++) {
        if (n8) {
            int64_t v0, v1;
            memcpy(&v0, w[r], 8);
            memcpy(&v1, w[r] + 8, 8);
            a0[r] = qmm_vnni_dpbusd(a0[r], t0, _mm512_set1_epi64(v0));
            a1[r] = qmm_vnni_dpbusd(a1[r], t1, _mm512_set1_epi64(v1));
        }
        if (n4) b[r] = qmm_vnni_dpbusd(b[r], t2, _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)w[r])));
    }
}

/* One row's lanes_step sums as lanes 0 .. 8·n8 + 4·n4 − 1 = its tokens (the 8 group's dwords 2t,
 * 2t + 1 are token t, the 4 group's dwords 4t .. 4t + 3 its token t), the lanes above the last. */
static inline __m512i qmm_vnni_lanes_out(const int n8, const int n4, __m512i a0, __m512i a1, __m512i b) {
    const __m512i i84 = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 20, 24, 28, 28, 28, 28, 28);
    const __m512i i8 = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 14, 14, 14, 14, 14, 14, 14, 14);
    const __m512i i4 = _mm512_setr_epi32(0, 4, 8, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12);
    __m512i sa = _mm512_add_epi32(a0, a1), sb = b;
    sa = _mm512_add_epi32(sa, _mm512_shuffle_epi32(sa, _MM_PERM_CDAB));
    sb = _mm512_add_epi32(sb, _mm512_shuffle_epi32(sb, _MM_PERM_BADC));
    sb = _mm512_add_epi32(sb, _mm512_shuffle_epi32(sb, _MM_PERM_CDAB));
    return n8 && n4 ? _mm512_permutex2var_epi32(sa, i84, sb)
           : n8     ? _mm512_permutexvar_epi32(i8, sa)
                    : _mm512_permutexvar_epi32(i4, sb);
}

/* v − 128·Σ_k W[n][k]: from the row sums rs (VPDPBUSD(1, W) lanes) unless QMM_BC_PAD, else from
 * lane pad (a pad token: q = 0, so its lane is exactly that) */
static inline __m512i qmm_vnni_bcast_correct(const int corr, __m512i v, __m512i rs, int pad) {
    return _mm512_sub_epi32(v, corr != QMM_BC_PAD
                                   ? _mm512_set1_epi32((int32_t)((uint32_t)_mm512_reduce_add_epi32(rs) << 7))
                                   : _mm512_permutexvar_epi32(_mm512_set1_epi32(pad), v));
}

/* The outputs of rows n .. n + cols − 1 for tokens t0 .. t1 − 1 (t1 − t0 <= 16): st[j] = row n +
 * j's corrected lanes (lane t − t0 = token t), transposed (lanes = columns) into the epilogue. */
static inline __attribute__((always_inline)) void qmm_vnni_tokens_out(const qmm_call *c, const int32_t st[16][16], int cols, int64_t t0, int64_t t1,
                                       int64_t n, const float *s) {
    __m512i tr[16];
    qmm_z_n16k4_step((const int8_t *)st, 64, cols, 0, 64, tr); /* tr[t] lane j = st[j][t] */
    for (int64_t t = t0; t < t1; t++) qmm_z_epilogue16(c, tr[t - t0], t, n, s[t], qmm_z_tail_mask(cols));
}

/* The broadcast kernels' rows, per 64 bytes k of rows w, w + span, .. (R of them): the prefetch
 * and, when full, the row sums (rs[r] += VPDPBUSD(1, the 64 bytes)). */
static inline __attribute__((always_inline)) void qmm_vnni_bcast_head(const int full, const int R, const int8_t *w,
                                                                      int64_t span, int64_t k, __m512i rs[]) {
    for (int r = 0; r < R; r++) {
        _mm_prefetch((const char *)(w + r * span + k + QMM_BC_PF), _MM_HINT_T1);
        if (full) rs[r] = qmm_vnni_dpbusd(rs[r], _mm512_set1_epi8(1), _mm512_loadu_si512(w + r * span + k));
    }
}

/* Their last bytes [K64, K) (K - K64 < 64; a masked load: nothing past K is read) into tail[r],
 * zero padded, and their row sums when full. */
static inline __attribute__((always_inline)) void qmm_vnni_bcast_tail(const int full, const int R, const int8_t *w,
                                                                      int64_t span, int64_t K64, int64_t K,
                                                                      int8_t tail[][64], __m512i rs[]) {
    const __mmask64 msk = ((__mmask64)1 << (K - K64)) - 1;
    for (int r = 0; r < R; r++) {
        const __m512i z = _mm512_maskz_loadu_epi8(msk, w + r * span + K64);
        _mm512_store_si512(tail[r], z);
        if (full) rs[r] = qmm_vnni_dpbusd(rs[r], _mm512_set1_epi8(1), z);
    }
}

/* W broadcast, tokens in lanes (yᵀ = W·xᵀ), one group of up to 16 tokens, the token copy ap
 * (u8 q + 128; tokens past the group's hold 128, the value of q = 0) in the 16-lane layout
 * [kq][16][4] (k16 = 0: one zmm per k quad, each 4 bytes of a W row the s8 operand broadcast to
 * the 16 lanes, VPDPBUSD m32{1to16}: R <= QMM_BC_RMAX rows, per 64 bytes of a row 16 VPDPBUSD and
 * their 16 broadcast operands, 16/R loads of ap) or in k16 (k16 = 1: qmm_vnni_k16_step, R <=
 * QMM_K16_R rows, per 64 bytes of a row 16 VPDPBUSD and 4 broadcast loads, 16/R loads of ap): lane
 * t of row n's sum is Σ_k (q[t][k] + 128)·W[n][k]. The correction (corr): lane 15 (token 15) when
 * the group has < 16 tokens (QMM_BC_PAD); else the row sums rs, computed here (QMM_BC_SUMS: +1
 * VPDPBUSD per 64 bytes of a row) or given (QMM_BC_GIVEN). A prefetch per 64 bytes of a row.
 * out[r] lane t = Σ_k q[t][k]·w_r[k] (mod 2^32). The last K bytes of a row go through a masked
 * load into tail[] (zero past K): nothing past W[n][K-1] is read. qmm_vnni_bcast_dot is the
 * 16-lane form, qmm_vnni_k16_dot the k16 one. */
static inline __attribute__((always_inline)) void qmm_vnni_group16_dot(const int k16, const int corr, const int R,
                                                                       const int8_t *w, int64_t span, int64_t K,
                                                                       const uint8_t *ap, __m512i rs[], __m512i out[]) {
    const int full = corr == QMM_BC_SUMS, G = k16 ? 4 : 1; /* accumulators per row */
    __m512i acc[QMM_BC_RMAX][4];
    for (int r = 0; r < R; r++)
        for (int g = 0; g < G; g++) acc[r][g] = _mm512_setzero_si512();
    if (full)
        for (int r = 0; r < R; r++) rs[r] = _mm512_setzero_si512();
    const int64_t K64 = K & ~(int64_t)63;
    const int8_t *wp[QMM_BC_RMAX];
    for (int64_t k = 0; k < K64; k += 64) {
        qmm_vnni_bcast_head(full, R, w, span, k, rs);
        for (int r = 0; r < R; r++) wp[r] = w + r * span + k;
        if (k16) qmm_vnni_k16_step(R, 4, wp, ap + k * 16, acc);
        else qmm_vnni_bcast_step(R, 16, wp, ap + k * 16, acc);
    }
    if (K64 < K) {
        _Alignas(64) int8_t tail[QMM_BC_RMAX][64];
        qmm_vnni_bcast_tail(full, R, w, span, K64, K, tail, rs);
        for (int r = 0; r < R; r++) wp[r] = tail[r];
        if (k16) qmm_vnni_k16_step(R, (int)(K - K64 + 15) / 16, wp, ap + K64 * 16, acc);
        else qmm_vnni_bcast_step(R, (int)(K - K64 + 3) / 4, wp, ap + K64 * 16, acc);
    }
    for (int r = 0; r < R; r++)
        out[r] = qmm_vnni_bcast_correct(corr, k16 ? qmm_vnni_k16_sum(acc[r]) : acc[r][0], rs[r], 15);
}
static inline __attribute__((always_inline)) void qmm_vnni_bcast_dot(const int corr, const int R, const int8_t *w,
                                                                     int64_t span, int64_t K, const uint8_t *ap,
                                                                     __m512i rs[], __m512i out[]) {
    qmm_vnni_group16_dot(0, corr, R, w, span, K, ap, rs, out);
}
static inline __attribute__((always_inline)) void qmm_vnni_k16_dot(const int corr, const int R, const int8_t *w,
                                                                   int64_t span, int64_t K, const uint8_t *ap,
                                                                   __m512i rs[], __m512i out[]) {
    qmm_vnni_group16_dot(1, corr, R, w, span, K, ap, rs, out);
}

/* A group of up to 12 tokens in lane groups of 8 and 4, so that no VPDPBUSD works on more pad
 * lanes than the group needs: n8, tokens 0..7, two zmm per 16 k, 8 bytes each (token t at byte
 * 8t: k..k+7, then k+8..k+15), against 8 bytes of a W row broadcast to the 8 qwords
 * (VPBROADCASTQ m64); n4, the next 4 tokens, one zmm per 16 k, 16 bytes each (token t at byte
 * 16t: k..k+15), against the row's 16 bytes broadcast to the 4 lanes (VBROADCASTI32X4 m128). The
 * token copy holds, per 16 k, those 2·n8 + n4 zmm (u8 q + 128, pad tokens 128). Per 64 bytes of
 * W: 8·n8 + 4·n4 VPDPBUSD (+1 with QMM_BC_SUMS) and as many broadcast loads, where the 16-lane form
 * spends 16. Two accumulators for the 8-token group keep the dependency chains short. Kernels:
 * qmm_qd8_qc8w_gemm_ukernel_12x1c8__avx512vnni_bcast (n8 and n4), ..._8x1c8_.. (n8), ..._4x1c16_..
 * (n4). out[r] as bcast_dot: lane t = token t, corrected (corr as bcast_dot; the pad lane is the
 * last, 8·n8 + 4·n4 − 1). */
static inline __attribute__((always_inline)) void qmm_vnni_lanes_dot(const int n8, const int n4, const int corr,
                                                                     const int R, const int8_t *w, int64_t span,
                                                                     int64_t K, const uint8_t *ap, __m512i rs[],
                                                                     __m512i out[]) {
    const int full = corr == QMM_BC_SUMS, S = 64 * (2 * n8 + n4); /* bytes of the token copy per 16 k */
    __m512i a0[QMM_BC_RMAX], a1[QMM_BC_RMAX], b[QMM_BC_RMAX];
    for (int r = 0; r < R; r++) a0[r] = a1[r] = b[r] = _mm512_setzero_si512();
    if (full)
        for (int r = 0; r < R; r++) rs[r] = _mm512_setzero_si512();
    const int64_t K64 = K & ~(int64_t)63;
    for (int64_t k = 0; k < K64; k += 64) {
        qmm_vnni_bcast_head(full, R, w, span, k, rs);
        for (int x = 0; x < 4; x++) {
            const int8_t *wp[QMM_BC_RMAX];
            for (int r = 0; r < R; r++) wp[r] = w + r * span + k + 16 * x;
            qmm_vnni_lanes_step(n8, n4, R, wp, ap + (k / 16 + x) * S, a0, a1, b);
        }
    }
    if (K64 < K) {
        _Alignas(64) int8_t tail[QMM_BC_RMAX][64];
        qmm_vnni_bcast_tail(full, R, w, span, K64, K, tail, rs);
        for (int x = 0; x < (K - K64 + 15) / 16; x++) {
            const int8_t *wp[QMM_BC_RMAX];
            for (int r = 0; r < R; r++) wp[r] = tail[r] + 16 * x;
            qmm_vnni_lanes_step(n8, n4, R, wp, ap + (K64 / 16 + x) * S, a0, a1, b);
        }
    }
    for (int r = 0; r < R; r++)
        out[r] = qmm_vnni_bcast_correct(corr, qmm_vnni_lanes_out(n8, n4, a0[r], a1[r], b[r]), rs[r],
                                        8 * n8 + 4 * n4 - 1);
}

/* The lanes of a token group of r tokens (1..16): 16 (bcast_dot), else 12, 8 or 4 (lanes_dot).
 * Its token copy is Kp·lanes bytes. */
static inline int qmm_vnni_group_lanes(int64_t r) { return r > 12 ? 16 : r > 8 ? 12 : r > 4 ? 8 : 4; }

#endif /* QMM_AVX512_VNNI_BCAST_H */
