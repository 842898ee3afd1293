/*
 * avx512_vnni_w4a8.c — the avx512_vnni engine's rows regime on a W4A8 weight at M <= 8, fused
 * (its qmm_i8_engine.rows_w4a8, int8_gemm.h):
 * each row's codes are looked up in the call's decode table (w4a8_avx512.h) and the 64 int8
 * values go straight into VPDPBUSD against the M rows of q, never stored (the unfused path
 * writes them to a buffer that the engine's rows kernel reads back). The arithmetic is the rows
 * kernel's (avx512_vnni_rows.c, rows_dot): W flipped to u8 (w ^ 0x80 = w + 128), q the s8 operand, Σ
 * (w + 128)·q = Σ w·q + 128·qsum[i], corrected per token. R rows at a time (M <= 4: 4, else 2:
 * R·M <= 16 accumulators), one from each of R equal runs of the thread's blocks (R code streams
 * in flight, each prefetched 4 KiB ahead into L2, as the rows kernel's streams), one accumulator
 * per row and token, reduced per row; every 16 rows of a run its outputs through
 * qmm_z_epilogue16 (measured against the unfused path: bench/NOTES.md "## W4A8 speed"). The
 * int32 sums are exact (mod 2^32), so the bits are the engine's and the reference's. Groups of a
 * multiple of 16, e4m3 s_rel (the table); the driver checks that.
 */
#include "int8_gemm.h"
#include "ukernels.h"
#include "simd_avx512.h"
#include "w4a8_avx512.h"

#include <immintrin.h>

/* acc += Σ4 u8(a) · s8(b), in one register (as avx512_vnni.c's dpbusd) */
static inline __m512i w4_dpbusd(__m512i acc, __m512i a, __m512i b) {
    __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
    return acc;
}

/* out[r·m + i] = Σ_k W[n_r][k]·q[i][k] (mod 2^32) for R rows n_r at once (R streams of codes in
 * flight), i < m */
static inline __attribute__((always_inline)) void w4_rows_dot(const int six, const int per, const int m, const int R,
                                                              const qmm_weight *w, const int8_t *lut,
                                                              const int64_t *n, const int8_t *q, int64_t lda,
                                                              const int32_t *qsum, int32_t *out) {
    const int64_t K = w->K, K64 = K / 64 * 64;
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    __m512i a[4][8];
    qmm_w4_walk it[4];
    for (int r = 0; r < R; r++) {
        qmm_w4_walk_init(&it[r], six, w, lut, n[r], 0);
        for (int i = 0; i < m; i++) a[r][i] = _mm512_setzero_si512();
    }
    int64_t k = 0;
    for (; k < K64; k += 64) {
        __m512i x[4];
        for (int r = 0; r < R; r++) {
            if (!(k & 64)) qmm_w4_prefetch(&it[r], six);
            x[r] = _mm512_xor_si512(qmm_w4_next64(&it[r], six, per), flip);
        }
        for (int i = 0; i < m; i++) {
            const __m512i qv = _mm512_loadu_si512(q + i * lda + k);
            for (int r = 0; r < R; r++) a[r][i] = w4_dpbusd(a[r][i], x[r], qv);
        }
    }
    for (; k < K; k += 16) { /* 16 at a time: the other lanes 0 (u8) against 16 bytes of q */
        __m512i x[4];
        for (int r = 0; r < R; r++)
            x[r] = _mm512_zextsi128_si512(_mm_xor_si128(qmm_w4_next16(&it[r], six), _mm_set1_epi8((char)0x80)));
        for (int i = 0; i < m; i++) {
            const __m512i qv = _mm512_zextsi128_si512(_mm_loadu_si128((const __m128i *)(q + i * lda + k)));
            for (int r = 0; r < R; r++) a[r][i] = w4_dpbusd(a[r][i], x[r], qv);
        }
    }
    for (int r = 0; r < R; r++)
        for (int i = 0; i < m; i++)
            out[r * m + i] = (int32_t)((uint32_t)_mm512_reduce_add_epi32(a[r][i]) - ((uint32_t)qsum[i] << 7));
}

/* R streams of L whole blocks each from block s0 (stream r: blocks s0 + r·L ..), one row of each
 * at a time; after every 16 rows each stream's 16 outputs per token through the epilogue */
static inline __attribute__((always_inline)) void w4_streams(const int six, const int per, const int m, const int R,
                                                             const qmm_i8_gemm *g, int64_t s0, int64_t L) {
    const qmm_call *c = g->c;
    const int8_t *q = (const int8_t *)g->a;
    const int64_t N = c->N;
    _Alignas(64) int32_t out[4][8][16]; /* [stream][token][row in the block] */
    for (int64_t b = 0; b < L; b++) {
        int cols = 16;
        for (int j = 0; j < 16; j++) {
            int64_t n[4];
            int32_t t[32];
            for (int r = 0; r < R; r++) n[r] = (s0 + r * L + b) * 16 + j;
            if (n[R - 1] >= N) { cols = j; break; } /* only a stream of one block: the last may end early */
            w4_rows_dot(six, per, m, R, c->w, g->w4_lut, n, q, g->Kp, g->qsum, t);
            for (int r = 0; r < R; r++)
                for (int i = 0; i < m; i++) out[r][i][j] = t[r * m + i];
        }
        for (int r = 0; r < R; r++)
            for (int i = 0; i < m; i++)
                qmm_z_epilogue16(c, _mm512_load_si512(out[r][i]), i, (s0 + r * L + b) * 16, g->s[i], qmm_z_tail_mask(cols));
    }
}

/* blocks [b0, b1): R streams of whole blocks (codes of R rows in flight), the rest (and a last
 * block cut by N) one stream at a time */
static inline __attribute__((always_inline)) void w4_rows(const int six, const int per, const int m,
                                                          const qmm_i8_gemm *g, int64_t b0, int64_t b1) {
    const int R = m <= 4 ? 4 : 2; /* R·m accumulators: at most 16 */
    const int64_t full = b1 * 16 <= g->c->N ? b1 - b0 : b1 - b0 - 1, L = full / R;
    if (L > 0 && R == 4) w4_streams(six, per, m, 4, g, b0, L);
    if (L > 0 && R == 2) w4_streams(six, per, m, 2, g, b0, L);
    for (int64_t b = b0 + R * L; b < b1; b++) w4_streams(six, per, m, 1, g, b, 1);
}

void qmm_qd8_w4_rows_ukernel_m1to8__avx512vnni_fused(const qmm_i8_gemm *g, int64_t b0, int64_t b1) {
    const int six = g->c->w->w4.bits == 6, per = qmm_w4_per(g->c->w->w4.group) == 4 ? 4 : 0;
#define W4_CASE(S, P, M) case (S) * 100 + (P) * 10 + (M): w4_rows(S, P, M, g, b0, b1); break
    switch (six * 100 + per * 10 + (int)g->c->M) {
    W4_CASE(0, 4, 1); W4_CASE(0, 4, 2); W4_CASE(0, 4, 3); W4_CASE(0, 4, 4);
    W4_CASE(0, 4, 5); W4_CASE(0, 4, 6); W4_CASE(0, 4, 7); W4_CASE(0, 4, 8);
    W4_CASE(0, 0, 1); W4_CASE(0, 0, 2); W4_CASE(0, 0, 3); W4_CASE(0, 0, 4);
    W4_CASE(0, 0, 5); W4_CASE(0, 0, 6); W4_CASE(0, 0, 7); W4_CASE(0, 0, 8);
    W4_CASE(1, 4, 1); W4_CASE(1, 4, 2); W4_CASE(1, 4, 3); W4_CASE(1, 4, 4);
    W4_CASE(1, 4, 5); W4_CASE(1, 4, 6); W4_CASE(1, 4, 7); W4_CASE(1, 4, 8);
    W4_CASE(1, 0, 1); W4_CASE(1, 0, 2); W4_CASE(1, 0, 3); W4_CASE(1, 0, 4);
    W4_CASE(1, 0, 5); W4_CASE(1, 0, 6); W4_CASE(1, 0, 7); W4_CASE(1, 0, 8);
    default: qmm_call_bug(g->c, "w4a8 fused rows: M past 8"); break;
    }
#undef W4_CASE
}

