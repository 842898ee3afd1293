/*
 * avx_vnni_rows.c — the avx_vnni engine's rows regime at 9 <= M <= 32 (int8_gemm.h: a borrowed
 * weight, the caller's rows read in place, each byte once; qmm_qd8_qc8w_rows_ukernel_m9to32__avxvnni_bcast),
 * and the token copy it reads (qmm_avx_vnni_rows_ap_bytes / _fill). Built with -mavxvnni.
 *
 * yᵀ = W·xᵀ with the tokens in the lanes of a ymm: the pre-pass's pool run writes q in groups of
 * 8 tokens (rows_ap_fill), per k-quad one ymm of the 8 tokens' 4 bytes as u8 q + 128 (pad tokens
 * 128, k past K 128); each W row's k-quad (4 bytes, s8 as they are) is broadcast and
 * VPDPBUSD(q + 128, w) adds it into the row's G accumulators (G = ⌈M/8⌉ groups): lane t of group
 * g sums Σ_k (q[8g + t][k] + 128)·w[k]. The row's Σw (VPDPBUSD(1, w) per 32 bytes, summed at the
 * row's end) takes the 128·Σw back out: exact for every w and q (mod 2^32). R rows at a time
 * (G = 2: 3, G = 3..4: 2; R·G + R + G + 2 <= 16 ymm), from R equal runs of the thread's blocks
 * (long sequential streams, prefetched 4 KiB ahead into L2, as int8_rows_avx2.h); the q groups'
 * vectors of a k-quad are loaded once for the R rows. The last K % 32 bytes of a row are copied
 * into a zeroed buffer: nothing past W[n][K-1] is read. Every 16 rows of a run their outputs
 * through qmm_a2_rows_out. Against the dot form (int8_rows_avx2.h) the rows are not re-read per
 * token: the form for more tokens than L1 holds q of (bench/NOTES.md); against the panels, no
 * pack.
 */
#include "int8_gemm_avx2.h"
#include "ukernels.h"

#ifdef __AVXVNNI__

enum { BC_M = 32, BC_PF = 4096 };

int64_t qmm_avx_vnni_rows_ap_bytes(int64_t M, int64_t Kp) {
    return M > 8 && M <= BC_M ? (M + 7) / 8 * Kp * 8 : 0;
}

/* the groups of 8 of tokens [r0, r1) (r0 a multiple of 8) at ap_base + r0·Kp from q (rows lda = Kp
 * bytes apart): group i's k-quad j at (i·Kp/4 + j)·32, token t's 4 bytes at +4t, u8 q + 128 (pad
 * tokens 128) */
void qmm_avx_vnni_rows_ap_fill(const int8_t *q, int64_t lda, uint8_t *ap_base, int64_t r0, int64_t r1) {
    const int64_t Kp = lda;
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (int64_t t0 = r0; t0 < r1; t0 += 8) {
        const int64_t r = r1 - t0 < 8 ? r1 - t0 : 8;
        uint8_t *ap = ap_base + t0 * Kp;
        const __m256i live = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)r), idx); /* lanes t < r */
        const __m256i offs = _mm256_mullo_epi32(idx, _mm256_set1_epi32((int)Kp));
        for (int64_t j = 0; j < Kp / 4; j++) {
            const __m256i v = _mm256_mask_i32gather_epi32(_mm256_setzero_si256(), (const int *)(q + t0 * Kp + 4 * j),
                                                          offs, live, 1);
            _mm256_store_si256((__m256i *)(ap + j * 32), _mm256_xor_si256(v, flip));
        }
    }
}

/* the 4 bytes of w at k as a broadcast dword */
static inline __m256i bcast4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* out[8g + t][r·16 + jn] (t < 8, g < G) = Σ_k W[row r][k]·q[8g + t][k] for R rows w + r·span */
static inline __attribute__((always_inline)) void bc_rows(const int G, const int R, const int8_t *w, int64_t span,
                                                          int64_t K, const uint8_t *ap, int64_t Kp,
                                                          int32_t out[BC_M][64], int jn) {
    const __m256i ones = _mm256_set1_epi8(1);
    __m256i acc[3][4], sacc[3];
    for (int r = 0; r < R; r++) {
        sacc[r] = _mm256_setzero_si256();
        for (int g = 0; g < G; g++) acc[r][g] = _mm256_setzero_si256();
    }
    for (int64_t k = 0; k < K; k += 32) {
        const int8_t *p[3];
        int8_t tmp[3][32];
        for (int r = 0; r < R; r++) {
            p[r] = w + r * span + k;
            _mm_prefetch((const char *)(p[r] + BC_PF), _MM_HINT_T1);
            if (K - k < 32) { /* the row's last bytes, zero past K */
                memset(tmp[r], 0, 32);
                memcpy(tmp[r], p[r], (size_t)(K - k));
                p[r] = tmp[r];
            }
            sacc[r] = _mm256_dpbusd_avx_epi32(sacc[r], ones, _mm256_loadu_si256((const __m256i *)p[r]));
        }
        const uint8_t *a = ap + k * 8; /* k-quad k/4 of group 0; group g Kp·8 bytes on */
        for (int t = 0; t < 8; t++) {
            __m256i qv[4];
            for (int g = 0; g < G; g++) qv[g] = _mm256_load_si256((const __m256i *)(a + g * Kp * 8 + t * 32));
            for (int r = 0; r < R; r++) {
                const __m256i b = bcast4(p[r] + 4 * t);
                for (int g = 0; g < G; g++) acc[r][g] = _mm256_dpbusd_avx_epi32(acc[r][g], qv[g], b);
            }
        }
    }
    for (int r = 0; r < R; r++) {
        const __m256i c = _mm256_set1_epi32((int32_t)(128u * (uint32_t)qmm_a2_hsum8(sacc[r])));
        for (int g = 0; g < G; g++) {
            int32_t lane[8];
            _mm256_storeu_si256((__m256i *)lane, _mm256_sub_epi32(acc[r][g], c));
            for (int t = 0; t < 8; t++) out[8 * g + t][r * 16 + jn] = lane[t];
        }
    }
}

/* R streams of len rows, stream r = rows s0 + r·len + j (row n at g->w + (n − g->n0)·ldw); every
 * 16 rows their outputs */
static inline __attribute__((always_inline)) void bc_run(const int G, const int R, const qmm_a2r_job *g, int64_t s0,
                                                         int64_t len) {
    const qmm_rows_act *a = g->a;
    const int64_t ld = g->ldw;
    const int m = (int)a->M;
    int32_t out[BC_M][64];
    for (int64_t j = 0; j < len; j++) {
        bc_rows(G, R, g->w + (s0 + j - g->n0) * ld, len * ld, a->K, a->ap, a->lda, out, (int)(j % 16));
        if (j % 16 != 15 && j != len - 1) continue;
        const int cols = (int)(j % 16) + 1;
        qmm_a2_rows_out(g->c, a->s, (const int32_t(*)[64])out, R, m, s0 + j - cols + 1, len, cols);
    }
}

/* columns [g->n0, g->n1): R streams of ⌊rows / R⌋ rows, the rest one at a time */
static inline __attribute__((always_inline)) void bc_blocks(const int G, const int R, const qmm_a2r_job *g) {
    const int64_t n0 = g->n0, n1 = g->n1;
    const int64_t len = (n1 - n0) / R;
    if (len > 0) bc_run(G, R, g, n0, len);
    if (n0 + R * len < n1) bc_run(G, 1, g, n0 + R * len, n1 - n0 - R * len);
}

void qmm_qd8_qc8w_rows_ukernel_m9to32__avxvnni_bcast(const int8_t *w, int64_t ldw, const qmm_rows_act *a,
                                                     const qmm_call *out, int64_t n0, int64_t n1) {
    const qmm_a2r_job job = {w, ldw, a, out, n0, n1};
    switch ((a->M + 7) / 8) {
    case 2: bc_blocks(2, 3, &job); break;
    case 3: bc_blocks(3, 2, &job); break;
    case 4: bc_blocks(4, 2, &job); break;
    default: qmm_call_bug(out, "avx_vnni broadcast rows: M outside 9..32"); break;
    }
}

#endif
