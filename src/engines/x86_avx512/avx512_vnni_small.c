/*
 * avx512_vnni_small.c — the one-pass kernels of the AVX512-VNNI engine for 7 ≤ M ≤ 24 rows
 * (avx512_vnni_small.h; by name in ukernels.h): all the rows of the call in one register tile, so each weight byte
 * is read once, in one sequential stream per 16-column block, prefetched PF_n bytes ahead into
 * L1 (the M = 1 kernel's pattern, with more lines in flight).
 *
 *   tile    accumulators        per 4 k: weight loads, broadcasts, VPDPBUSD
 *   24 × 1  zmm0-23             1, 24, 24 (20 × 1: zmm0-19, 1, 20, 20)
 *   16 × 1  zmm0-15             1, 16, 16
 *   12 × 2  zmm0-23 (row i: 2i) 2, 12, 24
 *    8 × 3  zmm0-23 (row i: 3i) 3,  8, 24
 * Weights in zmm24-26, the broadcast in zmm28. Written in asm: gcc 12 spills tiles this size.
 * The activations come packed, ap [kq][rows][4] u8 (q + 128), so the broadcasts of one quad are
 * one 64-byte (or 48/32) line, read sequentially. The engine's one_pass (qmm_vnni_one_pass) runs
 * one tile and writes the outputs of its blocks the driver asks for.
 */
#include "avx512_vnni_kernel.h"
#include "avx512_vnni_small.h"
#include "ukernels.h"

#include <immintrin.h>

#define SV_(x) #x
#define SV(x) SV_(x)
/* prefetch distance per block stream, bytes, measured on one core streaming 77 MB (Zen 5):
 * 16 × 1 at 2/4/8/16 KiB: 19/24/29/29 GB/s; 12 × 2 at 1.5/2/4/6 KiB: 30/29/35/36; 8 × 3 at
 * 1.5/2/4/6 KiB: 34/37/36/32 */
#define PF_1 8192
#define PF_2 6144
#define PF_3 2048

#define S_ZERO(r) "vpxord %%zmm" #r ", %%zmm" #r ", %%zmm" #r "\n\t"
#define S_STORE(r, off) "vmovdqu32 %%zmm" #r ", " off "(%[c])\n\t"
#define S_BC(i) "vpbroadcastd " #i "*4(%[a]), %%zmm28\n\t"
#define S_DP(w, r) "vpdpbusd %%zmm" #w ", %%zmm28, %%zmm" #r "\n\t"

/* row i of each tile: its accumulators (the part row stride is 1024 bytes = 256 int32) */
_Static_assert(QMM_VNNI_NC == 256, "the stores below assume partial rows 256 int32 apart");
#define Z1(i, r0) S_ZERO(r0)
#define Z2(i, r0, r1) S_ZERO(r0) S_ZERO(r1)
#define Z3(i, r0, r1, r2) S_ZERO(r0) S_ZERO(r1) S_ZERO(r2)
#define T1(i, r0) S_STORE(r0, #i "*1024")
#define T2(i, r0, r1) S_STORE(r0, #i "*1024") S_STORE(r1, #i "*1024+64")
#define T3(i, r0, r1, r2) S_STORE(r0, #i "*1024") S_STORE(r1, #i "*1024+64") S_STORE(r2, #i "*1024+128")
#define D1(i, r0) S_BC(i) S_DP(24, r0)
#define D2(i, r0, r1) S_BC(i) S_DP(24, r0) S_DP(25, r1)
#define D3(i, r0, r1, r2) S_BC(i) S_DP(24, r0) S_DP(25, r1) S_DP(26, r2)

#define ROWS16(M)                                                                                 \
    M(0, 0) M(1, 1) M(2, 2) M(3, 3) M(4, 4) M(5, 5) M(6, 6) M(7, 7) M(8, 8) M(9, 9) M(10, 10)      \
    M(11, 11) M(12, 12) M(13, 13) M(14, 14) M(15, 15)
#define ROWS20(M) ROWS16(M) M(16, 16) M(17, 17) M(18, 18) M(19, 19)
#define ROWS24(M) ROWS20(M) M(20, 20) M(21, 21) M(22, 22) M(23, 23)
#define ROWS12(M)                                                                                 \
    M(0, 0, 1) M(1, 2, 3) M(2, 4, 5) M(3, 6, 7) M(4, 8, 9) M(5, 10, 11) M(6, 12, 13) M(7, 14, 15) \
    M(8, 16, 17) M(9, 18, 19) M(10, 20, 21) M(11, 22, 23)
#define ROWS8(M)                                                                                  \
    M(0, 0, 1, 2) M(1, 3, 4, 5) M(2, 6, 7, 8) M(3, 9, 10, 11) M(4, 12, 13, 14) M(5, 15, 16, 17)  \
    M(6, 18, 19, 20) M(7, 21, 22, 23)

#define PF1 "prefetcht0 " SV(PF_1) "(%[b])\n\t"
#define PF2 "prefetcht0 " SV(PF_2) "(%[b])\n\tprefetcht0 " SV(PF_2) "(%[b],%[ldb],1)\n\t"
#define PF3                                                                     \
    "prefetcht0 " SV(PF_3) "(%[b])\n\tprefetcht0 " SV(PF_3) "(%[b],%[ldb],1)\n\t" \
    "prefetcht0 " SV(PF_3) "(%[b],%[ldb],2)\n\t"
#define LD1 "vmovdqa32 (%[b]), %%zmm24\n\t"
#define LD2 LD1 "vmovdqa32 (%[b],%[ldb],1), %%zmm25\n\t"
#define LD3 LD2 "vmovdqa32 (%[b],%[ldb],2), %%zmm26\n\t"

/* The one-pass kernel NAME (spelled out in full where it is defined, below; qmm_vnni_onepass_fn):
 * the tile's rows (ROWS) with their zeroing Z, weight prefetch PF and loads LD, dot products D and
 * stores T of one block count; ASTEP bytes of ap per quad. */
#define S_KERNEL(NAME, ROWS, Z, PF, LD, D, T, ASTEP)                                                  \
    void NAME(const uint8_t *a, const int8_t *b, int64_t ldb, int64_t nq, int32_t *part) {            \
        __asm__ volatile(ROWS(Z) "test %[nq], %[nq]\n\t"                                              \
                                 "jz 9f\n\t"                                                          \
                                 "3:\n\t" PF LD ROWS(D) "add $64, %[b]\n\t"                           \
                                 "add $" #ASTEP ", %[a]\n\t"                                          \
                                 "dec %[nq]\n\t"                                                      \
                                 "jnz 3b\n\t"                                                         \
                                 "9:\n\t" ROWS(T)                                                     \
                         : [a] "+r"(a), [b] "+r"(b), [nq] "+r"(nq)                                    \
                         : [ldb] "r"(ldb), [c] "r"(part)                                              \
                         : "zmm0", "zmm1", "zmm2", "zmm3", "zmm4", "zmm5", "zmm6", "zmm7", "zmm8",     \
                           "zmm9", "zmm10", "zmm11", "zmm12", "zmm13", "zmm14", "zmm15", "zmm16",      \
                           "zmm17", "zmm18", "zmm19", "zmm20", "zmm21", "zmm22", "zmm23", "zmm24",     \
                           "zmm25", "zmm26", "zmm28", "memory", "cc");                                \
    }

S_KERNEL(qmm_qd8_qc8w_onepass_ukernel_24x16c4__avx512vnni, ROWS24, Z1, PF1, LD1, D1, T1, 96)
S_KERNEL(qmm_qd8_qc8w_onepass_ukernel_20x16c4__avx512vnni, ROWS20, Z1, PF1, LD1, D1, T1, 80)
S_KERNEL(qmm_qd8_qc8w_onepass_ukernel_16x16c4__avx512vnni, ROWS16, Z1, PF1, LD1, D1, T1, 64)
S_KERNEL(qmm_qd8_qc8w_onepass_ukernel_12x32c4__avx512vnni, ROWS12, Z2, PF2, LD2, D2, T2, 48)
S_KERNEL(qmm_qd8_qc8w_onepass_ukernel_8x48c4__avx512vnni, ROWS8, Z3, PF3, LD3, D3, T3, 32)

int qmm_vnni_small_rows(int64_t M) { return M <= 8 ? 8 : M <= 12 ? 12 : M <= 16 ? 16 : M <= 20 ? 20 : 24; }
int qmm_vnni_small_blocks(int rows) { return rows == 8 ? 3 : rows == 12 ? 2 : 1; }

qmm_vnni_onepass_fn qmm_vnni_small_kernel(int rows) {
    switch (rows) {
    case 8: return qmm_qd8_qc8w_onepass_ukernel_8x48c4__avx512vnni;
    case 12: return qmm_qd8_qc8w_onepass_ukernel_12x32c4__avx512vnni;
    case 16: return qmm_qd8_qc8w_onepass_ukernel_16x16c4__avx512vnni;
    case 20: return qmm_qd8_qc8w_onepass_ukernel_20x16c4__avx512vnni;
    default: return qmm_qd8_qc8w_onepass_ukernel_24x16c4__avx512vnni;
    }
}

int qmm_vnni_one_pass_rows(int64_t M, int *blocks) {
    if (M < 7 || M > 24) return 0;
    const int rows = qmm_vnni_small_rows(M);
    *blocks = qmm_vnni_small_blocks(rows);
    return rows;
}

/* one tile over all of K into t->part (rows QMM_VNNI_NC apart), then the outputs of its first
 * t->nr blocks for the t->mr rows */
void qmm_vnni_one_pass(const uint8_t *ap, int wrows, const float *s, const qmm_call *out, const qmm_i8_tile *t) {
    qmm_vnni_small_kernel(wrows)(ap, t->b, t->ldb, t->nq, t->part);
    for (int i = 0; i < t->mr; i++)
        for (int jb = 0; jb < t->nr; jb++)
            if (t->n + jb * 16 < out->N)
                qmm_vnni_store_out(out, t->colsum + jb * 16, _mm512_loadu_si512(t->part + i * QMM_VNNI_NC + jb * 16),
                                   t->r + i, t->n + jb * 16, s[i]);
}
