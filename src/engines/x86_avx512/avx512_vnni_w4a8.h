/*
 * avx512_vnni_w4a8.h — the avx512_vnni engine's rows regime on a W4A8 weight at M <= 64, fused
 * (its kernels of the W4A8 family, qmm_w4_rows_fn in int8_gemm.h), as templates: avx512_vnni_w4a8.c makes the
 * kernels of 4- and 6-bit weights, avx512_vnni_w4a8_vbmi.c those of 6-bit weights with AVX512-VBMI
 * lookups (w4a8_avx512.h) for the CPUs that have it (qmm_w4a8_vbmi): each row's codes are looked up in the
 * call's decode table (w4a8_avx512.h) and the 64 int8 values of each step multiplied at once,
 * never written past L1 up to 16 tokens (the unfused path writes whole rows to a buffer that the
 * engine's rows kernel reads back in a second pass). Three forms, the rows kernels'
 * (avx512_vnni_rows.c):
 *   M <= 8   row dot products (qmm_qd8_w4w6_rows_ukernel_m1to8__avx512vnni_fused): the values
 *            as u8 (w ^ 0x80 = w + 128: looked up in the table's u8 form, lut_u8) go
 *            straight into VPDPBUSD against the M rows of q
 *            (s8), Σ (w + 128)·q = Σ w·q + 128·qsum[i], corrected per token. R rows at a time (M
 *            <= 4: 4, else 2: R·M <= 16 accumulators), one accumulator per row and token, reduced
 *            per row.
 *   9..16    W broadcast, tokens in lanes (qmm_qd8_w4w6_rows_ukernel_m9to16__avx512vnni_bcast;
 *            avx512_vnni_bcast.h): per 64 k each of R rows' values is staged in 64 bytes of L1
 *            and read back at once as the broadcast operands against the family's token copy
 *            a->ap (qmm_vnni_w4_ap_fill: 12 lanes at M <= 12; above, the k16 layout, 16 bytes of
 *            a row broadcast against 4 tokens × 16 k, 4 broadcast loads per 64 weights where the
 *            int8 rows' 16-lane form has 16: with the lookup's loads, 24–35 % faster, bench/NOTES.md):
 *            12 or 16 VPDPBUSD per 64 weights, the correction from the pad lane, or from the row
 *            sums (VPDPBUSD(1, values)) at M = 12 and 16; every 16 rows of a stream one transpose
 *            into the epilogue.
 *   17..64   groups of 16 tokens (qmm_qd8_w4w6_rows_ukernel_m17to64__avx512vnni_groups): the first
 *            group as 9..16 (with the row sums), each step's values written to the R = 4 rows
 *            the thread keeps in its buffer (buf, R·Kp bytes: L1/L2) instead of the ring;
 *            the later groups (k16, the last 4..16 lanes) run the broadcast kernels
 *            (avx512_vnni_bcast.h: qmm_vnni_k16_dot, qmm_vnni_lanes_dot) on those rows, as the
 *            int8 rows regime's later groups read its rows again. The lookup overlaps the first group's multiply-adds and the code
 *            stream, which the unfused path's separate decode pass did not.
 * The R rows of a step come from R equal runs of the thread's blocks (R code streams in flight,
 * each prefetched 4 KiB ahead into L2, as rows_dot's streams); every 16 rows of a run its
 * outputs go through qmm_z_epilogue16 (measured against the unfused path: bench/NOTES.md "## W4A8
 * speed"). The int32 sums are exact (mod 2^32), so the bits are the engine's and the reference's.
 * Groups of a multiple of 16, e4m3 s_rel (the table); the driver checks that.
 */
#ifndef QMM_AVX512_VNNI_W4A8_H
#define QMM_AVX512_VNNI_W4A8_H

#include "avx512_vnni_bcast.h"
#include "avx512/w4a8_avx512.h"

#include <immintrin.h>

/* One call of a kernel of the W4A8 family (qmm_w4_rows_fn, int8_gemm.h), its operands as the
 * templates below pass them on: columns up to N (the call's n1). */
typedef struct qmm_vnni_w4_job {
    const qmm_w4_codes *w;
    const int8_t *lut, *lut_u8;
    const qmm_rows_act *a;
    const qmm_call *c;
    int64_t N;
    int8_t *buf;
    int64_t buf_bytes;
} qmm_vnni_w4_job;

/* The body of a kernel of the family: its operands as a job, columns [n0, n1) as 16-column blocks
 * [n0/16, ⌈n1/16⌉) (the last cut at n1); kern one of the three templates' bodies below, six the
 * weight's width (w->bits == 6). */
#define QMM_VNNI_W4_KERNEL(kern, six, w, lut, lut_u8, a, out, n0, n1, buf, buf_bytes)                              \
    do {                                                                                                        \
        const qmm_vnni_w4_job job_ = {(w), (lut), (lut_u8), (a), (out), (n1), (buf), (buf_bytes)};             \
        if ((n0) < (n1)) kern((six), &job_, (n0) / 16, ((n1) + 15) / 16);                                       \
    } while (0)

/* out[r·m + i] = Σ_k W[n_r][k]·q[i][k] (mod 2^32) for R rows n_r at once (R streams of codes in
 * flight), i < m; lut the table's u8 form (its values W + 128) */
static inline __attribute__((always_inline)) void w4_rows_dot(const int six, const int per, const int m, const int R,
                                                              const qmm_w4_codes *w, const int8_t *lut,
                                                              const int64_t *n, const int8_t *q, int64_t lda,
                                                              const int32_t *qsum, int32_t *out) {
    const int64_t K = w->K, K64 = K / 64 * 64;
    __m512i a[4][8];
    qmm_w4_walk it[4];
    for (int r = 0; r < R; r++) {
        qmm_w4_walk_init(&it[r], w, lut, n[r], 0);
        for (int i = 0; i < m; i++) a[r][i] = _mm512_setzero_si512();
    }
    int64_t k = 0;
    for (; k < K64; k += 64) {
        __m512i x[4];
        for (int r = 0; r < R; r++) {
            if (!(k & 64)) qmm_w4_prefetch(&it[r], six);
            x[r] = qmm_w4_next64(&it[r], six, per); /* u8 already: the table's u8 form */
        }
        for (int i = 0; i < m; i++) {
            const __m512i qv = _mm512_loadu_si512(q + i * lda + k);
            for (int r = 0; r < R; r++) a[r][i] = qmm_vnni_dpbusd(a[r][i], x[r], qv);
        }
    }
    for (; k < K; k += 16) { /* 16 at a time: the other lanes 0 (u8) against 16 bytes of q */
        __m512i x[4];
        for (int r = 0; r < R; r++)
            x[r] = _mm512_zextsi128_si512(qmm_w4_next16(&it[r], six));
        for (int i = 0; i < m; i++) {
            const __m512i qv = _mm512_zextsi128_si512(_mm_loadu_si128((const __m128i *)(q + i * lda + k)));
            for (int r = 0; r < R; r++) a[r][i] = qmm_vnni_dpbusd(a[r][i], x[r], qv);
        }
    }
    for (int r = 0; r < R; r++)
        for (int i = 0; i < m; i++)
            out[r * m + i] = (int32_t)((uint32_t)_mm512_reduce_add_epi32(a[r][i]) - ((uint32_t)qsum[i] << 7));
}

/* R streams of L whole blocks each from block s0 (stream r: blocks s0 + r·L ..), one row of each
 * at a time; after every 16 rows each stream's 16 outputs per token through the epilogue */
static inline __attribute__((always_inline)) void w4_streams(const int six, const int per, const int m, const int R,
                                                             const qmm_vnni_w4_job *g, int64_t s0, int64_t L) {
    const qmm_call *c = g->c;
    const int8_t *q = g->a->q;
    const int64_t N = g->N;
    _Alignas(64) int32_t out[4][8][16]; /* [stream][token][row in the block] */
    for (int64_t b = 0; b < L; b++) {
        int cols = 16;
        for (int j = 0; j < 16; j++) {
            int64_t n[4];
            int32_t t[32];
            for (int r = 0; r < R; r++) n[r] = (s0 + r * L + b) * 16 + j;
            if (n[R - 1] >= N) { cols = j; break; } /* only a stream of one block: the last may end early */
            w4_rows_dot(six, per, m, R, g->w, g->lut_u8, n, q, g->a->lda, g->a->qsum, t);
            for (int r = 0; r < R; r++)
                for (int i = 0; i < m; i++) out[r][i][j] = t[r * m + i];
        }
        for (int r = 0; r < R; r++)
            for (int i = 0; i < m; i++)
                qmm_z_epilogue16(c, _mm512_load_si512(out[r][i]), i, (s0 + r * L + b) * 16, g->a->s[i], qmm_z_tail_mask(cols));
    }
}

/* blocks [b0, b1): R streams of whole blocks (codes of R rows in flight), the rest (and a last
 * block cut by N) one stream at a time */
static inline __attribute__((always_inline)) void w4_rows(const int six, const int per, const int m,
                                                          const qmm_vnni_w4_job *g, int64_t b0, int64_t b1) {
    const int R = m <= 4 ? 4 : 2; /* R·m accumulators: at most 16 */
    const int64_t full = b1 * 16 <= g->N ? b1 - b0 : b1 - b0 - 1, L = full / R;
    if (L > 0 && R == 4) w4_streams(six, per, m, 4, g, b0, L);
    if (L > 0 && R == 2) w4_streams(six, per, m, 2, g, b0, L);
    for (int64_t b = b0 + R * L; b < b1; b++) w4_streams(six, per, m, 1, g, b, 1);
}

/* The 1..8 kernel's body for 6-bit (six) or 4-bit weights */
static inline __attribute__((always_inline)) void qmm_vnni_w4_dot_kernel(const int six, const qmm_vnni_w4_job *g, int64_t b0,
                                                                         int64_t b1) {
    const int per = qmm_w4_per(g->w->group) == 4 ? 4 : 0;
#define W4_CASE(P, M) case (P) * 10 + (M): w4_rows(six, P, M, g, b0, b1); break
    switch (per * 10 + (int)g->a->M) {
    W4_CASE(4, 1); W4_CASE(4, 2); W4_CASE(4, 3); W4_CASE(4, 4);
    W4_CASE(4, 5); W4_CASE(4, 6); W4_CASE(4, 7); W4_CASE(4, 8);
    W4_CASE(0, 1); W4_CASE(0, 2); W4_CASE(0, 3); W4_CASE(0, 4);
    W4_CASE(0, 5); W4_CASE(0, 6); W4_CASE(0, 7); W4_CASE(0, 8);
    default: qmm_call_bug(g->c, "w4a8 fused rows: M past 8"); break;
    }
#undef W4_CASE
}

/* ---------------------------------------------------------------- 9..16 tokens: in lanes */
/* p, held in a general register: the rows' addresses stay scalar arithmetic (GCC 12 vectorizes
 * eight of them and extracts them with VEXTRACTI64X2, an AVX512DQ instruction this file is not
 * built for) */
static inline int8_t *w4_gpr(int8_t *p) {
    __asm__("" : "+r"(p));
    return p;
}

/* out[r] lane t = Σ_k W[n_r][k]·q[t][k] (mod 2^32) for R rows n_r = n0 + r·step at once, the token copy ap in
 * layout lay (12: lanes_step's 12 lanes, 16: k16_step's k16); full: no pad lane (M = lay), the row
 * sums instead */
static inline __attribute__((always_inline)) void w4_bcast_dot(const int six, const int per, const int lay,
                                                               const int full, const int kept, const int R,
                                                               const qmm_w4_codes *w, const int8_t *lut, int64_t n0,
                                                               int64_t step, const uint8_t *ap, int8_t *keep,
                                                               int64_t ldk, __m512i rs[], __m512i out[]) {
    enum { S12 = 192, W4_RING = 4 }; /* lanes_step's block of 16 k at 12 lanes; the stage's steps */
    const int64_t K = w->K, K64 = K / 64 * 64;
    const __m512i one = _mm512_set1_epi8(1);
    /* a ring of 4 steps (kept: the rows themselves, keep + r·ldk + k): each step's values are
     * written 3 steps before they are read, so the broadcast loads find them in L1, not in flight
     * in the store buffer */
    _Alignas(64) int8_t st[W4_RING][8][64];
    const int8_t *wp[8];
    qmm_w4_walk it[8];
    __m512i acc[8], a1[8], b[8], acc4[QMM_K16_R][4]; /* acc4: the 16-lane form's (lay 16, R <= QMM_K16_R) */
    for (int r = 0; r < R; r++) {
        qmm_w4_walk_init(&it[r], w, lut, n0 + r * step, 0);
        acc[r] = a1[r] = b[r] = rs[r] = _mm512_setzero_si512();
        if (lay == 16)
            for (int gq = 0; gq < 4; gq++) acc4[r][gq] = _mm512_setzero_si512();
    }
#define W4_SLOT(KK, r) (kept ? w4_gpr(keep + (r) * ldk + (KK)) : st[((KK) / 64) % W4_RING][r])
#define W4_STAGE(KK)                                                        \
    _Pragma("GCC unroll 8") for (int r = 0; r < R; r++) {                   \
        if (!((KK) & 64)) qmm_w4_prefetch(&it[r], six);                      \
        const __m512i v = qmm_w4_next64(&it[r], six, per);                 \
        _mm512_store_si512(W4_SLOT(KK, r), v);                              \
        if (full) rs[r] = qmm_vnni_dpbusd(rs[r], one, v);                  \
    }
    int64_t k = 0;
    for (int64_t kk = 0; kk < K64 && kk < (W4_RING - 1) * 64; kk += 64) W4_STAGE(kk);
    for (; k < K64; k += 64) {
        const int64_t kn = k + (W4_RING - 1) * 64;
        if (kn < K64) W4_STAGE(kn);
        for (int r = 0; r < R; r++) wp[r] = W4_SLOT(k, r);
        if (lay == 16) {
            qmm_vnni_k16_step(R, 4, wp, ap + k * 16, acc4);
        } else {
            for (int x = 0; x < 4; x++) {
                const int8_t *wx[8];
                for (int r = 0; r < R; r++) wx[r] = wp[r] + 16 * x;
                qmm_vnni_lanes_step(1, 1, R, wx, ap + (k / 16 + x) * S12, acc, a1, b);
            }
        }
    }
#undef W4_STAGE
#undef W4_SLOT
    if (!kept)
        for (int r = 0; r < R; r++) wp[r] = st[0][r];
    for (; k < K; k += 16) { /* 16 at a time (K is a multiple of 16) */
        for (int r = 0; r < R; r++) {
            const __m128i v = qmm_w4_next16(&it[r], six);
            if (kept) wp[r] = w4_gpr(keep + r * ldk + k);
            _mm_store_si128((__m128i *)wp[r], v);
            if (full) rs[r] = qmm_vnni_dpbusd(rs[r], one, _mm512_zextsi128_si512(v));
        }
        if (lay == 16) qmm_vnni_k16_step(R, 1, wp, ap + k * 16, acc4);
        else qmm_vnni_lanes_step(1, 1, R, wp, ap + (k / 16) * S12, acc, a1, b);
    }
    for (int r = 0; r < R; r++)
        out[r] = qmm_vnni_bcast_correct(full ? QMM_BC_SUMS : QMM_BC_PAD,
                                        lay == 16 ? qmm_vnni_k16_sum(acc4[r]) : qmm_vnni_lanes_out(1, 1, acc[r], a1[r], b[r]), rs[r],
                                        lay - 1);
}

/* R streams of L whole blocks each from block s0 (stream r: blocks s0 + r·L ..), one row of each
 * at a time; after every 16 rows each stream's rows transposed into the epilogue. grouped (17..64
 * tokens, lay 16, full): G = ⌈M / 16⌉ token groups in the engine's token copy a->ap (the int8 rows
 * regime's layout); each row step looks up the R rows' values once and multiplies them against
 * the first 16 tokens (w4_bcast_dot, the values kept in the thread's buffer buf, R rows of
 * Kp bytes that stay in L1/L2, with their row sums); the later groups run the int8 broadcast
 * kernels on those rows, as the int8 rows regime's later groups read its rows again. */
static inline __attribute__((always_inline)) void w4_bcast_streams(const int six, const int per, const int lay,
                                                                   const int full, const int grouped, const int R,
                                                                   const qmm_vnni_w4_job *g, int64_t s0, int64_t L) {
    const qmm_call *c = g->c;
    const int64_t N = g->N, K = g->a->K, Kp = g->a->lda, m = g->a->M;
    const int G = grouped ? (int)((m + 15) / 16) : 1, lanes = qmm_vnni_group_lanes(m - 16 * (G - 1));
    const uint8_t *last = g->a->ap + (size_t)(G - 1) * (size_t)Kp * 16;
    int8_t *keep = grouped ? g->buf : NULL;
    _Alignas(64) int32_t stage[4][8][16][16]; /* [group][stream][row in the block][token] */
    for (int64_t b = 0; b < L; b++) {
        int cols = 16;
        for (int j = 0; j < 16; j++) {
            const int64_t n0 = (s0 + b) * 16 + j; /* stream r's row: n0 + r·16·L */
            __m512i out[8], rs[8];
            if (n0 + (R - 1) * 16 * L >= N) { cols = j; break; } /* only a stream of one block: the last may end early */
            w4_bcast_dot(six, per, lay, full, grouped, R, g->w, g->lut, n0, 16 * L, g->a->ap, keep, Kp, rs, out);
            for (int r = 0; r < R; r++) _mm512_store_si512(stage[0][r][j], out[r]);
            if (!grouped) continue;
            for (int gi = 1; gi < G - 1; gi++) {
                qmm_vnni_k16_dot(QMM_BC_GIVEN, R, keep, Kp, K, g->a->ap + (size_t)gi * (size_t)Kp * 16, rs, out);
                for (int r = 0; r < R; r++) _mm512_store_si512(stage[gi][r][j], out[r]);
            }
            switch (lanes) {
            case 16: qmm_vnni_k16_dot(QMM_BC_GIVEN, R, keep, Kp, K, last, rs, out); break;
            case 12: qmm_vnni_lanes_dot(1, 1, QMM_BC_GIVEN, R, keep, Kp, K, last, rs, out); break;
            case 8: qmm_vnni_lanes_dot(1, 0, QMM_BC_GIVEN, R, keep, Kp, K, last, rs, out); break;
            default: qmm_vnni_lanes_dot(0, 1, QMM_BC_GIVEN, R, keep, Kp, K, last, rs, out); break;
            }
            for (int r = 0; r < R; r++) _mm512_store_si512(stage[G - 1][r][j], out[r]);
        }
        for (int gi = 0; gi < G; gi++)
            for (int r = 0; r < R; r++)
                qmm_vnni_tokens_out(c, (const int32_t(*)[16])stage[gi][r], cols, 16 * gi,
                                    m < 16 * gi + 16 ? m : 16 * gi + 16, (s0 + r * L + b) * 16, g->a->s);
    }
}

/* blocks [b0, b1): R streams of whole blocks (16 lanes: QMM_K16_R, 12 lanes: 6), the rest (and a
 * last block cut by N) one stream at a time */
static inline __attribute__((always_inline)) void w4_bcast_rows(const int six, const int per, const int lay,
                                                                const int full, const qmm_vnni_w4_job *g, int64_t b0,
                                                                int64_t b1) {
    const int R = lay == 16 ? QMM_K16_R : 6;
    const int64_t nfull = b1 * 16 <= g->N ? b1 - b0 : b1 - b0 - 1, L = nfull / R;
    if (L > 0 && R == QMM_K16_R) w4_bcast_streams(six, per, lay, full, 0, QMM_K16_R, g, b0, L);
    if (L > 0 && R == 6) w4_bcast_streams(six, per, lay, full, 0, 6, g, b0, L);
    for (int64_t b = b0 + R * L; b < b1; b++) w4_bcast_streams(six, per, lay, full, 0, 1, g, b, 1);
}

/* The 9..16 kernel's body for 6-bit (six) or 4-bit weights */
static inline __attribute__((always_inline)) void qmm_vnni_w4_bcast_kernel(const int six, const qmm_vnni_w4_job *g,
                                                                           int64_t b0, int64_t b1) {
    const int64_t M = g->a->M;
    const int per = qmm_w4_per(g->w->group) == 4 ? 4 : 0;
    const int lay = M > 12 ? 16 : 12, full = M == lay;
#define W4_BC(P)                                                               \
    do {                                                                       \
        if (lay == 16 && full) w4_bcast_rows(six, P, 16, 1, g, b0, b1);        \
        else if (lay == 16) w4_bcast_rows(six, P, 16, 0, g, b0, b1);           \
        else if (full) w4_bcast_rows(six, P, 12, 1, g, b0, b1);                \
        else w4_bcast_rows(six, P, 12, 0, g, b0, b1);                          \
    } while (0)
    if (per == 4) W4_BC(4);
    else W4_BC(0);
#undef W4_BC
}

/* ---------------------------------------------------------------- 17..64 tokens: groups of 16 */
/* The 17..64 kernel's body: blocks [b0, b1), 8 streams of whole blocks, the rest (and a last
 * block cut by N) one stream at a time */
static inline __attribute__((always_inline)) void qmm_vnni_w4_groups_kernel(const int six, const qmm_vnni_w4_job *g,
                                                                            int64_t b0, int64_t b1) {
    enum { R = QMM_K16_R };
    if (!g->buf || g->buf_bytes < R * g->a->lda) { /* the R kept rows need the buffer */
        qmm_call_bug(g->c, "w4a8 groups rows: no buffer for the kept rows of Kp");
        return;
    }
    const int per = qmm_w4_per(g->w->group) == 4 ? 4 : 0;
    const int64_t nfull = b1 * 16 <= g->N ? b1 - b0 : b1 - b0 - 1, L = nfull / R;
#define W4_GR(P)                                                                              \
    do {                                                                                      \
        if (L > 0) w4_bcast_streams(six, P, 16, 1, 1, R, g, b0, L);                           \
        for (int64_t b = b0 + R * L; b < b1; b++) w4_bcast_streams(six, P, 16, 1, 1, 1, g, b, 1); \
    } while (0)
    if (per == 4) W4_GR(4);
    else W4_GR(0);
#undef W4_GR
}

#endif /* QMM_AVX512_VNNI_W4A8_H */
