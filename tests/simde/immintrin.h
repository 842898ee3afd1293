/*
 * tests/simde/immintrin.h — the AVX-512 intrinsics in portable C for the test-only "simde" build
 * of the AVX-512 attention engines (tests/simde.cmake): the compiler's own <immintrin.h> (AVX2,
 * FMA, F16C: what every CPU that runs the tests has), then SIMDe's AVX-512 with its native
 * names, so a file written for AVX-512 compiles unchanged for AVX2 and runs anywhere, bit for bit
 * (integer and IEEE f32 operations are exact emulations). The few intrinsics SIMDe 0.7 lacks are
 * defined below from ones it has. Never part of the library: its engines keep their real flags.
 */
#ifndef QMM_SIMDE_SHIM
#define QMM_SIMDE_SHIM
#include_next <immintrin.h>
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>
#include <stdint.h>
#include <string.h>

/* 16 u16 → 16 u32 */
static inline __m512i qmm_simde_mm512_cvtepu16_epi32(__m256i a) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_cvtepu16_epi32(_mm256_castsi256_si128(a))),
                              _mm256_cvtepu16_epi32(_mm256_extracti128_si256(a, 1)), 1);
}
#undef _mm512_cvtepu16_epi32
#define _mm512_cvtepu16_epi32(a) qmm_simde_mm512_cvtepu16_epi32(a)

/* 16 f16 → 16 f32 (F16C per half: exact) */
static inline __m512 qmm_simde_mm512_cvtph_ps(__m256i a) {
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_cvtph_ps(_mm256_castsi256_si128(a))),
                              _mm256_cvtph_ps(_mm256_extracti128_si256(a, 1)), 1);
}
#undef _mm512_cvtph_ps
#define _mm512_cvtph_ps(a) qmm_simde_mm512_cvtph_ps(a)
/* Masked loads and stores touch only their lanes, as the hardware's (which never fault on a
 * masked-off lane: the engines read and write the tails of rows this way) */
#define QMM_SIMDE_MASKZ_LOAD(name, vec, elem, n, mtype)                                      \
    static inline vec qmm_simde_##name(mtype k, const void *p) {                              \
        elem x[n] = {0};                                                                      \
        for (int i = 0; i < n; i++)                                                           \
            if ((k >> i) & 1) memcpy(&x[i], (const char *)p + i * sizeof(elem), sizeof(elem)); \
        vec v;                                                                                \
        memcpy(&v, x, sizeof v);                                                              \
        return v;                                                                             \
    }
#define QMM_SIMDE_MASK_STORE(name, vec, elem, n, mtype)                                \
    static inline void qmm_simde_##name(void *p, mtype k, vec v) {                     \
        elem x[n];                                                                     \
        memcpy(x, &v, sizeof v);                                                       \
        for (int i = 0; i < n; i++)                                                    \
            if ((k >> i) & 1) memcpy((char *)p + i * sizeof(elem), &x[i], sizeof(elem)); \
    }
QMM_SIMDE_MASKZ_LOAD(mm512_maskz_loadu_ps, __m512, float, 16, __mmask16)
QMM_SIMDE_MASKZ_LOAD(mm256_maskz_loadu_epi16, __m256i, uint16_t, 16, __mmask16)
QMM_SIMDE_MASKZ_LOAD(mm_maskz_loadu_epi8, __m128i, uint8_t, 16, __mmask16)
QMM_SIMDE_MASK_STORE(mm512_mask_storeu_ps, __m512, float, 16, __mmask16)
QMM_SIMDE_MASK_STORE(mm512_mask_storeu_epi32, __m512i, uint32_t, 16, __mmask16)
QMM_SIMDE_MASK_STORE(mm512_mask_storeu_epi8, __m512i, uint8_t, 64, __mmask64)
QMM_SIMDE_MASK_STORE(mm256_mask_storeu_epi16, __m256i, uint16_t, 16, __mmask16)
static inline __m512 qmm_simde_mm512_mask_loadu_ps(__m512 src, __mmask16 k, const void *p) {
    return _mm512_mask_mov_ps(src, k, qmm_simde_mm512_maskz_loadu_ps(k, p));
}
#undef _mm512_maskz_loadu_ps
#define _mm512_maskz_loadu_ps(k, p) qmm_simde_mm512_maskz_loadu_ps(k, p)
#undef _mm256_maskz_loadu_epi16
#define _mm256_maskz_loadu_epi16(k, p) qmm_simde_mm256_maskz_loadu_epi16(k, p)
#undef _mm_maskz_loadu_epi8
#define _mm_maskz_loadu_epi8(k, p) qmm_simde_mm_maskz_loadu_epi8(k, p)
#undef _mm512_mask_loadu_ps
#define _mm512_mask_loadu_ps(s, k, p) qmm_simde_mm512_mask_loadu_ps(s, k, p)
#undef _mm512_mask_storeu_ps
#define _mm512_mask_storeu_ps(p, k, v) qmm_simde_mm512_mask_storeu_ps(p, k, v)
#undef _mm512_mask_storeu_epi32
#define _mm512_mask_storeu_epi32(p, k, v) qmm_simde_mm512_mask_storeu_epi32(p, k, v)
#undef _mm512_mask_storeu_epi8
#define _mm512_mask_storeu_epi8(p, k, v) qmm_simde_mm512_mask_storeu_epi8(p, k, v)
#undef _mm256_mask_storeu_epi16
#define _mm256_mask_storeu_epi16(p, k, v) qmm_simde_mm256_mask_storeu_epi16(p, k, v)
/* within each 128-bit lane, as VPERMILPS imm */
#undef _mm512_permute_ps
#define _mm512_permute_ps(a, imm) _mm512_shuffle_ps((a), (a), (imm))
/* unsigned a > b: signed after flipping the sign bits */
static inline __mmask16 qmm_simde_mm512_cmpgt_epu32_mask(__m512i a, __m512i b) {
    const __m512i s = _mm512_set1_epi32((int)0x80000000u);
    return _mm512_cmpgt_epi32_mask(_mm512_xor_si512(a, s), _mm512_xor_si512(b, s));
}
#undef _mm512_cmpgt_epu32_mask
#define _mm512_cmpgt_epu32_mask(a, b) qmm_simde_mm512_cmpgt_epu32_mask(a, b)
/* 128-bit lanes: the low two of a, the high two of b, picked by imm's 2-bit fields */
static inline __m512 qmm_simde_mm512_shuffle_f32x4(__m512 a, __m512 b, int imm) {
    float x[16], y[16], r[16];
    memcpy(x, &a, 64);
    memcpy(y, &b, 64);
    for (int l = 0; l < 4; l++) memcpy(r + 4 * l, (l < 2 ? x : y) + 4 * ((imm >> (2 * l)) & 3), 16);
    __m512 v;
    memcpy(&v, r, 64);
    return v;
}
#undef _mm512_shuffle_f32x4
#define _mm512_shuffle_f32x4(a, b, imm) qmm_simde_mm512_shuffle_f32x4(a, b, imm)
/* 16 f32 → 16 f16 (F16C per half) */
#undef _mm512_cvtps_ph
#define _mm512_cvtps_ph(a, imm)                                                                            \
    _mm256_setr_m128i(_mm256_cvtps_ph(_mm512_castps512_ps256(a), imm),                                      \
                      _mm256_cvtps_ph(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)), imm))
/* 16 i32 → 16 i16, truncated */
static inline __m256i qmm_simde_mm512_cvtepi32_epi16(__m512i a) {
    int32_t x[16];
    int16_t r[16];
    memcpy(x, &a, 64);
    for (int i = 0; i < 16; i++) r[i] = (int16_t)(uint16_t)(uint32_t)x[i];
    __m256i v;
    memcpy(&v, r, 32);
    return v;
}
#undef _mm512_cvtepi32_epi16
#define _mm512_cvtepi32_epi16(a) qmm_simde_mm512_cvtepi32_epi16(a)
/* lane-wise helpers through arrays */
#define QMM_SIMDE_LANES(fn, rt, rn, re, at, an, ae, expr)      \
    static inline rt qmm_simde_##fn(at a) {                    \
        ae x[an];                                              \
        re r[rn] = {0};                                        \
        memcpy(x, &a, sizeof a);                               \
        for (int i = 0; i < an; i++) r[i] = (expr);            \
        rt v;                                                  \
        memset(&v, 0, sizeof v);                               \
        memcpy(&v, r, sizeof r < sizeof v ? sizeof r : sizeof v); \
        return v;                                              \
    }
/* VPMOVDB: 16 i32 → 16 i8, truncated */
QMM_SIMDE_LANES(mm512_cvtepi32_epi8, __m128i, 16, int8_t, __m512i, 16, int32_t, (int8_t)(uint8_t)(uint32_t)x[i])
#undef _mm512_cvtepi32_epi8
#define _mm512_cvtepi32_epi8(a) qmm_simde_mm512_cvtepi32_epi8(a)
/* VCVTPS2DQ under the default rounding (nearest even; NaN and out of range → INT_MIN) */
static inline int32_t qmm_simde_cvt_rne(float f) {
    if (!(f > -2147483648.5f && f < 2147483648.0f)) return INT32_MIN;
    return (int32_t)_mm_cvtss_si32(_mm_set_ss(f));
}
QMM_SIMDE_LANES(mm512_cvtps_epi32, __m512i, 16, int32_t, __m512, 16, float, qmm_simde_cvt_rne(x[i]))
#undef _mm512_cvtps_epi32
#define _mm512_cvtps_epi32(a) qmm_simde_mm512_cvtps_epi32(a)
/* 16 u8 → 16 i32 */
QMM_SIMDE_LANES(mm512_cvtepu8_epi32, __m512i, 16, int32_t, __m128i, 16, uint8_t, (int32_t)x[i])
#undef _mm512_cvtepu8_epi32
#define _mm512_cvtepu8_epi32(a) qmm_simde_mm512_cvtepu8_epi32(a)
/* reductions in the order of gcc's <avx512fintrin.h> (high half op low half, then within the
 * 128 bits {2,3,0,1}, then {1,0}): the same bits as the native build; max as VMAXPS, a > b ? a : b */
static inline float qmm_simde_max1(float a, float b) { return a > b ? a : b; }
static inline float qmm_simde_mm512_reduce_max_ps(__m512 a) {
    float x[16], t[8], u[4];
    memcpy(x, &a, 64);
    for (int i = 0; i < 8; i++) t[i] = qmm_simde_max1(x[i + 8], x[i]);
    for (int i = 0; i < 4; i++) u[i] = qmm_simde_max1(t[i + 4], t[i]);
    const float w0 = qmm_simde_max1(u[0], u[2]), w1 = qmm_simde_max1(u[1], u[3]);
    return qmm_simde_max1(w0, w1);
}
#undef _mm512_reduce_max_ps
#define _mm512_reduce_max_ps(a) qmm_simde_mm512_reduce_max_ps(a)
static inline int qmm_simde_mm512_reduce_add_epi32(__m512i a) {
    uint32_t x[16], s = 0;
    memcpy(x, &a, 64);
    for (int i = 0; i < 16; i++) s += x[i];
    return (int)s;
}
#undef _mm512_reduce_add_epi32
#define _mm512_reduce_add_epi32(a) qmm_simde_mm512_reduce_add_epi32(a)
static inline float qmm_simde_mm512_reduce_add_ps(__m512 a) {
    float x[16], t[8], u[4];
    memcpy(x, &a, 64);
    for (int i = 0; i < 8; i++) t[i] = x[i + 8] + x[i];
    for (int i = 0; i < 4; i++) u[i] = t[i + 4] + t[i];
    return (u[0] + u[2]) + (u[1] + u[3]);
}
#undef _mm512_reduce_add_ps
#define _mm512_reduce_add_ps(a) qmm_simde_mm512_reduce_add_ps(a)
/* 16 i32 → 16 f32, nearest even */
QMM_SIMDE_LANES(mm512_cvtepi32_ps, __m512, 16, float, __m512i, 16, int32_t, (float)x[i])
#undef _mm512_cvtepi32_ps
#define _mm512_cvtepi32_ps(a) qmm_simde_mm512_cvtepi32_ps(a)
/* VCVTTPS2DQ: toward zero; NaN and out of range → INT_MIN */
static inline int32_t qmm_simde_cvt_trunc(float f) {
    return f > -2147483649.0f && f < 2147483648.0f ? (int32_t)f : INT32_MIN;
}
QMM_SIMDE_LANES(mm512_cvttps_epi32, __m512i, 16, int32_t, __m512, 16, float, qmm_simde_cvt_trunc(x[i]))
#undef _mm512_cvttps_epi32
#define _mm512_cvttps_epi32(a) qmm_simde_mm512_cvttps_epi32(a)
/* AVX-VNNI's VPDPBUSD ymm (the VEX form of AVX512-VNNI's): the same sums */
#undef _mm256_dpbusd_avx_epi32
#define _mm256_dpbusd_avx_epi32(acc, a, b) simde_mm256_dpbusd_epi32(acc, a, b)
#endif
