/*
 * float_gemm.h — the float GEMM driver: the one blocked, threaded loop nest that every float
 * engine (avx2_f32, avx512_f32, avx512_bf16, amx_bf16) plugs its micro-kernel into. Each
 * engine gives a descriptor (qmm_fgemm): its panel height mr, block width nr, k block kc, the
 * widening of one 16-column block of the weight into its B layout (per weight kind), its
 * micro-kernel, its epilogue and, where the ISA has per-thread state (AMX tiles), the per-thread
 * begin/end hooks. Plain C11 (the ISA-specific parts are the callbacks).
 *
 * Semantics (SPEC §4):
 *   int8 weight (W8A16 fallback): a = act(x), then the convrot rotation if w->convrot_gs,
 *       exactly qmm_ref_act_rotate_row (values rounded to x's dtype); a BF16 engine then rounds
 *       a to bf16, an F32 engine keeps it in f32. acc[r][n] = Σ_k a[r][k] · W[n][k] in fp32
 *       (the int8 weights are widened inside the engine from the shared n16k4 packing, one
 *       cache block at a time; never a dequantized copy), y = out((acc · w_scale[n]) + bias[n]).
 *   float weight: a = act(x) (no rotation), acc as above with W from w->fp, y = out(acc + bias[n]).
 *   bias is 0.0f when absent (always added); out() is one round-to-nearest-even cast.
 *   The order of the fp32 operations of acc is the engine's (its kernel's contract), the same
 *   whatever the thread count, the partition or the chunking: the driver only splits k into
 *   blocks that the kernel continues (accumulate), in order.
 *
 * The A operand (float_act.h): per chunk of rows, panels of mr rows, Ka = K rounded up to
 * g->ka (f32 [panel][Ka][mr], bf16 [panel][Ka/2][mr][2]), zero past K and past the rows.
 *
 * The driver: M in equal chunks of up to QMM_FLOAT_MC rows (fewer at large K, so that a chunk's
 * packed A stays in the last-level cache), each packed by the threaded pre-pass
 * (qmm_float_act_pack); then tasks = (column block of nr columns) × (group of panels), run on
 * ctx->pool with a static partition, begin(c, thread) on each thread before its first task and
 * end(c, thread) after its last (qmm_pool_run_bracketed). A task: per k block [k0, k0 + kc) (kc = g->kc, the
 * last one shorter; every one a multiple of g->ka): the B block is prepared — for each 16-column
 * block below Np the engine's widen function of the weight kind writes it into the thread's
 * buffer at byte offset jb · b_col16 (an int8 weight from its n16k4 panel, panel.h: an owned
 * weight's packing in place, a borrowed one's rows packed first into the thread's panel buffer by
 * the engine's pack, without column sums); columns past Np are zero (the
 * buffer cleared once per task that has any) — and the kernel runs over the task's panels,
 * accumulating into the task's fp32 C tile; then the epilogue.
 */
#ifndef QMM_FLOAT_GEMM_H
#define QMM_FLOAT_GEMM_H

#include "float_act.h"
#include "panel.h"
#include "qmm_internal.h"

typedef struct qmm_fgemm qmm_fgemm;

/* One 16-column block of the weight, count source rows of 64 bytes from src → the engine's B
 * layout at dst (where this block's k0 lies). The source rows, by weight kind:
 *   int8  n16k4 quads   [16][4] int8   4 k each    count = ceil(kc / 4)
 *   bf16  n16k2 pairs   [16][2] bf16   2 k each    count = ceil(kc / 2)
 *   f32   rows          [16] f32       1 k each    count = kc
 * (past K the packing holds zeros; a widen may write up to its count's k values). */
typedef void (*qmm_fwiden_fn)(const void *src, int64_t count, void *dst);

/* The kernel: C (+)= Σ_{k < kc} A[k][i] · B[k][j] for the panel rows i < rows (rows <= mr; the
 * panel's rows past `rows` are zero) and the block's nr columns; a is the panel's kc-slice
 * (f32 [kc][mr] or bf16 [kc/2][mr][2]), b the prepared B block, C the panel's mr × nr floats
 * (row stride nr) in the layout the kernel and the engine's epilogue agree on (row-major
 * [mr][nr] for the shared epilogues); accumulate == 0: C starts from zero. */
typedef void (*qmm_fkernel_fn)(const qmm_fgemm *g, int rows, int64_t kc, const void *a, const void *b, float *C,
                               int accumulate);
/* y[r0 + r][n0 .. n0 + ncols) ← epilogue of C[r][0 .. ncols), r < rows (C: the task's panels one
 * after another, row stride ldc = nr). C is the task's scratch: the epilogue may rewrite it. */
typedef void (*qmm_fepilogue_fn)(const qmm_call *c, float *C, int64_t ldc, int64_t rows, int64_t r0, int64_t n0,
                                 int64_t ncols);

/* The most rows of one chunk of M (the driver's chunking, qmm_float_gemm; fewer at large K). */
#define QMM_FLOAT_MC 384

struct qmm_fgemm {
    int mr;                    /* rows per panel */
    int nr;                    /* columns per task block (multiple of 16) */
    int64_t kc;                /* k per block: a multiple of 4 and of ka */
    int bf16;                  /* A packed as bf16 pairs */
    int ka;                    /* Ka and every k block a multiple of it; 0: 2 for bf16, else 1 */
    size_t b_bytes;            /* the B buffer of one block (with whatever the widens write past kc) */
    size_t b_col16;            /* bytes between two 16-column blocks in it */
    qmm_fwiden_fn widen_i8;    /* per weight kind; NULL: the engine does not run that kind */
    qmm_fwiden_fn widen_bf16;
    qmm_fwiden_fn widen_f32;
    int f32_direct;            /* f32 weights with nr == 16: the packing [kc][16] is the B block */
    qmm_fkernel_fn kernel;
    qmm_fepilogue_fn epilogue; /* NULL: qmm_float_epilogue_ref */
    qmm_pack_n16k4_fn pack;    /* borrowed int8 weights' panels (panel.h, cs = NULL); NULL: qmm_pack_n16k4_ref */
    qmm_thread_hook_fn begin, end; /* optional per-thread hooks (qmm_internal.h) */
    int even_k;                /* the k blocks of equal length: ⌈Ka/kc⌉ blocks of whole ka-steps, the
                                * longer ones first (max − min <= ka; none over kc), so no short last
                                * block pays a full C round trip */
    int page_bufs;             /* each thread's B block, C tile and n16k4 block start on a 4 KiB page
                                * (1 KiB tiles and 4 KiB tile groups at their offsets lie in one page) */
    /* Optional, run instead of kernel: the kernel told the A slice this thread runs next (BLIS's
     * auxinfo) — the task's next panel at this k block, else its first panel at the next k block,
     * kc_next k long; NULL after the task's last — so that it can prefetch what it first touches. */
    void (*kernel_aux)(const qmm_fgemm *g, int rows, int64_t kc, const void *a, const void *b, float *C,
                       int accumulate, const void *a_next, int64_t kc_next);
};

/* Runs the whole call c with the engine's pieces g. */
qmm_status qmm_float_gemm(qmm_context *ctx, const qmm_call *c, const qmm_fgemm *g);

/* Calls kern(ROWS, ...) with ROWS the compile-time row count 1..6 (rows outside: 6), so that
 * each row count gets its own unrolled copy of an always_inline kernel body. */
#define QMM_FGEMM_ROWS6(kern, rows, ...)                                                                      \
    do {                                                                                                      \
        switch (rows) {                                                                                       \
        case 1: kern(1, __VA_ARGS__); break;                                                                  \
        case 2: kern(2, __VA_ARGS__); break;                                                                  \
        case 3: kern(3, __VA_ARGS__); break;                                                                  \
        case 4: kern(4, __VA_ARGS__); break;                                                                  \
        case 5: kern(5, __VA_ARGS__); break;                                                                  \
        default: kern(6, __VA_ARGS__); break;                                                                 \
        }                                                                                                     \
    } while (0)

/* Prefetch (towards L2) the weights of the next k-block [k0 + kc, k0 + 2 kc) of columns
 * [n0, n0 + nr), in whichever packing w holds; the driver calls it before widening a block so
 * that the loads overlap the kernels. */
void qmm_float_prefetch_next(const qmm_weight *w, int64_t n0, int64_t nr, int64_t k0, int64_t kc);

/* Scalar epilogue: y = out((C · w_scale[n]) + bias[n]) (int8 weight) or out(C + bias[n]). */
void qmm_float_epilogue_ref(const qmm_call *c, float *C, int64_t ldc, int64_t rows, int64_t r0, int64_t n0,
                            int64_t ncols);

/* The same epilogue with AVX-512 (float_gemm_avx512.c; same bits: mul, add, RNE cast). Only call
 * it when the CPU has AVX-512 F/BW/VL/DQ. */
void qmm_float_epilogue_avx512(const qmm_call *c, float *C, int64_t ldc, int64_t rows, int64_t r0, int64_t n0,
                               int64_t ncols);

#endif /* QMM_FLOAT_GEMM_H */
