/*
 * test_attn_ukernels.c — the attention ukernels (core/attention.h's contract) as units, outside
 * the driver (which tests/test_attention covers): every engine's qmm_attn_ukernels available on
 * this CPU (ukernels.h: avx512_f32, avx512_bf16, avx512_vnni, avx_vnni, avx2_f32; the emulated amx_bf16 and amx_int8
 * when linked with tests/amx_emu.cmake, QMM_TEST_AMX_EMU; the others skipped visibly), and the
 * frame's softmax ukernels by SIMD level and P kind, against scalar references on randomized
 * shapes (D in {1, 3, 16, 64, 100, 128, 256}, rows 1..mr, keys 1..3·nk, q / kv dtypes f32, f16,
 * bf16; seed printed, QMM_SEED=N or the first argument replays; QMM_TEST_QUICK=1 runs fewer):
 *   pack_q, qk   sq = log2(e)·scale (f32, bf16 operands) and S = sq · Q·K per key block against
 *                the operands in double (f32: q, k; bf16: bf16(q), bf16(k − qmm_attn_key_mean)):
 *                |S − ref| <= |sq|·Σ_d |q·k|·(D + 2)·2^-24; int8: the codes read back from the
 *                packed Q row and K block (|code| <= 127, the key sums exact, each code within
 *                one step of the rotated, shifted row / its scale) and S bit for bit
 *                (float)(Σ qq·kq, exact in int64) · (sk · sq); keys past Skv score 0;
 *   pv           O = O·α + ps·Σ_j P·V on random O, α, ps (one of them 1, or ps = 0) and P of the
 *                engine's kind: f32 and bf16 V against v (bf16: rounded) in double within
 *                (nk + 4)·2^-24 of Σ |terms|; int8 V against its codes and scales read back
 *                (codes within one step of v / scale, Σ pq·vq exact); O rows past the group and
 *                (pad_rows) the zero rows untouched;
 *   softmax      the frame's five (f32, bf16, u8 × avx512, avx2; nk = 8 or 16..64) on groups of
 *                1..16 rows (1, 6, 16 and random) over 1..4 key blocks, the rows' state carried
 *                from block to block: random score rows with garbage past nv, masks none / bool
 *                / additive f32, f16, bf16 (row stride 0 or more, key stride 1 or 3, −inf,
 *                torch's finfo.min), per row a NaN score unmasked (the row NaN from then on) or
 *                bool-masked (ignored), every key masked (P 0, state as it was), u8: a +inf score
 *                (a NaN row where the mask leaves it), a spread past
 *                2^-126: P within 2^-21 relative + the exp2 argument's rounding (bf16: + 2^-9;
 *                u8 bit for bit attention.h's U in plain C, and within 0.5 + that + 7.6e-5
 *                relative of 255·2^(s − bm)); m, α, ps bit for bit (attention.h's rules and E in
 *                plain C); l within the sum's bound of l·α + ps·Σ 2^(x − bm) (u8: bit for bit
 *                l·α + ps·(Σ U / 255) in f32 steps); the state and P past the group's rows
 *                untouched.
 */
#include "attention.h"
#include "numerics.h"
#include "testutil.h"
#include "ukernels.h"
#ifdef QMM_TEST_AMX_EMU
#include "../src/engines/x86_amx/amx_emu.h"
extern const qmm_engine_ops qmm_amx_bf16_ops_emu; /* amx_bf16.c, emulated: .attn its descriptor */
extern const qmm_engine_ops qmm_amx_int8_ops_emu; /* amx_int8.c, emulated: .attn (mode int8) */
#endif

#ifdef QMM_TEST_SIMDE /* tests/simde.cmake: the AVX-512 and AVX-VNNI attention files on SIMDe */
extern const qmm_attn_ukernels qmm_avx512_f32_attn_simde, qmm_avx512_bf16_attn_simde, qmm_avx512_vnni_attn_simde,
    qmm_avx_vnni_attn_simde;
void qmm_attn_softmax_f32__avx512_simde(const qmm_attn_call *c, int rows, const float *S, int64_t nk, int64_t nv,
                                        const void *mask, void *P, float *m, float *l, float *alpha, float *ps);
void qmm_attn_softmax_bf16__avx512_simde(const qmm_attn_call *c, int rows, const float *S, int64_t nk, int64_t nv,
                                         const void *mask, void *P, float *m, float *l, float *alpha, float *ps);
void qmm_attn_softmax_u8__avx512_simde(const qmm_attn_call *c, int rows, const float *S, int64_t nk, int64_t nv,
                                       const void *mask, void *P, float *m, float *l, float *alpha, float *ps);
#endif

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define LOG2E 1.44269504088896341
static int g_quick;

static const int64_t g_ds[] = {1, 3, 16, 64, 100, 128, 256};

static qmm_dtype rand_dtype(void) {
    const int r = (int)tu_rand_int(0, 2);
    return r == 0 ? QMM_F32 : r == 1 ? QMM_BF16 : QMM_F16;
}

static double p_val(const qmm_attn_ukernels *u, const void *P, int64_t i) {
    if (u->p == QMM_ATTN_P_F32) return ((const float *)P)[i];
    if (u->p == QMM_ATTN_P_BF16) return qmm_bf16_to_f32(((const uint16_t *)P)[i]);
    return ((const uint8_t *)P)[i] / 255.0;
}

/* the rotation of mode int8 (avx512_vnni_attn.c): x[0..D) zero-padded to Dq, qmm_rotate_f32 g = 64 */
static void rotate64(const float *x, int64_t D, int64_t Dq, float *r) {
    for (int64_t d = 0; d < Dq; d++) r[d] = d < D ? x[d] : 0.0f;
    qmm_rotate_f32(r, Dq, 64);
}

typedef struct {
    const char *name;
    const qmm_attn_ukernels *u;
    int int8;    /* mode int8's layout (avx512_vnni_attn.c, avx_vnni_attn.c: the same in nk and Dp) */
} engine;

/* ---------------------------------------------------------------- pack_kv, pack_q, qk, pv */

static double engine_case(const engine *e, int64_t D, char *where_worst, size_t nw) {
    const qmm_attn_ukernels *u = e->u;
    const int64_t nk = u->nk, Skv = tu_rand_int(1, 3 * nk), nblk = (Skv + nk - 1) / nk;
    const int rows = (int)tu_rand_int(1, u->mr);
    const int64_t dp = qmm_round_up(D, u->dalign), kpad = tu_rand_int(0, 3);
    const qmm_dtype qt = rand_dtype(), kvt = rand_dtype();
    const size_t qes = qmm_dtype_size(qt), kes = qmm_dtype_size(kvt);
    void *q = calloc((size_t)(u->mr * D), qes), *k = calloc((size_t)(Skv * (D + kpad)), kes),
         *v = calloc((size_t)(Skv * (D + kpad)), kes);
    tu_fill_float(q, qt, u->mr * D, 1.0f);
    for (int64_t j = 0; j < Skv; j++) {
        tu_fill_float((char *)k + (size_t)(j * (D + kpad)) * kes, kvt, D, 1.0f);
        tu_fill_float((char *)v + (size_t)(j * (D + kpad)) * kes, kvt, D, 1.0f);
    }
    if (tu_rand_int(0, 3) == 0) /* a common offset of the keys (the bf16 and int8 engines shift it out) */
        for (int64_t j = 0; j < Skv; j++)
            for (int64_t d = 0; d < D; d++) {
                const int64_t i = j * (D + kpad) + d;
                qmm_store_f(k, kvt, i, qmm_load_f(k, kvt, i) + 3.0f);
            }
    /* a third of the cases: a quarter of the keys not live (no row attends them), 10^4 times the
     * others (f16: 100 times, within its range): they must move neither the key shift nor a V
     * block's scales */
    uint8_t *live = NULL;
    if (tu_rand_int(0, 2) == 0 && Skv > 0) {
        live = malloc((size_t)Skv);
        for (int64_t j = 0; j < Skv; j++) {
            live[j] = tu_rand_int(0, 3) != 0;
            for (int64_t d = 0; d < D && !live[j]; d++) {
                const int64_t i = j * (D + kpad) + d;
                const float big = kvt == QMM_F16 ? 100.0f : 1e4f;
                qmm_store_f(k, kvt, i, qmm_load_f(k, kvt, i) * big);
                qmm_store_f(v, kvt, i, qmm_load_f(v, kvt, i) * big);
            }
        }
    }
    qmm_attn_call c = {.B = 1, .H = 1, .Hkv = 1, .S = rows, .Skv = Skv, .D = D, .q = q, .q_dtype = qt,
                       .qs = {0, 0, D}, .k = k, .v = v, .kv_dtype = kvt, .ks = {0, 0, D + kpad},
                       .vs = {0, 0, D + kpad}, .scale = 0.25f + (float)tu_rand_int(0, 4) * 0.125f};
    const size_t kb = u->kb_bytes(D), vb = u->vb_bytes(D), qb = u->q_bytes(D);
    const size_t extra = u->extra_bytes ? u->extra_bytes(D) : 0;
    const size_t kvbytes = qmm_attn_blocks_bytes(Skv, nk, kb + vb, extra);
    TU_CHECK(kb % 64 == 0 && vb % 64 == 0, "%s: block sizes %zu, %zu not multiples of 64", e->name, kb, vb);
    char *kv = qmm_aligned_alloc(kvbytes);
    char *Q = qmm_aligned_alloc((size_t)u->mr * qb);
    float *S = qmm_aligned_alloc((size_t)(u->mr * nk) * sizeof(float));
    float *O = qmm_aligned_alloc((size_t)((u->mr + 1) * dp) * sizeof(float));
    char *P = qmm_aligned_alloc((size_t)(u->mr * nk) * 4);
    void *ws = qmm_aligned_alloc(u->ws_bytes ? u->ws_bytes : 64);
    float sq[64], ps[64], al[64];
    memset(kv, 0xa5, kvbytes); /* every byte the engine reads must be written by pack_kv */
    memset(Q, 0, (size_t)u->mr * qb);
    if (u->begin) u->begin();
    u->pack_kv(&c, k, v, live, kv);
    for (int i = 0; i < rows; i++) u->pack_q(&c, (const char *)q + (size_t)(i * D) * qes, Q + (size_t)i * qb, &sq[i]);
    for (int i = rows; i < u->mr; i++) sq[i] = 0.0f;
    /* the operands as the engine rounds them */
    float mean[QMM_ATTN_MAX_D] = {0};
    if (u->p != QMM_ATTN_P_F32) qmm_attn_key_mean(&c, k, live, mean);
    double worst = 0;
    char where[160] = "";
    for (int i = 0; i < rows && !e->int8; i++)
        if (!(fabs(sq[i] - c.scale * LOG2E) <= 1e-6 * c.scale))
            TU_CHECK(0, "%s: sq %g, want log2(e)·scale %g", e->name, sq[i], c.scale * LOG2E);
    /* ---- qk, block by block */
    int qk_ok = 1;
    for (int64_t blk = 0; blk < nblk && qk_ok; blk++) {
        for (int64_t x = 0; x < u->mr * nk; x++) S[x] = NAN;
        u->qk(rows, Q, sq, kv + (size_t)blk * kb, D, S);
        for (int i = 0; i < rows && qk_ok; i++)
            for (int64_t jj = 0; jj < nk && qk_ok; jj++) {
                const int64_t j = blk * nk + jj;
                const float got = S[i * nk + jj];
                if (j >= Skv) {
                    if ((!e->int8 || got != got) && got != 0.0f)
                        qk_ok = TU_CHECK(0, "%s D=%lld: score of padding key %lld = %g", e->name, (long long)D, (long long)j, got);
                    continue;
                }
                if (e->int8) { /* codes read back; the score bit for bit */
                    const int64_t Dq = qmm_round_up(D, 64);
                    const char *b = kv + (size_t)blk * kb;
                    const int8_t *kc = (const int8_t *)b;
                    const int32_t ksum = ((const int32_t *)(b + Dq * nk))[jj];
                    const float sk = ((const float *)(b + Dq * nk + nk * 4))[jj];
                    const uint8_t *qc = (const uint8_t *)(Q + (size_t)i * qb);
                    int64_t dot = 0, ks = 0;
                    for (int64_t d = 0; d < Dq; d++) {
                        const int kq = kc[((d / 4) * nk + jj) * 4 + d % 4];
                        ks += kq;
                        dot += (int64_t)(qc[d] - 128) * kq;
                        if (kq < -127 || qc[d] == 0) qk_ok = TU_CHECK(0, "%s: a code -128", e->name);
                    }
                    if (ks != ksum)
                        qk_ok = TU_CHECK(0, "%s: key %lld: sum of codes %lld, stored %d", e->name, (long long)j, (long long)ks, ksum);
                    const float want = (float)(int32_t)dot * (sk * sq[i]);
                    if (qk_ok && !(got == want || (got != got && want != want))) {
                        qk_ok = TU_CHECK(0, "%s D=%lld: S[%d][%lld] = %.9g, want %.9g (Σ qq·kq = %lld)", e->name, (long long)D, i,
                                         (long long)j, got, want, (long long)dot);
                    }
                    if (i == 0 && qk_ok) { /* the key's codes within one step of R(k − mean) / sk */
                        float row[QMM_ATTN_MAX_D], r[QMM_ATTN_MAX_D];
                        for (int64_t d = 0; d < D; d++) row[d] = qmm_load_f(k, kvt, j * (D + kpad) + d) - mean[d];
                        rotate64(row, D, Dq, r);
                        for (int64_t d = 0; d < Dq && qk_ok; d++) {
                            const int kq = kc[((d / 4) * nk + jj) * 4 + d % 4];
                            if (!(fabs(kq * (double)sk - r[d]) <= 0.51 * sk + 1e-6 * fabs(r[d])))
                                qk_ok = TU_CHECK(0, "%s: key %lld code[%lld] %d · %g, rotated value %g", e->name, (long long)j,
                                                 (long long)d, kq, sk, r[d]);
                        }
                    }
                    continue;
                }
                double ref = 0, mag = 0;
                for (int64_t d = 0; d < D; d++) {
                    double qd = qmm_load_f(q, qt, i * D + d), kd = qmm_load_f(k, kvt, j * (D + kpad) + d);
                    if (u->p != QMM_ATTN_P_F32) {
                        qd = qmm_bf16_to_f32(qmm_f32_to_bf16((float)qd));
                        kd = qmm_bf16_to_f32(qmm_f32_to_bf16((float)kd - mean[d]));
                    }
                    ref += qd * kd;
                    mag += fabs(qd * kd);
                }
                ref *= sq[i];
                const double bound = fabs(sq[i]) * mag * (double)(D + 2) * 0x1p-24 + 1e-30;
                const double r = fabs(got - ref) / bound;
                if (r > worst) { worst = r; snprintf(where, sizeof where, "qk S[%d][%lld]", i, (long long)j); }
                if (!(r <= 1.0)) qk_ok = TU_CHECK(0, "%s D=%lld: S[%d][%lld] = %.9g, want %.9g (bound %.3g)", e->name, (long long)D,
                                                  i, (long long)j, got, ref, bound);
            }
    }
    if (e->int8) { /* each query row's codes within one step of R q / its scale */
        const int64_t Dq = qmm_round_up(D, 64);
        for (int i = 0; i < rows && qk_ok; i++) {
            float row[QMM_ATTN_MAX_D], r[QMM_ATTN_MAX_D];
            for (int64_t d = 0; d < D; d++) row[d] = qmm_load_f(q, qt, i * D + d);
            rotate64(row, D, Dq, r);
            const double s = sq[i] / (c.scale * LOG2E);
            for (int64_t d = 0; d < Dq && qk_ok; d++) {
                const int qq = ((const uint8_t *)(Q + (size_t)i * qb))[d] - 128;
                if (!(fabs(qq * s - r[d]) <= 0.51 * s + 1e-5 * fabs(r[d])))
                    qk_ok = TU_CHECK(0, "%s: q row %d code[%lld] %d · %g, rotated %g", e->name, i, (long long)d, qq, s, r[d]);
            }
        }
    }
    TU_CHECK(qk_ok, "%s: qk, D=%lld, Skv=%lld, rows=%d, q %s, kv %s", e->name, (long long)D, (long long)Skv, rows,
             qmm_dtype_name(qt), qmm_dtype_name(kvt));
    /* ---- pv, block by block, on random P, O, α, ps */
    int pv_ok = 1;
    const char *V = kv + (size_t)nblk * kb;
    for (int64_t blk = 0; blk < nblk && pv_ok; blk++) {
        const int64_t j0 = blk * nk;
        memset(P, 0, (size_t)(u->mr * nk) * 4);
        for (int i = 0; i < rows; i++)
            for (int64_t jj = 0; jj < nk; jj++) {
                const float p = tu_rand_int(0, 5) == 0 ? 0.0f : (float)tu_rand_int(0, 1000000) / 1e6f;
                if (u->p == QMM_ATTN_P_F32) ((float *)P)[i * nk + jj] = p;
                else if (u->p == QMM_ATTN_P_BF16) ((uint16_t *)P)[i * nk + jj] = qmm_f32_to_bf16(p);
                else ((uint8_t *)P)[i * nk + jj] = (uint8_t)tu_rand_int(0, 255);
            }
        for (int i = 0; i < rows; i++) {
            const int kind = (int)tu_rand_int(0, 2);
            const float r = 0.01f + (float)tu_rand_int(0, 990) / 1000.0f;
            al[i] = kind == 0 ? 1.0f : kind == 1 ? r : 1.0f;
            ps[i] = kind == 0 ? r : kind == 1 ? 1.0f : 0.0f;
        }
        for (int64_t x = 0; x < (u->mr + 1) * dp; x++) O[x] = x < rows * dp ? tu_rand_normal() : 12345.0f;
        float O0[(6 > 16 ? 6 : 16) * (QMM_ATTN_MAX_D + 32)];
        memcpy(O0, O, (size_t)(rows * dp) * sizeof(float));
        u->pv(rows, P, ps, al, V + (size_t)blk * vb, D, O, ws);
        for (int64_t x = rows * dp; x < (u->mr + 1) * dp && pv_ok; x++)
            if (O[x] != 12345.0f) pv_ok = TU_CHECK(0, "%s: pv wrote O[%lld] past its %d rows", e->name, (long long)x, rows);
        for (int i = 0; i < rows && pv_ok; i++)
            for (int64_t d = 0; d < D && pv_ok; d++) {
                double acc = 0, mag = 0, vmax = 0; /* vmax: the block's live keys' max |v| in channel d */
                const char *vb8 = V + (size_t)blk * vb;
                for (int64_t jj = 0; jj < nk; jj++) {
                    const int64_t j = j0 + jj;
                    double vv = 0;
                    if (e->int8) { /* the block's codes [nk/4][Dp][4], then sv/255 [Dp] */
                        const int vq = ((const int8_t *)vb8)[((jj / 4) * dp + d) * 4 + jj % 4];
                        const float vs = ((const float *)(vb8 + nk * dp))[d];
                        vv = vq * (double)vs * 255.0; /* P's 1/255 is in p_val */
                        if (j < Skv && (!live || live[j])) vmax = fmax(vmax, fabs(qmm_load_f(v, kvt, j * (D + kpad) + d)));
                        if (j < Skv && vs == vs && (!live || live[j])) {
                            const double want = qmm_load_f(v, kvt, j * (D + kpad) + d);
                            if (!(fabs(vq * (double)vs * 255.0 - want) <= 0.51 * vs * 255.0 + 1e-6 * fabs(want)))
                                pv_ok = TU_CHECK(0, "%s: v[%lld][%lld] code %d · %g, value %g", e->name, (long long)j, (long long)d,
                                                 vq, vs * 255.0, want);
                        } else if (j >= Skv) {
                            if (vq != 0) pv_ok = TU_CHECK(0, "%s: padding key %lld has a V code %d", e->name, (long long)j, vq);
                        }
                        if (jj == nk - 1 && !(fabs(vs * 255.0 * 127.0 - vmax) <= 1e-6 * vmax))
                            pv_ok = TU_CHECK(0, "%s: block %lld channel %lld: V scale %g, want the live keys' max |v| %g / 127",
                                             e->name, (long long)blk, (long long)d, vs * 255.0 * 127.0, vmax);
                    } else if (j < Skv) {
                        vv = qmm_load_f(v, kvt, j * (D + kpad) + d);
                        if (u->p != QMM_ATTN_P_F32) vv = qmm_bf16_to_f32(qmm_f32_to_bf16((float)vv));
                    }
                    acc += p_val(u, P, i * nk + jj) * vv;
                    mag += fabs(p_val(u, P, i * nk + jj) * vv);
                }
                const double o0 = O0[i * dp + d];
                const double ref = o0 * al[i] + ps[i] * acc;
                const double bound = (fabs(o0 * al[i]) + ps[i] * mag) * (double)(nk + 4) * 0x1p-24 + 1e-30;
                const double r = fabs(O[i * dp + d] - ref) / bound;
                if (r > worst) { worst = r; snprintf(where, sizeof where, "pv O[%d][%lld]", i, (long long)d); }
                if (!(r <= 1.0))
                    pv_ok = TU_CHECK(0, "%s D=%lld: pv O[%d][%lld] = %.9g, want %.9g (α %g, ps %g, bound %.3g)", e->name,
                                     (long long)D, i, (long long)d, O[i * dp + d], ref, al[i], ps[i], bound);
            }
    }
    TU_CHECK(pv_ok, "%s: pv, D=%lld, Skv=%lld, rows=%d, kv %s", e->name, (long long)D, (long long)Skv, rows,
             qmm_dtype_name(kvt));
    if (u->end) u->end();
    snprintf(where_worst, nw, "%s, D=%lld", where, (long long)D);
    qmm_aligned_free(kv);
    qmm_aligned_free(Q);
    qmm_aligned_free(S);
    qmm_aligned_free(O);
    qmm_aligned_free(P);
    qmm_aligned_free(ws);
    free(q);
    free(k);
    free(v);
    free(live);
    return worst;
}

/* the frame's softmax ukernels and their P kinds */
static const struct { qmm_attn_softmax_fn f; qmm_attn_p_kind p; } g_softmax[] = {
    {qmm_attn_softmax_f32__avx512, QMM_ATTN_P_F32}, {qmm_attn_softmax_bf16__avx512, QMM_ATTN_P_BF16},
    {qmm_attn_softmax_u8__avx512, QMM_ATTN_P_U8},   {qmm_attn_softmax_f32__avx2, QMM_ATTN_P_F32},
    {qmm_attn_softmax_u8__avx2, QMM_ATTN_P_U8},
#ifdef QMM_TEST_SIMDE
    {qmm_attn_softmax_f32__avx512_simde, QMM_ATTN_P_F32}, {qmm_attn_softmax_bf16__avx512_simde, QMM_ATTN_P_BF16},
    {qmm_attn_softmax_u8__avx512_simde, QMM_ATTN_P_U8},
#endif
};

static void test_engine(const engine *e) {
    const int n = g_quick ? 6 : 20;
    int frame = 0; /* its softmax is one of the frame's (tested below), of its P kind */
    for (size_t i = 0; i < sizeof g_softmax / sizeof g_softmax[0]; i++) frame |= g_softmax[i].f == e->u->softmax && g_softmax[i].p == e->u->p;
    TU_CHECK(frame, "%s: its softmax is not the frame's ukernel of its P kind", e->name);
    TU_CHECK(e->u->mr >= 1 && e->u->mr <= 16 && e->u->mq % e->u->mr == 0 && e->u->nk % 8 == 0 && e->u->nk <= 64 &&
                 e->u->dalign >= 1,
             "%s: sizes mr %d, mq %lld, nk %lld, dalign %lld", e->name, e->u->mr, (long long)e->u->mq, (long long)e->u->nk,
             (long long)e->u->dalign);
    double worst = 0;
    char where[200] = "", w[200];
    for (size_t di = 0; di < sizeof g_ds / sizeof g_ds[0]; di++)
        for (int r = 0; r < n; r++) {
            const double x = engine_case(e, g_ds[di], w, sizeof w);
            if (x > worst) { worst = x; memcpy(where, w, sizeof where); }
        }
    tu_note("%s (%s): pack_kv, pack_q, qk, pv: worst |err| / bound %.3f (%s)", e->name, e->u->name, worst, where);
}

/* ---------------------------------------------------------------- softmax */

typedef struct {
    const char *name;
    qmm_attn_softmax_fn f;
    qmm_attn_p_kind p;
    int nk_step;   /* nk: a multiple of it, up to 64 */
} softmax_uk;

/* attention.h's E(x), x <= 0, in plain C (no FMA: -ffp-contract=off) */
static float ref_e(float x) {
    if (!(x >= -126.0f)) return 0.0f;
    const int n = -(int)(0.5f - x);
    const float f = x - (float)n;
    float q = 0.001326697994954884f;
    q = q * f + 0.009675469249486923f;
    q = q * f + 0.05550742521882057f;
    q = q * f + 0.24022121727466583f;
    q = q * f + 0.6931469440460205f;
    q = q * f + 1.0000001192092896f;
    return q * qmm_bits_f32((uint32_t)(n + 127) << 23);
}

static int same_bits(float a, float b) { return qmm_f32_bits(a) == qmm_f32_bits(b); }

/* attention.h's U(x), the u8 P, x <= 0 or −inf, in plain C (fmaf: one rounding, as VFMADD;
 * nearbyintf: to nearest even) */
static int ref_u(float x) {
    const float xc = x >= QMM_ATTN_U8_XMIN ? x : QMM_ATTN_U8_XMIN, n = nearbyintf(xc), f = xc - n;
    float q = fmaf(QMM_ATTN_U8_C3, f, QMM_ATTN_U8_C2);
    q = fmaf(q, f, QMM_ATTN_U8_C1);
    q = fmaf(q, f, QMM_ATTN_U8_C0);
    const float r = nearbyintf(ldexpf(q, (int)n));
    return r > 255.0f ? 255 : (int)r;
}

/* A group of rows (1..16) over nblk key blocks, the state carried from block to block: per block
 * random scores (garbage past nv, a per-row offset so that the max rises and falls), a mask of
 * kind mk (0 none, 1 bool, 2 additive of dtype mt; row stride ms2 (0: one row for all), key
 * stride ms3) and per row one of: plain, a NaN score (unmasked or bool-masked), every key
 * masked, a spread past 2^-126. Checks per row: P as 2^(x − bm) (the masked scores x formed as
 * the kernels do), m, α, ps bit for bit against attention.h's rules and E, l against
 * l·α + ps·Σ 2^(x − bm) in double; rows, P rows and state past the group untouched. */
static int softmax_case(const softmax_uk *k, int64_t nk, int rows, int nblk, int mk, qmm_dtype mt, int64_t ms2,
                        int64_t ms3) {
    enum { R = 16 };
    const int64_t mrows = ms2 ? rows : 1, mlen = (mrows - 1) * ms2 + (nk - 1) * ms3 + 1;
    float *S = malloc((size_t)(rows * nk) * sizeof(float)), x[64];
    uint8_t *bm8 = malloc((size_t)mlen);
    char *am = malloc((size_t)mlen * 4), P[(R + 1) * 64 * 4];
    float m[R + 1], l[R + 1], al[R + 1], ps[R + 1];
    for (int i = 0; i <= R; i++) { m[i] = i < rows ? -INFINITY : 7.0f; l[i] = i < rows ? 0.0f : 7.0f; al[i] = ps[i] = 7.0f; }
    int ok = 1;
    for (int b = 0; b < nblk && ok; b++) {
        const int64_t nv = b == nblk - 1 && tu_rand_int(0, 1) ? tu_rand_int(1, nk) : tu_rand_int(0, 2) ? nk : tu_rand_int(1, nk);
        int special[R];
        for (int i = 0; i < rows; i++) {
            const int r = (int)tu_rand_int(0, 9);
            special[i] = r == 0 ? 1 : r == 1 ? 2 : r == 2 ? 3 : r == 3 && k->p == QMM_ATTN_P_U8 ? 4 : 0;
            static const float offs[] = {0.0f, 5.0f, -5.0f, 30.0f, -30.0f, -150.0f};
            const float off = offs[tu_rand_int(0, 5)];
            for (int64_t j = 0; j < nk; j++)
                S[i * nk + j] = j < nv ? off + 3.0f * tu_rand_normal() : (tu_rand_int(0, 1) ? 1e30f : NAN);
            if (special[i] == 3) S[i * nk + tu_rand_int(0, nv - 1)] = off + 200.0f;
            if (special[i] == 4) S[i * nk + tu_rand_int(0, nv - 1)] = INFINITY; /* u8: bm = +inf, a NaN row (unless masked) */
        }
        if (mk == 1) for (int64_t j = 0; j < mlen; j++) bm8[j] = tu_rand_int(0, 3) != 0;
        if (mk == 2)
            for (int64_t j = 0; j < mlen; j++) {
                const int r = (int)tu_rand_int(0, 9);
                qmm_store_f(am, mt, j, r == 0 ? -INFINITY : r == 1 ? -FLT_MAX : tu_rand_normal());
            }
        for (int i = 0; i < rows; i++) { /* the specials (a shared mask row: only the rows without a special there) */
            const int64_t mr0 = i * ms2;
            if (special[i] == 1) S[i * nk + tu_rand_int(0, nv - 1)] = NAN; /* unmasked (additive, none) or bool-masked */
            if (special[i] == 2) {
                for (int64_t j = 0; j < nv; j++) {
                    if (mk == 0) S[i * nk + j] = -INFINITY;
                    else if (ms2 == 0) S[i * nk + j] = -INFINITY;
                    else if (mk == 1) bm8[mr0 + j * ms3] = 0;
                    else qmm_store_f(am, mt, mr0 + j * ms3, -INFINITY);
                }
            }
        }
        memset(P, 0x5a, sizeof P);
        float m0[R], l0[R];
        memcpy(m0, m, sizeof m0);
        memcpy(l0, l, sizeof l0);
        qmm_attn_call c = {.D = 1, .mask_dtype = mk == 1 ? QMM_U8 : mt, .ms = {0, 0, ms2, ms3}};
        k->f(&c, rows, S, nk, nv, mk == 0 ? NULL : mk == 1 ? (const void *)bm8 : (const void *)am, P, m, l, al, ps);
        const qmm_attn_ukernels pk = {.p = k->p};
        for (int i = 0; i < rows && ok; i++) {
            char what[240];
            snprintf(what, sizeof what, "%s: rows=%d nk=%lld nv=%lld block %d row %d, mask %s%s ms2=%lld ms3=%lld case %d",
                     k->name, rows, (long long)nk, (long long)nv, b, i, mk == 0 ? "none" : mk == 1 ? "bool" : "additive ",
                     mk == 2 ? qmm_dtype_name(mt) : "", (long long)ms2, (long long)ms3, special[i]);
            /* the masked scores as the kernels form them (fmaf: one rounding, as VFMADD) */
            int nan = 0;
            float bm = -INFINITY;
            for (int64_t j = 0; j < nk; j++) {
                float y = j < nv ? S[i * nk + j] : -INFINITY;
                if (j < nv && mk == 1 && !bm8[i * ms2 + j * ms3]) y = -INFINITY;
                if (j < nv && mk == 2) {
                    const float a = qmm_load_f(am, mt, i * ms2 + j * ms3);
                    const float z = fmaf(a, 1.44269504088896341f, y);
                    y = a != -INFINITY && y != -INFINITY && z == -INFINITY ? -FLT_MAX : z;
                }
                x[j] = y;
                if (y != y) nan = 1;
                else if (y > bm) bm = y;
            }
            if (k->p == QMM_ATTN_P_U8 && bm == INFINITY) nan = 1; /* +inf − +inf: the u8 P's NaN row */
            const char *Pi = P + (size_t)(i * nk) * (k->p == QMM_ATTN_P_F32 ? 4 : k->p == QMM_ATTN_P_BF16 ? 2 : 1);
            double sref = 0, smag = 0;
            int64_t usum = 0; /* u8: Σ U(x − bm) */
            for (int64_t j = 0; j < nk && ok; j++) { /* P */
                const double pr = p_val(&pk, Pi, j);
                if (nan || bm == -INFINITY || x[j] == -INFINITY) { /* P 0: the row, or this key */
                    if (pr != 0.0) ok = TU_CHECK(0, "%s: P[%lld] = %g, want 0", what, (long long)j, pr);
                    continue;
                }
                if (k->p == QMM_ATTN_P_U8) { /* bit for bit: U of x − bm in f32 */
                    const int u = ref_u(x[j] - bm), got = ((const uint8_t *)Pi)[j];
                    usum += u;
                    if (got != u)
                        ok = TU_CHECK(0, "%s: P[%lld] = %d, want U(%.9g) = %d", what, (long long)j, got, (double)(x[j] - bm), u);
                }
                const double e = exp2((double)x[j] - bm), arg = fabs((double)x[j] - bm);
                const double rel = 0x1p-21 + arg * 0x1p-23; /* the polynomial, the rounding of x − bm */
                const double pe = e < 0x1p-126 ? 0x1p-126 : 0;  /* flushed below 2^-126 */
                double tol;
                if (k->p == QMM_ATTN_P_U8) tol = (0.5 + 255 * e * (rel + 7.6e-5)) / 255 + 1e-9; /* + U's polynomial */
                else if (k->p == QMM_ATTN_P_BF16) tol = e * (rel + 0x1p-8) + pe;
                else tol = e * rel + pe;
                if (!(fabs(pr - e) <= tol))
                    ok = TU_CHECK(0, "%s: P[%lld] = %.9g, want %.9g (s − bm = %g)", what, (long long)j, pr, e, (double)x[j] - bm);
                sref += e;
                smag += e * rel + 0x1p-126;
            }
            if (!ok) break;
            if (nan || l0[i] != l0[i]) { /* the row is NaN from now on */
                ok = TU_CHECK(l[i] != l[i] && same_bits(m[i], m0[i]) && al[i] == 1.0f && same_bits(ps[i], 0.0f),
                              "%s: a NaN row: l %g, m %g (was %g), α %g, ps %g; want NaN, m as it was, 1, 0", what, l[i], m[i],
                              m0[i], al[i], ps[i]);
            } else if (bm == -INFINITY) { /* nothing added */
                ok = TU_CHECK(same_bits(l[i], l0[i]) && same_bits(m[i], m0[i]) && al[i] == 1.0f && same_bits(ps[i], 0.0f),
                              "%s: every key masked: l %g (was %g), m %g (was %g), α %g, ps %g; want l, m as they were, 1, 0",
                              what, l[i], l0[i], m[i], m0[i], al[i], ps[i]);
            } else {
                const float mn = bm > m0[i] ? bm : m0[i];
                const float a = mn == m0[i] ? 1.0f : ref_e(m0[i] - mn), f = bm == mn ? 1.0f : ref_e(bm - mn);
                const double lref = (double)l0[i] * a + (double)f * sref;
                const double tol = f * (smag + sref * (double)nk * 0x1p-24) + lref * 0x1p-22 + 1e-37;
                const float lu = l0[i] * a + f * ((float)usum * (1.0f / 255.0f)); /* u8: the exact sum, f32 steps */
                ok = TU_CHECK(same_bits(m[i], mn) && same_bits(al[i], a) && same_bits(ps[i], f),
                              "%s: m %.9g α %.9g ps %.9g, want %.9g %.9g %.9g (bm %.9g, m before %.9g)", what, m[i], al[i], ps[i],
                              mn, a, f, bm, m0[i]) &&
                     (k->p == QMM_ATTN_P_U8
                          ? TU_CHECK(same_bits(l[i], lu), "%s: l %.9g, want %.9g (Σ U %lld; l before %.9g, α %g, ps %g)", what,
                                     l[i], lu, (long long)usum, l0[i], a, f)
                          : TU_CHECK(fabs(l[i] - lref) <= tol, "%s: l %.9g, want %.9g (l before %.9g, α %g, ps %g)", what, l[i],
                                     lref, l0[i], a, f));
            }
        }
        for (int i = rows; i <= R && ok; i++)
            ok = TU_CHECK(m[i] == 7.0f && l[i] == 7.0f && al[i] == 7.0f && ps[i] == 7.0f, "%s: rows=%d: the state of row %d written",
                          k->name, rows, i);
        const size_t pb = (size_t)(rows * nk) * (k->p == QMM_ATTN_P_F32 ? 4 : k->p == QMM_ATTN_P_BF16 ? 2 : 1);
        for (size_t x8 = pb; x8 < sizeof P && ok; x8++)
            if ((unsigned char)P[x8] != 0x5a) ok = TU_CHECK(0, "%s: rows=%d: P byte %zu past the group written", k->name, rows, x8);
    }
    free(S);
    free(bm8);
    free(am);
    return ok;
}

static void test_softmax(const softmax_uk *k) {
    int bad = 0, n = 0;
    const int reps = g_quick ? 24 : 120;
    for (int64_t nk = k->nk_step; nk <= 64; nk += k->nk_step)
        for (int r = 0; r < reps && bad < 5; r++) {
            /* group sizes: 1, 16, the engines' 6, the driver's 12 (two groups of 6), and any */
            const int rows = r % 5 == 0 ? 1 : r % 5 == 1 ? 16 : r % 5 == 2 ? 6 : r % 5 == 3 ? 12 : (int)tu_rand_int(1, 16);
            const int nblk = (int)tu_rand_int(1, 4), mk = (int)tu_rand_int(0, 2);
            const qmm_dtype mt = rand_dtype();
            const int64_t ms3 = tu_rand_int(0, 1) ? 1 : 3, ms2 = tu_rand_int(0, 4) == 0 ? 0 : nk * ms3 + tu_rand_int(0, 5);
            bad += !softmax_case(k, nk, rows, nblk, mk, mt, ms2, ms3);
            n++;
        }
    tu_note("%s: %d groups of 1..16 rows over 1..4 blocks (nk %d..64)", k->name, n, k->nk_step);
}

/* ---------------------------------------------------------------- live keys, the key shift */
/* qmm_attn_live_keys against every mask row read one by one, on masks of each dtype whose key
 * padding (keys no row attends) and scattered masked entries (keys some rows attend) are random,
 * with broadcast strides; then qmm_attn_key_mean over the live keys against an f64 mean */
static void test_live_keys(void) {
    const int n = g_quick ? 40 : 200;
    static const qmm_dtype mts[] = {QMM_U8, QMM_F32, QMM_F16, QMM_BF16};
    for (int r = 0; r < n; r++) {
        const qmm_dtype mt = mts[tu_rand_int(0, 3)];
        const int64_t Hkv = tu_rand_int(1, 2), group = tu_rand_int(1, 3), H = Hkv * group, B = tu_rand_int(1, 2);
        const int64_t S = tu_rand_int(1, 40), Skv = tu_rand_int(1, 100), D = tu_rand_int(1, 40);
        const int64_t ms[4] = {tu_rand_int(0, 1) * H * S * Skv, tu_rand_int(0, 1) * S * Skv, tu_rand_int(0, 1) * Skv, 1};
        const size_t mes = qmm_dtype_size(mt);
        char *mask = calloc((size_t)(B * H * S * Skv), mes);
        uint8_t *pad = malloc((size_t)Skv), *live = malloc((size_t)Skv);
        for (int64_t j = 0; j < Skv; j++) pad[j] = tu_rand_int(0, 3) == 0;
        const int dense = (int)tu_rand_int(0, 2); /* 0: most entries masked, so some keys only by chance */
        for (int64_t i = 0; i < B * H * S * Skv; i++) {
            const int64_t j = i % Skv;
            const int off = pad[j] || (dense ? tu_rand_int(0, 7) == 0 : tu_rand_int(0, 7) != 0);
            if (mt == QMM_U8) ((uint8_t *)mask)[i] = off ? 0 : (uint8_t)tu_rand_int(1, 255);
            else qmm_store_f(mask, mt, i, off ? -INFINITY : (float)tu_rand_int(-3, 3));
        }
        float *k = malloc((size_t)(Skv * D) * sizeof(float));
        for (int64_t i = 0; i < Skv * D; i++) k[i] = tu_rand_normal() * (pad[i / D] ? 1e6f : 1.0f) + 5.0f;
        qmm_attn_call c = {.B = B, .H = H, .Hkv = Hkv, .S = S, .Skv = Skv, .D = D, .k = k, .kv_dtype = QMM_F32,
                           .ks = {0, 0, D}, .mask = mask, .mask_dtype = mt, .ms = {ms[0], ms[1], ms[2], ms[3]}};
        for (int64_t b = 0; b < B; b++)
            for (int64_t hk = 0; hk < Hkv; hk++) {
                const int64_t dead = qmm_attn_live_keys(&c, b, hk, live);
                int64_t want_dead = 0, ok = 1;
                for (int64_t j = 0; j < Skv; j++) {
                    int att = 0;
                    for (int64_t g = 0; g < group; g++)
                        for (int64_t i = 0; i < S; i++) {
                            const int64_t e = b * ms[0] + (hk * group + g) * ms[1] + i * ms[2] + j;
                            att |= mt == QMM_U8 ? ((const uint8_t *)mask)[e] != 0 : qmm_load_f(mask, mt, e) != -INFINITY;
                        }
                    want_dead += !att;
                    ok &= dead == 0 || (live[j] != 0) == att; /* 0 returned: every key live, live[] unread */
                }
                TU_CHECK(ok && dead == want_dead, "live keys: mask %s B=%lld H=%lld Hkv=%lld S=%lld Skv=%lld strides %lld,%lld,%lld:"
                         " %lld keys not live, want %lld", qmm_dtype_name(mt), (long long)B, (long long)H, (long long)Hkv,
                         (long long)S, (long long)Skv, (long long)ms[0], (long long)ms[1], (long long)ms[2], (long long)dead,
                         (long long)want_dead);
                float mean[QMM_ATTN_MAX_D];
                qmm_attn_key_mean(&c, k, dead ? live : NULL, mean);
                for (int64_t d = 0; d < D; d++) {
                    double sum = 0;
                    int64_t cnt = 0;
                    for (int64_t j = 0; j < Skv; j++)
                        if (!dead || live[j]) { sum += k[j * D + d]; cnt++; }
                    const float want = cnt ? (float)(sum / (double)cnt) : 0.0f;
                    if (!(fabsf(mean[d] - want) <= 1e-6f * fabsf(want) + 1e-6f)) {
                        TU_CHECK(0, "key mean over the live keys: d %lld %g, want %g", (long long)d, mean[d], want);
                        break;
                    }
                }
            }
        free(mask);
        free(pad);
        free(live);
        free(k);
    }
    tu_note("qmm_attn_live_keys, qmm_attn_key_mean: %d random masks (bool, f32, f16, bf16; broadcast strides)", n);
}

int main(int argc, char **argv) {
    tu_init(argc, argv, "test_attn_ukernels");
    g_quick = getenv("QMM_TEST_QUICK") != NULL;
    test_live_keys();
    char why[QMM_REASON_MAX];
    const int avx512 = qmm_engine_available(QMM_ENGINE_AVX512_F32, why, sizeof why);
    char why512[QMM_REASON_MAX];
    memcpy(why512, why, sizeof why512);
    if (!avx512) tu_skip("the AVX-512 softmax ukernels", why);
    else {
        const softmax_uk ks[] = {{"qmm_attn_softmax_f32__avx512", qmm_attn_softmax_f32__avx512, QMM_ATTN_P_F32, 16},
                                 {"qmm_attn_softmax_bf16__avx512", qmm_attn_softmax_bf16__avx512, QMM_ATTN_P_BF16, 16},
                                 {"qmm_attn_softmax_u8__avx512", qmm_attn_softmax_u8__avx512, QMM_ATTN_P_U8, 16}};
        for (size_t i = 0; i < 3; i++) test_softmax(&ks[i]);
    }
    if (!qmm_engine_available(QMM_ENGINE_AVX2_F32, why, sizeof why)) tu_skip("the AVX2 softmax ukernels", why);
    else {
        const softmax_uk ks[] = {{"qmm_attn_softmax_f32__avx2", qmm_attn_softmax_f32__avx2, QMM_ATTN_P_F32, 8},
                                 {"qmm_attn_softmax_u8__avx2", qmm_attn_softmax_u8__avx2, QMM_ATTN_P_U8, 8}};
        for (size_t i = 0; i < 2; i++) test_softmax(&ks[i]);
    }
    const struct { qmm_engine_id id; engine e; } engines[] = {
        {QMM_ENGINE_AVX512_F32, {"avx512_f32", &qmm_avx512_f32_attn, 0}},
        {QMM_ENGINE_AVX512_BF16, {"avx512_bf16", &qmm_avx512_bf16_attn, 0}},
        {QMM_ENGINE_AVX512_VNNI, {"avx512_vnni", &qmm_avx512_vnni_attn, 1}},
        {QMM_ENGINE_AVX_VNNI, {"avx_vnni", &qmm_avx_vnni_attn, 1}},
        {QMM_ENGINE_AVX2_F32, {"avx2_f32", &qmm_avx2_f32_attn, 0}},
    };
    for (size_t i = 0; i < sizeof engines / sizeof engines[0]; i++) {
        if (!qmm_engine_available(engines[i].id, why, sizeof why)) { tu_skip(engines[i].e.name, why); continue; }
        TU_CHECK(qmm_engine_get(engines[i].id)->ops->op[QMM_OP_ATTENTION].desc == engines[i].e.u,
                 "%s: its attention row's desc is not its descriptor", engines[i].e.name);
        test_engine(&engines[i].e);
    }
    /* the engines' descriptors this test does not know yet */
    qmm_engine_id all[QMM_ENGINE_COUNT];
    const int n = tu_engines(TU_ENGINES_ALL, all);
    for (int i = 0; i < n; i++) {
        const qmm_engine *e = qmm_engine_get(all[i]);
        int known = 0;
        for (size_t j = 0; j < sizeof engines / sizeof engines[0]; j++) known |= engines[j].id == all[i];
        if (e->ops->op[QMM_OP_ATTENTION].desc && !known && all[i] != QMM_ENGINE_AMX_BF16 && all[i] != QMM_ENGINE_AMX_INT8)
            tu_skip(e->name, "attention ukernels not in this test's list (test_attention covers the engine)");
    }
#ifdef QMM_TEST_AMX_EMU
    if (!avx512) tu_skip("amx_bf16 (emulated, its conversions AVX-512)", why512);
    else {
        const engine e = {"amx_bf16 (emulated)", qmm_amx_bf16_ops_emu.op[QMM_OP_ATTENTION].desc, 0};
        const long f0 = qmm_amx_emu_faults();
        test_engine(&e);
        TU_CHECK(qmm_amx_emu_faults() == f0 && qmm_amx_emu_live_configs() == 0,
                 "amx_bf16 (emulated): %ld tile faults (%s), %ld configurations left", qmm_amx_emu_faults() - f0,
                 qmm_amx_emu_first_fault(), qmm_amx_emu_live_configs());
    }
    if (!qmm_engine_available(QMM_ENGINE_AVX512_VNNI, why, sizeof why))
        tu_skip("amx_int8 (emulated, avx512_vnni's pack_kv and pack_q)", why);
    else {
        const engine e = {"amx_int8 (emulated)", qmm_amx_int8_ops_emu.op[QMM_OP_ATTENTION].desc, 1};
        const long f0 = qmm_amx_emu_faults();
        test_engine(&e);
        TU_CHECK(qmm_amx_emu_faults() == f0 && qmm_amx_emu_live_configs() == 0,
                 "amx_int8 (emulated): %ld tile faults (%s), %ld configurations left", qmm_amx_emu_faults() - f0,
                 qmm_amx_emu_first_fault(), qmm_amx_emu_live_configs());
    }
#else
    tu_skip("amx_bf16, amx_int8 (emulated)", "this build has no emulated AMX objects (tests/amx_emu.cmake)");
#endif
#ifdef QMM_TEST_SIMDE /* the same files on SIMDe (tests/simde.cmake): checked on every CPU */
    {
        const softmax_uk ks[] = {{"qmm_attn_softmax_f32__avx512 (SIMDe)", qmm_attn_softmax_f32__avx512_simde, QMM_ATTN_P_F32, 16},
                                 {"qmm_attn_softmax_bf16__avx512 (SIMDe)", qmm_attn_softmax_bf16__avx512_simde, QMM_ATTN_P_BF16, 16},
                                 {"qmm_attn_softmax_u8__avx512 (SIMDe)", qmm_attn_softmax_u8__avx512_simde, QMM_ATTN_P_U8, 16}};
        for (size_t i = 0; i < 3; i++) test_softmax(&ks[i]);
        const engine es[] = {{"avx512_f32 (SIMDe)", &qmm_avx512_f32_attn_simde, 0},
                             {"avx512_bf16 (SIMDe)", &qmm_avx512_bf16_attn_simde, 0},
                             {"avx512_vnni (SIMDe)", &qmm_avx512_vnni_attn_simde, 1},
                             {"avx_vnni (SIMDe)", &qmm_avx_vnni_attn_simde, 1}};
        for (size_t i = 0; i < 4; i++) test_engine(&es[i]);
    }
#else
    tu_skip("the AVX-512 and AVX-VNNI attention ukernels on SIMDe", "this build has no SIMDe objects (libsimde-dev, tests/simde.cmake)");
#endif
    return tu_finish();
}
