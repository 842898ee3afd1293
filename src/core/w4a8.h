/*
 * w4a8.h — decoding a borrowed W4A8 / W6A8 weight (qmm_weight_borrow_w4a8, SPEC §11) into the
 * int8 values the engines multiply: per row (qmm_weight_int8_rows) and per block of rows into a
 * row-major buffer (the int8 driver's rows regime, and the per-call panels of the int8 and float
 * drivers, panel.h). The values are qmm_w4a8_at's
 * (qmm_internal.h) bit for bit; every decoder reproduces them.
 *
 * The decode table. A weight with e4m3 s_rel has 256 possible scales, so each (s_rel byte b,
 * code c) pair has one int8 value, qmm_w4a8_value(level(c), e4m3(b)): a call builds the table of
 * all of them once (qmm_w4a8_lut_fill: 256 × 2^bits bytes, from the codebook as it is at that
 * call) and the vector decoders look the codes up in it (VPSHUFB) instead of multiplying and
 * rounding each weight. The table is the definition evaluated on every input: the same bits.
 */
#ifndef QMM_W4A8_H
#define QMM_W4A8_H

#include "qmm_internal.h"

enum { QMM_W4A8_LUT_BYTES = 256 * 64 }; /* the largest table (6 bits) */

/* A W4A8 / W6A8 weight's codes as the table lookups walk them (the weight's w4 fields with e4m3
 * s_rel): row n at codes + n·ld, K/2 bytes of 4-bit codes (k even: the low nibble), then for 6
 * bits K/4 bytes of the codes' top 2 bits (k = 4i + t at bit 2t of byte i); row n's group scales
 * (e4m3 bytes, one per group of `group` k) at s_rel + n·(K/group). */
typedef struct qmm_w4_codes {
    const uint8_t *codes;
    int64_t ld;            /* bytes between rows: K·bits/8 */
    const uint8_t *s_rel;
    int64_t K;
    int bits;              /* 4 or 6 */
    int group;
} qmm_w4_codes;

static inline qmm_w4_codes qmm_w4_codes_of(const qmm_weight *w) {
    const qmm_w4_codes c = {.codes = w->w4.codes, .ld = w->w4.row_bytes, .s_rel = (const uint8_t *)w->w4.s_rel,
                            .K = w->K, .bits = w->w4.bits, .group = w->w4.group};
    return c;
}

/* lut[b · 2^bits + c] = qmm_w4a8_value(qmm_w4a8_level(w, c), qmm_e4m3_to_f32(b)) for every byte b
 * and code c (w's s_rel e4m3; lut 64-byte aligned, QMM_W4A8_LUT_BYTES). The scalar form and the
 * fastest the context's core SIMD level runs (qmm_w4a8_lut_filler). */
typedef void (*qmm_w4a8_lut_fn)(const qmm_weight *w, int8_t *lut);
void qmm_w4a8_lut_fill(const qmm_weight *w, int8_t *lut);
qmm_w4a8_lut_fn qmm_w4a8_lut_filler(const qmm_context *ctx);

/* dst[k - k0] = W[n][k] for k in [k0, k1) (k0 even; reads only row n's code bytes and group scales
 * of that range). The arithmetic form (qmm_w4a8_value per weight). */
void qmm_w4a8_decode_row(const qmm_weight *w, int64_t n, int64_t k0, int64_t k1, int8_t *dst);

/* dst[i·ld + k - k0] = W[n0 + i][k] for i < rows, k in [k0, k1) (k0 even; reads only those rows'
 * code bytes and group scales of that range). lut: the call's table (e4m3 s_rel) or NULL (the
 * arithmetic). The scalar form, and the fastest the context's core SIMD level runs
 * (qmm_w4a8_decoder; its AVX-512 form in w4a8_avx512.c, with VBMI in w4a8_avx512vbmi.c, its AVX2
 * form in w4a8_avx2.c). */
typedef void (*qmm_w4a8_rows_fn)(const qmm_weight *w, const int8_t *lut, int64_t n0, int64_t rows, int64_t k0,
                                 int64_t k1, int8_t *dst, int64_t ld);
void qmm_w4a8_decode_rows(const qmm_weight *w, const int8_t *lut, int64_t n0, int64_t rows, int64_t k0, int64_t k1,
                          int8_t *dst, int64_t ld);
extern const qmm_w4a8_rows_fn qmm_w4a8_decode_rows_avx512_ptr;
extern const qmm_w4a8_rows_fn qmm_w4a8_decode_rows_avx512vbmi_ptr; /* with VBMI's 6-bit lookups */
extern const qmm_w4a8_rows_fn qmm_w4a8_decode_rows_avx2_ptr;
extern const qmm_w4a8_lut_fn qmm_w4a8_lut_fill_avx2_ptr;
extern const qmm_w4a8_lut_fn qmm_w4a8_lut_fill_avx512_ptr;
qmm_w4a8_rows_fn qmm_w4a8_decoder(const qmm_context *ctx);

/* Do ctx's W4A8 lookups use AVX512-VBMI (VPERMB on 6-bit codes)? When the context runs AVX-512
 * core code, the CPU has VBMI and the environment does not say QMM_W4A8_VBMI=0 (read once per
 * process: the other path checked on a VBMI machine). */
int qmm_w4a8_vbmi(const qmm_context *ctx);

/* The rows the int8 driver's rows regime decodes at a time (a multiple of 16, 16 to 128): about
 * 256 KiB of decoded rows of Kp bytes, so they are still in L2 when the rows kernel reads them. */
static inline int64_t qmm_w4a8_rows_step(int64_t Kp) {
    const int64_t r = ((int64_t)256 << 10) / Kp / 16 * 16;
    return r < 16 ? 16 : r > 128 ? 128 : r;
}

#endif /* QMM_W4A8_H */
