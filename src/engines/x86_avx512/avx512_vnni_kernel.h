/*
 * avx512_vnni_kernel.h — what the AVX512-VNNI engine's kernel files share: VPDPBUSD
 * (qmm_vnni_dpbusd), the outputs of 16 columns (qmm_vnni_store_out) and the tile shape the tile
 * and one-pass kernels are written for (QMM_VNNI_MR × QMM_VNNI_NRB blocks, partial rows
 * QMM_VNNI_NC int32 apart). Its users: the kernels (avx512_vnni_gemm.c, avx512_vnni_small.c,
 * avx512_vnni_rows.c and avx512_vnni_bcast.h, avx512_vnni_attn.c) and the engine
 * (avx512_vnni.c: its descriptor follows the shape; its panel pack sums with VPDPBUSD). Nothing
 * here is the engine's: the engine file's own choices (blocking, regimes) stay in it. Include
 * only from files built with the engine's flags (QMM_FLAGS_AVX512_VNNI).
 */
#ifndef QMM_AVX512_VNNI_KERNEL_H
#define QMM_AVX512_VNNI_KERNEL_H

#include "int8_gemm.h"
#include "avx512/simd_avx512.h"

#include <immintrin.h>

enum {
    QMM_VNNI_MR = 6,   /* rows per tile (avx512_vnni_gemm.c) */
    QMM_VNNI_NRB = 4,  /* 16-column blocks per tile (64 columns) */
    QMM_VNNI_NC = 256  /* the partials' row stride in int32 (the engine's nc: columns per task) */
};

/* acc += Σ4 u8(a) · s8(b). Inline asm ties acc to one register: gcc 12's builtin adds two zmm
 * moves per VPDPBUSD in loops, which halves the kernel's issue rate. */
static inline __m512i qmm_vnni_dpbusd(__m512i acc, __m512i a, __m512i b) {
#ifdef QMM_SIMDE /* the test-only portable build (tests/simde.cmake): the intrinsic, emulated */
    return _mm512_dpbusd_epi32(acc, a, b);
#else
    __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
    return acc;
#endif
}

/* The outputs of 16 columns n.. of row r from their u8 × s8 sums: acc − 128·cs (cs: Σ_k W[n][k]
 * of those columns), then qmm_z_epilogue16 (simd_avx512.h), masked for the last columns. */
static inline void qmm_vnni_store_out(const qmm_call *c, const int32_t *cs, __m512i acc, int64_t r, int64_t n,
                                      float s_r) {
    acc = _mm512_sub_epi32(acc, _mm512_slli_epi32(_mm512_loadu_si512(cs), 7));
    qmm_z_epilogue16(c, acc, r, n, s_r, qmm_z_tail_mask(c->N - n));
}

#endif /* QMM_AVX512_VNNI_KERNEL_H */
