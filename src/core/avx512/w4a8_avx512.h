/*
 * w4a8_avx512.h — the AVX-512 (F + BW + VL) table lookups of a W4A8 weight's codes (w4a8.h's
 * decode table) and the table rows decoder built on them (qmm_w4_table_rows), shared by the row
 * decoders (w4a8_avx512.c, w4a8_avx512vbmi.c) and the fused rows kernels (avx512_vnni_w4a8.h).
 * Static inline; include only from files built with at least -mavx512f -mavx512bw -mavx512vl.
 *   qmm_w4_walk       one row's codes from some k on (a multiple of 16, group a multiple of 16):
 *                     qmm_w4_next64 the next 64 int8 values, qmm_w4_next16 the next 16, in k order,
 *                     each the table's entry of (the group's s_rel byte, the code);
 *   how 64 are found  4 bits: the 32 code bytes widened to words, the nibbles split by one shift
 *                     and one VPTERNLOGD; the 16-byte tables of the four runs of 16 (each in one
 *                     group) in the 4 lanes (groups of 16 or 32: the step's scale bytes in one
 *                     load, each table's offset shifted out of it); one VPSHUFB. 6 bits: the top
 *                     2 bits of each code widened from the high plane's 16 bytes; compiled with
 *                     AVX512-VBMI (__AVX512VBMI__: w4a8_avx512vbmi.c, avx512_vnni_w4a8_vbmi.c), the whole
 *                     codes index each run's 64-entry table, one VPERMB per table (masked to its
 *                     run's lanes); without, the four 16-entry quarters of the runs' tables each
 *                     looked up by VPSHUFB, the right one kept by two masked blends;
 *   per               tables per 64 weights: group 16 → 4 (one per lane), 32 → 2, a multiple of
 *                     64 → 1 (one broadcast), other multiples of 16 → 0 (counted run by run).
 */
#ifndef QMM_W4A8_AVX512_H
#define QMM_W4A8_AVX512_H

#include "w4a8.h"

#include <immintrin.h>

enum { QMM_W4_PF = 4096 }; /* prefetch distance in a long run's code bytes, into L2 (as the int8 rows kernels) */

static inline int qmm_w4_per(int gsz) { return gsz == 16 ? 4 : gsz == 32 ? 2 : gsz % 64 == 0 ? 1 : 0; }

/* 64 (or 16) nibbles of 32 (or 8) code bytes, one per byte in k order: the words b → (b & 15) | (b >> 4) << 8 */
static inline __m512i qmm_w4_nibbles64(const uint8_t *p) {
    const __m512i t = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_ternarylogic_epi32(t, _mm512_slli_epi16(t, 4), _mm512_set1_epi16(0x0f0f), 0xA8); /* (t | t<<4) & 0x0f0f */
}
static inline __m128i qmm_w4_nibbles16(const uint8_t *p) {
    const __m128i t = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)p));
    return _mm_ternarylogic_epi32(t, _mm_slli_epi16(t, 4), _mm_set1_epi16(0x0f0f), 0xA8);
}
/* the top 2 bits of 64 (or 16) 6-bit codes, one per byte: high-plane byte i holds k = 4i + t at bit 2t */
static inline __m512i qmm_w4_tops64(const uint8_t *p) {
    const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
    const __m512i a = _mm512_or_si512(v, _mm512_slli_epi32(v, 6));
    return _mm512_ternarylogic_epi32(a, _mm512_slli_epi32(a, 12), _mm512_set1_epi32(0x03030303), 0xA8);
}
static inline __m128i qmm_w4_tops16(const uint8_t *p) {
    int32_t h;
    __builtin_memcpy(&h, p, 4);
    const __m128i v = _mm_cvtepu8_epi32(_mm_cvtsi32_si128(h));
    const __m128i a = _mm_or_si128(v, _mm_slli_epi32(v, 6));
    return _mm_ternarylogic_epi32(a, _mm_slli_epi32(a, 12), _mm_set1_epi32(0x03030303), 0xA8);
}

/* The table of lane j (16 weights each) in a zmm: t[j] + 16·q (quarter q of a 6-bit table). */
static inline __attribute__((always_inline)) __m512i qmm_w4_lanes(const int per, const int8_t *const t[4], int q) {
    const __m128i *p0 = (const __m128i *)(t[0] + 16 * q);
    if (per == 1) return _mm512_broadcast_i32x4(_mm_load_si128(p0));
    if (per == 2) return _mm512_mask_broadcast_i32x4(_mm512_broadcast_i32x4(_mm_load_si128(p0)), 0xff00,
                                                     _mm_load_si128((const __m128i *)(t[2] + 16 * q)));
    __m512i tb = _mm512_castsi128_si512(_mm_load_si128(p0));
    tb = _mm512_inserti32x4(tb, _mm_load_si128((const __m128i *)(t[1] + 16 * q)), 1);
    tb = _mm512_inserti32x4(tb, _mm_load_si128((const __m128i *)(t[2] + 16 * q)), 2);
    return _mm512_inserti32x4(tb, _mm_load_si128((const __m128i *)(t[3] + 16 * q)), 3);
}

/* One row's walk: its next code bytes (cp), high-plane bytes (hp), group scale (sp) and the
 * place in that group (r, a multiple of 16). */
typedef struct qmm_w4_walk {
    const uint8_t *cp, *hp, *sp;
    const int8_t *lut;
    int64_t r;
    int gsz;
} qmm_w4_walk;

static inline void qmm_w4_walk_init(qmm_w4_walk *it, const qmm_w4_codes *w, const int8_t *lut, int64_t n,
                                    int64_t k) {
    const uint8_t *row = w->codes + n * w->ld;
    it->cp = row + k / 2;
    it->hp = row + w->K / 2 + k / 4;
    it->sp = w->s_rel + n * (w->K / w->group) + k / w->group;
    it->lut = lut;
    it->r = k % w->group;
    it->gsz = w->group;
}

/* the prefetch of the row's stream QMM_W4_PF code bytes ahead, for a call every 128 k (a line of
 * codes; of the s_rel bytes, a line when the walk enters one). Always inlined: as a function GCC
 * finds it pure (a prefetch has no effect it models) and drops every call before inlining. */
static inline __attribute__((always_inline)) void qmm_w4_prefetch(const qmm_w4_walk *it, int six) {
    _mm_prefetch((const char *)(it->cp + QMM_W4_PF), _MM_HINT_T1);
    if (six) _mm_prefetch((const char *)(it->hp + QMM_W4_PF / 2), _MM_HINT_T1);
    if (((uintptr_t)it->sp & 63) < 8) /* once per line: a call comes every 128 k, sp moves <= 8 bytes */
        _mm_prefetch((const char *)(it->sp + QMM_W4_PF / 8), _MM_HINT_T1);
}

static inline __attribute__((always_inline)) const int8_t *qmm_w4_run16(qmm_w4_walk *it, const int six) {
    const int8_t *t = it->lut + ((int64_t)it->sp[0] << (six ? 6 : 4));
    it->r += 16;
    if (it->r == it->gsz) { it->sp++; it->r = 0; }
    return t;
}

/* byte j of s times 2^sh (a table's offset; sh <= 8): one shift and one AND */
static inline int64_t qmm_w4_sbyte(uint32_t s, const int j, const int sh) {
    return (int64_t)(8 * j >= sh ? (s >> (8 * j - sh)) & (0xffu << sh) : (s << (sh - 8 * j)) & (0xffu << sh));
}

/* the next 64 weights (the walk at a multiple of 64 when per is 1) */
static inline __attribute__((always_inline)) __m512i qmm_w4_next64(qmm_w4_walk *it, const int six, const int per) {
    const int8_t *t[4];
    const int sh = six ? 6 : 4; /* a constant shift: SHL by CL is 3 uops */
    if (per == 4) { /* the 4 scale bytes in one load: a load per table, not two */
        uint32_t s4;
        __builtin_memcpy(&s4, it->sp, 4);
        for (int j = 0; j < 4; j++) t[j] = it->lut + qmm_w4_sbyte(s4, j, sh);
        it->sp += 4;
    } else if (per == 2) {
        uint16_t s2;
        __builtin_memcpy(&s2, it->sp, 2);
        t[0] = t[1] = it->lut + qmm_w4_sbyte(s2, 0, sh);
        t[2] = t[3] = it->lut + qmm_w4_sbyte(s2, 1, sh);
        it->sp += 2;
    } else if (per == 1) {
        t[0] = t[1] = t[2] = t[3] = it->lut + ((int64_t)it->sp[0] << sh);
        it->r += 64;
        if (it->r == it->gsz) { it->sp++; it->r = 0; }
    } else {
        for (int j = 0; j < 4; j++) t[j] = qmm_w4_run16(it, six);
    }
    const __m512i nib = qmm_w4_nibbles64(it->cp);
#ifdef __AVX512VBMI__
    if (six) { /* the 6-bit codes index each run's 64-entry table: one VPERMB per table */
        const __m512i idx = _mm512_or_si512(nib, _mm512_slli_epi16(qmm_w4_tops64(it->hp), 4));
        __m512i v = _mm512_permutexvar_epi8(idx, _mm512_load_si512(t[0]));
        if (per == 2) {
            v = _mm512_mask_permutexvar_epi8(v, ~(__mmask64)0 << 32, idx, _mm512_load_si512(t[2]));
        } else if (per != 1) {
            for (int j = 1; j < 4; j++)
                v = _mm512_mask_permutexvar_epi8(v, (__mmask64)0xffff << (16 * j), idx, _mm512_load_si512(t[j]));
        }
        it->cp += 32;
        it->hp += 16;
        return v;
    }
#endif
    __m512i v = _mm512_shuffle_epi8(qmm_w4_lanes(per, t, 0), nib);
    if (six) {
        const __m512i h = qmm_w4_tops64(it->hp);
        const __mmask64 m1 = _mm512_test_epi8_mask(h, _mm512_set1_epi8(1)), m2 = _mm512_test_epi8_mask(h, _mm512_set1_epi8(2));
        const __m512i a = _mm512_mask_blend_epi8(m1, v, _mm512_shuffle_epi8(qmm_w4_lanes(per, t, 1), nib));
        const __m512i b = _mm512_mask_blend_epi8(m1, _mm512_shuffle_epi8(qmm_w4_lanes(per, t, 2), nib),
                                                 _mm512_shuffle_epi8(qmm_w4_lanes(per, t, 3), nib));
        v = _mm512_mask_blend_epi8(m2, a, b);
    }
    it->cp += 32;
    it->hp += 16;
    return v;
}

/* the next 16 weights */
static inline __attribute__((always_inline)) __m128i qmm_w4_next16(qmm_w4_walk *it, const int six) {
    const int8_t *t = qmm_w4_run16(it, six);
    const __m128i nib = qmm_w4_nibbles16(it->cp);
#ifdef __AVX512VBMI__
    if (six) {
        const __m128i idx = _mm_or_si128(nib, _mm_slli_epi16(qmm_w4_tops16(it->hp), 4));
        it->cp += 8;
        it->hp += 4;
        return _mm512_castsi512_si128(_mm512_permutexvar_epi8(_mm512_zextsi128_si512(idx), _mm512_load_si512(t)));
    }
#endif
    __m128i v = _mm_shuffle_epi8(_mm_load_si128((const __m128i *)t), nib);
    if (six) {
        const __m128i h = qmm_w4_tops16(it->hp);
        const __mmask16 m1 = _mm_test_epi8_mask(h, _mm_set1_epi8(1)), m2 = _mm_test_epi8_mask(h, _mm_set1_epi8(2));
        const __m128i a = _mm_mask_blend_epi8(m1, v, _mm_shuffle_epi8(_mm_load_si128((const __m128i *)(t + 16)), nib));
        const __m128i b = _mm_mask_blend_epi8(m1, _mm_shuffle_epi8(_mm_load_si128((const __m128i *)(t + 32)), nib),
                                              _mm_shuffle_epi8(_mm_load_si128((const __m128i *)(t + 48)), nib));
        v = _mm_mask_blend_epi8(m2, a, b);
    }
    it->cp += 8;
    it->hp += 4;
    return v;
}

/* Row n, k [k0, k1), from the table (e4m3 s_rel, group a multiple of 16, k0 even; six, per as
 * w4a8_avx512.h): 16 weights at a time up to a multiple of 64 and at the end, 64 at a time
 * between (prefetching ahead in the row on a long run); the scalar decoder for what is not on
 * 16 k. */
static inline __attribute__((always_inline)) void qmm_w4_lut_row(const int six, const int per, const qmm_weight *w,
                                                          const int8_t *lut, int64_t n, int64_t k0, int64_t k1,
                                                          int8_t *dst) {
    int64_t k = (k0 + 15) / 16 * 16 < k1 ? (k0 + 15) / 16 * 16 : k1;
    if (k > k0) qmm_w4a8_decode_rows(w, lut, n, 1, k0, k, dst, 0);
    const int64_t k16 = k + (k1 - k) / 16 * 16, k64 = k16 / 64 * 64;
    const qmm_w4_codes wc = qmm_w4_codes_of(w);
    qmm_w4_walk it;
    qmm_w4_walk_init(&it, &wc, lut, n, k);
    for (; k < k16 && (k % 64 || k >= k64); k += 16) _mm_storeu_si128((__m128i *)(dst + (k - k0)), qmm_w4_next16(&it, six));
    const int pf = k1 - k0 > 1024; /* a long run (not a panel chunk): the row's stream prefetched ahead */
    for (; k + 128 <= k64; k += 128) {        /* two steps of 64 per prefetch */
        if (pf) qmm_w4_prefetch(&it, six);
        _mm512_storeu_si512(dst + (k - k0), qmm_w4_next64(&it, six, per));
        _mm512_storeu_si512(dst + (k - k0) + 64, qmm_w4_next64(&it, six, per));
    }
    if (k < k64) {
        _mm512_storeu_si512(dst + (k - k0), qmm_w4_next64(&it, six, per));
        k += 64;
    }
    for (; k < k16; k += 16) _mm_storeu_si128((__m128i *)(dst + (k - k0)), qmm_w4_next16(&it, six));
    if (k < k1) qmm_w4a8_decode_rows(w, lut, n, 1, k, k1, dst + (k - k0), 0);
}

/* rows [n0, n0 + rows) from the table, per and six fixed */
static inline __attribute__((always_inline)) void qmm_w4_lut_rows(const int six, const int per, const qmm_weight *w,
                                                           const int8_t *lut, int64_t n0, int64_t rows, int64_t k0,
                                                           int64_t k1, int8_t *dst, int64_t ld) {
    for (int64_t i = 0; i < rows; i++) qmm_w4_lut_row(six, per, w, lut, n0 + i, k0, k1, dst + i * ld);
}

enum { QMM_W4_BLOCK = 16 * 1024 }; /* up to this many weights in a call: the next block's lines prefetched */

/* Rows [n0, n0 + rows) × k [k0, k1) from the table into dst (ld bytes apart; e4m3 s_rel, groups of
 * a multiple of 16, k0 even): a block of short runs (a panel's) first prefetches the next block's
 * lines into L2. The body of the AVX-512 table decoders (w4a8_avx512.c; with VBMI's 6-bit
 * lookups, w4a8_avx512vbmi.c). */
static inline void qmm_w4_table_rows(const qmm_weight *w, const int8_t *lut, int64_t n0, int64_t rows, int64_t k0,
                                     int64_t k1, int8_t *dst, int64_t ld) {
    const int gsz = w->w4.group, six = w->w4.bits == 6, per = qmm_w4_per(gsz);
    if ((k1 - k0) * rows <= QMM_W4_BLOCK) {
        const int64_t G = w->K / gsz, n1 = n0 + 2 * rows < w->N ? n0 + 2 * rows : w->N;
        for (int64_t n = n0 + rows; n < n1; n++) {
            const uint8_t *row = w->w4.codes + n * w->w4.row_bytes;
            for (int64_t b = k0 / 2; b < (k1 + 1) / 2; b += 64) _mm_prefetch((const char *)(row + b), _MM_HINT_T1);
            if (six)
                for (int64_t b = k0 / 4; b < (k1 + 3) / 4; b += 64) _mm_prefetch((const char *)(row + w->K / 2 + b), _MM_HINT_T1);
            _mm_prefetch((const char *)((const uint8_t *)w->w4.s_rel + n * G + k0 / gsz), _MM_HINT_T1);
        }
    }
#define QMM_W4_LUT_ROWS(S, P) qmm_w4_lut_rows(S, P, w, lut, n0, rows, k0, k1, dst, ld)
    switch (six * 8 + per) {
    case 4: QMM_W4_LUT_ROWS(0, 4); break;
    case 2: QMM_W4_LUT_ROWS(0, 2); break;
    case 1: QMM_W4_LUT_ROWS(0, 1); break;
    case 0: QMM_W4_LUT_ROWS(0, 0); break;
    case 12: QMM_W4_LUT_ROWS(1, 4); break;
    case 10: QMM_W4_LUT_ROWS(1, 2); break;
    case 9: QMM_W4_LUT_ROWS(1, 1); break;
    default: QMM_W4_LUT_ROWS(1, 0); break;
    }
#undef QMM_W4_LUT_ROWS
}

#endif /* QMM_W4A8_AVX512_H */
