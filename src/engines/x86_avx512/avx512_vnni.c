/*
 * avx512_vnni.c — the AVX512-VNNI int8 engine (QMM_ENGINE_AVX512_VNNI): SPEC §1 on the shared
 * n16k4 packed weights, bit-identical to the reference engine (int32 accumulators and outputs).
 * It runs on the core int8 driver (int8_gemm.h: pre-pass, a = q + 128 as u8 because VPDPBUSD
 * multiplies u8 × s8 — Σ (q+128)·w − 128·colsum[n] = Σ q·w mod 2^32, exact, -128 weights
 * included —, MC × NC tasks, KC chunks, prefetch schedule) and supplies:
 *   tile      the MR × NRB tiles (6 rows × 4 16-column blocks: 24 zmm accumulators, one
 *             broadcast of 4 activation bytes per row and one 64-byte weight row per block per
 *             4 k; avx512_vnni_gemm.c), in asm for 4 blocks
 *             (qmm_qd8_qc8w_gemm_ukernel_<mr>x64c4__avx512vnni) and in C for the last blocks of N
 *             (qmm_qd8_qc8w_gemm_ukernel_6x48c4__avx512vnni); the partial sums of a task live in
 *             the driver's MC × NC int32 block between K chunks; on the last chunk the outputs
 *             are written by qmm_vnni_store_out (avx512_vnni_kernel.h): acc − 128·colsum, then
 *             qmm_z_epilogue16 (simd_avx512.h: I32, or the fused / kitchen epilogue, bias,
 *             residual, rounded to f32 / f16 / bf16), masked for the last columns;
 *   one pass  7 ≤ M ≤ 24: all rows in one register tile over the whole K, one pass over the
 *             weights (avx512_vnni_small.c: 24, 20 or 16 × 1, 12 × 2 or 8 × 3 blocks, on the
 *             driver's packed copy of the rows, the outputs by qmm_vnni_store_out); the
 *             weight's last blocks use the row tiles;
 *   pack      a borrowed weight's panels, packed per call (pack_block, M > ROWS_M);
 *   rows      a borrowed weight at M ≤ ROWS_M (64): the caller's rows read in place in long
 *             sequential streams (avx512_vnni_rows.c, its kernels by name in ukernels.h): row dot
 *             products at M ≤ 8 (rows_dot, rows_dot2), W broadcast against the tokens in lanes
 *             above (bcast_dot, lanes_dot; in groups of 16 tokens above 16).
 * Small M: with M ≤ MC all tasks split N, so each thread streams only its share of the weights;
 * M ≤ SMALL_M: whole K, a single row tile prefetching 1 KiB ahead per block (PF_STREAM), several
 * sharing an L2 prefetch of the next panel (PF_NEXT). With K chunks no software prefetch (a burst
 * of prefetches of the next chunk per row tile cost 12 % of the kernel time and gained nothing
 * measurable). No allocation per call beyond the context's scratch arenas.
 */
#include "avx512_attn.h"
#include "avx512_vnni_kernel.h"
#include "avx512_vnni_rows.h"
#include "avx512_vnni_small.h"
#include "avx512/pack_avx512.h"
#include "ukernels.h"

/* The blocking: the tile kernels' shape (avx512_vnni_kernel.h) and the caches' */
enum {
    MR = QMM_VNNI_MR,   /* rows per tile */
    NRB = QMM_VNNI_NRB, /* 16-column blocks per tile (64 columns) */
    KC = 512,           /* K chunk: a 64 × KC weight panel is 32 KiB (L1) */
    MC = 192,           /* rows per task: MC × KC activation bytes = 96 KiB (L2) */
    NC = QMM_VNNI_NC,   /* columns per task: MC × NC int32 partials = 192 KiB (L2); a tile's rows NC apart */
    SMALL_M = 3 * MR    /* up to this M, no K chunks */
};

/* ---------------------------------------------------------------- borrowed weights: panel pack */
/* qmm_pack_n16k4_fn (panel.h) in AVX-512 (no -128 flag: this engine is exact with -128): per 64
 * bytes of K the 16 rows transposed by qmm_z_n16k4_step (pack_avx512.h), the column sums by
 * VPDPBUSD(1, w) on the n16k4 rows. */
static void pack_block(const int8_t *W, int64_t ld, int rows, int64_t k0, int64_t k1, int8_t *dst, int64_t nq,
                       int32_t *cs, int first, int *neg128) {
    (void)neg128;
    const __m512i ones = _mm512_set1_epi8(1);
    __m512i csv = _mm512_setzero_si512();
    for (int64_t q0 = 0; q0 < nq; q0 += 16) {
        __m512i out[16];
        const int64_t k = k0 + q0 * 4;
        qmm_z_n16k4_step(W, ld, rows, k, k1 - k < 64 ? k1 - k : 64, out);
        const int64_t nout = nq - q0 < 16 ? nq - q0 : 16;
        for (int64_t q = 0; q < nout; q++) {
            _mm512_store_si512(dst + (q0 + q) * 64, out[q]);
            csv = qmm_vnni_dpbusd(csv, ones, out[q]);
        }
    }
    if (!first) csv = _mm512_add_epi32(csv, _mm512_loadu_si512(cs));
    _mm512_storeu_si512(cs, csv);
}

/* ---------------------------------------------------------------- the driver's callbacks */
/* The tile kernel for t (avx512_vnni_gemm.c): the asm one of t->mr rows for 4 blocks, else the C one. */
static const qmm_i8_tile_fn k_x64[MR + 1] = {
    NULL,
    qmm_qd8_qc8w_gemm_ukernel_1x64c4__avx512vnni,
    qmm_qd8_qc8w_gemm_ukernel_2x64c4__avx512vnni,
    qmm_qd8_qc8w_gemm_ukernel_3x64c4__avx512vnni,
    qmm_qd8_qc8w_gemm_ukernel_4x64c4__avx512vnni,
    qmm_qd8_qc8w_gemm_ukernel_5x64c4__avx512vnni,
    qmm_qd8_qc8w_gemm_ukernel_6x64c4__avx512vnni,
};

static void tile(const uint8_t *a, int64_t lda, const float *s, const qmm_call *out, const qmm_i8_tile *t) {
    if (t->nr == NRB) k_x64[t->mr](a, lda, s, out, t);
    else qmm_qd8_qc8w_gemm_ukernel_6x48c4__avx512vnni(a, lda, s, out, t);
}

static const qmm_i8_engine k_vnni = {
    .u8 = 1, .mr = MR, .nrb = NRB, .mc = MC, .nc = NC, .kc = KC, .whole_k_m = SMALL_M,
    .tile = tile, .one_pass_rows = qmm_vnni_one_pass_rows, .one_pass = qmm_vnni_one_pass, .pack = pack_block,
    .rows_m = QMM_VNNI_ROWS_M, .rows_kernels = qmm_vnni_rows_kernels,
    .n_rows_kernels = QMM_VNNI_N_ROWS_KERNELS, .rows_ap_bytes = qmm_vnni_rows_ap_bytes, .rows_ap_fill = qmm_vnni_rows_ap_fill,
    .w4a8 = &qmm_vnni_w4a8_kernels,
};

/* Admission beside the kernel: the common int8 rules; this kernel has no extra limit (any M, N,
 * K, strides; -128 weights are exact with u8 × s8). */
static const char *admit(const void *call, char *why, size_t n) { return qmm_admit_common_int8(call, why, n); }

const qmm_engine_ops qmm_avx512_vnni_ops = {
    .built = 1,
    .op[QMM_OP_LINEAR] = {.admit = admit, .desc = &k_vnni},
    .op[QMM_OP_ATTENTION] = {.admit = qmm_avx512_vnni_attn_admit, .desc = &qmm_avx512_vnni_attn},
};
