/*
 * avx512_f32.c — the AVX-512 FP32 float engine (FMA): the FP32 baseline, the engine of f32 (and
 * bf16, widened exactly) float weights, and a W8A16 fallback for int8 weights.
 *
 * Contract (SPEC §4; driver and layouts in core/float_act.h):
 *   int8 weight (fallback / full_precision): a = act(x), rotated if w->convrot_gs (exactly
 *     qmm_ref_act_rotate_row, values in x's dtype), kept in f32; the int8 weights are widened
 *     to f32 inside the engine from the shared n16k4 packing, one (kc × 64) block at a time;
 *     y = out((acc · w_scale[n]) + bias[n]), acc an fp32 FMA chain over k in order.
 *   float weight: a = act(x); W from w->fp (f32 as is, bf16 widened exactly);
 *     y = out(acc + bias[n]).
 * Admission: qmm_admit_common_float (no i32 output, no shared token scales); nothing else.
 *
 * Micro-kernel: 6 rows × 64 columns (24 zmm accumulators), B block [kc][64] f32 in L1, A
 * broadcast from the 6-row panel. Each output element is one FMA chain over k = 0, 1, ...
 * starting from 0 — the same chain as avx2_f32, so both f32 engines give identical bits.
 */
#include "float_act.h"
#include "pack_avx512.h"
#include "qmm_internal.h"

#include <immintrin.h>
#include <string.h>

#define MR 6
#define NR 64
#define KC 128

/* ---------------------------------------------------------------- B blocks → [kc][64] f32 */
static void widen_i8_quad(const int8_t *src, float *dst /* 4 rows of stride NR */) {
    /* 16 columns × 4 k (byte 4c + k) → 4 rows of 16 f32 */
    const __m512i tr = _mm512_set4_epi32(0x0f0b0703, 0x0e0a0602, 0x0d090501, 0x0c080400);
    const __m512i perm = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    __m512i x = _mm512_loadu_si512(src);
    x = _mm512_shuffle_epi8(x, tr);            /* per lane: dword k = 4 columns of k */
    x = _mm512_permutexvar_epi32(perm, x);     /* 16-byte chunk k = 16 columns of k */
    _mm512_storeu_ps(dst + 0 * NR, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm512_extracti32x4_epi32(x, 0))));
    _mm512_storeu_ps(dst + 1 * NR, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm512_extracti32x4_epi32(x, 1))));
    _mm512_storeu_ps(dst + 2 * NR, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm512_extracti32x4_epi32(x, 2))));
    _mm512_storeu_ps(dst + 3 * NR, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm512_extracti32x4_epi32(x, 3))));
}

static const void *prep_b(const qmm_weight *w, int64_t n0, int64_t k0, int64_t kc, void *buf) {
    float *B = buf;
    qmm_float_prefetch_next(w, n0, NR, k0, kc);
    for (int jb = 0; jb < NR / 16; jb++) {
        int64_t n = n0 + 16 * jb;
        float *d = B + 16 * jb;
        if (w->is_int8) {
            const qmm_packed_i8 *p = &w->i8;
            if (n >= p->Np) {
                for (int64_t k = 0; k < kc; k++) memset(d + k * NR, 0, 64);
                continue;
            }
            const int8_t *s = p->data + ((n / 16) * (p->Kp / 4) + k0 / 4) * 64;
            for (int64_t q = 0; q < (kc + 3) / 4; q++) widen_i8_quad(s + q * 64, d + q * 4 * NR);
        } else if (w->fp.bf16) {
            const qmm_packed_f *p = &w->fp;
            if (n >= p->Np) {
                for (int64_t k = 0; k < kc; k++) memset(d + k * NR, 0, 64);
                continue;
            }
            const uint16_t *s = p->bf16 + ((n / 16) * (p->Kp / 2) + k0 / 2) * 32;
            const __m512i hi = _mm512_set1_epi32((int)0xffff0000u);
            for (int64_t q = 0; q < (kc + 1) / 2; q++) {
                __m512i x = _mm512_loadu_si512(s + q * 32);
                _mm512_storeu_si512(d + (2 * q) * NR, _mm512_slli_epi32(x, 16));
                _mm512_storeu_si512(d + (2 * q + 1) * NR, _mm512_and_si512(x, hi));
            }
        } else {
            const qmm_packed_f *p = &w->fp;
            if (n >= p->Np) {
                for (int64_t k = 0; k < kc; k++) memset(d + k * NR, 0, 64);
                continue;
            }
            const float *s = p->f32 + ((n / 16) * p->Kp + k0) * 16;
            for (int64_t k = 0; k < kc; k++) _mm512_storeu_ps(d + k * NR, _mm512_loadu_ps(s + k * 16));
        }
    }
    return B;
}

/* ---------------------------------------------------------------- the micro-kernel */
static inline __attribute__((always_inline)) void kern(const int rows, int64_t kc, const float *a, const float *b,
                                                       float *C, int accumulate) {
    __m512 c[MR][4];
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < 4; j++) c[i][j] = accumulate ? _mm512_loadu_ps(C + i * NR + j * 16) : _mm512_setzero_ps();
    for (int64_t k = 0; k < kc; k++) {
        const float *bk = b + k * NR;
        __m512 b0 = _mm512_load_ps(bk), b1 = _mm512_load_ps(bk + 16), b2 = _mm512_load_ps(bk + 32),
               b3 = _mm512_load_ps(bk + 48);
        for (int i = 0; i < rows; i++) {
            __m512 av = _mm512_set1_ps(a[k * MR + i]);
            c[i][0] = _mm512_fmadd_ps(av, b0, c[i][0]);
            c[i][1] = _mm512_fmadd_ps(av, b1, c[i][1]);
            c[i][2] = _mm512_fmadd_ps(av, b2, c[i][2]);
            c[i][3] = _mm512_fmadd_ps(av, b3, c[i][3]);
        }
    }
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < 4; j++) _mm512_storeu_ps(C + i * NR + j * 16, c[i][j]);
}

static void kernel(int rows, int64_t kc, const void *a, const void *b, float *C, int accumulate) {
    switch (rows) {
    case 1: kern(1, kc, a, b, C, accumulate); break;
    case 2: kern(2, kc, a, b, C, accumulate); break;
    case 3: kern(3, kc, a, b, C, accumulate); break;
    case 4: kern(4, kc, a, b, C, accumulate); break;
    case 5: kern(5, kc, a, b, C, accumulate); break;
    default: kern(6, kc, a, b, C, accumulate); break;
    }
}

/* ---------------------------------------------------------------- engine */
static const char *admit(const qmm_call *c, char *why, size_t n) {
    const char *r = qmm_admit_common_float(c, why, n);
    if (r) return r;
    return NULL;
}

static qmm_status run(qmm_context *ctx, const qmm_call *c) {
    qmm_fgemm g = {
        .mr = MR, .nr = NR, .kc = KC, .bf16 = 0,
        .b_bytes = (size_t)(KC + 4) * NR * sizeof(float),
        .prep_b = prep_b, .kernel = kernel, .epilogue = qmm_float_epilogue_avx512, .pack_i8 = qmm_z_pack_n16k4,
    };
    return qmm_float_gemm(ctx, c, &g);
}

const qmm_engine qmm_engine_avx512_f32 = {
    .id = QMM_ENGINE_AVX512_F32,
    .name = "avx512_f32",
    .kind = QMM_KIND_FLOAT,
    .isa = QMM_ISA_AVX512,
    .cpu_features = QMM_CPU_AVX512F | QMM_CPU_AVX512BW | QMM_CPU_AVX512VL | QMM_CPU_AVX512DQ,
    .built = 1,
    .admit = admit,
    .run = run,
};
