/*
 * avx_vnni_rows.c — the avx_vnni engine's rows regime at 9 <= M <= 32 (int8_gemm.h: a borrowed
 * weight, the caller's rows read in place, each byte once; qmm_qd8_qc8w_rows_ukernel_m9to32__avxvnni_bcast),
 * and the token copy it reads (qmm_avx_vnni_rows_ap_bytes / _fill). Built with -mavxvnni.
 *
 * yᵀ = W·xᵀ with the tokens in the lanes of a ymm: the pre-pass's pool run writes q in groups of
 * 8 tokens (rows_ap_fill), per k-quad one ymm of the 8 tokens' 4 bytes, s8 q as it is (pad tokens
 * 0; q is 0 past K). Per 32 bytes each W row is flipped to u8 w + 128 (XOR 0x80) into a small
 * buffer, and each of its k-quads is broadcast from there (one load) and VPDPBUSD(w + 128, q) adds
 * it into the row's G accumulators (G = ⌈M/8⌉ groups): lane t of group g sums Σ_k (w[k] + 128)·
 * q[8g + t][k]. The token's 128·Σq (the driver's qsum) comes back out at the row's end: exact for
 * every w and q (mod 2^32), and no per-row sums. R rows at a time, 12 accumulators (G = 2: 6,
 * G = 3: 4, G = 4: 3), from R equal runs of the thread's blocks (long sequential streams,
 * prefetched 4 KiB ahead into L2, as int8_rows_avx2.h); the q groups' vectors of a k-quad are
 * loaded once for the R rows. The last K % 32 bytes of a row are copied into a zeroed buffer:
 * nothing past W[n][K-1] is read. Every 16 rows of a run their outputs through qmm_a2_rows_out.
 * Against the dot form (int8_rows_avx2.h) the rows are not re-read per token: the form for more
 * tokens than L1 holds q of (bench/NOTES.md); against the panels, no pack.
 */
#include "int8_gemm_avx2.h"
#include "ukernels.h"

#ifdef __AVXVNNI__

enum { BC_M = 32, BC_PF = 4096, BC_RMAX = 6 };

int64_t qmm_avx_vnni_rows_ap_bytes(int64_t M, int64_t Kp) {
    return M > 8 && M <= BC_M ? (M + 7) / 8 * Kp * 8 : 0;
}

/* the groups of 8 of tokens [r0, r1) (r0 a multiple of 8) at ap_base + r0·Kp from q (rows lda = Kp
 * bytes apart, Kp a multiple of 64): group i's k-quad j at (i·Kp/4 + j)·32, token t's 4 bytes at
 * +4t, s8 q as it is (pad tokens 0); per 32 bytes of k the 8 tokens' rows as an 8 × 8 transpose of
 * dwords (qmm_a2_tr8) */
void qmm_avx_vnni_rows_ap_fill(const int8_t *q, int64_t lda, uint8_t *ap_base, int64_t r0, int64_t r1) {
    const int64_t Kp = lda;
    for (int64_t t0 = r0; t0 < r1; t0 += 8) {
        const int64_t r = r1 - t0 < 8 ? r1 - t0 : 8;
        uint8_t *ap = ap_base + t0 * Kp;
        for (int64_t k = 0; k < Kp; k += 32) {
            __m256i x[8];
            for (int t = 0; t < 8; t++)
                x[t] = t < r ? _mm256_loadu_si256((const __m256i *)(q + (t0 + t) * Kp + k)) : _mm256_setzero_si256();
            qmm_a2_tr8(x);
            for (int j = 0; j < 8; j++) _mm256_store_si256((__m256i *)(ap + k * 8 + j * 32), x[j]);
        }
    }
}

/* acc[r][g] += the 8 k-quads of u[r] (w + 128 as u8, each dword broadcast to the lanes) against
 * the groups' 8 ymm of q at a (group g Kp·8 bytes on): VPDPBUSD(w + 128, q) */
static inline __attribute__((always_inline)) void bc_step(const int G, const int R, const uint8_t u[][32],
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

/* out[r / 4][8g + t][(r % 4)·16 + jn] (t < 8, g < G) = Σ_k W[row r][k]·q[8g + t][k] for R rows
 * w + r·span: per 32 bytes each row's w + 128 (XOR 0x80) into u[r], then lane t of acc[r][g] sums
 * Σ_k (W[row r][k] + 128)·q[8g + t][k], less qc[g] lane t = 128·Σ_k q[8g + t][k] (mod 2^32) */
static inline __attribute__((always_inline)) void bc_rows(const int G, const int R, const int8_t *w, int64_t span,
                                                          int64_t K, const uint8_t *ap, int64_t Kp,
                                                          const __m256i qc[4], int32_t out[2][BC_M][64], int jn) {
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    __m256i acc[BC_RMAX][4];
    _Alignas(32) uint8_t u[BC_RMAX][32];
    for (int r = 0; r < R; r++)
        for (int g = 0; g < G; g++) acc[r][g] = _mm256_setzero_si256();
    const int64_t K32 = K & ~(int64_t)31;
    for (int64_t k = 0; k < K32; k += 32) {
        for (int r = 0; r < R; r++) {
            const int8_t *p = w + r * span + k;
            _mm_prefetch((const char *)(p + BC_PF), _MM_HINT_T1);
            _mm256_store_si256((__m256i *)u[r], _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)p), flip));
        }
        __asm__("" : "+m"(u)); /* u read from memory: one broadcast load per dword, no shuffles */
        bc_step(G, R, (const uint8_t(*)[32])u, ap + k * 8, Kp, acc);
    }
    if (K32 < K) { /* the rows' last bytes, zero past K */
        for (int r = 0; r < R; r++) {
            int8_t tmp[32] = {0};
            memcpy(tmp, w + r * span + K32, (size_t)(K - K32));
            _mm256_store_si256((__m256i *)u[r], _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)tmp), flip));
        }
        __asm__("" : "+m"(u));
        bc_step(G, R, (const uint8_t(*)[32])u, ap + K32 * 8, Kp, acc);
    }
    for (int r = 0; r < R; r++)
        for (int g = 0; g < G; g++) {
            int32_t lane[8];
            _mm256_storeu_si256((__m256i *)lane, _mm256_sub_epi32(acc[r][g], qc[g]));
            for (int t = 0; t < 8; t++) out[r / 4][8 * g + t][(r % 4) * 16 + jn] = lane[t];
        }
}

/* R streams of len rows, stream r = rows s0 + r·len + j (row n at g->w + (n − g->n0)·ldw); every
 * 16 rows their outputs */
static inline __attribute__((always_inline)) void bc_run(const int G, const int R, const qmm_a2r_job *g, int64_t s0,
                                                         int64_t len) {
    const qmm_rows_act *a = g->a;
    const int64_t ld = g->ldw;
    const int m = (int)a->M;
    int32_t qs[BC_M] = {0};
    memcpy(qs, a->qsum, sizeof(int32_t) * (size_t)m);
    __m256i qc[4];
    for (int i = 0; i < G; i++) qc[i] = _mm256_slli_epi32(_mm256_loadu_si256((const __m256i *)(qs + 8 * i)), 7);
    int32_t out[2][BC_M][64];
    for (int64_t j = 0; j < len; j++) {
        bc_rows(G, R, g->w + (s0 + j - g->n0) * ld, len * ld, a->K, a->ap, a->lda, qc, out, (int)(j % 16));
        if (j % 16 != 15 && j != len - 1) continue;
        const int cols = (int)(j % 16) + 1;
        const int64_t n = s0 + j - cols + 1;
        qmm_a2_rows_out(g->c, a->s, (const int32_t(*)[64])out[0], R < 4 ? R : 4, m, n, len, cols);
        if (R > 4) qmm_a2_rows_out(g->c, a->s, (const int32_t(*)[64])out[1], R - 4, m, n + 4 * len, len, cols);
    }
}

/* columns [g->n0, g->n1): R streams of ⌊rows / R⌋ rows, then the rest (fewer than R) side by side,
 * one row each */
static inline __attribute__((always_inline)) void bc_blocks(const int G, const int R, const qmm_a2r_job *g) {
    const int64_t n0 = g->n0, n1 = g->n1;
    const int64_t len = (n1 - n0) / R, s0 = n0 + R * len;
    if (len > 0) bc_run(G, R, g, n0, len);
    switch (n1 - s0) {
    case 0: break;
    case 1: bc_run(G, 1, g, s0, 1); break;
    case 2: if (R > 2) bc_run(G, 2, g, s0, 1); break;
    case 3: if (R > 3) bc_run(G, 3, g, s0, 1); break;
    case 4: if (R > 4) bc_run(G, 4, g, s0, 1); break;
    default: if (R > 5) bc_run(G, 5, g, s0, 1); break;
    }
}

void qmm_qd8_qc8w_rows_ukernel_m9to32__avxvnni_bcast(const int8_t *w, int64_t ldw, const qmm_rows_act *a,
                                                     const qmm_call *out, int64_t n0, int64_t n1) {
    const qmm_a2r_job job = {w, ldw, a, out, n0, n1};
    switch ((a->M + 7) / 8) {
    case 2: bc_blocks(2, 6, &job); break;
    case 3: bc_blocks(3, 4, &job); break;
    case 4: bc_blocks(4, 3, &job); break;
    default: qmm_call_bug(out, "avx_vnni broadcast rows: M outside 9..32"); break;
    }
}

#endif
