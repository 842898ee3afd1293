/*
 * avx512_vnni.h — what the AVX512-VNNI engine's files share: avx512_vnni.c (the engine: its
 * descriptor, admission, tile choice, one-pass adapter, panel pack), avx512_vnni_gemm.c (the tile
 * kernels), avx512_vnni_rows.c (the rows regime's kernels), avx512_vnni_w4a8.c and _vbmi.c (its
 * fused W4A8 kernels), avx512_vnni_small.c (the one-pass kernels). The kernels by name: ukernels.h. Include only from files built with the engine's
 * flags (QMM_FLAGS_AVX512_VNNI).
 */
#ifndef QMM_AVX512_VNNI_H
#define QMM_AVX512_VNNI_H

#include "int8_gemm.h"
#include "avx512/simd_avx512.h"

#include <immintrin.h>

enum {
    QMM_VNNI_MR = 6,     /* rows per tile */
    QMM_VNNI_NRB = 4,    /* 16-column blocks per tile (64 columns) */
    QMM_VNNI_KC = 512,   /* K chunk: a 64 × KC weight panel is 32 KiB (L1) */
    QMM_VNNI_MC = 192,   /* rows per task: MC × KC activation bytes = 96 KiB (L2) */
    QMM_VNNI_NC = 256,   /* columns per task: MC × NC int32 partials = 192 KiB (L2); a tile's rows NC apart */
    QMM_VNNI_SMALL_M = 3 * QMM_VNNI_MR, /* up to this M, no K chunks */
    QMM_VNNI_ROWS_M = 64 /* up to this M: the rows regime (avx512_vnni_rows.c) */
};

/* acc += Σ4 u8(a) · s8(b). Inline asm ties acc to one register: gcc 12's builtin adds two zmm
 * moves per VPDPBUSD in loops, which halves the kernel's issue rate. */
static inline __m512i qmm_vnni_dpbusd(__m512i acc, __m512i a, __m512i b) {
    __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
    return acc;
}

/* The outputs of 16 columns n.. of row r from their u8 × s8 sums: acc − 128·cs (cs: Σ_k W[n][k]
 * of those columns), then qmm_z_epilogue16 (simd_avx512.h), masked for the last columns. */
static inline void qmm_vnni_store_out(const qmm_call *c, const int32_t *cs, __m512i acc, int64_t r, int64_t n,
                                      float s_r) {
    acc = _mm512_sub_epi32(acc, _mm512_slli_epi32(_mm512_loadu_si512(cs), 7));
    qmm_z_epilogue16(c, acc, r, n, s_r, qmm_z_tail_mask(c->N - n));
}

/* The rows regime's token copy (ukernels.h, avx512_vnni_rows.c): its bytes for M tokens (0:
 * none), and its fill from g->a = q (qmm_i8_engine.rows_ap_bytes / rows_ap_fill). */
int64_t qmm_vnni_rows_ap_bytes(int64_t M, int64_t Kp);
void qmm_vnni_rows_ap_fill(const qmm_i8_gemm *g, int64_t r0, int64_t r1);
/* The rows kernels of the engine with the M each runs (qmm_i8_engine.rows_kernels). */
enum { QMM_VNNI_N_ROWS_KERNELS = 5 };
extern const qmm_i8_rows_ukernel qmm_vnni_rows_kernels[QMM_VNNI_N_ROWS_KERNELS];
/* Its W4A8 family (qmm_i8_engine.w4a8): the fused rows kernels of avx512_vnni_w4a8.c (4 and 6
 * bits) and avx512_vnni_w4a8_vbmi.c (6 bits with AVX512-VBMI). */
extern const qmm_w4_rows_kernels qmm_vnni_w4a8_kernels;

#endif /* QMM_AVX512_VNNI_H */
