/*
 * avx512_vnni_gemm.c — the tile kernels of the AVX512-VNNI engine (qmm_i8_tile_fn, by name in
 * ukernels.h; the engine: avx512_vnni.c): up to 6 rows × 4 16-column blocks, 24 zmm accumulators,
 * one broadcast of 4 activation bytes (u8, q + 128) per row and one 64-byte weight row per block
 * per 4 k (VPDPBUSD), the partial sums of a task in the driver's MC × NC int32 block between K
 * chunks, the outputs on the last chunk (qmm_vnni_store_out: acc − 128·colsum, the epilogue; its
 * time added to t->epilogue_ns when the phase timers are on):
 *   qmm_qd8_qc8w_gemm_ukernel_<mr>x64c4__avx512vnni  4 blocks, mr = 1..6, in asm;
 *   qmm_qd8_qc8w_gemm_ukernel_6x48c4__avx512vnni     1..3 blocks (the last of N), 1..6 rows, in C.
 * Preconditions: t->mr <= 6, t->nr <= 4 (the x64 kernels: t->nr == 4, t->mr = their rows), the
 * weight blocks 64-byte aligned, part rows NC int32 apart.
 */
#include "avx512_vnni_kernel.h"
#include "ukernels.h"

#include <string.h>

enum { NC = QMM_VNNI_NC, PF_AHEAD = 1024 /* software prefetch distance of PF_STREAM, bytes */ };
/* the tile family's operands (qmm_i8_tile_fn, int8_gemm.h) */
#define TILE_ARGS const uint8_t *a, int64_t lda, const float *s, const qmm_call *out, const qmm_i8_tile *t
#define PF_AHEAD_BYTES 1024 /* = PF_AHEAD, as text for the asm */

/* ---------------------------------------------------------------- the x64 tiles, in asm */
/* The mr × 4 tiles (mr = 1..6), the hot paths: accumulators pinned in zmm0-23 (row i in
 * zmm4i..4i+3; weights zmm24-27, broadcasts zmm28-29). gcc 12 spills an accumulator array or a
 * set of 24 variables to the stack in this loop (and the 4-row tail in C), so they are written
 * out, one function per mr from the same text (V_TILE_X64). part: mr rows of NC int32 — loaded unless first,
 * always stored. a: rows lda bytes apart; b: 4 blocks of 64-byte quads ldb bytes apart; nq quads.
 * Prefetch, per quad iteration:
 *   PF_NONE;
 *   PF_STREAM — each of the 4 blocks PF_AHEAD bytes ahead into L1 (one pass over weights that
 *     come from memory: M ≤ 6);
 *   PF_NEXT — two lines at pf, pf + 64 into L2, then pf += pfs (pfs ≤ 128 covers every line):
 *     the driver points it at this pass's share of the next panel, so the weight stream from
 *     memory runs under the compute of the passes over the current (L2-resident) panel. */
#define VS_(x) #x
#define VS(x) VS_(x)
#define V_ZERO(r) "vpxord %%zmm" #r ", %%zmm" #r ", %%zmm" #r "\n\t"
#define V_ZROW(r0, r1, r2, r3) V_ZERO(r0) V_ZERO(r1) V_ZERO(r2) V_ZERO(r3)
#define V_LROW(i, r0, r1, r2, r3)                              \
    "vmovdqu32 " #i "*1024(%[c]), %%zmm" #r0 "\n\t"            \
    "vmovdqu32 " #i "*1024+64(%[c]), %%zmm" #r1 "\n\t"         \
    "vmovdqu32 " #i "*1024+128(%[c]), %%zmm" #r2 "\n\t"        \
    "vmovdqu32 " #i "*1024+192(%[c]), %%zmm" #r3 "\n\t"
#define V_SROW(i, r0, r1, r2, r3)                              \
    "vmovdqu32 %%zmm" #r0 ", " #i "*1024(%[c])\n\t"            \
    "vmovdqu32 %%zmm" #r1 ", " #i "*1024+64(%[c])\n\t"         \
    "vmovdqu32 %%zmm" #r2 ", " #i "*1024+128(%[c])\n\t"        \
    "vmovdqu32 %%zmm" #r3 ", " #i "*1024+192(%[c])\n\t"
#define V_DROW(addr, bc, r0, r1, r2, r3)                       \
    "vpbroadcastd " addr ", %%zmm" #bc "\n\t"                  \
    "vpdpbusd %%zmm24, %%zmm" #bc ", %%zmm" #r0 "\n\t"         \
    "vpdpbusd %%zmm25, %%zmm" #bc ", %%zmm" #r1 "\n\t"         \
    "vpdpbusd %%zmm26, %%zmm" #bc ", %%zmm" #r2 "\n\t"         \
    "vpdpbusd %%zmm27, %%zmm" #bc ", %%zmm" #r3 "\n\t"

/* per row i: its registers and its broadcast address */
#define V_ROW0(M) M(0, "(%[a])", 28, 0, 1, 2, 3)
#define V_ROW1(M) M(1, "(%[a],%[lda],1)", 29, 4, 5, 6, 7)
#define V_ROW2(M) M(2, "(%[a],%[lda],2)", 28, 8, 9, 10, 11)
#define V_ROW3(M) M(3, "(%[a3])", 29, 12, 13, 14, 15)
#define V_ROW4(M) M(4, "(%[a3],%[lda],1)", 28, 16, 17, 18, 19)
#define V_ROW5(M) M(5, "(%[a3],%[lda],2)", 29, 20, 21, 22, 23)
#define V_ROWS1(M) V_ROW0(M)
#define V_ROWS2(M) V_ROWS1(M) V_ROW1(M)
#define V_ROWS3(M) V_ROWS2(M) V_ROW2(M)
#define V_ROWS4(M) V_ROWS3(M) V_ROW3(M)
#define V_ROWS5(M) V_ROWS4(M) V_ROW4(M)
#define V_ROWS6(M) V_ROWS5(M) V_ROW5(M)
#define V_M_ZERO(i, addr, bc, r0, r1, r2, r3) V_ZROW(r0, r1, r2, r3)
#define V_M_LOAD(i, addr, bc, r0, r1, r2, r3) V_LROW(i, r0, r1, r2, r3)
#define V_M_SAVE(i, addr, bc, r0, r1, r2, r3) V_SROW(i, r0, r1, r2, r3)
#define V_M_DP(i, addr, bc, r0, r1, r2, r3) V_DROW(addr, bc, r0, r1, r2, r3)

#define V_LOADB                                                \
    "vmovdqa32 (%[b]), %%zmm24\n\t"                            \
    "vmovdqa32 (%[b],%[ldb],1), %%zmm25\n\t"                   \
    "vmovdqa32 (%[b],%[ldb],2), %%zmm26\n\t"                   \
    "vmovdqa32 (%[b3]), %%zmm27\n\t"
#define V_STEP "add $64, %[b]\n\tadd $64, %[b3]\n\tadd $4, %[a]\n\tadd $4, %[a3]\n\tdec %[nq]\n\t"
#define V_PF_STREAM                                                         \
    "prefetcht0 " VS(PF_AHEAD_BYTES) "(%[b])\n\t"                           \
    "prefetcht0 " VS(PF_AHEAD_BYTES) "(%[b],%[ldb],1)\n\t"                  \
    "prefetcht0 " VS(PF_AHEAD_BYTES) "(%[b],%[ldb],2)\n\t"                  \
    "prefetcht0 " VS(PF_AHEAD_BYTES) "(%[b3])\n\t"
#define V_PF_NEXT "prefetcht1 (%[pf])\n\tprefetcht1 64(%[pf])\n\tadd %[pfs], %[pf]\n\t"

/* The asm tile over ROWS (V_ROWS1..6) on the operand rows a_ (lda_ bytes apart): the sums of the
 * chunk into t->part (loaded unless first, always stored), then on the last chunk the outputs of
 * the tile's rows (token scales s, call out). */
#define V_TILE_X64(ROWS, a_, lda_, s, out, t)                                                              \
    do {                                                                                                   \
        _Static_assert(NC == 256, "row offsets assume NC = 256 int32");                                     \
        const int64_t lda_v = (lda_), ldb = (t)->ldb, first = (t)->first, pfmode = (t)->pf_mode,           \
                      pfs = (t)->pf_step;                                                                  \
        const uint8_t *a_v = (a_), *a3 = a_v + 3 * lda_v;                                                  \
        const int8_t *b = (t)->b, *b3 = b + 3 * ldb, *pf = (t)->pf;                                        \
        int64_t nq = (t)->nq;                                                                              \
        int32_t *part = (t)->part;                                                                         \
        __asm__ volatile("cmpq $0, %[first]\n\t"                                                           \
                         "je 1f\n\t" ROWS(V_M_ZERO) "jmp 2f\n\t"                                           \
                         "1:\n\t" ROWS(V_M_LOAD) "2:\n\t"                                                  \
                         "test %[nq], %[nq]\n\t"                                                           \
                         "jz 9f\n\t"                                                                       \
                         "cmpq $1, %[mode]\n\t"                                                            \
                         "je 7f\n\t"                 /* QMM_I8_PF_NEXT */                                  \
                         "jg 5f\n\t"                 /* QMM_I8_PF_STREAM */                                \
                         "3:\n\t" V_LOADB ROWS(V_M_DP) V_STEP "jnz 3b\n\t"                                  \
                         "jmp 9f\n\t"                                                                      \
                         "5:\n\t" V_PF_STREAM V_LOADB ROWS(V_M_DP) V_STEP "jnz 5b\n\t"                      \
                         "jmp 9f\n\t"                                                                      \
                         "7:\n\t" V_PF_NEXT V_LOADB ROWS(V_M_DP) V_STEP "jnz 7b\n\t"                        \
                         "9:\n\t" ROWS(V_M_SAVE)                                                           \
                         : [a] "+r"(a_v), [a3] "+r"(a3), [b] "+r"(b), [b3] "+r"(b3), [nq] "+r"(nq),            \
                           [pf] "+r"(pf)                                                                   \
                         : [lda] "r"(lda_v), [ldb] "r"(ldb), [c] "r"(part), [first] "rm"(first),              \
                           [mode] "rm"(pfmode), [pfs] "r"(pfs)                                             \
                         : "zmm0", "zmm1", "zmm2", "zmm3", "zmm4", "zmm5", "zmm6", "zmm7", "zmm8",           \
                           "zmm9", "zmm10", "zmm11", "zmm12", "zmm13", "zmm14", "zmm15", "zmm16",            \
                           "zmm17", "zmm18", "zmm19", "zmm20", "zmm21", "zmm22", "zmm23", "zmm24",           \
                           "zmm25", "zmm26", "zmm27", "zmm28", "zmm29", "memory", "cc");                    \
        if ((t)->last) timed_store_rows(s, out, t);                                                        \
    } while (0)

/* the outputs of the tile's rows × 4 blocks from its sums in t->part */
static void store_rows(const float *s, const qmm_call *out, const qmm_i8_tile *t) {
    for (int i = 0; i < t->mr; i++)
        for (int jj = 0; jj < QMM_VNNI_NRB; jj++)
            if (t->n + jj * 16 < out->N)
                qmm_vnni_store_out(out, t->colsum + jj * 16, _mm512_loadu_si512(t->part + i * NC + jj * 16), t->r + i,
                                   t->n + jj * 16, s[i]);
}

/* store_rows, its time added to t->epilogue_ns when the phase timers are on (qmm_profile) */
static void timed_store_rows(const float *s, const qmm_call *out, const qmm_i8_tile *t) {
    if (!t->epilogue_ns) {
        store_rows(s, out, t);
        return;
    }
    const uint64_t t0 = qmm_now_ns();
    store_rows(s, out, t);
    *t->epilogue_ns += qmm_now_ns() - t0;
}

void qmm_qd8_qc8w_gemm_ukernel_1x64c4__avx512vnni(TILE_ARGS) { V_TILE_X64(V_ROWS1, a, lda, s, out, t); }
void qmm_qd8_qc8w_gemm_ukernel_2x64c4__avx512vnni(TILE_ARGS) { V_TILE_X64(V_ROWS2, a, lda, s, out, t); }
void qmm_qd8_qc8w_gemm_ukernel_3x64c4__avx512vnni(TILE_ARGS) { V_TILE_X64(V_ROWS3, a, lda, s, out, t); }
void qmm_qd8_qc8w_gemm_ukernel_4x64c4__avx512vnni(TILE_ARGS) { V_TILE_X64(V_ROWS4, a, lda, s, out, t); }
void qmm_qd8_qc8w_gemm_ukernel_5x64c4__avx512vnni(TILE_ARGS) { V_TILE_X64(V_ROWS5, a, lda, s, out, t); }
void qmm_qd8_qc8w_gemm_ukernel_6x64c4__avx512vnni(TILE_ARGS) { V_TILE_X64(V_ROWS6, a, lda, s, out, t); }

/* ---------------------------------------------------------------- the x48 tiles, in C */
/* Accumulators are named variables (not an array) so that the compiler keeps all 24 in zmm
 * registers (c<row><block>); mr/nr are constants in every instantiation and the unused ones
 * disappear. OP(i, jj, c) for each accumulator c of row i, block jj in the tile. */
#define ACC_DO(i, OP, v0, v1, v2, v3) \
    if (mr > i) { OP(i, 0, v0) if (nr > 1) { OP(i, 1, v1) } if (nr > 2) { OP(i, 2, v2) } if (nr > 3) { OP(i, 3, v3) } }
#define ACC_ALL(OP)                                                                                                \
    ACC_DO(0, OP, c00, c01, c02, c03) ACC_DO(1, OP, c10, c11, c12, c13) ACC_DO(2, OP, c20, c21, c22, c23)          \
    ACC_DO(3, OP, c30, c31, c32, c33) ACC_DO(4, OP, c40, c41, c42, c43) ACC_DO(5, OP, c50, c51, c52, c53)
#define OP_LOAD(i, jj, v) v = _mm512_loadu_si512(part + i * NC + jj * 16);
#define OP_SAVE(i, jj, v) _mm512_storeu_si512(part + i * NC + jj * 16, v);
#define OP_OUT(i, jj, v) if (n + jj * 16 < out->N) qmm_vnni_store_out(out, cs + jj * 16, v, r + i, n + jj * 16, s[i]);
#define ROW_STEP(i, v0, v1, v2, v3)                                                    \
    if (mr > i) {                                                                      \
        int32_t v_;                                                                    \
        memcpy(&v_, a + i * lda + q * 4, 4);                                           \
        const __m512i av = _mm512_set1_epi32(v_);                                      \
        v0 = qmm_vnni_dpbusd(v0, av, b0);                                              \
        if (nr > 1) v1 = qmm_vnni_dpbusd(v1, av, b1);                                  \
        if (nr > 2) v2 = qmm_vnni_dpbusd(v2, av, b2);                                  \
        if (nr > 3) v3 = qmm_vnni_dpbusd(v3, av, b3);                                  \
    }

/* The C tile body: rows [t->r, +mr) × blocks [t->n/16, +nr) over the chunk's quads, mr and nr
 * compile-time constants; the driver's prefetch (t->pf_mode), as the asm tiles do it. */
static inline __attribute__((always_inline)) void c_tile(const int mr, const int nr, const uint8_t *a, int64_t lda,
                                                         const float *s, const qmm_call *out, const qmm_i8_tile *t) {
    const int8_t *b = t->b, *pf = t->pf;
    int32_t *part = t->part;
    const int32_t *cs = t->colsum;
    const int64_t ldb = t->ldb, nq = t->nq, r = t->r, n = t->n, pfs = t->pf_step;
    const int pfmode = t->pf_mode;
    __m512i c00 = _mm512_setzero_si512(), c01 = c00, c02 = c00, c03 = c00, c10 = c00, c11 = c00, c12 = c00, c13 = c00;
    __m512i c20 = c00, c21 = c00, c22 = c00, c23 = c00, c30 = c00, c31 = c00, c32 = c00, c33 = c00;
    __m512i c40 = c00, c41 = c00, c42 = c00, c43 = c00, c50 = c00, c51 = c00, c52 = c00, c53 = c00;
    if (!t->first) { ACC_ALL(OP_LOAD) }
    const int8_t *p0 = b, *p1 = b + ldb, *p2 = b + 2 * ldb, *p3 = b + 3 * ldb;
    for (int64_t q = 0; q < nq; q++) {
        if (pfmode == QMM_I8_PF_STREAM) { /* small M: the weights stream from memory, a few lines ahead per block */
            _mm_prefetch((const char *)p0 + q * 64 + PF_AHEAD, _MM_HINT_T0);
            if (nr > 1) _mm_prefetch((const char *)p1 + q * 64 + PF_AHEAD, _MM_HINT_T0);
            if (nr > 2) _mm_prefetch((const char *)p2 + q * 64 + PF_AHEAD, _MM_HINT_T0);
            if (nr > 3) _mm_prefetch((const char *)p3 + q * 64 + PF_AHEAD, _MM_HINT_T0);
        } else if (pfmode == QMM_I8_PF_NEXT) { /* this tile's share of the next panel, into L2 */
            _mm_prefetch((const char *)pf + q * pfs, _MM_HINT_T1);
            _mm_prefetch((const char *)pf + q * pfs + 64, _MM_HINT_T1);
        }
        const __m512i b0 = _mm512_load_si512(p0 + q * 64);
        const __m512i b1 = nr > 1 ? _mm512_load_si512(p1 + q * 64) : b0;
        const __m512i b2 = nr > 2 ? _mm512_load_si512(p2 + q * 64) : b0;
        const __m512i b3 = nr > 3 ? _mm512_load_si512(p3 + q * 64) : b0;
        ROW_STEP(0, c00, c01, c02, c03) ROW_STEP(1, c10, c11, c12, c13) ROW_STEP(2, c20, c21, c22, c23)
        ROW_STEP(3, c30, c31, c32, c33) ROW_STEP(4, c40, c41, c42, c43) ROW_STEP(5, c50, c51, c52, c53)
    }
    if (!t->last) { ACC_ALL(OP_SAVE) return; }
    ACC_ALL(OP_OUT)
}

/* 1..3 blocks (the last blocks of N) × 1..6 rows */
void qmm_qd8_qc8w_gemm_ukernel_6x48c4__avx512vnni(TILE_ARGS) {
    switch (t->mr * 8 + t->nr) {
    case 1 * 8 + 1: c_tile(1, 1, a, lda, s, out, t); break;
    case 1 * 8 + 2: c_tile(1, 2, a, lda, s, out, t); break;
    case 1 * 8 + 3: c_tile(1, 3, a, lda, s, out, t); break;
    case 2 * 8 + 1: c_tile(2, 1, a, lda, s, out, t); break;
    case 2 * 8 + 2: c_tile(2, 2, a, lda, s, out, t); break;
    case 2 * 8 + 3: c_tile(2, 3, a, lda, s, out, t); break;
    case 3 * 8 + 1: c_tile(3, 1, a, lda, s, out, t); break;
    case 3 * 8 + 2: c_tile(3, 2, a, lda, s, out, t); break;
    case 3 * 8 + 3: c_tile(3, 3, a, lda, s, out, t); break;
    case 4 * 8 + 1: c_tile(4, 1, a, lda, s, out, t); break;
    case 4 * 8 + 2: c_tile(4, 2, a, lda, s, out, t); break;
    case 4 * 8 + 3: c_tile(4, 3, a, lda, s, out, t); break;
    case 5 * 8 + 1: c_tile(5, 1, a, lda, s, out, t); break;
    case 5 * 8 + 2: c_tile(5, 2, a, lda, s, out, t); break;
    case 5 * 8 + 3: c_tile(5, 3, a, lda, s, out, t); break;
    case 6 * 8 + 1: c_tile(6, 1, a, lda, s, out, t); break;
    case 6 * 8 + 2: c_tile(6, 2, a, lda, s, out, t); break;
    case 6 * 8 + 3: c_tile(6, 3, a, lda, s, out, t); break;
    default: qmm_call_bug(out, "avx512_vnni: a tile beyond 6 rows x 3 blocks reached the C kernels"); break;
    }
}
