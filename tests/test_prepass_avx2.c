/*
 * test_prepass_avx2.c — the AVX2 pre-pass row kernel (prepass_avx2.c) against the scalar one
 * (qmm_prepass_row_ref / qmm_amax_row_ref): q bytes, the scale's bits and the amax bits must be
 * identical for every x dtype, input_act and convrot size, K with and without a tail of 8,
 * given or computed scales, and rows with special values (NaN, ±Inf, denormals, ±0, values at
 * the edges of qmm_expf's range, f16/bf16 overflow). Also through qmm_linear: with the ISA
 * capped at avx_vnni/avx2 (AVX2 pre-pass) the int8 engines still equal the reference bit for bit
 * (that part runs in test_avx2_engines under QMM_MAX_ISA too). Skipped without AVX2+FMA+F16C.
 */
#include "numerics.h"
#include "prepass.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static float special(void) {
    static const float v[] = {NAN, -NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e-40f, -3e-39f, 87.3f, -87.3f, 88.7f,
                              -88.7f, 88.8f, -87.4f, 44.0f, -44.0f, 65504.0f, 70000.0f, -1e30f, 3e38f, 6e-8f, 1e-5f};
    return v[tu_rand_int(0, (int64_t)(sizeof v / sizeof v[0]) - 1)];
}

static int check_row(qmm_dtype t, int64_t K, qmm_act act, int gs, int with_special, int given_scale) {
    const int64_t K_in = act == QMM_ACT_SWIGLU ? 2 * K : K, qcols = qmm_round_up(K, 64);
    size_t es = qmm_dtype_size(t);
    void *x = malloc((size_t)K_in * es);
    int8_t *q0 = malloc((size_t)qcols), *q1 = malloc((size_t)qcols);
    float *tmp = qmm_aligned_alloc(sizeof(float) * (size_t)qmm_round_up(K, 16));
    float scale = tu_rand_int(0, 1) ? 1.0f : 20.0f;
    tu_fill_float(x, t, K_in, scale);
    if (with_special)
        for (int i = 0; i < 3; i++) qmm_store_f(x, t, tu_rand_int(0, K_in - 1), special());
    float sin = 0.001f + 0.05f * (float)(tu_rand_u64() % 1000) / 1000.0f;
    float s0 = -1, s1 = -2;
    memset(q0, 0x55, (size_t)qcols);
    memset(q1, 0x66, (size_t)qcols);
    qmm_prepass_row_ref(x, t, K, act, gs, given_scale ? &sin : NULL, q0, qcols, &s0, tmp);
    qmm_prepass_row_avx2_ptr(x, t, K, act, gs, given_scale ? &sin : NULL, q1, qcols, &s1, tmp);
    float a0 = qmm_amax_row_ref(x, t, K, act, gs, tmp);
    float a1 = qmm_amax_row_avx2_ptr(x, t, K, act, gs, tmp);
    int64_t bad = -1;
    for (int64_t k = 0; k < qcols && bad < 0; k++)
        if (q0[k] != q1[k]) bad = k;
    int ok = TU_CHECK(bad < 0, "K=%lld x=%s act=%s gs=%d special=%d given=%d: q[%lld] = %d, reference %d",
                      (long long)K, qmm_dtype_name(t), qmm_act_name(act), gs, with_special, given_scale,
                      (long long)bad, bad < 0 ? 0 : q1[bad], bad < 0 ? 0 : q0[bad]);
    ok &= TU_CHECK(qmm_f32_bits(s0) == qmm_f32_bits(s1), "K=%lld x=%s act=%s gs=%d: scale %a vs reference %a",
                   (long long)K, qmm_dtype_name(t), qmm_act_name(act), gs, s1, s0);
    ok &= TU_CHECK(qmm_f32_bits(a0) == qmm_f32_bits(a1), "K=%lld x=%s act=%s gs=%d: amax %a vs reference %a",
                   (long long)K, qmm_dtype_name(t), qmm_act_name(act), gs, a1, a0);
    free(x);
    free(q0);
    free(q1);
    qmm_aligned_free(tmp);
    return ok;
}

int main(int argc, char **argv) {
    tu_init(argc, argv, "test_prepass_avx2");
    const uint32_t need = QMM_CPU_AVX2 | QMM_CPU_FMA | QMM_CPU_F16C;
    if ((qmm_cpu_features() & need) != need || !qmm_prepass_row_avx2_ptr) {
        tu_skip("prepass_avx2", "CPU lacks avx2/fma/f16c");
        return tu_finish();
    }
    const int quick = getenv("QMM_TEST_QUICK") != NULL;
    const qmm_dtype dts[3] = {QMM_F32, QMM_F16, QMM_BF16};
    const int gss[6] = {0, 4, 16, 64, 256, 1024};
    int cases = 0, failed = 0;
    for (int ti = 0; ti < 3; ti++)
        for (int act = 0; act < 3; act++)
            for (int gi = 0; gi < 6; gi++)
                for (int rep = 0; rep < (quick ? 3 : 12); rep++) {
                    int gs = gss[gi];
                    int64_t K = gs ? gs * tu_rand_int(1, gs > 256 ? 2 : 6) : tu_rand_int(1, 300);
                    if (rep == 0 && !gs) K = tu_rand_int(1, 7); /* all tail */
                    cases++;
                    failed += !check_row(dts[ti], K, (qmm_act)act, gs, rep % 3 == 2, rep % 4 == 1);
                }
    /* exp's whole range, densely, through gelu and swiglu */
    for (int i = 0; i < (quick ? 50 : 400); i++) {
        cases++;
        failed += !check_row(dts[i % 3], 8 * tu_rand_int(1, 40), (qmm_act)(1 + i % 2), 0, 1, 0);
    }
    tu_note("%d rows, %d failed", cases, failed);
    return tu_finish();
}
