/*
 * avx512_vnni_rows.c — the rows regime of the AVX512-VNNI engine (avx512_vnni.c; int8_gemm.h): a
 * borrowed weight at M <= 64 tokens, the caller's rows read in place, each byte once, against
 * all M tokens at once; the kernels by name and the M each runs in qmm_vnni_rows_kernels
 * (ukernels.h), and the token copy the broadcast kernels read (qmm_vnni_rows_ap_bytes / _fill).
 */
#include "avx512_vnni_bcast.h"
#include "avx512_vnni_rows.h"
#include "avx512/pack_avx512.h"
#include "ukernels.h"

#include <string.h>

/* The rows regime (M <= ROWS_M): the caller's rows are read in place, each byte once, in a few
 * long sequential streams (R equal runs of the task's rows, stream r: rows n0 + r·len + j; with
 * ld == K each a sequential run of len·K bytes, prefetched into L2, ROWS_PF bytes ahead for
 * rows_dot, QMM_BC_PF for the broadcast kernels; the leftover rows one at a time), and meet all M
 * tokens at once. Two kernels (measured,
 * bench/NOTES.md; per 64 bytes of one W row):
 *   M <= ROWS_DOT_M  row dot products (qmm_qd8_qc8w_rows_ukernel_m1to2__avx512vnni_dot, m3to8_.._dot2): W is the
 *                    u8 operand, flipped (w ^ 0x80 = w + 128), q (s8: the driver leaves the
 *                    pre-pass output unflipped for this kernel) the s8 one: Σ (w + 128)·q = Σ w·q
 *                    + 128·qsum[i], a correction per token (the driver's qsum). One load and XOR
 *                    of W, M VPDPBUSD, the 64 bytes of q of each token loaded once for the R rows.
 *                    rows_dot (M <= 2) keeps R·M accumulators; rows_dot2 (3 <= M <= 8) puts two
 *                    rows in one zmm (32 bytes of each, against 32 bytes of q broadcast to both
 *                    halves), R/2·M accumulators, so R can be larger. R (rows_r): the most that
 *                    fits 32 registers, at most 8 streams. The accumulators of a row step go to
 *                    buf and, per 16 rows of a stream, 16 at a time through hsum16.
 *   M <= ROWS_M      W broadcast, tokens in lanes (yᵀ = W·xᵀ): the engine's token copy of q
 *                    (rows_ap_fill, in the pre-pass's pool run) in the lanes of a zmm shared by R rows, each W
 *                    row's bytes broadcast against it, one accumulator (set) per row; no
 *                    transposes but one 16 × 16 per 16 rows of a stream for the outputs.
 *                    13 <= M <= 16: bcast_dot, 16 tokens × 4 k per zmm, W's 4 bytes the m32{1to16}
 *                    operand: 16 VPDPBUSD (+1 at M = 16 for the row sum) per 64 bytes.
 *                    9 <= M <= 12: lanes_dot, 8 tokens × 8 k (VPBROADCASTQ of W) and 4 tokens ×
 *                    16 k (VBROADCASTI32X4): 12 VPDPBUSD (+1 at M = 12) and 12 broadcast loads.
 *                    17 <= M <= 64: groups of 16 tokens (bcast_dot) and a last group of 4, 8,
 *                    12 or 16 lanes (lanes_dot, bcast_dot), one after the other on the same R
 *                    rows (the later groups read them from L1/L2; the first sums them): per 64
 *                    bytes M rounded up to 4 VPDPBUSD, +1; the token copy, ≤ 64·Kp bytes, is
 *                    read once per R rows from L2/L3 (K = 25600: 1.6 MiB, measured at parity).
 *                    At M <= 8 the same forms (8 × 8 k, 4 × 16 k) tie rows_dot in VPDPBUSD count
 *                    (M rounded up to 4 or 8) and measured so; rows_dot stays.
 * The last K bytes of a row are a masked load: nothing past W[n][K-1] is read (rows_dot: masked-off
 * bytes are 0, flipped 128, against q = 0 past K; bcast_dot: 0 against any token byte). */
enum {
    ROWS_DOT_M = 8,  /* up to this M: rows_dot */
    ROWS_M = QMM_VNNI_ROWS_M, /* up to this M: the rows regime (the broadcast kernels above ROWS_DOT_M) */
    BCAST_G = 4,     /* bcast_dot's token groups of 16 (M <= 16·BCAST_G) */
    ROWS_RMAX = 8,   /* the most rows of W per step */
    ROWS_PAIRS_FROM = 2, /* above this M: rows_dot2 (rows in pairs) */
    ROWS_PF = 4096,  /* rows_dot's prefetch distance per stream, bytes (into L2) */
    BCAST_R = 8,     /* bcast_dot's rows of W per step (streams) */
    LANES12_R = 6,   /* lanes_dot's at 9 <= M <= 12 (4 accumulators per row with the row sums) */
    BCAST_RMAX = QMM_BC_RMAX
};

/* One rows kernel call's operands (qmm_i8_rows_fn, int8_gemm.h) as the templates below pass them
 * on: column n from row w + (n − n0)·ldw, columns [n0, n1). */
typedef struct rows_job {
    const int8_t *w;
    int64_t ldw;
    const qmm_rows_act *a;
    const qmm_call *c;
    int64_t n0, n1;
} rows_job;

/* rows of W per step for M tokens: rows_dot (M <= ROWS_PAIRS_FROM) R + R·M + 1 <= 32 zmm; rows_dot2
 * R + (R/2)·M + 2 <= 32; at most 8 streams */
static inline int rows_r(int m) { return m <= 5 ? 8 : m <= 7 ? 6 : 4; }

/* r[j] = Σ lanes of v[j], j < 16 (a 16 × 16 transpose-and-add, 45 instructions) */
static inline __m512i hsum16(const __m512i v[16]) {
    __m512i t[8], u[4];
    for (int j = 0; j < 8; j++) /* per 128-bit lane: [v2j, v2j+1, v2j, v2j+1] pair sums */
        t[j] = _mm512_add_epi32(_mm512_unpacklo_epi32(v[2 * j], v[2 * j + 1]),
                                _mm512_unpackhi_epi32(v[2 * j], v[2 * j + 1]));
    for (int j = 0; j < 4; j++) /* per 128-bit lane: [v4j, v4j+1, v4j+2, v4j+3], that lane's sums */
        u[j] = _mm512_add_epi32(_mm512_unpacklo_epi64(t[2 * j], t[2 * j + 1]),
                                _mm512_unpackhi_epi64(t[2 * j], t[2 * j + 1]));
    const __m512i s0 = _mm512_add_epi32(_mm512_shuffle_i32x4(u[0], u[1], 0x44), _mm512_shuffle_i32x4(u[0], u[1], 0xEE));
    const __m512i s1 = _mm512_add_epi32(_mm512_shuffle_i32x4(u[2], u[3], 0x44), _mm512_shuffle_i32x4(u[2], u[3], 0xEE));
    return _mm512_add_epi32(_mm512_shuffle_i32x4(s0, s1, 0x88), _mm512_shuffle_i32x4(s0, s1, 0xDD));
}

/* Rows w, w + span, .. (R of them, K bytes each) against the m rows of q (lda bytes apart, zero
 * past K): buf[((r·m + i)·16 + jn)·16 ..] = the 16 lane sums of Σ_k (w_r[k] + 128)·q[i][k]. */
static inline __attribute__((always_inline)) void rows_dot(const int m, const int R, const int8_t *w, int64_t span,
                                                           int64_t K, const int8_t *q, int64_t lda, int32_t *buf,
                                                           int jn) {
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    __m512i acc[ROWS_RMAX][ROWS_DOT_M], x[ROWS_RMAX];
    for (int r = 0; r < R; r++)
        for (int i = 0; i < m; i++) acc[r][i] = _mm512_setzero_si512();
    for (int64_t k = 0; k < K; k += 64) {
        const __mmask64 msk = K - k >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << (K - k)) - 1;
        for (int r = 0; r < R; r++) {
            _mm_prefetch((const char *)(w + r * span + k + ROWS_PF), _MM_HINT_T1);
            x[r] = _mm512_xor_si512(_mm512_maskz_loadu_epi8(msk, w + r * span + k), flip);
        }
        for (int i = 0; i < m; i++) {
            const __m512i av = _mm512_loadu_si512(q + i * lda + k);
            for (int r = 0; r < R; r++) acc[r][i] = qmm_vnni_dpbusd(acc[r][i], x[r], av);
        }
    }
    for (int r = 0; r < R; r++)
        for (int i = 0; i < m; i++) _mm512_store_si512(buf + ((r * m + i) * 16 + jn) * 16, acc[r][i]);
}

/* rows_dot with rows in pairs: one zmm holds 32 bytes of row 2p (lanes 0..7) and of row 2p + 1
 * (lanes 8..15) against 32 bytes of q broadcast to both halves, so one accumulator serves two
 * rows (R = 2P rows in P·m accumulators); same buf layout as rows_dot. */
static inline __attribute__((always_inline)) void rows_dot2(const int m, const int R, const int8_t *w, int64_t span,
                                                            int64_t K, const int8_t *q, int64_t lda, int32_t *buf,
                                                            int jn) {
    const int P = R / 2;
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    __m512i acc[ROWS_RMAX / 2][ROWS_DOT_M], lo[ROWS_RMAX / 2], hi[ROWS_RMAX / 2];
    for (int p = 0; p < P; p++)
        for (int i = 0; i < m; i++) acc[p][i] = _mm512_setzero_si512();
    for (int64_t k = 0; k < K; k += 64) {
        const int64_t b0 = K - k >= 32 ? 32 : K - k, b1 = K - k >= 64 ? 32 : K - k > 32 ? K - k - 32 : 0;
        const __mmask32 m0 = b0 >= 32 ? ~(__mmask32)0 : ((__mmask32)1 << b0) - 1;
        const __mmask32 m1 = b1 >= 32 ? ~(__mmask32)0 : ((__mmask32)1 << b1) - 1;
        for (int p = 0; p < P; p++) {
            const int8_t *w0 = w + 2 * p * span + k, *w1 = w0 + span;
            _mm_prefetch((const char *)(w0 + ROWS_PF), _MM_HINT_T1);
            _mm_prefetch((const char *)(w1 + ROWS_PF), _MM_HINT_T1);
            lo[p] = _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(_mm256_maskz_loadu_epi8(m0, w0)),
                                                        _mm256_maskz_loadu_epi8(m0, w1), 1), flip);
            hi[p] = _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(_mm256_maskz_loadu_epi8(m1, w0 + 32)),
                                                        _mm256_maskz_loadu_epi8(m1, w1 + 32), 1), flip);
        }
        for (int i = 0; i < m; i++) {
            const __m512i q0 = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(q + i * lda + k)));
            const __m512i q1 = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(q + i * lda + k + 32)));
            for (int p = 0; p < P; p++) acc[p][i] = qmm_vnni_dpbusd(qmm_vnni_dpbusd(acc[p][i], lo[p], q0), hi[p], q1);
        }
    }
    for (int p = 0; p < P; p++)
        for (int i = 0; i < m; i++) {
            _mm512_store_si512(buf + (((2 * p) * m + i) * 16 + jn) * 16, _mm512_maskz_mov_epi32(0x00ff, acc[p][i]));
            _mm512_store_si512(buf + (((2 * p + 1) * m + i) * 16 + jn) * 16, _mm512_maskz_mov_epi32(0xff00, acc[p][i]));
        }
}

/* R streams of len rows each, stream r = rows s0 + r·span + j of W (j < len): row j of every
 * stream at once; after every 16 rows of the streams (and after the last) each stream's outputs
 * of those rows, per token: 16 column sums − 128·qsum through the epilogue. */
static inline __attribute__((always_inline)) void rows_run(const int m, const int R, const rows_job *g, int64_t s0,
                                                           int64_t span, int64_t len) {
    const qmm_call *c = g->c;
    const qmm_rows_act *a = g->a;
    const int64_t K = a->K, ld = g->ldw;
    const int8_t *q = a->q;
    _Alignas(64) int32_t buf[42 * 256]; /* R·m <= 42 (rows_r), or R = 1 and m <= ROWS_DOT_M */
    for (int64_t j = 0; j < len; j++) {
        const int8_t *w = g->w + (s0 + j - g->n0) * ld;
        if (m > ROWS_PAIRS_FROM && R > 1) rows_dot2(m, R, w, span * ld, K, q, a->lda, buf, (int)(j % 16));
        else rows_dot(m, R, w, span * ld, K, q, a->lda, buf, (int)(j % 16));
        if (j % 16 != 15 && j != len - 1) continue;
        const int cols = (int)(j % 16) + 1;
        for (int r = 0; r < R; r++)
            for (int i = 0; i < m; i++) {
                __m512i v[16];
                for (int jn = 0; jn < 16; jn++)
                    v[jn] = jn < cols ? _mm512_load_si512(buf + ((r * m + i) * 16 + jn) * 16) : _mm512_setzero_si512();
                const __m512i acc = _mm512_sub_epi32(hsum16(v), _mm512_set1_epi32((int32_t)((uint32_t)a->qsum[i] << 7)));
                qmm_z_epilogue16(c, acc, i, s0 + r * span + j - cols + 1, a->s[i], qmm_z_tail_mask(cols));
            }
    }
}

/* columns [n0, n1) for m <= ROWS_DOT_M tokens: R streams of ⌊rows / R⌋ rows, the rest one at a time */
static inline __attribute__((always_inline)) void rows_blocks(const int m, const rows_job *g) {
    const int R = rows_r(m);
    const int64_t n0 = g->n0, n1 = g->n1, len = (n1 - n0) / R;
    if (len > 0) rows_run(m, R, g, n0, len, len);
    if (n0 + R * len < n1) rows_run(m, 1, g, n0 + R * len, 0, n1 - n0 - R * len);
}


/* R streams of len rows each, stream r = rows s0 + r·span + j of W (j < len), against the m
 * tokens in ap. lay 12 (9 <= m <= 12): lanes_dot on one group of 12 lanes; lay 16 (13 <= m <= 16):
 * bcast_dot on one group; full: m = 12 or 16 (no pad lane: the kernel sums the rows). lay 0
 * (m > 16): G = ⌈m / 16⌉ groups, tokens 16·gi.. — the first G − 1 of 16 (bcast_dot, copy at
 * ap + gi·Kp·16), the last of qmm_vnni_group_lanes(its tokens) lanes (after them); the first group reads
 * the R rows from DRAM and sums them, the others read them again from L1/L2 and take those sums.
 * After every 16 rows of the streams (and after the last) each stream's rows are transposed (lanes
 * = tokens → lanes = columns) into the epilogue, 16 columns per token. */
static inline __attribute__((always_inline)) void bcast_run(const int lay, const int full, const int R,
                                                            const rows_job *g, int64_t s0, int64_t span,
                                                            int64_t len) {
    const qmm_call *c = g->c;
    const qmm_rows_act *a = g->a;
    const int64_t K = a->K, ld = g->ldw, m = a->M, Kp = a->lda;
    const int G = lay ? 1 : (int)((m + 15) / 16), L = qmm_vnni_group_lanes(m - 16 * (G - 1));
    const uint8_t *ap = a->ap, *last = ap + (size_t)(G - 1) * (size_t)Kp * 16;
    _Alignas(64) int32_t stage[BCAST_G][BCAST_RMAX][16][16];
    for (int64_t j = 0; j < len; j++) {
        const int8_t *w = g->w + (s0 + j - g->n0) * ld;
        const int64_t sp = span * ld;
        __m512i out[BCAST_RMAX], rs[BCAST_RMAX];
        if (lay == 12) qmm_vnni_lanes_dot(1, 1, full ? QMM_BC_SUMS : QMM_BC_PAD, R, w, sp, K, ap, rs, out);
        else qmm_vnni_bcast_dot(lay == 0 || full ? QMM_BC_SUMS : QMM_BC_PAD, R, w, sp, K, ap, rs, out);
        for (int r = 0; r < R; r++) _mm512_store_si512(stage[0][r][j % 16], out[r]);
        if (lay == 0) {
            for (int gi = 1; gi < G - 1; gi++) {
                qmm_vnni_bcast_dot(QMM_BC_GIVEN, R, w, sp, K, ap + (size_t)gi * (size_t)Kp * 16, rs, out);
                for (int r = 0; r < R; r++) _mm512_store_si512(stage[gi][r][j % 16], out[r]);
            }
            switch (L) {
            case 16: qmm_vnni_bcast_dot(QMM_BC_GIVEN, R, w, sp, K, last, rs, out); break;
            case 12: qmm_vnni_lanes_dot(1, 1, QMM_BC_GIVEN, R, w, sp, K, last, rs, out); break;
            case 8: qmm_vnni_lanes_dot(1, 0, QMM_BC_GIVEN, R, w, sp, K, last, rs, out); break;
            default: qmm_vnni_lanes_dot(0, 1, QMM_BC_GIVEN, R, w, sp, K, last, rs, out); break;
            }
            for (int r = 0; r < R; r++) _mm512_store_si512(stage[G - 1][r][j % 16], out[r]);
        }
        if (j % 16 != 15 && j != len - 1) continue;
        const int cols = (int)(j % 16) + 1;
        for (int gi = 0; gi < G; gi++)
            for (int r = 0; r < R; r++)
                qmm_vnni_tokens_out(c, (const int32_t(*)[16])stage[gi][r], cols, 16 * gi, m < 16 * gi + 16 ? m : 16 * gi + 16,
                                    s0 + r * span + j - cols + 1, a->s);
    }
}

/* columns [n0, n1) for ROWS_DOT_M < M <= ROWS_M tokens (bcast_run): R streams of ⌊rows / R⌋ rows,
 * the rest one at a time */
static inline __attribute__((always_inline)) void bcast_blocks(const int lay, const int full, const int R,
                                                               const rows_job *g) {
    const int64_t n0 = g->n0, n1 = g->n1, len = (n1 - n0) / R;
    if (len > 0) bcast_run(lay, full, R, g, n0, len, len);
    if (n0 + R * len < n1) bcast_run(lay, full, 1, g, n0 + R * len, 0, n1 - n0 - R * len);
}

/* ---------------------------------------------------------------- the rows kernels */
/* qmm_i8_rows_fn (ukernels.h): columns [n0, n1) from the rows w (ldw bytes apart), M = a->M in
 * the kernel's range. */
#define ROWS_ARGS const int8_t *w, int64_t ldw, const qmm_rows_act *a, const qmm_call *out, int64_t n0, int64_t n1
#define ROWS_JOB const rows_job job = {w, ldw, a, out, n0, n1}, *g = &job

/* 1..2 tokens: rows_dot (R·M accumulators) */
void qmm_qd8_qc8w_rows_ukernel_m1to2__avx512vnni_dot(ROWS_ARGS) {
    ROWS_JOB;
    switch (a->M) {
    case 1: rows_blocks(1, g); break;
    default: rows_blocks(2, g); break;
    }
}

/* 3..8 tokens: rows_dot2 (two rows of W per accumulator; the leftover rows one at a time by rows_dot) */
void qmm_qd8_qc8w_rows_ukernel_m3to8__avx512vnni_dot2(ROWS_ARGS) {
    ROWS_JOB;
    switch (a->M) {
    case 3: rows_blocks(3, g); break;
    case 4: rows_blocks(4, g); break;
    case 5: rows_blocks(5, g); break;
    case 6: rows_blocks(6, g); break;
    case 7: rows_blocks(7, g); break;
    default: rows_blocks(8, g); break;
    }
}

/* 9..12 tokens: lanes_dot, 12 lanes (M = 12: no pad lane, the kernel sums the rows) */
void qmm_qd8_qc8w_rows_ukernel_m9to12__avx512vnni_lanes(ROWS_ARGS) {
    ROWS_JOB;
    if (a->M == 12) bcast_blocks(12, 1, LANES12_R, g);
    else bcast_blocks(12, 0, LANES12_R, g);
}

/* 13..16 tokens: bcast_dot, one group of 16 lanes (M = 16: no pad lane) */
void qmm_qd8_qc8w_rows_ukernel_m13to16__avx512vnni_bcast(ROWS_ARGS) {
    ROWS_JOB;
    if (a->M == 16) bcast_blocks(16, 1, BCAST_R, g);
    else bcast_blocks(16, 0, BCAST_R, g);
}

/* 17..ROWS_M tokens: groups of 16 */
void qmm_qd8_qc8w_rows_ukernel_m17to64__avx512vnni_bcast(ROWS_ARGS) {
    ROWS_JOB;
    bcast_blocks(0, 1, BCAST_R, g);
}
#undef ROWS_ARGS
#undef ROWS_JOB

const qmm_i8_rows_ukernel qmm_vnni_rows_kernels[QMM_VNNI_N_ROWS_KERNELS] = {
    {"qmm_qd8_qc8w_rows_ukernel_m1to2__avx512vnni_dot", qmm_qd8_qc8w_rows_ukernel_m1to2__avx512vnni_dot, 1, 2},
    {"qmm_qd8_qc8w_rows_ukernel_m3to8__avx512vnni_dot2", qmm_qd8_qc8w_rows_ukernel_m3to8__avx512vnni_dot2, 3, 8},
    {"qmm_qd8_qc8w_rows_ukernel_m9to12__avx512vnni_lanes", qmm_qd8_qc8w_rows_ukernel_m9to12__avx512vnni_lanes, 9, 12},
    {"qmm_qd8_qc8w_rows_ukernel_m13to16__avx512vnni_bcast", qmm_qd8_qc8w_rows_ukernel_m13to16__avx512vnni_bcast, 13, 16},
    {"qmm_qd8_qc8w_rows_ukernel_m17to64__avx512vnni_bcast", qmm_qd8_qc8w_rows_ukernel_m17to64__avx512vnni_bcast, 17,
     ROWS_M},
};
_Static_assert(ROWS_DOT_M == 8 && ROWS_PAIRS_FROM == 2 && BCAST_G * 16 == ROWS_M, "the rows kernels' ranges above");

/* The broadcast kernels' token copy (M > ROWS_DOT_M): one group of 9..16 tokens, Kp·lanes bytes;
 * above 16, ⌈M / 16⌉ − 1 groups of 16 and the last group (bcast_run). */
int64_t qmm_vnni_rows_ap_bytes(int64_t M, int64_t Kp) {
    if (M <= ROWS_DOT_M) return 0;
    const int64_t G = (M + 15) / 16;
    return (G - 1) * Kp * 16 + Kp * qmm_vnni_group_lanes(M - 16 * (G - 1));
}

/* One group's copy at ap from its r tokens' rows q (Kp bytes apart, zero past K): u8 q + 128, pad
 * tokens 128 (q = 0). 16 lanes: per 64 k the 16 × 16 dword transpose of the rows (pad rows zero),
 * flipped; k16 (16 lanes of the W4A8 family): token t's 16 bytes of each 16 k at byte
 * 64·(t mod 4) + 16·⌊t / 4⌋ of the block's 256, flipped; 12, 8, 4 lanes (lanes_dot's layout): per
 * 16 k, masked qword gathers (tokens past r zero), flipped. */
static void fill_group(const int8_t *q, int64_t Kp, int64_t r, const int k16, uint8_t *ap) {
    const __m512i flip = _mm512_set1_epi8((char)0x80), z = _mm512_setzero_si512();
    const int L = qmm_vnni_group_lanes(r);
    if (L == 16 && k16) {
        const __m128i f = _mm512_castsi512_si128(flip);
        for (int64_t t = 0; t < 16; t++) {
            uint8_t *d = ap + 64 * (t % 4) + 16 * (t / 4);
            for (int64_t s = 0; s < Kp / 16; s++)
                _mm_store_si128((__m128i *)(d + 256 * s),
                                t < r ? _mm_xor_si128(_mm_loadu_si128((const __m128i *)(q + t * Kp + 16 * s)), f) : f);
        }
        return;
    }
    if (L == 16) {
        for (int64_t k = 0; k < Kp; k += 64) {
            __m512i t[16];
            qmm_z_n16k4_step(q, Kp, (int)r, k, 64, t);
            for (int x = 0; x < 16; x++) _mm512_store_si512(ap + (k / 4 + x) * 64, _mm512_xor_si512(t[x], flip));
        }
        return;
    }
    /* qword slot l: token l at +0 / +8 (the 8 group); its 4 group's token l/2 at 8·(l & 1) */
    const int n8 = L >= 8, n4 = L != 8, S = 16 * L;
    const int64_t t4 = n8 ? 8 : 0; /* the 4 group's first token */
    const __m512i i0 = _mm512_setr_epi64(0, Kp, 2 * Kp, 3 * Kp, 4 * Kp, 5 * Kp, 6 * Kp, 7 * Kp);
    const __m512i i2 = _mm512_setr_epi64(t4 * Kp, t4 * Kp + 8, (t4 + 1) * Kp, (t4 + 1) * Kp + 8, (t4 + 2) * Kp,
                                         (t4 + 2) * Kp + 8, (t4 + 3) * Kp, (t4 + 3) * Kp + 8);
    const __mmask8 m0 = (__mmask8)((1u << (r < 8 ? r : 8)) - 1);
    const __mmask8 m2 = (__mmask8)((1u << (2 * (r > t4 ? r - t4 : 0))) - 1);
    for (int64_t s = 0; s < Kp / 16; s++) {
        const int8_t *base = q + 16 * s;
        uint8_t *d = ap + s * S;
        if (n8) {
            _mm512_store_si512(d, _mm512_xor_si512(_mm512_mask_i64gather_epi64(z, m0, i0, base, 1), flip));
            _mm512_store_si512(d + 64, _mm512_xor_si512(_mm512_mask_i64gather_epi64(z, m0, i0, base + 8, 1), flip));
        }
        if (n4) _mm512_store_si512(d + 128 * n8, _mm512_xor_si512(_mm512_mask_i64gather_epi64(z, m2, i2, base, 1), flip));
    }
}

/* the copy at ap (its start) from q (rows lda = Kp bytes apart) for the token groups of rows
 * [r0, r1) (r0 a multiple of 16: the groups before it full, Kp·16 bytes each; rows_ap_bytes), its
 * groups of 16 in the 16-lane layout or (k16) the k16 one */
static void ap_fill(const int8_t *q, int64_t lda, uint8_t *ap, int64_t r0, int64_t r1, const int k16) {
    const int64_t M = r1, Kp = lda;
    ap += r0 * Kp;
    for (int64_t t0 = r0; t0 < M; t0 += 16) {
        const int64_t r = M - t0 < 16 ? M - t0 : 16;
        fill_group(q + t0 * Kp, Kp, r, k16, ap);
        ap += Kp * qmm_vnni_group_lanes(r);
    }
}

void qmm_vnni_rows_ap_fill(const int8_t *q, int64_t lda, uint8_t *ap, int64_t r0, int64_t r1) {
    ap_fill(q, lda, ap, r0, r1, 0);
}

void qmm_vnni_w4_ap_fill(const int8_t *q, int64_t lda, uint8_t *ap, int64_t r0, int64_t r1) {
    ap_fill(q, lda, ap, r0, r1, 1);
}

