/*
 * w4a8.c — the scalar W4A8 decoders and decode table (contract in w4a8.h; the arithmetic: SPEC
 * §11, qmm_w4a8_value).
 */
#include "w4a8.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

void qmm_w4a8_lut_fill(const qmm_weight *w, int8_t *lut) {
    const int L = 1 << w->w4.bits;
    for (int b = 0; b < 256; b++) {
        const float s = qmm_e4m3_to_f32((uint8_t)b);
        for (int c = 0; c < L; c++) lut[b * L + c] = qmm_w4a8_value(qmm_w4a8_level(w, c), s);
    }
}

void qmm_w4a8_decode_row(const qmm_weight *w, int64_t n, int64_t k0, int64_t k1, int8_t *dst) {
    const int gsz = w->w4.group, bits = w->w4.bits;
    const uint8_t *row = w->w4.codes + n * w->w4.row_bytes, *hi = row + w->K / 2;
    float lv[64];
    for (int c = 0; c < (1 << bits); c++) lv[c] = qmm_w4a8_level(w, c);
    for (int64_t k = k0; k < k1;) {
        const int64_t g = k / gsz, ge = (g + 1) * gsz < k1 ? (g + 1) * gsz : k1;
        const float s = qmm_w4a8_srel(w, n, g);
        for (; k < ge; k++) {
            int c = (row[k >> 1] >> ((k & 1) * 4)) & 15;
            if (bits == 6) c |= ((hi[k >> 2] >> ((k & 3) * 2)) & 3) << 4;
            dst[k - k0] = qmm_w4a8_value(lv[c], s);
        }
    }
}

void qmm_w4a8_decode_rows(const qmm_weight *w, const int8_t *lut, int64_t n0, int64_t rows, int64_t k0, int64_t k1,
                          int8_t *dst, int64_t ld) {
    if (!lut) {
        for (int64_t i = 0; i < rows; i++) qmm_w4a8_decode_row(w, n0 + i, k0, k1, dst + i * ld);
        return;
    }
    const int gsz = w->w4.group, bits = w->w4.bits;
    const int64_t G = w->K / gsz;
    for (int64_t i = 0; i < rows; i++) {
        const uint8_t *row = w->w4.codes + (n0 + i) * w->w4.row_bytes, *hi = row + w->K / 2;
        const uint8_t *s8 = (const uint8_t *)w->w4.s_rel + (n0 + i) * G;
        int8_t *d = dst + i * ld - k0;
        for (int64_t k = k0; k < k1; k++) {
            int c = (row[k >> 1] >> ((k & 1) * 4)) & 15;
            if (bits == 6) c |= ((hi[k >> 2] >> ((k & 3) * 2)) & 3) << 4;
            d[k] = lut[(s8[k / gsz] << bits) + c];
        }
    }
}

static int g_vbmi_env = 1;
static pthread_once_t g_vbmi_once = PTHREAD_ONCE_INIT;

static void read_vbmi_env(void) {
    const char *v = getenv("QMM_W4A8_VBMI");
    g_vbmi_env = !(v && !strcmp(v, "0"));
}

int qmm_w4a8_vbmi(const qmm_context *ctx) {
    pthread_once(&g_vbmi_once, read_vbmi_env);
    return g_vbmi_env && qmm_core_simd(ctx) == QMM_ISA_AVX512 && (qmm_cpu_features() & QMM_CPU_AVX512_VBMI);
}

qmm_w4a8_rows_fn qmm_w4a8_decoder(const qmm_context *ctx) {
    const int simd = qmm_core_simd(ctx);
    if (simd == QMM_ISA_AVX2) return qmm_w4a8_decode_rows_avx2_ptr;
    if (simd != QMM_ISA_AVX512) return qmm_w4a8_decode_rows;
    return qmm_w4a8_vbmi(ctx) ? qmm_w4a8_decode_rows_avx512vbmi_ptr : qmm_w4a8_decode_rows_avx512_ptr;
}

qmm_w4a8_lut_fn qmm_w4a8_lut_filler(const qmm_context *ctx) {
    const int simd = qmm_core_simd(ctx);
    return simd == QMM_ISA_AVX512 ? qmm_w4a8_lut_fill_avx512_ptr
           : simd == QMM_ISA_AVX2 ? qmm_w4a8_lut_fill_avx2_ptr
                                  : qmm_w4a8_lut_fill;
}
