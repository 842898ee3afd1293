/*
 * float_act.h — what the same-device float engines (avx512_bf16, avx512_f32, avx2_f32) share:
 * the float activation pre-pass and the blocked, threaded GEMM driver they plug their
 * micro-kernels into. Plain C11 (the ISA-specific parts are the callbacks).
 *
 * Semantics (SPEC §4):
 *   int8 weight (W8A16 fallback): a = act(x), then the convrot rotation if w->convrot_gs,
 *       exactly qmm_ref_act_rotate_row (values rounded to x's dtype); a BF16 engine then rounds
 *       a to bf16, an F32 engine keeps it in f32. acc[r][n] = Σ_k a[r][k] · W[n][k] in fp32
 *       (the int8 weights are widened inside the engine from the shared n16k4 packing, one
 *       cache block at a time; never a dequantized copy), y = out((acc · w_scale[n]) + bias[n]).
 *   float weight: a = act(x) (no rotation), acc as above with W from w->fp, y = out(acc + bias[n]).
 *   bias is 0.0f when absent (always added); out() is one round-to-nearest-even cast.
 *
 * The A operand, per chunk of rows, is packed into panels of `mr` rows:
 *   f32:  float    A[panel][Ka][mr]       Ka = K          (A[p][k][i] = a[p·mr + i][k])
 *   bf16: uint16_t A[panel][Ka/2][mr][2]  Ka = K rounded up to 2 (one k-pair = one dword)
 * so that element (panel p, k, row i) of either kind lives at p·Ka·mr + k·mr (+ i, or + 2i for a
 * pair). Rows past M and k past K are zero. A panel's kc-slice is contiguous.
 *
 * The driver: M is processed in equal chunks of up to mc rows (≤ 384, and fewer at large K so
 * that a chunk's packed A stays in the last-level cache; prepared by a threaded pre-pass),
 * then tasks = (column block of nr columns) × (group of panels), run on ctx->pool with a static
 * partition. Each task widens/copies its B block (kc × nr, zero columns past Np) with prep_b
 * (a borrowed int8 weight: the caller's rows of the block packed first into the thread's n16k4
 * buffer by pack_i8, and prep_b run on a view of that buffer),
 * runs the kernel over its panels accumulating in an fp32 tile C[rows][nr], and applies the
 * epilogue. Every output element is one fixed sequence of fp32 operations over k, whatever the
 * thread count, the partition or the chunk: results are identical for any number of threads.
 */
#ifndef QMM_FLOAT_ACT_H
#define QMM_FLOAT_ACT_H

#include "qmm_internal.h"

/* Fill row `rows` of an A panel chunk: rows [r0, r0 + rows) of act(x) (rotated for int8 weights
 * with convrot), packed as above (bf16 != 0: rounded to bf16 pairs). Threaded over panels, with
 * the panel function qmm_float_act_panel_select(ctx) picks. */
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

/* Fills one A panel Ap (the layout above, Ka = K or K rounded up to 2 for bf16) from rows
 * [0, rows) of src, rows <= mr; panel rows past `rows` are zero. Every value is
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

/* The B block of a task: columns [n0, n0 + nr) (n0 % 16 == 0), k in [k0, k0 + kc); written into
 * buf in the kernel's layout (zero past Np; k past K zero). Returns the block the kernel reads. */
typedef const void *(*qmm_fprep_b_fn)(const qmm_weight *w, int64_t n0, int64_t k0, int64_t kc, void *buf);
/* C[i][0..nr) (+)= Σ_{k<kc} A[k][i] · B[k][0..nr) for i < rows (rows <= mr); a is the panel's
 * kc-slice, b the prepared block; accumulate == 0: C starts from zero. ldc == nr. */
typedef void (*qmm_fkernel_fn)(int rows, int64_t kc, const void *a, const void *b, float *C, int accumulate);
/* y[r][n0 .. n0 + ncols) ← epilogue of C[r][0 .. ncols), r < rows. */
typedef void (*qmm_fepilogue_fn)(const qmm_call *c, const float *C, int64_t ldc, int64_t rows, int64_t r0,
                                 int64_t n0, int64_t ncols);

/* A borrowed weight's 16-row block: rows [0, rows) of W (row stride ld), bytes [k0, k1) → dst
 * [nq][16][4] (64-byte aligned; rows past `rows` and bytes past k1 zero; nothing past k1 read). */
typedef void (*qmm_fpack_i8_fn)(const int8_t *W, int64_t ld, int rows, int64_t k0, int64_t k1, int8_t *dst, int64_t nq);
void qmm_float_pack_i8_ref(const int8_t *W, int64_t ld, int rows, int64_t k0, int64_t k1, int8_t *dst, int64_t nq);

typedef struct qmm_fgemm {
    int mr;                  /* rows per panel */
    int nr;                  /* columns per task block (multiple of 16) */
    int64_t kc;              /* k per block (multiple of 4) */
    int bf16;                /* A packed as bf16 pairs */
    size_t b_bytes;          /* bytes of prep_b's buffer for one (kc, nr) block */
    qmm_fprep_b_fn prep_b;
    qmm_fkernel_fn kernel;
    qmm_fepilogue_fn epilogue; /* NULL: the scalar one below */
    qmm_fpack_i8_fn pack_i8;   /* borrowed int8 weights; NULL: qmm_float_pack_i8_ref */
} qmm_fgemm;

/* Runs the whole call c with the engine's pieces g. */
qmm_status qmm_float_gemm(qmm_context *ctx, const qmm_call *c, const qmm_fgemm *g);

/* Prefetch (towards L2) the weights of the next k-block [k0 + kc, k0 + 2 kc) of columns
 * [n0, n0 + nr), in whichever packing w holds; prep_b calls it so the loads overlap the kernels. */
void qmm_float_prefetch_next(const qmm_weight *w, int64_t n0, int64_t nr, int64_t k0, int64_t kc);

/* Scalar epilogue: y = out((C · w_scale[n]) + bias[n]) (int8 weight) or out(C + bias[n]). */
void qmm_float_epilogue_ref(const qmm_call *c, const float *C, int64_t ldc, int64_t rows, int64_t r0, int64_t n0,
                            int64_t ncols);

/* The same epilogue with AVX-512 (float_act_avx512.c; same bits: mul, add, RNE cast). Only call it
 * when the CPU has AVX-512 F/BW/VL. */
void qmm_float_epilogue_avx512(const qmm_call *c, const float *C, int64_t ldc, int64_t rows, int64_t r0, int64_t n0,
                               int64_t ncols);

#endif /* QMM_FLOAT_ACT_H */
