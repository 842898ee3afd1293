/*
 * prepass_avx512.c — the AVX-512 activation pre-pass row kernel (SPEC §1 steps 1–3), bit-identical
 * to qmm_prepass_row_ref / qmm_amax_row_ref (numerics.h) for every dtype, act and group size,
 * including NaN / Inf / denormal inputs:
 *
 *   pass 1, per 16 values (per group of g with convrot):
 *     x (K_in values of dtype T) → f32 (bf16: shift; f16: vcvtph2ps, Inf/NaN lanes rebuilt with
 *     integer ops exactly as qmm_f16_to_f32 does, so a signalling NaN stays signalling)
 *     → act (none | swiglu | gelu_tanh, vector qmm_expf: the same fmas, roundscale = rintf,
 *     scalef = ldexpf) rounded to T → radix-4 rotation (strides 1 and 4 inside a zmm by
 *     broadcast + masked butterflies, 16 and 64 across zmms; same butterflies as qmm_rotate_f32)
 *     → × 1/sqrt(g) → rounded to T (bf16: integer RNE as qmm_f32_to_bf16; f16: vcvtps2ph with RNE,
 *     which keeps denormals and NaN payloads as qmm_f32_to_f16 does) → a stored in tmp,
 *     max |a| accumulated.
 *   amax: a row holding a NaN takes the scalar qmm_amax_f32 over tmp (first NaN, as the reference).
 *   pass 2: q = clamp(rne_int(T(a / T(s))), -128, 127), NaN → 0, XOR flip (0, or 0x80: the u8
 *   form), stored by a truncating vpmovdb; columns K..qcols hold flip (the value of q = 0).
 *
 * The vector primitives (conversions, exp, activations, rotation, act + rotation of a row) are
 * shared with the float engines' pre-pass: simd_avx512.h.
 *
 * Rows with several NaNs of different payloads: s is NaN in both, its payload follows the first
 * NaN of `a`, which both paths compute with the same operations (operand order is the compiler's).
 */
#include "numerics.h"
#include "prepass.h"
#include "simd_avx512.h"

#include <immintrin.h>
#include <string.h>

/* ---------------------------------------------------------------- pass 1: a into tmp, amax */
static float act_rotate_amax(const void *x, qmm_dtype t, int64_t K, qmm_act act, int gs, float *tmp) {
    __mmask16 nan = 0;
    __m512 vmax = qmm_z_act_rotate(x, t, K, act, gs, 0, K, tmp, &nan);
    if (nan) return qmm_amax_f32(tmp, K);
    return _mm512_reduce_max_ps(vmax);
}

/* ---------------------------------------------------------------- the row kernels */
static void prepass_row_avx512(const void *x, qmm_dtype t, int64_t K, qmm_act act, int gs, const float *s_in, int8_t *q,
                               int64_t qcols, uint8_t flip, float *s_out, float *tmp) {
    float amax = act_rotate_amax(x, t, K, act, gs, tmp);
    float s = s_in ? *s_in : qmm_scale_of(amax);
    const __m512 vs = _mm512_set1_ps(qmm_quant_divisor(s, t));
    const __m512 lo = _mm512_set1_ps(-128.0f), hi = _mm512_set1_ps(127.0f);
    const __m512i vflip = _mm512_set1_epi32(flip);
    for (int64_t k = 0; k < K; k += 16) {
        __mmask16 m = qmm_z_tail_mask(K - k);
        __m512 v = qmm_z_round_to(_mm512_div_ps(_mm512_maskz_loadu_ps(m, tmp + k), vs), t);
        __mmask16 ok = _mm512_cmp_ps_mask(v, v, _CMP_ORD_Q);
        v = _mm512_min_ps(_mm512_max_ps(_mm512_roundscale_ps(v, QMM_Z_RNE), lo), hi);
        __m512i i = _mm512_xor_si512(_mm512_maskz_cvtps_epi32(ok, v), vflip);
        _mm512_mask_cvtepi32_storeu_epi8(q + k, m, i);
    }
    if (qcols > K) memset(q + K, flip, (size_t)(qcols - K));
    *s_out = s;
}

static float amax_row_avx512(const void *x, qmm_dtype t, int64_t K, qmm_act act, int gs, float *tmp) {
    return act_rotate_amax(x, t, K, act, gs, tmp);
}

const qmm_prepass_row_fn qmm_prepass_row_avx512_ptr = prepass_row_avx512;
const qmm_amax_row_fn qmm_amax_row_avx512_ptr = amax_row_avx512;
