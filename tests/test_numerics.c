/*
 * test_numerics.c — the scalar definitions of SPEC §1–§2 (numerics.h) checked against
 * first principles: the regular Hadamard H_g (symmetric, its own inverse, the fast radix-4
 * transform equals the explicit Kronecker product), rotation invariance of x·Wᵀ, the
 * kitchen-exact quantization edge cases (zero rows, a huge value, half steps, -128 reachable for
 * activations but never in weights, NaN/Inf), bf16/f16 rounding, and qmm_expf accuracy.
 */
#include "numerics.h"
#include "qmm_internal.h"
#include "testutil.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const int H4[4][4] = {{1, 1, 1, -1}, {1, 1, -1, 1}, {1, -1, 1, 1}, {-1, 1, 1, 1}};

/* explicit H_g = (H4 ⊗ ... ⊗ H4) / sqrt(g), g x g, in double */
static double *explicit_h(int g) {
    double *h = malloc(sizeof(double) * (size_t)g * (size_t)g);
    for (int i = 0; i < g; i++)
        for (int j = 0; j < g; j++) {
            int v = 1;
            for (int a = i, b = j, d = 1; d < g; d *= 4, a /= 4, b /= 4) v *= H4[a % 4][b % 4];
            h[i * g + j] = v / sqrt((double)g);
        }
    return h;
}

static void test_hadamard(void) {
    const int gs[3] = {16, 64, 256};
    for (int t = 0; t < 3; t++) {
        int g = gs[t];
        double *h = explicit_h(g);
        int sym = 1;
        double worst = 0;
        for (int i = 0; i < g; i++)
            for (int j = 0; j < g; j++) {
                if (h[i * g + j] != h[j * g + i]) sym = 0;
                double s = 0;
                for (int k = 0; k < g; k++) s += h[i * g + k] * h[k * g + j];
                double e = fabs(s - (i == j ? 1.0 : 0.0));
                if (e > worst) worst = e;
            }
        TU_CHECK(sym, "H_%d is not symmetric", g);
        TU_CHECK(worst < 1e-12, "H_%d * H_%d != I: worst %.3g", g, g, worst);
        /* fast transform (fp32) == explicit product (fp64) within fp32 noise, on 3 groups */
        int K = 3 * g;
        float *x = malloc(sizeof(float) * (size_t)K), *x0 = malloc(sizeof(float) * (size_t)K);
        double *want = malloc(sizeof(double) * (size_t)K);
        tu_fill_float(x, QMM_F32, K, 1.0f);
        memcpy(x0, x, sizeof(float) * (size_t)K);
        double norm = 0;
        for (int b = 0; b < K; b += g)
            for (int j = 0; j < g; j++) {
                double s = 0;
                for (int k = 0; k < g; k++) s += (double)x[b + k] * h[k * g + j];
                want[b + j] = s;
                norm += s * s;
            }
        qmm_rotate_f32(x, K, g);
        double maxe = 0, tol = 1e-6 * sqrt(norm / K) * log2(g);
        for (int k = 0; k < K; k++) maxe = fmax(maxe, fabs(x[k] - want[k]));
        TU_CHECK(maxe < tol, "fast H_%d differs from x*H: %.3g (tol %.3g)", g, maxe, tol);
        /* applying it again gives x back (its own inverse) */
        qmm_rotate_f32(x, K, g);
        maxe = 0;
        for (int k = 0; k < K; k++) maxe = fmax(maxe, fabs(x[k] - x0[k]));
        TU_CHECK(maxe < 2 * tol, "H_%d applied twice: off by %.3g", g, maxe);
        free(x0);
        free(x);
        free(want);
        free(h);
    }
    /* the regular Hadamard, not Sylvester's: e_0 · H_16 has a -1 where H4[0][3] puts it */
    float e[16] = {1};
    qmm_rotate_f32(e, 16, 16);
    TU_CHECK(e[3] == -0.25f && e[0] == 0.25f && e[15] == 0.25f, "e0*H16 = [%g %g .. %g]: not the regular Hadamard",
             e[0], e[3], e[15]);
}

static void test_rotation_invariance(void) {
    for (int t = 0; t < 3; t++) {
        int g = t == 0 ? 16 : t == 1 ? 64 : 256;
        int K = g * (int)tu_rand_int(1, 4);
        float *x = malloc(sizeof(float) * (size_t)K), *w = malloc(sizeof(float) * (size_t)K);
        tu_fill_float(x, QMM_F32, K, 1.0f);
        tu_fill_float(w, QMM_F32, K, 1.0f);
        double d0 = 0, n0 = 0;
        for (int k = 0; k < K; k++) { d0 += (double)x[k] * w[k]; n0 += fabs((double)x[k] * w[k]); }
        qmm_rotate_f32(x, K, g);
        qmm_rotate_f32(w, K, g);
        double d1 = 0;
        for (int k = 0; k < K; k++) d1 += (double)x[k] * w[k];
        TU_CHECK(fabs(d1 - d0) <= 1e-5 * n0, "g=%d K=%d: x.w=%.9g but rot(x).rot(w)=%.9g", g, K, d0, d1);
        free(x);
        free(w);
    }
}

static void test_quantize_edges(void) {
    float a[8];
    int8_t q[8];
    /* all-zero row: scale 1e-30, zeros */
    memset(a, 0, sizeof a);
    float s = qmm_scale_of(qmm_amax_f32(a, 8));
    TU_CHECK(s == 1e-30f, "zero row: scale %g, want 1e-30", s);
    qmm_ref_quantize_row(a, 8, QMM_F32, s, q);
    int zeros = 1;
    for (int k = 0; k < 8; k++) zeros &= q[k] == 0;
    TU_CHECK(zeros, "zero row: q not all zero");
    /* half steps round to even: amax 127 → s = 1 exactly */
    float hs[8] = {127, 0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 126.5f};
    int8_t want[8] = {127, 0, 2, 2, 0, -2, -2, 126};
    s = qmm_scale_of(qmm_amax_f32(hs, 8));
    TU_CHECK(s == 1.0f, "amax 127: scale %g", s);
    for (int t = 0; t < 3; t++) {
        qmm_dtype T = t == 0 ? QMM_F32 : t == 1 ? QMM_BF16 : QMM_F16;
        qmm_ref_quantize_row(hs, 8, T, s, q);
        int ok = 1;
        for (int k = 0; k < 8; k++) ok &= q[k] == want[k];
        TU_CHECK(ok, "half steps (%s): got %d %d %d %d %d %d %d %d", qmm_dtype_name(T), q[0], q[1], q[2], q[3], q[4],
                 q[5], q[6], q[7]);
    }
    /* one huge value: it becomes ±127, the rest round to 0 */
    float hv[8] = {1, -2, 3e30f, 0.5f, -1, 2, -3, 4};
    s = qmm_scale_of(qmm_amax_f32(hv, 8));
    qmm_ref_quantize_row(hv, 8, QMM_F32, s, q);
    TU_CHECK(q[2] == 127 && q[0] == 0 && q[7] == 0, "huge value: q = %d (want 127), others %d %d", q[2], q[0], q[7]);
    /* -128 is reachable for activations: in bf16, T(s) can round s = amax/127 down enough that
     * amax / T(s) rounds (in bf16) to 127.5, then half-to-even to 128: -amax → -128. */
    int found = 0;
    for (uint32_t h = 0x3f80; h < 0x4000 && !found; h++) {
        float m1[2] = {-qmm_bf16_to_f32((uint16_t)h), 0.25f};
        s = qmm_scale_of(qmm_amax_f32(m1, 2));
        qmm_ref_quantize_row(m1, 2, QMM_BF16, s, q);
        if (q[0] == -128) {
            found = 1;
            float p1[2] = {-m1[0], 0.25f};
            qmm_ref_quantize_row(p1, 2, QMM_BF16, s, q);
            TU_CHECK(q[0] == 127, "bf16 row {%g, .25}: q[0] = %d, want 127 (clamped from 128)", p1[0], q[0]);
            qmm_ref_quantize_row(m1, 2, QMM_F32, s, q);
            TU_CHECK(q[0] == -127, "f32 row {%g, .25}: q[0] = %d, want -127", m1[0], q[0]);
        }
    }
    TU_CHECK(found, "no bf16 value in [1, 2) quantizes to -128 (kitchen-exact rounding lost?)");
    /* NaN propagates to the scale, Inf makes it Inf; q is 0 for NaN quotients */
    float na[3] = {1.0f, NAN, 2.0f};
    float sn = qmm_scale_of(qmm_amax_f32(na, 3));
    TU_CHECK(isnan(sn), "row with NaN: scale %g, want NaN", sn);
    qmm_ref_quantize_row(na, 3, QMM_F32, sn, q);
    TU_CHECK(q[0] == 0 && q[1] == 0 && q[2] == 0, "row with NaN: q = %d %d %d, want 0", q[0], q[1], q[2]);
    float ia[3] = {1.0f, -INFINITY, 2.0f};
    float si = qmm_scale_of(qmm_amax_f32(ia, 3));
    TU_CHECK(isinf(si), "row with Inf: scale %g, want Inf", si);
    qmm_ref_quantize_row(ia, 3, QMM_F32, si, q);
    TU_CHECK(q[0] == 0 && q[1] == 0, "row with Inf: q = %d %d, want 0", q[0], q[1]);
    /* f16 row with a scale that rounds to 0 in f16 (amax 1e-6 → s ≈ 7.9e-9 < 2^-25): the kitchen
     * divides by f16's smallest normal instead, so the row quantizes to 0 (not ±127 from a / 0) */
    {
        float tiny[3] = {qmm_round_to(1e-6f, QMM_F16), qmm_round_to(-5e-7f, QMM_F16), 0.0f};
        float st = qmm_scale_of(qmm_amax_f32(tiny, 3));
        TU_CHECK(qmm_round_to(st, QMM_F16) == 0.0f && qmm_quant_divisor(st, QMM_F16) == 6.103515625e-05f,
                 "f16 tiny scale: T(s) = %g, divisor %g", (double)qmm_round_to(st, QMM_F16),
                 (double)qmm_quant_divisor(st, QMM_F16));
        qmm_ref_quantize_row(tiny, 3, QMM_F16, st, q);
        TU_CHECK(q[0] == 0 && q[1] == 0 && q[2] == 0, "f16 tiny scale: q = %d %d %d, want 0", q[0], q[1], q[2]);
        qmm_ref_quantize_row(tiny, 3, QMM_BF16, st, q); /* bf16 keeps the scale: full range */
        TU_CHECK(q[0] == 127, "bf16 tiny scale: q[0] = %d, want 127", q[0]);
    }
    /* weights: never -128, even for a row whose most negative value is the amax */
    int N = 7, K = 64;
    float *w = malloc(sizeof(float) * (size_t)(N * K));
    tu_fill_float(w, QMM_F32, N * K, 3.0f);
    w[5] = -1000.0f;
    int8_t *wq = malloc((size_t)(N * K));
    float sc[7];
    for (int g = 0; g <= 16; g += 16) {
        qmm_quant_options o = {g, 0};
        TU_CHECK_OK(qmm_quantize_weight(w, QMM_F32, N, K, 0, &o, wq, sc, NULL));
        int minq = 0;
        for (int i = 0; i < N * K; i++) minq = wq[i] < minq ? wq[i] : minq;
        TU_CHECK(minq == -127, "quantized weights (gs=%d): min %d, want -127 (never -128)", g, minq);
    }
    /* non-finite weights are refused naming row and column; rows near FLT_MAX quantize as the
     * same row scaled by 2^-64 does, with the scale scaled back (no Inf from the rotation) */
    for (int g = 0; g <= 16; g += 16) {
        qmm_quant_options o = {g, 0};
        w[3 * K + 9] = NAN;
        TU_CHECK(qmm_quantize_weight(w, QMM_F32, N, K, 0, &o, wq, sc, NULL) == QMM_ERR_UNSUPPORTED &&
                     strstr(qmm_last_error(), "row 3") && strstr(qmm_last_error(), "column 9"),
                 "NaN weight: %s", qmm_last_error());
        w[3 * K + 9] = 1.0f;
        float *hw = malloc(sizeof(float) * (size_t)(N * K)), *dw = malloc(sizeof(float) * (size_t)(N * K));
        int8_t *hq = malloc((size_t)(N * K)), *dq = malloc((size_t)(N * K));
        float hs[7], ds[7];
        for (int i = 0; i < N * K; i++) {
            hw[i] = i / K == 2 ? w[i] * 0x1p100f * 0x1p20f : w[i];  /* row 2 near FLT_MAX */
            dw[i] = i / K == 2 ? hw[i] * 0x1p-64f : w[i];
        }
        TU_CHECK_OK(qmm_quantize_weight(hw, QMM_F32, N, K, 0, &o, hq, hs, NULL));
        TU_CHECK_OK(qmm_quantize_weight(dw, QMM_F32, N, K, 0, &o, dq, ds, NULL));
        TU_CHECK(isfinite(hs[2]) && hs[2] == ds[2] * 0x1p64f && memcmp(hq, dq, (size_t)(N * K)) == 0 &&
                     hs[0] == ds[0],
                 "gs %d: row near FLT_MAX: scale %g (scaled path %g)", g, (double)hs[2], (double)ds[2] * 0x1p64);
        free(hw); free(dw); free(hq); free(dq);
    }
    free(w);
    free(wq);
}

static void test_conversions(void) {
    TU_CHECK(qmm_f32_to_bf16(1.0f) == 0x3f80, "bf16(1)");
    TU_CHECK(qmm_f32_to_bf16(qmm_bits_f32(0x3f808000u)) == 0x3f80, "bf16 tie to even (down)");
    TU_CHECK(qmm_f32_to_bf16(qmm_bits_f32(0x3f818000u)) == 0x3f82, "bf16 tie to even (up)");
    TU_CHECK(qmm_f32_to_bf16(INFINITY) == 0x7f80 && qmm_f32_to_bf16(-INFINITY) == 0xff80, "bf16 inf");
    TU_CHECK(isnan(qmm_bf16_to_f32(qmm_f32_to_bf16(NAN))), "bf16 NaN stays NaN");
    TU_CHECK(qmm_f32_to_bf16(FLT_MAX) == 0x7f80, "bf16(FLT_MAX) rounds to inf");
    TU_CHECK(qmm_f32_to_f16(65520.0f) == 0x7c00 && qmm_f32_to_f16(65504.0f) == 0x7bff, "f16 overflow boundary");
    TU_CHECK(isnan(qmm_f16_to_f32(qmm_f32_to_f16(NAN))), "f16 NaN stays NaN");
    TU_CHECK(qmm_f32_to_f16(5.9604644775390625e-08f) == 1, "f16 smallest subnormal");
    TU_CHECK(qmm_f32_to_f16(2.98023223876953125e-08f) == 0, "f16 half of smallest subnormal ties to 0");
#if defined(__FLT16_MAX__)
    /* against the compiler's own conversion on random and special bit patterns */
    int bad = 0;
    for (int i = 0; i < 200000; i++) {
        uint32_t u = (uint32_t)tu_rand_u64();
        if (i % 4 == 0) u = (u & 0x807fffffu) | ((uint32_t)tu_rand_int(100, 145) << 23); /* near f16 range */
        float f = qmm_bits_f32(u);
        if (f != f) continue;
        _Float16 h = (_Float16)f;
        uint16_t hb;
        memcpy(&hb, &h, 2);
        if (hb != qmm_f32_to_f16(f)) {
            if (!bad) TU_CHECK(0, "f16(%a): qmm 0x%04x, compiler 0x%04x", (double)f, qmm_f32_to_f16(f), hb);
            bad++;
        }
        float back = (float)h;
        if (qmm_f16_to_f32(hb) != back) bad++;
    }
    TU_CHECK(bad == 0, "f16 conversions: %d mismatches against the compiler", bad);
#else
    tu_skip("f16 vs compiler", "no _Float16 in this compiler");
#endif
}

static void test_expf(void) {
    double worst = 0;
    for (int i = 0; i < 100000; i++) {
        float x = (float)((tu_rand_u64() >> 11) * (1.0 / 9007199254740992.0)) * 176.0f - 87.3f;
        double want = exp((double)x);
        double got = qmm_expf(x);
        double ulp = tu_ulp(want, QMM_F32);
        double e = fabs(got - want) / ulp;
        if (e > worst) worst = e;
    }
    TU_CHECK(worst <= 2.0, "qmm_expf: worst error %.2f ulp (want <= 2)", worst);
    tu_note("qmm_expf worst error %.2f ulp on [-87.3, 88.7]", worst);
    TU_CHECK(qmm_expf(100.0f) == INFINITY && qmm_expf(-100.0f) == 0.0f && isnan(qmm_expf(NAN)), "expf specials");
    /* activations at a few points against libm in double */
    const float xs[5] = {-3.0f, -0.5f, 0.0f, 0.75f, 4.0f};
    for (int i = 0; i < 5; i++) {
        double x = xs[i];
        double silu = x / (1 + exp(-x));
        double gelu = 0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
        TU_CHECK(fabs(qmm_silu(xs[i]) - silu) <= 4 * tu_ulp(silu, QMM_F32) + 1e-30, "silu(%g)", x);
        TU_CHECK(fabs(qmm_gelu_tanh(xs[i]) - gelu) <= 8 * tu_ulp(gelu, QMM_F32) + 1e-30, "gelu_tanh(%g)", x);
    }
}

int main(int argc, char **argv) {
    tu_init(argc, argv, "test_numerics");
    test_hadamard();
    test_rotation_invariance();
    test_quantize_edges();
    test_conversions();
    test_expf();
    return tu_finish();
}
