/*
 * avx_vnni_rows.c — the avx_vnni engine's rows regime at 9 <= M <= 32 (int8_gemm.h: a borrowed
 * weight, the caller's rows read in place, each byte once; qmm_qd8_qc8w_rows_ukernel_m9to32__avxvnni_bcast:
 * the broadcast template of avx_vnni_bcast.h on int8 rows), and the token copy it and the W4A8
 * family's 9..24 kernel read (qmm_avx_vnni_rows_ap_bytes / _fill). Built with -mavxvnni.
 */
#include "avx_vnni_bcast.h"
#include "ukernels.h"

#ifdef __AVXVNNI__

int64_t qmm_avx_vnni_rows_ap_bytes(int64_t M, int64_t Kp) {
    return M > 8 && M <= QMM_VBC_M ? (M + 7) / 8 * Kp * 8 : 0;
}

/* the groups of 8 of tokens [r0, r1) (r0 a multiple of 8) at ap_base + r0·Kp from q (rows lda = Kp
 * bytes apart, Kp a multiple of 64): group i's k-quad j at (i·Kp/4 + j)·32, token t's 4 bytes at
 * +4t, s8 q as it is (pad tokens 0); per 32 bytes of k the 8 tokens' rows as an 8 × 8 transpose of
 * dwords (qmm_a2_tr8) */
void qmm_avx_vnni_rows_ap_fill(const int8_t *q, int64_t lda, uint8_t *ap_base, int64_t r0, int64_t r1) {
    const int64_t Kp = lda;
    for (int64_t t0 = r0; t0 < r1; t0 += 8) {
        const int64_t r = r1 - t0 < 8 ? r1 - t0 : 8;
        uint8_t *ap = ap_base + t0 * Kp;
        for (int64_t k = 0; k < Kp; k += 32) {
            __m256i x[8];
            for (int t = 0; t < 8; t++)
                x[t] = t < r ? _mm256_loadu_si256((const __m256i *)(q + (t0 + t) * Kp + k)) : _mm256_setzero_si256();
            qmm_a2_tr8(x);
            for (int j = 0; j < 8; j++) _mm256_store_si256((__m256i *)(ap + k * 8 + j * 32), x[j]);
        }
    }
}

void qmm_qd8_qc8w_rows_ukernel_m9to32__avxvnni_bcast(const int8_t *w, int64_t ldw, const qmm_rows_act *a,
                                                     const qmm_call *out, int64_t n0, int64_t n1) {
    const qmm_vbc_job job = {.w = w, .ldw = ldw, .a = a, .c = out, .n0 = n0, .n1 = n1};
    qmm_vbc_kernel(0, 0, 0, &job);
}

#endif
