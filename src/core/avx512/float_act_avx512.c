/*
 * float_act_avx512.c — the float engines' activation panel with AVX-512 (F/BW/VL/DQ).
 *
 * Panel (qmm_float_act_panel_avx512, contract in float_act.h): per chunk of QMM_FACT_KB k values,
 * each row's act + rotation runs through qmm_z_act_rotate (simd_avx512.h: the int8 pre-pass's
 * own vector code, bit-identical to qmm_ref_act_rotate_row) into tmp[row][kb]; then the chunk is
 * packed. For mr == 6 (the engines' panel height) the packing is a register transpose: 16 k (f32)
 * or 16 k-pairs (bf16: integer RNE of qmm_f32_to_bf16, then the high halves of 32 values gathered
 * into 16 dwords by one vpermt2w) of the 6 rows are 6 zmm in, 6 zmm out — three vpermt2d (rows
 * 0/1, 2/3, 4/5) and two blends per output. For mr == 32 with bf16 (amx_bf16's panel) two 16 × 16
 * dword transposes (qmm_z_n16k4_step) of the rows' k-pairs. Other mr and the chunk's last k % 32
 * (bf16) or k % 16 (f32) values take the scalar qmm_float_act_pack_rows.
 */
#include "float_act.h"
#include "pack_avx512.h"
#include "simd_avx512.h"

#include <immintrin.h>
#include <string.h>

/* ---------------------------------------------------------------- the A panel */
/* The 6-row transpose: output zmm j (j < 6) holds dwords [16j, 16j + 16) of a (16 × 6) block,
 * dword d = (column kp = d / 6, row i = d % 6), taken from row i's input zmm at lane kp. */
typedef struct {
    __m512i idx[6];          /* kp + 16 · (i & 1): picks from rows (0,1), (2,3) or (4,5) */
    __mmask16 m23[6], m45[6]; /* lanes whose row is 2 or 3 / 4 or 5 */
} t6_tables;

static void t6_init(t6_tables *tb) {
    for (int j = 0; j < 6; j++) {
        int32_t idx[16];
        unsigned m23 = 0, m45 = 0;
        for (int l = 0; l < 16; l++) {
            int d = 16 * j + l, kp = d / 6, i = d % 6;
            idx[l] = kp + 16 * (i & 1);
            if (i / 2 == 1) m23 |= 1u << l;
            if (i / 2 == 2) m45 |= 1u << l;
        }
        tb->idx[j] = _mm512_loadu_si512(idx);
        tb->m23[j] = (__mmask16)m23;
        tb->m45[j] = (__mmask16)m45;
    }
}

static inline void t6_store(const t6_tables *tb, const __m512i r[6], uint32_t *out) {
    for (int j = 0; j < 6; j++) {
        __m512i p01 = _mm512_permutex2var_epi32(r[0], tb->idx[j], r[1]);
        __m512i p23 = _mm512_permutex2var_epi32(r[2], tb->idx[j], r[3]);
        __m512i p45 = _mm512_permutex2var_epi32(r[4], tb->idx[j], r[5]);
        __m512i o = _mm512_mask_blend_epi32(tb->m23[j], p01, p23);
        _mm512_storeu_si512(out + 16 * j, _mm512_mask_blend_epi32(tb->m45[j], o, p45));
    }
}

void qmm_float_act_panel_avx512(const qmm_fact_src *src, int rows, int mr, int bf16, void *Ap, int64_t Ka,
                                float *tmp) {
    const int64_t K = src->K;
    const size_t xs = qmm_dtype_size(src->t);
    t6_tables tb;
    if (mr == 6) t6_init(&tb);
    /* lane i of the result = high half of input value i: 32 bf16 values of (lo, hi) in k order */
    const __m512i odd = _mm512_set_epi16(63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35, 33, 31, 29, 27, 25,
                                         23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
    for (int64_t k0 = 0; k0 < K; k0 += QMM_FACT_KB) {
        const int64_t k1 = K - k0 < QMM_FACT_KB ? K : k0 + QMM_FACT_KB, kb = k1 - k0;
        for (int i = 0; i < mr; i++) {
            float *a = tmp + (int64_t)i * QMM_FACT_KB;
            if (i < rows) {
                __mmask16 nan = 0;
                (void)qmm_z_act_rotate((const char *)src->x + (size_t)(i * src->ldx) * xs, src->t, K, src->act,
                                       src->gs, k0, k1, a, &nan);
            } else {
                memset(a, 0, (size_t)kb * sizeof(float));
            }
        }
        int64_t kv = 0; /* k values of the chunk packed by the transpose */
        if (mr == 6 && bf16) {
            kv = kb & ~(int64_t)31;
            for (int64_t kk = 0; kk < kv; kk += 32) {
                __m512i r[6];
                for (int i = 0; i < 6; i++) {
                    const float *a = tmp + (int64_t)i * QMM_FACT_KB + kk;
                    __m512 lo = qmm_z_round_bf16(_mm512_loadu_ps(a)), hi = qmm_z_round_bf16(_mm512_loadu_ps(a + 16));
                    r[i] = _mm512_permutex2var_epi16(_mm512_castps_si512(lo), odd, _mm512_castps_si512(hi));
                }
                t6_store(&tb, r, (uint32_t *)Ap + ((k0 + kk) / 2) * 6);
            }
        } else if (mr == 32 && bf16) {
            /* amx_bf16's panel: per 32 k, each row's 16 k-pairs (as above) into a 32 × 16 dword
             * block, then two 16 × 16 dword transposes: pair row p = the 32 rows' pair p */
            kv = kb & ~(int64_t)31;
            for (int64_t kk = 0; kk < kv; kk += 32) {
                _Alignas(64) uint32_t blk[32][16];
                for (int i = 0; i < 32; i++) {
                    const float *a = tmp + (int64_t)i * QMM_FACT_KB + kk;
                    __m512 lo = qmm_z_round_bf16(_mm512_loadu_ps(a)), hi = qmm_z_round_bf16(_mm512_loadu_ps(a + 16));
                    _mm512_store_si512(blk[i],
                                       _mm512_permutex2var_epi16(_mm512_castps_si512(lo), odd, _mm512_castps_si512(hi)));
                }
                for (int h = 0; h < 2; h++) {
                    __m512i v[16];
                    qmm_z_n16k4_step((const int8_t *)blk[16 * h], 64, 16, 0, 64, v);
                    for (int p = 0; p < 16; p++)
                        _mm512_storeu_si512((uint32_t *)Ap + ((k0 + kk) / 2 + p) * 32 + 16 * h, v[p]);
                }
            }
        } else if (mr == 6) {
            kv = kb & ~(int64_t)15;
            for (int64_t kk = 0; kk < kv; kk += 16) {
                __m512i r[6];
                for (int i = 0; i < 6; i++) r[i] = _mm512_loadu_si512(tmp + (int64_t)i * QMM_FACT_KB + kk);
                t6_store(&tb, r, (uint32_t *)Ap + (k0 + kk) * 6);
            }
        }
        if (kv < kb)
            qmm_float_act_pack_rows(tmp + kv, QMM_FACT_KB, 0, mr, mr, k0 + kv, k1, K, bf16, Ap, Ka);
    }
}
