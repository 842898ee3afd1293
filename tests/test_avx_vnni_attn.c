/*
 * test_avx_vnni_attn.c — avx_vnni's attention ukernels (avx_vnni_attn.c, under the contract of
 * core/attention.h) as units against an independent scalar model of mode int8, on randomized shapes (D in {1, 3, 16,
 * 64, 100, 128, 256}, Skv = 1 or odd, rows 1..mr, k / v / q in f32, bf16 and f16, token strides
 * past D):
 *   qk    pack_kv + pack_q + qk against a scalar model that computes the same codes on its own
 *         (the key mean of qmm_attn_key_mean, qmm_rotate_f32, the quantization in scalar C): Q's
 *         bytes and sq bit for bit, and every score of every K block bit for bit — the model
 *         takes the exact int32 dot product and then the kernel's float operations in the
 *         kernel's order, (float)(Σ (qq+128)·kq − 128·Σ kq) · (sk · sq); rows past `rows`
 *         untouched. Hostile rows too: a non-finite key, query element or value (NaN scales),
 *         keys of magnitude 1e-39 (codes through the 2^64 pre-scale);
 *   pv    pack_kv + pv against the model's V codes and scales: the exact int32 Σ pq·vq, then
 *         x = (float)Σ · vs and the kernel's one FMA (O·α + x where ps = 1, x·ps + O where α = 1,
 *         else x·ps + O·α), bit for bit, with random P, O, and each of the three α / ps cases;
 *   e2e   a tile loop of the test's own (per K block: qk, a scalar u8 block-max softmax in base
 *         2 in place of the frame's ukernel, the driver's m / l / α / ps bookkeeping, pv; then
 *         O / l) on Gaussian q, k (shifted by a common vector), v against a float64 softmax
 *         attention: relative L2 error over the tile's outputs (rows 1..2·mr + 1, and at least
 *         128 values: up to 128 rows at D = 1, in groups of mr as the driver runs them) <= 2e-2
 *         for D >= 16; 4e-2 at D = 3, 8e-2 at D = 1. With so few channels each output is close
 *         to a few values v[j] of one block, whose int8 error (up to the block's max |v| / 254)
 *         is not averaged over channels and is measured against |v[j]|, which may be small (the
 *         largest seen over 150 seeds: 5.1e-2 at D = 1, 2.1e-2 at D = 3, 1.7e-2 for D >= 16).
 * Skipped, visibly (exit 77), on a CPU without AVX-VNNI or a build without it. Seeded
 * (testutil.h): QMM_SEED=N or the first argument replays a run; QMM_TEST_QUICK=1 runs fewer cases.
 */
#include "../src/engines/x86_avx2/avx2_attn.h"
#include "ukernels.h"
#include "attention.h"
#include "numerics.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const qmm_attn_ukernels *U = &qmm_avx_vnni_attn;
static const int64_t g_D[] = {1, 3, 16, 64, 100, 128, 256};
static const qmm_dtype g_dt[] = {QMM_F32, QMM_BF16, QMM_F16};
static const char *dt_name(qmm_dtype t) { return t == QMM_F32 ? "f32" : t == QMM_BF16 ? "bf16" : "f16"; }

static int same_f(float a, float b) { return (a != a && b != b) || qmm_f32_bits(a) == qmm_f32_bits(b); }

/* ---------------------------------------------------------------- the scalar model */
/* row[0..n) → codes, Σ codes; returns the scale (see avx_vnni_attn.c's top) */
static float model_quant(const float *row, int64_t n, int8_t *c8, int32_t *sum) {
    float am = 0.0f;
    int bad = 0;
    for (int64_t d = 0; d < n; d++) {
        if (!isfinite(row[d])) bad = 1;
        else if (fabsf(row[d]) > am) am = fabsf(row[d]);
    }
    *sum = 0;
    if (bad) {
        memset(c8, 0, (size_t)n);
        return NAN;
    }
    const float pre = am < 0x1p-100f ? 0x1p64f : 1.0f, inv = am > 0.0f ? 127.0f / (am * pre) : 0.0f;
    for (int64_t d = 0; d < n; d++) {
        float x = rintf((row[d] * pre) * inv);
        x = x > 127.0f ? 127.0f : x < -127.0f ? -127.0f : x;
        c8[d] = (int8_t)x;
        *sum += c8[d];
    }
    return am / 127.0f;
}

/* key j (zero past Skv) → kq [Dq], Σ kq, sk */
static float model_key(const qmm_attn_call *c, const void *k, const float *mean, int64_t j, int8_t *kq, int32_t *sum) {
    const int64_t D = c->D, Dq = qmm_round_up(D, 64);
    float row[QMM_ATTN_MAX_D];
    if (j >= c->Skv) {
        memset(kq, 0, (size_t)Dq);
        *sum = 0;
        return 0.0f;
    }
    const char *kr = (const char *)k + j * c->ks[2] * (int64_t)qmm_dtype_size(c->kv_dtype);
    for (int64_t d = 0; d < Dq; d++) row[d] = d < D ? qmm_load_f(kr, c->kv_dtype, d) - mean[d] : 0.0f;
    qmm_rotate_f32(row, Dq, 64);
    return model_quant(row, Dq, kq, sum);
}

/* one query row → qq + 128 [Dq], sq */
static float model_q(const qmm_attn_call *c, const void *q, uint8_t *Q) {
    const int64_t D = c->D, Dq = qmm_round_up(D, 64);
    float row[QMM_ATTN_MAX_D];
    int8_t q8[QMM_ATTN_MAX_D];
    int32_t sum;
    for (int64_t d = 0; d < Dq; d++) row[d] = d < D ? qmm_load_f(q, c->q_dtype, d) : 0.0f;
    qmm_rotate_f32(row, Dq, 64);
    const float s = model_quant(row, Dq, q8, &sum);
    for (int64_t d = 0; d < Dq; d++) Q[d] = (uint8_t)(q8[d] + 128);
    return s * (c->scale * 1.44269504088896341f);
}

/* V block b → vq [nk][Dp] (by key), vs [Dp] */
static void model_v(const qmm_attn_call *c, const void *v, int64_t b, int64_t Dp, int8_t *vq, float *vs) {
    const int64_t nk = U->nk, j0 = b * nk, nv = c->Skv - j0 < nk ? c->Skv - j0 : nk;
    const size_t es = qmm_dtype_size(c->kv_dtype);
    memset(vq, 0, (size_t)(nk * Dp));
    for (int64_t d = 0; d < Dp; d++) {
        float am = 0.0f;
        int bad = 0;
        for (int64_t j = 0; j < nv && d < c->D; j++) {
            const float x = qmm_load_f((const char *)v + (j0 + j) * c->vs[2] * (int64_t)es, c->kv_dtype, d);
            if (!isfinite(x)) bad = 1;
            else if (fabsf(x) > am) am = fabsf(x);
        }
        vs[d] = bad ? NAN : am / (127.0f * 255.0f);
        if (bad || d >= c->D) continue;
        const float pre = am < 0x1p-100f ? 0x1p64f : 1.0f, inv = am > 0.0f ? 127.0f / (am * pre) : 0.0f;
        for (int64_t j = 0; j < nv; j++) {
            const float x = qmm_load_f((const char *)v + (j0 + j) * c->vs[2] * (int64_t)es, c->kv_dtype, d);
            float r = rintf((x * pre) * inv);
            r = r > 127.0f ? 127.0f : r < -127.0f ? -127.0f : r;
            vq[j * Dp + d] = (int8_t)r;
        }
    }
}

/* ---------------------------------------------------------------- a case's operands */
typedef struct kase {
    qmm_attn_call c;
    void *q, *k, *v;     /* q [rows][qs], k [Skv][ks], v [Skv][vs] in their dtypes */
    int64_t rows, Dq, Dp, nblk;
    size_t kb, vb, bytes;
    char *kv;            /* the packed head */
} kase;

/* values N(0, sd) + shift[d] (shift NULL: 0) in dtype t, n rows of D, stride ld */
static void *fill(qmm_dtype t, int64_t n, int64_t D, int64_t ld, float sd, const float *shift) {
    void *p = calloc((size_t)(n * ld), qmm_dtype_size(t));
    for (int64_t r = 0; r < n; r++)
        for (int64_t d = 0; d < D; d++)
            qmm_store_f(p, t, r * ld + d, sd * tu_rand_normal() + (shift ? shift[d] : 0.0f));
    return p;
}

static void kase_make(kase *K, int64_t D, int64_t Skv, int64_t rows, qmm_dtype kvt, qmm_dtype qt, float ksd) {
    memset(K, 0, sizeof *K);
    qmm_attn_call *c = &K->c;
    c->B = c->H = c->Hkv = 1;
    c->S = rows;
    c->Skv = Skv;
    c->D = D;
    c->q_dtype = qt;
    c->kv_dtype = kvt;
    c->qs[2] = D + tu_rand_int(0, 3);
    c->ks[2] = D + tu_rand_int(0, 3);
    c->vs[2] = D + tu_rand_int(0, 3);
    c->scale = 1.0f / sqrtf((float)D);
    c->mode = QMM_ATTN_INT8;
    float shift[QMM_ATTN_MAX_D];
    for (int64_t d = 0; d < D; d++) shift[d] = ksd * 2.0f * tu_rand_normal();
    K->q = fill(qt, rows, D, c->qs[2], 1.0f, NULL);
    K->k = fill(kvt, Skv, D, c->ks[2], ksd, shift);
    K->v = fill(kvt, Skv, D, c->vs[2], 1.0f, NULL);
    K->rows = rows;
    K->Dq = qmm_round_up(D, 64);
    K->Dp = qmm_round_up(D, U->dalign);
    K->nblk = (Skv + U->nk - 1) / U->nk;
    K->kb = U->kb_bytes(D);
    K->vb = U->vb_bytes(D);
    K->bytes = qmm_attn_blocks_bytes(Skv, U->nk, K->kb + K->vb, U->extra_bytes(D));
    K->kv = qmm_aligned_alloc(K->bytes);
}

static void kase_pack(kase *K) {
    memset(K->kv, 0xa5, K->bytes);
    U->pack_kv(&K->c, K->k, K->v, NULL, K->kv);
}

static void kase_free(kase *K) {
    free(K->q);
    free(K->k);
    free(K->v);
    qmm_aligned_free(K->kv);
}

/* a raw pattern into element i of x: NaN, +Inf or -Inf */
static void plant(void *x, qmm_dtype t, int64_t i) {
    static const uint32_t f32[] = {0x7fc00000u, 0x7f800000u, 0xff800000u};
    static const uint32_t h16[] = {0x7e00u, 0x7c00u, 0xfc00u}, b16[] = {0x7fc0u, 0x7f80u, 0xff80u};
    const int w = (int)tu_rand_int(0, 2);
    tu_store_bits(x, t, i, t == QMM_F32 ? f32[w] : t == QMM_F16 ? h16[w] : b16[w]);
}

/* ---------------------------------------------------------------- qk */
static void qk_case(int64_t D, int64_t Skv, int rows, qmm_dtype kvt, qmm_dtype qt, int hostile) {
    kase K;
    const float ksd = hostile == 3 && kvt != QMM_F16 ? 1e-39f : 1.0f;
    kase_make(&K, D, Skv, rows, kvt, qt, ksd);
    const qmm_attn_call *c = &K.c;
    if (hostile == 1) plant(K.k, kvt, tu_rand_int(0, Skv - 1) * c->ks[2] + tu_rand_int(0, D - 1));
    if (hostile == 2) plant(K.q, qt, tu_rand_int(0, rows - 1) * c->qs[2] + tu_rand_int(0, D - 1));
    kase_pack(&K);
    char what[160];
    snprintf(what, sizeof what, "qk D=%lld Skv=%lld rows=%d kv=%s q=%s hostile=%d", (long long)D, (long long)Skv, rows,
             dt_name(kvt), dt_name(qt), hostile);
    /* the mean in extra, as qmm_attn_key_mean writes it */
    float mean[QMM_ATTN_MAX_D];
    qmm_attn_key_mean(c, K.k, NULL, mean);
    const float *xm = (const float *)(K.kv + (size_t)K.nblk * (K.kb + K.vb));
    int ok = 1;
    for (int64_t d = 0; d < D; d++) ok &= same_f(xm[d], mean[d]);
    TU_CHECK(ok, "%s: the keys' mean in extra", what);
    /* Q and sq */
    const size_t qb = U->q_bytes(D);
    uint8_t *Q = qmm_aligned_alloc(qb * (size_t)U->mr), *Qm = malloc(qb);
    float sq[8], sqm[8];
    int64_t bad = -1;
    for (int i = 0; i < rows; i++) {
        const void *qr = (const char *)K.q + i * c->qs[2] * (int64_t)qmm_dtype_size(qt);
        U->pack_q(c, qr, Q + i * qb, &sq[i]);
        sqm[i] = model_q(c, qr, Qm);
        if (!same_f(sq[i], sqm[i])) bad = i;
        for (size_t d = 0; d < qb && bad < 0; d++)
            if (Q[i * qb + d] != Qm[d]) bad = i * 1000 + (int64_t)d;
    }
    TU_CHECK(bad < 0, "%s: pack_q differs from the model at row*1000+d = %lld", what, (long long)bad);
    /* every K block's scores */
    int8_t kq[QMM_ATTN_MAX_D];
    float S[8 * 64];
    const int64_t nk = U->nk;
    for (int64_t b = 0; b < K.nblk && bad < 0; b++) {
        for (int64_t i = 0; i < 8 * nk; i++) S[i] = -12345.0f;
        U->qk(rows, Q, sq, K.kv + (size_t)b * K.kb, D, S);
        for (int64_t j = 0; j < nk && bad < 0; j++) {
            int32_t ks;
            const float sk = model_key(c, K.k, mean, b * nk + j, kq, &ks);
            for (int i = 0; i < rows; i++) {
                int32_t dot = 0;
                for (int64_t d = 0; d < K.Dq; d++) dot += (int32_t)Q[i * qb + d] * kq[d];
                const float want = (float)(dot - 128 * ks) * (sk * sq[i]);
                if (!same_f(S[i * nk + j], want)) {
                    bad = j;
                    TU_CHECK(0, "%s: block %lld row %d key %lld: %.9g, model %.9g", what, (long long)b, i,
                             (long long)j, S[i * nk + j], want);
                    break;
                }
            }
        }
        for (int64_t i = rows * nk; i < 8 * nk && bad < 0; i++)
            if (S[i] != -12345.0f) bad = i;
    }
    TU_CHECK(bad < 0, "%s: scores (first bad %lld)", what, (long long)bad);
    qmm_aligned_free(Q);
    free(Qm);
    kase_free(&K);
}

/* ---------------------------------------------------------------- pv */
static void pv_case(int64_t D, int64_t Skv, int rows, qmm_dtype kvt, int hostile) {
    kase K;
    kase_make(&K, D, Skv, rows, kvt, QMM_F32, 1.0f);
    const qmm_attn_call *c = &K.c;
    if (hostile == 1) plant(K.v, kvt, tu_rand_int(0, Skv - 1) * c->vs[2] + tu_rand_int(0, D - 1));
    if (hostile == 3 && kvt != QMM_F16)
        for (int64_t i = 0; i < Skv * c->vs[2]; i++) qmm_store_f(K.v, kvt, i, qmm_load_f(K.v, kvt, i) * 1e-39f);
    kase_pack(&K);
    char what[160];
    snprintf(what, sizeof what, "pv D=%lld Skv=%lld rows=%d kv=%s hostile=%d", (long long)D, (long long)Skv, rows,
             dt_name(kvt), hostile);
    const int64_t nk = U->nk, Dp = K.Dp;
    int8_t *vq = malloc((size_t)(nk * Dp));
    float *vs = malloc((size_t)Dp * sizeof(float));
    float *O = malloc((size_t)(8 * Dp) * sizeof(float)), *O0 = malloc((size_t)(8 * Dp) * sizeof(float));
    uint8_t P[8 * 64];
    float ps[8], alpha[8];
    void *ws = U->ws_bytes ? qmm_aligned_alloc(U->ws_bytes) : NULL;
    int64_t bad = -1;
    for (int64_t b = 0; b < K.nblk && bad < 0; b++) {
        model_v(c, K.v, b, Dp, vq, vs);
        for (int i = 0; i < 8 * nk; i++) P[i] = (uint8_t)tu_rand_int(0, 255);
        const int form = (int)tu_rand_int(0, 2); /* ps = 1, α = 1, or neither */
        for (int i = 0; i < 8; i++) {
            alpha[i] = form == 1 ? 1.0f : ldexpf(1.0f + 0.5f * (float)tu_rand_int(0, 1000) / 1000.0f, -(int)tu_rand_int(0, 20));
            ps[i] = form == 0 ? 1.0f : ldexpf(1.0f + 0.5f * (float)tu_rand_int(0, 1000) / 1000.0f, -(int)tu_rand_int(0, 20));
        }
        for (int64_t i = 0; i < 8 * Dp; i++) O[i] = O0[i] = tu_rand_normal();
        U->pv(rows, P, ps, alpha, K.kv + (size_t)K.nblk * K.kb + (size_t)b * K.vb, D, O, ws);
        for (int i = 0; i < rows && bad < 0; i++)
            for (int64_t d = 0; d < Dp; d++) {
                int32_t acc = 0;
                for (int64_t j = 0; j < nk; j++) acc += (int32_t)P[i * nk + j] * vq[j * Dp + d];
                const float x = (float)acc * vs[d], o = O0[i * Dp + d];
                const float want = ps[i] == 1.0f ? fmaf(o, alpha[i], x)
                                   : alpha[i] == 1.0f ? fmaf(x, ps[i], o)
                                                      : fmaf(x, ps[i], o * alpha[i]);
                if (!same_f(O[i * Dp + d], want)) {
                    bad = d;
                    TU_CHECK(0, "%s: block %lld row %d d %lld: %.9g, model %.9g", what, (long long)b, i, (long long)d,
                             O[i * Dp + d], want);
                    break;
                }
            }
        for (int64_t i = rows * Dp; i < 8 * Dp && bad < 0; i++)
            if (!same_f(O[i], O0[i])) bad = i;
    }
    TU_CHECK(bad < 0, "%s: outputs (first bad %lld)", what, (long long)bad);
    qmm_aligned_free(ws);
    free(vq);
    free(vs);
    free(O);
    free(O0);
    kase_free(&K);
}

/* ---------------------------------------------------------------- end to end */
/* the block-max u8 softmax of one row in scalar C (the frame's ukernel stands in): returns bm,
 * P = round(255 · 2^(s − bm)) past nv 0, *sum = Σ 2^(s − bm) */
static float softmax_u8(const float *s, int64_t nk, int64_t nv, uint8_t *P, float *sum) {
    float bm = -INFINITY;
    for (int64_t j = 0; j < nv; j++) bm = s[j] > bm ? s[j] : bm;
    *sum = 0.0f;
    for (int64_t j = 0; j < nk; j++) {
        const float e = j < nv ? exp2f(s[j] - bm) : 0.0f;
        P[j] = (uint8_t)rintf(255.0f * e);
        *sum += e;
    }
    return bm;
}

static void e2e_case(int64_t D, int64_t Skv, int64_t rows, qmm_dtype kvt, qmm_dtype qt) {
    kase K;
    kase_make(&K, D, Skv, rows, kvt, qt, 1.0f);
    const qmm_attn_call *c = &K.c;
    kase_pack(&K);
    const int64_t nk = U->nk, Dp = K.Dp, mr = U->mr;
    const size_t qb = U->q_bytes(D);
    const int64_t rp = qmm_round_up(rows, mr);
    uint8_t *Q = qmm_aligned_alloc(qb * (size_t)rp), *P = malloc((size_t)(rp * nk));
    float *S = malloc((size_t)(rp * nk) * sizeof(float)), *O = calloc((size_t)(rp * Dp), sizeof(float));
    float *sq = malloc((size_t)rp * sizeof(float) * 5), *m = sq + rp, *l = m + rp, *alpha = l + rp, *ps = alpha + rp;
    void *ws = U->ws_bytes ? qmm_aligned_alloc(U->ws_bytes) : NULL;
    const size_t qes = qmm_dtype_size(qt);
    for (int64_t i = 0; i < rows; i++) {
        U->pack_q(c, (const char *)K.q + i * c->qs[2] * (int64_t)qes, Q + i * qb, &sq[i]);
        m[i] = -INFINITY;
        l[i] = 0.0f;
    }
    for (int64_t b = 0; b < K.nblk; b++) {
        const int64_t j0 = b * nk, nv = Skv - j0 < nk ? Skv - j0 : nk;
        for (int64_t r = 0; r < rows; r += mr)
            U->qk((int)(rows - r < mr ? rows - r : mr), Q + r * qb, sq + r, K.kv + (size_t)b * K.kb, D, S + r * nk);
        for (int64_t i = 0; i < rows; i++) {
            float sum;
            const float bm = softmax_u8(S + i * nk, nk, nv, P + i * nk, &sum), mn = bm > m[i] ? bm : m[i];
            alpha[i] = exp2f(m[i] - mn);
            ps[i] = exp2f(bm - mn);
            l[i] = l[i] * alpha[i] + ps[i] * sum;
            m[i] = mn;
        }
        for (int64_t r = 0; r < rows; r += mr)
            U->pv((int)(rows - r < mr ? rows - r : mr), P + r * nk, ps + r, alpha + r,
                  K.kv + (size_t)K.nblk * K.kb + (size_t)b * K.vb, D, O + r * Dp, ws);
    }
    /* float64 softmax attention on the same (dtype-rounded) inputs */
    double e2 = 0.0, r2 = 0.0;
    double *sc = malloc((size_t)Skv * sizeof(double));
    for (int64_t i = 0; i < rows; i++) {
        double mx = -INFINITY, den = 0.0;
        for (int64_t j = 0; j < Skv; j++) {
            double dot = 0.0;
            for (int64_t d = 0; d < D; d++)
                dot += (double)qmm_load_f(K.q, qt, i * c->qs[2] + d) * qmm_load_f(K.k, kvt, j * c->ks[2] + d);
            sc[j] = dot * c->scale;
            mx = sc[j] > mx ? sc[j] : mx;
        }
        for (int64_t j = 0; j < Skv; j++) den += (sc[j] = exp(sc[j] - mx));
        for (int64_t d = 0; d < D; d++) {
            double ref = 0.0;
            for (int64_t j = 0; j < Skv; j++) ref += sc[j] * qmm_load_f((const char *)K.v, kvt, j * c->vs[2] + d);
            ref /= den;
            const double got = O[i * Dp + d] / l[i];
            e2 += (got - ref) * (got - ref);
            r2 += ref * ref;
        }
    }
    const double rel = sqrt(e2 / (r2 > 0 ? r2 : 1)), bound = D >= 16 ? 2e-2 : D >= 3 ? 4e-2 : 8e-2;
    TU_CHECK(rel <= bound, "e2e D=%lld Skv=%lld rows=%lld kv=%s q=%s: relative L2 %.3g > %g", (long long)D,
             (long long)Skv, (long long)rows, dt_name(kvt), dt_name(qt), rel, bound);
    free(sc);
    qmm_aligned_free(ws);
    qmm_aligned_free(Q);
    free(P);
    free(S);
    free(O);
    free(sq);
    kase_free(&K);
}

static int64_t rand_skv(void) {
    const int w = (int)tu_rand_int(0, 3);
    return w == 0 ? 1 : w == 1 ? 2 * tu_rand_int(0, 16) + 1 : w == 2 ? 32 * tu_rand_int(1, 4) + 2 * tu_rand_int(0, 15) + 1
                                                                      : 32 * tu_rand_int(1, 3);
}

int main(int argc, char **argv) {
    tu_init(argc, argv, "test_avx_vnni_attn");
    if (!(qmm_cpu_features() & QMM_CPU_AVX_VNNI)) {
        tu_skip("avx_vnni attention ukernels", "this CPU lacks AVX-VNNI");
        tu_finish();
        return 77;
    }
    if (!U->qk) {
        tu_skip("avx_vnni attention ukernels", "not built (the compiler lacks -mavxvnni)");
        tu_finish();
        return 77;
    }
    const char *quick = getenv("QMM_TEST_QUICK");
    const int reps = quick && *quick && *quick != '0' ? 1 : 3;
    const int nD = (int)(sizeof g_D / sizeof g_D[0]);
    for (int rep = 0; rep < reps; rep++)
        for (int di = 0; di < nD; di++)
            for (int ti = 0; ti < 3; ti++) {
                const int64_t D = g_D[di];
                const qmm_dtype kvt = g_dt[ti], qt = g_dt[tu_rand_int(0, 2)];
                for (int rows = 1; rows <= U->mr; rows++) {
                    qk_case(D, rand_skv(), rows, kvt, qt, 0);
                    pv_case(D, rand_skv(), rows, kvt, 0);
                }
                for (int h = 1; h <= 3; h++) {
                    qk_case(D, rand_skv(), (int)tu_rand_int(1, U->mr), kvt, qt, h);
                    pv_case(D, rand_skv(), (int)tu_rand_int(1, U->mr), kvt, h);
                }
                /* at least 128 outputs: the relative L2 of a few near-zero averages (D = 1, one
                 * row) measures their absolute error against almost nothing */
                const int64_t rows = tu_rand_int(1, 2 * U->mr + 1), least = (128 + D - 1) / D;
                e2e_case(D, rand_skv() + 16 * tu_rand_int(0, 8), rows > least ? rows : least, kvt, qt);
            }
    return tu_finish();
}
