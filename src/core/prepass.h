/*
 * prepass.h — the activation pre-pass shared by every int8 engine (SPEC §1 steps 1–3), one
 * fused pass per row: input_act → convrot rotation → amax → quantize, writing the A operand
 * that the int8 kernels read directly and the fp32 per-token scales s [M]:
 *   q      [M][ldq] row-major, columns K..ldq holding the value of q = 0; as s8 (the AMX and
 *          AVX2 kernels, the rows regime) or flipped to u8 a = q XOR 0x80 = q + 128 (VPDPBUSD's
 *          u8 operand: qmm_prepass_out.flip), written once by the row kernel;
 *   qsum   optional, per row: Σ_k q (s8) and whether the row holds -128 (the int8 driver's rows
 *          regime, int8_gemm.h);
 *   ap     optional: the rows again packed [kq][wrows][4] (4 bytes of each row per k quad, rows
 *          past M the value of q = 0: the int8 driver's one-pass regime);
 *   groups optional: the caller's own layout of q, written per group of rows by the caller's
 *          group_fill on the thread that wrote the group's last rows (the int8 driver's rows
 *          regime copy);
 * all in one pass over the rows (one pool run), each row finished while it is in L1. The row
 * kernel is chosen once per call: the AVX-512 one when the CPU has it and the ISA cap allows,
 * else the AVX2 one (same conditions), else the scalar one; all give the same bits (numerics.h).
 */
#ifndef QMM_PREPASS_H
#define QMM_PREPASS_H

#include "qmm_internal.h"

/* One row. x: K_in values of dtype t; s_in: a given scale (NULL: compute it); q: qcols bytes
 * (K values, then zeros), each XOR flip (0, or 0x80: the u8 form q + 128); s_out: the scale
 * used; tmp: K floats of scratch (64-byte aligned). */
typedef void (*qmm_prepass_row_fn)(const void *x, qmm_dtype t, int64_t K, qmm_act act, int gs,
                                   const float *s_in, int8_t *q, int64_t qcols, uint8_t flip, float *s_out, float *tmp);
/* amax only: the row's max |a| after act + rotation (NaN if any NaN). */
typedef float (*qmm_amax_row_fn)(const void *x, qmm_dtype t, int64_t K, qmm_act act, int gs, float *tmp);

void  qmm_prepass_row_ref(const void *x, qmm_dtype t, int64_t K, qmm_act act, int gs, const float *s_in,
                          int8_t *q, int64_t qcols, uint8_t flip, float *s_out, float *tmp);
float qmm_amax_row_ref(const void *x, qmm_dtype t, int64_t K, qmm_act act, int gs, float *tmp);

/* AVX-512 versions (prepass_avx512.c), same bits; NULL-safe selection below. */
extern const qmm_prepass_row_fn qmm_prepass_row_avx512_ptr;
extern const qmm_amax_row_fn qmm_amax_row_avx512_ptr;
/* AVX2 + FMA + F16C versions (prepass_avx2.c), same bits; used when AVX-512 is absent or capped. */
extern const qmm_prepass_row_fn qmm_prepass_row_avx2_ptr;
extern const qmm_amax_row_fn qmm_amax_row_avx2_ptr;

/* What one pre-pass writes (q and s required, the rest optional: NULL). */
typedef struct qmm_prepass_out {
    int8_t *q;          /* [M][ldq], ldq >= K */
    int64_t ldq;
    float *s;           /* [M] token scales */
    uint8_t flip;       /* 0: q as s8; 0x80: a = q XOR 0x80 (u8) */
    int32_t *qsum;      /* [M] Σ_k q[r][k] (of q, not a; needs flip 0) */
    uint8_t *qneg128;   /* [M] 1 if row r of q holds -128, else 0 (with qsum) */
    uint8_t *ap;        /* [kq][wrows][4]: bytes 4j..4j+3 of row r (as written to q) at (j·wrows + r)·4 */
    int64_t kq;         /* quads of ap: (K + 3) / 4, 4·kq <= ldq */
    int wrows;          /* rows of ap, >= M; rows M..wrows hold the value of q = 0 (flip) */
    /* Optional, a layout of the caller's (the rows regime's copy of q, int8_gemm.h rows_ap_fill):
     * for each group of group_rows rows [r0, r1) (the last one ends at M), the pool thread that
     * writes its last rows calls group_fill(group_arg, r0, r1) once, with every row of the group
     * written and visible, while they are in cache; the rows' split over threads is the plain
     * one (balanced), so a group's rows may come from two threads. */
    void (*group_fill)(const void *group_arg, int64_t r0, int64_t r1);
    const void *group_arg;
    int64_t group_rows;
} qmm_prepass_out;

/* The whole call, threaded over rows (one qmm_pool_run_rows). ref != 0 forces the scalar kernel. */
qmm_status qmm_prepass_to(qmm_context *ctx, const qmm_call *c, const qmm_prepass_out *o, int ref);
/* q [M][ldq] as s8 and s [M] only. */
qmm_status qmm_prepass(qmm_context *ctx, const qmm_call *c, int8_t *q, int64_t ldq, float *s, int ref);
qmm_status qmm_prepass_amax(qmm_context *ctx, const qmm_call *c, float *amax, int ref);

#endif /* QMM_PREPASS_H */
