/*
 * pack_avx512.h — packing a borrowed int8 weight (the caller's [N][ld] rows) into the n16k4
 * layout of qmm_internal.h per call, one 16-row block at a time, with AVX-512 F + BW only (so that
 * every AVX-512 engine may include it: avx512_vnni, the AMX engines, avx512_bf16, avx512_f32).
 * Static inline; include only from files built with at least -mavx512f -mavx512bw.
 *   qmm_z_n16k4_step  64 bytes of K of 16 rows → 16 n16k4 rows (a 16 × 16 dword transpose);
 *                     masked loads: nothing past the given bytes is read
 *   qmm_z_pack_n16k4  one 16-row block over a K range → [nq][16][4] (a qmm_pack_n16k4_fn,
 *                     panel.h, for kernels that read no column sums and are exact with -128)
 */
#ifndef QMM_PACK_AVX512_H
#define QMM_PACK_AVX512_H

#include <immintrin.h>
#include <stdint.h>

/* Bytes [k, k + bytes) (bytes <= 64; masked loads: nothing past them is read) of rows 0..rows-1
 * of W (row stride ld; rows < 16: the others are zero) → out[q] = k-quad q of the 16 rows (lane j:
 * row j's 4 bytes), q < 16, zero past the bytes. */
static inline void qmm_z_n16k4_step(const int8_t *W, int64_t ld, int rows, int64_t k, int64_t bytes, __m512i out[16]) {
    const __mmask64 m = bytes >= 64 ? ~(__mmask64)0 : bytes > 0 ? ((__mmask64)1 << bytes) - 1 : 0;
    __m512i r[16];
    for (int j = 0; j < 16; j++) r[j] = j < rows ? _mm512_maskz_loadu_epi8(m, W + j * ld + k) : _mm512_setzero_si512();
    for (int j = 0; j < 16; j += 2) { /* lane l: rows j, j+1, dwords 4l..4l+3 interleaved */
        out[j] = _mm512_unpacklo_epi32(r[j], r[j + 1]);
        out[j + 1] = _mm512_unpackhi_epi32(r[j], r[j + 1]);
    }
    for (int g = 0; g < 4; g++) { /* r[4g + x], lane l: rows 4g..4g+3, dword 4l + x */
        r[4 * g + 0] = _mm512_unpacklo_epi64(out[4 * g], out[4 * g + 2]);
        r[4 * g + 1] = _mm512_unpackhi_epi64(out[4 * g], out[4 * g + 2]);
        r[4 * g + 2] = _mm512_unpacklo_epi64(out[4 * g + 1], out[4 * g + 3]);
        r[4 * g + 3] = _mm512_unpackhi_epi64(out[4 * g + 1], out[4 * g + 3]);
    }
    for (int x = 0; x < 4; x++) { /* out[4l + x] = lane l of r[x], r[4 + x], r[8 + x], r[12 + x] */
        const __m512i v0 = _mm512_shuffle_i32x4(r[x], r[4 + x], 0x44), v1 = _mm512_shuffle_i32x4(r[x], r[4 + x], 0xEE);
        const __m512i w0 = _mm512_shuffle_i32x4(r[8 + x], r[12 + x], 0x44), w1 = _mm512_shuffle_i32x4(r[8 + x], r[12 + x], 0xEE);
        out[x] = _mm512_shuffle_i32x4(v0, w0, 0x88);
        out[4 + x] = _mm512_shuffle_i32x4(v0, w0, 0xDD);
        out[8 + x] = _mm512_shuffle_i32x4(v1, w1, 0x88);
        out[12 + x] = _mm512_shuffle_i32x4(v1, w1, 0xDD);
    }
}

/* Rows 0..rows-1 of W, bytes [k0, k1) (k0 a multiple of 4) → dst [nq][16][4] (64-byte aligned;
 * quads past k1 zero); cs, first and neg128 are left alone (qmm_pack_n16k4_fn). */
static inline void qmm_z_pack_n16k4(const int8_t *W, int64_t ld, int rows, int64_t k0, int64_t k1, int8_t *dst, int64_t nq,
                                    int32_t *cs, int first, int *neg128) {
    (void)cs;
    (void)first;
    (void)neg128;
    for (int64_t q0 = 0; q0 < nq; q0 += 16) {
        __m512i out[16];
        const int64_t k = k0 + q0 * 4;
        qmm_z_n16k4_step(W, ld, rows, k, k1 - k < 64 ? k1 - k : 64, out);
        const int64_t nout = nq - q0 < 16 ? nq - q0 : 16;
        for (int64_t q = 0; q < nout; q++) _mm512_store_si512(dst + (q0 + q) * 64, out[q]);
    }
}

#endif /* QMM_PACK_AVX512_H */
