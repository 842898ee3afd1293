/*
 * avx512_vnni.c — the AVX512-VNNI int8 engine (QMM_ENGINE_AVX512_VNNI): SPEC §1 on the shared
 * n16k4 packed weights, bit-identical to the reference engine (int32 accumulators and outputs).
 *
 *   1. pre-pass (qmm_prepass, AVX-512 row kernel): q [M][Kp] int8 + s [M] fp32 into the
 *      context's QMM_SCRATCH_ACT arena; then a = q ^ 0x80 = q + 128 as u8, in place, because
 *      VPDPBUSD multiplies u8 × s8:  Σ (q+128)·w − 128·colsum[n] = Σ q·w  (mod 2^32, exact).
 *      Weights holding -128 are fine: u8 × s8 products fit the instruction's int16 partials.
 *   2. GEMM: the output is cut into tasks of MC rows × NC columns (a static partition, task i on
 *      thread i % n; every accumulator is an exact int32 sum, so the bits never depend on the
 *      thread count or on the blocking). Inside a task: for each K chunk of KC, for each panel
 *      of NRB 16-column blocks (its KC × 64-byte slices stay in L1), for each MR rows: the
 *      micro-kernel MR × NRB zmm accumulators (6 × 4: 24 zmm), one broadcast of 4 activation
 *      bytes per row and one 64-byte weight row per block per 4 k. Partial sums of a task live
 *      in a per-thread MC × NC int32 block of QMM_SCRATCH_ENGINE between K chunks.
 *   3. the last K chunk runs the fused epilogue on the registers: acc − 128·colsum, then I32
 *      out, or ((float)acc · s_r) · w_scale[n] + bias[n] (+0.0f without bias, as the
 *      reference) → f32 / f16 (vcvtps2ph, RNE) / bf16 (integer RNE, NaN kept quiet), masked
 *      stores for the last columns, row stride ldy.
 * Small M: with M ≤ MC all tasks split N, so each thread streams only its share of the weights;
 * with M ≤ SMALL_M each 16-column block streams whole (no K chunks), prefetched 1 KiB ahead.
 * No allocation per call beyond the context's scratch arenas.
 */
#include "numerics.h"
#include "prepass.h"
#include "qmm_internal.h"

#include <immintrin.h>
#include <string.h>

enum {
    MR = 6,     /* rows per micro-kernel */
    NRB = 4,    /* 16-column blocks per micro-kernel (64 columns) */
    KC = 512,   /* K chunk: a 64 × KC weight panel is 32 KiB (L1) */
    MC = 192,   /* rows per task: MC × KC activation bytes = 96 KiB (L2) */
    NC = 256,   /* columns per task: MC × NC int32 partials = 192 KiB (L2) */
    SMALL_M = 3 * MR, /* up to this M, no K chunks */
    PF_AHEAD = 1024   /* software prefetch distance of the small-M kernels, bytes */
};

typedef struct {
    const qmm_call *c;
    uint8_t *a;         /* [M][Kp] q + 128 */
    const float *s;     /* [M] */
    int32_t *part;      /* [threads][MC * NC] */
    int64_t Kp, kq;     /* kq: K rounded up to 4, in quads */
    int64_t kcq;        /* K chunk in quads: KC / 4, or all of K for small M */
    int64_t mtasks, ntasks, rows_per_task;
} vnni_job;

/* ---------------------------------------------------------------- epilogue */
static inline void store_out(const qmm_call *c, __m512i acc, int64_t r, int64_t n, float s_r) {
    const qmm_weight *w = c->w;
    int64_t left = c->N - n;
    __mmask16 m = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1u);
    acc = _mm512_sub_epi32(acc, _mm512_slli_epi32(_mm512_load_si512(w->i8.colsum + n), 7));
    if (c->y_dtype == QMM_I32) {
        _mm512_mask_storeu_epi32((int32_t *)c->y + r * c->ldy + n, m, acc);
        return;
    }
    __m512 t = _mm512_mul_ps(_mm512_cvtepi32_ps(acc), _mm512_set1_ps(s_r));
    t = _mm512_mul_ps(t, _mm512_maskz_loadu_ps(m, w->scale + n));
    t = _mm512_add_ps(t, w->bias ? _mm512_maskz_loadu_ps(m, w->bias + n) : _mm512_setzero_ps());
    switch (c->y_dtype) {
    case QMM_F16:
        _mm256_mask_storeu_epi16((uint16_t *)c->y + r * c->ldy + n, m,
                                 _mm512_cvtps_ph(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        break;
    case QMM_BF16: {
        __m512i u = _mm512_castps_si512(t);
        __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                _mm512_set1_epi32(0x7f800000));
        __m512i rr = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff),
                                                          _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1))));
        rr = _mm512_mask_mov_epi32(rr, nan, _mm512_or_si512(u, _mm512_set1_epi32(0x400000)));
        _mm256_mask_storeu_epi16((uint16_t *)c->y + r * c->ldy + n, m, _mm512_cvtepi32_epi16(_mm512_srli_epi32(rr, 16)));
        break;
    }
    default: _mm512_mask_storeu_ps((float *)c->y + r * c->ldy + n, m, t); break;
    }
}

/* ---------------------------------------------------------------- micro-kernel */
/* The full 6 × 4 tile, the hot path: all 24 accumulators pinned in zmm0-23 (weights zmm24-27,
 * broadcasts zmm28-29). gcc 12 spills an accumulator array or a set of 24 variables to the stack
 * in this loop, so it is written out. part: 6 rows of NC int32 — loaded unless first, always
 * stored. a: 6 rows lda bytes apart; b: 4 blocks of 64-byte quads ldb bytes apart; nq quads. */
static void kernel_6x4_asm(const uint8_t *a, int64_t lda, const int8_t *b, int64_t ldb, int64_t nq, int32_t *part,
                           int64_t first) {
    _Static_assert(NC == 256, "row offsets below assume NC = 256 int32");
    const uint8_t *a3 = a + 3 * lda;
    const int8_t *b3 = b + 3 * ldb;
    __asm__ volatile(
        "test %[first], %[first]\n\t"
        "jz 1f\n\t"
        "vpxord %%zmm0, %%zmm0, %%zmm0\n\t"
        "vpxord %%zmm1, %%zmm1, %%zmm1\n\t"
        "vpxord %%zmm2, %%zmm2, %%zmm2\n\t"
        "vpxord %%zmm3, %%zmm3, %%zmm3\n\t"
        "vpxord %%zmm4, %%zmm4, %%zmm4\n\t"
        "vpxord %%zmm5, %%zmm5, %%zmm5\n\t"
        "vpxord %%zmm6, %%zmm6, %%zmm6\n\t"
        "vpxord %%zmm7, %%zmm7, %%zmm7\n\t"
        "vpxord %%zmm8, %%zmm8, %%zmm8\n\t"
        "vpxord %%zmm9, %%zmm9, %%zmm9\n\t"
        "vpxord %%zmm10, %%zmm10, %%zmm10\n\t"
        "vpxord %%zmm11, %%zmm11, %%zmm11\n\t"
        "vpxord %%zmm12, %%zmm12, %%zmm12\n\t"
        "vpxord %%zmm13, %%zmm13, %%zmm13\n\t"
        "vpxord %%zmm14, %%zmm14, %%zmm14\n\t"
        "vpxord %%zmm15, %%zmm15, %%zmm15\n\t"
        "vpxord %%zmm16, %%zmm16, %%zmm16\n\t"
        "vpxord %%zmm17, %%zmm17, %%zmm17\n\t"
        "vpxord %%zmm18, %%zmm18, %%zmm18\n\t"
        "vpxord %%zmm19, %%zmm19, %%zmm19\n\t"
        "vpxord %%zmm20, %%zmm20, %%zmm20\n\t"
        "vpxord %%zmm21, %%zmm21, %%zmm21\n\t"
        "vpxord %%zmm22, %%zmm22, %%zmm22\n\t"
        "vpxord %%zmm23, %%zmm23, %%zmm23\n\t"
        "jmp 2f\n\t"
        "1:\n\t"
        "vmovdqu32 0(%[c]), %%zmm0\n\t"
        "vmovdqu32 64(%[c]), %%zmm1\n\t"
        "vmovdqu32 128(%[c]), %%zmm2\n\t"
        "vmovdqu32 192(%[c]), %%zmm3\n\t"
        "vmovdqu32 1024(%[c]), %%zmm4\n\t"
        "vmovdqu32 1088(%[c]), %%zmm5\n\t"
        "vmovdqu32 1152(%[c]), %%zmm6\n\t"
        "vmovdqu32 1216(%[c]), %%zmm7\n\t"
        "vmovdqu32 2048(%[c]), %%zmm8\n\t"
        "vmovdqu32 2112(%[c]), %%zmm9\n\t"
        "vmovdqu32 2176(%[c]), %%zmm10\n\t"
        "vmovdqu32 2240(%[c]), %%zmm11\n\t"
        "vmovdqu32 3072(%[c]), %%zmm12\n\t"
        "vmovdqu32 3136(%[c]), %%zmm13\n\t"
        "vmovdqu32 3200(%[c]), %%zmm14\n\t"
        "vmovdqu32 3264(%[c]), %%zmm15\n\t"
        "vmovdqu32 4096(%[c]), %%zmm16\n\t"
        "vmovdqu32 4160(%[c]), %%zmm17\n\t"
        "vmovdqu32 4224(%[c]), %%zmm18\n\t"
        "vmovdqu32 4288(%[c]), %%zmm19\n\t"
        "vmovdqu32 5120(%[c]), %%zmm20\n\t"
        "vmovdqu32 5184(%[c]), %%zmm21\n\t"
        "vmovdqu32 5248(%[c]), %%zmm22\n\t"
        "vmovdqu32 5312(%[c]), %%zmm23\n\t"
        "2:\n\t"
        "test %[nq], %[nq]\n\t"
        "jz 4f\n\t"
        "3:\n\t"
        "vmovdqa32 (%[b]), %%zmm24\n\t"
        "vmovdqa32 (%[b], %[ldb], 1), %%zmm25\n\t"
        "vmovdqa32 (%[b], %[ldb], 2), %%zmm26\n\t"
        "vmovdqa32 (%[b3]), %%zmm27\n\t"
        "vpbroadcastd (%[a]), %%zmm28\n\t"
        "vpdpbusd %%zmm24, %%zmm28, %%zmm0\n\t"
        "vpdpbusd %%zmm25, %%zmm28, %%zmm1\n\t"
        "vpdpbusd %%zmm26, %%zmm28, %%zmm2\n\t"
        "vpdpbusd %%zmm27, %%zmm28, %%zmm3\n\t"
        "vpbroadcastd (%[a], %[lda], 1), %%zmm29\n\t"
        "vpdpbusd %%zmm24, %%zmm29, %%zmm4\n\t"
        "vpdpbusd %%zmm25, %%zmm29, %%zmm5\n\t"
        "vpdpbusd %%zmm26, %%zmm29, %%zmm6\n\t"
        "vpdpbusd %%zmm27, %%zmm29, %%zmm7\n\t"
        "vpbroadcastd (%[a], %[lda], 2), %%zmm28\n\t"
        "vpdpbusd %%zmm24, %%zmm28, %%zmm8\n\t"
        "vpdpbusd %%zmm25, %%zmm28, %%zmm9\n\t"
        "vpdpbusd %%zmm26, %%zmm28, %%zmm10\n\t"
        "vpdpbusd %%zmm27, %%zmm28, %%zmm11\n\t"
        "vpbroadcastd (%[a3]), %%zmm29\n\t"
        "vpdpbusd %%zmm24, %%zmm29, %%zmm12\n\t"
        "vpdpbusd %%zmm25, %%zmm29, %%zmm13\n\t"
        "vpdpbusd %%zmm26, %%zmm29, %%zmm14\n\t"
        "vpdpbusd %%zmm27, %%zmm29, %%zmm15\n\t"
        "vpbroadcastd (%[a3], %[lda], 1), %%zmm28\n\t"
        "vpdpbusd %%zmm24, %%zmm28, %%zmm16\n\t"
        "vpdpbusd %%zmm25, %%zmm28, %%zmm17\n\t"
        "vpdpbusd %%zmm26, %%zmm28, %%zmm18\n\t"
        "vpdpbusd %%zmm27, %%zmm28, %%zmm19\n\t"
        "vpbroadcastd (%[a3], %[lda], 2), %%zmm29\n\t"
        "vpdpbusd %%zmm24, %%zmm29, %%zmm20\n\t"
        "vpdpbusd %%zmm25, %%zmm29, %%zmm21\n\t"
        "vpdpbusd %%zmm26, %%zmm29, %%zmm22\n\t"
        "vpdpbusd %%zmm27, %%zmm29, %%zmm23\n\t"
        "add $64, %[b]\n\t"
        "add $64, %[b3]\n\t"
        "add $4, %[a]\n\t"
        "add $4, %[a3]\n\t"
        "dec %[nq]\n\t"
        "jnz 3b\n\t"
        "4:\n\t"
        "vmovdqu32 %%zmm0, 0(%[c])\n\t"
        "vmovdqu32 %%zmm1, 64(%[c])\n\t"
        "vmovdqu32 %%zmm2, 128(%[c])\n\t"
        "vmovdqu32 %%zmm3, 192(%[c])\n\t"
        "vmovdqu32 %%zmm4, 1024(%[c])\n\t"
        "vmovdqu32 %%zmm5, 1088(%[c])\n\t"
        "vmovdqu32 %%zmm6, 1152(%[c])\n\t"
        "vmovdqu32 %%zmm7, 1216(%[c])\n\t"
        "vmovdqu32 %%zmm8, 2048(%[c])\n\t"
        "vmovdqu32 %%zmm9, 2112(%[c])\n\t"
        "vmovdqu32 %%zmm10, 2176(%[c])\n\t"
        "vmovdqu32 %%zmm11, 2240(%[c])\n\t"
        "vmovdqu32 %%zmm12, 3072(%[c])\n\t"
        "vmovdqu32 %%zmm13, 3136(%[c])\n\t"
        "vmovdqu32 %%zmm14, 3200(%[c])\n\t"
        "vmovdqu32 %%zmm15, 3264(%[c])\n\t"
        "vmovdqu32 %%zmm16, 4096(%[c])\n\t"
        "vmovdqu32 %%zmm17, 4160(%[c])\n\t"
        "vmovdqu32 %%zmm18, 4224(%[c])\n\t"
        "vmovdqu32 %%zmm19, 4288(%[c])\n\t"
        "vmovdqu32 %%zmm20, 5120(%[c])\n\t"
        "vmovdqu32 %%zmm21, 5184(%[c])\n\t"
        "vmovdqu32 %%zmm22, 5248(%[c])\n\t"
        "vmovdqu32 %%zmm23, 5312(%[c])\n\t"
        : [a] "+r"(a), [a3] "+r"(a3), [b] "+r"(b), [b3] "+r"(b3), [nq] "+r"(nq)
        : [lda] "r"(lda), [ldb] "r"(ldb), [c] "r"(part), [first] "r"(first)
        : "zmm0", "zmm1", "zmm2", "zmm3", "zmm4", "zmm5", "zmm6", "zmm7", "zmm8", "zmm9", "zmm10", "zmm11", "zmm12", "zmm13", "zmm14", "zmm15", "zmm16", "zmm17", "zmm18", "zmm19", "zmm20", "zmm21", "zmm22", "zmm23", "zmm24", "zmm25", "zmm26", "zmm27", "zmm28", "zmm29", "memory", "cc");
}

/* acc += Σ4 u8(a) · s8(b). Inline asm ties acc to one register: gcc 12's builtin adds two zmm
 * moves per VPDPBUSD in loops, which halves the kernel's issue rate. */
static inline __m512i dpbusd(__m512i acc, __m512i a, __m512i b) {
    __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
    return acc;
}

/* Accumulators are named variables (not an array) so that the compiler keeps all 24 in zmm
 * registers; mr/nr are constants in every instantiation and the unused ones disappear. */
#define ACC_ROW(i) __m512i c##i##0 = _mm512_setzero_si512(), c##i##1 = c##i##0, c##i##2 = c##i##0, c##i##3 = c##i##0;
#define ACC_DO(i, OP) \
    if (mr > i) { OP(i, 0) if (nr > 1) { OP(i, 1) } if (nr > 2) { OP(i, 2) } if (nr > 3) { OP(i, 3) } }
#define ACC_ALL(OP) ACC_DO(0, OP) ACC_DO(1, OP) ACC_DO(2, OP) ACC_DO(3, OP) ACC_DO(4, OP) ACC_DO(5, OP)
#define OP_LOAD(i, jj) c##i##jj = _mm512_loadu_si512(part + i * NC + jj * 16);
#define OP_SAVE(i, jj) _mm512_storeu_si512(part + i * NC + jj * 16, c##i##jj);
#define OP_OUT(i, jj) if (n + jj * 16 < j->c->N) store_out(j->c, c##i##jj, r + i, n + jj * 16, j->s[r + i]);
#define ROW_STEP(i)                                                                    \
    if (mr > i) {                                                                      \
        int32_t v_;                                                                    \
        memcpy(&v_, a + i * lda + q * 4, 4);                                           \
        const __m512i av = _mm512_set1_epi32(v_);                                      \
        c##i##0 = dpbusd(c##i##0, av, b0);                                \
        if (nr > 1) c##i##1 = dpbusd(c##i##1, av, b1);                    \
        if (nr > 2) c##i##2 = dpbusd(c##i##2, av, b2);                    \
        if (nr > 3) c##i##3 = dpbusd(c##i##3, av, b3);                    \
    }

/* rows [r, r+mr) × blocks [nb, nb+nr) over quads [q0, q0+nq). a: row r at quad q0; b: block nb at
 * quad q0 (blocks Kp*16 bytes apart); part: the partial sums (NC int32 per row). */
static inline __attribute__((always_inline)) void kernel(const int mr, const int nr, const vnni_job *j, const uint8_t *a,
                                                         const int8_t *b, int64_t nq, int32_t *part, int first,
                                                         int last, int64_t r, int64_t n) {
    const int64_t lda = j->Kp, ldb = j->Kp * 16;
    const int pf = j->kcq == j->kq && nq > 64;
    ACC_ROW(0) ACC_ROW(1) ACC_ROW(2) ACC_ROW(3) ACC_ROW(4) ACC_ROW(5)
    if (!first) { ACC_ALL(OP_LOAD) }
    const int8_t *p0 = b, *p1 = b + ldb, *p2 = b + 2 * ldb, *p3 = b + 3 * ldb;
    for (int64_t q = 0; q < nq; q++) {
        if (pf) { /* small M: the weights stream from memory, a few lines ahead per block */
            _mm_prefetch((const char *)p0 + q * 64 + PF_AHEAD, _MM_HINT_T0);
            if (nr > 1) _mm_prefetch((const char *)p1 + q * 64 + PF_AHEAD, _MM_HINT_T0);
            if (nr > 2) _mm_prefetch((const char *)p2 + q * 64 + PF_AHEAD, _MM_HINT_T0);
            if (nr > 3) _mm_prefetch((const char *)p3 + q * 64 + PF_AHEAD, _MM_HINT_T0);
        }
        const __m512i b0 = _mm512_load_si512(p0 + q * 64);
        const __m512i b1 = nr > 1 ? _mm512_load_si512(p1 + q * 64) : b0;
        const __m512i b2 = nr > 2 ? _mm512_load_si512(p2 + q * 64) : b0;
        const __m512i b3 = nr > 3 ? _mm512_load_si512(p3 + q * 64) : b0;
        ROW_STEP(0) ROW_STEP(1) ROW_STEP(2) ROW_STEP(3) ROW_STEP(4) ROW_STEP(5)
    }
    if (!last) { ACC_ALL(OP_SAVE) return; }
    ACC_ALL(OP_OUT)
}

#define K_CASE(MR_, NR_) \
    case MR_ * 8 + NR_: kernel(MR_, NR_, j, a, b, nq, part, first, last, r, n); break;
#define K_ROW(MR_) K_CASE(MR_, 1) K_CASE(MR_, 2) K_CASE(MR_, 3) K_CASE(MR_, 4)

static void kernel_any(int mr, int nr, const vnni_job *j, const uint8_t *a, const int8_t *b, int64_t nq, int32_t *part,
                       int first, int last, int64_t r, int64_t n) {
    if (mr == MR && nr == NRB) {
        kernel_6x4_asm(a, j->Kp, b, j->Kp * 16, nq, part, first);
        if (last) {
            for (int i = 0; i < MR; i++)
                for (int jj = 0; jj < NRB; jj++)
                    if (n + jj * 16 < j->c->N)
                        store_out(j->c, _mm512_loadu_si512(part + i * NC + jj * 16), r + i, n + jj * 16, j->s[r + i]);
        }
        return;
    }
    switch (mr * 8 + nr) {
        K_ROW(1) K_ROW(2) K_ROW(3) K_ROW(4) K_ROW(5) K_ROW(6)
    default: break;
    }
}

/* ---------------------------------------------------------------- the threaded GEMM */
static void gemm_task(int64_t task, int64_t n_tasks, int thread, void *arg) {
    (void)n_tasks;
    const vnni_job *j = arg;
    const qmm_call *c = j->c;
    const int64_t mt = task / j->ntasks, nt = task % j->ntasks;
    const int64_t m0 = mt * j->rows_per_task, m1 = m0 + j->rows_per_task < c->M ? m0 + j->rows_per_task : c->M;
    const int64_t nblocks = c->w->i8.Np / 16;
    const int64_t b0 = nt * (NC / 16), b1 = b0 + NC / 16 < nblocks ? b0 + NC / 16 : nblocks;
    int32_t *part = j->part + (int64_t)thread * MC * NC;
    for (int64_t q0 = 0; q0 < j->kq; q0 += j->kcq) {
        const int64_t nq = j->kq - q0 < j->kcq ? j->kq - q0 : j->kcq;
        const int first = q0 == 0, last = q0 + nq >= j->kq;
        for (int64_t nb = b0; nb < b1; nb += NRB) {
            const int nr = (int)(b1 - nb < NRB ? b1 - nb : NRB);
            const int8_t *b = c->w->i8.data + nb * j->Kp * 16 + q0 * 64;
            for (int64_t r = m0; r < m1; r += MR) {
                const int mr = (int)(m1 - r < MR ? m1 - r : MR);
                kernel_any(mr, nr, j, j->a + r * j->Kp + q0 * 4, b, nq, part + (r - m0) * NC + (nb - b0) * 16, first,
                           last, r, nb * 16);
            }
        }
    }
}

/* q → q + 128 (u8) in place, rows [r0, r1) */
static void to_u8_task(int64_t task, int64_t n_tasks, int thread, void *arg) {
    (void)n_tasks;
    (void)thread;
    const vnni_job *j = arg;
    int64_t r0 = task * j->rows_per_task, r1 = r0 + j->rows_per_task < j->c->M ? r0 + j->rows_per_task : j->c->M;
    const __m512i x80 = _mm512_set1_epi8((char)0x80);
    for (int64_t r = r0; r < r1; r++) {
        uint8_t *row = j->a + r * j->Kp;
        for (int64_t k = 0; k < j->kq * 4; k += 64) {
            __mmask64 m = j->kq * 4 - k >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << (j->kq * 4 - k)) - 1);
            _mm512_mask_storeu_epi8(row + k, m, _mm512_xor_si512(_mm512_maskz_loadu_epi8(m, row + k), x80));
        }
    }
}

static qmm_status run(qmm_context *ctx, const qmm_call *c) {
    const qmm_weight *w = c->w;
    const int64_t M = c->M, Kp = w->i8.Kp;
    const int nt = ctx->n_threads;
    size_t qbytes, abytes;
    QMM_RETURN_IF(!qmm_mul_ok((size_t)M, (size_t)Kp, &qbytes) || qbytes > SIZE_MAX - (size_t)M * 4, QMM_ERR_UNSUPPORTED,
                  "layer %s: M=%lld x Kp=%lld activations too large", w->name, (long long)M, (long long)Kp);
    void *buf, *pbuf;
    QMM_FORWARD_IF_ERROR(qmm_context_scratch(ctx, QMM_SCRATCH_ACT, qbytes + (size_t)M * 4, &buf));
    abytes = (size_t)nt * MC * NC * sizeof(int32_t);
    QMM_FORWARD_IF_ERROR(qmm_context_scratch(ctx, QMM_SCRATCH_ENGINE, abytes, &pbuf));
    int8_t *q = buf;                       /* [M][Kp] */
    float *s = (float *)(q + qbytes);      /* [M] (Kp is a multiple of 64: aligned) */
    QMM_FORWARD_IF_ERROR(qmm_prepass(ctx, c, q, Kp, s, 0));

    vnni_job j;
    memset(&j, 0, sizeof j);
    j.c = c;
    j.a = (uint8_t *)q;
    j.s = s;
    j.part = pbuf;
    j.Kp = Kp;
    j.kq = (c->K + 3) / 4;
    /* a = q + 128: a few row ranges per thread */
    int64_t tasks = (int64_t)nt * 4 < M ? (int64_t)nt * 4 : M;
    j.rows_per_task = (M + tasks - 1) / tasks;
    tasks = (M + j.rows_per_task - 1) / j.rows_per_task;
    qmm_pool_run(ctx->pool, tasks, to_u8_task, &j);

    j.rows_per_task = MC;
    /* small M: each weight block is read once, so stream it whole (one sequential stream per
     * block) instead of in K chunks */
    j.kcq = M <= SMALL_M ? j.kq : KC / 4;
    j.mtasks = (M + MC - 1) / MC;
    j.ntasks = (w->i8.Np / 16 + NC / 16 - 1) / (NC / 16);
    qmm_pool_run(ctx->pool, j.mtasks * j.ntasks, gemm_task, &j);
    if (c->token_scales) memcpy(c->token_scales, s, (size_t)M * sizeof(float));
    return QMM_OK;
}

/* Admission beside the kernel: the common int8 rules; this kernel has no extra limit (any M, N,
 * K, strides; -128 weights are exact with u8 × s8). */
static const char *admit(const qmm_call *c, char *why, size_t n) { return qmm_admit_common_int8(c, why, n); }

const qmm_engine qmm_engine_avx512_vnni = {
    .id = QMM_ENGINE_AVX512_VNNI, .name = "avx512_vnni", .kind = QMM_KIND_INT8, .isa = QMM_ISA_AVX512_VNNI,
    .cpu_features = QMM_CPU_AVX512F | QMM_CPU_AVX512BW | QMM_CPU_AVX512VL | QMM_CPU_AVX512_VNNI, .built = 1,
    .admit = admit, .pack = NULL, .run = run,
};
