/*
 * avx512_vnni.c — the AVX512-VNNI int8 engine (QMM_ENGINE_AVX512_VNNI): SPEC §1 on the shared
 * n16k4 packed weights, bit-identical to the reference engine (int32 accumulators and outputs).
 * It runs on the core int8 driver (int8_gemm.h: pre-pass, a = q + 128 as u8 because VPDPBUSD
 * multiplies u8 × s8 — Σ (q+128)·w − 128·colsum[n] = Σ q·w mod 2^32, exact, -128 weights
 * included —, MC × NC tasks, KC chunks, prefetch schedule) and supplies:
 *   tile      the MR × NRB micro-kernel (6 rows × 4 16-column blocks: 24 zmm accumulators, one
 *             broadcast of 4 activation bytes per row and one 64-byte weight row per block per
 *             4 k), in asm for 4 blocks (qmm_qd8_qc8w_gemm_ukernel_<mr>x64c4__avx512vnni_asm) and in C
 *             for the last blocks of N (qmm_qd8_qc8w_gemm_ukernel_6x48c4__avx512vnni);
 *             the partial sums of a task live in the driver's MC × NC int32 block between K
 *             chunks; on the last chunk the outputs are written by store_out: acc − 128·colsum,
 *             then qmm_z_epilogue16 (simd_avx512.h: I32, or the fused / kitchen epilogue, bias,
 *             residual, rounded to f32 / f16 / bf16), masked for the last columns;
 *   one pass  7 ≤ M ≤ 24: all rows in one register tile over the whole K, one pass over the
 *             weights (avx512_vnni_small.c: 24, 20 or 16 × 1, 12 × 2 or 8 × 3 blocks, on the
 *             driver's packed copy of the rows); the weight's last blocks use the row tiles;
 *   pack      a borrowed weight's panels, packed per call (pack_block, M > ROWS_M);
 *   rows      a borrowed weight at M ≤ ROWS_M (64): the caller's rows read in place in long
 *             sequential streams: row dot products at M ≤ 8 (rows_dot, rows_dot2), W broadcast
 *             against the tokens in lanes above (bcast_dot, lanes_dot; in groups of 16 tokens
 *             above 16); see "borrowed weights: small M").
 * Small M: with M ≤ MC all tasks split N, so each thread streams only its share of the weights;
 * M ≤ SMALL_M: whole K, a single row tile prefetching 1 KiB ahead per block (PF_STREAM), several
 * sharing an L2 prefetch of the next panel (PF_NEXT). With K chunks no software prefetch (a burst
 * of prefetches of the next chunk per row tile cost 12 % of the kernel time and gained nothing
 * measurable). No allocation per call beyond the context's scratch arenas.
 */
#include "avx512_vnni_small.h"
#include "int8_gemm.h"
#include "numerics.h"
#include "prepass.h"
#include "qmm_internal.h"
#include "pack_avx512.h"
#include "simd_avx512.h"

#include <immintrin.h>
#include <string.h>

enum {
    MR = 6,     /* rows per micro-kernel */
    NRB = 4,    /* 16-column blocks per micro-kernel (64 columns) */
    KC = 512,   /* K chunk: a 64 × KC weight panel is 32 KiB (L1) */
    MC = 192,   /* rows per task: MC × KC activation bytes = 96 KiB (L2) */
    NC = 256,   /* columns per task: MC × NC int32 partials = 192 KiB (L2) */
    SMALL_M = 3 * MR, /* up to this M, no K chunks */
    PF_AHEAD = 1024   /* software prefetch distance of the small-M kernels, bytes */
};
#define PF_AHEAD_BYTES 1024 /* = PF_AHEAD, as text for the asm */

typedef qmm_i8_gemm vnni_job; /* the driver's call state (int8_gemm.h) */

/* ---------------------------------------------------------------- epilogue */
/* cs: Σ_k W[n][k] of columns n..n+16 */
static inline void store_out(const qmm_call *c, const int32_t *cs, __m512i acc, int64_t r, int64_t n, float s_r) {
    acc = _mm512_sub_epi32(acc, _mm512_slli_epi32(_mm512_loadu_si512(cs), 7));
    qmm_z_epilogue16(c, acc, r, n, s_r, qmm_z_tail_mask(c->N - n));
}

/* ---------------------------------------------------------------- micro-kernels in asm */
/* The mr × 4 tiles (mr = 1..6), the hot paths: accumulators pinned in zmm0-23 (row i in
 * zmm4i..4i+3; weights zmm24-27, broadcasts zmm28-29). gcc 12 spills an accumulator array or a
 * set of 24 variables to the stack in this loop (and the 4-row tail in C), so they are written
 * out, one function per mr from the same text. part: mr rows of NC int32 — loaded unless first,
 * always stored. a: rows lda bytes apart; b: 4 blocks of 64-byte quads ldb bytes apart; nq quads.
 * Prefetch, per quad iteration:
 *   PF_NONE;
 *   PF_STREAM — each of the 4 blocks PF_AHEAD bytes ahead into L1 (one pass over weights that
 *     come from memory: M ≤ 6);
 *   PF_NEXT — two lines at pf, pf + 64 into L2, then pf += pfs (pfs ≤ 128 covers every line):
 *     the driver points it at this pass's share of the next panel, so the weight stream from
 *     memory runs under the compute of the passes over the current (L2-resident) panel. */
enum { PF_NONE = QMM_I8_PF_NONE, PF_STREAM = QMM_I8_PF_STREAM, PF_NEXT = QMM_I8_PF_NEXT };

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

#define V_KERNEL(MR_)                                                                            \
    static void qmm_qd8_qc8w_gemm_ukernel_##MR_##x64c4__avx512vnni_asm(                          \
        const uint8_t *a, int64_t lda, const int8_t *b, int64_t ldb, int64_t nq, int32_t *part,  \
        int64_t first, int64_t pfmode, const int8_t *pf, int64_t pfs) {                          \
        _Static_assert(NC == 256, "row offsets assume NC = 256 int32");                           \
        const uint8_t *a3 = a + 3 * lda;                                                          \
        const int8_t *b3 = b + 3 * ldb;                                                           \
        __asm__ volatile("cmpq $0, %[first]\n\t"                                                  \
                         "je 1f\n\t" V_ROWS##MR_(V_M_ZERO) "jmp 2f\n\t"                           \
                         "1:\n\t" V_ROWS##MR_(V_M_LOAD) "2:\n\t"                                  \
                         "test %[nq], %[nq]\n\t"                                                  \
                         "jz 9f\n\t"                                                              \
                         "cmpq $1, %[mode]\n\t"                                                   \
                         "je 5f\n\t"                                                              \
                         "jg 7f\n\t"                                                              \
                         "3:\n\t" V_LOADB V_ROWS##MR_(V_M_DP) V_STEP "jnz 3b\n\t"                  \
                         "jmp 9f\n\t"                                                             \
                         "5:\n\t" V_PF_STREAM V_LOADB V_ROWS##MR_(V_M_DP) V_STEP "jnz 5b\n\t"      \
                         "jmp 9f\n\t"                                                             \
                         "7:\n\t" V_PF_NEXT V_LOADB V_ROWS##MR_(V_M_DP) V_STEP "jnz 7b\n\t"        \
                         "9:\n\t" V_ROWS##MR_(V_M_SAVE)                                           \
                         : [a] "+r"(a), [a3] "+r"(a3), [b] "+r"(b), [b3] "+r"(b3), [nq] "+r"(nq),  \
                           [pf] "+r"(pf)                                                          \
                         : [lda] "r"(lda), [ldb] "r"(ldb), [c] "r"(part), [first] "rm"(first),    \
                           [mode] "rm"(pfmode), [pfs] "r"(pfs)                                    \
                         : "zmm0", "zmm1", "zmm2", "zmm3", "zmm4", "zmm5", "zmm6", "zmm7", "zmm8", \
                           "zmm9", "zmm10", "zmm11", "zmm12", "zmm13", "zmm14", "zmm15", "zmm16",  \
                           "zmm17", "zmm18", "zmm19", "zmm20", "zmm21", "zmm22", "zmm23", "zmm24", \
                           "zmm25", "zmm26", "zmm27", "zmm28", "zmm29", "memory", "cc");          \
    }

V_KERNEL(1)
V_KERNEL(2)
V_KERNEL(3)
V_KERNEL(4)
V_KERNEL(5)
V_KERNEL(6)

/* acc += Σ4 u8(a) · s8(b). Inline asm ties acc to one register: gcc 12's builtin adds two zmm
 * moves per VPDPBUSD in loops, which halves the kernel's issue rate. */
static inline __m512i dpbusd(__m512i acc, __m512i a, __m512i b) {
    __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
    return acc;
}

/* Accumulators are named variables (not an array) so that the compiler keeps all 24 in zmm
 * registers; mr/nr are constants in every instantiation and the unused ones disappear. */
#define ACC_ROW(i) __m512i c##i##0 = _mm512_setzero_si512(), c##i##1 = c##i##0, c##i##2 = c##i##0, c##i##3 = c##i##0;
#define ACC_DO(i, OP) \
    if (mr > i) { OP(i, 0) if (nr > 1) { OP(i, 1) } if (nr > 2) { OP(i, 2) } if (nr > 3) { OP(i, 3) } }
#define ACC_ALL(OP) ACC_DO(0, OP) ACC_DO(1, OP) ACC_DO(2, OP) ACC_DO(3, OP) ACC_DO(4, OP) ACC_DO(5, OP)
#define OP_LOAD(i, jj) c##i##jj = _mm512_loadu_si512(part + i * NC + jj * 16);
#define OP_SAVE(i, jj) _mm512_storeu_si512(part + i * NC + jj * 16, c##i##jj);
#define OP_OUT(i, jj) if (n + jj * 16 < j->c->N) store_out(j->c, cs + jj * 16, c##i##jj, r + i, n + jj * 16, j->s[r + i]);
#define ROW_STEP(i)                                                                    \
    if (mr > i) {                                                                      \
        int32_t v_;                                                                    \
        memcpy(&v_, a + i * lda + q * 4, 4);                                           \
        const __m512i av = _mm512_set1_epi32(v_);                                      \
        c##i##0 = dpbusd(c##i##0, av, b0);                                \
        if (nr > 1) c##i##1 = dpbusd(c##i##1, av, b1);                    \
        if (nr > 2) c##i##2 = dpbusd(c##i##2, av, b2);                    \
        if (nr > 3) c##i##3 = dpbusd(c##i##3, av, b3);                    \
    }

/* rows [r, r+mr) × blocks [nb, nb+nr) over quads [q0, q0+nq). a: row r at quad q0; b: block nb at
 * quad q0 (blocks ldb bytes apart); part: the partial sums (NC int32 per row); cs: column sums;
 * pfmode/pf/pfs: the driver's prefetch, as the asm kernels do it. */
static inline __attribute__((always_inline)) void
qmm_qd8_qc8w_gemm_ukernel_6x48c4__avx512vnni(const int mr, const int nr, const vnni_job *j, const uint8_t *a,
                                             const int8_t *b, int64_t ldb, int64_t nq, int32_t *part, int first,
                                             int last, int64_t r, int64_t n, const int32_t *cs, int pfmode,
                                             const int8_t *pf, int64_t pfs) {
    const int64_t lda = j->Kp;
    ACC_ROW(0) ACC_ROW(1) ACC_ROW(2) ACC_ROW(3) ACC_ROW(4) ACC_ROW(5)
    if (!first) { ACC_ALL(OP_LOAD) }
    const int8_t *p0 = b, *p1 = b + ldb, *p2 = b + 2 * ldb, *p3 = b + 3 * ldb;
    for (int64_t q = 0; q < nq; q++) {
        if (pfmode == PF_STREAM) { /* small M: the weights stream from memory, a few lines ahead per block */
            _mm_prefetch((const char *)p0 + q * 64 + PF_AHEAD, _MM_HINT_T0);
            if (nr > 1) _mm_prefetch((const char *)p1 + q * 64 + PF_AHEAD, _MM_HINT_T0);
            if (nr > 2) _mm_prefetch((const char *)p2 + q * 64 + PF_AHEAD, _MM_HINT_T0);
            if (nr > 3) _mm_prefetch((const char *)p3 + q * 64 + PF_AHEAD, _MM_HINT_T0);
        } else if (pfmode == PF_NEXT) { /* this tile's share of the next panel, into L2 */
            _mm_prefetch((const char *)pf + q * pfs, _MM_HINT_T1);
            _mm_prefetch((const char *)pf + q * pfs + 64, _MM_HINT_T1);
        }
        const __m512i b0 = _mm512_load_si512(p0 + q * 64);
        const __m512i b1 = nr > 1 ? _mm512_load_si512(p1 + q * 64) : b0;
        const __m512i b2 = nr > 2 ? _mm512_load_si512(p2 + q * 64) : b0;
        const __m512i b3 = nr > 3 ? _mm512_load_si512(p3 + q * 64) : b0;
        ROW_STEP(0) ROW_STEP(1) ROW_STEP(2) ROW_STEP(3) ROW_STEP(4) ROW_STEP(5)
    }
    if (!last) { ACC_ALL(OP_SAVE) return; }
    ACC_ALL(OP_OUT)
}

#define K_CASE(MR_, NR_) \
    case MR_ * 8 + NR_: qmm_qd8_qc8w_gemm_ukernel_6x48c4__avx512vnni(MR_, NR_, j, a, b, ldb, nq, part, first, last, r, n, cs, pfmode, pf, pfs); break;
#define K_ROW(MR_) K_CASE(MR_, 1) K_CASE(MR_, 2) K_CASE(MR_, 3)

typedef void (*asm_kernel_fn)(const uint8_t *, int64_t, const int8_t *, int64_t, int64_t, int32_t *, int64_t, int64_t,
                              const int8_t *, int64_t);
static const asm_kernel_fn k_vnni_x64_asm[MR + 1] = {
    NULL,
    qmm_qd8_qc8w_gemm_ukernel_1x64c4__avx512vnni_asm,
    qmm_qd8_qc8w_gemm_ukernel_2x64c4__avx512vnni_asm,
    qmm_qd8_qc8w_gemm_ukernel_3x64c4__avx512vnni_asm,
    qmm_qd8_qc8w_gemm_ukernel_4x64c4__avx512vnni_asm,
    qmm_qd8_qc8w_gemm_ukernel_5x64c4__avx512vnni_asm,
    qmm_qd8_qc8w_gemm_ukernel_6x64c4__avx512vnni_asm,
};

/* rows [r, r+mr) × blocks [nb, nb+nr): the asm tiles for 4 blocks (any mr), the C ones for the
 * last blocks of N; pfmode/pf/pfs: the asm kernels' prefetch (see above). */
static void vnni_tile(int mr, int nr, const vnni_job *j, const uint8_t *a, const int8_t *b, int64_t ldb, int64_t nq,
                      int32_t *part, int first, int last, int64_t r, int64_t n, const int32_t *cs, int pfmode,
                      const int8_t *pf, int64_t pfs) {
    if (nr == NRB) {
        k_vnni_x64_asm[mr](a, j->Kp, b, ldb, nq, part, first, pfmode, pf, pfs);
        if (last) {
            for (int i = 0; i < mr; i++)
                for (int jj = 0; jj < NRB; jj++)
                    if (n + jj * 16 < j->c->N)
                        store_out(j->c, cs + jj * 16, _mm512_loadu_si512(part + i * NC + jj * 16), r + i, n + jj * 16,
                                  j->s[r + i]);
        }
        return;
    }
    switch (mr * 8 + nr) {
        K_ROW(1) K_ROW(2) K_ROW(3) K_ROW(4) K_ROW(5) K_ROW(6)
    default: qmm_call_bug(j->c, "avx512_vnni: a tile beyond 6 rows x 3 blocks reached the C kernels"); break;
    }
}

/* ---------------------------------------------------------------- borrowed weights: panel pack */
/* qmm_i8_pack_fn (int8_gemm.h) in AVX-512 (no -128 flag: this engine is exact with -128): per 64
 * bytes of K the 16 rows transposed by qmm_z_n16k4_step (pack_avx512.h), the column sums by
 * VPDPBUSD(1, w) on the n16k4 rows. */
static void pack_block(const int8_t *W, int64_t ld, int rows, int64_t k0, int64_t k1, int8_t *dst, int64_t nq,
                       int32_t *cs, int first, int *neg128) {
    (void)neg128;
    const __m512i ones = _mm512_set1_epi8(1);
    __m512i csv = _mm512_setzero_si512();
    for (int64_t q0 = 0; q0 < nq; q0 += 16) {
        __m512i out[16];
        const int64_t k = k0 + q0 * 4;
        qmm_z_n16k4_step(W, ld, rows, k, k1 - k < 64 ? k1 - k : 64, out);
        const int64_t nout = nq - q0 < 16 ? nq - q0 : 16;
        for (int64_t q = 0; q < nout; q++) {
            _mm512_store_si512(dst + (q0 + q) * 64, out[q]);
            csv = dpbusd(csv, ones, out[q]);
        }
    }
    if (!first) csv = _mm512_add_epi32(csv, _mm512_loadu_si512(cs));
    _mm512_storeu_si512(cs, csv);
}

/* ---------------------------------------------------------------- borrowed weights: small M */
/* The rows regime (M <= ROWS_M): the caller's rows are read in place, each byte once, in a few
 * long sequential streams (R equal runs of the task's rows, stream r: rows n0 + r·len + j; with
 * ld == K each a sequential run of len·K bytes, prefetched ROWS_PF bytes ahead into L2; the
 * leftover rows one at a time), and meet all M tokens at once. Two kernels (measured,
 * bench/NOTES.md; per 64 bytes of one W row):
 *   M <= ROWS_DOT_M  row dot products, qmm_qd8_qc8w_gemm_ukernel_Mx1c64__avx512vnni_rows: W is the
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
 *                    (rows_ap_fill, once per call) in the lanes of a zmm shared by R rows, each W
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
    ROWS_M = 64,     /* up to this M: the rows regime (the broadcast kernels above ROWS_DOT_M) */
    BCAST_G = 4,     /* bcast_dot's token groups of 16 (M <= 16·BCAST_G) */
    ROWS_RMAX = 8,   /* the most rows of W per step */
    ROWS_PAIRS_FROM = 2, /* above this M: rows_dot2 (rows in pairs) */
    ROWS_PF = 4096,  /* rows_dot's prefetch distance per stream, bytes (into L2) */
    BCAST_R = 8,     /* bcast_dot's rows of W per step (streams) */
    LANES12_R = 6,   /* lanes_dot's at 9 <= M <= 12 (4 accumulators per row with the row sums) */
    BCAST_RMAX = BCAST_R
};

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
            for (int r = 0; r < R; r++) acc[r][i] = dpbusd(acc[r][i], x[r], av);
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
            for (int p = 0; p < P; p++) acc[p][i] = dpbusd(dpbusd(acc[p][i], lo[p], q0), hi[p], q1);
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
static inline __attribute__((always_inline)) void rows_run(const int m, const int R, const qmm_i8_gemm *g, int64_t s0,
                                                           int64_t span, int64_t len) {
    const qmm_call *c = g->c;
    const int64_t K = c->K, ld = c->w->borrow.ld;
    const int8_t *q = (const int8_t *)g->a;
    _Alignas(64) int32_t buf[42 * 256]; /* R·m <= 42 (rows_r), or R = 1 and m <= ROWS_DOT_M */
    for (int64_t j = 0; j < len; j++) {
        if (m > ROWS_PAIRS_FROM && R > 1) rows_dot2(m, R, c->w->borrow.data + (s0 + j) * ld, span * ld, K, q, g->Kp, buf, (int)(j % 16));
        else rows_dot(m, R, c->w->borrow.data + (s0 + j) * ld, span * ld, K, q, g->Kp, buf, (int)(j % 16));
        if (j % 16 != 15 && j != len - 1) continue;
        const int cols = (int)(j % 16) + 1;
        for (int r = 0; r < R; r++)
            for (int i = 0; i < m; i++) {
                __m512i v[16];
                for (int jn = 0; jn < 16; jn++)
                    v[jn] = jn < cols ? _mm512_load_si512(buf + ((r * m + i) * 16 + jn) * 16) : _mm512_setzero_si512();
                const __m512i acc = _mm512_sub_epi32(hsum16(v), _mm512_set1_epi32((int32_t)((uint32_t)g->qsum[i] << 7)));
                qmm_z_epilogue16(c, acc, i, s0 + r * span + j - cols + 1, g->s[i], qmm_z_tail_mask(cols));
            }
    }
}

/* blocks [b0, b1) for m <= ROWS_DOT_M rows: R streams of ⌊rows / R⌋ rows, the rest one at a time */
static inline __attribute__((always_inline)) void rows_blocks(const int m, const qmm_i8_gemm *g, int64_t b0, int64_t b1) {
    const int R = rows_r(m);
    const int64_t N = g->c->N, n0 = b0 * 16, n1 = b1 * 16 < N ? b1 * 16 : N, len = (n1 - n0) / R;
    if (len > 0) rows_run(m, R, g, n0, len, len);
    if (n0 + R * len < n1) rows_run(m, 1, g, n0 + R * len, 0, n1 - n0 - R * len);
}

/* acc += Σ4 u8(a) · s8(the 4 bytes at p, broadcast to every lane) */
static inline __m512i dpbusd_bc(__m512i acc, __m512i a, const int8_t *p) {
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(a), "m"(*(const int32_t *)p));
    return acc;
}

/* The broadcast kernels' rows, per 64 bytes k of rows w, w + span, .. (R of them): the prefetch
 * and, when full, the row sums (rs[r] += VPDPBUSD(1, the 64 bytes)). */
static inline __attribute__((always_inline)) void bcast_head(const int full, const int R, const int8_t *w,
                                                             int64_t span, int64_t k, __m512i rs[]) {
    for (int r = 0; r < R; r++) {
        _mm_prefetch((const char *)(w + r * span + k + ROWS_PF), _MM_HINT_T1);
        if (full) rs[r] = dpbusd(rs[r], _mm512_set1_epi8(1), _mm512_loadu_si512(w + r * span + k));
    }
}

/* Their last bytes [K64, K) (K - K64 < 64; a masked load: nothing past K is read) into tail[r],
 * zero padded, and their row sums when full. */
static inline __attribute__((always_inline)) void bcast_tail(const int full, const int R, const int8_t *w,
                                                             int64_t span, int64_t K64, int64_t K,
                                                             int8_t tail[][64], __m512i rs[]) {
    const __mmask64 msk = ((__mmask64)1 << (K - K64)) - 1;
    for (int r = 0; r < R; r++) {
        const __m512i z = _mm512_maskz_loadu_epi8(msk, w + r * span + K64);
        _mm512_store_si512(tail[r], z);
        if (full) rs[r] = dpbusd(rs[r], _mm512_set1_epi8(1), z);
    }
}

/* How a broadcast kernel corrects its lanes (u8 q + 128 against W) by 128·Σ_k W[n][k]: from a
 * pad token's lane (q = 0: its lane is exactly that), from the row sums it computes (a
 * VPDPBUSD(1, the 64 bytes) per 64 bytes of the row), or from row sums given (computed by the
 * kernel's first token group on the same rows). */
enum { BC_PAD = 0, BC_SUMS = 1, BC_GIVEN = 2 };

/* v − 128·Σ_k W[n][k]: from the row sums rs unless BC_PAD, else from lane pad */
static inline __m512i bcast_correct(const int corr, __m512i v, __m512i rs, int pad) {
    return _mm512_sub_epi32(v, corr != BC_PAD ? _mm512_set1_epi32((int32_t)((uint32_t)_mm512_reduce_add_epi32(rs) << 7))
                                    : _mm512_permutexvar_epi32(_mm512_set1_epi32(pad), v));
}

/* W broadcast, tokens in lanes (yᵀ = W·xᵀ), one group of up to 16 tokens: the token copy ap
 * [kq][16][4] (u8 q + 128; lanes past the group's tokens hold 128, the value of q = 0) is one
 * zmm per k quad, and each 4 bytes of a W row are the s8 operand broadcast to the 16 lanes
 * (VPDPBUSD m32{1to16}): lane t of row n's accumulator is Σ_k (q[t][k] + 128)·W[n][k]. The
 * correction (corr): lane 15 when the group has < 16 tokens (BC_PAD); else the row sums rs,
 * computed here (BC_SUMS) or given (BC_GIVEN). R rows at once share each load of ap: per 64
 * bytes of W, 16 VPDPBUSD (+1 with BC_SUMS), 16/R loads of ap, a prefetch. out[r] lane t =
 * Σ_k q[t][k]·w_r[k] (mod 2^32). The last K bytes of a row go through a masked load into tail[]
 * (zero past K): nothing past W[n][K-1] is read. */
static inline __attribute__((always_inline)) void bcast_dot(const int corr, const int R, const int8_t *w,
                                                            int64_t span, int64_t K, const uint8_t *ap,
                                                            __m512i rs[], __m512i out[]) {
    const int full = corr == BC_SUMS; /* the row sums are computed here */
    __m512i acc[BCAST_RMAX];
    for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_si512();
    if (full)
        for (int r = 0; r < R; r++) rs[r] = _mm512_setzero_si512();
    const int64_t K64 = K & ~(int64_t)63;
    for (int64_t k = 0; k < K64; k += 64) {
        bcast_head(full, R, w, span, k, rs);
        for (int x = 0; x < 16; x++) {
            const __m512i t = _mm512_load_si512(ap + (k + 4 * x) * 16);
            for (int r = 0; r < R; r++) acc[r] = dpbusd_bc(acc[r], t, w + r * span + k + 4 * x);
        }
    }
    if (K64 < K) {
        _Alignas(64) int8_t tail[BCAST_RMAX][64];
        bcast_tail(full, R, w, span, K64, K, tail, rs);
        for (int x = 0; x < (K - K64 + 3) / 4; x++) {
            const __m512i t = _mm512_load_si512(ap + (K64 + 4 * x) * 16);
            for (int r = 0; r < R; r++) acc[r] = dpbusd_bc(acc[r], t, tail[r] + 4 * x);
        }
    }
    for (int r = 0; r < R; r++)
        out[r] = bcast_correct(corr, acc[r], rs[r], 15);
}

/* A group of up to 12 tokens in lane groups of 8 and 4, so that no VPDPBUSD works on more pad
 * lanes than the group needs: n8, tokens 0..7, two zmm per 16 k, 8 bytes each (token t at byte
 * 8t: k..k+7, then k+8..k+15), against 8 bytes of a W row broadcast to the 8 qwords
 * (VPBROADCASTQ m64); n4, the next 4 tokens, one zmm per 16 k, 16 bytes each (token t at byte
 * 16t: k..k+15), against the row's 16 bytes broadcast to the 4 lanes (VBROADCASTI32X4 m128). The
 * token copy holds, per 16 k, those 2·n8 + n4 zmm (u8 q + 128, pad tokens 128). Per 64 bytes of
 * W: 8·n8 + 4·n4 VPDPBUSD (+1 with BC_SUMS) and as many broadcast loads, where the 16-lane form
 * spends 16. Two accumulators for the 8-token group keep the dependency chains short. Kernels:
 * qmm_qd8_qc8w_gemm_ukernel_12x1c8__avx512vnni_bcast (n8 and n4), ..._8x1c8_.. (n8), ..._4x1c16_..
 * (n4). out[r] as bcast_dot: lane t = token t, corrected (corr as bcast_dot; the pad lane is the
 * last, 8·n8 + 4·n4 − 1). */
static inline __attribute__((always_inline)) void lanes_dot(const int n8, const int n4, const int corr, const int R,
                                                            const int8_t *w, int64_t span, int64_t K,
                                                            const uint8_t *ap, __m512i rs[], __m512i out[]) {
    const int full = corr == BC_SUMS, S = 64 * (2 * n8 + n4); /* bytes of the token copy per 16 k */
    __m512i a0[BCAST_RMAX], a1[BCAST_RMAX], b[BCAST_RMAX];
    for (int r = 0; r < R; r++) a0[r] = a1[r] = b[r] = _mm512_setzero_si512();
    if (full)
        for (int r = 0; r < R; r++) rs[r] = _mm512_setzero_si512();
#define LANES_STEP(WP, AP)                                                                                   \
    do {                                                                                                     \
        const __m512i t0 = n8 ? _mm512_load_si512(AP) : _mm512_setzero_si512();                             \
        const __m512i t1 = n8 ? _mm512_load_si512((AP) + 64) : t0;                                           \
        const __m512i t2 = n4 ? _mm512_load_si512((AP) + 128 * n8) : t0;                                     \
        for (int r = 0; r < R; r++) {                                                                        \
            if (n8) {                                                                                        \
                int64_t v0, v1;                                                                              \
                memcpy(&v0, (WP)[r], 8);                                                                     \
                memcpy(&v1, (WP)[r] + 8, 8);                                                                 \
                a0[r] = dpbusd(a0[r], t0, _mm512_set1_epi64(v0));                                            \
                a1[r] = dpbusd(a1[r], t1, _mm512_set1_epi64(v1));                                            \
            }                                                                                                \
            if (n4) b[r] = dpbusd(b[r], t2, _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(WP)[r]))); \
        }                                                                                                    \
    } while (0)
    const int64_t K64 = K & ~(int64_t)63;
    for (int64_t k = 0; k < K64; k += 64) {
        bcast_head(full, R, w, span, k, rs);
        for (int x = 0; x < 4; x++) {
            const int8_t *wp[BCAST_RMAX];
            for (int r = 0; r < R; r++) wp[r] = w + r * span + k + 16 * x;
            LANES_STEP(wp, ap + (k / 16 + x) * S);
        }
    }
    if (K64 < K) {
        _Alignas(64) int8_t tail[BCAST_RMAX][64];
        bcast_tail(full, R, w, span, K64, K, tail, rs);
        for (int x = 0; x < (K - K64 + 15) / 16; x++) {
            const int8_t *wp[BCAST_RMAX];
            for (int r = 0; r < R; r++) wp[r] = tail[r] + 16 * x;
            LANES_STEP(wp, ap + (K64 / 16 + x) * S);
        }
    }
#undef LANES_STEP
    /* 8-token group: dwords 2t, 2t + 1 are token t; 4-token group: dwords 4t .. 4t + 3 its token t */
    const __m512i i84 = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 20, 24, 28, 28, 28, 28, 28);
    const __m512i i8 = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 14, 14, 14, 14, 14, 14, 14, 14);
    const __m512i i4 = _mm512_setr_epi32(0, 4, 8, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12);
    for (int r = 0; r < R; r++) {
        __m512i sa = _mm512_add_epi32(a0[r], a1[r]), sb = b[r];
        sa = _mm512_add_epi32(sa, _mm512_shuffle_epi32(sa, _MM_PERM_CDAB));
        sb = _mm512_add_epi32(sb, _mm512_shuffle_epi32(sb, _MM_PERM_BADC));
        sb = _mm512_add_epi32(sb, _mm512_shuffle_epi32(sb, _MM_PERM_CDAB));
        const __m512i v = n8 && n4 ? _mm512_permutex2var_epi32(sa, i84, sb)
                          : n8     ? _mm512_permutexvar_epi32(i8, sa)
                                   : _mm512_permutexvar_epi32(i4, sb);
        out[r] = bcast_correct(corr, v, rs[r], 8 * n8 + 4 * n4 - 1);
    }
}

/* The lanes of a token group of r tokens (1..16): 16 (bcast_dot), else 12, 8 or 4 (lanes_dot).
 * Its token copy is Kp·lanes bytes. */
static inline int group_lanes(int64_t r) { return r > 12 ? 16 : r > 8 ? 12 : r > 4 ? 8 : 4; }

/* R streams of len rows each, stream r = rows s0 + r·span + j of W (j < len), against the m
 * tokens in ap. lay 12 (9 <= m <= 12): lanes_dot on one group of 12 lanes; lay 16 (13 <= m <= 16):
 * bcast_dot on one group; full: m = 12 or 16 (no pad lane: the kernel sums the rows). lay 0
 * (m > 16): G = ⌈m / 16⌉ groups, tokens 16·gi.. — the first G − 1 of 16 (bcast_dot, copy at
 * ap + gi·Kp·16), the last of group_lanes(its tokens) lanes (after them); the first group reads
 * the R rows from DRAM and sums them, the others read them again from L1/L2 and take those sums.
 * After every 16 rows of the streams (and after the last) each stream's rows are transposed (lanes
 * = tokens → lanes = columns) into the epilogue, 16 columns per token. */
static inline __attribute__((always_inline)) void bcast_run(const int lay, const int full, const int R,
                                                            const qmm_i8_gemm *g, int64_t s0, int64_t span,
                                                            int64_t len) {
    const qmm_call *c = g->c;
    const int64_t K = c->K, ld = c->w->borrow.ld, m = c->M, Kp = g->Kp;
    const int G = lay ? 1 : (int)((m + 15) / 16), L = group_lanes(m - 16 * (G - 1));
    const uint8_t *last = g->ap + (size_t)(G - 1) * (size_t)Kp * 16;
    _Alignas(64) int32_t stage[BCAST_G][BCAST_RMAX][16][16];
    for (int64_t j = 0; j < len; j++) {
        const int8_t *w = c->w->borrow.data + (s0 + j) * ld;
        const int64_t sp = span * ld;
        __m512i out[BCAST_RMAX], rs[BCAST_RMAX];
        if (lay == 12) lanes_dot(1, 1, full ? BC_SUMS : BC_PAD, R, w, sp, K, g->ap, rs, out);
        else bcast_dot(lay == 0 || full ? BC_SUMS : BC_PAD, R, w, sp, K, g->ap, rs, out);
        for (int r = 0; r < R; r++) _mm512_store_si512(stage[0][r][j % 16], out[r]);
        if (lay == 0) {
            for (int gi = 1; gi < G - 1; gi++) {
                bcast_dot(BC_GIVEN, R, w, sp, K, g->ap + (size_t)gi * (size_t)Kp * 16, rs, out);
                for (int r = 0; r < R; r++) _mm512_store_si512(stage[gi][r][j % 16], out[r]);
            }
            switch (L) {
            case 16: bcast_dot(BC_GIVEN, R, w, sp, K, last, rs, out); break;
            case 12: lanes_dot(1, 1, BC_GIVEN, R, w, sp, K, last, rs, out); break;
            case 8: lanes_dot(1, 0, BC_GIVEN, R, w, sp, K, last, rs, out); break;
            default: lanes_dot(0, 1, BC_GIVEN, R, w, sp, K, last, rs, out); break;
            }
            for (int r = 0; r < R; r++) _mm512_store_si512(stage[G - 1][r][j % 16], out[r]);
        }
        if (j % 16 != 15 && j != len - 1) continue;
        const int cols = (int)(j % 16) + 1;
        for (int gi = 0; gi < G; gi++)
            for (int r = 0; r < R; r++) {
                __m512i tr[16];
                qmm_z_n16k4_step((const int8_t *)stage[gi][r], 64, cols, 0, 64, tr); /* tr[t] lane jn = stage[gi][r][jn][t] */
                for (int64_t t = 16 * gi; t < m && t < 16 * gi + 16; t++)
                    qmm_z_epilogue16(c, tr[t - 16 * gi], t, s0 + r * span + j - cols + 1, g->s[t], qmm_z_tail_mask(cols));
            }
    }
}

/* blocks [b0, b1) for ROWS_DOT_M < M <= ROWS_M tokens (bcast_run): R streams of ⌊rows / R⌋ rows,
 * the rest one at a time */
static inline __attribute__((always_inline)) void bcast_blocks(const int lay, const int full, const int R,
                                                               const qmm_i8_gemm *g, int64_t b0, int64_t b1) {
    const int64_t N = g->c->N, n0 = b0 * 16, n1 = b1 * 16 < N ? b1 * 16 : N, len = (n1 - n0) / R;
    if (len > 0) bcast_run(lay, full, R, g, n0, len, len);
    if (n0 + R * len < n1) bcast_run(lay, full, 1, g, n0 + R * len, 0, n1 - n0 - R * len);
}

/* The driver's rows_kernel: 16-column blocks [b0, b1) of a borrowed weight, M <= ROWS_M. */
static void rows_kernel(const qmm_i8_gemm *g, int64_t b0, int64_t b1) {
    switch (g->c->M) {
    case 1: rows_blocks(1, g, b0, b1); break;
    case 2: rows_blocks(2, g, b0, b1); break;
    case 3: rows_blocks(3, g, b0, b1); break;
    case 4: rows_blocks(4, g, b0, b1); break;
    case 5: rows_blocks(5, g, b0, b1); break;
    case 6: rows_blocks(6, g, b0, b1); break;
    case 7: rows_blocks(7, g, b0, b1); break;
    case 8: rows_blocks(8, g, b0, b1); break;
    case 9: case 10: case 11: bcast_blocks(12, 0, LANES12_R, g, b0, b1); break;
    case 12: bcast_blocks(12, 1, LANES12_R, g, b0, b1); break;
    case 13: case 14: case 15: bcast_blocks(16, 0, BCAST_R, g, b0, b1); break;
    case 16: bcast_blocks(16, 1, BCAST_R, g, b0, b1); break;
    default: bcast_blocks(0, 1, BCAST_R, g, b0, b1); break; /* 17..ROWS_M: groups of 16 */
    }
}

/* The broadcast kernels' token copy (M > ROWS_DOT_M): one group of 9..16 tokens, Kp·lanes bytes;
 * above 16, ⌈M / 16⌉ − 1 groups of 16 and the last group (bcast_run). */
static int64_t rows_ap_bytes(int64_t M, int64_t Kp) {
    if (M <= ROWS_DOT_M) return 0;
    const int64_t G = (M + 15) / 16;
    return (G - 1) * Kp * 16 + Kp * group_lanes(M - 16 * (G - 1));
}

/* One group's copy at ap from its r tokens' rows q (Kp bytes apart, zero past K): u8 q + 128, pad
 * tokens 128 (q = 0). 16 lanes: per 64 k the 16 × 16 dword transpose of the rows (pad rows zero),
 * flipped; 12, 8, 4 lanes (lanes_dot's layout): per 16 k, masked qword gathers (tokens past r
 * zero), flipped. */
static void fill_group(const int8_t *q, int64_t Kp, int64_t r, uint8_t *ap) {
    const __m512i flip = _mm512_set1_epi8((char)0x80), z = _mm512_setzero_si512();
    const int L = group_lanes(r);
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

/* g->ap from q: each token group's copy in turn (rows_ap_bytes) */
static void rows_ap_fill(const qmm_i8_gemm *g) {
    const int64_t M = g->c->M, Kp = g->Kp;
    const int8_t *q = (const int8_t *)g->a;
    uint8_t *ap = g->ap;
    for (int64_t t0 = 0; t0 < M; t0 += 16) {
        const int64_t r = M - t0 < 16 ? M - t0 : 16;
        fill_group(q + t0 * Kp, Kp, r, ap);
        ap += Kp * group_lanes(r);
    }
}

/* ---------------------------------------------------------------- the driver's callbacks */
static void tile(const qmm_i8_gemm *g, const qmm_i8_tile *t) {
    vnni_tile(t->mr, t->nr, g, t->a, t->b, t->ldb, t->nq, t->part, t->first, t->last, t->r, t->n, t->colsum, t->pf_mode,
              t->pf, t->pf_step);
}

/* 7 ≤ M ≤ 24: all rows in one register tile (avx512_vnni_small.c) */
static int one_pass_rows(int64_t M) { return M >= 7 && M <= 24 ? qmm_vnni_small_rows(M) : 0; }

/* blocks [b0, b1) in one pass per tile (all rows, wblocks blocks); a tile that would run past the
 * weight's last block is left to the row tiles. */
static int64_t one_pass(const qmm_i8_gemm *g, int thread, int64_t b0, int64_t b1, int32_t *part) {
    const qmm_call *c = g->c;
    const int wblocks = qmm_vnni_small_blocks(g->wrows);
    const int64_t nblocks = c->w->i8.Np / 16;
    int32_t *cs = g->borrowed ? g->colsums + (int64_t)thread * NC : NULL;
    int64_t nb = b0;
    for (; nb < b1 && nb + wblocks <= nblocks; nb += wblocks) {
        qmm_i8_tile t;
        qmm_i8_get_panel(g, thread, nb, wblocks, 0, g->kq, cs, 1, &t);
        qmm_qd8_qc8w_gemm_ukernel_onepass_c4__avx512vnni(g->wrows, g->ap, t.b, t.ldb, g->kq, part);
        for (int64_t i = 0; i < c->M; i++)
            for (int jb = 0; jb < wblocks && nb + jb < b1; jb++)
                if ((nb + jb) * 16 < c->N)
                    store_out(c, t.colsum + jb * 16, _mm512_loadu_si512(part + i * NC + jb * 16), i, (nb + jb) * 16,
                              g->s[i]);
    }
    return nb < b1 ? nb - b0 : -1;
}

static const qmm_i8_engine k_vnni = {
    .u8 = 1, .mr = MR, .nrb = NRB, .mc = MC, .nc = NC, .kc = KC, .whole_k_m = SMALL_M,
    .tile = tile, .one_pass_rows = one_pass_rows, .one_pass = one_pass, .pack = pack_block,
    .rows_m = ROWS_M, .rows_kernel = rows_kernel, .rows_ap_bytes = rows_ap_bytes,
    .rows_ap_fill = rows_ap_fill,
};

/* Admission beside the kernel: the common int8 rules; this kernel has no extra limit (any M, N,
 * K, strides; -128 weights are exact with u8 × s8). */
static const char *admit(const qmm_call *c, char *why, size_t n) { return qmm_admit_common_int8(c, why, n); }

/* attention's int8 mode (avx512_vnni_attn.c) */
const char *qmm_avx512_vnni_attn_admit(const qmm_attn_call *c, char *why, size_t n);
qmm_status qmm_avx512_vnni_attn_run(qmm_context *ctx, const qmm_attn_call *c);

const qmm_engine_ops qmm_avx512_vnni_ops = {
    .built = 1, .admit = admit, .i8 = &k_vnni,
    .attn_admit = qmm_avx512_vnni_attn_admit, .attn_run = qmm_avx512_vnni_attn_run,
};
