/*
 * amx_bf16.c — the AMX-BF16 float engine (QMM_ENGINE_AMX_BF16): a TDPBF16PS micro-kernel under
 * the float GEMM driver (core/float_gemm.h), like the AVX float engines. Two uses, one kernel:
 *
 *   (a) W8A16 fallback for int8 weights (no int8 engine admits, or a full-precision layer):
 *       a = bf16(T(rotate(T(act(x)))))            as qmm_ref_act_rotate_row, then to bf16
 *       W = the int8 n16k4 packing widened to bf16 inside the engine (int8 values are exact in
 *           bf16), one nr × kc block per task and k block, reused by every panel of the task —
 *           no dequantized copy of the weight
 *       y = out((acc · w_scale[n]) + bias[n])
 *   (b) bf16 float weights (w->fp.bf16, n16k2): a = bf16(T(act(x))); y = out(acc + bias[n]).
 *   f32 weights are refused (the bf16 engine would round them).
 *   A borrowed int8 weight: the driver packs each block of the caller's rows into n16k4 first.
 *
 * acc (the contract the emulated tests check bit for bit): per output element one fp32 chain
 * over k = 0, 1, ..., Ka - 1 (Ka = K rounded up to 32; the terms past K are +0 · +0):
 *     acc = 0;  acc = FTZ(acc + DAZ(a[k]) · DAZ(w[k]))  rounded to nearest even, in k order
 * — TDPBF16PS as the SDM defines it (even element of a pair, then odd; products exact; bf16
 * inputs and fp32 results denormal → 0), continued across k blocks through C in memory. The
 * emulated build computes exactly that; on hardware SPEC §7's float tolerance is what is promised.
 *
 * Layout (W as the A tile, tokens as B):
 *   tokens  the driver's bf16 A panel, mr = 32: [Ka/2][32][2]. One k-pair row of 16 tokens is
 *           64 bytes, so 16 k-pairs (32 k) of tokens 0..15 are a TDPBF16PS **B** tile (row
 *           stride 128 bytes), tokens 16..31 the next one (+64 bytes): the two tiles of a k-step
 *           are one 2 KiB run (in one page). No copy.
 *   weights prep_b (the driver's, with this file's widens) writes each 16-column block as
 *           bf16 [kc/32][16 n][32 k]: one 1 KiB **A** tile per k-step, stride 64 bytes; blocks
 *           kc·32 bytes apart. int8: a 16 × 16 dword transpose of 16 n16k4 quads (qmm_z_n16k4_step)
 *           gives each column's 64 k, then widened (cvtdq2ps, >> 16); bf16: the same transpose of
 *           16 n16k2 pair rows is the tile.
 *   C       tile = yᵀ [16 n][16 tokens], tile-contiguous in the panel's mr × nr floats of the
 *           driver's C (c_tile: per column pair four 1 KiB tiles in load order, 4 KiB): every C
 *           load and store one 1 KiB run in one page, a pair's four tiles 64 consecutive L1 sets;
 *           the epilogue transposes each tile in place into a row-major 16 × 16 block and runs
 *           the shared qmm_float_epilogue_avx512 on it.
 * Tile plan (amx_kernel.h numbers, all 16 × 64 bytes, configured once per thread and call by the begin
 * hook, released by the end hook): tmm0/tmm1 C of column block 2j × tokens 0-15 / 16-31,
 * tmm2/tmm3 the same for block 2j+1, tmm4/tmm5 W of blocks 2j, 2j+1, tmm6/tmm7 the tokens.
 * A panel with at most 16 rows runs only tokens 0-15 (2 TDPBF16PS per k-step, not 4).
 *
 * Arithmetic (an estimate from bench/NOTES.md "## amx" facts: TILELOADD ≈ 8 cycles from L1,
 * ≈ 23 from L2, ≈ 110 beyond; TDPBF16PS 16 cycles; the 2×2 kernel's own ceiling 85 %). Per
 * k-step of a 32 × 32 block: 4 TDPBF16PS = 64 cycles; 4 tile loads: the two token tiles from
 * the panel's kc-slice (32 × kc × 2 = 16 KiB at kc = 256: L1 for all but the first of the nr/32
 * column pairs), the two W tiles from the widened block (nr × kc × 2 = 256 KiB at nr = 512: L2,
 * re-read by every panel of the task) ≈ 2·8 + 2·23 = 62 cycles; C: 4 loads + 4 stores of 1 KiB
 * runs per column pair and k block (8 k-steps) ≈ 23 cycles per k-step → ≈ 85 cycles, ≈ 75 % of
 * peak. First touches: the first column pair's token tiles would come from L3 (≈ 110 cycles, +≈ 12
 * per k-step averaged over 16 pairs); the kernel prefetches (T1) the slice the driver names as
 * run next (kernel_aux: the task's next panel, else its first at the next k block) over the
 * current panel's k-steps, ≈ 2 lines per k-step, so they come from L2. The k blocks are even
 * (⌈Ka/kc⌉ blocks, max − min <= 32 k: no short last block paying a full C round trip for a few
 * k-steps); the thread buffers start on pages. The widening runs once per task and k block:
 * ≈ 0.15 cycle per weight against mr·panels MACs per weight. Measured on AMX at d9c1ae0
 * (../shared/measurements/AMX-d9c1ae0.md): 25 % of the AMX-BF16 peak at 4096×21504×5376.
 * Blocking: kc = QMM_AMX_BLOCKING's kc/2 (256), nr ≤ its nc (512), in equal column blocks of a
 * multiple of 32 with enough blocks for the threads at small M; mc is the driver's. The
 * descriptor (this file's fixed part with nr and kc) is finalized once per call class by
 * amx_regime.c (the engine's linear row) and kept for the process.
 *
 * Verification: tests/test_amx_emulated.c (bit-exact against the chain above, and the tile
 * traffic audits) and fuzz_corpus_engines_amx_emu run this source with the tile instructions
 * replaced by the software model of amx_emu.c; on an AMX machine the same tests run the real engine.
 */
#include "amx_kernel.h"
#include "amx_regime.h"
#include "float_gemm.h"
#include "avx512/pack_avx512.h"

#include <stdio.h>

static const char *amx_bf16_admit(const void *call, char *why, size_t n) {
    const qmm_call *c = call;
    const char *r = qmm_admit_common_float(c, why, n);
    if (r) return r;
    const qmm_weight *w = c->w;
    if (w->is_int8) {
        if (w->convrot_gs && c->K % w->convrot_gs) {
            snprintf(why, n, "K=%lld is not a multiple of the convrot group %d", (long long)c->K, w->convrot_gs);
            return why;
        }
        return NULL; /* W8A16: int8 weights widened in-kernel */
    }
    if (w->fdtype != QMM_BF16 || !w->fp.bf16) return "f32 weight: the bf16 engine would round it; use avx512_f32";
    return NULL;
}

#ifdef QMM_AMX_KERNELS

#define MR 32

/* ---------------------------------------------------------------- B blocks → [kc/32][16][32] bf16 */
/* 16 int8 → 16 bf16 (exact: |v| <= 128 has at most 8 significant bits) */
static inline __m256i widen16(__m128i b) {
    __m512 f = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b));
    return _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(f), 16));
}

/* nq n16k4 quads (a multiple of 8: kc is a multiple of 32) → nq/8 W tiles [16 n][32 k] */
static void widen_i8(const void *src, int64_t nq, void *dst) {
    for (int64_t q = 0; q < nq; q += 16) {
        const int nrow = nq - q < 16 ? (int)(nq - q) : 16; /* 8 or 16 quads: one or two k-steps */
        __m512i v[16]; /* v[n]: column n's bytes of k 4q .. 4q + 63 */
        qmm_z_n16k4_step((const int8_t *)src + q * 64, 64, nrow, 0, 64, v);
        uint16_t *d = (uint16_t *)dst + (q / 8) * 512;
        for (int n = 0; n < 16; n++) {
            const __m256i k32 = _mm512_castsi512_si256(v[n]);
            _mm512_storeu_si512(d + n * 32, _mm512_inserti64x4(_mm512_castsi256_si512(widen16(_mm256_castsi256_si128(k32))),
                                                               widen16(_mm256_extracti128_si256(k32, 1)), 1));
            if (nrow == 16) {
                const __m256i k64 = _mm512_extracti64x4_epi64(v[n], 1);
                _mm512_storeu_si512(d + 512 + n * 32,
                                    _mm512_inserti64x4(_mm512_castsi256_si512(widen16(_mm256_castsi256_si128(k64))),
                                                       widen16(_mm256_extracti128_si256(k64, 1)), 1));
            }
        }
    }
}

/* np n16k2 pair rows (a multiple of 16) → np/16 W tiles: a 16 × 16 dword transpose each */
static void widen_bf16(const void *src, int64_t np, void *dst) {
    for (int64_t q = 0; q < np; q += 16) {
        __m512i v[16]; /* v[n]: column n's pairs q .. q + 15 */
        qmm_z_n16k4_step((const int8_t *)((const uint16_t *)src + q * 32), 64, 16, 0, 64, v);
        uint16_t *d = (uint16_t *)dst + (q / 16) * 512;
        for (int n = 0; n < 16; n++) _mm512_storeu_si512(d + n * 32, v[n]);
    }
}

/* ---------------------------------------------------------------- the micro-kernel */
/* C of one panel, tile-contiguous: per column pair jp four 1 KiB tiles (16 n × 16 tokens, rows 64
 * bytes apart) in the order they are loaded — block 2jp tokens 0-15, block 2jp+1 tokens 0-15,
 * block 2jp tokens 16-31, block 2jp+1 tokens 16-31 — so tile (column block cb, token group tg) of
 * the panel is the 256 floats at c_tile(C, cb, tg). The panel's C is mr × nr floats, as the
 * driver sizes it. */
static inline float *c_tile(float *C, int64_t cb, int tg) { return C + ((cb / 2) * 4 + tg * 2 + (cb & 1)) * 256; }

/* C (+)= the 32 tokens × nr columns of one panel over kc (a multiple of 32), per column pair
 * 2×2 tiles (1×2 when rows <= 16); C as above. a_next (the driver's auxinfo: the token slice this
 * thread runs next, kc_next k long; NULL: none) is prefetched (T1) in equal shares over the
 * column pairs' k-steps, so that its first tile loads come from L2, not L3. */
static void qmm_bf16_f32_gemm_ukernel_32x32__amx(const qmm_fgemm *g, int rows, int64_t kc, const void *a,
                                                 const void *b, float *C, int accumulate, const void *a_next,
                                                 int64_t kc_next) {
    const uint16_t *t = a, *w = b;
    const int64_t nsteps = kc / 32, wblk = g->kc * 16, pairs = g->nr / 32;
    const int two = rows > 16;
    /* the next slice: kc_next/2 k-pair rows of 32 tokens × 4 bytes = kc_next·64 bytes */
    const char *pf = a_next;
    const int64_t pf_lines = a_next ? kc_next : 0, pf_calls = pairs * nsteps;
    int64_t pf_done = 0;
    for (int64_t jp = 0; jp < pairs; jp++) {
        const uint16_t *w0 = w + 2 * jp * wblk, *w1 = w0 + wblk;
        float *c00 = c_tile(C, 2 * jp, 0), *c10 = c00 + 256, *c01 = c00 + 512, *c11 = c00 + 768;
        if (accumulate) {
            QMM_TILE_LOAD(QMM_TC00, c00, 64);
            QMM_TILE_LOAD(QMM_TC10, c10, 64);
            if (two) QMM_TILE_LOAD(QMM_TC01, c01, 64);
            if (two) QMM_TILE_LOAD(QMM_TC11, c11, 64);
        } else {
            QMM_TILE_ZERO(QMM_TC00);
            QMM_TILE_ZERO(QMM_TC10);
            if (two) QMM_TILE_ZERO(QMM_TC01);
            if (two) QMM_TILE_ZERO(QMM_TC11);
        }
        for (int64_t s = 0; s < nsteps; s++) {
            for (const int64_t upto = pf_lines * (jp * nsteps + s + 1) / pf_calls; pf_done < upto; pf_done++)
                QMM_AMX_PREFETCH_T1(pf + pf_done * 64);
            QMM_TILE_LOAD(QMM_TB0, t + s * 16 * 2 * MR, 4 * MR);
            QMM_TILE_LOAD(QMM_TA0, w0 + s * 512, 64);
            QMM_TDPBF16PS(QMM_TC00, QMM_TA0, QMM_TB0);
            QMM_TILE_LOAD(QMM_TA1, w1 + s * 512, 64);
            QMM_TDPBF16PS(QMM_TC10, QMM_TA1, QMM_TB0);
            if (two) {
                QMM_TILE_LOAD(QMM_TB1, t + s * 16 * 2 * MR + 32, 4 * MR);
                QMM_TDPBF16PS(QMM_TC01, QMM_TA0, QMM_TB1);
                QMM_TDPBF16PS(QMM_TC11, QMM_TA1, QMM_TB1);
            }
        }
        QMM_TILE_STORE(QMM_TC00, c00, 64);
        QMM_TILE_STORE(QMM_TC10, c10, 64);
        if (two) QMM_TILE_STORE(QMM_TC01, c01, 64);
        if (two) QMM_TILE_STORE(QMM_TC11, c11, 64);
    }
}

/* The kernel's C holds each 16 × 16 block of y transposed, tile-contiguous (c_tile): each tile
 * transposed in place into a row-major 16 × 16 block, then the shared epilogue on it. Token
 * groups the kernel did not write are past `rows`. */
static void epilogue_t(const qmm_call *c, float *C, int64_t ldc, int64_t rows, int64_t r0, int64_t n0,
                       int64_t ncols) {
    for (int64_t i = 0; i < rows; i += 16) {
        float *panel = C + (i / MR) * MR * ldc; /* the panel's mr × nr floats */
        const int64_t rg = rows - i < 16 ? rows - i : 16;
        for (int64_t j = 0; j < ncols; j += 16) {
            float *blk = c_tile(panel, j / 16, (int)(i % MR) / 16);
            __m512i v[16];
            qmm_z_n16k4_step((const int8_t *)blk, 64, 16, 0, 64, v);
            for (int r = 0; r < 16; r++) _mm512_store_si512(blk + r * 16, v[r]);
            qmm_float_epilogue_avx512(c, blk, 16, rg, r0 + i, n0 + j, ncols - j < 16 ? ncols - j : 16);
        }
    }
}

/* the per-thread hooks (before a thread's first task of a pool run, after its last): the tile
 * configuration of the plan above, then its release */
static void tiles_begin(const qmm_call *c, int thread) {
    (void)c;
    (void)thread;
    QMM_AMX_SYM(qmm_amx_tiles_config)(16, 16);
}

static void tiles_end(const qmm_call *c, int thread) {
    (void)c;
    (void)thread;
    QMM_AMX_SYM(qmm_amx_tiles_release)();
}

/* The descriptor's fixed part; amx_regime.c's finalize adds, per call class, the block width nr
 * (N, M and the threads), kc = the blocking's kc/2 and the buffer sizes they give. */
const qmm_fgemm QMM_AMX_SYM(qmm_amx_bf16_kernels) = {
    .mr = MR, .bf16 = 1, .ka = 32,
    .widen_i8 = widen_i8, .widen_bf16 = widen_bf16, /* f32 weights: refused by admit */
    .kernel_aux = qmm_bf16_f32_gemm_ukernel_32x32__amx, .epilogue = epilogue_t, .pack = qmm_z_pack_n16k4,
    .begin = tiles_begin, .end = tiles_end, .even_k = 1, .page_bufs = 1,
};

#else /* built without AMX compiler support: no kernels (finalize gives no descriptor) */
const qmm_fgemm QMM_AMX_SYM(qmm_amx_bf16_kernels) = {.mr = 0};
#endif

const qmm_engine_ops QMM_AMX_SYM(qmm_amx_bf16_ops) = {
    .built = QMM_AMX_BUILT,
    /* linear: the descriptor of the class's block width (amx_regime.c) */
    .op[QMM_OP_LINEAR] = {.admit = amx_bf16_admit, .finalize = QMM_AMX_SYM(qmm_amx_bf16_finalize)},
#ifdef QMM_AMX_KERNELS /* attention: amx_bf16_attn.c */
    .op[QMM_OP_ATTENTION] = {.admit = QMM_AMX_SYM(qmm_amx_bf16_attn_admit), .desc = &QMM_AMX_SYM(qmm_amx_bf16_attn)},
#else
    .op[QMM_OP_ATTENTION] = {.admit = QMM_AMX_SYM(qmm_amx_bf16_attn_admit)},
#endif
    .tuning = QMM_AMX_SYM(qmm_amx_tuning),
};
