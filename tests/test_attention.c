/*
 * test_attention.c — qmm_attention (SPEC §10): every engine that offers attention, asked for by
 * name, against the reference (fp64 sums, no tiling) on randomized calls — B, H, Hkv (GQA), S and
 * Skv from 1 to odd sizes past the key block, D from 1 to 256, q/kv/out in f32, f16 and bf16,
 * the [B, H, S, D] and [B, S, H·D] layouts and padded token strides, no mask / bool / additive
 * f32 or bf16 masks broadcast over batch, heads and queries (stride 0), strided keys, fully
 * masked rows (exactly 0), scale given or default.
 *
 * Bound per element, from the operations (max|v| = the largest |v| of the call; A = the largest
 * scale·Σ_d |q_d·k_d| over the call's (query, key) pairs; 2^-24 = f32's unit roundoff u):
 *   f32 operands:  |out − ref| <= max|v| · (2A · (D + 2)·2u + (Skv + 8)·2u) + 1 ulp of out's dtype
 *   bf16 operands: the same plus max|v| · (2A · 2^-8 + 2^-7): q and k rounded to bf16 move each
 *                  score by at most A·2^-8, p and v rounded move out by at most 2^-8·max|v|.
 *   mode int8 (avx512_vnni): the f32 part plus max|v| · (exp(2ε) − 1), ε the largest score error
 *                  the quantization allows (int8_score_bound): scores off by ε move out by at most that.
 * Each engine's worst |err| / bound is printed. Also: the bits do not depend on the thread
 * count; the plan (int8 engines offer attention in mode int8 only, mode f32 refused by bf16
 * engines, the reference only by name, mode int8 without an int8 engine a counted fallback); counters; every bad argument gets its status and names itself.
 * amx_bf16's attention runs in the tile emulator (its _emu copy, tests/amx_emu.cmake) on every
 * second call, zero tile faults, no configuration left, within the bf16 bound; the AVX-512 and
 * AVX-VNNI engines' files compiled on SIMDe (tests/simde.cmake) run every second call too, and
 * every hostile-input check, on any CPU.
 * Hostile input (issue 34), on every engine, the reference and the emulated amx_bf16: k and v
 * broadcast to 2^53 .. INT64_MAX keys refused naming Skv (huge_kv); NaN scores give NaN rows,
 * bool-masked NaN keys are ignored, fully masked rows stay 0 (nan_rows); ±Inf / NaN in a masked
 * key, keys near 1e37 and values near 1e-37 leave every row within the bound (hostile_keys); keys + 200 and + 1000
 * cost the bf16 and int8 engines at most 2× their error without the offset (key_offset); keys a
 * mask excludes from every row move no output bit, whatever their k and v (masked_keys).
 */
#include "testutil.h"

#include "attention.h"
#include "dispatch.h"
#include "numerics.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int64_t B, H, Hkv, S, Skv, D;
    qmm_dtype qt, kvt, ot, mt;
    int lq, lkv, lo;       /* layout: 0 [B,H,S,D], 1 [B,S,H·D], 2 [B,H,S,D] with padded tokens */
    int mask;              /* 0 none, 1 bool, 2 additive */
    int mb, mh, mq;        /* the mask's batch / head / query dims broadcast */
    int mk;                /* key stride of the mask: 1 or 3 */
    int masked_rows;       /* some query rows fully masked */
    float scale;
} acase;

typedef struct {
    void *q, *k, *v, *mask;
    qmm_attention_args a;
} abuf;

/* Targets past the engine ids: copies of engines that dispatch does not know, their descriptors
 * run through qmm_attention_run — the emulated amx_bf16 (tests/amx_emu.cmake) and the AVX-512 and
 * AVX-VNNI attention files on SIMDe (tests/simde.cmake); each under the rules and bounds of the
 * engine it copies (as_engine) */
enum { T_AMX_BF16_EMU = QMM_ENGINE_MAX, T_SIMDE_F32, T_SIMDE_BF16, T_SIMDE_VNNI, T_SIMDE_AVX_VNNI, T_END };
static const struct { const char *name; qmm_engine_id as; } g_copy[T_END - QMM_ENGINE_MAX] = {
    {"amx_bf16 (emulated)", QMM_ENGINE_AMX_BF16},   {"avx512_f32 (SIMDe)", QMM_ENGINE_AVX512_F32},
    {"avx512_bf16 (SIMDe)", QMM_ENGINE_AVX512_BF16}, {"avx512_vnni (SIMDe)", QMM_ENGINE_AVX512_VNNI},
    {"avx_vnni (SIMDe)", QMM_ENGINE_AVX_VNNI}};
#ifdef QMM_TEST_SIMDE
extern const qmm_attn_ukernels qmm_avx512_f32_attn_simde, qmm_avx512_bf16_attn_simde, qmm_avx512_vnni_attn_simde,
    qmm_avx_vnni_attn_simde;
#endif
/* the engine whose rules and bounds target e follows */
static qmm_engine_id as_engine(int e) { return e >= QMM_ENGINE_MAX ? g_copy[e - QMM_ENGINE_MAX].as : (qmm_engine_id)e; }

/* the engines of mode int8 (int8 QKᵀ and P·V; they refuse the other modes) */
static int int8_engine(int e) {
    e = (int)as_engine(e);
    return e == QMM_ENGINE_AVX512_VNNI || e == QMM_ENGINE_AVX_VNNI || e == QMM_ENGINE_AMX_INT8;
}

static void strides_of(int layout, int64_t B, int64_t H, int64_t S, int64_t D, int64_t s[3], int64_t *elems) {
    (void)B;
    if (layout == 1) { s[0] = S * H * D; s[1] = D; s[2] = H * D; }
    else {
        const int64_t ts = layout == 2 ? D + 5 : D;
        s[0] = H * S * ts; s[1] = S * ts; s[2] = ts;
    }
    *elems = B * s[0];
}

static void build(const acase *t, abuf *b) {
    qmm_attention_args a = qmm_attention_args_default();
    a.B = t->B; a.H = t->H; a.Hkv = t->Hkv; a.S = t->S; a.Skv = t->Skv; a.D = t->D;
    int64_t nq, nk, nv, no;
    strides_of(t->lq, t->B, t->H, t->S, t->D, a.q_stride, &nq);
    strides_of(t->lkv, t->B, t->Hkv, t->Skv, t->D, a.k_stride, &nk);
    strides_of(t->lkv == 1 ? 2 : t->lkv, t->B, t->Hkv, t->Skv, t->D, a.v_stride, &nv);
    strides_of(t->lo, t->B, t->H, t->S, t->D, a.out_stride, &no);
    a.q_dtype = t->qt; a.kv_dtype = t->kvt; a.out_dtype = t->ot;
    b->q = calloc((size_t)nq, 4); b->k = calloc((size_t)nk, 4); b->v = calloc((size_t)nv, 4);
    tu_fill_float(b->q, t->qt, nq, 1.0f);
    tu_fill_float(b->k, t->kvt, nk, 1.0f);
    tu_fill_float(b->v, t->kvt, nv, 1.0f);
    a.q = b->q; a.k = b->k; a.v = b->v;
    a.scale = t->scale;
    b->mask = NULL;
    if (t->mask) {
        const int64_t MB = t->mb ? 1 : t->B, MH = t->mh ? 1 : t->H, MQ = t->mq ? 1 : t->S, MK = t->Skv * t->mk;
        const int64_t n = MB * MH * MQ * MK;
        a.mask_dtype = t->mt;
        a.mask_stride[3] = t->mk;
        a.mask_stride[2] = t->mq ? 0 : MK;
        a.mask_stride[1] = t->mh ? 0 : MQ * MK;
        a.mask_stride[0] = t->mb ? 0 : MH * MQ * MK;
        b->mask = calloc((size_t)n, 4);
        for (int64_t i = 0; i < n; i++) {
            const int64_t row = i / MK;
            const int dead = t->masked_rows && row % 3 == 1;
            if (t->mt == QMM_U8) ((uint8_t *)b->mask)[i] = !dead && tu_rand_int(0, 4) != 0;
            else {
                float x = dead || tu_rand_int(0, 6) == 0 ? -INFINITY : tu_rand_normal();
                tu_store_bits(b->mask, t->mt, i, 0);
                if (t->mt == QMM_F32) ((float *)b->mask)[i] = x;
                else { uint32_t u; memcpy(&u, &x, 4); ((uint16_t *)b->mask)[i] = (uint16_t)(u >> 16); }
            }
        }
        a.mask = b->mask;
    }
    a.out = calloc((size_t)no, 4);
    b->a = a;
}

static void release(abuf *b) {
    free(b->q); free(b->k); free(b->v); free(b->mask); free(b->a.out);
}

static int64_t out_index(const qmm_attention_args *a, int64_t bb, int64_t h, int64_t s) {
    return bb * a->out_stride[0] + h * a->out_stride[1] + s * a->out_stride[2];
}

static double g_worst[T_END]; /* per target: engine id, or a copy's (T_AMX_BF16_EMU ..) */

/* Mode int8's rotation (avx512_vnni_attn.c): x[0..D) padded with zeros to Dq = D rounded up to
 * 64, then qmm_rotate_f32 (ConvRot's Hadamard, numerics.h) per group of 64; x holds
 * QMM_ATTN_MAX_D values; returns Dq. */
static int64_t int8_rotate(double *x, int64_t D) {
    const int64_t Dq = (D + 63) / 64 * 64;
    float f[QMM_ATTN_MAX_D];
    for (int64_t d = 0; d < Dq; d++) f[d] = d < D ? (float)x[d] : 0.0f;
    qmm_rotate_f32(f, Dq, 64);
    for (int64_t d = 0; d < Dq; d++) x[d] = f[d];
    return Dq;
}

/* Key j of kv head hk of batch bb is attended by some query row of the head's group (no mask:
 * every key), read from the mask one row at a time (the engines' key shift and V scales read
 * these keys only, SPEC §10) */
static int attended(const qmm_attention_args *a, int64_t bb, int64_t hk, int64_t j) {
    if (!a->mask) return 1;
    const int64_t g = a->H / a->Hkv;
    for (int64_t h = hk * g; h < (hk + 1) * g; h++)
        for (int64_t s = 0; s < a->S; s++) {
            const int64_t mi = bb * a->mask_stride[0] + h * a->mask_stride[1] + s * a->mask_stride[2] + j * a->mask_stride[3];
            if (a->mask_dtype == QMM_U8 ? ((const uint8_t *)a->mask)[mi] != 0 : tu_load(a->mask, a->mask_dtype, mi) != -INFINITY)
                return 1;
        }
    return 0;
}

/* Mode int8's score error bound (avx512_vnni_attn.c's quantization, SPEC §10): the largest
 * |scale| · (sq/2 · Σ|R k'| + sk/2 · Σ|R q| + D · sq/2 · sk/2) over the call's (query, key)
 * pairs, k' = k − the kv head's mean key (over the keys some row attends), R the rotation, sq = max|R q| / 127, sk = max|R k'| /
 * 127 (rounding to nearest: each code is off by at most half a step; the relative slacks cover
 * the f32 mean and rotation). */
static double int8_score_bound(const qmm_attention_args *a, float scale) {
    double eps = 0;
    const int64_t D = a->D;
    double *mean = calloc((size_t)D, sizeof(double)), *x = malloc(QMM_ATTN_MAX_D * sizeof(double));
    double *ka = malloc((size_t)a->Skv * sizeof(double)), *ks = malloc((size_t)a->Skv * sizeof(double));
    for (int64_t bb = 0; bb < a->B; bb++)
        for (int64_t hk = 0; hk < a->Hkv; hk++) {
            const int64_t k0 = bb * a->k_stride[0] + hk * a->k_stride[1];
            int64_t n = 0;
            for (int64_t d = 0; d < D; d++) mean[d] = 0;
            for (int64_t j = 0; j < a->Skv; j++)
                if (attended(a, bb, hk, j)) {
                    for (int64_t d = 0; d < D; d++) mean[d] += tu_load(a->k, a->kv_dtype, k0 + j * a->k_stride[2] + d);
                    n++;
                }
            for (int64_t d = 0; d < D; d++) mean[d] = n ? mean[d] / (double)n : 0.0;
            for (int64_t j = 0; j < a->Skv; j++) {
                for (int64_t d = 0; d < D; d++) x[d] = tu_load(a->k, a->kv_dtype, k0 + j * a->k_stride[2] + d) - mean[d];
                const int64_t Dq = int8_rotate(x, D);
                ka[j] = ks[j] = 0;
                for (int64_t d = 0; d < Dq; d++) {
                    ks[j] += fabs(x[d]);
                    if (fabs(x[d]) > ka[j]) ka[j] = fabs(x[d]);
                }
            }
            for (int64_t h = hk * (a->H / a->Hkv); h < (hk + 1) * (a->H / a->Hkv); h++)
                for (int64_t s = 0; s < a->S; s++) {
                    double qa = 0, qs = 0;
                    for (int64_t d = 0; d < D; d++)
                        x[d] = tu_load(a->q, a->q_dtype, bb * a->q_stride[0] + h * a->q_stride[1] + s * a->q_stride[2] + d);
                    const int64_t Dq = int8_rotate(x, D);
                    for (int64_t d = 0; d < Dq; d++) {
                        qs += fabs(x[d]);
                        if (fabs(x[d]) > qa) qa = fabs(x[d]);
                    }
                    for (int64_t j = 0; j < a->Skv; j++) {
                        const double sq = qa / 127 * (1 + 1e-6), sk = ka[j] / 127 * (1 + 1e-6) + 1e-6 * ka[j];
                        const double e = fabs(scale) * (sq / 2 * (ks[j] + 1e-6 * (double)Dq * ka[j]) + sk / 2 * qs +
                                                        (double)Dq * sq / 2 * sk / 2 + 1e-5 * qs * ka[j]);
                        if (e > eps) eps = e;
                    }
                }
        }
    free(mean); free(x); free(ka); free(ks);
    return eps;
}

/* Mode int8's P·V term of query row (bb, h, s), in units of max|v| (avx512_vnni_attn.c: p in u8
 * per row and block of 64 keys at the scale pm/255, pm the block's largest p, by attention.h's U:
 * its polynomial within 7.6e-5 relative; v in int8 per block and channel; l the sum of the u8
 * codes): with p the exact probabilities (scores off by at most eps, so each p off by a factor
 * e^{±2eps}), a code of p is off by at most (min(p, pm/510) + 7.6e-5·p)·e^{2eps}, one of v by
 * max|v|/254. out' = Σ p'v'/Σ p' moves from Σ p v'/Σ p by Σ_j (p'_j − p_j)(v'_j − out')/Σ p
 * (|v' − out'| <= 2·max|v|·(1 + 1/254)): out moves by at most
 * 2·(1 + 1/254)·e^{4eps}·Σ_j (min(p_j, pm_b/510) + 7.6e-5·p_j) / Σ_j p_j + (1 + that)/254. */
static double int8_pv_bound(const qmm_attention_args *a, float scale, double eps, int64_t bb, int64_t h, int64_t s) {
    const int64_t hk = h / (a->H / a->Hkv), Skv = a->Skv;
    double *sc = malloc((size_t)Skv * sizeof(double)), m = -INFINITY;
    for (int64_t j = 0; j < Skv; j++) {
        double acc = 0;
        for (int64_t d = 0; d < a->D; d++)
            acc += (double)tu_load(a->q, a->q_dtype, bb * a->q_stride[0] + h * a->q_stride[1] + s * a->q_stride[2] + d) *
                   tu_load(a->k, a->kv_dtype, bb * a->k_stride[0] + hk * a->k_stride[1] + j * a->k_stride[2] + d);
        double x = acc * scale;
        if (a->mask) {
            const int64_t mi = bb * a->mask_stride[0] + h * a->mask_stride[1] + s * a->mask_stride[2] + j * a->mask_stride[3];
            if (a->mask_dtype == QMM_U8) x = ((const uint8_t *)a->mask)[mi] ? x : -INFINITY;
            else x += tu_load(a->mask, a->mask_dtype, mi);
        }
        sc[j] = x;
        if (x > m) m = x;
    }
    double l = 0, err = 0;
    if (m > -INFINITY) {
        for (int64_t j = 0; j < Skv; j++) l += (sc[j] = exp(sc[j] - m));
        for (int64_t j0 = 0; j0 < Skv; j0 += 64) {
            double pm = 0;
            for (int64_t j = j0; j < j0 + 64 && j < Skv; j++) pm = sc[j] > pm ? sc[j] : pm;
            for (int64_t j = j0; j < j0 + 64 && j < Skv; j++) err += fmin(sc[j], pm / 510 * (1 + 1e-5));
        }
    }
    free(sc);
    const double pr = l > 0 ? 2 * (1 + 1.0 / 254) * exp(4 * eps) * (err + 7.6e-5 * l) / l : 0;
    return pr + (1 + pr) / 254 * (1 + 1e-5) + 1e-5;
}

static int bf16_operands(qmm_engine_id e) { return e == QMM_ENGINE_AVX512_BF16 || e == QMM_ENGINE_AMX_BF16; }

/* engine e's output (its worst ratio kept in g_worst[slot]) against ref's on call t; returns 1
 * if every element is within the bound */
static int compare(qmm_engine_id e, int slot, const acase *t, const abuf *b, const float *ref) {
    const qmm_attention_args *a = &b->a;
    const float scale = a->scale != 0.0f ? a->scale : (float)(1.0 / sqrt((double)a->D));
    double vmax = 0, A = 0;
    for (int64_t bb = 0; bb < a->B; bb++)
        for (int64_t hk = 0; hk < a->Hkv; hk++)
            for (int64_t j = 0; j < a->Skv; j++)
                for (int64_t d = 0; d < a->D; d++) {
                    double v = fabs(tu_load(a->v, a->kv_dtype, bb * a->v_stride[0] + hk * a->v_stride[1] + j * a->v_stride[2] + d));
                    if (v > vmax) vmax = v;
                }
    for (int64_t bb = 0; bb < a->B; bb++)
        for (int64_t h = 0; h < a->H; h++)
            for (int64_t s = 0; s < a->S; s++)
                for (int64_t j = 0; j < a->Skv; j++) {
                    const int64_t hk = h / (a->H / a->Hkv);
                    double acc = 0;
                    for (int64_t d = 0; d < a->D; d++)
                        acc += fabs((double)tu_load(a->q, a->q_dtype, bb * a->q_stride[0] + h * a->q_stride[1] + s * a->q_stride[2] + d) *
                                    tu_load(a->k, a->kv_dtype, bb * a->k_stride[0] + hk * a->k_stride[1] + j * a->k_stride[2] + d));
                    acc *= fabs(scale);
                    if (acc > A) A = acc;
                }
    const double u = ldexp(1.0, -24);
    double base = vmax * (2 * A * (double)(a->D + 2) * 2 * u + (double)(a->Skv + 8) * 2 * u);
    const int int8 = a->mode == QMM_ATTN_INT8 && int8_engine(e);
    const double eps = int8 ? int8_score_bound(a, scale) : 0;
    if (int8) base += vmax * (exp(2 * eps) - 1);
    else if (bf16_operands(e)) base += vmax * (2 * A * ldexp(1.0, -8) + ldexp(1.0, -7));
    int ok = 1;
    for (int64_t bb = 0; bb < a->B && ok; bb++)
        for (int64_t h = 0; h < a->H && ok; h++)
            for (int64_t s = 0; s < a->S && ok; s++) {
                const double row = int8 ? vmax * int8_pv_bound(a, scale, eps, bb, h, s) : 0;
                for (int64_t d = 0; d < a->D; d++) {
                    const double r = ref[((bb * a->H + h) * a->S + s) * a->D + d];
                    const double y = tu_load(a->out, a->out_dtype, out_index(a, bb, h, s) + d);
                    const double tol = base + row + tu_ulp(r, a->out_dtype);
                    const double err = fabs(y - r);
                    if (tol > 0 && err / tol > g_worst[slot]) g_worst[slot] = err / tol;
                    if (!(err <= tol)) {
                        TU_CHECK(0, "%s: B=%lld H=%lld Hkv=%lld S=%lld Skv=%lld D=%lld q %s kv %s out %s layouts %d/%d/%d "
                                    "mask %d (%s, bcast %d%d%d, kstride %d, dead rows %d): out[%lld][%lld][%lld][%lld] = %g, "
                                    "ref %g, |err| %g > %g",
                                 qmm_engine_name(e), (long long)a->B, (long long)a->H, (long long)a->Hkv, (long long)a->S,
                                 (long long)a->Skv, (long long)a->D, qmm_dtype_name(a->q_dtype), qmm_dtype_name(a->kv_dtype),
                                 qmm_dtype_name(a->out_dtype), t->lq, t->lkv, t->lo, t->mask, qmm_dtype_name(t->mt), t->mb,
                                 t->mh, t->mq, t->mk, t->masked_rows, (long long)bb, (long long)h, (long long)s, (long long)d,
                                 y, r, err, tol);
                        ok = 0;
                        break;
                    }
                    if (r == 0.0 && t->masked_rows && y != 0.0) { TU_CHECK(0, "%s: a fully masked row is not 0", qmm_engine_name(e)); ok = 0; break; }
                }
            }
    return ok;
}

static const int64_t k_D[] = {1, 2, 8, 16, 17, 31, 40, 64, 72, 80, 96, 127, 128, 160, 256};
static const qmm_dtype k_float[] = {QMM_F32, QMM_F16, QMM_BF16};

static acase random_case(int quick) {
    acase t;
    memset(&t, 0, sizeof t);
    t.B = tu_rand_int(1, 2);
    t.Hkv = tu_rand_int(1, 3);
    t.H = t.Hkv * tu_rand_int(1, 3);
    const int64_t smax = quick ? 70 : 200;
    t.S = tu_rand_int(0, 5) == 0 ? 1 : tu_rand_int(1, smax);
    t.Skv = tu_rand_int(0, 5) == 0 ? tu_rand_int(1, 3) : tu_rand_int(1, smax + 60);
    t.D = k_D[tu_rand_int(0, (int64_t)(sizeof k_D / sizeof k_D[0]) - 1)];
    t.qt = k_float[tu_rand_int(0, 2)];
    t.kvt = k_float[tu_rand_int(0, 2)];
    t.ot = k_float[tu_rand_int(0, 2)];
    t.lq = (int)tu_rand_int(0, 2); t.lkv = (int)tu_rand_int(0, 2); t.lo = (int)tu_rand_int(0, 2);
    t.mask = (int)tu_rand_int(0, 2);
    t.mt = t.mask == 1 ? QMM_U8 : tu_rand_int(0, 1) ? QMM_F32 : QMM_BF16;
    t.mb = (int)tu_rand_int(0, 1); t.mh = (int)tu_rand_int(0, 1); t.mq = (int)tu_rand_int(0, 3) == 0;
    t.mk = tu_rand_int(0, 3) == 0 ? 3 : 1;
    t.masked_rows = t.mask && !t.mq && tu_rand_int(0, 2) == 0;
    t.scale = tu_rand_int(0, 1) ? 0.0f : (float)tu_rand_normal() * 0.3f;
    return t;
}

static qmm_engine_id g_attn[QMM_ENGINE_COUNT];
static int g_n_attn;

#ifdef QMM_TEST_AMX_EMU
/* amx_bf16's attention compiled with -DQMM_AMX_EMULATE (tests/amx_emu.cmake): every tile
 * instruction runs in the emulator of amx_emu.c; it is not in the table, so it is called here
 * with the call qmm_attention would validate */
#include "../src/engines/x86_amx/amx_emu.h"
extern const qmm_engine_ops qmm_amx_bf16_ops_emu;
extern const qmm_engine_ops qmm_amx_int8_ops_emu;
static long g_emu_runs, g_emu_int8_runs;
#endif

/* the call qmm_attention would validate, for a descriptor run without dispatch */
static void to_call(const qmm_attention_args *a, qmm_attn_call *c) {
    memset(c, 0, sizeof *c);
    c->B = a->B; c->H = a->H; c->Hkv = a->Hkv; c->S = a->S; c->Skv = a->Skv; c->D = a->D;
    c->q = a->q; c->q_dtype = a->q_dtype; c->k = a->k; c->v = a->v; c->kv_dtype = a->kv_dtype;
    c->out = a->out; c->out_dtype = a->out_dtype;
    memcpy(c->qs, a->q_stride, sizeof c->qs); memcpy(c->ks, a->k_stride, sizeof c->ks);
    memcpy(c->vs, a->v_stride, sizeof c->vs); memcpy(c->os, a->out_stride, sizeof c->os);
    c->scale = a->scale != 0.0f ? a->scale : (float)(1.0 / sqrt((double)a->D));
    c->mask = a->mask; c->mask_dtype = a->mask_dtype; memcpy(c->ms, a->mask_stride, sizeof c->ms);
    c->mode = a->mode;
    c->by_name = 1;
}

static long g_simde_runs;
static const char *target_name(int e);
static qmm_status run_target(qmm_context *ctx, int e, qmm_attention_args a);

static void sweep(qmm_context *ctx, qmm_context *ctx1, int cases, int quick) {
    for (int n = 0; n < cases; n++) {
        acase t = random_case(quick);
        abuf b;
        build(&t, &b);
        /* the reference into f32 [B, H, S, D] */
        const int64_t elems = t.B * t.H * t.S * t.D;
        float *ref = calloc((size_t)elems, 4);
        qmm_attention_args ra = b.a;
        ra.out = ref; ra.out_dtype = QMM_F32;
        ra.out_stride[0] = t.H * t.S * t.D; ra.out_stride[1] = t.S * t.D; ra.out_stride[2] = t.D;
        ra.engine = QMM_ENGINE_REF;
        TU_CHECK_OK(qmm_attention(ctx, &ra));
        for (int i = 0; i < g_n_attn; i++) {
            b.a.engine = g_attn[i];
            b.a.mode = int8_engine(g_attn[i]) ? QMM_ATTN_INT8 : QMM_ATTN_BEST;
            qmm_status st = qmm_attention(ctx, &b.a);
            TU_CHECK(st == QMM_OK, "%s: %s", qmm_engine_name(g_attn[i]), qmm_last_error());
            if (st != QMM_OK || !compare(g_attn[i], g_attn[i], &t, &b, ref)) continue;
            if (n % 4 == 0) { /* one thread: the same bits */
                int64_t no;
                int64_t s3[3];
                strides_of(t.lo, t.B, t.H, t.S, t.D, s3, &no);
                const size_t bytes = (size_t)no * qmm_dtype_size(t.ot);
                void *first = malloc(bytes);
                memcpy(first, b.a.out, bytes);
                TU_CHECK_OK(qmm_attention(ctx1, &b.a));
                TU_CHECK(memcmp(first, b.a.out, bytes) == 0, "%s: 1 thread differs from %d threads", qmm_engine_name(g_attn[i]),
                         qmm_context_threads(ctx));
                free(first);
            }
        }
#ifdef QMM_TEST_SIMDE
        for (int e = T_SIMDE_F32; e < T_END; e++) { /* the SIMDe copies, each on every second call */
            if ((n + e) % 2) continue;
            b.a.mode = int8_engine(e) ? QMM_ATTN_INT8 : QMM_ATTN_BEST;
            const qmm_status st = run_target(ctx, e, b.a);
            TU_CHECK(st == QMM_OK, "%s: %s", target_name(e), qmm_last_error());
            if (st == QMM_OK) compare(as_engine(e), e, &t, &b, ref);
            g_simde_runs++;
        }
#endif
#ifdef QMM_TEST_AMX_EMU
        if (n % (quick ? 3 : 2) == 0 && qmm_engine_available(QMM_ENGINE_AVX512_F32, NULL, 0)) {
            qmm_attn_call call;
            to_call(&b.a, &call);
            const long f0 = qmm_amx_emu_faults();
            TU_CHECK_OK(qmm_attention_run(ctx, &call, qmm_amx_bf16_ops_emu.op[QMM_OP_ATTENTION].desc));
            TU_CHECK(qmm_amx_emu_faults() == f0 && qmm_amx_emu_live_configs() == 0,
                     "amx_bf16 (emulated): %ld tile faults (%s), %ld configurations left", qmm_amx_emu_faults() - f0,
                     qmm_amx_emu_first_fault(), qmm_amx_emu_live_configs());
            compare(QMM_ENGINE_AMX_BF16, T_AMX_BF16_EMU, &t, &b, ref);
            g_emu_runs++;
        }
        if (n % (quick ? 3 : 2) == 1 && qmm_engine_available(QMM_ENGINE_AVX512_VNNI, NULL, 0)) {
            /* the emulated amx_int8 in mode int8: avx512_vnni's outputs, bit for bit */
            int64_t no, s3[3];
            strides_of(t.lo, t.B, t.H, t.S, t.D, s3, &no);
            const size_t bytes = (size_t)no * qmm_dtype_size(t.ot);
            void *want = malloc(bytes);
            b.a.engine = QMM_ENGINE_AVX512_VNNI;
            b.a.mode = QMM_ATTN_INT8;
            memset(b.a.out, 0x5a, bytes); /* the same bytes between the rows of a padded layout */
            TU_CHECK_OK(qmm_attention(ctx, &b.a));
            memcpy(want, b.a.out, bytes);
            memset(b.a.out, 0x5a, bytes);
            qmm_attn_call call;
            to_call(&b.a, &call);
            const long f0 = qmm_amx_emu_faults();
            TU_CHECK_OK(qmm_attention_run(ctx, &call, qmm_amx_int8_ops_emu.op[QMM_OP_ATTENTION].desc));
            TU_CHECK(qmm_amx_emu_faults() == f0 && qmm_amx_emu_live_configs() == 0,
                     "amx_int8 (emulated): %ld tile faults (%s), %ld configurations left", qmm_amx_emu_faults() - f0,
                     qmm_amx_emu_first_fault(), qmm_amx_emu_live_configs());
            TU_CHECK(memcmp(want, b.a.out, bytes) == 0, "amx_int8 (emulated), mode int8: not avx512_vnni's bits (B=%lld H=%lld S=%lld Skv=%lld D=%lld mask %d q/kv/out %s/%s/%s)",
                     (long long)t.B, (long long)t.H, (long long)t.S, (long long)t.Skv, (long long)t.D, t.mask,
                     qmm_dtype_name(t.qt), qmm_dtype_name(t.kvt), qmm_dtype_name(t.ot));
            g_emu_int8_runs++;
            free(want);
        }
#endif
        free(ref);
        release(&b);
    }
}

/* ---------------------------------------------------------------- hostile input (issue 34) */

/* the engines the hostile-input checks run on: every attention engine available (mode int8 on
 * avx512_vnni), the reference, the emulated amx_bf16 in the emulator build and the SIMDe copies in
 * the SIMDe build (NT_MAX entries at most) */
enum { NT_MAX = QMM_ENGINE_COUNT + T_END - QMM_ENGINE_MAX + 4 };
static int targets(int *t) {
    int n = 0;
    for (int i = 0; i < g_n_attn; i++) t[n++] = g_attn[i];
    t[n++] = QMM_ENGINE_REF;
#ifdef QMM_TEST_AMX_EMU
    if (qmm_engine_available(QMM_ENGINE_AVX512_F32, NULL, 0)) t[n++] = T_AMX_BF16_EMU; /* its conversions: AVX-512 */
#endif
#ifdef QMM_TEST_SIMDE
    for (int e = T_SIMDE_F32; e < T_END; e++) t[n++] = e;
#endif
    return n;
}

static const char *target_name(int e) { return e >= QMM_ENGINE_MAX ? g_copy[e - QMM_ENGINE_MAX].name : qmm_engine_name((qmm_engine_id)e); }

/* target e's descriptor where it runs without dispatch, else NULL */
static const void *copy_desc(int e) {
#ifdef QMM_TEST_AMX_EMU
    if (e == T_AMX_BF16_EMU) return qmm_amx_bf16_ops_emu.op[QMM_OP_ATTENTION].desc;
#endif
#ifdef QMM_TEST_SIMDE
    if (e == T_SIMDE_F32) return &qmm_avx512_f32_attn_simde;
    if (e == T_SIMDE_BF16) return &qmm_avx512_bf16_attn_simde;
    if (e == T_SIMDE_VNNI) return &qmm_avx512_vnni_attn_simde;
    if (e == T_SIMDE_AVX_VNNI) return &qmm_avx_vnni_attn_simde;
#endif
    (void)e;
    return NULL;
}

/* runs a on target e in e's mode (int8 on the int8 engines, else a->mode) */
static qmm_status run_target(qmm_context *ctx, int e, qmm_attention_args a) {
    if (int8_engine(e)) a.mode = QMM_ATTN_INT8;
    if (e >= QMM_ENGINE_MAX) {
        qmm_attn_call call;
        to_call(&a, &call);
        return qmm_attention_run(ctx, &call, copy_desc(e));
    }
    a.engine = (qmm_engine_id)e;
    return qmm_attention(ctx, &a);
}

/* k and v broadcast (stride 0) to Skv keys: legal tensors of D values whose packed head
 * overflows size_t (2^53 × 256, 2^57 × 16, INT64_MAX) or passes 2^40 bytes; every engine, the
 * reference and dispatch refuse them naming Skv, before allocating or packing anything */
static void huge_kv(qmm_context *ctx) {
    static const struct { int64_t Skv, D; int mask; } cases[] = {
        {(int64_t)1 << 53, 256, 0}, {(int64_t)1 << 54, 256, 1}, {(int64_t)1 << 57, 16, 0}, {(int64_t)1 << 40, 8, 1},
        {INT64_MAX, 1, 0}, {INT64_MAX - 62, 64, 1}, {INT64_MAX / 256, 256, 0}};
    float *q = calloc(4 * 256, 4), *kv = calloc(256, 4), *out = calloc(4 * 256, 4);
    const uint8_t attend = 1;
    int t[NT_MAX];
    const int nt = targets(t);
    t[nt] = QMM_ENGINE_AUTO;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int m = 0; m < 2; m++)
            for (int e = 0; e <= nt; e++) {
                qmm_attention_args a = qmm_attention_args_default();
                a.B = 1; a.H = 2; a.Hkv = 1; a.S = 2; a.Skv = cases[i].Skv; a.D = cases[i].D;
                a.q = q; a.k = kv; a.v = kv; a.out = out;
                a.q_stride[2] = a.D; a.q_stride[1] = 2 * a.D; a.q_stride[0] = 4 * a.D;
                memcpy(a.out_stride, a.q_stride, sizeof a.q_stride);
                if (cases[i].mask) a.mask = &attend; /* U8, every stride 0 */
                a.mode = m ? QMM_ATTN_F32 : QMM_ATTN_BEST;
                if (m && (bf16_operands(as_engine(t[e])) || int8_engine(t[e]))) continue;
                const qmm_status st = run_target(ctx, t[e], a);
                TU_CHECK(st == QMM_ERR_UNSUPPORTED && strstr(qmm_last_error(), "Skv"),
                         "%s, mode %d: Skv=%lld D=%lld broadcast keys: want QMM_ERR_UNSUPPORTED naming Skv, got %s: %s",
                         t[e] == QMM_ENGINE_AUTO ? "dispatch" : target_name(t[e]), (int)a.mode, (long long)a.Skv,
                         (long long)a.D, qmm_status_name(st), qmm_last_error());
            }
    free(q); free(kv); free(out);
}

/* a small f32 call [1, 2, S=10, D=40] against Skv = 70 keys (two key blocks), N(0, 1) values */
enum { HS = 10, HSKV = 70, HD = 40 };
static void hostile_call(qmm_attention_args *a, float *q, float *k, float *v, float *out) {
    tu_fill_float(q, QMM_F32, 2 * HS * HD, 1.0f);
    tu_fill_float(k, QMM_F32, HSKV * HD, 1.0f);
    tu_fill_float(v, QMM_F32, HSKV * HD, 1.0f);
    *a = qmm_attention_args_default();
    a->B = 1; a->H = 2; a->Hkv = 1; a->S = HS; a->Skv = HSKV; a->D = HD;
    a->q = q; a->k = k; a->v = v; a->out = out;
    a->q_stride[2] = HD; a->q_stride[1] = HS * HD; a->q_stride[0] = 2 * HS * HD;
    memcpy(a->out_stride, a->q_stride, sizeof a->q_stride);
    a->k_stride[2] = a->v_stride[2] = HD; a->k_stride[1] = a->v_stride[1] = HSKV * HD;
    a->k_stride[0] = a->v_stride[0] = HSKV * HD;
}

/* NaN scores (SPEC §10): an unmasked NaN score makes its row NaN on every engine and the
 * reference; a key a bool mask excludes is ignored, NaN or not; an additive mask adds (NaN + x
 * and s + NaN are NaN); a row whose every score is -inf (bool-masked, NaN query or not) is 0.
 * Rows expected finite are within 0.1·max|v| of the reference's. */
static void nan_rows(qmm_context *ctx) {
    float q[2 * HS * HD], k[HSKV * HD], v[HSKV * HD], out[2 * HS * HD], ref[2 * HS * HD];
    uint8_t bmask[HS * HSKV];
    float amask[HS * HSKV];
    int t[NT_MAX];
    const int nt = targets(t);
    for (int cs = 0; cs < 4; cs++) {
        qmm_attention_args a;
        hostile_call(&a, q, k, v, out);
        char want[2][HS]; /* 'n' NaN, '0' zero, 'f' finite */
        memset(want, 'f', sizeof want);
        if (cs == 0) { /* a NaN in a query row */
            q[3 * HD + 7] = NAN;
            want[0][3] = 'n';
        } else if (cs == 1) { /* a NaN in an unmasked key: every row */
            k[65 * HD + 2] = NAN;
            memset(want, 'n', sizeof want);
        } else if (cs == 2) { /* bool mask (heads broadcast): the NaN key 65 attended by row 4 only; row 6 attends nothing */
            k[65 * HD + 2] = NAN;
            q[3 * HD + 7] = NAN;                /* head 0, row 3 */
            q[(HS + 6) * HD] = NAN;             /* head 1, row 6: every key masked */
            for (int s = 0; s < HS; s++)
                for (int j = 0; j < HSKV; j++) bmask[s * HSKV + j] = s != 6 && (j != 65 || s == 4) && (j % 7 != 3);
            a.mask = bmask; a.mask_dtype = QMM_U8;
            a.mask_stride[2] = HSKV; a.mask_stride[3] = 1;
            want[0][4] = want[1][4] = want[0][3] = 'n';
            want[0][6] = want[1][6] = '0';
        } else { /* additive mask: a NaN at (row 2, key 10); -inf on the NaN key 65 for row 5, -1e30 elsewhere */
            k[65 * HD + 2] = NAN;
            for (int s = 0; s < HS; s++)
                for (int j = 0; j < HSKV; j++) amask[s * HSKV + j] = j == 65 ? (s == 5 ? -INFINITY : -1e30f) : 0.25f * (float)(j % 3);
            amask[2 * HSKV + 10] = NAN;
            a.mask = amask; a.mask_dtype = QMM_F32;
            a.mask_stride[2] = HSKV; a.mask_stride[3] = 1;
            /* -1e30 + NaN is NaN too: key 65 is NaN in every row */
            memset(want, 'n', sizeof want);
        }
        qmm_attention_args ra = a;
        ra.out = ref; ra.engine = QMM_ENGINE_REF;
        TU_CHECK_OK(qmm_attention(ctx, &ra));
        double vmax = 0;
        for (int i = 0; i < HSKV * HD; i++) vmax = fmax(vmax, fabs(v[i]));
        for (int e = 0; e < nt; e++) {
            for (int i = 0; i < 2 * HS * HD; i++) out[i] = 12345.0f;
            const qmm_status st = run_target(ctx, t[e], a);
            TU_CHECK(st == QMM_OK, "%s: %s", target_name(t[e]), qmm_last_error());
            for (int h = 0; h < 2 && st == QMM_OK; h++)
                for (int s = 0; s < HS; s++)
                    for (int d = 0; d < HD; d++) {
                        const float y = out[(h * HS + s) * HD + d], r = ref[(h * HS + s) * HD + d];
                        const char w = want[h][s];
                        const int ok = w == 'n' ? isnan(y) : w == '0' ? y == 0.0f : isfinite(y) && fabs(y - r) <= 0.1 * vmax;
                        if (!ok) {
                            TU_CHECK(0, "%s: NaN case %d: out[0][%d][%d][%d] = %g (ref %g), want %s", target_name(t[e]), cs,
                                     h, s, d, y, r, w == 'n' ? "NaN" : w == '0' ? "0" : "finite, near ref");
                            d = HD; s = HS; h = 2;
                        }
                    }
        }
    }
}

/* Keys that once poisoned mode int8's key mean (issue 34): a +Inf or a NaN in a key every row's
 * bool mask excludes, finite keys near 1e37 (whose f32 sum overflows), and values near 1e-37
 * (mode int8's 127 / max|v| overflows f32 unless prescaled), keys near 1e37 with the scale 1e-37
 * (issue 47: mode int8's score took sk · the int32 sum first, past FLT_MAX). Every engine gives
 * finite rows within the sweep's bound of the reference on the same call with the excluded key
 * zeroed. */
static void hostile_keys(qmm_context *ctx) {
    float q[2 * HS * HD], k[HSKV * HD], kc[HSKV * HD], v[HSKV * HD], out[2 * HS * HD], ref[2 * HS * HD];
    uint8_t bmask[HS * HSKV];
    int t[NT_MAX];
    const int nt = targets(t);
    for (int cs = 0; cs < 5; cs++) {
        qmm_attention_args a;
        hostile_call(&a, q, k, v, out);
        if (cs == 4) { /* keys near 1e36–1e37, scale 1e-37: scores of a few units (sk · the int32 sum passes FLT_MAX) */
            for (int i = 0; i < HSKV * HD; i++) k[i] *= 3e36f;
            a.scale = 1e-37f;
        }
        if (cs < 2) {
            for (int i = 0; i < HS * HSKV; i++) bmask[i] = i % HSKV != 20;
            a.mask = bmask; a.mask_dtype = QMM_U8;
            a.mask_stride[2] = HSKV; a.mask_stride[3] = 1;
        } else if (cs == 2) {
            for (int i = 0; i < HSKV * HD; i++) k[i] = 1e37f + 1e35f * k[i];
            for (int i = 0; i < 2 * HS * HD; i++) q[i] *= 1e-35f;
        }
        if (cs == 3) /* values near 1e-37: 127 / max|v| passes FLT_MAX (mode int8 quantizes v) */
            for (int i = 0; i < HSKV * HD; i++) v[i] *= 1e-37f;
        memcpy(kc, k, sizeof k);
        if (cs < 2) {
            for (int d = 0; d < HD; d++) kc[20 * HD + d] = 0.0f;
            k[20 * HD + 3] = cs == 0 ? INFINITY : NAN;
        }
        acase c = {.B = 1, .H = 2, .Hkv = 1, .S = HS, .Skv = HSKV, .D = HD, .qt = QMM_F32, .kvt = QMM_F32, .ot = QMM_F32,
                   .mask = cs < 2, .mt = QMM_U8, .mh = 1, .mk = 1};
        abuf b = {.q = q, .k = kc, .v = v, .mask = bmask, .a = a};
        b.a.k = kc;
        qmm_attention_args ra = b.a;
        ra.out = ref; ra.engine = QMM_ENGINE_REF;
        TU_CHECK_OK(qmm_attention(ctx, &ra));
        for (int e = 0; e < nt; e++) {
            if (t[e] == QMM_ENGINE_REF) continue;
            const qmm_status st = run_target(ctx, t[e], a);
            TU_CHECK(st == QMM_OK, "%s: %s", target_name(t[e]), qmm_last_error());
            if (int8_engine(t[e])) b.a.mode = QMM_ATTN_INT8;
            else b.a.mode = QMM_ATTN_BEST;
            if (st == QMM_OK && !compare(as_engine(t[e]), t[e], &c, &b, ref))
                tu_note("  (hostile keys, case %d: %s)", cs, cs == 0 ? "+Inf in a masked key" : cs == 1 ? "NaN in a masked key" : cs == 2 ? "keys near 1e37" : cs == 3 ? "values near 1e-37" : "keys near 1e37, scale 1e-37");
        }
    }
}

/* Keys with a common offset (every key + c: the softmax does not change): the error against the
 * reference, max|out − ref| / max|v|, at offsets 0, 200 and 1000, on every engine in its mode
 * (mode best: bf16 operands on avx512_bf16 and amx_bf16) and on dispatch's mode best and mode
 * f32. The engines that round k (bf16, int8) subtract the finite keys' mean first, so an offset
 * may cost them at most 2× the error without it; every engine stays within the sweep's bound. */
static void key_offset(qmm_context *ctx) {
    enum { S = 64, SKV = 200, D = 64 };
    float *q = malloc(2 * S * D * 4), *k0 = malloc(SKV * D * 4), *k = malloc(SKV * D * 4), *v = malloc(SKV * D * 4),
          *out = malloc(2 * S * D * 4), *ref = malloc(2 * S * D * 4);
    tu_fill_float(q, QMM_F32, 2 * S * D, 1.0f);
    tu_fill_float(k0, QMM_F32, SKV * D, 1.0f);
    tu_fill_float(v, QMM_F32, SKV * D, 1.0f);
    double vmax = 0;
    for (int i = 0; i < SKV * D; i++) vmax = fmax(vmax, fabs(v[i]));
    int t[NT_MAX];
    int nt = targets(t);
    t[nt++] = -1; /* dispatch, mode best */
    t[nt++] = -2; /* dispatch, mode f32 */
    if (!qmm_engine_available(QMM_ENGINE_AVX512_BF16, NULL, 0)) tu_skip("avx512_bf16 (keys with an offset)", "unavailable here");
    static const float offs[3] = {0.0f, 200.0f, 1000.0f};
    for (int e = 0; e < nt; e++) {
        if (t[e] == QMM_ENGINE_REF) continue;
        double err[3];
        for (int o = 0; o < 3; o++) {
            for (int i = 0; i < SKV * D; i++) k[i] = k0[i] + offs[o];
            qmm_attention_args a = qmm_attention_args_default();
            a.B = 1; a.H = 2; a.Hkv = 1; a.S = S; a.Skv = SKV; a.D = D;
            a.q = q; a.k = k; a.v = v;
            a.q_stride[2] = D; a.q_stride[1] = S * D; a.q_stride[0] = 2 * S * D;
            memcpy(a.out_stride, a.q_stride, sizeof a.q_stride);
            a.k_stride[2] = a.v_stride[2] = D; a.k_stride[1] = a.v_stride[1] = a.k_stride[0] = a.v_stride[0] = SKV * D;
            qmm_attention_args ra = a;
            ra.out = ref; ra.engine = QMM_ENGINE_REF;
            TU_CHECK_OK(qmm_attention(ctx, &ra));
            a.out = out;
            qmm_status st;
            if (t[e] < 0) {
                a.mode = t[e] == -1 ? QMM_ATTN_BEST : QMM_ATTN_F32;
                st = qmm_attention(ctx, &a);
            } else {
                st = run_target(ctx, t[e], a);
            }
            TU_CHECK(st == QMM_OK, "keys + %g: %s", offs[o], qmm_last_error());
            err[o] = 0;
            for (int i = 0; i < 2 * S * D; i++) err[o] = fmax(err[o], fabs((double)out[i] - ref[i]) / vmax);
            if (!(err[o] <= err[o])) err[o] = INFINITY;
            if (t[e] >= 0 && t[e] != QMM_ENGINE_REF) {
                acase c = {.B = 1, .H = 2, .Hkv = 1, .S = S, .Skv = SKV, .D = D, .qt = QMM_F32, .kvt = QMM_F32, .ot = QMM_F32};
                abuf b = {.q = q, .k = k, .v = v, .a = a};
                if (int8_engine(t[e])) b.a.mode = QMM_ATTN_INT8;
                compare(as_engine(t[e]), t[e], &c, &b, ref);
            }
        }
        const char *name = t[e] == -1 ? "dispatch, mode best" : t[e] == -2 ? "dispatch, mode f32" : target_name(t[e]);
        tu_note("%s: keys + 0 / + 200 / + 1000: max|out - ref| / max|v| = %.2e / %.2e / %.2e", name, err[0], err[1], err[2]);
        const int shifts = bf16_operands(as_engine(t[e])) || int8_engine(t[e]);
        if (shifts)
            for (int o = 1; o < 3; o++)
                TU_CHECK(err[o] <= 2 * err[0], "%s: keys + %g: error %.3g > 2 × %.3g (without the offset)", name, offs[o],
                         err[o], err[0]);
    }
    free(q); free(k0); free(k); free(v); free(out); free(ref);
}

/* Keys a mask excludes from every row (key padding, as text encoders pad their prompts): no
 * output may depend on their k or v (SPEC §10). Per mask — bool broadcast over the queries, bool
 * per head and row with scattered masked entries besides the padding, additive f32 and bf16
 * −inf broadcast — and per engine in its mode, dispatch's mode best and mode f32: the output
 * with the padded keys' k × 10^4 and v × 100 is bit for bit the output with them as drawn,
 * which is within the sweep's bound of the reference. */
static void masked_keys(qmm_context *ctx) {
    enum { S = 64, SKV = 200, D = 64 };
    float *q = malloc(2 * S * D * 4), *k0 = malloc(SKV * D * 4), *v0 = malloc(SKV * D * 4), *k = malloc(SKV * D * 4),
          *v = malloc(SKV * D * 4), *out0 = malloc(2 * S * D * 4), *out = malloc(2 * S * D * 4),
          *ref = malloc(2 * S * D * 4);
    uint8_t *bmask = malloc(2 * S * SKV);
    float *fmask = malloc(SKV * 4);
    uint16_t *hmask = malloc(SKV * 2);
    tu_fill_float(q, QMM_F32, 2 * S * D, 1.0f);
    tu_fill_float(k0, QMM_F32, SKV * D, 1.0f);
    tu_fill_float(v0, QMM_F32, SKV * D, 1.0f);
    int pad[SKV];
    for (int j = 0; j < SKV; j++) pad[j] = j >= 150 || j == 17 || j == 64; /* the padding */
    int t[NT_MAX];
    int nt = targets(t);
    t[nt++] = -1; /* dispatch, mode best */
    t[nt++] = -2; /* dispatch, mode f32 */
    for (int mk = 0; mk < 4; mk++) {
        qmm_attention_args a = qmm_attention_args_default();
        a.B = 1; a.H = 2; a.Hkv = 1; a.S = S; a.Skv = SKV; a.D = D;
        a.q = q; a.k = k; a.v = v;
        a.q_stride[2] = D; a.q_stride[1] = S * D; a.q_stride[0] = 2 * S * D;
        memcpy(a.out_stride, a.q_stride, sizeof a.q_stride);
        a.k_stride[2] = a.v_stride[2] = D; a.k_stride[1] = a.v_stride[1] = a.k_stride[0] = a.v_stride[0] = SKV * D;
        a.mask_stride[3] = 1;
        if (mk <= 1) { /* bool: 0 broadcast over the queries; 1 per head and row, a fifth more masked */
            for (int i = 0; i < 2 * S * SKV; i++) bmask[i] = !pad[i % SKV] && (mk == 0 || tu_rand_int(0, 4) != 0);
            a.mask = bmask; a.mask_dtype = QMM_U8;
            if (mk == 1) { a.mask_stride[2] = SKV; a.mask_stride[1] = S * SKV; }
        } else if (mk == 2) {
            for (int j = 0; j < SKV; j++) fmask[j] = pad[j] ? -INFINITY : 0.1f * (float)(j % 7);
            a.mask = fmask; a.mask_dtype = QMM_F32;
        } else {
            for (int j = 0; j < SKV; j++) hmask[j] = pad[j] ? 0xff80u : qmm_f32_to_bf16(-0.25f * (float)(j % 5));
            a.mask = hmask; a.mask_dtype = QMM_BF16;
        }
        memcpy(k, k0, SKV * D * 4);
        memcpy(v, v0, SKV * D * 4);
        qmm_attention_args ra = a;
        ra.out = ref; ra.engine = QMM_ENGINE_REF;
        TU_CHECK_OK(qmm_attention(ctx, &ra));
        for (int e = 0; e < nt; e++) {
            if (t[e] == QMM_ENGINE_REF) continue;
            const char *name = t[e] == -1 ? "dispatch, mode best" : t[e] == -2 ? "dispatch, mode f32" : target_name(t[e]);
            double err[2] = {0, 0};
            for (int big = 0; big < 2; big++) {
                for (int i = 0; i < SKV * D; i++) {
                    k[i] = big && pad[i / D] ? k0[i] * 1e4f : k0[i];
                    v[i] = big && pad[i / D] ? v0[i] * 100.0f : v0[i];
                }
                qmm_attention_args b = a;
                b.out = big ? out : out0;
                qmm_status st;
                if (t[e] < 0) {
                    b.mode = t[e] == -1 ? QMM_ATTN_BEST : QMM_ATTN_F32;
                    st = qmm_attention(ctx, &b);
                } else {
                    st = run_target(ctx, t[e], b);
                }
                TU_CHECK(st == QMM_OK, "%s, mask %d: %s", name, mk, qmm_last_error());
                double vmax = 0;
                for (int i = 0; i < SKV * D; i++) if (!pad[i / D]) vmax = fmax(vmax, fabs(v0[i]));
                for (int i = 0; i < 2 * S * D; i++) err[big] = fmax(err[big], fabs((double)((const float *)b.out)[i] - ref[i]) / vmax);
                if (!big && t[e] >= 0) {
                    acase c = {.B = 1, .H = 2, .Hkv = 1, .S = S, .Skv = SKV, .D = D, .qt = QMM_F32, .kvt = QMM_F32,
                               .ot = QMM_F32, .mask = mk <= 1 ? 1 : 2, .mt = a.mask_dtype, .mq = mk != 1, .mh = mk != 1, .mk = 1};
                    abuf bb = {.q = q, .k = k, .v = v, .mask = (void *)a.mask, .a = b};
                    if (int8_engine(t[e])) bb.a.mode = QMM_ATTN_INT8;
                    compare(as_engine(t[e]), t[e], &c, &bb, ref);
                }
            }
            TU_CHECK(memcmp(out0, out, 2 * S * D * 4) == 0,
                     "%s, mask %d: keys no row attends moved the output (max|out - ref| / max|v| %.2e, as drawn %.2e)",
                     name, mk, err[1], err[0]);
            if (mk == 0) tu_note("%s: key padding × 10^4 (k), × 100 (v): max|out - ref| / max|v| = %.2e / %.2e", name, err[0], err[1]);
        }
    }
    free(q); free(k0); free(v0); free(k); free(v); free(out0); free(out); free(ref); free(bmask); free(fmask); free(hmask);
}

/* bad input: each gets its status and names the argument */
static void expect(qmm_context *ctx, const qmm_attention_args *a, qmm_status want, const char *needle) {
    qmm_status st = qmm_attention(ctx, a);
    TU_CHECK(st == want && strstr(qmm_last_error(), needle), "want %s naming '%s', got %s: %s", qmm_status_name(want),
             needle, qmm_status_name(st), qmm_last_error());
}

static void bad_input(qmm_context *ctx) {
    acase t = {.B = 1, .H = 4, .Hkv = 2, .S = 8, .Skv = 9, .D = 16, .qt = QMM_F32, .kvt = QMM_F32, .ot = QMM_F32,
               .mask = 1, .mt = QMM_U8, .mk = 1};
    abuf b;
    build(&t, &b);
    qmm_attention_args a;
    TU_CHECK(qmm_attention(NULL, &b.a) == QMM_ERR_INVALID_ARGUMENT, "NULL ctx");
    TU_CHECK(qmm_attention(ctx, NULL) == QMM_ERR_INVALID_ARGUMENT, "NULL args");
    a = b.a; a.D = 0; expect(ctx, &a, QMM_ERR_INVALID_ARGUMENT, "D = 0");
    a = b.a; a.S = -3; expect(ctx, &a, QMM_ERR_INVALID_ARGUMENT, "S = -3");
    a = b.a; a.Hkv = 3; expect(ctx, &a, QMM_ERR_INVALID_ARGUMENT, "Hkv");
    a = b.a; a.D = QMM_ATTN_MAX_D + 1; expect(ctx, &a, QMM_ERR_UNSUPPORTED, "D = 257");
    a = b.a; a.q = NULL; expect(ctx, &a, QMM_ERR_INVALID_ARGUMENT, "q is NULL");
    a = b.a; a.v = NULL; expect(ctx, &a, QMM_ERR_INVALID_ARGUMENT, "v is NULL");
    a = b.a; a.out = NULL; expect(ctx, &a, QMM_ERR_INVALID_ARGUMENT, "out is NULL");
    a = b.a; a.q_dtype = QMM_I8; expect(ctx, &a, QMM_ERR_INVALID_ARGUMENT, "q dtype i8");
    a = b.a; a.out_dtype = QMM_I32; expect(ctx, &a, QMM_ERR_INVALID_ARGUMENT, "out dtype i32");
    a = b.a; a.mask_dtype = QMM_I32; expect(ctx, &a, QMM_ERR_INVALID_ARGUMENT, "mask dtype");
    a = b.a; a.k_stride[2] = -16; expect(ctx, &a, QMM_ERR_INVALID_ARGUMENT, "k stride[2]");
    a = b.a; a.mask_stride[0] = -1; expect(ctx, &a, QMM_ERR_INVALID_ARGUMENT, "mask stride[0]");
    a = b.a; a.out_stride[2] = 8; expect(ctx, &a, QMM_ERR_INVALID_ARGUMENT, "out strides");
    a = b.a; a.out_stride[1] = 0; expect(ctx, &a, QMM_ERR_INVALID_ARGUMENT, "out strides");
    a = b.a; a.scale = NAN; expect(ctx, &a, QMM_ERR_INVALID_ARGUMENT, "scale");
    a = b.a; a.scale = INFINITY; expect(ctx, &a, QMM_ERR_INVALID_ARGUMENT, "scale");
    a = b.a; a.mode = (qmm_attn_mode)7; expect(ctx, &a, QMM_ERR_INVALID_ARGUMENT, "mode 7");
    a = b.a; a.engine = (qmm_engine_id)31; expect(ctx, &a, QMM_ERR_INVALID_ARGUMENT, "engine 31");
    a = b.a; a.engine = QMM_ENGINE_AVX2_INT8; expect(ctx, &a, qmm_engine_available(QMM_ENGINE_AVX2_INT8, NULL, 0)
                                                     ? QMM_ERR_UNSUPPORTED : QMM_ERR_UNSUPPORTED_HARDWARE,
                                                     qmm_engine_available(QMM_ENGINE_AVX2_INT8, NULL, 0) ? "offers no attention" : "unavailable");
    for (int e = 0; e < QMM_ENGINE_COUNT; e++)
        if (int8_engine(e) && qmm_engine_available((qmm_engine_id)e, NULL, 0)) {
            a = b.a; a.engine = (qmm_engine_id)e; expect(ctx, &a, QMM_ERR_UNSUPPORTED, "mode int8 only");
        }
    a = b.a; a.q_stride[2] = INT64_MAX / 4; expect(ctx, &a, QMM_ERR_UNSUPPORTED, "q's extent");
    a = b.a; a.out = b.q; expect(ctx, &a, QMM_ERR_INVALID_ARGUMENT, "out overlaps q");
    a = b.a; a.out = (char *)b.k + 4; expect(ctx, &a, QMM_ERR_INVALID_ARGUMENT, "out overlaps k");
    /* the counters count the errors and the calls, under attention; the linear's do not move */
    qmm_counters c0, c1;
    qmm_get_counters(ctx, &c0);
    a = b.a; a.D = 0; (void)qmm_attention(ctx, &a);
    a = b.a; a.engine = QMM_ENGINE_REF; TU_CHECK_OK(qmm_attention(ctx, &a));
    qmm_get_counters(ctx, &c1);
    const qmm_op_counters *n0 = &c0.op[QMM_OP_ATTENTION], *n1 = &c1.op[QMM_OP_ATTENTION];
    TU_CHECK(n1->errors == n0->errors + 1 && n1->calls[QMM_ENGINE_REF] == n0->calls[QMM_ENGINE_REF] + 1,
             "counters: errors %llu -> %llu, ref calls %llu -> %llu", (unsigned long long)n0->errors,
             (unsigned long long)n1->errors, (unsigned long long)n0->calls[QMM_ENGINE_REF],
             (unsigned long long)n1->calls[QMM_ENGINE_REF]);
    TU_CHECK(!memcmp(&c0.op[QMM_OP_LINEAR], &c1.op[QMM_OP_LINEAR], sizeof c0.op[0]),
             "attention calls moved the linear's counters");
    release(&b);
}

static void plan(qmm_context *ctx) {
    qmm_attention_args a = qmm_attention_args_default();
    a.B = 1; a.H = 2; a.Hkv = 1; a.S = 10; a.Skv = 10; a.D = 64;
    qmm_plan_info p;
    TU_CHECK_OK(qmm_attention_plan(ctx, &a, &p));
    TU_CHECK((!qmm_plan_admits(&p, QMM_ENGINE_AVX2_INT8) && strstr(qmm_plan_reason(&p, QMM_ENGINE_AVX2_INT8), "offers no attention")) ||
                 !qmm_engine_available(QMM_ENGINE_AVX2_INT8, NULL, 0),
             "avx2_int8 offers no attention: %s", qmm_plan_reason(&p, QMM_ENGINE_AVX2_INT8));
    TU_CHECK(!qmm_plan_admits(&p, QMM_ENGINE_AVX512_VNNI) && !qmm_plan_admits(&p, QMM_ENGINE_AVX_VNNI),
             "mode best: the int8 engines (int8 QKᵀ) refuse");
    TU_CHECK(p.engine != QMM_ENGINE_REF, "the plan never picks the reference");
    char text[4096];
    qmm_plan_format(&p, text, sizeof text);
    tu_note("attention plan (mode best):\n%s", text);
    /* the rule beside avx512_bf16's kernels: bf16 operands only where VDPBF16PS outruns FMA */
    const int fp16 = (qmm_cpu_features() & QMM_CPU_AVX512_FP16) != 0;
    qmm_engine_id want = QMM_ENGINE_AUTO;
    for (int i = 0; i < g_n_attn && want == QMM_ENGINE_AUTO; i++)
        if (!(fp16 && g_attn[i] == QMM_ENGINE_AVX512_BF16) && !int8_engine(g_attn[i])) want = g_attn[i];
    TU_CHECK(p.engine == want, "plan picks %s, expected %s", qmm_engine_name(p.engine), qmm_engine_name(want));
    a.mode = QMM_ATTN_F32;
    TU_CHECK_OK(qmm_attention_plan(ctx, &a, &p));
    if (qmm_engine_available(QMM_ENGINE_AVX512_BF16, NULL, 0))
        TU_CHECK(!qmm_plan_admits(&p, QMM_ENGINE_AVX512_BF16) && strstr(qmm_plan_reason(&p, QMM_ENGINE_AVX512_BF16), "bf16"),
                 "mode f32: avx512_bf16 refuses (%s)", qmm_plan_reason(&p, QMM_ENGINE_AVX512_BF16));
    TU_CHECK(p.engine == QMM_ENGINE_AUTO || p.engine == QMM_ENGINE_AVX512_F32 || p.engine == QMM_ENGINE_AVX2_F32,
             "mode f32 runs on an f32 engine, not %s", qmm_engine_name(p.engine));
    /* a named engine: its own verdict, as qmm_attention gives it */
    a.mode = QMM_ATTN_BEST;
    a.engine = QMM_ENGINE_REF;
    TU_CHECK_OK(qmm_attention_plan(ctx, &a, &p));
    TU_CHECK(p.engine == QMM_ENGINE_REF && p.status == QMM_OK, "plan of ref by name: %s", qmm_engine_name(p.engine));
    a.engine = QMM_ENGINE_AVX2_INT8;
    TU_CHECK_OK(qmm_attention_plan(ctx, &a, &p));
    TU_CHECK(p.engine == QMM_ENGINE_AUTO && p.status != QMM_OK && strstr(qmm_plan_reason(&p, QMM_ENGINE_AVX2_INT8), "attention"),
             "plan of avx2_int8 by name: %s %s", qmm_status_name(p.status), qmm_plan_reason(&p, QMM_ENGINE_AVX2_INT8));
}

/* mode int8 where no int8 engine admits (avx512_vnni disabled in the context): the best float
 * engine runs it, counted as a fallback; a strict context refuses it naming the reasons */
static void int8_fallback(void) {
    acase t = {.B = 1, .H = 2, .Hkv = 1, .S = 20, .Skv = 30, .D = 64, .qt = QMM_F32, .kvt = QMM_F32, .ot = QMM_F32};
    abuf b;
    build(&t, &b);
    b.a.mode = QMM_ATTN_INT8;
    for (int strict = 0; strict < 2; strict++) {
        qmm_context_options o = qmm_context_options_default();
        o.disabled_engines = 1u << QMM_ENGINE_AVX512_VNNI | 1u << QMM_ENGINE_AVX_VNNI | 1u << QMM_ENGINE_AMX_INT8;
        o.fallback = strict ? QMM_FALLBACK_STRICT : QMM_FALLBACK_ALLOW;
        qmm_context *cx;
        TU_CHECK_OK(qmm_context_create(&o, &cx));
        qmm_counters c0, c1;
        qmm_get_counters(cx, &c0);
        qmm_status st = qmm_attention(cx, &b.a);
        qmm_get_counters(cx, &c1);
        if (strict)
            TU_CHECK(st == QMM_ERR_FALLBACK_REFUSED && strstr(qmm_last_error(), "avx512_vnni"),
                     "strict, mode int8 without an int8 engine: %s: %s", qmm_status_name(st), qmm_last_error());
        else
            TU_CHECK(st == QMM_OK && c1.op[QMM_OP_ATTENTION].fallbacks == c0.op[QMM_OP_ATTENTION].fallbacks + 1 &&
                         c1.op[QMM_OP_LINEAR].fallbacks == c0.op[QMM_OP_LINEAR].fallbacks,
                     "mode int8 without an int8 engine: %s, attention fallbacks %llu",
                     qmm_status_name(st), (unsigned long long)c1.op[QMM_OP_ATTENTION].fallbacks);
        qmm_plan_info p;
        TU_CHECK_OK(qmm_attention_plan(cx, &b.a, &p));
        TU_CHECK(p.is_fallback && p.status == (strict ? QMM_ERR_FALLBACK_REFUSED : QMM_OK),
                 "plan, mode int8 without an int8 engine: fallback %d, %s", p.is_fallback, qmm_status_name(p.status));
        qmm_context_destroy(cx);
    }
    release(&b);
}

int main(int argc, char **argv) {
    tu_init(argc, argv, "test_attention");
    const int quick = getenv("QMM_TEST_QUICK") != NULL;
    qmm_context *ctx, *ctx1;
    TU_CHECK_OK(qmm_context_create(NULL, &ctx));
    qmm_context_options o = qmm_context_options_default();
    o.n_threads = 1;
    TU_CHECK_OK(qmm_context_create(&o, &ctx1));
    qmm_engine_id all[QMM_ENGINE_COUNT];
    const int n = tu_engines(TU_ENGINES_FLOAT, all);
    for (int i = 0; i < n; i++) {
        const qmm_engine *e = qmm_engine_get(all[i]);
        if (i == 0) /* mode int8's engines first */
            for (int e8 = 0; e8 < QMM_ENGINE_COUNT; e8++) {
                char why[QMM_REASON_MAX];
                if (!int8_engine(e8) || !qmm_engine_get((qmm_engine_id)e8)->ops->op[QMM_OP_ATTENTION].desc) continue;
                if (qmm_engine_available((qmm_engine_id)e8, why, sizeof why)) g_attn[g_n_attn++] = (qmm_engine_id)e8;
                else tu_skip(qmm_engine_name((qmm_engine_id)e8), why);
            }
        char why[QMM_REASON_MAX];
        if (!e->ops->op[QMM_OP_ATTENTION].desc) continue;
        if (!qmm_engine_available(all[i], why, sizeof why)) { tu_skip(e->name, why); continue; }
        g_attn[g_n_attn++] = all[i];
    }
    plan(ctx);
    bad_input(ctx);
    int8_fallback();
    huge_kv(ctx);
    nan_rows(ctx);
    hostile_keys(ctx);
    key_offset(ctx);
    masked_keys(ctx);
    sweep(ctx, ctx1, quick ? 40 : 160, quick);
    for (int i = 0; i < g_n_attn; i++)
        tu_note("%s: worst |err| / bound %.3f", qmm_engine_name(g_attn[i]), g_worst[g_attn[i]]);
#ifdef QMM_TEST_AMX_EMU
    if (!qmm_engine_available(QMM_ENGINE_AVX512_F32, NULL, 0)) {
        tu_skip("amx_bf16 attention (emulated)", "its conversions are AVX-512, which this CPU lacks");
    } else {
        tu_note("amx_bf16 (emulated, %ld calls): worst |err| / bound %.3f", g_emu_runs, g_worst[T_AMX_BF16_EMU]);
        TU_CHECK(g_emu_runs > 0, "the emulated amx_bf16 attention never ran");
    }
    if (qmm_engine_available(QMM_ENGINE_AVX512_VNNI, NULL, 0)) {
        tu_note("amx_int8 (emulated, mode int8): %ld calls, avx512_vnni's bits", g_emu_int8_runs);
        TU_CHECK(g_emu_int8_runs > 0, "the emulated amx_int8 attention never ran");
    } else {
        tu_skip("amx_int8 attention (emulated)", "its operands are avx512_vnni's, which this CPU lacks");
    }
#else
    tu_skip("amx_bf16 attention (emulated)", "this build has no emulated AMX objects (tests/amx_emu.cmake)");
#endif
#ifdef QMM_TEST_SIMDE
    for (int e = T_SIMDE_F32; e < T_END; e++) tu_note("%s: worst |err| / bound %.3f", target_name(e), g_worst[e]);
    tu_note("the SIMDe copies: %ld calls in the sweep", g_simde_runs);
    TU_CHECK(g_simde_runs > 0, "the SIMDe copies never ran");
#else
    tu_skip("the AVX-512 and AVX-VNNI attention engines on SIMDe", "this build has no SIMDe objects (libsimde-dev, tests/simde.cmake)");
#endif
    qmm_context_destroy(ctx1);
    qmm_context_destroy(ctx);
    return tu_finish();
}
