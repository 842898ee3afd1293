/*
 * w4a8_avx512_vnni.c — the avx512_vnni engine's rows regime on a W4A8 weight at M <= 4, fused:
 * each row's codes are looked up in the call's decode table (w4a8_avx512.h) and the 64 int8
 * values go straight into VPDPBUSD against the M rows of q, never stored (the unfused path
 * writes them to a buffer that the engine's rows kernel reads back). The arithmetic is the rows
 * kernel's (avx512_vnni.c, rows_dot): W flipped to u8 (w ^ 0x80 = w + 128), q the s8 operand, Σ
 * (w + 128)·q = Σ w·q + 128·qsum[i], corrected per token; two accumulators per token
 * (alternate 64-k steps: VPDPBUSD's latency), reduced per row; every 16 rows the outputs through
 * qmm_z_epilogue16. The int32 sums are exact (mod 2^32), so the bits are the engine's and the
 * reference's. Groups of a multiple of 16, e4m3 s_rel (the table); the driver checks that.
 */
#include "int8_gemm.h"
#include "simd_avx512.h"
#include "w4a8_avx512.h"

#include <immintrin.h>

/* acc += Σ4 u8(a) · s8(b), in one register (as avx512_vnni.c's dpbusd) */
static inline __m512i w4_dpbusd(__m512i acc, __m512i a, __m512i b) {
    __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
    return acc;
}

/* out[i] = Σ_k W[n][k]·q[i][k] (mod 2^32) for i < m: row n of a K a multiple of 16 */
static inline __attribute__((always_inline)) void w4_row_dot(const int six, const int per, const int m,
                                                             const qmm_weight *w, const int8_t *lut, int64_t n,
                                                             const int8_t *q, int64_t lda, const int32_t *qsum,
                                                             int32_t *out) {
    const int64_t K = w->K, K64 = K / 64 * 64;
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    __m512i a0[4], a1[4];
    for (int i = 0; i < m; i++) a0[i] = a1[i] = _mm512_setzero_si512();
    qmm_w4_walk it;
    qmm_w4_walk_init(&it, six, w, lut, n, 0);
    int64_t k = 0;
    for (; k + 128 <= K64; k += 128) {
        qmm_w4_prefetch(&it, six);
        const __m512i x0 = _mm512_xor_si512(qmm_w4_next64(&it, six, per), flip);
        for (int i = 0; i < m; i++) a0[i] = w4_dpbusd(a0[i], x0, _mm512_loadu_si512(q + i * lda + k));
        const __m512i x1 = _mm512_xor_si512(qmm_w4_next64(&it, six, per), flip);
        for (int i = 0; i < m; i++) a1[i] = w4_dpbusd(a1[i], x1, _mm512_loadu_si512(q + i * lda + k + 64));
    }
    if (k < K64) {
        const __m512i x0 = _mm512_xor_si512(qmm_w4_next64(&it, six, per), flip);
        for (int i = 0; i < m; i++) a0[i] = w4_dpbusd(a0[i], x0, _mm512_loadu_si512(q + i * lda + k));
        k += 64;
    }
    for (; k < K; k += 16) { /* 16 at a time: the other lanes 0 (u8) against 16 bytes of q */
        const __m512i x = _mm512_zextsi128_si512(_mm_xor_si128(qmm_w4_next16(&it, six), _mm_set1_epi8((char)0x80)));
        for (int i = 0; i < m; i++)
            a1[i] = w4_dpbusd(a1[i], x, _mm512_zextsi128_si512(_mm_loadu_si128((const __m128i *)(q + i * lda + k))));
    }
    for (int i = 0; i < m; i++)
        out[i] = (int32_t)((uint32_t)_mm512_reduce_add_epi32(_mm512_add_epi32(a0[i], a1[i])) - ((uint32_t)qsum[i] << 7));
}

/* blocks [b0, b1): every 16 rows, per token, the 16 outputs through the epilogue */
static inline __attribute__((always_inline)) void w4_rows(const int six, const int per, const int m,
                                                          const qmm_i8_gemm *g, int64_t b0, int64_t b1) {
    const qmm_call *c = g->c;
    const int8_t *q = (const int8_t *)g->a;
    const int64_t n1 = b1 * 16 < c->N ? b1 * 16 : c->N;
    _Alignas(64) int32_t out[4][16];
    for (int64_t n0 = b0 * 16; n0 < n1; n0 += 16) {
        const int cols = n1 - n0 < 16 ? (int)(n1 - n0) : 16;
        int32_t t[4];
        for (int j = 0; j < cols; j++) {
            w4_row_dot(six, per, m, c->w, g->w4_lut, n0 + j, q, g->Kp, g->qsum, t);
            for (int i = 0; i < m; i++) out[i][j] = t[i];
        }
        for (int i = 0; i < m; i++)
            qmm_z_epilogue16(c, _mm512_load_si512(out[i]), i, n0, g->s[i], qmm_z_tail_mask(cols));
    }
}

static void rows_fused(const qmm_i8_gemm *g, int64_t b0, int64_t b1) {
    const int six = g->c->w->w4.bits == 6, per = qmm_w4_per(g->c->w->w4.group) == 4 ? 4 : 0;
#define W4_CASE(S, P, M) case (S) * 100 + (P) * 10 + (M): w4_rows(S, P, M, g, b0, b1); break
    switch (six * 100 + per * 10 + (int)g->c->M) {
    W4_CASE(0, 4, 1); W4_CASE(0, 4, 2); W4_CASE(0, 4, 3); W4_CASE(0, 4, 4);
    W4_CASE(0, 0, 1); W4_CASE(0, 0, 2); W4_CASE(0, 0, 3); W4_CASE(0, 0, 4);
    W4_CASE(1, 4, 1); W4_CASE(1, 4, 2); W4_CASE(1, 4, 3); W4_CASE(1, 4, 4);
    W4_CASE(1, 0, 1); W4_CASE(1, 0, 2); W4_CASE(1, 0, 3); W4_CASE(1, 0, 4);
    default: qmm_call_bug(g->c, "w4a8 fused rows: M past QMM_W4A8_FUSED_M"); break;
    }
#undef W4_CASE
}

const qmm_w4a8_fused_fn qmm_w4a8_rows_fused_vnni_ptr = rows_fused;
