/*
 * panel.h — the weight panels of an int8 weight as both GEMM drivers read them (int8_gemm.c,
 * float_gemm.c): nr 16-column blocks over nq k quads in the n16k4 layout of qmm_internal.h
 * (block [nq][16][4]: quad q of column j at byte q·64 + j·4). An owned weight's panel is its
 * packing, in place (blocks Kp·16 bytes apart, the weight's column sums); a borrowed weight's
 * (w->borrowed) is packed per call into the driver's buffer (blocks nq·64 bytes apart): the
 * caller's int8 rows by the engine's qmm_pack_n16k4_fn, or a W4A8 weight's codes decoded
 * (w4a8.h). One scalar reference packer, qmm_pack_n16k4_ref, serves every engine without its own
 * and is the packing of qmm_weight_create_int8 (qmm_pack_i8_rows). Plain C11.
 */
#ifndef QMM_PANEL_H
#define QMM_PANEL_H

#include "qmm_internal.h"
#include "w4a8.h"

/* Packs one 16-row block of int8 rows for one K range: rows [0, rows) of W (row stride ld; rows <
 * 16: the rest are zero), bytes [k0, k1) of each (k0 a multiple of 4; nothing past k1 is read),
 * into dst [nq][16][4] (64-byte aligned; quads past the bytes zero). Unless cs is NULL, cs[0..16)
 * = (first ? 0 : cs) + Σ of each row's bytes (mod 2^32); *neg128 |= some byte is -128. An engine
 * whose kernels are exact with -128 weights may leave the flag alone, and one whose kernels read
 * no column sums may leave cs alone; a pack a float engine gives gets cs = NULL. */
typedef void (*qmm_pack_n16k4_fn)(const int8_t *W, int64_t ld, int rows, int64_t k0, int64_t k1, int8_t *dst,
                                  int64_t nq, int32_t *cs, int first, int *neg128);
void qmm_pack_n16k4_ref(const int8_t *W, int64_t ld, int rows, int64_t k0, int64_t k1, int8_t *dst, int64_t nq,
                        int32_t *cs, int first, int *neg128);

/* Rows [n0, n1) of W (int8 [N][ld]; n0 and n1 multiples of 16, n1 <= Np) into the n16k4 packing p
 * (rows past N and k past K zero), colsum[n] for those rows, by qmm_pack_n16k4_ref; returns 1 if
 * some weight is -128. The copy of qmm_weight_create_int8. */
int qmm_pack_i8_rows(const int8_t *W, int64_t ld, int64_t N, int64_t K, int64_t n0, int64_t n1, qmm_packed_i8 *p);

/* Where a driver's panels of one weight come from. */
typedef struct qmm_panel_source {
    const qmm_weight *w;          /* an int8 weight: owned, or borrowed (int8 rows or W4A8 codes) */
    qmm_pack_n16k4_fn pack;       /* a borrowed weight's rows (NULL: qmm_pack_n16k4_ref) */
    qmm_w4a8_rows_fn w4_decode;   /* a W4A8 weight: the context's rows decoder (16 rows × up to 512 k
                                   * at a time into a stack buffer, then pack) */
    const int8_t *w4_lut;         /* its decode table for the call (e4m3 s_rel), or NULL: the arithmetic */
} qmm_panel_source;

/* One panel: block jb at b + jb·ldb (ldb a 64-byte multiple, b 64-byte aligned). */
typedef struct qmm_panel {
    const int8_t *b;
    int64_t ldb;
    const int32_t *colsum; /* Σ_k W[n][k] of its columns: the weight's (owned), else cs (NULL if cs was) */
    int neg128;            /* some weight of the panel is -128 (borrowed int8 rows; as the pack reports it) */
} qmm_panel;

/* The panel of blocks [nb, nb + nr) over quads [q0, q0 + nq) of s->w: owned, in place; borrowed,
 * packed into buf (nr·nq·64 bytes, 64-byte aligned) with the column sums of the quads added into
 * cs[0 .. 16·nr) (stored when first; none when cs is NULL). */
void qmm_panel_get(const qmm_panel_source *s, int64_t nb, int nr, int64_t q0, int64_t nq, int8_t *buf, int32_t *cs,
                   int first, qmm_panel *p);

#endif /* QMM_PANEL_H */
