/*
 * w4a8.h — decoding a borrowed W4A8 / W6A8 weight (qmm_weight_borrow_w4a8, SPEC §11) into the
 * int8 values the engines multiply: per row (the rows regime, the float fallback) and per 16-row
 * block into the n16k4 panel of one K chunk (the int8 driver's per-call panels). The values are
 * qmm_w4a8_at's (qmm_internal.h) bit for bit; every vector decoder reproduces them.
 */
#ifndef QMM_W4A8_H
#define QMM_W4A8_H

#include "qmm_internal.h"

/* dst[k - k0] = W[n][k] for k in [k0, k1) (k0 even; reads only row n's code bytes and group scales
 * of that range). */
void qmm_w4a8_decode_row(const qmm_weight *w, int64_t n, int64_t k0, int64_t k1, int8_t *dst);
typedef void (*qmm_w4a8_decode_fn)(const qmm_weight *w, int64_t n, int64_t k0, int64_t k1, int8_t *dst);
/* its AVX-512 form (w4a8_avx512.c): the same bits */
extern const qmm_w4a8_decode_fn qmm_w4a8_decode_row_avx512_ptr;
/* the fastest decoder the context's core SIMD level runs */
qmm_w4a8_decode_fn qmm_w4a8_decoder(const qmm_context *ctx);

/* Packs rows [n0, n0 + rows) (rows <= 16; the rest zero) × k [k0, k1) of a W4A8 weight (k0 a
 * multiple of 4, k1 <= K) into dst [nq][16][4] (quads past k1 zero), as qmm_pack_n16k4_fn does for
 * int8 rows: cs[0..16) = (first ? 0 : cs) + Σ of each row's values when cs != NULL. The decoded
 * values lie in [-127, 127]: no -128. */
typedef void (*qmm_w4a8_pack_fn)(const qmm_weight *w, int64_t n0, int rows, int64_t k0, int64_t k1, int8_t *dst,
                                 int64_t nq, int32_t *cs, int first);
void qmm_w4a8_pack_block_ref(const qmm_weight *w, int64_t n0, int rows, int64_t k0, int64_t k1, int8_t *dst,
                             int64_t nq, int32_t *cs, int first);

#endif /* QMM_W4A8_H */
