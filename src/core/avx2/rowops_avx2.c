/*
 * rowops_avx2.c — the AVX2 (+FMA, F16C) row kernel of the row ops (rowops.h, SPEC §13): the
 * bits of qmm_rope_row_ref, lane by lane. The RMSNorm sum runs qmm_sumsq16's 16 lanes as two ymm
 * (lane i sums k ≡ i mod 16, the tail and the fold as the scalar code); every other step is
 * elementwise, 8 values per vector: the normalized row into tmp, then the pairs — interleaved:
 * xa/xb the even/odd value of each pair duplicated (vmovsldup / vmovshdup); split half: the two
 * halves 8 pairs at a time. Rows shorter than a vector, and the tails, run the scalar formula.
 * The RMSNorm + modulation rows (adaln, gated residual): the same sum, then 8 outputs per vector.
 */
#include "rowops.h"

#include "avx2/simd_avx2.h"

#include <math.h>
#include <string.h>

static float sumsq16_avx2(const void *x, qmm_dtype t, int64_t D) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 16 <= D; k += 16) {
        const __m256 v0 = qmm_y_load8(x, t, k), v1 = qmm_y_load8(x, t, k + 8);
        a0 = _mm256_add_ps(a0, _mm256_mul_ps(v0, v0));
        a1 = _mm256_add_ps(a1, _mm256_mul_ps(v1, v1));
    }
    _Alignas(32) float acc[16];
    _mm256_store_ps(acc, a0);
    _mm256_store_ps(acc + 8, a1);
    for (; k < D; k++) {
        const float v = qmm_load_f(x, t, k);
        acc[k % 16] = acc[k % 16] + v * v;
    }
    for (int w = 8; w >= 1; w /= 2)
        for (int i = 0; i < w; i++) acc[i] = acc[i] + acc[i + w];
    return acc[0];
}

/* y = C(fmaf(b, xb, C(a · xa))), 8 lanes and one */
static inline __m256 rot8(__m256 a, __m256 b, __m256 xa, __m256 xb, qmm_dtype c) {
    return qmm_y_round_to(_mm256_fmadd_ps(b, xb, qmm_y_round_to(_mm256_mul_ps(a, xa), c)), c);
}
static inline float rot1(float a, float b, float xa, float xb, qmm_dtype c) {
    return qmm_round_to(fmaf(b, xb, qmm_round_to(a * xa, c)), c);
}

/* src: the row's values (dtype st: T, or f32 in tmp after the RMSNorm) */
static void rotate_interleaved(const qmm_rope_row *p, const void *src, qmm_dtype st, void *out, const float *A,
                               const float *B) {
    const qmm_dtype t = p->t, c = p->c;
    const size_t te = qmm_dtype_size(t);
    int64_t j = 0;
    for (; j + 8 <= p->rot; j += 8) {
        const __m256 xv = qmm_y_round_to(qmm_y_load8(src, st, j), c);
        const __m256 y = rot8(_mm256_loadu_ps(A + j), _mm256_loadu_ps(B + j), _mm256_moveldup_ps(xv),
                              _mm256_movehdup_ps(xv), c);
        qmm_y_store8((char *)out + j * (int64_t)te, t, y);
    }
    for (; j < p->rot; j += 2) {
        const float x0 = qmm_round_to(qmm_load_f(src, st, j), c), x1 = qmm_round_to(qmm_load_f(src, st, j + 1), c);
        qmm_store_f(out, t, j, rot1(A[j], B[j], x0, x1, c));
        qmm_store_f(out, t, j + 1, rot1(A[j + 1], B[j + 1], x0, x1, c));
    }
}

static void rotate_split(const qmm_rope_row *p, const void *src, qmm_dtype st, void *out, const float *A,
                         const float *B) {
    const qmm_dtype t = p->t, c = p->c;
    const size_t te = qmm_dtype_size(t);
    const int64_t h = p->rot / 2;
    int64_t i = 0;
    for (; i + 8 <= h; i += 8) {
        const __m256 lo = qmm_y_round_to(qmm_y_load8(src, st, i), c);
        const __m256 hi = qmm_y_round_to(qmm_y_load8(src, st, h + i), c);
        const __m256 ylo = rot8(_mm256_loadu_ps(A + i), _mm256_loadu_ps(B + i), lo, hi, c);
        const __m256 yhi = rot8(_mm256_loadu_ps(A + h + i), _mm256_loadu_ps(B + h + i), hi, lo, c);
        qmm_y_store8((char *)out + i * (int64_t)te, t, ylo);
        qmm_y_store8((char *)out + (h + i) * (int64_t)te, t, yhi);
    }
    for (; i < h; i++) {
        const float lo = qmm_round_to(qmm_load_f(src, st, i), c), hi = qmm_round_to(qmm_load_f(src, st, h + i), c);
        qmm_store_f(out, t, i, rot1(A[i], B[i], lo, hi, c));
        qmm_store_f(out, t, h + i, rot1(A[h + i], B[h + i], hi, lo, c));
    }
}

static void rope_row_avx2(const qmm_rope_row *p, const void *x, void *out, const float *A, const float *B,
                          float *tmp) {
    const qmm_dtype t = p->t;
    const int64_t D = p->D;
    const size_t te = qmm_dtype_size(t);
    const void *src = x;
    qmm_dtype st = t;
    if (p->w) {
        const float r = 1.0f / sqrtf(sumsq16_avx2(x, t, D) / (float)D + p->eps);
        const __m256 rv = _mm256_set1_ps(r);
        int64_t k = 0;
        for (; k + 8 <= D; k += 8) {
            const __m256 v = _mm256_mul_ps(qmm_y_load8(x, t, k), rv);
            _mm256_store_ps(tmp + k, qmm_y_round_to(_mm256_mul_ps(v, _mm256_loadu_ps(p->w + k)), t));
        }
        for (; k < D; k++) {
            tmp[k] = qmm_round_to((qmm_load_f(x, t, k) * r) * p->w[k], t);
        }
        src = tmp;
        st = QMM_F32;
    }
    /* every vector (and every scalar pair) is read before it is written: out may be x */
    if (p->split_half) rotate_split(p, src, st, out, A, B);
    else rotate_interleaved(p, src, st, out, A, B);
    if (src == x) { /* the rest copied as it is (nothing to do in place) */
        if (out != x) memcpy((char *)out + p->rot * (int64_t)te, (const char *)x + p->rot * (int64_t)te,
                             (size_t)(D - p->rot) * te);
        return;
    }
    int64_t k = p->rot;
    for (; k + 8 <= D; k += 8) qmm_y_store8((char *)out + k * (int64_t)te, t, _mm256_loadu_ps(tmp + k));
    for (; k < D; k++) qmm_store_f(out, t, k, tmp[k]);
}

const qmm_rope_row_fn qmm_rope_row_avx2_ptr = rope_row_avx2;

static void rms_mod_row_avx2(const qmm_rms_mod_row *p, const void *x, const void *a, const void *b, void *out) {
    const qmm_dtype t = p->t;
    const int64_t D = p->D, te = (int64_t)qmm_dtype_size(t);
    const float r = 1.0f / sqrtf(sumsq16_avx2(x, t, D) / (float)D + p->eps);
    const __m256 rv = _mm256_set1_ps(r), one = _mm256_set1_ps(1.0f);
    int64_t k = 0;
    for (; k + 8 <= D; k += 8) {
        __m256 v = _mm256_mul_ps(qmm_y_load8(x, t, k), rv);
        if (p->w) v = _mm256_mul_ps(v, qmm_y_load8(p->w, t, k));
        v = qmm_y_round_to(v, t);
        const __m256 av = qmm_y_load8(a, t, k), bv = qmm_y_load8(b, t, k);
        if (p->kind == QMM_RMS_ADALN)
            v = _mm256_add_ps(qmm_y_round_to(_mm256_mul_ps(v, qmm_y_round_to(_mm256_add_ps(one, av), t)), t), bv);
        else
            v = _mm256_add_ps(bv, qmm_y_round_to(_mm256_mul_ps(av, v), t));
        qmm_y_store8((char *)out + k * te, t, v);
    }
    for (; k < D; k++) {
        float v = qmm_load_f(x, t, k) * r;
        if (p->w) v = v * qmm_load_f(p->w, t, k);
        v = qmm_round_to(v, t);
        const float av = qmm_load_f(a, t, k), bv = qmm_load_f(b, t, k);
        if (p->kind == QMM_RMS_ADALN) v = qmm_round_to(v * qmm_round_to(1.0f + av, t), t) + bv;
        else v = bv + qmm_round_to(av * v, t);
        qmm_store_f(out, t, k, v);
    }
}

const qmm_rms_mod_row_fn qmm_rms_mod_row_avx2_ptr = rms_mod_row_avx2;
