/*
 * avx2_int8.c — the AVX2 int8 engine (QMM_ENGINE_AVX2_INT8) for x86 without VNNI (Haswell to
 * Ice Lake client, Zen 1–3).
 *
 * Contract: y = epilogue(q · Wᵀ) per SPEC §1 with the same bits as the reference engine.
 * Products must be exact, and VPMADDUBSW saturates its int16 pair sums: u8 (q + 128 ≤ 255) times
 * s8 reaches 2·255·127 = 64770. The scheme used: the activation's magnitude |q| (VPABSB, ≤ 128
 * as u8) times the weight with the activation's sign moved onto it (VPSIGNB(w, q), |w| ≤ 127);
 * pair sums are ≤ 2·128·127 = 32512, never saturate; VPMADDWD with ones widens to int32.
 * Why this and not widening to int16: 4 instructions per 32 weight bytes and no reshuffle of
 * the n16k4 packing (widening needs a re-layout for VPMADDWD pairs and 2× the loads).
 * Its one precondition: no weight equals -128 (VPSIGNB cannot negate it). qmm's quantizer never
 * produces -128 (SPEC §2); a weight that has one (w->has_neg128, found at creation) is refused
 * by admit() with that reason, so dispatch moves on (to the float fallback). A borrowed weight's
 * values are not known at admission: a panel whose packing found a -128 runs the exact scalar
 * kernel (qmm_i8_tile.neg128).
 * Register blocking: up to 4 rows × 16 channels (8 accumulators). Blocking, threads, epilogue:
 * int8_gemm_avx2.h.
 */
#include "int8_gemm_avx2.h"

static inline __attribute__((always_inline)) void avx2_int8_mrx16(const uint8_t *a, int64_t lda, const int8_t *b,
                                                              int64_t kq, int32_t *c, int64_t ldc, const int mr,
                                                              int first, const int8_t *pf, int64_t pf_kq) {
    __m256i lo[4], hi[4];
    const __m256i ones = _mm256_set1_epi16(1);
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) {
        if (r < mr) { lo[r] = _mm256_setzero_si256(); hi[r] = _mm256_setzero_si256(); }
    }
    for (int64_t i = 0; i < kq; i++) {
        if (i < pf_kq) _mm_prefetch((const char *)(pf + i * 64), _MM_HINT_T1);
        __m256i b0 = _mm256_load_si256((const __m256i *)(b + i * 64));
        __m256i b1 = _mm256_load_si256((const __m256i *)(b + i * 64 + 32));
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            if (r < mr) {
                int32_t v;
                memcpy(&v, a + r * lda + i * 4, 4);
                __m256i av = _mm256_set1_epi32(v);
                __m256i mag = _mm256_abs_epi8(av);
                __m256i p0 = _mm256_maddubs_epi16(mag, _mm256_sign_epi8(b0, av));
                __m256i p1 = _mm256_maddubs_epi16(mag, _mm256_sign_epi8(b1, av));
                lo[r] = _mm256_add_epi32(lo[r], _mm256_madd_epi16(p0, ones));
                hi[r] = _mm256_add_epi32(hi[r], _mm256_madd_epi16(p1, ones));
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) {
        if (r < mr) {
            __m256i *c0 = (__m256i *)(c + r * ldc), *c1 = (__m256i *)(c + r * ldc + 8);
            if (!first) {
                lo[r] = _mm256_add_epi32(lo[r], _mm256_loadu_si256(c0));
                hi[r] = _mm256_add_epi32(hi[r], _mm256_loadu_si256(c1));
            }
            _mm256_storeu_si256(c0, lo[r]);
            _mm256_storeu_si256(c1, hi[r]);
        }
    }
}

static void avx2_int8_kernel(const uint8_t *a, int64_t lda, const int8_t *b, int64_t kq, int32_t *c, int64_t ldc, int mr,
                        int first, const int8_t *pf, int64_t pf_kq) {
    switch (mr) {
    case 1: avx2_int8_mrx16(a, lda, b, kq, c, ldc, 1, first, pf, pf_kq); break;
    case 2: avx2_int8_mrx16(a, lda, b, kq, c, ldc, 2, first, pf, pf_kq); break;
    case 3: avx2_int8_mrx16(a, lda, b, kq, c, ldc, 3, first, pf, pf_kq); break;
    default: avx2_int8_mrx16(a, lda, b, kq, c, ldc, 4, first, pf, pf_kq); break;
    }
}

static const char *admit(const qmm_call *c, char *why, size_t n) {
    const char *r = qmm_admit_common_int8(c, why, n);
    if (r) return r;
    if (c->w->has_neg128)
        return "weight holds -128 (not from qmm's symmetric quantizer): the exact VPSIGNB/VPMADDUBSW scheme needs "
               "|w| <= 127";
    return NULL;
}

/* The exact scalar form of the same kernel, for a panel of a borrowed weight that held -128 when
 * this call packed it (admission cannot see a borrowed weight's values; they may change between
 * calls). */
static void scalar_kernel(const uint8_t *a, int64_t lda, const int8_t *b, int64_t kq, int32_t *c, int64_t ldc, int mr,
                          int first, const int8_t *pf, int64_t pf_kq) {
    (void)pf;
    (void)pf_kq;
    for (int r = 0; r < mr; r++)
        for (int j = 0; j < 16; j++) {
            uint32_t sum = first ? 0u : (uint32_t)c[r * ldc + j];
            for (int64_t i = 0; i < kq * 4; i++)
                sum += (uint32_t)((int32_t)(int8_t)a[r * lda + i] * (int32_t)b[(i / 4) * 64 + j * 4 + i % 4]);
            c[r * ldc + j] = (int32_t)sum;
        }
}

static void tile(const qmm_i8_gemm *g, const qmm_i8_tile *t) {
    qmm_a2_tile(g, t, t->neg128 ? scalar_kernel : avx2_int8_kernel);
}
static const qmm_i8_engine k_avx2_int8 = QMM_A2_ENGINE(0, 4, tile);

static qmm_status run(qmm_context *ctx, const qmm_call *c) { return qmm_int8_gemm(ctx, c, &k_avx2_int8); }

const qmm_engine qmm_engine_avx2_int8 = {
    .id = QMM_ENGINE_AVX2_INT8,
    .name = "avx2_int8",
    .kind = QMM_KIND_INT8,
    .isa = QMM_ISA_AVX2,
    .cpu_features = QMM_CPU_AVX2 | QMM_CPU_FMA | QMM_CPU_F16C,
    .built = 1,
    .admit = admit,
    .run = run,
};
