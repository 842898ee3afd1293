/*
 * amx_int8.c — the AMX-INT8 engine (QMM_ENGINE_AMX_INT8): y = epilogue(q · Wᵀ) with TDPBSSD
 * (signed × signed: no +128 compensation), SPEC §1, bit-identical to the reference engine
 * (int32 accumulators and float outputs alike).
 *
 *   q, s  = qmm_prepass(x)               q [M][Kp] int8 (row stride Kp), s [M] fp32
 *   W     = w->i8.data, n16k4             block nb, k-chunk kc (64 k): the 1 KiB B tile at
 *                                          data + nb*Kp*16 + kc*1024, 16 rows × 64 bytes
 *   acc   = Σ over kc of A(m-panel, kc) · B(nb, kc)   in the 2×2 tiles of amx_kernel.h
 *   y     = out(((float)acc * s_r) * w_scale[n] + bias[n])   (numerics.h qmm_epilogue_f),
 *           or acc itself for an i32 output
 *
 * Blocking (version 1, see bench/NOTES.md "## amx"): tasks are a static grid over 32-column
 * panels of N (split first, so that for small M each thread streams only its share of the
 * weight) and 32-row panels of M. Inside a task: for each chunk of N panels (about
 * QMM_AMX_L2_B_BYTES of B, kept in L2), for each M panel (32 × Kp of A, also from L2 after
 * its first use), for each N panel of the chunk: the full K with C kept in tiles, then the
 * fused epilogue. A is read from beyond L2 once per chunk, B once per task.
 * The partition changes nothing in the result (int32 sums are exact).
 *
 * Admission (beside the kernel): qmm_admit_common_int8, then the small-M rule
 * QMM_AMX_INT8_MIN_M: a tile op costs as much for 1 row as for 16, so below it avx512_vnni is
 * preferred (the constant is an estimate: no AMX machine was available to measure it).
 *
 * HONESTY NOTE: written against the real AMX intrinsics but never executed on AMX hardware;
 * the evidence is tests/test_amx_emulated.c, which runs this same source with every tile
 * instruction replaced by the software model of amx_emu.c.
 */
#include "amx_kernel.h"
#include "numerics.h"
#include "prepass.h"
#include "simd_avx512.h"

#include <stdio.h>
#include <string.h>

/* Below this many tokens amx_int8 refuses (dispatch then picks avx512_vnni). */
#define QMM_AMX_INT8_MIN_M 8
const int QMM_AMX_SYM(qmm_amx_int8_min_m) = QMM_AMX_INT8_MIN_M;

static const char *amx_int8_admit(const qmm_call *c, char *why, size_t n) {
    const char *r = qmm_admit_common_int8(c, why, n);
    if (r) return r;
    if (c->M < QMM_AMX_INT8_MIN_M) {
        snprintf(why, n, "M=%lld < %d: avx512_vnni is faster for tiny M (a tile op costs as much for 1 row as 16)",
                 (long long)c->M, QMM_AMX_INT8_MIN_M);
        return why;
    }
    return NULL;
}

#ifdef QMM_AMX_KERNELS

typedef struct {
    const qmm_call *c;
    const int8_t *q;   /* [M][Kp] */
    const float *s;    /* [M] */
    int64_t Kp, nblocks, npanels_n, npanels_m;
    int tm, tn;        /* task grid: tm M ranges × tn N ranges */
    int64_t chunk;     /* N panels per L2 chunk of B (QMM_AMX_L2_B_BYTES) */
    int32_t *stage;    /* [threads][32][32] int32: the C tiles of one panel */
} int8_job;

/* The K loop of one 32 × 32 panel; r1: a second A row block, two: a second B column block.
 * pf, pf_rows: rows of the NEXT A panel to prefetch into L2 along the way (one line per row
 * per k-chunk), so that the next M panel's first pass does not wait on L3/DRAM. */
static inline __attribute__((always_inline)) void kloop(const int8_t *a, int64_t Kp, const int8_t *b0, int r1,
                                                        int two, const int8_t *pf, int pf_rows) {
    const int8_t *b1 = b0 + Kp * 16;
    const int64_t nk = Kp / 64;
    QMM_TILE_ZERO(QMM_TC00);
    if (two) QMM_TILE_ZERO(QMM_TC01);
    if (r1) QMM_TILE_ZERO(QMM_TC10);
    if (r1 && two) QMM_TILE_ZERO(QMM_TC11);
    for (int64_t kc = 0; kc < nk; kc++) {
        for (int r = 0; r < pf_rows; r++) _mm_prefetch((const char *)(pf + r * Kp + kc * 64), _MM_HINT_T1);
        QMM_TILE_LOAD(QMM_TA0, a + kc * 64, Kp);
        QMM_TILE_LOAD(QMM_TB0, b0 + kc * 1024, 64);
        QMM_TDPBSSD(QMM_TC00, QMM_TA0, QMM_TB0);
        if (two) {
            QMM_TILE_LOAD(QMM_TB1, b1 + kc * 1024, 64);
            QMM_TDPBSSD(QMM_TC01, QMM_TA0, QMM_TB1);
        }
        if (r1) {
            QMM_TILE_LOAD(QMM_TA1, a + 16 * Kp + kc * 64, Kp);
            QMM_TDPBSSD(QMM_TC10, QMM_TA1, QMM_TB0);
            if (two) QMM_TDPBSSD(QMM_TC11, QMM_TA1, QMM_TB1);
        }
    }
}

/* The fused epilogue of one panel: stage [rows][32] int32 → y rows [m0, m0+rows), columns
 * [n0, n0+cols): qmm_z_epilogue16 (simd_avx512.h), the reference's operations. */
static void epilogue(const qmm_call *c, const int32_t *stage, int64_t m0, int rows, int64_t n0, int64_t cols,
                     const float *s) {
    for (int r = 0; r < rows; r++)
        for (int64_t j = 0; j < cols; j += 16)
            qmm_z_epilogue16(c, _mm512_loadu_si512(stage + r * 32 + j), m0 + r, n0 + j, s[m0 + r], qmm_amx_mask(cols - j));
}

static void int8_task(int64_t task, int64_t n_tasks, int thread, void *arg) {
    (void)n_tasks;
    int8_job *j = arg;
    const qmm_call *c = j->c;
    const int ti = (int)(task / j->tn), tj = (int)(task % j->tn);
    const int64_t p_lo = j->npanels_n * tj / j->tn, p_hi = j->npanels_n * (tj + 1) / j->tn;
    const int64_t m_lo = j->npanels_m * ti / j->tm, m_hi = j->npanels_m * (ti + 1) / j->tm;
    int32_t *stage = j->stage + (size_t)thread * 32 * 32;
    const int8_t *wdata = c->w->i8.data;
    for (int64_t pc = p_lo; pc < p_hi; pc += j->chunk) {
        const int64_t pe = pc + j->chunk < p_hi ? pc + j->chunk : p_hi;
        for (int64_t mp = m_lo; mp < m_hi; mp++) {
            const int64_t m0 = mp * 32;
            const int rows = (int)(c->M - m0 < 32 ? c->M - m0 : 32);
            const int r0 = rows < 16 ? rows : 16, r1 = rows - r0;
            QMM_AMX_SYM(qmm_amx_tiles_config)(r0, r1);
            const int8_t *a = j->q + m0 * j->Kp;
            /* the next M panel's rows, spread over the chunk's panels */
            const int64_t next_rows = mp + 1 < m_hi ? (c->M - m0 - 32 < 32 ? c->M - m0 - 32 : 32) : 0;
            for (int64_t p = pc; p < pe; p++) {
                const int64_t i = p - pc, np = pe - pc;
                const int64_t pr0 = next_rows * i / np, pr1 = next_rows * (i + 1) / np;
                const int8_t *pf = a + (32 + pr0) * j->Kp;
                const int pfn = (int)(pr1 - pr0);
                const int64_t nb = 2 * p;
                const int two = nb + 1 < j->nblocks;
                const int8_t *b0 = wdata + nb * j->Kp * 16;
                const int64_t n0 = nb * 16, cols = c->N - n0 < 32 ? c->N - n0 : 32;
                if (r1 && two) kloop(a, j->Kp, b0, 1, 1, pf, pfn);
                else if (r1) kloop(a, j->Kp, b0, 1, 0, pf, pfn);
                else if (two) kloop(a, j->Kp, b0, 0, 1, pf, pfn);
                else kloop(a, j->Kp, b0, 0, 0, pf, pfn);
                QMM_TILE_STORE(QMM_TC00, stage, 128);
                if (two) QMM_TILE_STORE(QMM_TC01, stage + 16, 128);
                if (r1) QMM_TILE_STORE(QMM_TC10, stage + 16 * 32, 128);
                if (r1 && two) QMM_TILE_STORE(QMM_TC11, stage + 16 * 32 + 16, 128);
                epilogue(c, stage, m0, rows, n0, cols, j->s);
            }
        }
    }
    QMM_AMX_SYM(qmm_amx_tiles_release)();
}

static qmm_status amx_int8_run(qmm_context *ctx, const qmm_call *c) {
    const qmm_weight *w = c->w;
    const int64_t M = c->M, Kp = w->i8.Kp;
    const int nt = ctx->n_threads;
    size_t qbytes;
    QMM_RETURN_IF(!qmm_mul_ok((size_t)M, (size_t)Kp, &qbytes), QMM_ERR_OUT_OF_MEMORY,
                  "layer %s: M=%lld × Kp=%lld activations too large", w->name, (long long)M, (long long)Kp);
    void *buf, *stage;
    QMM_FORWARD_IF_ERROR(qmm_context_scratch(ctx, QMM_SCRATCH_ACT, qbytes + (size_t)M * sizeof(float), &buf));
    QMM_FORWARD_IF_ERROR(qmm_context_scratch(ctx, QMM_SCRATCH_ENGINE, (size_t)nt * 32 * 32 * sizeof(int32_t), &stage));
    int8_job j;
    memset(&j, 0, sizeof j);
    j.c = c;
    j.q = buf;
    j.s = (const float *)((char *)buf + qbytes);
    QMM_FORWARD_IF_ERROR(qmm_prepass(ctx, c, (int8_t *)buf, Kp, (float *)j.s, 0));
    if (c->token_scales) memcpy(c->token_scales, j.s, (size_t)M * sizeof(float));
    j.Kp = Kp;
    j.nblocks = w->i8.Np / 16;
    j.npanels_n = (j.nblocks + 1) / 2;
    j.npanels_m = (M + 31) / 32;
    j.stage = stage;
    j.chunk = QMM_AMX_L2_B_BYTES / (32 * Kp);
    if (j.chunk < 1) j.chunk = 1;
    /* split N first (each thread streams only its share of W), then M when N is too narrow */
    j.tn = j.npanels_n < nt ? (int)j.npanels_n : nt;
    j.tm = nt / j.tn;
    if (j.tm > j.npanels_m) j.tm = (int)j.npanels_m;
    if (j.tm < 1) j.tm = 1;
    qmm_pool_run(ctx->pool, (int64_t)j.tm * j.tn, int8_task, &j);
    return QMM_OK;
}

#else /* built without AMX compiler support */
static qmm_status amx_int8_run(qmm_context *ctx, const qmm_call *c) {
    (void)ctx;
    return qmm_fail(QMM_ERR_UNSUPPORTED_HARDWARE, "layer %s: amx_int8 was not built (compiler lacks AMX)", c->w->name);
}
#endif

const qmm_engine QMM_AMX_SYM(qmm_engine_amx_int8) = {
    .id = QMM_ENGINE_AMX_INT8,
    .name = "amx_int8",
    .kind = QMM_KIND_INT8,
    .isa = QMM_ISA_AMX,
    .cpu_features = QMM_CPU_AMX_TILE | QMM_CPU_AMX_INT8 | QMM_CPU_AMX_PERMITTED,
    .built = QMM_AMX_BUILT,
    .admit = amx_int8_admit,
    .pack = NULL,
    .run = amx_int8_run,
};
