/*
 * avx_vnni_bcast.h — the avx_vnni engine's broadcast rows kernels at 9 <= M <= 32 (yᵀ = W·xᵀ with
 * the tokens in the lanes of a ymm), as one template over the source of a row's values (w4):
 *   w4 = 0  an int8 weight's rows read in place, each 32 bytes flipped to u8 w + 128 (XOR 0x80)
 *           (avx_vnni_rows.c: qmm_qd8_qc8w_rows_ukernel_m9to32__avxvnni_bcast);
 *   w4 = 1  a W4A8 weight's codes, each 32 looked up in the call's table in its u8 form (lut_u8:
 *           w + 128) by the AVX2 walk (w4a8_avx2.h), never stored past L1 (avx_vnni_w4a8.c:
 *           qmm_qd8_w4w6_rows_ukernel_m9to24__avxvnni_bcast, 9..24 tokens; groups of a multiple of
 *           16, e4m3 s_rel).
 * The token copy ap is the engine's (qmm_avx_vnni_rows_ap_fill, avx_vnni_rows.c): groups of 8
 * tokens, per k-quad one ymm of the 8 tokens' 4 bytes, s8 q as it is (pad tokens 0; q is 0 past
 * K). Per 32 k each row's 32 values go into a small buffer as w + 128, and each of its k-quads is
 * broadcast from there (one load) and VPDPBUSD(w + 128, q) adds it into the row's G accumulators
 * (G = ⌈M/8⌉ groups): lane t of group g sums Σ_k (w[k] + 128)·q[8g + t][k]. The token's 128·Σq
 * (the driver's qsum) comes back out at the row's end: exact for every w and q (mod 2^32), and no
 * per-row sums. R rows at a time, 12 accumulators (G = 2: 6, G = 3: 4, G = 4: 3), from R equal runs
 * of the thread's blocks (long sequential streams prefetched 4 KiB ahead into L2); the q groups'
 * vectors of a k-quad are loaded once for the R rows. The last K % 32 bytes of an int8 row are
 * copied into a zeroed buffer: nothing past W[n][K-1] is read (a W4A8 row ends on 16 k: its last
 * 16 values zero-extended). Every 16 rows of a run their outputs go through qmm_a2_rows_out.
 * Against the dot form (int8_rows_avx2.h, w4a8_rows_avx2.h) the rows are not re-read per token: the
 * form for more tokens than L1 holds q of (bench/NOTES.md); against the panels, no pack.
 * Static inline; include only from files built with -mavxvnni (QMM_FLAGS_AVX_VNNI).
 */
#ifndef QMM_AVX_VNNI_BCAST_H
#define QMM_AVX_VNNI_BCAST_H

#include "int8_gemm_avx2.h"
#include "avx2/w4a8_avx2.h"

#include <string.h>

#ifdef __AVXVNNI__

enum { QMM_VBC_M = 32, QMM_VBC_PF = 4096, QMM_VBC_RMAX = 6 };

/* One kernel call's operands as the template passes them on: columns [n0, n1); w4 = 0: column n
 * from row w + (n − n0)·ldw; w4 = 1: row n of the codes, looked up in lut_u8. */
typedef struct qmm_vbc_job {
    const int8_t *w;
    int64_t ldw;
    const qmm_w4_codes *codes;
    const int8_t *lut_u8;
    const qmm_rows_act *a;
    const qmm_call *c;
    int64_t n0, n1;
} qmm_vbc_job;

/* acc[r][g] += the 8 k-quads of u[r] (w + 128 as u8, each dword broadcast to the lanes) against
 * the groups' 8 ymm of q at a (group g Kp·8 bytes on): VPDPBUSD(w + 128, q) */
static inline __attribute__((always_inline)) void qmm_vbc_step(const int G, const int R, const uint8_t u[][32],
                                                               const uint8_t *a, int64_t Kp, __m256i acc[][4]) {
    for (int t = 0; t < 8; t++) {
        __m256i qv[4];
        for (int g = 0; g < G; g++) qv[g] = _mm256_load_si256((const __m256i *)(a + g * Kp * 8 + t * 32));
        for (int r = 0; r < R; r++) {
            int32_t v;
            memcpy(&v, u[r] + 4 * t, 4);
            const __m256i b = _mm256_set1_epi32(v);
            for (int g = 0; g < G; g++) acc[r][g] = _mm256_dpbusd_avx_epi32(acc[r][g], b, qv[g]);
        }
    }
}

/* out[r / 4][8g + t][(r % 4)·16 + jn] (t < 8, g < G) = Σ_k W[n + r·len][k]·q[8g + t][k] for R rows:
 * per 32 k each row's w + 128 into u[r] (w4 = 0: the int8 row flipped; 1: looked up, six and per
 * as w4a8_avx2.h), then lane t of acc[r][g] sums Σ_k (W[row r][k] + 128)·q[8g + t][k], less qc[g]
 * lane t = 128·Σ_k q[8g + t][k] (mod 2^32) */
static inline __attribute__((always_inline)) void qmm_vbc_rows(const int w4, const int six, const int per, const int G,
                                                               const int R, const qmm_vbc_job *g, int64_t n,
                                                               int64_t len, const __m256i qc[4],
                                                               int32_t out[2][QMM_VBC_M][64], int jn) {
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    const int64_t K = g->a->K, Kp = g->a->lda, span = len * g->ldw;
    const int8_t *w = w4 ? NULL : g->w + (n - g->n0) * g->ldw;
    const uint8_t *ap = g->a->ap;
    __m256i acc[QMM_VBC_RMAX][4];
    _Alignas(32) uint8_t u[QMM_VBC_RMAX][32];
    qmm_w4a2_walk it[QMM_VBC_RMAX];
    for (int r = 0; r < R; r++) {
        if (w4) it[r] = qmm_w4a2_walk_at(g->codes, n + r * len, 0);
        for (int gi = 0; gi < G; gi++) acc[r][gi] = _mm256_setzero_si256();
    }
    const int64_t K32 = K & ~(int64_t)31;
    for (int64_t k = 0; k < K32; k += 32) {
        for (int r = 0; r < R; r++) {
            if (w4) {
                if (!(k & 127)) {
                    _mm_prefetch((const char *)(it[r].cp + QMM_VBC_PF), _MM_HINT_T1);
                    if (six && !(k & 255)) _mm_prefetch((const char *)(it[r].hp + QMM_VBC_PF / 2), _MM_HINT_T1);
                    if (!(k & 1023)) _mm_prefetch((const char *)(it[r].sp + QMM_VBC_PF / 8), _MM_HINT_T1);
                }
                _mm256_store_si256((__m256i *)u[r], qmm_w4a2_next32(&it[r], g->lut_u8, six, per));
            } else {
                const int8_t *p = w + r * span + k;
                _mm_prefetch((const char *)(p + QMM_VBC_PF), _MM_HINT_T1);
                _mm256_store_si256((__m256i *)u[r], _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)p), flip));
            }
        }
        __asm__("" : "+m"(u)); /* u read from memory: one broadcast load per dword, no shuffles */
        qmm_vbc_step(G, R, (const uint8_t(*)[32])u, ap + k * 8, Kp, acc);
    }
    if (K32 < K) { /* the rows' last values (0 past K: against q = 0 there) */
        for (int r = 0; r < R; r++) {
            if (w4) {
                _mm256_store_si256((__m256i *)u[r], _mm256_zextsi128_si256(qmm_w4a2_next16(&it[r], g->lut_u8, six)));
            } else {
                int8_t tmp[32] = {0};
                memcpy(tmp, w + r * span + K32, (size_t)(K - K32));
                _mm256_store_si256((__m256i *)u[r], _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)tmp), flip));
            }
        }
        __asm__("" : "+m"(u));
        qmm_vbc_step(G, R, (const uint8_t(*)[32])u, ap + K32 * 8, Kp, acc);
    }
    for (int r = 0; r < R; r++)
        for (int gi = 0; gi < G; gi++) {
            int32_t lane[8];
            _mm256_storeu_si256((__m256i *)lane, _mm256_sub_epi32(acc[r][gi], qc[gi]));
            for (int t = 0; t < 8; t++) out[r / 4][8 * gi + t][(r % 4) * 16 + jn] = lane[t];
        }
}

/* R streams of len rows, stream r = rows s0 + r·len + j; every 16 rows their outputs */
static inline __attribute__((always_inline)) void qmm_vbc_run(const int w4, const int six, const int per, const int G,
                                                              const int R, const qmm_vbc_job *g, int64_t s0,
                                                              int64_t len) {
    const qmm_rows_act *a = g->a;
    const int m = (int)a->M;
    int32_t qs[QMM_VBC_M] = {0};
    memcpy(qs, a->qsum, sizeof(int32_t) * (size_t)m);
    __m256i qc[4];
    for (int i = 0; i < G; i++) qc[i] = _mm256_slli_epi32(_mm256_loadu_si256((const __m256i *)(qs + 8 * i)), 7);
    int32_t out[2][QMM_VBC_M][64];
    for (int64_t j = 0; j < len; j++) {
        qmm_vbc_rows(w4, six, per, G, R, g, s0 + j, len, qc, out, (int)(j % 16));
        if (j % 16 != 15 && j != len - 1) continue;
        const int cols = (int)(j % 16) + 1;
        const int64_t n = s0 + j - cols + 1;
        qmm_a2_rows_out(g->c, a->s, (const int32_t(*)[64])out[0], R < 4 ? R : 4, m, n, len, cols);
        if (R > 4) qmm_a2_rows_out(g->c, a->s, (const int32_t(*)[64])out[1], R - 4, m, n + 4 * len, len, cols);
    }
}

/* columns [g->n0, g->n1): R streams of ⌊rows / R⌋ rows, then the rest (fewer than R) side by side,
 * one row each */
static inline __attribute__((always_inline)) void qmm_vbc_blocks(const int w4, const int six, const int per, const int G,
                                                                 const int R, const qmm_vbc_job *g) {
    const int64_t n0 = g->n0, n1 = g->n1;
    const int64_t len = (n1 - n0) / R, s0 = n0 + R * len;
    if (len > 0) qmm_vbc_run(w4, six, per, G, R, g, n0, len);
    switch (n1 - s0) {
    case 0: break;
    case 1: qmm_vbc_run(w4, six, per, G, 1, g, s0, 1); break;
    case 2: if (R > 2) qmm_vbc_run(w4, six, per, G, 2, g, s0, 1); break;
    case 3: if (R > 3) qmm_vbc_run(w4, six, per, G, 3, g, s0, 1); break;
    case 4: if (R > 4) qmm_vbc_run(w4, six, per, G, 4, g, s0, 1); break;
    default: if (R > 5) qmm_vbc_run(w4, six, per, G, 5, g, s0, 1); break;
    }
}

/* the kernel body for M = a->M in 9..32 (else qmm_call_bug) */
static inline __attribute__((always_inline)) void qmm_vbc_kernel(const int w4, const int six, const int per,
                                                                 const qmm_vbc_job *g) {
    switch ((g->a->M + 7) / 8) {
    case 2: qmm_vbc_blocks(w4, six, per, 2, 6, g); break;
    case 3: qmm_vbc_blocks(w4, six, per, 3, 4, g); break;
    case 4: qmm_vbc_blocks(w4, six, per, 4, 3, g); break;
    default: qmm_call_bug(g->c, "avx_vnni broadcast rows: M outside 9..32"); break;
    }
}

#endif /* __AVXVNNI__ */
#endif /* QMM_AVX_VNNI_BCAST_H */
