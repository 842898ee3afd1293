/*
 * amx_bf16.c — the AMX-BF16 float engine (QMM_ENGINE_AMX_BF16), TDPBF16PS with fp32
 * accumulation. Two uses, one kernel:
 *
 *   (a) W8A16 fallback for int8 weights (no int8 engine admits, or a full-precision layer):
 *       a = bf16(T(rotate(T(act(x)))))            as qmm_ref_act_rotate_row, then to bf16
 *       W = the int8 n16k4 packing widened to bf16 INSIDE the kernel (int8 values are exact
 *           in bf16), one L2-sized chunk of 32-column × Kp panels per thread at a time, reused
 *           by every M panel — no dequantized copy of the weight
 *       y = out((acc · w_scale[n]) + bias[n])      acc in fp32
 *   (b) bf16 float weights: B tiles straight from w->fp.bf16 (bf16 [Np/16][Kp/2][16][2]: the
 *       AMX-BF16 B tile layout); a = bf16(T(act(x))); y = out(acc + bias[n]).
 *   f32 weights are refused (the bf16 engine would round them).
 *   A borrowed int8 weight (w->borrow: the caller's [N][ld] rows, read at every call): each block
 *   is packed from those rows into the thread's n16k4 buffer (qmm_z_pack_n16k4) just before it is
 *   widened; no prefetch of the next source.
 *
 *   A [M][Ka] bf16, Ka = the weight's Kp (64 for int8, 32 for bf16 weights: multiples of 32
 *   = one A tile row of 64 bytes); k-chunk kc of 32 values: A tile at A + kc*32, B tile of
 *   block nb at B + nb*Kp*16 + kc*512 (1 KiB, 16 k-pair rows × 16 columns × 2).
 *
 * The accuracy contract is SPEC §7 for float engines: fp32 summation of the bf16-rounded
 * operands (tested against an fp64 sum of the same operands).
 *
 * Verification: not yet executed on AMX hardware; the evidence is the emulated
 * build (tests/test_amx_emulated.c), which runs this source with the tile instructions
 * replaced by the software model of amx_emu.c.
 */
#include "amx_kernel.h"
#include "pack_avx512.h"
#include "simd_avx512.h"
#include "float_act.h"
#include "numerics.h"

#include <stdio.h>
#include <string.h>

static const char *amx_bf16_admit(const qmm_call *c, char *why, size_t n) {
    const char *r = qmm_admit_common_float(c, why, n);
    if (r) return r;
    const qmm_weight *w = c->w;
    if (w->is_int8) {
        if (w->convrot_gs && c->K % w->convrot_gs) {
            snprintf(why, n, "K=%lld is not a multiple of the convrot group %d", (long long)c->K, w->convrot_gs);
            return why;
        }
        return NULL; /* W8A16: int8 weights widened in-kernel */
    }
    if (w->fdtype != QMM_BF16 || !w->fp.bf16) return "f32 weight: the bf16 engine would round it; use avx512_f32";
    return NULL;
}

#ifdef QMM_AMX_KERNELS

typedef struct {
    const qmm_call *c;
    qmm_amx_blocking bl;
    qmm_amx_regime regime;
    const uint16_t *a;  /* decode/panel: row-major [M][Ka] bf16; blocked: the K-blocked tile layout */
    int64_t Ka;         /* row length of a = the weight's Kp (k values) */
    int64_t nblocks, npanels_n, npanels_m;
    int tm, tn;
    float *stage;       /* [threads][32][32] f32: the C tiles of one block for the epilogue */
    float *cbuf;        /* blocked: [threads][mc/32][nc/32][32][32] f32 C partials between K blocks */
    size_t cbuf_floats; /* per thread */
    uint16_t *wide;     /* int8 weights: [threads][wide_elems] the widened B panel / B block */
    size_t wide_elems;  /* per thread */
    int8_t *i8buf;      /* borrowed int8 weights: [threads][i8_bytes] one n16k4 block, packed */
    size_t i8_bytes;    /* per thread */
} bf16_job;

/* ---------------------------------------------------------------- int8 → bf16 widening */
/* 16 int8 → 16 bf16 (exact: |v| <= 128 has at most 8 significant bits) */
static inline __m256i widen16(__m128i b) {
    __m512 f = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b));
    return _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(f), 16));
}

/* nk values of K (a multiple of 4) of one n16k4 block, from src (the block's quad row of the
 * first k) → bf16 [nk/2][16][2] at dst: one AMX-BF16 B tile per 32 k. */
static void widen_block(const int8_t *src, int64_t nk, uint16_t *dst);

/* Block nb over k [k0, k0 + nk) of an int8 weight widened into dst: from the packing, or (borrowed)
 * from the caller's rows packed first into buf (nk·16 bytes). */
static void widen_weight_block(const qmm_call *c, int64_t nb, int64_t Ka, int64_t k0, int64_t nk, int8_t *buf,
                               uint16_t *dst) {
    const qmm_weight *w = c->w;
    if (w->i8.data) {
        widen_block(w->i8.data + nb * Ka * 16 + k0 * 16, nk, dst);
        return;
    }
    const int64_t n0 = nb * 16, k1 = k0 + nk < c->K ? k0 + nk : c->K;
    qmm_z_pack_n16k4(w->borrow.data + n0 * w->borrow.ld, w->borrow.ld, c->N - n0 < 16 ? (int)(c->N - n0) : 16, k0, k1,
                     buf, nk / 4);
    widen_block(buf, nk, dst);
}

static void widen_block(const int8_t *src, int64_t nk, uint16_t *dst) {
    /* element t = n*2 + e of the even k-pair row comes from byte n*4 + e, of the odd row from
     * n*4 + 2 + e; lo holds bytes 0..31 (n 0..7), hi bytes 32..63 (n 8..15) */
    int16_t ie[32], io[32];
    for (int t = 0; t < 32; t++) {
        int n = t / 2, e = t % 2;
        int from = n < 8 ? n * 4 + e : 32 + (n - 8) * 4 + e;
        ie[t] = (int16_t)from;
        io[t] = (int16_t)(from + 2);
    }
    const __m512i idx_even = _mm512_loadu_si512(ie), idx_odd = _mm512_loadu_si512(io);
    for (int64_t kq = 0; kq < nk / 4; kq++) {
        const int8_t *s = src + kq * 64;
        _mm_prefetch((const char *)s + 1024, _MM_HINT_T0); /* the stream 16 lines ahead (decode: from DRAM) */
        __m512i lo = _mm512_inserti64x4(_mm512_castsi256_si512(widen16(_mm_loadu_si128((const __m128i *)s))),
                                        widen16(_mm_loadu_si128((const __m128i *)(s + 16))), 1);
        __m512i hi = _mm512_inserti64x4(_mm512_castsi256_si512(widen16(_mm_loadu_si128((const __m128i *)(s + 32)))),
                                        widen16(_mm_loadu_si128((const __m128i *)(s + 48))), 1);
        _mm512_storeu_si512(dst + (2 * kq) * 32, _mm512_permutex2var_epi16(lo, idx_even, hi));
        _mm512_storeu_si512(dst + (2 * kq + 1) * 32, _mm512_permutex2var_epi16(lo, idx_odd, hi));
    }
}

/* ---------------------------------------------------------------- the tile kernel */
/* One 32 × 32 block over nsteps k-steps of 32: A rows at a (row stride lda values), B column
 * blocks at b0 and b0 + bstride (k-step s at +512s values); cin: f32 C partials to continue
 * ([32][32], the stage layout) or NULL to start from zero; pf_b: prefetch B ahead (decode). */
static inline __attribute__((always_inline)) void kblock(const uint16_t *a, int64_t lda, const uint16_t *b0,
                                                         int64_t bstride, int64_t nsteps, const float *cin, int r1,
                                                         int two, int pf_b, const char *pfs,
                                                         int64_t pfs_lines) {
    const uint16_t *b1 = b0 + bstride;
    if (cin) {
        QMM_TILE_LOAD(QMM_TC00, cin, 128);
        if (two) QMM_TILE_LOAD(QMM_TC01, cin + 16, 128);
        if (r1) QMM_TILE_LOAD(QMM_TC10, cin + 16 * 32, 128);
        if (r1 && two) QMM_TILE_LOAD(QMM_TC11, cin + 16 * 32 + 16, 128);
    } else {
        QMM_TILE_ZERO(QMM_TC00);
        if (two) QMM_TILE_ZERO(QMM_TC01);
        if (r1) QMM_TILE_ZERO(QMM_TC10);
        if (r1 && two) QMM_TILE_ZERO(QMM_TC11);
    }
    for (int64_t ks = 0; ks < nsteps; ks++) {
        for (int64_t l = 0; l < pfs_lines; l++) _mm_prefetch(pfs + (ks * pfs_lines + l) * 64, _MM_HINT_T1);
        if (pf_b) {
            const char *p0 = (const char *)(b0 + (ks + QMM_AMX_DECODE_PF_STEPS) * 512);
            const char *p1 = (const char *)(b1 + (ks + QMM_AMX_DECODE_PF_STEPS) * 512);
            for (int l = 0; l < 1024; l += 64) {
                _mm_prefetch(p0 + l, _MM_HINT_T1);
                if (two) _mm_prefetch(p1 + l, _MM_HINT_T1);
            }
        }
        QMM_TILE_LOAD(QMM_TA0, a + ks * 32, lda * 2);
        QMM_TILE_LOAD(QMM_TB0, b0 + ks * 512, 64);
        QMM_TDPBF16PS(QMM_TC00, QMM_TA0, QMM_TB0);
        if (two) {
            QMM_TILE_LOAD(QMM_TB1, b1 + ks * 512, 64);
            QMM_TDPBF16PS(QMM_TC01, QMM_TA0, QMM_TB1);
        }
        if (r1) {
            QMM_TILE_LOAD(QMM_TA1, a + 16 * lda + ks * 32, lda * 2);
            QMM_TDPBF16PS(QMM_TC10, QMM_TA1, QMM_TB0);
            if (two) QMM_TDPBF16PS(QMM_TC11, QMM_TA1, QMM_TB1);
        }
    }
}

static void kblock_any(const uint16_t *a, int64_t lda, const uint16_t *b0, int64_t bstride, int64_t nsteps,
                       const float *cin, int r1, int two, int pf_b, const char *pfs,
                       int64_t pfs_lines) {
    if (pf_b) {
        if (r1 && two) kblock(a, lda, b0, bstride, nsteps, cin, 1, 1, 1, pfs, pfs_lines);
        else if (r1) kblock(a, lda, b0, bstride, nsteps, cin, 1, 0, 1, pfs, pfs_lines);
        else if (two) kblock(a, lda, b0, bstride, nsteps, cin, 0, 1, 1, pfs, pfs_lines);
        else kblock(a, lda, b0, bstride, nsteps, cin, 0, 0, 1, pfs, pfs_lines);
    } else {
        if (r1 && two) kblock(a, lda, b0, bstride, nsteps, cin, 1, 1, 0, pfs, pfs_lines);
        else if (r1) kblock(a, lda, b0, bstride, nsteps, cin, 1, 0, 0, pfs, pfs_lines);
        else if (two) kblock(a, lda, b0, bstride, nsteps, cin, 0, 1, 0, pfs, pfs_lines);
        else kblock(a, lda, b0, bstride, nsteps, cin, 0, 0, 0, pfs, pfs_lines);
    }
}

static inline void store_c(float *dst, int r1, int two) {
    QMM_TILE_STORE(QMM_TC00, dst, 128);
    if (two) QMM_TILE_STORE(QMM_TC01, dst + 16, 128);
    if (r1) QMM_TILE_STORE(QMM_TC10, dst + 16 * 32, 128);
    if (r1 && two) QMM_TILE_STORE(QMM_TC11, dst + 16 * 32 + 16, 128);
}

/* The per-element output epilogue of one finished 32 × 32 block (the only writer of y):
 * stage [rows][32] f32 → y rows [m0, m0+rows), columns [n0, n0+cols). */
static void epilogue(const qmm_call *c, const float *stage, int64_t m0, int rows, int64_t n0, int64_t cols) {
    const qmm_weight *w = c->w;
    const size_t es = qmm_dtype_size(c->y_dtype);
    for (int r = 0; r < rows; r++) {
        char *yrow = (char *)c->y + (size_t)((m0 + r) * c->ldy) * es;
        for (int64_t j = 0; j < cols; j += 16) {
            const __mmask16 m = qmm_z_tail_mask(cols - j);
            const int64_t n = n0 + j;
            __m512 v = _mm512_loadu_ps(stage + r * 32 + j);
            if (w->is_int8) v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, w->scale + n));
            v = _mm512_add_ps(v, w->bias ? _mm512_maskz_loadu_ps(m, w->bias + n) : _mm512_setzero_ps());
            qmm_z_store16(yrow + (size_t)n * es, c->y_dtype, m, v);
        }
    }
}

/* ---------------------------------------------------------------- decode and panel regimes */
/* N outer: per 32-column panel, its B (int8 weights: widened once into the thread's buffer,
 * then reused by every row panel; bf16 weights: straight from the packing), then every 32-row
 * panel over the full K with C in tiles throughout. */
static void panel_task(int64_t task, int64_t n_tasks, int thread, void *arg) {
    (void)n_tasks;
    bf16_job *j = arg;
    const qmm_call *c = j->c;
    const qmm_weight *w = c->w;
    const int ti = (int)(task / j->tn), tj = (int)(task % j->tn);
    const int64_t p_lo = j->npanels_n * tj / j->tn, p_hi = j->npanels_n * (tj + 1) / j->tn;
    const int64_t m_lo = j->npanels_m * ti / j->tm, m_hi = j->npanels_m * (ti + 1) / j->tm;
    float *stage = j->stage + (size_t)thread * 32 * 32;
    uint16_t *wide = j->wide ? j->wide + (size_t)thread * j->wide_elems : NULL;
    const int64_t Ka = j->Ka, bstride = Ka * 16;
    const int pf_b = j->regime == QMM_AMX_DECODE && !w->is_int8;
    int8_t *i8buf = j->i8buf ? j->i8buf + (size_t)thread * j->i8_bytes : NULL;
    for (int64_t p = p_lo; p < p_hi; p++) {
        const int64_t nb = 2 * p, n0 = nb * 16, cols = c->N - n0 < 32 ? c->N - n0 : 32;
        const int two = nb + 1 < j->nblocks;
        const uint16_t *b0;
        if (w->is_int8) {
            for (int64_t i = 0; i <= two; i++) widen_weight_block(c, nb + i, Ka, 0, Ka, i8buf, wide + i * bstride);
            b0 = wide;
        } else {
            b0 = w->fp.bf16 + nb * bstride;
        }
        /* the next column panel's B source (int8 or bf16, contiguous after this one), prefetched
         * (T1) in equal shares by this panel's row panels, k-step by k-step */
        const int64_t nk = Ka / 32, nm = m_hi - m_lo, src_lines = Ka * 32 * (w->is_int8 ? 1 : 2) / 64;
        const int64_t pfs_lines = !pf_b && !i8buf && p + 1 < p_hi ? (src_lines + nm * nk - 1) / (nm * nk) : 0;
        const char *pf_src = !pfs_lines ? NULL
                             : w->is_int8 ? (const char *)(w->i8.data + (nb + 2) * Ka * 16)
                                          : (const char *)(w->fp.bf16 + (nb + 2) * bstride);
        for (int64_t mp = m_lo; mp < m_hi; mp++) {
            const int64_t m0 = mp * 32;
            const int rows = (int)(c->M - m0 < 32 ? c->M - m0 : 32);
            const int r0 = rows < 16 ? rows : 16, r1 = rows - r0;
            QMM_AMX_SYM(qmm_amx_tiles_config)(r0, r1);
            const char *pfs = pfs_lines ? pf_src + (mp - m_lo) * nk * pfs_lines * 64 : NULL;
            kblock_any(j->a + m0 * Ka, Ka, b0, bstride, nk, NULL, r1, two, pf_b && mp == m_lo, pfs, pfs_lines);
            store_c(stage, r1, two);
            epilogue(c, stage, m0, rows, n0, cols);
        }
    }
    QMM_AMX_SYM(qmm_amx_tiles_release)();
}

/* ---------------------------------------------------------------- blocked regime */
/* Prefetches (T1) lines [l0, l1) of runs of per_run lines, run i at base + i * stride bytes. */
static inline void prefetch_runs(const char *base, int64_t stride, int64_t per_run, int64_t l0, int64_t l1) {
    for (int64_t l = l0; l < l1; l++) _mm_prefetch(base + (l / per_run) * stride + (l % per_run) * 64, _MM_HINT_T1);
}

/* nc → mc → kc → m32 → n32 as amx_int8's blocked_task, K blocks of kc/2 values. With int8
 * weights the nc × kw B block is widened into the thread's buffer once per (N block, M block,
 * K block) — every row panel of the M block reuses it from L2 — and the int8 source of the
 * next B block is prefetched meanwhile. */
static void blocked_task(int64_t task, int64_t n_tasks, int thread, void *arg) {
    (void)n_tasks;
    bf16_job *j = arg;
    const qmm_call *c = j->c;
    const qmm_weight *w = c->w;
    const int64_t M = c->M, Ka = j->Ka, kc = j->bl.kc / 2, ncp = j->bl.nc / 32, mcp = j->bl.mc / 32;
    const int64_t nkb = (Ka + kc - 1) / kc;
    const int ti = (int)(task / j->tn), tj = (int)(task % j->tn);
    const int64_t p_lo = j->npanels_n * tj / j->tn, p_hi = j->npanels_n * (tj + 1) / j->tn;
    const int64_t m_lo = j->npanels_m * ti / j->tm, m_hi = j->npanels_m * (ti + 1) / j->tm;
    float *stage = j->stage + (size_t)thread * 32 * 32;
    float *cbuf = j->cbuf + (size_t)thread * j->cbuf_floats;
    uint16_t *wide = j->wide ? j->wide + (size_t)thread * j->wide_elems : NULL;
    int8_t *i8buf = j->i8buf ? j->i8buf + (size_t)thread * j->i8_bytes : NULL;
    /* bytes of one column block's K range of kw values in the source of B, and its stride */
    const int64_t src_es = w->is_int8 ? 1 : 2, src_stride = Ka * 16 * src_es;
    const char *src = w->is_int8 ? (const char *)w->i8.data : (const char *)w->fp.bf16;
    for (int64_t pc = p_lo; pc < p_hi; pc += ncp) {
        const int64_t pe = pc + ncp < p_hi ? pc + ncp : p_hi;
        const int64_t nb_hi = 2 * pe < j->nblocks ? 2 * pe : j->nblocks;
        for (int64_t mc = m_lo; mc < m_hi; mc += mcp) {
            const int64_t me = mc + mcp < m_hi ? mc + mcp : m_hi;
            for (int64_t kb = 0; kb < nkb; kb++) {
                const int64_t k0 = kb * kc, kw = Ka - k0 < kc ? Ka - k0 : kc;
                const int64_t kw_next = Ka - k0 - kw < kc ? Ka - k0 - kw : kc; /* of K block kb+1 */
                const uint16_t *ablk = j->a + k0 * M;
                const uint16_t *bblk;
                int64_t bstride;
                if (w->is_int8) { /* widen this B block once; every row panel reuses it */
                    for (int64_t nb = 2 * pc; nb < nb_hi; nb++)
                        widen_weight_block(c, nb, Ka, k0, kw, i8buf, wide + (nb - 2 * pc) * kw * 16);
                    bblk = wide;
                    bstride = kw * 16;
                } else {
                    bblk = w->fp.bf16 + 2 * pc * Ka * 16 + k0 * 16;
                    bstride = Ka * 16;
                }
                /* the next B block of this thread (its source bytes): next K block, else K block
                 * 0 of the next M block (same columns), else of the next N block */
                const char *bnext = NULL;
                int64_t kw_b = 0, nbl_next = 0;
                if (i8buf) { /* borrowed: the source is packed just before use */
                } else if (kb + 1 < nkb) {
                    bnext = src + (2 * pc * Ka * 16 + (k0 + kw) * 16) * src_es;
                    kw_b = kw_next;
                    nbl_next = nb_hi - 2 * pc;
                } else if (me < m_hi || pe < p_hi) {
                    const int64_t pn = me < m_hi ? pc : pe;
                    const int64_t pen = pn + ncp < p_hi ? pn + ncp : p_hi;
                    bnext = src + 2 * pn * Ka * 16 * src_es;
                    kw_b = Ka < kc ? Ka : kc;
                    nbl_next = (2 * pen < j->nblocks ? 2 * pen : j->nblocks) - 2 * pn;
                }
                const int64_t per_run = kw_b * 16 * src_es / 64, pf_lines = bnext ? nbl_next * per_run : 0;
                const int64_t iters = (me - mc) * (pe - pc);
                int64_t it = 0;
                for (int64_t mp = mc; mp < me; mp++) {
                    const int64_t m0 = mp * 32;
                    const int rows = (int)(M - m0 < 32 ? M - m0 : 32);
                    const int r0 = rows < 16 ? rows : 16, r1 = rows - r0;
                    QMM_AMX_SYM(qmm_amx_tiles_config)(r0, r1);
                    const uint16_t *a = ablk + m0 * kw;
                    /* the next A panel (bytes): next rows of this K block, else this M block's
                     * first rows in the next K block */
                    const char *anext = NULL;
                    int64_t a_pf = 0;
                    if (mp + 1 < me) {
                        anext = (const char *)(a + 32 * kw);
                        a_pf = 2 * kw * (M - m0 - 32 < 32 ? M - m0 - 32 : 32);
                    } else if (kb + 1 < nkb) {
                        anext = (const char *)(j->a + (k0 + kw) * M + mc * 32 * kw_next);
                        a_pf = 2 * kw_next * (M - mc * 32 < 32 ? M - mc * 32 : 32);
                    }
                    for (int64_t p = pc; p < pe; p++, it++) {
                        const int64_t nb = 2 * p, n0 = nb * 16, cols = c->N - n0 < 32 ? c->N - n0 : 32;
                        const int two = nb + 1 < j->nblocks;
                        float *cb = cbuf + ((mp - mc) * ncp + (p - pc)) * 1024;
                        const int64_t pi = p - pc, np = pe - pc;
                        for (int64_t o = a_pf * pi / np / 64 * 64; o < a_pf * (pi + 1) / np; o += 64)
                            _mm_prefetch(anext + o, _MM_HINT_T0);
                        if (pf_lines)
                            prefetch_runs(bnext, src_stride, per_run, pf_lines * it / iters, pf_lines * (it + 1) / iters);
                        kblock_any(a, kw, bblk + (nb - 2 * pc) * bstride, bstride, kw / 32, kb ? cb : NULL, r1, two, 0, NULL, 0);
                        if (kb + 1 < nkb) {
                            store_c(cb, r1, two);
                        } else {
                            store_c(stage, r1, two);
                            epilogue(c, stage, m0, rows, n0, cols);
                        }
                    }
                }
            }
        }
    }
    QMM_AMX_SYM(qmm_amx_tiles_release)();
}

/* The pre-pass of rows [r0, r0 + rows): a = bf16(act(x)) (rotated for int8 weights), the
 * float engines' vector pre-pass with one-row panels, row-major [rows][Ka], zero past K. */
static qmm_status prepass_rows(qmm_context *ctx, const qmm_call *c, int64_t r0, int64_t rows, uint16_t *a,
                               int64_t Ka) {
    QMM_FORWARD_IF_ERROR(qmm_float_act_pack(ctx, c, r0, rows, 1, 1, a, Ka));
    for (int64_t r = 0; r < rows && Ka > c->K; r++) memset(a + r * Ka + c->K, 0, (size_t)(Ka - c->K) * 2);
    return QMM_OK;
}

/* The task grid of one GEMM launch over M rows: N split first, then M (as amx_int8). */
static void grid(bf16_job *j, int64_t M, int nt) {
    j->npanels_m = (M + 31) / 32;
    j->tn = j->npanels_n < nt ? (int)j->npanels_n : nt;
    j->tm = nt / j->tn;
    if (j->tm > j->npanels_m) j->tm = (int)j->npanels_m;
    if (j->tm < 1) j->tm = 1;
}

static qmm_status amx_bf16_run(qmm_context *ctx, const qmm_call *c) {
    const qmm_weight *w = c->w;
    const int64_t M = c->M;
    const int nt = ctx->n_threads;
    bf16_job j;
    memset(&j, 0, sizeof j);
    j.c = c;
    j.bl = QMM_AMX_SYM(qmm_amx_blocking_now)();
    j.Ka = w->is_int8 ? w->i8.Kp : w->fp.Kp;
    j.nblocks = (w->is_int8 ? w->i8.Np : w->fp.Np) / 16;
    j.npanels_n = (j.nblocks + 1) / 2;
    size_t abytes;
    QMM_RETURN_IF(!qmm_mul_ok((size_t)M, (size_t)j.Ka * 2, &abytes), QMM_ERR_OUT_OF_MEMORY,
                  "layer %s: M=%lld × K=%lld activations too large", w->name, (long long)M, (long long)c->K);
    j.regime = qmm_amx_regime_of(&j.bl, M, (int64_t)abytes);
    QMM_AMX_NOTE_REGIME(j.regime);
    const int blocked = j.regime == QMM_AMX_BLOCKED;
    const int64_t kc = j.bl.kc / 2, nkb = (j.Ka + kc - 1) / kc;
    /* blocked: M blocks of mc rows, each pre-passed, repacked and multiplied by the whole
     * weight before the next (as amx_int8: the block's A stays in the last-level cache) */
    const int64_t mb = blocked && M > j.bl.mc ? j.bl.mc : M;
    const size_t rows_bytes = (size_t)qmm_round_up((int64_t)((size_t)mb * (size_t)j.Ka * 2), 64);
    j.cbuf_floats = blocked && nkb > 1 ? (size_t)(j.bl.mc / 32) * (size_t)(j.bl.nc / 32) * 1024 : 0;
    /* int8 weights: a 32 × Ka panel (decode/panel) or an nc × kc block (blocked) widened */
    j.wide_elems = !w->is_int8 ? 0 : blocked ? (size_t)j.bl.nc * (size_t)(kc < j.Ka ? kc : j.Ka) : (size_t)j.Ka * 32;
    j.wide_elems = (size_t)qmm_round_up((int64_t)j.wide_elems, 32); /* each thread's part 64-byte aligned */
    /* borrowed int8 weights: one packed n16k4 block (Ka, or kc, values of K) */
    j.i8_bytes = w->is_int8 && !w->i8.data ? (size_t)(blocked && kc < j.Ka ? kc : j.Ka) * 16 : 0;
    /* act scratch: a (all rows, or one M block); engine scratch: [packed block (blocked)]
     * [stage][C buffer][widened B] per thread */
    const size_t packed = blocked ? rows_bytes : 0;
    const size_t per_thread = (32 * 32 + j.cbuf_floats) * sizeof(float) + j.wide_elems * 2 + j.i8_bytes;
    void *abuf, *ebuf;
    QMM_FORWARD_IF_ERROR(qmm_context_scratch(ctx, QMM_SCRATCH_ACT, rows_bytes, &abuf));
    QMM_FORWARD_IF_ERROR(qmm_context_scratch(ctx, QMM_SCRATCH_ENGINE, packed + (size_t)nt * per_thread, &ebuf));
    char *t = (char *)ebuf + packed;
    j.stage = (float *)t;
    j.cbuf = j.stage + (size_t)nt * 32 * 32;
    j.wide = j.wide_elems ? (uint16_t *)(t + (size_t)nt * (32 * 32 + j.cbuf_floats) * sizeof(float)) : NULL;
    j.i8buf = j.i8_bytes ? (int8_t *)j.wide + (size_t)nt * j.wide_elems * 2 : NULL;
    if (!blocked) {
        QMM_FORWARD_IF_ERROR(prepass_rows(ctx, c, 0, M, abuf, j.Ka));
        j.a = abuf;
        grid(&j, M, nt);
        qmm_pool_run(ctx->pool, (int64_t)j.tm * j.tn, panel_task, &j);
        return QMM_OK;
    }
    j.a = ebuf;
    for (int64_t r0 = 0; r0 < M; r0 += mb) {
        const int64_t rows = M - r0 < mb ? M - r0 : mb;
        const qmm_call sub = QMM_AMX_SYM(qmm_amx_rows)(c, r0, rows);
        QMM_FORWARD_IF_ERROR(prepass_rows(ctx, c, r0, rows, abuf, j.Ka));
        QMM_AMX_SYM(qmm_amx_pack_a)(ctx, abuf, j.Ka * 2, rows, j.Ka * 2, j.bl.kc, ebuf);
        j.c = &sub;
        grid(&j, rows, nt);
        qmm_pool_run(ctx->pool, (int64_t)j.tm * j.tn, blocked_task, &j);
    }
    return QMM_OK;
}

#else /* built without AMX compiler support */
static qmm_status amx_bf16_run(qmm_context *ctx, const qmm_call *c) {
    (void)ctx;
    return qmm_fail(QMM_ERR_UNSUPPORTED_HARDWARE, "layer %s: amx_bf16 was not built (compiler lacks AMX)", c->w->name);
}
#endif

const qmm_engine QMM_AMX_SYM(qmm_engine_amx_bf16) = {
    .id = QMM_ENGINE_AMX_BF16,
    .name = "amx_bf16",
    .kind = QMM_KIND_FLOAT,
    .isa = QMM_ISA_AMX,
    .cpu_features = QMM_CPU_AVX512F | QMM_CPU_AVX512BW | QMM_CPU_AVX512VL | QMM_CPU_AVX512DQ | QMM_CPU_AMX_TILE |
                    QMM_CPU_AMX_BF16 | QMM_CPU_AMX_PERMITTED, /* its conversions and epilogue are AVX-512 */
    .built = QMM_AMX_BUILT,
    .admit = amx_bf16_admit,
    .run = amx_bf16_run,
};
