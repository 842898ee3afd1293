/*
 * panel.c — the weight panels of both GEMM drivers (contract in panel.h): the scalar reference
 * n16k4 packer (also the owned packing of qmm_weight_create_int8, qmm_pack_i8_rows) and a panel
 * of an owned weight (in place) or a borrowed one (packed per call: int8 rows, or W4A8 codes
 * decoded).
 */
#include "panel.h"

#include <string.h>

void qmm_pack_n16k4_ref(const int8_t *W, int64_t ld, int rows, int64_t k0, int64_t k1, int8_t *dst, int64_t nq,
                        int32_t *cs, int first, int *neg128) {
    const int64_t bytes = k1 - k0 < 0 ? 0 : k1 - k0 < 4 * nq ? k1 - k0 : 4 * nq; /* read of each row */
    const int64_t full = bytes / 4;                                               /* quads of 4 bytes read */
    int neg = 0;
    for (int j = 0; j < 16; j++) {
        int8_t *d = dst + j * 4;
        uint32_t sum = cs && !first ? (uint32_t)cs[j] : 0u; /* mod 2^32 */
        if (j >= rows) {
            for (int64_t q = 0; q < nq; q++) memset(d + q * 64, 0, 4);
        } else {
            const int8_t *row = W + j * ld + k0;
            int64_t q = 0;
            for (; q < full; q++) memcpy(d + q * 64, row + q * 4, 4);
            for (; q < nq; q++)
                for (int t = 0; t < 4; t++) d[q * 64 + t] = q * 4 + t < bytes ? row[q * 4 + t] : 0;
            for (int64_t k = 0; k < bytes; k++) {
                sum += (uint32_t)(int32_t)row[k];
                neg |= row[k] == -128;
            }
        }
        if (cs) cs[j] = (int32_t)sum;
    }
    *neg128 |= neg;
}

int qmm_pack_i8_rows(const int8_t *W, int64_t ld, int64_t N, int64_t K, int64_t n0, int64_t n1, qmm_packed_i8 *p) {
    const int64_t Kq = p->Kp / 4;
    int neg128 = 0;
    for (int64_t n = n0; n < n1; n += 16) {
        const int rows = N - n >= 16 ? 16 : N - n > 0 ? (int)(N - n) : 0;
        qmm_pack_n16k4_ref(rows ? W + n * ld : W, ld, rows, 0, K, p->data + (n / 16) * Kq * 64, Kq, p->colsum + n, 1,
                           &neg128);
    }
    return neg128;
}

void qmm_panel_get(const qmm_panel_source *s, int64_t nb, int nr, int64_t q0, int64_t nq, int8_t *buf, int32_t *cs,
                   int first, qmm_panel *p) {
    const qmm_weight *w = s->w;
    if (!w->borrowed) {
        p->b = w->i8.data + nb * w->i8.Kp * 16 + q0 * 64;
        p->ldb = w->i8.Kp * 16;
        p->colsum = w->i8.colsum + nb * 16;
        p->neg128 = 0;
        return;
    }
    const int64_t N = w->N, K = w->K, ld = w->borrow.ld;
    const int64_t k0 = q0 * 4, k1 = (q0 + nq) * 4 < K ? (q0 + nq) * 4 : K;
    const qmm_pack_n16k4_fn pack = s->pack ? s->pack : qmm_pack_n16k4_ref;
    int neg = 0;
    for (int jb = 0; jb < nr; jb++) {
        const int64_t n0 = (nb + jb) * 16;
        const int rows = N - n0 < 16 ? (int)(N - n0) : 16;
        int8_t *blk = buf + jb * nq * 64;
        int32_t *bcs = cs ? cs + jb * 16 : NULL;
        if (!w->w4a8) {
            pack(w->borrow.data + n0 * ld, ld, rows, k0, k1, blk, nq, bcs, first, &neg);
        } else { /* 16 rows × up to 512 k decoded into L1 (8 KiB), then the engine's int8 pack of them */
            enum { KB = 512 };
            _Alignas(64) int8_t dec[16 * KB];
            int neg_dec = 0;
            for (int64_t ka = k0; ka < k1 || ka == k0; ka += KB) {
                const int64_t len = k1 - ka < KB ? k1 - ka : KB, qa = (ka - k0) / 4;
                const int64_t nqs = ka + KB < k1 ? KB / 4 : nq - qa;
                if (len > 0) s->w4_decode(w, s->w4_lut, n0, rows, ka, ka + len, dec, KB);
                pack(dec, KB, rows, 0, len > 0 ? len : 0, blk + qa * 64, nqs, bcs, first && ka == k0, &neg_dec);
                if (len <= 0) break;
            }
        }
    }
    p->b = buf;
    p->ldb = nq * 64;
    p->colsum = cs;
    p->neg128 = w->w4a8 ? 0 : neg;
}
