/*
 * amx_bf16.c — the AMX-BF16 float engine (QMM_ENGINE_AMX_BF16), TDPBF16PS with fp32
 * accumulation. Two uses, one kernel:
 *
 *   (a) W8A16 fallback for int8 weights (no int8 engine admits, or a full-precision layer):
 *       a = bf16(T(rotate(T(act(x)))))            as qmm_ref_act_rotate_row, then to bf16
 *       W = the int8 n16k4 packing widened to bf16 INSIDE the kernel (int8 values are exact
 *           in bf16), one L2-sized chunk of 32-column × Kp panels per thread at a time, reused
 *           by every M panel — no dequantized copy of the weight
 *       y = out((acc · w_scale[n]) + bias[n])      acc in fp32
 *   (b) bf16 float weights: B tiles straight from w->fp.bf16 (bf16 [Np/16][Kp/2][16][2]: the
 *       AMX-BF16 B tile layout); a = bf16(T(act(x))); y = out(acc + bias[n]).
 *   f32 weights are refused (the bf16 engine would round them).
 *
 *   A [M][Ka] bf16, Ka = the weight's Kp (64 for int8, 32 for bf16 weights: multiples of 32
 *   = one A tile row of 64 bytes); k-chunk kc of 32 values: A tile at A + kc*32, B tile of
 *   block nb at B + nb*Kp*16 + kc*512 (1 KiB, 16 k-pair rows × 16 columns × 2).
 *
 * The accuracy contract is SPEC §7 for float engines: fp32 summation of the bf16-rounded
 * operands (tested against an fp64 sum of the same operands).
 *
 * HONESTY NOTE: never executed on AMX hardware (none available); the evidence is the emulated
 * build (tests/test_amx_emulated.c), which runs this source with the tile instructions
 * replaced by the software model of amx_emu.c.
 */
#include "amx_kernel.h"
#include "numerics.h"

#include <stdio.h>
#include <string.h>

static const char *amx_bf16_admit(const qmm_call *c, char *why, size_t n) {
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

typedef struct {
    const qmm_call *c;
    uint16_t *a;        /* [M][Ka] bf16 */
    int64_t Ka;         /* row stride of a = the weight's Kp */
    float *tmp;         /* [threads][Kt] pre-pass rows */
    int64_t Kt, rows_per_task;
    int64_t nblocks, npanels_n, npanels_m;
    int tm, tn;
    int64_t chunk;      /* N panels per L2 chunk of B (QMM_AMX_L2_B_BYTES of bf16) */
    char *thread_buf;   /* [threads][per_thread]: stage [32][32] f32, then widened B */
    size_t per_thread;
} bf16_job;

/* ---------------------------------------------------------------- the pre-pass */
static void prepass_task(int64_t task, int64_t n_tasks, int thread, void *arg) {
    (void)n_tasks;
    bf16_job *j = arg;
    const qmm_call *c = j->c;
    const size_t es = qmm_dtype_size(c->x_dtype);
    const int gs = c->w->is_int8 ? c->w->convrot_gs : 0;
    float *tmp = j->tmp + (size_t)thread * j->Kt;
    int64_t r0 = task * j->rows_per_task, r1 = r0 + j->rows_per_task;
    if (r1 > c->M) r1 = c->M;
    for (int64_t r = r0; r < r1; r++) {
        qmm_ref_act_rotate_row((const char *)c->x + (size_t)(r * c->ldx) * es, c->x_dtype, c->K, c->act, gs, tmp);
        uint16_t *ar = j->a + r * j->Ka;
        for (int64_t k = 0; k < c->K; k++) ar[k] = qmm_f32_to_bf16(tmp[k]);
        for (int64_t k = c->K; k < j->Ka; k++) ar[k] = 0;
    }
}

/* ---------------------------------------------------------------- int8 → bf16 widening */
/* 16 int8 → 16 bf16 (exact: |v| <= 128 has at most 8 significant bits) */
static inline __m256i widen16(__m128i b) {
    __m512 f = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b));
    return _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(f), 16));
}

/* One n16k4 block (Kp/4 rows of [16 n][4 k] int8) → bf16 [Kp/2][16][2]. */
static void widen_block(const int8_t *src, int64_t Kp, uint16_t *dst) {
    /* element t = n*2 + e of the even k-pair row comes from byte n*4 + e, of the odd row from
     * n*4 + 2 + e; lo holds bytes 0..31 (n 0..7), hi bytes 32..63 (n 8..15) */
    int16_t ie[32], io[32];
    for (int t = 0; t < 32; t++) {
        int n = t / 2, e = t % 2;
        int from = n < 8 ? n * 4 + e : 32 + (n - 8) * 4 + e;
        ie[t] = (int16_t)from;
        io[t] = (int16_t)(from + 2);
    }
    const __m512i idx_even = _mm512_loadu_si512(ie), idx_odd = _mm512_loadu_si512(io);
    for (int64_t kq = 0; kq < Kp / 4; kq++) {
        const int8_t *s = src + kq * 64;
        __m512i lo = _mm512_inserti64x4(_mm512_castsi256_si512(widen16(_mm_loadu_si128((const __m128i *)s))),
                                        widen16(_mm_loadu_si128((const __m128i *)(s + 16))), 1);
        __m512i hi = _mm512_inserti64x4(_mm512_castsi256_si512(widen16(_mm_loadu_si128((const __m128i *)(s + 32)))),
                                        widen16(_mm_loadu_si128((const __m128i *)(s + 48))), 1);
        _mm512_storeu_si512(dst + (2 * kq) * 32, _mm512_permutex2var_epi16(lo, idx_even, hi));
        _mm512_storeu_si512(dst + (2 * kq + 1) * 32, _mm512_permutex2var_epi16(lo, idx_odd, hi));
    }
}

/* ---------------------------------------------------------------- the tile kernel */
static inline __attribute__((always_inline)) void kloop(const uint16_t *a, int64_t Ka, const uint16_t *b0,
                                                        int64_t bstride, int r1, int two) {
    const uint16_t *b1 = b0 + bstride;
    const int64_t nk = Ka / 32;
    QMM_TILE_ZERO(QMM_TC00);
    if (two) QMM_TILE_ZERO(QMM_TC01);
    if (r1) QMM_TILE_ZERO(QMM_TC10);
    if (r1 && two) QMM_TILE_ZERO(QMM_TC11);
    for (int64_t kc = 0; kc < nk; kc++) {
        QMM_TILE_LOAD(QMM_TA0, a + kc * 32, Ka * 2);
        QMM_TILE_LOAD(QMM_TB0, b0 + kc * 512, 64);
        QMM_TDPBF16PS(QMM_TC00, QMM_TA0, QMM_TB0);
        if (two) {
            QMM_TILE_LOAD(QMM_TB1, b1 + kc * 512, 64);
            QMM_TDPBF16PS(QMM_TC01, QMM_TA0, QMM_TB1);
        }
        if (r1) {
            QMM_TILE_LOAD(QMM_TA1, a + 16 * Ka + kc * 32, Ka * 2);
            QMM_TDPBF16PS(QMM_TC10, QMM_TA1, QMM_TB0);
            if (two) QMM_TDPBF16PS(QMM_TC11, QMM_TA1, QMM_TB1);
        }
    }
}

static void epilogue(const qmm_call *c, const float *stage, int64_t m0, int rows, int64_t n0, int64_t cols) {
    const qmm_weight *w = c->w;
    const size_t es = qmm_dtype_size(c->y_dtype);
    for (int r = 0; r < rows; r++) {
        char *yrow = (char *)c->y + (size_t)((m0 + r) * c->ldy) * es;
        for (int64_t j = 0; j < cols; j += 16) {
            const __mmask16 m = qmm_amx_mask(cols - j);
            const int64_t n = n0 + j;
            __m512 v = _mm512_loadu_ps(stage + r * 32 + j);
            if (w->is_int8) v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, w->scale + n));
            v = _mm512_add_ps(v, w->bias ? _mm512_maskz_loadu_ps(m, w->bias + n) : _mm512_setzero_ps());
            qmm_amx_store16(yrow + (size_t)n * es, c->y_dtype, m, v);
        }
    }
}

static void gemm_task(int64_t task, int64_t n_tasks, int thread, void *arg) {
    (void)n_tasks;
    bf16_job *j = arg;
    const qmm_call *c = j->c;
    const qmm_weight *w = c->w;
    const int ti = (int)(task / j->tn), tj = (int)(task % j->tn);
    const int64_t p_lo = j->npanels_n * tj / j->tn, p_hi = j->npanels_n * (tj + 1) / j->tn;
    const int64_t m_lo = j->npanels_m * ti / j->tm, m_hi = j->npanels_m * (ti + 1) / j->tm;
    char *tb = j->thread_buf + (size_t)thread * j->per_thread;
    float *stage = (float *)tb;                      /* [32][32] */
    uint16_t *wide = (uint16_t *)(tb + 32 * 32 * 4); /* [2 * chunk][Kp/2][16][2] (int8 weights) */
    const int64_t Kp = j->Ka, bstride = Kp * 16;     /* elements between two column blocks */
    for (int64_t pc = p_lo; pc < p_hi; pc += j->chunk) {
        const int64_t pe = pc + j->chunk < p_hi ? pc + j->chunk : p_hi;
        const uint16_t *bchunk;
        if (w->is_int8) { /* widen the chunk's column blocks once; every M panel reuses them */
            const int64_t nb_end = 2 * pe < j->nblocks ? 2 * pe : j->nblocks;
            for (int64_t nb = 2 * pc; nb < nb_end; nb++)
                widen_block(w->i8.data + nb * Kp * 16, Kp, wide + (nb - 2 * pc) * bstride);
            bchunk = wide;
        } else {
            bchunk = w->fp.bf16 + 2 * pc * bstride;
        }
        for (int64_t mp = m_lo; mp < m_hi; mp++) {
            const int64_t m0 = mp * 32;
            const int rows = (int)(c->M - m0 < 32 ? c->M - m0 : 32);
            const int r0 = rows < 16 ? rows : 16, r1 = rows - r0;
            QMM_AMX_SYM(qmm_amx_tiles_config)(r0, r1);
            const uint16_t *a = j->a + m0 * j->Ka;
            for (int64_t p = pc; p < pe; p++) {
                const int64_t nb = 2 * p;
                const int two = nb + 1 < j->nblocks;
                const int64_t n0 = nb * 16, cols = c->N - n0 < 32 ? c->N - n0 : 32;
                const uint16_t *b0 = bchunk + (nb - 2 * pc) * bstride;
                if (r1 && two) kloop(a, j->Ka, b0, bstride, 1, 1);
                else if (r1) kloop(a, j->Ka, b0, bstride, 1, 0);
                else if (two) kloop(a, j->Ka, b0, bstride, 0, 1);
                else kloop(a, j->Ka, b0, bstride, 0, 0);
                QMM_TILE_STORE(QMM_TC00, stage, 128);
                if (two) QMM_TILE_STORE(QMM_TC01, stage + 16, 128);
                if (r1) QMM_TILE_STORE(QMM_TC10, stage + 16 * 32, 128);
                if (r1 && two) QMM_TILE_STORE(QMM_TC11, stage + 16 * 32 + 16, 128);
                epilogue(c, stage, m0, rows, n0, cols);
            }
        }
    }
    QMM_AMX_SYM(qmm_amx_tiles_release)();
}

static qmm_status amx_bf16_run(qmm_context *ctx, const qmm_call *c) {
    const qmm_weight *w = c->w;
    const int64_t M = c->M;
    const int nt = ctx->n_threads;
    bf16_job j;
    memset(&j, 0, sizeof j);
    j.c = c;
    j.Ka = w->is_int8 ? w->i8.Kp : w->fp.Kp;
    j.nblocks = (w->is_int8 ? w->i8.Np : w->fp.Np) / 16;
    size_t abytes;
    QMM_RETURN_IF(!qmm_mul_ok((size_t)M, (size_t)j.Ka * 2, &abytes), QMM_ERR_OUT_OF_MEMORY,
                  "layer %s: M=%lld × K=%lld activations too large", w->name, (long long)M, (long long)c->K);
    void *abuf, *tmp, *tbuf;
    QMM_FORWARD_IF_ERROR(qmm_context_scratch(ctx, QMM_SCRATCH_ACT, abytes, &abuf));
    j.a = abuf;
    j.Kt = qmm_round_up(c->K, 16);
    QMM_FORWARD_IF_ERROR(qmm_context_scratch(ctx, QMM_SCRATCH_PREPASS, (size_t)nt * (size_t)j.Kt * sizeof(float), &tmp));
    j.tmp = tmp;
    j.chunk = QMM_AMX_L2_B_BYTES / (32 * j.Ka * 2);
    if (j.chunk < 1) j.chunk = 1;
    j.per_thread = 32 * 32 * 4 + (w->is_int8 ? (size_t)j.chunk * (size_t)j.Ka * 64 : 0);
    QMM_FORWARD_IF_ERROR(qmm_context_scratch(ctx, QMM_SCRATCH_ENGINE, (size_t)nt * j.per_thread, &tbuf));
    j.thread_buf = tbuf;
    /* pre-pass: a few tasks per thread, whole rows each */
    int64_t tasks = (int64_t)nt * 4 < M ? (int64_t)nt * 4 : M;
    j.rows_per_task = (M + tasks - 1) / tasks;
    tasks = (M + j.rows_per_task - 1) / j.rows_per_task;
    qmm_pool_run(ctx->pool, tasks, prepass_task, &j);
    /* the GEMM: N split first, then M (as amx_int8) */
    j.npanels_n = (j.nblocks + 1) / 2;
    j.npanels_m = (M + 31) / 32;
    j.tn = j.npanels_n < nt ? (int)j.npanels_n : nt;
    j.tm = nt / j.tn;
    if (j.tm > j.npanels_m) j.tm = (int)j.npanels_m;
    if (j.tm < 1) j.tm = 1;
    qmm_pool_run(ctx->pool, (int64_t)j.tm * j.tn, gemm_task, &j);
    return QMM_OK;
}

#else /* built without AMX compiler support */
static qmm_status amx_bf16_run(qmm_context *ctx, const qmm_call *c) {
    (void)ctx;
    return qmm_fail(QMM_ERR_UNSUPPORTED_HARDWARE, "layer %s: amx_bf16 was not built (compiler lacks AMX)", c->w->name);
}
#endif

const qmm_engine QMM_AMX_SYM(qmm_engine_amx_bf16) = {
    .id = QMM_ENGINE_AMX_BF16,
    .name = "amx_bf16",
    .kind = QMM_KIND_FLOAT,
    .isa = QMM_ISA_AMX,
    .cpu_features = QMM_CPU_AMX_TILE | QMM_CPU_AMX_BF16 | QMM_CPU_AMX_PERMITTED,
    .built = QMM_AMX_BUILT,
    .admit = amx_bf16_admit,
    .pack = NULL,
    .run = amx_bf16_run,
};
