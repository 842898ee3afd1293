/*
 * float_act.h — the float engines' activation pre-pass: act(x) (rotated for int8 weights with
 * convrot) packed into the A panels that the float GEMM driver (float_gemm.h) hands to the
 * micro-kernels. Plain C11 (the SIMD panel functions live in float_act_avx512.c, _avx2.c).
 *
 * Values (SPEC §4): int8 weight: exactly qmm_ref_act_rotate_row (act, then the convrot
 * rotation if w->convrot_gs, values rounded to x's dtype); float weight: act only. A bf16 panel
 * holds them rounded to bf16 (qmm_f32_to_bf16), an f32 panel as they are.
 *
 * The A operand, per chunk of rows, is packed into panels of `mr` rows:
 *   f32:  float    A[panel][Ka][mr]       (A[p][k][i] = a[p·mr + i][k])
 *   bf16: uint16_t A[panel][Ka/2][mr][2]  (Ka even: one k-pair = one dword)
 * so that element (panel p, k, row i) of either kind lives at p·Ka·mr + k·mr (+ i, or + 2i for a
 * pair). Ka >= K is the engine's (K rounded up to its k multiple); rows past M and k past K are
 * zero. A panel's kc-slice is contiguous.
 */
#ifndef QMM_FLOAT_ACT_H
#define QMM_FLOAT_ACT_H

#include "qmm_internal.h"

/* Fills an A panel chunk: rows [r0, r0 + rows) of act(x) (rotated for int8 weights with
 * convrot), packed as above (bf16 != 0: rounded to bf16 pairs), k in [K, Ka) zero. Threaded over
 * whole panels (qmm_pool_run_rows), with the panel function qmm_float_act_panel_select(ctx)
 * picks. */
qmm_status qmm_float_act_pack(qmm_context *ctx, const qmm_call *c, int64_t r0, int64_t rows, int mr, int bf16,
                              void *A, int64_t Ka);

/* ---------------------------------------------------------------- one A panel
 * The rows of one panel: x points at the panel's first row (ldx elements between rows), each
 * row K_in values of dtype t (K_in = 2K for swiglu); gs: the rotation group (0: none). */
typedef struct qmm_fact_src {
    const void *x;
    int64_t ldx;
    qmm_dtype t;
    int64_t K;
    qmm_act act;
    int gs;
} qmm_fact_src;

/* k values per row the SIMD panel functions compute at a time (a multiple of every g and of 32) */
#define QMM_FACT_KB 256

/* Fills one A panel Ap (the layout above) from rows [0, rows) of src, rows <= mr, k < K (bf16:
 * and the odd K's pad half); panel rows past `rows` are zero; k in [K, Ka) beyond that is left
 * to the caller (qmm_float_act_pack zeroes it). Every value is
 * qmm_ref_act_rotate_row's, then (bf16) qmm_f32_to_bf16 of it: all versions write the same bits.
 * tmp: qmm_float_act_tmp_floats(K, mr) floats of scratch, 64-byte aligned. */
typedef void (*qmm_fact_panel_fn)(const qmm_fact_src *src, int rows, int mr, int bf16, void *Ap, int64_t Ka,
                                  float *tmp);
size_t qmm_float_act_tmp_floats(int64_t K, int mr);
/* scalar: qmm_ref_act_rotate_row per row */
void qmm_float_act_panel_ref(const qmm_fact_src *src, int rows, int mr, int bf16, void *Ap, int64_t Ka, float *tmp);
/* AVX-512 (float_act_avx512.c): only call when the CPU has AVX-512 F/BW/VL/DQ */
void qmm_float_act_panel_avx512(const qmm_fact_src *src, int rows, int mr, int bf16, void *Ap, int64_t Ka,
                                float *tmp);
/* AVX2 + FMA + F16C (float_act_avx2.c): only call when the CPU has them */
void qmm_float_act_panel_avx2(const qmm_fact_src *src, int rows, int mr, int bf16, void *Ap, int64_t Ka,
                              float *tmp);
/* The fastest of the three that the CPU and the ISA cap (ctx->max_isa) allow — the same choice
 * as the int8 pre-pass (prepass.c). */
qmm_fact_panel_fn qmm_float_act_panel_select(const qmm_context *ctx);

/* Scalar packing: panel rows [i0, i0 + nrows), k in [k0, k1), from tmp (row i0 + i, k at
 * tmp[i · ldt + k - k0]); bf16: qmm_f32_to_bf16, and when k1 == K < Ka the pad half set to 0. */
void qmm_float_act_pack_rows(const float *tmp, int64_t ldt, int i0, int nrows, int mr, int64_t k0, int64_t k1,
                             int64_t K, int bf16, void *Ap, int64_t Ka);

#endif /* QMM_FLOAT_ACT_H */
