/*
 * avx2_f32.c — the AVX2-FMA FP32 float engine: the float fallback (W8A16) and the float-weight
 * engine of machines without AVX-512.
 *
 * Contract (SPEC §4; driver and layouts in core/float_act.h):
 *   int8 weight (fallback / full_precision): a = act(x), rotated if w->convrot_gs (exactly
 *     qmm_ref_act_rotate_row, values in x's dtype), kept in f32; the int8 weights are widened
 *     to f32 inside the engine from the shared n16k4 packing, one (kc × 16) block at a time;
 *     y = out((acc · w_scale[n]) + bias[n]).
 *   float weight: a = act(x); W from w->fp (f32 as is, bf16 widened exactly); y = out(acc + bias[n]).
 * Admission: qmm_admit_common_float; nothing else.
 *
 * Micro-kernel: 6 rows × 16 columns (12 ymm accumulators), B block [kc][16] f32. Each output
 * element is one FMA chain over k in order from 0: the same bits as avx512_f32.
 */
#include "float_act.h"
#include "qmm_internal.h"

#include <immintrin.h>
#include <string.h>

#define MR 6
#define NR 16
#define KC 256

/* ---------------------------------------------------------------- B blocks → [kc][16] f32 */
static const void *prep_b(const qmm_weight *w, int64_t n0, int64_t k0, int64_t kc, void *buf) {
    float *B = buf;
    qmm_float_prefetch_next(w, n0, NR, k0, kc);
    /* NR == 16: one block of 16 columns, always inside Np */
    if (w->is_int8) {
        const qmm_packed_i8 *p = &w->i8;
        const int8_t *s = p->data + ((n0 / 16) * (p->Kp / 4) + k0 / 4) * 64;
        const __m128i tr = _mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
        for (int64_t q = 0; q < (kc + 3) / 4; q++) {
            /* lane l: columns 4l..4l+3 × 4 k → dword k = 4 columns of k */
            __m128i l0 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(s + q * 64)), tr);
            __m128i l1 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(s + q * 64 + 16)), tr);
            __m128i l2 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(s + q * 64 + 32)), tr);
            __m128i l3 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(s + q * 64 + 48)), tr);
            __m128i a01 = _mm_unpacklo_epi32(l0, l1), b01 = _mm_unpackhi_epi32(l0, l1); /* k0,k1 | k2,k3 cols 0-7 */
            __m128i a23 = _mm_unpacklo_epi32(l2, l3), b23 = _mm_unpackhi_epi32(l2, l3); /* cols 8-15 */
            float *d = B + q * 4 * NR;
            _mm256_storeu_ps(d + 0 * NR, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(a01)));
            _mm256_storeu_ps(d + 0 * NR + 8, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(a23)));
            _mm256_storeu_ps(d + 1 * NR, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(a01, 8))));
            _mm256_storeu_ps(d + 1 * NR + 8, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(a23, 8))));
            _mm256_storeu_ps(d + 2 * NR, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b01)));
            _mm256_storeu_ps(d + 2 * NR + 8, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b23)));
            _mm256_storeu_ps(d + 3 * NR, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(b01, 8))));
            _mm256_storeu_ps(d + 3 * NR + 8, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(b23, 8))));
        }
    } else if (w->fp.bf16) {
        const qmm_packed_f *p = &w->fp;
        const uint16_t *s = p->bf16 + ((n0 / 16) * (p->Kp / 2) + k0 / 2) * 32;
        const __m256i hi = _mm256_set1_epi32((int)0xffff0000u);
        for (int64_t q = 0; q < (kc + 1) / 2; q++) {
            __m256i x0 = _mm256_loadu_si256((const __m256i *)(s + q * 32));      /* columns 0..7 */
            __m256i x1 = _mm256_loadu_si256((const __m256i *)(s + q * 32 + 16)); /* columns 8..15 */
            float *d = B + 2 * q * NR;
            _mm256_storeu_si256((__m256i *)d, _mm256_slli_epi32(x0, 16));
            _mm256_storeu_si256((__m256i *)(d + 8), _mm256_slli_epi32(x1, 16));
            _mm256_storeu_si256((__m256i *)(d + NR), _mm256_and_si256(x0, hi));
            _mm256_storeu_si256((__m256i *)(d + NR + 8), _mm256_and_si256(x1, hi));
        }
    } else {
        return w->fp.f32 + ((n0 / 16) * w->fp.Kp + k0) * 16; /* already [k][16] */
    }
    return B;
}

/* ---------------------------------------------------------------- the micro-kernel */
static inline __attribute__((always_inline)) void kern(const int rows, int64_t kc, const float *a, const float *b,
                                                       float *C, int accumulate) {
    __m256 c[MR][2];
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < 2; j++) c[i][j] = accumulate ? _mm256_loadu_ps(C + i * NR + j * 8) : _mm256_setzero_ps();
    for (int64_t k = 0; k < kc; k++) {
        __m256 b0 = _mm256_loadu_ps(b + k * NR), b1 = _mm256_loadu_ps(b + k * NR + 8);
        for (int i = 0; i < rows; i++) {
            __m256 av = _mm256_broadcast_ss(a + k * MR + i);
            c[i][0] = _mm256_fmadd_ps(av, b0, c[i][0]);
            c[i][1] = _mm256_fmadd_ps(av, b1, c[i][1]);
        }
    }
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < 2; j++) _mm256_storeu_ps(C + i * NR + j * 8, c[i][j]);
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
        .prep_b = prep_b, .kernel = kernel, .epilogue = NULL,
    };
    return qmm_float_gemm(ctx, c, &g);
}

const qmm_engine qmm_engine_avx2_f32 = {
    .id = QMM_ENGINE_AVX2_F32,
    .name = "avx2_f32",
    .kind = QMM_KIND_FLOAT,
    .isa = QMM_ISA_AVX2,
    .cpu_features = QMM_CPU_AVX2 | QMM_CPU_FMA,
    .built = 1,
    .admit = admit,
    .run = run,
};
